"""Penalised fits: ``(A^T A + lambda R) w = A^T y`` by preconditioned CG (docs/math/penalties.rst).

R is a ``DifferencePenalty`` (or the identity, for the ridge fits, which have their closed
forms in :mod:`.grid_plan` and :mod:`.points`). A is one of

- a full grid: ``A = Phi_1 (x) ... (x) Phi_D``, so ``A^T A w = W x_i G_i`` (G_i = Phi_i^T Phi_i);
- a grid with holes: ``A = M (Phi_1 (x) ... (x) Phi_D)`` with M the observed samples (``mask``);
- scattered points: ``A = B (Psi_1(g_1) (x) ... (x) Psi_D(g_D))``, B the blending matrix; with
  no embedders (``psis=None``) the weights are the model's values on the grid nodes (A = B).

Decisions (documented once, here):

- **Unknowns** are the weights W in K-space (no SVD basis: R is not diagonal there). Every
  product is a mode-product chain (``kronpe.multi_mode_product``), a mask, a blend; an axis whose
  embedding matrix is a selection of consecutive weights (one 1 per row: Triangle/Impulse centres
  on the samples, with or without a margin) is sliced and zero-padded instead of multiplied.
- **Vectors and products** are float64 (the float32 signals' weights are rounded once at the end).
- **Preconditioner**: ``krylov.SeparablePreconditioner`` of rho (x)_i G_i + lambda R, with
  rho = (number of samples) / (number of grid samples) on grids, ||B 1||^2 / prod(M_i) at
  scattered points (the mean sampling density); the DCT form when every axis is a selection or
  an identity.
- **Start**: zero, or a given start (the lambda sweeps warm-start every solve from the last).
- **Choosing lambda** (``ridge="gcv"``/``"auto"``/None): GCV has no closed form here, so lambda
  is chosen on held-out samples as in :mod:`.points`: 10% of the samples (seed 0) held out,
  lambda = scale * 10^-k for k = 0..8, scale = rho * prod_i (trace(G_i) / K_i) (the data term's
  mean diagonal), largest first, stopping once the held-out error rose twice, then one
  parabolic step (``krylov.sweep_ridges``); solves at tolerance max(tol, 1e-4); the final fit
  uses every sample. Fewer than 40 samples: lambda = 1e-6 * scale.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..ops import multi_mode_product
from .krylov import SeparablePreconditioner, cdot, pcg, sweep_ridges
from ..operators.penalty import DifferencePenalty

Array = np.ndarray
HOLDOUT_FRACTION = 0.1
HOLDOUT_SEED = 0
AUTO_EXPONENTS = tuple(range(0, 9))
AUTO_MIN_SAMPLES = 40
AUTO_DEFAULT_EXPONENT = 6
SWEEP_TOL = 1e-4


def selection_offset(phi: Optional[Array]) -> Optional[int]:
    """o when phi (N, K) is [0 | I_N | 0] with I_N starting at column o (None: the identity)."""
    if phi is None:
        return 0
    N, K = phi.shape
    if N > K:
        return None
    cols = np.argmax(phi, axis=1)
    o = int(cols[0])
    if o + N > K or not np.array_equal(cols, np.arange(o, o + N)):
        return None
    ref = np.zeros_like(phi)
    ref[np.arange(N), cols] = 1.0
    return o if np.array_equal(phi, ref) else None


class _Embedding:
    """W (K..., C) -> W x_i Phi_i (N..., C) and its adjoint, slicing selection axes."""

    def __init__(self, phis: Sequence[Optional[Array]], Ks: Sequence[int]):
        self.Ks = tuple(int(k) for k in Ks)
        self.offsets = [selection_offset(p) for p in phis]
        self.Ns = tuple(k if p is None else p.shape[0] for p, k in zip(phis, self.Ks))
        self.selection = all(o is not None for o in self.offsets)
        self.phis = [None if p is None else np.asarray(p, np.float64) for p in phis]
        self.grams = None if self.selection else [
            np.eye(k) if p is None else p.T @ p for p, k in zip(self.phis, self.Ks)]

    def _slices(self) -> Tuple[slice, ...]:
        return tuple(slice(o, o + n) for o, n in zip(self.offsets, self.Ns))

    def _chain(self, T: Array, transpose: bool) -> Array:
        modes = [i for i, p in enumerate(self.phis) if p is not None]
        if not modes:
            return T
        return multi_mode_product(T, [self.phis[i].T if transpose else self.phis[i] for i in modes], modes)

    def forward(self, W: Array) -> Array:
        if self.selection:
            return W[self._slices()]
        return self._chain(W, False)

    def adjoint(self, V: Array) -> Array:
        if self.selection:
            out = np.zeros(self.Ks + V.shape[len(self.Ks):])
            out[self._slices()] = V
            return out
        return self._chain(V, True)


class GridSystem:
    """Samples of a grid (N_1..N_D), all of them or those where ``mask`` is True."""

    def __init__(self, phis: Sequence[Optional[Array]], Ks: Sequence[int], mask: Optional[Array] = None):
        self.emb = _Embedding(phis, Ks)
        self.mask = mask
        self.n = int(np.prod(self.emb.Ns)) if mask is None else int(mask.sum())
        self.rho = self.n / float(np.prod(self.emb.Ks))

    @property
    def Ks(self) -> Tuple[int, ...]:
        return self.emb.Ks

    @property
    def grams(self) -> Optional[List[Array]]:
        return self.emb.grams

    def samples(self, S: Array) -> Array:
        """The observed values (n, C) of a grid signal (N..., C)."""
        return S.reshape(-1, S.shape[-1]) if self.mask is None else S[self.mask]

    def forward(self, W: Array) -> Array:  # (K..., C) -> (n, C)
        return self.samples(self.emb.forward(W))

    def adjoint(self, r: Array) -> Array:  # (n, C) -> (K..., C)
        if self.mask is None:
            return self.emb.adjoint(r.reshape(self.emb.Ns + (r.shape[-1],)))
        V = np.zeros(self.emb.Ns + (r.shape[-1],))
        V[self.mask] = r
        return self.emb.adjoint(V)

    def normal(self, W: Array) -> Array:
        if self.mask is None and not self.emb.selection:  # W x_i G_i, in K-space
            return multi_mode_product(W, self.emb.grams)
        return self.adjoint(self.forward(W))

    def take(self, rows: Array) -> "GridSystem":
        """The system of the samples ``rows`` (indices into the observed samples, in order)."""
        flat = np.flatnonzero(np.ones(self.emb.Ns, bool) if self.mask is None else self.mask)
        mask = np.zeros(int(np.prod(self.emb.Ns)), bool)
        mask[flat[rows]] = True
        new = object.__new__(GridSystem)
        new.emb, new.mask = self.emb, mask.reshape(self.emb.Ns)
        new.n = int(mask.sum())
        new.rho = new.n / float(np.prod(self.emb.Ks))
        return new


class PointSystem:
    """Scattered samples: a blending matrix B on a virtual grid and per-axis Psi_i(g_i) (or None)."""

    def __init__(self, B, psis: Optional[Sequence[Array]]):
        self.B = B
        self.psis = None if psis is None else [np.asarray(p, np.float64) for p in psis]
        self.n = B.shape[0]
        self._Ks = B.grid_shape if psis is None else tuple(p.shape[1] for p in self.psis)
        ones = B.matvec(np.ones(B.grid_size))
        self.rho = float(ones @ ones) / B.grid_size

    @property
    def Ks(self) -> Tuple[int, ...]:
        return self._Ks

    @property
    def grams(self) -> Optional[List[Array]]:
        return None if self.psis is None else [p.T @ p for p in self.psis]

    def forward(self, W: Array) -> Array:
        V = W if self.psis is None else multi_mode_product(W, self.psis)
        return self.B.matvec(V.reshape(self.B.grid_size, -1))

    def adjoint(self, r: Array) -> Array:
        g = self.B.rmatvec(r).reshape(self.B.grid_shape + (r.shape[-1],))
        return g if self.psis is None else multi_mode_product(g, [p.T for p in self.psis])

    def normal(self, W: Array) -> Array:
        return self.adjoint(self.forward(W))

    def take(self, rows: Array) -> "PointSystem":
        new = object.__new__(PointSystem)
        new.B, new.psis, new._Ks = self.B.take(rows), self.psis, self._Ks
        new.n = new.B.shape[0]
        new.rho = self.rho * new.n / max(self.n, 1)
        return new


def data_scale(system) -> float:
    """rho * prod_i (trace(G_i) / K_i): the data term's mean diagonal."""
    grams = system.grams
    g = 1.0 if grams is None else float(np.prod([np.trace(G) / G.shape[0] for G in grams]))
    return system.rho * g


def solve(system, penalty: DifferencePenalty, lam: float, rhs: Array, x0: Optional[Array], tol: float,
          maxiter: int) -> Tuple[Array, int, Array]:
    """PCG on (A^T A + lam R) w = rhs (module docstring). Returns (w, iterations, residuals)."""
    D = len(system.Ks)
    M = SeparablePreconditioner(system.grams, system.rho, lam, penalty, system.Ks)
    return pcg(lambda w: system.normal(w) + lam * penalty.apply(w, D), M, rhs, x0, tol, maxiter)


def choose_ridge(system, y: Array, penalty: DifferencePenalty, tol: float, maxiter: int
                 ) -> Tuple[float, Dict[str, Any]]:
    """Held-out choice of lambda (module docstring) for samples y (n, C)."""
    scale = data_scale(system)
    n = system.n
    if n < AUTO_MIN_SAMPLES:
        return scale * 10.0 ** (-AUTO_DEFAULT_EXPONENT), {}
    order = np.random.default_rng(HOLDOUT_SEED).permutation(n)
    n_hold = max(1, int(round(HOLDOUT_FRACTION * n)))
    hold, train = np.sort(order[:n_hold]), np.sort(order[n_hold:])
    tr, ho = system.take(train), system.take(hold)
    rhs = tr.adjoint(np.ascontiguousarray(y[train]))
    y_ho = y[hold]
    ctol = max(tol, SWEEP_TOL)

    def error(w):
        return float(np.mean((ho.forward(w) - y_ho) ** 2))

    best, lams, errs, _ = sweep_ridges(lambda lam, x: solve(tr, penalty, lam, rhs, x, ctol, maxiter)[0], error,
                                    [scale * 10.0 ** (-k) for k in AUTO_EXPONENTS], 10.0)
    return best, {"ridge_candidates": lams, "holdout_errors": errs}


def fit(system, y: Array, penalty: DifferencePenalty, ridge: Optional[float], tol: float,
        maxiter: Optional[int]) -> Tuple[Array, float, Dict[str, Any]]:
    """The penalised fit of samples y (n, C): (W (K..., C) float64, lambda, info)."""
    y = np.asarray(y, dtype=np.float64)
    if maxiter is None:
        maxiter = max(500, 10 * sum(system.Ks))
    info: Dict[str, Any] = {}
    if ridge is None:
        lam, extra = choose_ridge(system, y, penalty, tol, maxiter)
        info.update(extra)
    else:
        lam = float(ridge)
    rhs = system.adjoint(y)
    W, it, rel = solve(system, penalty, lam, rhs, None, tol, maxiter)
    res = rhs - system.normal(W) - lam * penalty.apply(W, len(system.Ks))
    bn = np.sqrt(cdot(rhs, rhs))
    true_rel = np.sqrt(cdot(res, res)) / np.where(bn > 0, bn, 1.0)
    yn = float(np.linalg.norm(y))
    info.update(data_residual=float(np.linalg.norm(system.forward(W) - y) / yn) if yn > 0 else 0.0)
    info.update(iterations=int(it), residual=float(true_rel.max()) if true_rel.size else 0.0,
                converged=bool(np.all(rel <= tol)), tol=tol, maxiter=maxiter, rho=system.rho,
                penalty=repr(penalty))
    return W, lam, info
