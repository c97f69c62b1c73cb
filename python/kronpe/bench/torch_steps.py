"""One Adam training step of a complex-encoding linear model: kronpe.torch against the official
formulation and against the step's matrix products alone (the ``torch`` suite of ``kronpe bench``).

Signal: the astronaut photograph (skimage.data.astronaut, RGB, 512 x 512, values in [0, 1]).

- grid: the 256 x 256 regular subsample (the protocol of Table 1 of "Trading Positional
  Complexity vs. Deepness in Coordinate Networks", Zheng et al., ECCV 2022), K = 256 Gaussians
  per axis (sigma = 0.004, the papers' gradient-descent setting). The model is
  W x_1 Psi_1 x_2 Psi_2.
- grid, dense basis: the same with sigma = 0.2, where no entry of the bases is below the pruning
  threshold (Fourier-like dense bases: what the banded paths cannot shortcut).
- points: 25% of the 512 x 512 pixels at random (the same paper's Table 2), K = 256
  (sigma = 0.005, the official random-points script), blended from a virtual grid of 257 x 257
  nodes.

Methods (CPU, float32): kronpe's ``ComplexEncoding`` through torch.ops.kronpe, backward through the
ops' adjoints, Adam; the official formulation written as the official code writes it (our own code,
not a copy: weights (C, K, K), ``Psi_1 @ W @ Psi_2^T`` per channel; the points by indexing the whole
virtual grid and summing with the blending weights), autograd for the backward; and the four GEMMs
of a step alone, with torch.matmul and with kronpe's compiled chain. Each case gives two groups, each
comparing like with like: ``torch Adam step: <case>`` (kronpe's step against the official step) and
``torch step products: <case>`` (kronpe's chain against torch.matmul). Both formulations use the same
pruned bases and blending matrix, so they compute the same model (benches/bench_torch.py checks
that 200 Adam steps give the same loss).
"""
from __future__ import annotations

from typing import List

import numpy as np
import torch

import kronpe.torch as kt
from kronpe import embedders as E
from kronpe.torch import _cpu
from kronpe.torch.modules import sort_plan

from .harness import Case, Method

K = 256
SIGMA = {"grid": 0.004, "grid, dense basis": 0.2}  # the grid cases' Gaussian widths
LR = 0.1  # the official scripts' Adam learning rate for complex encodings
#: the dense basis sums ~16 000 weights into each pixel: Adam's first steps (each weight moves by
#: about the rate) must be that much smaller
CASE_LR = {"grid, dense basis": 3e-5}

_CACHE: dict = {}


def _image() -> np.ndarray:
    from skimage import data

    return (data.astronaut() / 255.0).astype(np.float32)  # (512, 512, 3) in [0, 1]


def setup_grid(case: str = "grid"):
    if case not in _CACHE:
        img = _image()
        target = torch.from_numpy(np.ascontiguousarray(img[::2, ::2]))  # (256, 256, 3)
        emb = E.Gaussian(K, SIGMA[case])
        enc = kt.ComplexEncoding([emb, emb], 3)
        coords = [torch.arange(256, dtype=torch.float64) / 256] * 2
        bases = [b.contiguous() for b in enc.bases(coords)]  # (256, K) float32, flushed
        _CACHE[case] = dict(target=target, bases=bases, embs=[emb, emb])
    return _CACHE[case]


def setup_case(case: str):
    return setup_points() if case == "points" else setup_grid(case)


def setup_points():
    if "points" not in _CACHE:
        img = _image()
        n = img.shape[0]
        rng = np.random.default_rng(0)
        pick = rng.choice(n * n, size=n * n // 4, replace=False)
        mesh = np.stack(np.meshgrid(np.arange(n) / n, np.arange(n) / n, indexing="ij"), -1).reshape(-1, 2)
        emb = E.Gaussian(K, 0.005)
        enc = kt.ComplexEncoding([emb, emb], 3)  # virtual grid: K + 1 nodes per axis
        # rows in grid order (as fit_points_adam does; the loss does not depend on the order)
        plan, order = sort_plan(enc.plan(torch.from_numpy(mesh[pick])))
        bases = [getattr(enc, f"node_basis_{i}") for i in range(2)]  # float32, pruned
        target = torch.from_numpy(img.reshape(-1, 3)[pick])[order]  # (P, 3)
        _CACHE["points"] = dict(target=target, plan=plan, bases=bases, embs=[emb, emb], grid=enc.grid_coords)
    return _CACHE["points"]


# ---- the models -------------------------------------------------------------------------------------


class OfficialGrid(torch.nn.Module):
    """Psi_1 @ W_c @ Psi_2^T per channel with torch matmuls, flattened to (N^2, C) (Kron_MLP)."""

    def __init__(self, bases, C=3):
        super().__init__()
        self.P1, self.P2 = bases
        self.weight = torch.nn.Parameter(torch.zeros(C, self.P1.shape[1], self.P2.shape[1]))

    def grid(self):
        return (self.P1 @ self.weight @ self.P2.T).flatten(1, 2).transpose(0, 1)  # (N1 N2, C)

    def forward(self):
        return self.grid()


class OfficialPoints(OfficialGrid):
    """The whole virtual grid as above, then indexed and summed (Indexing_Blend_Kron_MLP)."""

    def __init__(self, bases, plan, C=3):
        super().__init__(bases, C)
        self.idx, self.w = plan.indices, plan.weights.float()

    def forward(self):
        return (self.grid()[self.idx] * self.w.unsqueeze(-1)).sum(1)  # (P, C)


class KronpeGrid(torch.nn.Module):
    def __init__(self, embs, bases, C=3):
        super().__init__()
        self.enc = kt.ComplexEncoding(embs, C)
        self.bases = bases

    def forward(self):
        return kt.multi_mode_product(self.enc.weight, self.bases)  # (N1, N2, C)


class KronpePoints(torch.nn.Module):
    def __init__(self, embs, grid, plan, C=3):
        super().__init__()
        self.enc = kt.ComplexEncoding(embs, C, grid=list(grid))
        self.plan = plan

    def forward(self):
        return self.enc.forward_plan(self.plan)


def make_models(case: str, device: str = "cpu"):
    """{method: (model, target in that model's layout)}, every tensor on ``device``."""
    if case != "points":
        s = setup_grid(case)
        t = s["target"].to(device)
        bases = [b.to(device) for b in s["bases"]]
        return {"kronpe": (KronpeGrid(s["embs"], bases).to(device), t),
                "official": (OfficialGrid(bases).to(device), t.reshape(-1, 3))}
    s = setup_points()
    plan = type(s["plan"])(*(p.to(device) for p in s["plan"]))
    t = s["target"].to(device)
    return {"kronpe": (KronpePoints(s["embs"], s["grid"], plan).to(device), t),
            "official": (OfficialPoints([b.to(device) for b in s["bases"]], plan).to(device), t)}


def stepper(model, target, lr=LR, cuda_graph: bool = False):
    """One Adam step per call (kronpe.torch.train.adam_step, no weight decay), returning the loss;
    with ``cuda_graph`` captured in a CUDA graph after three warm-up calls."""
    from ..torch.train import adam_step

    return adam_step(model.parameters(), model, target, lr=lr, weight_decay=0.0, cuda_graph=cuda_graph)


def products_alone(case: str, backend: str):
    """The GEMMs of one step: V = W x_1 P1 x_2 P2 (forward), dW = G x_1 P1^T x_2 P2^T (backward),
    3 channels: with torch.matmul (channels first, batched, dense) or with kronpe's chain
    (channels last, carried; for these pruned, banded bases the banded chain of
    kronpe.torch._cpu, which multiplies only the bands)."""
    s = setup_case(case)
    P1, P2 = s["bases"]
    if backend == "torch.matmul":
        W = torch.randn(3, P1.shape[1], P2.shape[1])
        G = torch.randn(3, P1.shape[0], P2.shape[0])

        def run():
            return (P1 @ W @ P2.T).permute(1, 2, 0), (P1.T @ G @ P2).permute(1, 2, 0)
    else:
        W = torch.randn(P1.shape[1], P2.shape[1], 3)
        G = torch.randn(P1.shape[0], P2.shape[0], 3)
        P1T, P2T = P1.T.contiguous(), P2.T.contiguous()

        def run():
            return _cpu.multi_mode_product(W, [P1, P2], [0, 1]), _cpu.multi_mode_product(G, [P1T, P2T], [0, 1])
    return run


# ---- benchmarks ---------------------------------------------------------------------------------------


CASES = ["grid", "grid, dense basis", "points"]


def _flops(case: str) -> int:
    """The four GEMMs of a step (two forward, two for dW), 3 channels."""
    P1, P2 = setup_case(case)["bases"]
    return 2 * 2 * 3 * (P1.shape[0] * P1.shape[1] * P2.shape[1] + P1.shape[0] * P2.shape[0] * P2.shape[1])


def _steps(case: str) -> dict:
    """{method: one Adam step}: kronpe's model and the official formulation."""
    return {f"{name} Adam step": stepper(m, t, CASE_LR.get(case, LR)) for name, (m, t) in make_models(case).items()}


def _products(case: str) -> dict:
    """{method: the step's four GEMMs}: by kronpe's chain and by torch.matmul."""
    return {f"products alone, {b}": products_alone(case, b) for b in ("kronpe chain", "torch.matmul")}


#: The groups of each case, each comparing like with like: (title, (kronpe's method, its peer), the
#: callables of both).
GROUPS = [("torch Adam step", ("kronpe Adam step", "official Adam step"), _steps),
          ("torch step products", ("products alone, kronpe chain", "products alone, torch.matmul"), _products)]


def _check(s, method, result):
    if method.endswith("Adam step"):
        loss = float(result.detach())
        assert np.isfinite(loss), f"loss {loss}"
        return {"loss": loss}
    return None


def cases() -> List[Case]:
    out = []
    for case in CASES:
        for title, (mine, peer), build in GROUPS:
            def setup(case=case, build=build):
                return dict(fns=build(case), flops=_flops(case))

            ms = [Method(mine, lambda s, n=mine: s["fns"][n](), peer=False),
                  Method(peer, lambda s, n=peer: s["fns"][n]())]
            out.append(Case("torch", f"{title}: {case}", setup, ms, _check, rounds=20, quick=case == "grid",
                            size=float(512 * 512 // 4 if case == "points" else 256 * 256), params=dict(case=case)))
    return out
