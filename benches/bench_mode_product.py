"""Mode-n product chains: kronpe.multi_mode_product against the ways a user would write them.

Every case maps a float32 tensor of shape (n,) * D through one matrix per axis, A_k of shape
(m, n) (square chains n -> n, as in a fit's projections, and n -> 2n, as in predicting a
twice-as-fine grid). Peers: numpy.einsum(optimize=True), a tensordot chain, tensorly's
multi_mode_dot and pyfastkron's gemkm (skipped when it does not import). The raw BLAS rate of the
machine (a float32 square matmul) is measured in the same run, so report.py can state each
method's GFLOP/s as a fraction of it.
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import assert_close, cheapest_chain_flops, run_timed

# (D, n, m, rounds): sizes chosen to keep the whole file to a few minutes on 2 cores
CASES = [
    (2, 256, 256, 20),
    (2, 512, 512, 10),
    (2, 256, 512, 10),
    (3, 64, 64, 20),
    (3, 128, 128, 5),
    (3, 64, 128, 5),
    (3, 256, 256, 3),
    (4, 64, 64, 3),
]

BLAS_N = 3072  # side of the square float32 matmul that measures the BLAS rate


# ---- the peers ------------------------------------------------------------------------------------


def kronpe_chain(T, mats, _f):
    import kronpe

    return kronpe.multi_mode_product(T, mats)


def einsum_chain(T, mats, _f):
    d = len(mats)
    operands = [T, list(range(d))]
    for k, A in enumerate(mats):
        operands += [A, [d + k, k]]
    return np.einsum(*operands, list(range(d, 2 * d)), optimize=True)


def tensordot_chain(T, mats, _f):
    # contract the leading axis each time; the new axis goes last, so after D steps the axes are
    # back in order and the result is contiguous
    for A in mats:
        T = np.tensordot(T, A, axes=([0], [1]))
    return T


def tensorly_chain(T, mats, _f):
    import tensorly as tl

    return tl.tenalg.multi_mode_dot(T, mats)


def pyfastkron_chain(T, mats, factors):
    from pyfastkron import fastkronnumpy

    # row-major vec(T x_1 A_1 ... x_D A_D) = vec(T) (A_1^T kron ... kron A_D^T)
    out = fastkronnumpy.gemkm(T.reshape(1, -1), factors)
    return out.reshape(tuple(A.shape[0] for A in mats))


def _have_pyfastkron() -> bool:
    try:
        from pyfastkron import fastkronnumpy  # noqa: F401
    except Exception:  # any import failure (missing, wrong CPU, missing libs) skips the peer
        return False
    return True


METHODS = {
    "kronpe": kronpe_chain,
    "numpy.einsum": einsum_chain,
    "tensordot chain": tensordot_chain,
    "tensorly.multi_mode_dot": tensorly_chain,
    "pyfastkron.gemkm": pyfastkron_chain,
}

_REFERENCE: dict = {}


def _case(D, n, m, rng_seed=7):
    """Inputs (float32) and the float64 reference of one case, built once per session."""
    key = (D, n, m)
    if key not in _REFERENCE:
        rng = np.random.default_rng(rng_seed + D * 1000 + n + m)
        T = rng.standard_normal((n,) * D, dtype=np.float32)
        mats = [rng.standard_normal((m, n), dtype=np.float32) * np.float32(n**-0.5) for _ in range(D)]
        ref = einsum_chain(T.astype(np.float64), [A.astype(np.float64) for A in mats], None)
        _REFERENCE[key] = (T, mats, [np.ascontiguousarray(A.T) for A in mats], ref)
    return _REFERENCE[key]


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("D, n, m, rounds", CASES, ids=[f"D{d}-{n}to{m}" for d, n, m, _ in CASES])
def test_mode_chain(benchmark, method, D, n, m, rounds):
    if method == "pyfastkron.gemkm" and not _have_pyfastkron():
        pytest.skip("pyfastkron does not import here")
    T, mats, factors, ref = _case(D, n, m)
    fn = METHODS[method]
    benchmark.group = f"mode chain D={D} {n}->{m}"
    benchmark.extra_info.update(
        method=method, D=D, n=n, m=m, dtype="float32",
        flops=cheapest_chain_flops((n,) * D, (m,) * D),
    )
    out = run_timed(benchmark, fn, rounds, T, mats, factors)
    assert np.asarray(out).dtype == np.float32
    assert_close(out, ref, 2e-5 * np.sqrt(n), f"{method} D={D} {n}->{m}")


def test_blas_rate(benchmark):
    """The machine's float32 matrix-product rate: numpy matmul of two BLAS_N x BLAS_N matrices."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((BLAS_N, BLAS_N), dtype=np.float32)
    b = rng.standard_normal((BLAS_N, BLAS_N), dtype=np.float32)
    benchmark.group = "BLAS rate"
    benchmark.extra_info.update(method="numpy.matmul float32", n=BLAS_N, flops=2 * BLAS_N**3, blas_rate=True)
    c = run_timed(benchmark, np.matmul, 5, a, b)
    # spot-check a few entries in float64
    rows = np.arange(0, BLAS_N, 511)
    want = a[rows].astype(np.float64) @ b[:, rows].astype(np.float64)
    assert_close(c[np.ix_(rows, rows)], want, 1e-4, "BLAS matmul")
