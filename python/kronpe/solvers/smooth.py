"""The default fits of grids with holes and of scattered samples (MATH.md 3.6): a smoothness
penalty on the model's values at grid resolution, solved by DCT-preconditioned CG.

Used by ``fit_grid(signal, mask=)`` and ``fit_points(points, values)`` when neither embedders
nor a penalty is given. Decisions (documented once, here):

- **Model.** The unknowns are the model's values on a grid (the identity embedding: on a grid
  with holes, ``Triangle(N_i)`` at the default coordinates, whose matrix at the samples is the
  identity; at scattered points, the virtual grid's values blended multilinearly). The data term
  is then ``w^T (B^T B) w``, a diagonal (the mask, or points on the nodes) or a sparse matrix
  with 3^D bands, applied in one product.
- **Penalty**: the thin-plate form ``DifferencePenalty(2, mixed=True)``. Measured on
  astronaut 512^2 RGB with 25% random pixels (PSNR on the other 75%, best lambda of each):
  second differences along the axes 26.53 dB, thin-plate 26.91 dB.
- **Grid for scattered points** (``lattice_grid``): when every axis's coordinates are multiples of
  one spacing h (pixels, voxels), the nodes are that lattice over [0, 1] (every point on a node:
  B^T B is diagonal); otherwise nodes at half the mean sample spacing (about 2^D nodes per
  sample).
- **Preconditioner**: ``(rho I + lambda R)^-1`` in the orthonormal DCT-II basis (exact for
  reflective first differences, Garcia's smoothn for the others), rho the mean of B^T B's
  diagonal (the sampling density).
- **Start**: the normalised convolution, Gaussian blur (sigma = 1 node) of B^T y divided by the
  blur of B^T 1 (where that is tiny, the data's mean).
- **Channels** are solved one after the other (contiguous FFTs and differences: twice as fast
  as channels-last arrays), all with the one lambda chosen on the first channels' sum of errors.
- **Precision**: float32 vectors and products (the photographs' 8 bits need no more), float64
  preconditioner spectrum.
- **Stopping**: relative residual of the normal equations 1e-4 (on astronaut the held-out PSNR
  moves by < 0.01 dB beyond it).
- **Choosing lambda** (``ridge=None``): the held-out sweep of :mod:`.penalised` (10% held out,
  largest lambda first, warm starts) on the central window of at most 96 nodes per axis, lambda
  = rho * 10^-k for k = 1..6; the window's problem has the same local balance between data and
  penalty as the whole, so its best lambda serves the whole grid; the sweep costs a fraction of
  one full solve. The final solve on the whole grid is started from the normalised convolution.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .krylov import SeparablePreconditioner, pcg, sweep_ridges
from .penalty import DifferencePenalty

Array = np.ndarray
PENALTY = DifferencePenalty(2, mixed=True)
TOL = 1e-4
WINDOW = 96
EXPONENTS = (0, 1, 2)
HOLDOUT_FRACTION = 0.1
HOLDOUT_SEED = 0
START_SIGMA = 1.0
LATTICE_RTOL = 1e-6


class DataTerm:
    """B^T B on the grid (N..., C): a diagonal ``diag`` (N...) or a sparse (G, G) matrix."""

    def __init__(self, shape: Sequence[int], diag: Optional[Array] = None, sparse=None):
        self.shape = tuple(shape)
        self.diag = None if diag is None else np.asarray(diag, np.float32)
        self.sparse = sparse
        d = self.diag if sparse is None else sparse.diagonal().reshape(self.shape)
        self.rho = float(np.mean(d))

    def __call__(self, W: Array) -> Array:
        if self.sparse is None:
            return self.diag[(...,) + (None,) * (W.ndim - self.diag.ndim)] * W
        flat = W.reshape(self.sparse.shape[0], -1)
        return np.asarray(self.sparse @ flat, W.dtype).reshape(W.shape)


def lattice_grid(points: Array) -> Optional[List[Array]]:
    """Per-axis nodes k h over [0, 1] when every axis's coordinates are multiples of one h with
    1 / h an integer (module docstring), else None."""
    nodes = []
    for x in points.T:
        u = np.unique(x)
        if u.size < 2:
            return None
        h = float(np.min(np.diff(u)))
        n = 1.0 / h
        if abs(n - round(n)) > LATTICE_RTOL * n or not np.allclose(u / h, np.round(u / h), atol=1e-6, rtol=0):
            return None
        nodes.append(np.arange(int(round(n)) + 1) / round(n))
    return nodes


def density_grid(points: Array) -> List[int]:
    """Nodes per axis at half the mean sample spacing (module docstring)."""
    P, D = points.shape
    ext = np.maximum(points.max(axis=0) - points.min(axis=0), 1.0 / max(P, 2))
    h = (float(np.prod(ext)) / P) ** (1.0 / D)
    return [int(min(max(np.ceil(2.0 / h) + 1, 3), 1 << 14)) for _ in range(D)]


def start(data: DataTerm, rhs: Array) -> Array:
    """The normalised convolution of the samples (module docstring)."""
    from scipy.ndimage import gaussian_filter

    D = len(data.shape)
    sig = (START_SIGMA,) * D + (0,) * (rhs.ndim - D)
    ones = data(np.ones(data.shape + (1,), np.float32))[..., 0]
    den = gaussian_filter(ones, START_SIGMA)
    num = gaussian_filter(rhs, sig)
    total = float(ones.sum())
    mean = rhs.reshape(-1, rhs.shape[-1]).sum(axis=0) / max(total, 1e-30)
    tiny = den < 1e-3 * max(float(den.max()), 1e-30)
    x0 = num / np.where(tiny, 1.0, den)[(...,) + (None,) * (rhs.ndim - D)]
    x0[tiny] = mean
    return x0.astype(np.float32)


def solve(data: DataTerm, rhs: Array, lam: float, x0: Optional[Array], tol: float, maxiter: int,
          penalty: DifferencePenalty = PENALTY) -> Tuple[Array, int, Array]:
    D = len(data.shape)
    M = SeparablePreconditioner(None, data.rho, lam, penalty, data.shape)
    return pcg(lambda w: data(w) + np.float32(lam) * penalty.apply(w, D), M, rhs, x0, tol, maxiter)


def _window(shape: Sequence[int]) -> Tuple[slice, ...]:
    return tuple(slice(max((n - WINDOW) // 2, 0), max((n - WINDOW) // 2, 0) + min(n, WINDOW)) for n in shape)


def choose_ridge(data: DataTerm, rhs: Array, maxiter: int) -> Tuple[float, Dict[str, Any]]:
    """lambda by the held-out sweep on the central window (module docstring).

    Needs a diagonal data term (grids with holes, points on a lattice): the held-out samples are
    nodes with data, their values rhs / diag."""
    win = _window(data.shape)
    diag = data.diag[win]
    r = rhs[win]
    obs = np.flatnonzero(diag > 0)
    order = np.random.default_rng(HOLDOUT_SEED).permutation(obs.size)
    hold = obs[order[:max(1, int(round(HOLDOUT_FRACTION * obs.size)))]]
    train = diag.copy().ravel()
    train[hold] = 0.0
    train = train.reshape(diag.shape)
    sub = DataTerm(diag.shape, train)
    r_train = np.where((train > 0)[..., None], r, 0).astype(np.float32)
    y_ho = (r.reshape(-1, r.shape[-1])[hold] / diag.ravel()[hold, None])
    x = start(sub, r_train)

    def error(w):
        return float(np.mean((w.reshape(-1, w.shape[-1])[hold] - y_ho) ** 2))

    def run(lam, w):
        return solve(sub, r_train, lam, x if w is None else w, TOL, maxiter)[0]

    best, lams, errs = sweep_ridges(run, error, [data.rho * 10.0 ** (-k) for k in EXPONENTS], 10.0)
    return best, {"ridge_candidates": lams, "holdout_errors": errs}


def fit(data: DataTerm, rhs: Array, ridge: Optional[float], maxiter: Optional[int] = None
        ) -> Tuple[Array, float, Dict[str, Any]]:
    """The default smooth fit: (grid values (N..., C) float32, lambda, info)."""
    rhs = np.asarray(rhs, np.float32)
    maxiter = 20 * sum(data.shape) if maxiter is None else maxiter
    info: Dict[str, Any] = {}
    if ridge is None:
        if data.diag is None:
            lam = data.rho * 10.0 ** (-3)
        else:
            lam, extra = choose_ridge(data, rhs, maxiter)
            info.update(extra)
    else:
        lam = float(ridge)
    W = np.empty(rhs.shape, np.float32)
    its, rels = [], []
    for c in range(rhs.shape[-1]):  # one channel at a time: contiguous FFTs and differences (2x faster)
        b = np.ascontiguousarray(rhs[..., c:c + 1])
        W[..., c:c + 1], it, rel = solve(data, b, lam, start(data, b), TOL, maxiter)
        its.append(int(it))
        rels.append(float(rel.max()) if rel.size else 0.0)
    info.update(iterations=max(its, default=0), channel_iterations=its, residual=max(rels, default=0.0),
                converged=max(rels, default=0.0) <= TOL, tol=TOL, maxiter=maxiter, rho=data.rho,
                penalty=repr(PENALTY), preconditioner="(rho I + lambda R)^-1 in the DCT-II basis")
    return W, lam, info
