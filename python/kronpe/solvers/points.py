"""Exact ridge fits of scattered samples with a complex (Kronecker) encoding
(docs/math/scattered.rst).

The model: weights W of shape (K_1, ..., K_D, C); its values on a virtual grid with nodes g_i
are V = W x_1 Psi(g_1) ... x_D Psi(g_D); its value at a point is the blend B V of the 2^D grid
values around it (kronpe.BlendingMatrix). ``fit_points`` returns the exact minimiser of

    ||B vec(W x_i Psi(g_i)) - s||^2 + lambda ||W||^2,

not a gradient-descent approximation. How (decisions documented once, here):

- **Basis.** Each Psi(g_i) = U_i diag(s_i) V_i^T (thin SVD, float64). With W = Z x_i V_i the
  problem becomes one in Z (r_1 x ... x r_D): min ||B vec(Z x_i (U_i diag s_i)) - s||^2 +
  lambda ||Z||^2, the same objective (the V_i have orthonormal columns, and the part of W outside
  their span only adds to the penalty). Singular values below 1e-10 s_max are dropped (as the
  grid fit's pseudo-inverse does; they cannot affect a ridge solution by more than that).
- **Solver.** Conjugate gradients on the normal equations
  (A^T A + lambda I) z = A^T s, A z = B vec(Z x_i U_i S_i): every product is one blend, one
  transpose blend (deterministic, compiled) and two mode-n chains (kronpe.multi_mode_product);
  no Kronecker product and no dense B is ever formed. Channels are solved together, each with
  its own CG scalars; iterations stop when every channel's relative residual of the normal
  equations is at most ``tol``.
- **Precision.** CG vectors are float64. With ``tol >= 1e-4`` the products (mode-n chains and
  blends) run in float32, twice as fast; the residual is then checked in float64 and, if above
  ``tol``, CG goes on with float64 products from where it stopped. ``info["residual"]`` is always
  the float64 residual.
- **Preconditioner.** B^T B is close to rho I with rho = ||B 1||^2 / prod(M_i) the mean sampling
  density on the grid (P / prod(M_i) with normalised weights), so A^T A + lambda I is close to
  diag(rho s^2 + lambda) in the SVD basis (s^2 the outer product of the s_i^2): CG runs
  preconditioned by its inverse, which is exact for uniformly dense samples.
- **Choosing lambda** (``ridge="auto"``): 10% of the points (a fixed seed) are held out; the fit
  on the other 90% is solved for lambda = rho * max(s^2) * 10^-k, k = 1, 2, ... 8 (largest first,
  each solve warm-started from the previous one, at tolerance max(tol, 1e-4)), stopping once the
  held-out error has risen twice in a row; the value with the smallest held-out error is refined
  by one parabolic step in log lambda; the final fit uses all points. With fewer than 40 points,
  lambda = 1e-6 * rho * max(s^2).
- **Choosing embedders** (``embedders=None``; docs/math/encodings.rst, "Borders"): with P points
  filling their bounding box, the mean spacing per axis is h = (prod of extents / P)^(1/D) (times
  the extent ratio); each axis gets a Gaussian with sigma = h, K = ceil(1.5 / h) centres and a
  covering margin of ceil(2 sigma K) centres (two sigmas) beyond each end. The default grid then has
  K + 1 nodes per axis (``linspace(0, 1, K + 1)``); with embedders given, it has K_base + 1 nodes
  per axis.
- **Predictions** go through the same blended model that was fitted: ``predict(points)`` blends
  the virtual-grid values V, ``predict_grid(coords)`` blends them separably along each axis.
"""
from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import _core
from .. import io as _io
from .._adapters import arrays as _arrays, validate as _validate
from ..operators.blending import BlendingMatrix, default_grid, embedder_list, grid_nodes, validate_points
from ..ops import host_chain
from . import penalised, smooth
from .krylov import ConvergenceWarning, cdot, pcg, sweep_ridges
from .lattice import density_grid, lattice_grid, lattice_sums
from .smooth_system import DataTerm

__all__ = ["PointModel", "PointProblem"]

SVD_CUTOFF = 1e-10  # relative singular-value cutoff of the per-axis bases
HOLDOUT_FRACTION = 0.1
HOLDOUT_SEED = 0
AUTO_EXPONENTS = tuple(range(1, 9))  # lambda = rho * max(s^2) * 10^-k
AUTO_MIN_POINTS = 40
AUTO_DEFAULT_EXPONENT = 6
MIXED_PRECISION_TOL = 1e-4  # tol >= this: float32 products (CG vectors stay float64)


def leading_chain(T: np.ndarray, mats: Sequence[np.ndarray]) -> np.ndarray:
    """T x_0 mats[0] x_1 mats[1] ... over the leading modes (trailing axes carried along)."""
    return host_chain(T, mats, tuple(range(len(mats))))


# ---- the problem and the model ------------------------------------------------------------------


@dataclass
class PointProblem:
    """A checked ``fit_points`` call: host points (P, D) and values (P, *channels), the options."""

    points: np.ndarray
    values: np.ndarray
    channels: Tuple[int, ...]
    embedders: Any = None
    grid: Any = None
    ridge: Optional[float] = None  # None: held out ("auto")
    penalty: Any = None
    tol: float = 1e-6
    maxiter: Optional[int] = None
    normalize: bool = True
    outside: str = "error"
    threads: Optional[int] = None
    device: Optional[int] = None  # the CUDA device of the points, where the solver can use it
    t0: float = 0.0
    raw_points: Any = None  # the points as given (the spline solver takes any units)
    raw_values: Any = None
    _lattice: Any = field(default=None, repr=False)
    _lattice_known: bool = field(default=False, repr=False)

    @property
    def ndim(self) -> int:
        return self.points.shape[1]

    @property
    def defaults(self) -> bool:
        """No embedders, grid, penalty or ridge given: kronpe chooses the model."""
        return self.embedders is None and self.grid is None and self.penalty is None and self.ridge is None

    @property
    def lattice(self) -> Optional[List[np.ndarray]]:
        """The lattice the points lie on (the nodes per axis), or None."""
        if not self._lattice_known:
            self._lattice = lattice_grid(self.points.astype(np.float64))
            self._lattice_known = True
        return self._lattice


@_io.model_kind("points")
@dataclass
class PointModel:
    """A complex encoding fitted to scattered samples by ``fit_points``.

    Attributes
    ----------
    weights : array (K_1, ..., K_D, *channels)
    embedders : tuple of D embedders, or of D Nones (the default model: weights on the grid nodes,
        blended multilinearly)
    grid_coords : tuple of D node arrays of the virtual grid
    ridge : float, the lambda used
    info : dict
        ``iterations``, ``residual`` (relative residual of the normal equations, largest over
        channels), ``converged``, ``data_residual`` (||B V - s|| / ||s|| on the training points),
        ``tol``, ``maxiter``, ``seconds``, ``preconditioner``; with ``ridge="auto"`` also
        ``ridge_candidates`` and ``holdout_errors`` (mean squared error per candidate); the
        default model also ``boundary``, ``boundary_holdout_errors`` (the penalty's boundary, held
        out), ``clipped`` (the fraction of grid values clipped to the samples' range) and, on a 2-D
        lattice at the interpolation limit, ``higher_holdout_errors`` and ``lead_penalty``
        (kronpe.solvers.smooth: the leading component's higher-order penalty).
    normalize : bool, the blending weights' normalisation
    """

    weights: np.ndarray
    embedders: Tuple[Any, ...]
    grid_coords: Tuple[np.ndarray, ...]
    ridge: float
    info: Dict[str, Any] = field(default_factory=dict)
    normalize: bool = True
    _grid_values: Optional[np.ndarray] = field(default=None, repr=False)

    @property
    def ndim(self) -> int:
        return len(self.grid_coords)

    @property
    def channels(self) -> Tuple[int, ...]:
        return self.weights.shape[self.ndim:]

    @property
    def grid_values(self) -> np.ndarray:
        """The model on its virtual grid, V = W x_i Psi(g_i): (M_1, ..., M_D, *channels)."""
        if self._grid_values is None and all(e is None for e in self.embedders):
            self._grid_values = self.weights  # the default model: the weights are the grid's values
        if self._grid_values is None:
            D = self.ndim
            # in C order, so that the chain's plan (and rounding) does not depend on how the
            # weights lie in memory: a saved and loaded model predicts the same bits
            W = np.ascontiguousarray(self.weights.reshape(self.weights.shape[:D] + (-1,)), dtype=np.float64)
            mats = [np.asarray(e(g), dtype=np.float64) for e, g in zip(self.embedders, self.grid_coords)]
            V = leading_chain(W, mats)
            self._grid_values = V.reshape(V.shape[:D] + self.channels).astype(self.weights.dtype)
        return self._grid_values

    def save(self, path) -> None:
        """Write the model to ``path`` (``.npz``, no pickle; ``kronpe.load`` reads it back)."""
        _io.save_model(self, path)

    def predict(self, points, outside: str = "error") -> np.ndarray:
        """Values at points (P, D) in [0, 1]: (P, *channels), through the fitted blend.

        ``outside`` as in BlendingMatrix: "error" or "clamp" for points outside the grid.
        """
        _validate.choice("outside", outside, ("error", "clamp"))
        shape = getattr(points, "shape", None)
        if shape is not None and (len(shape) != 2 or shape[1] != self.ndim):
            raise ValueError(f"points must have shape (P, {self.ndim}) (one column per axis of the model), "
                             f"got {tuple(shape)}")
        if all(e is None for e in self.embedders):  # multilinear hats: a point on a node is its value
            flat = _node_indices(points, self.grid_coords)
            if flat is not None:
                V = self.grid_values.reshape((-1,) + self.channels)
                return np.take(V, flat, axis=0)
        B = BlendingMatrix(points, list(self.grid_coords), list(self.embedders), normalize=self.normalize,
                           outside=outside)
        V = self.grid_values.reshape((B.grid_size, -1))
        if _arrays.is_device(points):  # blend on the points' GPU, return the same kind there
            V = _arrays.device_from_host(V, points)
        P = B.shape[0]
        out = B.matvec(V)
        return out.reshape((P,) + self.channels)

    def predict_grid(self, coords: Sequence) -> np.ndarray:
        """Values on the grid of per-axis coordinates (D 1-D arrays in [0, 1]):
        (N_1, ..., N_D, *channels), blended separably along each axis."""
        coords = _validate.sequence("coords", coords, f"{self.ndim} 1-D arrays of coordinates")
        if len(coords) != self.ndim:
            raise ValueError(f"coords must be a list of {self.ndim} 1-D arrays of coordinates, got {len(coords)}")
        out = self.grid_values
        for i, (c, g, e) in enumerate(zip(coords, self.grid_coords, self.embedders)):
            c = _validate.coords_1d(f"coords[{i}]", c, dtype=np.float64)
            B = BlendingMatrix(c[:, None], [g], [e], normalize=self.normalize, outside="error")
            moved = np.moveaxis(out, i, 0)
            flat = np.ascontiguousarray(moved).reshape(moved.shape[0], -1)
            res = B.matvec(flat).reshape((c.size,) + moved.shape[1:])
            out = np.moveaxis(res, 0, i)
        return np.ascontiguousarray(out)


def _node_indices(points, nodes: Sequence[np.ndarray]) -> Optional[np.ndarray]:
    """The flat (C-order) grid indices of host points (P, D) whose every coordinate is exactly a
    node of its axis, else None (then the blend, which checks the points). At a node the
    multilinear blend's weights are exactly 1 and 0, so the value there is the node's, to the bit:
    predicting the held-out pixels of a lattice fit gathers them (building and applying the
    BlendingMatrix would take 0.33 ms for 12k points; the node test is compiled,
    ``_core.lattice_index``, at a sixth of NumPy's time)."""
    if not isinstance(points, np.ndarray) or points.ndim != 2 or points.shape[1] != len(nodes) \
            or points.dtype not in (np.float32, np.float64) or points.shape[0] == 0:
        return None
    g = [np.ascontiguousarray(n, np.float64) for n in nodes]
    if any(n.size < 2 or not n[-1] > n[0] for n in g):
        return None
    flat = np.empty(points.shape[0], np.int64)
    first = _core.lattice_index(points, [n.size for n in g], [float(n[0]) for n in g],
                                [(n.size - 1) / float(n[-1] - n[0]) for n in g], g, flat)
    return flat if first == points.shape[0] else None


# ---- argument handling -----------------------------------------------------------------------------


def auto_embedders(points: np.ndarray) -> List[Any]:
    """Gaussian embedders for points (P, D) by the rule in the module docstring."""
    from ..embedders import Gaussian

    P, D = points.shape
    if P == 0:
        raise ValueError("points: cannot choose embedders from an empty point set")
    lo, hi = _validate.column_range(points)
    ext = np.maximum(hi - lo, 1.0 / max(P, 2))
    h_mean = (float(np.prod(ext)) / P) ** (1.0 / D)
    out = []
    for i in range(D):
        h = min(max(h_mean * ext[i] / float(np.prod(ext)) ** (1.0 / D), 1e-4), 0.5)
        K = int(math.ceil(1.5 / h))
        sigma = h
        margin = int(math.ceil(2 * sigma * K))
        out.append(Gaussian(K, sigma, margin=margin))
    return out


def check_fit_budget(grid_sizes: Sequence[int], embs: Sequence[Any], channels: Tuple[int, ...]) -> None:
    """The virtual grid's values and the per-axis embedding matrices of a fit, before any is formed."""
    _validate.check_array_budget("grid", list(grid_sizes) + [max(1, math.prod(channels))], 8,
                                 "the model's values on the virtual grid: use a coarser grid")
    for i, (e, n) in enumerate(zip(embs, grid_sizes)):
        _validate.check_array_budget("embedders", (n, int(e.K), 3), 8,
                                     f"axis {i}: {n} grid nodes x K = {e.K}: use a smaller K or a coarser grid")


# ---- the solver --------------------------------------------------------------------------------------


@dataclass
class _Problem:
    """Operators of one fit: blending matrix, per-axis SVD factors, preconditioner.

    Products run in ``dtype`` (float32 when the requested tolerance allows it, see
    MIXED_PRECISION_TOL) with every CG vector kept in float64; ``precise=True`` forces float64.
    """

    B: BlendingMatrix
    US: List[np.ndarray]  # (M_i, r_i) float64
    Vt: List[np.ndarray]  # (r_i, K_i)
    s2: np.ndarray  # (r_1, ..., r_D) outer product of s_i^2
    rho: float
    dtype: np.dtype = np.dtype(np.float64)

    def __post_init__(self):
        self._US = {np.dtype(np.float64): self.US}
        self._US[np.dtype(self.dtype)] = [u.astype(self.dtype) for u in self.US]

    def _mats(self, precise: bool) -> List[np.ndarray]:
        return self._US[np.dtype(np.float64) if precise else np.dtype(self.dtype)]

    def forward(self, z: np.ndarray, precise: bool = False) -> np.ndarray:  # z (r..., C) -> (P, C)
        mats = self._mats(precise)
        V = leading_chain(z.astype(mats[0].dtype, copy=False), mats)
        return self.B.matvec(V.reshape(self.B.grid_size, -1))

    def adjoint(self, r: np.ndarray, precise: bool = False) -> np.ndarray:  # r (P, C) -> (r..., C)
        mats = self._mats(precise)
        r = r.astype(mats[0].dtype, copy=False)
        g = self.B.rmatvec(r).reshape(self.B.grid_shape + (r.shape[1],))
        return leading_chain(g, [u.T for u in mats]).astype(np.float64, copy=False)

    def normal(self, z: np.ndarray, lam: float, precise: bool = False) -> np.ndarray:
        return self.adjoint(self.forward(z, precise), precise) + lam * z


def ridge_problem(B: BlendingMatrix, embs: Sequence[Any], dtype=np.float64) -> _Problem:
    US, Vt, s2 = [], [], None
    for e, g in zip(embs, B.grid_coords):
        Phi = np.asarray(e(g), dtype=np.float64)  # (M_i, K_i)
        U, s, vt = np.linalg.svd(Phi, full_matrices=False)
        keep = s > SVD_CUTOFF * (s[0] if s.size else 0.0)
        U, s, vt = U[:, keep], s[keep], vt[keep]
        US.append(np.ascontiguousarray(U * s))
        Vt.append(vt)
        s2 = s**2 if s2 is None else np.multiply.outer(s2, s**2)
    ones = B.matvec(np.ones(B.grid_size))
    rho = float(ones @ ones) / B.grid_size
    return _Problem(B, US, Vt, np.asarray(s2), rho, np.dtype(dtype))


def _pcg(prob: _Problem, rhs: np.ndarray, lam: float, x0: Optional[np.ndarray], tol: float,
         maxiter: int, precise: bool = False) -> Tuple[np.ndarray, int, np.ndarray]:
    """Preconditioned CG on (A^T A + lam I) z = rhs, channel by channel (vectorised).

    Returns (z, iterations, relative residual per channel)."""
    minv = (1.0 / (prob.rho * prob.s2 + lam))[..., None]
    return pcg(lambda p: prob.normal(p, lam, precise), lambda r: minv * r, rhs, x0, tol, maxiter)


def _choose_ridge(B: BlendingMatrix, s: np.ndarray, embs, tol: float, maxiter: int,
                  scale: float) -> Tuple[float, Dict[str, Any]]:
    """Held-out choice of lambda (module docstring); B and s in the same (sorted) point order."""
    P = B.shape[0]
    order = np.random.default_rng(HOLDOUT_SEED).permutation(P)
    n_hold = max(1, int(round(HOLDOUT_FRACTION * P)))
    hold, train = np.sort(order[:n_hold]), np.sort(order[n_hold:])
    prob = ridge_problem(B.take(train), embs, np.float32)  # tolerance >= 1e-4 here
    Bho = B.take(hold)
    rhs = prob.adjoint(np.ascontiguousarray(s[train]))
    s_ho = s[hold]
    ctol = max(tol, 1e-4)

    def holdout_error(x):
        pred = Bho.matvec(leading_chain(x, prob.US).reshape(Bho.grid_size, -1))
        return float(np.mean((pred - s_ho) ** 2))

    solve = lambda lam, x: _pcg(prob, rhs, lam, x, ctol, maxiter)[0]  # noqa: E731
    best, lams, errs, _ = sweep_ridges(solve, holdout_error, [scale * 10.0 ** (-k) for k in AUTO_EXPONENTS],
                                    10.0)
    return best, {"ridge_candidates": lams, "holdout_errors": errs}


def sorted_matrix(points, nodes, embs, normalize, threads) -> Tuple[BlendingMatrix, np.ndarray]:
    """A stored blending matrix of the points sorted by grid cell (cache-friendly products),
    and the permutation used."""
    B0 = BlendingMatrix(points, nodes, embs, normalize=normalize, outside="clamp", threads=threads)
    order = np.argsort(B0.indices[:, 0], kind="stable")
    return B0.take(order), order


def _prepared(p: "PointProblem"):
    """The embedders, the virtual grid's nodes, the blending matrix (rows sorted) and the sorted
    samples of an embedder fit (the ridge and penalised solvers)."""
    pts, D = p.points, p.ndim
    if p.embedders is None:
        embs = auto_embedders(np.clip(pts.astype(np.float64), 0.0, 1.0))
    else:
        embs = embedder_list(p.embedders, D)
        if any(e is None for e in embs):
            raise ValueError("embedders must be embedders (or None as a whole), got None for an axis")
    if p.grid is None:  # the default grid follows the embedders: check it before making its nodes
        check_fit_budget(default_grid(embs), embs, p.channels)
    nodes = grid_nodes(default_grid(embs) if p.grid is None else p.grid, D)
    check_fit_budget([n.size for n in nodes], embs, p.channels)
    pts = validate_points(pts, p.outside, nodes)
    s = p.values.reshape(pts.shape[0], -1).astype(np.float64)
    B, order = sorted_matrix(pts, nodes, embs, p.normalize, p.threads)
    return embs, nodes, pts, B, np.ascontiguousarray(s[order])


def fit_penalised(p: "PointProblem") -> PointModel:
    """The "penalised" solver: lambda weighs a difference penalty, solved in K-space."""
    embs, nodes, pts, B, s_sorted = _prepared(p)
    system = penalised.PointSystem(B, [np.asarray(e(g), np.float64) for e, g in zip(embs, nodes)])
    z, lam, info = penalised.fit(system, s_sorted, p.penalty, p.ridge, p.tol, p.maxiter)
    return finished_model(z, lam, info, embs, nodes, p.normalize, p.values.dtype, p.channels, p.t0,
                   "the separable sum-form preconditioner (kronpe.solvers.krylov)")


def fit_ridge(p: "PointProblem") -> PointModel:
    """The "ridge" solver: the exact ridge fit in the per-axis SVD basis (module docstring)."""
    embs, nodes, pts, B, s_sorted = _prepared(p)
    prob = ridge_problem(B, embs, np.float32 if p.tol >= MIXED_PRECISION_TOL else np.float64)
    maxiter = p.maxiter
    if maxiter is None:
        maxiter = max(500, 10 * sum(u.shape[1] for u in prob.US))
    scale = prob.rho * float(prob.s2.max())
    info: Dict[str, Any] = {}
    if p.ridge is None:
        if pts.shape[0] < AUTO_MIN_POINTS:
            lam = scale * 10.0 ** (-AUTO_DEFAULT_EXPONENT)
        else:
            lam, extra = _choose_ridge(B, s_sorted, embs, p.tol, maxiter, scale)
            info.update(extra)
    else:
        lam = p.ridge
    z = ridge_solve(prob, s_sorted, lam, p.tol, maxiter, info)
    return finished_model(leading_chain(z, [vt.T for vt in prob.Vt]), lam, info, embs, nodes, p.normalize, p.values.dtype,
                   p.channels, p.t0, info["preconditioner"])


def ridge_solve(prob: _Problem, s_sorted, lam: float, tol: float, maxiter: int, info: Dict[str, Any]) -> np.ndarray:
    """The CG solve of one fit in the SVD basis (module docstring), its report added to ``info``.
    ``prob.B`` may be any blending operator (kronpe.dask passes one partitioned over workers)."""
    rhs = prob.adjoint(s_sorted, precise=True)
    z, it, rel = _pcg(prob, rhs, lam, None, tol, maxiter)
    bn = np.sqrt(cdot(rhs, rhs))

    def true_residual(z):  # of the normal equations, in float64 (not CG's recursive one)
        res = rhs - prob.normal(z, lam, precise=True)
        return np.sqrt(cdot(res, res)) / np.where(bn > 0, bn, 1.0)

    true_rel = true_residual(z)
    refined = 0
    if prob.dtype != np.float64 and np.any(true_rel > tol) and it < maxiter:
        # float32 products could not reach tol: go on in float64 from where they stopped
        z, refined, rel = _pcg(prob, rhs, lam, z, tol, maxiter - it, precise=True)
        it += refined
        true_rel = true_residual(z)
    fit_res = prob.forward(z, precise=True) - s_sorted
    sn = float(np.linalg.norm(s_sorted))
    converged = bool(np.all(rel <= tol))
    info.update(
        iterations=int(it), residual=float(true_rel.max()) if true_rel.size else 0.0, converged=converged,
        data_residual=float(np.linalg.norm(fit_res) / sn) if sn > 0 else 0.0, tol=tol, maxiter=maxiter,
        preconditioner="diag(rho s^2 + lambda) in the per-axis SVD basis", rho=prob.rho,
        products=np.dtype(prob.dtype).name, float64_iterations=int(refined),
    )
    return z


def fit_smooth(p: "PointProblem", lattice) -> PointModel:
    """The "lattice" and "blended" solvers (kronpe.solvers.smooth): on the points' lattice when
    they lie on one (every point on a node: a diagonal data term), else (``lattice`` None) on a grid
    of a few nodes per mean sample spacing, blended multilinearly (a sparse data term). The CUDA
    device of the points, if any, solves a lattice fit where it can."""
    pts, vals, channels, normalize, threads, t0, device = (p.points, p.values, p.channels, p.normalize, p.threads,
                                                          p.t0, p.device)
    nodes = lattice if lattice is not None else [np.linspace(0.0, 1.0, n) for n in density_grid(pts)]
    # the solver's work arrays: about 12 float32 grids (multigrid levels, CG vectors) + the channels,
    # off a lattice + the held-out sweep's fits (up to one per candidate lambda: smooth._blended_sweep)
    grids = 12 + 2 * max(1, math.prod(channels)) + (0 if lattice is not None else len(smooth.EXPONENTS))
    _validate.check_array_budget("points", [n.size for n in nodes] + [grids], 4,
                                 "the default fit's grid follows the sample density: give embedders and a grid, "
                                 "or fewer points")
    s = vals.reshape(pts.shape[0], -1).astype(np.float32)
    if lattice is not None:
        shape = tuple(n.size for n in lattice)
        counts, rhs = lattice_sums(pts, shape, s)
        W, lam, info = smooth.fit(DataTerm(shape, counts, total=pts.shape[0]), rhs, None,
                                  value_range=smooth.sample_range(s), device=device)
    else:
        B = BlendingMatrix(pts, nodes, None, normalize=normalize, outside="clamp", threads=threads).store()
        shape = B.grid_shape
        rhs = B.rmatvec(s).reshape(shape + (s.shape[1],))
        W, lam, info = smooth.fit(DataTerm(shape, blend=B), rhs, None, samples=(B, s),
                                  value_range=smooth.sample_range(s))
    info["grid"] = "the points' lattice" if lattice is not None else "NODES_PER_SPACING nodes per mean sample spacing"
    return finished_model(W, lam, info, (None,) * len(nodes), nodes, normalize, vals.dtype, channels, t0,
                   info["preconditioner"])


def finished_model(W: np.ndarray, lam: float, info: Dict[str, Any], embs, nodes, normalize: bool, dtype, channels,
            t0: float, preconditioner: str) -> PointModel:
    """The PointModel of weights W (K..., C), after a ConvergenceWarning when CG stopped early."""
    info["preconditioner"] = preconditioner
    if not info["converged"]:
        warnings.warn(
            f"fit_points: conjugate gradients stopped at maxiter={info['maxiter']} with relative residual "
            f"{info['residual']:.3g} > tol={info['tol']:g}; raise maxiter or ridge",
            ConvergenceWarning, stacklevel=3,
        )
    D = len(nodes)
    W = W.reshape(W.shape[:D] + channels).astype(dtype, copy=False)
    info["seconds"] = time.perf_counter() - t0
    return PointModel(weights=W, embedders=tuple(embs), grid_coords=tuple(nodes), ridge=float(lam), info=info,
                      normalize=normalize)
