"""Mode-n product chains: kronpe.multi_mode_product against the ways a user would write them.

Every case maps a tensor of shape (n,) * D through one matrix per axis, A_k of shape (m, n)
(square chains n -> n, as in a fit's projections, and n -> 2n, as in predicting a twice-as-fine
grid; powers of two and sizes such as 100 and 300), in float32 (the fits' dtype) and, for a few
sizes, in float64 (NumPy's default dtype, so what a NumPy user's arrays are unless cast).
Peers: numpy.einsum(optimize=True), a NumPy tensordot chain, the same in torch
(``torch.tensordot`` chain and ``torch.einsum``), tensorly's multi_mode_dot and pyfastkron's
gemkm (each skipped when it does not import). Work: the flops of the cheapest contraction order.
"""
from __future__ import annotations

from itertools import permutations
from typing import List, Sequence

import numpy as np

from .harness import Case, Method

# (D, n, m, rounds, quick, dtype)
CASES = [
    (2, 256, 256, 20, True, "float32"),
    (2, 512, 512, 10, False, "float32"),
    (2, 256, 512, 10, False, "float32"),
    (3, 32, 32, 30, True, "float32"),
    (3, 64, 64, 20, True, "float32"),
    (3, 128, 128, 5, False, "float32"),
    (3, 64, 128, 5, False, "float32"),
    (3, 256, 256, 3, False, "float32"),
    (4, 32, 32, 10, False, "float32"),
    (4, 64, 64, 3, False, "float32"),
    # sizes that are no multiple of any kernel's tile, as users' grids are
    (2, 300, 300, 10, False, "float32"),
    (3, 100, 100, 5, False, "float32"),
    (4, 40, 40, 5, False, "float32"),
    # NumPy's default dtype: one case per rank and one odd size
    (2, 256, 256, 10, False, "float64"),
    (2, 512, 512, 5, False, "float64"),
    (3, 64, 64, 10, False, "float64"),
    (3, 128, 128, 5, False, "float64"),
    (3, 100, 100, 5, False, "float64"),
    (4, 32, 32, 10, False, "float64"),
]


def chain_flops(shape: Sequence[int], out_sizes: Sequence[int], order: Sequence[int]) -> int:
    """Multiply-adds x 2 of the mode-n chain that maps axis k from shape[k] to out_sizes[k],
    contracting the axes in ``order`` (trailing axes beyond len(out_sizes) are carried)."""
    cur = list(shape)
    flops = 0
    for k in order:
        rest = int(np.prod(cur)) // cur[k]
        flops += 2 * rest * cur[k] * out_sizes[k]
        cur[k] = out_sizes[k]
    return flops


def cheapest_chain_flops(shape: Sequence[int], out_sizes: Sequence[int]) -> int:
    """The fewest flops over every contraction order of the chain (D <= 4 here: brute force)."""
    d = len(out_sizes)
    return min(chain_flops(shape, out_sizes, order) for order in permutations(range(d)))


# ---- kronpe and the peers: fn(T, mats, factors) ---------------------------------------------------


def kronpe_chain(T, mats, _f):
    import kronpe

    return kronpe.multi_mode_product(T, mats)


def einsum_chain(T, mats, _f):
    d = len(mats)
    operands = [T, list(range(d))]
    for k, A in enumerate(mats):
        operands += [A, [d + k, k]]
    return np.einsum(*operands, list(range(d, 2 * d)), optimize=True)


def tensordot_chain(T, mats, _f, tensordot=np.tensordot):
    # contract the leading axis each time; the new axis goes last, so after D steps the axes are
    # back in order and the result is contiguous
    for A in mats:
        T = tensordot(T, A, ([0], [1]))
    return T


def torch_tensordot_chain(T, mats, _f):
    import torch

    out = tensordot_chain(torch.from_numpy(T), [torch.from_numpy(A) for A in mats], None, torch.tensordot)
    return out.numpy()


def torch_einsum_chain(T, mats, _f):
    import torch

    d = len(mats)
    letters = "abcdefgh"
    spec = letters[:d] + "," + ",".join(letters[d + k] + letters[k] for k in range(d))
    out = torch.einsum(spec + "->" + letters[d:2 * d], torch.from_numpy(T), *[torch.from_numpy(A) for A in mats])
    return out.numpy()


def tensorly_chain(T, mats, _f):
    import tensorly as tl

    return tl.tenalg.multi_mode_dot(T, mats)


def pyfastkron_chain(T, mats, factors):
    from pyfastkron import fastkronnumpy

    # row-major vec(T x_1 A_1 ... x_D A_D) = vec(T) (A_1^T kron ... kron A_D^T)
    out = fastkronnumpy.gemkm(T.reshape(1, -1), factors)
    return out.reshape(tuple(A.shape[0] for A in mats))


#: name -> (fn, peer, modules it needs)
METHODS = {
    "kronpe": (kronpe_chain, False, ()),
    "numpy.einsum": (einsum_chain, True, ()),
    "numpy tensordot chain": (tensordot_chain, True, ()),
    "torch tensordot chain": (torch_tensordot_chain, True, ("torch",)),
    "torch.einsum": (torch_einsum_chain, True, ("torch",)),
    "tensorly.multi_mode_dot": (tensorly_chain, True, ("tensorly",)),
    "pyfastkron.gemkm": (pyfastkron_chain, True, ("pyfastkron.fastkronnumpy",)),
}


def chain_inputs(D: int, n: int, m: int, seed: int = 7, dtype: str = "float32"):
    """(T, mats, factors, reference) of one case: T (n,)*D, mats (m, n), factors = mats^T, all of
    ``dtype``; the reference in float64."""
    rng = np.random.default_rng(seed + D * 1000 + n + m)
    dt = np.dtype(dtype)
    T = rng.standard_normal((n,) * D, dtype=dt)
    mats = [rng.standard_normal((m, n), dtype=dt) * dt.type(n**-0.5) for _ in range(D)]
    ref = einsum_chain(T.astype(np.float64), [A.astype(np.float64) for A in mats], None)
    return T, mats, [np.ascontiguousarray(A.T) for A in mats], ref


def relative_error(got, want) -> float:
    """max |got - want| / max |want| (a relative check that tolerates cancellation)."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        raise AssertionError(f"shape {got.shape} != {want.shape}")
    return float(np.max(np.abs(got - want))) / max(float(np.max(np.abs(want))), 1e-300)


def chain_tolerance(n: int, dtype: str = "float32") -> float:
    return (2e-5 if np.dtype(dtype) == np.float32 else 4e-14) * float(np.sqrt(n))


def group_name(D: int, n: int, m: int, dtype: str = "float32") -> str:
    """The float32 groups carry no dtype in their name (the suite's first and main dtype)."""
    return f"mode chain D={D} {n}->{m}" + ("" if dtype == "float32" else f" {dtype}")


def cases() -> List[Case]:
    out = []
    for D, n, m, rounds, quick, dtype in CASES:
        def setup(D=D, n=n, m=m, dtype=dtype):
            T, mats, factors, ref = chain_inputs(D, n, m, dtype=dtype)
            return dict(T=T, mats=mats, factors=factors, ref=ref,
                        flops=cheapest_chain_flops((n,) * D, (m,) * D), tol=chain_tolerance(n, dtype))

        def check(state, method, out, dtype=dtype):
            assert np.asarray(out).dtype == np.dtype(dtype), f"dtype {np.asarray(out).dtype}, expected {dtype}"
            err = relative_error(out, state["ref"])
            assert err <= state["tol"], f"relative error {err:.3g} > {state['tol']:.3g}"

        methods = [Method(name, (lambda s, f=fn: f(s["T"], s["mats"], s["factors"])), peer, needs)
                   for name, (fn, peer, needs) in METHODS.items()]
        out.append(Case("chains", group_name(D, n, m, dtype), setup, methods, check, rounds=rounds, quick=quick,
                        size=float(n**D), params=dict(D=D, n=n, m=m, dtype=dtype)))
    return out


def cuda_cases() -> List[Case]:
    """The chains on the GPU (torch CUDA tensors): kronpe.multi_mode_product against torch's
    tensordot chain and einsum on the same device, synchronised after each call; none without a
    GPU that torch sees and a kronpe built with CUDA."""
    from .harness import missing_module

    if missing_module(["torch"]):
        return []
    import torch

    import kronpe

    if not (torch.cuda.is_available() and kronpe.cuda.is_available()):
        return []

    def synced(fn):
        def run(s):
            out = fn(s["T"], s["mats"])
            torch.cuda.synchronize()
            return out
        return run

    def kron(T, mats):
        return kronpe.multi_mode_product(T, mats)

    def tdot(T, mats):
        return tensordot_chain(T, mats, None, torch.tensordot)

    def eins(T, mats):
        d = len(mats)
        letters = "abcdefgh"
        spec = letters[:d] + "," + ",".join(letters[d + k] + letters[k] for k in range(d))
        return torch.einsum(spec + "->" + letters[d:2 * d], T, *mats)

    out = []
    for D, n, m, rounds, quick, dtype in CASES:
        if dtype != "float32":  # the GPU's float64 rate is another matter; its chains are float32
            continue

        def setup(D=D, n=n, m=m):
            T, mats, _, ref = chain_inputs(D, n, m)
            return dict(T=torch.from_numpy(T).cuda(), mats=[torch.from_numpy(A).cuda() for A in mats], ref=ref,
                        flops=cheapest_chain_flops((n,) * D, (m,) * D), tol=chain_tolerance(n))

        def check(state, method, out):
            err = relative_error(out.cpu().numpy(), state["ref"])
            assert err <= state["tol"], f"relative error {err:.3g} > {state['tol']:.3g}"

        methods = [Method("kronpe (CUDA)", synced(kron), peer=False),
                   Method("torch tensordot chain (CUDA)", synced(tdot)),
                   Method("torch.einsum (CUDA)", synced(eins))]
        out.append(Case("cuda", "CUDA " + group_name(D, n, m), setup, methods, check, rounds=max(rounds, 10),
                        quick=quick, size=float(n**D), params=dict(D=D, n=n, m=m, dtype="float32", device="cuda")))
    return out
