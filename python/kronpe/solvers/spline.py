"""Scattered samples off any lattice: a tensor-product cubic B-spline with a thin-plate penalty.

The model is a cubic B-spline s(x) on a uniform node grid over the points' bounding box (C2, each
point blended from its 4^D nearest coefficients). A fit minimises

    sum_p (s(x_p) - y_p)^2 + lambda * integral over the box of |D^2 s|^2        (thin-plate energy)

whose normal equations (B^T B + lambda R) c = B^T y couple each coefficient to the 7^D around it:
B^T B is assembled from the points by ``_core.spline_normal`` and R exactly from per-axis Gram
matrices of the B-splines and their derivatives (``penalty_stencil``). The thin-plate energy gives
the natural boundary: outside the points' convex hull the fit continues with the least bending
(no blow-up), and predictions are only defined inside the box (a named error beyond it).

Decisions (each measured on Franke's function and off-lattice samples of photographs):

- **Coordinates in any units.** The fit lives in the unit box of the points' bounding box, so
  every axis keeps its own units (metres, degrees, seconds) and gets the same number of nodes;
  the thin-plate energy is isotropic in those unit coordinates.
- **Nested grids.** Level l has nint_0 * 2^l intervals per axis; a coarse B-spline is exactly a
  combination of the fine ones (weights 1 4 6 4 1 / 8), so the levels nest. They serve twice: as
  candidate resolutions and as the multigrid hierarchy of each level's solve.
- **Resolution and lambda held out.** 10% of the points (a fixed seed) are held out; levels are
  solved from the coarsest up, each started from the one below, until the held-out error stops
  falling (a level without a gain, once one explains half the values' spread), reaches ``tol`` times the values' range, or the finest
  level (node spacing FINEST_SPACING times the mean point spacing) is done. With lambda at the
  interpolation limit (LAMBDA_EXACT) a spline coarser than the points is a least-squares fit: on
  smooth fields that beats interpolating every sample (Franke's function from 2 000 points: 96 dB
  with 32 intervals per axis, 85 dB with 64 and more); on detailed signals the finest level
  wins. A level solved iteratively takes a lower lambda only where CG solves it in LOWER_MAXITER
  iterations (a lower lambda can slow CG many-fold; slower counts as no gain), and gives up after
  LOWER_PROBE iterations where its residual lags the geometric pace that would get there (on a
  fractal terrain such a try would spend LOWER_MAXITER iterations for nothing; the tries that
  succeed are on pace from the start). Then lambda is raised (x10 per step)
  at the best level and the one above it while the held-out error falls: noisy samples stop
  there (an iterative level above only where the best level gained: its held-out error comes
  from a short solve started at the best level's fit, so it lies near the best's anyway). Not
  where the finest level won with a held-out error below RESOLVING times the level below's: a
  fit still resolving detail at its finest level is bound by its resolution, which smoothing
  does not help (on a fractal terrain the tenfold lambda loses, after a solve at the finest
  level). ``info["limited_by"]`` says which bound the fit:
  "tolerance", "representation" (the finest level won), or "noise" (a coarser level or a larger
  lambda won).
- **Solver.** CG preconditioned by one V-cycle over the levels below (Chebyshev smoothing of
  degree CHEB_DEGREE on the diagonal over [lmax / CHEB_RATIO, lmax], lmax from Lanczos steps,
  through float32 copies of the operators: half the memory traffic of the stencil products, which
  bound the smoother; Galerkin coarse operators: each level's B^T B is assembled from the points
  with that level's weights, which equals P^T A P exactly for nested splines; the coarsest level
  is factorised). The smoother (its residuals made in the stencil product's pass) and the
  transfers between levels are kernels (``_core.spline_chebyshev``, ``spline_subdivide``,
  ``spline_restrict``): as NumPy expressions each step would be a pass over memory with its
  temporaries, and the Python overhead would rival the coarse levels' work. Each level keeps one operator, data + lambda * penalty, changed in place
  when lambda changes (a level solved by a factorisation keeps its penalty stencil; a larger one
  adds the penalty's difference a block of offsets at a time: no stencil-sized copy).
  Factorisations are banded (LAPACK pbtrf runs at potrf's flop rate on one thread, so it beats a
  dense one on every level solved directly). The final fit holds every point on every level of
  its V-cycle (training points alone on the coarse ones make its CG take several times the
  iterations). A solve judged only by its held-out error (a level or a lambda tried) stops once
  its residual is below EXPLORE_REDUCTION times its start's and below CG_TOL_FACTOR times the
  best held-out error so far relative to the values' RMS (the final fit's tolerance without its
  CG_TOL_MAX cap, which would take detailed fields several times the iterations): enough to rank
  levels, whose errors differ by a tenth or more where such fits are costly, and those solves are
  the costliest. The noise test compares errors a few percent apart, so before it the fits of the
  best level and its neighbours are refined to the residual a solve held to cg_tol would have
  reached, and its own steps are held to cg_tol (on noisy samples the choice is then that of
  solves held to cg_tol throughout). The final fit reduces its start's residual by
  WARM_REDUCTION. CHEB_DEGREE 4: with the smoother a kernel, a fourth step costs less than the CG
  iterations it saves (a fractal terrain's fit a tenth faster; smooth 3-D fields alike).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import _core
from .. import io as _io
from .._adapters import validate as _validate
from ._spline_grids import (CHEB_DEGREE, CHEB_RATIO, DENSE_SPEEDUP, DIRECT_WORK, LANCZOS_STEPS,  # noqa: F401
                           VCYCLE_DIRECT_WORK, WARM_REDUCTION, Grid, _factorised, _first_level, _Level, _pcg,
                           _pieces, _prolong, _vcycle, _warm_tol, add_penalty, axis_grams, normal_equations,
                           penalty_stencil, restrict, subdivide, values_at)

__all__ = ["SplineModel", "fit", "penalty_stencil", "axis_grams", "subdivide", "restrict"]

FINEST_SPACING = 0.5  # finest node spacing / mean point spacing
COARSEST_INTERVALS = 4  # intervals of the coarsest level along the longest axis (at most)
LAMBDA_START = 1e-3  # each level's first lambda / (rho s^4) (rho: points per unit volume, s: their spacing)
LAMBDA_DOWN = 1000.0  # then lower by this factor while the held-out error falls ...
LAMBDA_EXACT = 1e-6  # ... down to the interpolation limit
LAMBDA_STEP = 10.0  # and at the best levels higher by this factor while it falls (noise)
NOISE_ABOVE = True  # the higher lambdas are tried on the level above the best too (when it is
NOISE_NEAR = 1.25  # direct, or iterative and its held-out error within this factor of the best's)
HOLDOUT_FRACTION = 0.1
HOLDOUT_SEED = 0
MIN_HOLDOUT_POINTS = 40
STOP_LEVELS = 1  # levels without a gain after which refinement stops
EXPLAINED = 0.5  # ... once the best level's held-out error is below this fraction of the values' RMS
LEVEL_GAIN = 0.99  # a level counts as a gain when it cuts the held-out error below this fraction
RESOLVING = 0.9  # the finest level still resolves detail: its error below this fraction of the level below's
DEFAULT_TOL = 1e-5  # held-out RMS error / value range at which refinement stops
CG_TOL = 1e-8  # CG's relative residual: at most CG_TOL_FACTOR x the held-out error / the values' RMS,
CG_TOL_MAX = 1e-4  # within [CG_TOL, CG_TOL_MAX]
CG_TOL_FACTOR = 0.01
EXPLORE_REDUCTION = 0.1  # a solve judged by its held-out error only (a level or lambda tried)
#                          reduces its initial residual at least this much (the final one: WARM_REDUCTION)
CG_MAXITER = 300  # CG's iterations at most,
LOWER_MAXITER = 25  # ... and at an iterative level's lower lambda (more count as no gain there;
LOWER_PROBE = 6  # behind the pace that finishes in LOWER_MAXITER after this many, it stops there)


# ---- the model ----------------------------------------------------------------------------------


@_io.model_kind("spline")
@dataclass
class SplineModel:
    """A cubic B-spline fitted to scattered samples (``kronpe.fit_points`` off a lattice,
    ``kronpe.grid``).

    Attributes
    ----------
    coef : array (*shape, *channels), the B-spline coefficients (nint + 3 per axis)
    lo, scale : tuples of D floats: the spline lives in the unit coordinates (x - lo) / scale of
        the points' bounding box (scale: its extents), so every axis keeps its own units
    hi : the upper corner of the box the spline covers (the bounding box, extended to whole
        intervals)
    h : float, the node spacing in unit coordinates
    ridge : float, the lambda of the thin-plate penalty
    info : dict
        ``levels`` (intervals per axis of every level tried), ``holdout_errors`` (RMS, per level),
        ``lambdas`` and ``lambda_holdout_errors``, ``limited_by`` ("tolerance",
        "representation" or "noise"), ``iterations`` (CG iterations of the final solve),
        ``residual``, ``converged``, ``seconds``, ``preconditioner``.
    """

    coef: np.ndarray
    lo: Tuple[float, ...]
    scale: Tuple[float, ...]
    h: float
    ridge: float
    info: Dict[str, Any] = field(default_factory=dict)

    @property
    def ndim(self) -> int:
        return len(self.lo)

    @property
    def channels(self) -> Tuple[int, ...]:
        return self.coef.shape[self.ndim:]

    @property
    def grid(self) -> Grid:
        """The B-spline grid in the box's unit coordinates (x - lo) / scale."""
        return Grid(tuple(n - 3 for n in self.coef.shape[:self.ndim]), (0.0,) * self.ndim, self.h)

    @property
    def hi(self) -> Tuple[float, ...]:
        return tuple(lo + s * n * self.h for lo, s, n in zip(self.lo, self.scale, self.grid.nint))

    def _unit(self, x: np.ndarray, axis: int) -> np.ndarray:
        return (x - self.lo[axis]) / self.scale[axis]

    def _check_inside(self, name: str, x: np.ndarray, axis: Optional[int] = None) -> None:
        axes = range(self.ndim) if axis is None else [axis]
        hi = self.hi
        for a in axes:
            col = x[:, a] if axis is None else x
            slack = 1e-9 * self.h * self.scale[a]
            if col.size and (col.min() < self.lo[a] - slack or col.max() > hi[a] + slack):
                raise ValueError(
                    f"{name}: axis {a} must lie in the fitted box [{self.lo[a]:.6g}, {hi[a]:.6g}], "
                    f"got [{col.min():.6g}, {col.max():.6g}]")

    def save(self, path) -> None:
        """Write the model to ``path`` (``.npz``, no pickle; ``kronpe.load`` reads it back)."""
        _io.save_model(self, path)

    def predict(self, points) -> np.ndarray:
        """Values at points (P, D) inside the fitted box: (P, *channels)."""
        pts = _validate.real_array("points", points)
        if pts.ndim == 1 and self.ndim == 1:
            pts = pts[:, None]
        if pts.ndim != 2 or pts.shape[1] != self.ndim:
            raise ValueError(f"points must have shape (P, {self.ndim}), got {pts.shape}")
        pts = np.ascontiguousarray(pts, dtype=np.float64)
        _validate.finite("points", pts)
        self._check_inside("points", pts)
        pts = np.ascontiguousarray(np.stack([self._unit(pts[:, a], a) for a in range(self.ndim)], -1))
        coef = self.coef.reshape(math.prod(self.coef.shape[:self.ndim]), -1).astype(np.float64)
        out = values_at(self.grid, coef, pts)
        return out.reshape((pts.shape[0],) + self.channels).astype(self.coef.dtype, copy=False)

    def predict_grid(self, coords: Sequence) -> np.ndarray:
        """Values on the grid of per-axis coordinates (D 1-D arrays inside the box):
        (N_1, ..., N_D, *channels), evaluated separably (one banded matrix per axis)."""
        coords = _validate.sequence("coords", coords, f"{self.ndim} 1-D arrays of coordinates")
        if len(coords) != self.ndim:
            raise ValueError(f"coords must be a list of {self.ndim} 1-D arrays of coordinates, got {len(coords)}")
        from ..ops import multi_mode_product

        grid = self.grid
        mats = []
        for a, c in enumerate(coords):
            c = _validate.coords_1d(f"coords[{a}]", c, dtype=np.float64, unit=False)
            self._check_inside(f"coords[{a}]", c, axis=a)
            _validate.check_array_budget(f"coords[{a}]", (c.size, grid.nint[a] + 3), 8,
                                         "the evaluation matrix of this axis: ask for fewer coordinates")
            mats.append(axis_matrix(grid.nint[a], 0.0, grid.h, self._unit(c, a)))
        # kronpe's chain, on its kernels' threads (NumPy's BLAS would leave its own pool spinning
        # beside them)
        out = multi_mode_product(np.ascontiguousarray(self.coef, dtype=np.float64), mats, modes=list(range(self.ndim)))
        return np.ascontiguousarray(out).astype(self.coef.dtype, copy=False)


def axis_matrix(nint: int, lo: float, h: float, x: np.ndarray) -> np.ndarray:
    """The dense (len(x), nint + 3) matrix of the cubic B-splines of one axis at x."""
    u = (np.asarray(x, np.float64) - lo) / h
    i = np.clip(np.floor(u), 0, nint - 1).astype(np.int64)
    w = _pieces(u - i, 0)
    E = np.zeros((u.size, nint + 3))
    rows = np.arange(u.size)
    for k in range(4):
        E[rows, i + k] = w[:, k]
    return E


# ---- the fit ------------------------------------------------------------------------------------


def _hierarchy(lo: np.ndarray, ext: np.ndarray, spacing: float) -> Tuple[Grid, int]:
    """The coarsest grid and the number of finer levels, from the box and the points' spacing."""
    h0 = float(ext.max()) / COARSEST_INTERVALS
    finest = FINEST_SPACING * spacing
    L = max(0, int(math.ceil(math.log2(h0 / finest) - 0.1))) if finest < h0 else 0
    nint = tuple(max(1, int(math.ceil(e / h0 * (1 - 1e-12)))) for e in ext)
    return Grid(nint, tuple(float(v) for v in lo), h0), L


def _holdout(P: int) -> np.ndarray:
    rng = np.random.default_rng(HOLDOUT_SEED)
    k = int(round(HOLDOUT_FRACTION * P))
    return np.sort(rng.choice(P, size=k, replace=False))


class _HostLevels:
    """The candidate levels of one fit on the host: training and held-out operators, solves."""

    def __init__(self, grids: List[Grid], points: np.ndarray, values: np.ndarray, hold: np.ndarray):
        self.grids = grids
        self.count = len(grids)
        train = np.ones(points.shape[0], bool)
        train[hold] = False
        self.p_tr, self.v_tr = np.ascontiguousarray(points[train]), np.ascontiguousarray(values[train])
        self.p_ho, self.v_ho = np.ascontiguousarray(points[hold]), np.ascontiguousarray(values[hold])
        self.ops: List[_Level] = []  # per level: its operator at the lambda last solved there
        self.rhs: List[np.ndarray] = []
        self.solved: Dict[int, float] = {}  # the last lambda solved per level
        self.fit_tol = math.inf  # CG_TOL_FACTOR x the best held-out error / the values' RMS (>= CG_TOL)
        self.cg_tol = CG_TOL_MAX  # ... at most CG_TOL_MAX: the final fit's and the refined ones'
        self.loose = True  # explorations stop at fit_tol (until a fit is refined)
        self.tight_tol: Dict[Tuple[int, float], float] = {}  # per level and lambda: the residual its
        # last solve would have reached held to cg_tol
        self.D = len(grids[0].nint)

    def _assemble(self, l: int) -> None:
        while len(self.ops) <= l:
            g = self.grids[len(self.ops)]
            st, rhs = normal_equations(g, self.p_tr, self.v_tr)
            # (a level solved by a factorisation keeps its penalty: its lambdas change often and it
            # is small; a larger one makes its penalty a block at a time where lambda changes)
            pen = penalty_stencil(g) if self.direct(len(self.ops)) else None
            self.ops.append(_Level(g, st, pen, 0.0, own=True))
            self.rhs.append(rhs)

    def _levels(self, l: int, lam: float) -> List[_Level]:
        """The operators a solve at level l uses, set to lam (each level keeps its lmax per lambda
        and its smoother's top eigenvector across lambdas)."""
        self._assemble(l)
        out = self.ops[_first_level([g.shape for g in self.grids[:l + 1]]):l + 1]
        for lev in out:
            lev.set_lambda(lam)
        return out

    def direct(self, l: int) -> bool:
        """Whether level l is solved by a factorisation (cheap) rather than iteratively."""
        return _factorised(self.grids[l].shape)

    def start(self, l: int, x: Optional[np.ndarray]) -> Optional[np.ndarray]:
        """Level l's starting point from level l - 1's fit (the same spline, subdivided)."""
        if x is None:
            return None
        C = x.shape[1]
        return _prolong(x.reshape(self.grids[l - 1].shape + (C,)), self.D).reshape(-1, C)

    def solve(self, l: int, lam: float, x0: Optional[np.ndarray]) -> Optional[np.ndarray]:
        """The fit at level l and lam, judged by its held-out error; None where lam is below the
        last one solved at an iterative level l and CG takes more than LOWER_MAXITER iterations."""
        self._assemble(l)
        lower = not self.direct(l) and lam < self.solved.get(l, lam)
        self.solved[l] = lam
        tol = self.fit_tol if self.loose and math.isfinite(self.fit_tol) else self.cg_tol
        start: List[float] = []
        x, it, _ = _pcg(self._levels(l, lam), self.rhs[l], x0, tol, LOWER_MAXITER if lower else CG_MAXITER,
                        EXPLORE_REDUCTION, LOWER_PROBE if lower else 0, start)
        # what a solve held to cg_tol would have reached: refine's goal for this fit
        self.tight_tol[(l, lam)] = (self.cg_tol if x0 is None or not start
                                    else _warm_tol(self.cg_tol, EXPLORE_REDUCTION, start[0]))
        return None if lower and it >= LOWER_MAXITER else x

    def refine(self, l: int, lam: float, x: np.ndarray) -> np.ndarray:
        """The fit at level l and lam from x (its last, rough solve) to the residual that solve
        would have reached held to cg_tol; every solve after this is held to cg_tol (the noise
        test's steps compare close errors)."""
        self.loose = False
        if self.direct(l):
            return x
        self.solved[l] = lam
        return _pcg(self._levels(l, lam), self.rhs[l], x, self.tight_tol.get((l, lam), self.cg_tol), CG_MAXITER,
                    1.0)[0]

    def holdout_error(self, l: int, x: np.ndarray, rms: float) -> float:
        e = values_at(self.grids[l], x, self.p_ho) - self.v_ho
        err = float(np.sqrt(np.mean(e * e)))
        if rms > 0:  # the solves need be no more accurate than the fit they can reach
            self.fit_tol = min(self.fit_tol, max(CG_TOL, CG_TOL_FACTOR * err / rms))
            self.cg_tol = min(self.fit_tol, CG_TOL_MAX)
        return err

    def final(self, l: int, lam: float, x0: Optional[np.ndarray]) -> Tuple[np.ndarray, int, float]:
        """Every point at level l, and at the coarser levels its V-cycle uses (Galerkin operators
        of the same data: training points alone there slow CG several-fold). The held-out points
        are added to the training operators in place (nothing solves with those after this); each
        keeps its lmax (the held-out points move it by under 1%, within the estimate's margin)."""
        levs = self._levels(l, lam)
        if self.p_ho.shape[0]:
            first = l + 1 - len(levs)
            for k, lev in enumerate(levs, first):
                _core.spline_normal(self.grids[k].args(), self.p_ho, self.v_ho, None, lev.A, self.rhs[k])
                lev.changed()
        return _pcg(levs, self.rhs[l], x0, self.cg_tol, CG_MAXITER)


def choose(levels, scale: float, vrange: float, rms: float, tol: float, ridge: Optional[float],
           has_holdout: bool, info: Dict[str, Any]) -> Tuple[int, float, List[Any]]:
    """The held-out choice of level and lambda (module docstring) over ``levels`` (a _HostLevels or
    a device twin): returns (best level, lambda, the held-out fits per level)."""
    fixed = ridge is not None
    L = levels.count - 1
    errors: List[float] = []
    sols: List[Any] = []
    lams: List[float] = []
    lam_errors: List[Tuple[float, int, float]] = []
    limited = "representation"
    best = 0
    x = None
    lowering = True  # whether a lower lambda did not lose on the last level (then this one tries it too)
    start = ridge * scale if fixed else LAMBDA_START * scale
    if not has_holdout:  # too few points to hold any out: the finest level at the starting lambda
        info.update(levels=[list(g.nint) for g in levels.grids], holdout_errors=[], limited_by="representation")
        return L, start, []
    for l in range(L + 1):
        # lambda from LAMBDA_START down to LAMBDA_EXACT while it gains (kept at the start on a level
        # whose predecessor lost from a lower one, and on an iterative level that does not beat the
        # best level at the start, or whose solve at the lower lambda takes too long)
        mu = start
        y = levels.solve(l, mu, levels.start(l, x))
        e = levels.holdout_error(l, y, rms)
        tried = lowering and (levels.direct(l) or not errors or e < errors[best] * LEVEL_GAIN)
        lowering = False
        while tried and not fixed and mu > LAMBDA_EXACT * scale * 1.001:
            mu2 = max(mu / LAMBDA_DOWN, LAMBDA_EXACT * scale)
            y2 = levels.solve(l, mu2, y)
            if y2 is None:  # too slow to solve at the lower lambda (an iterative level): no gain
                break
            e2 = levels.holdout_error(l, y2, rms)
            lam_errors.append((mu2 / scale, l, e2))
            if not e2 < e * LEVEL_GAIN:
                lowering = e2 <= e / LEVEL_GAIN  # no loss either: the next level tries too
                break
            y, e, mu = y2, e2, mu2
            lowering = True
        x = y
        sols.append(y)
        errors.append(e)
        lams.append(mu)
        if errors[-1] < errors[best]:
            best = l
        if vrange > 0 and errors[best] <= tol * vrange:
            limited = "tolerance"
            break
        # finer levels that do not gain: the samples support no finer one (once a level explains
        # some of the values: below that, coarse levels may just not resolve the signal yet)
        if l - best >= STOP_LEVELS and errors[best] < EXPLAINED * rms:
            break
    # the finest level won by a wide margin over the one below: the fit is limited by its
    # resolution, which a larger lambda (more smoothing) does not help
    resolving = best == L and L > 0 and errors[L] < RESOLVING * errors[L - 1]
    if not fixed and limited != "tolerance" and not resolving:
        # the fits the noise test starts from and compares with, refined from their explorations
        # (where the levels' solves are rough: a step's gain is a few percent of the error)
        if hasattr(levels, "refine"):
            done: set = set()
            near_best = lambda: {k for k in (best - 1, best, best + 1) if 0 <= k < len(sols)}  # noqa: E731
            while not near_best() <= done:
                for k in sorted(near_best() - done):
                    sols[k] = levels.refine(k, lams[k], sols[k])
                    errors[k] = levels.holdout_error(k, sols[k], rms)
                    done.add(k)
                best = int(np.argmin(errors))
        # raise lambda at the best level (and the one above it) while the held-out error falls
        first = best
        above = min(first + 1, len(sols) - 1)
        # the level above, where its start came close (a noisy fit gains there from a larger lambda;
        # far behind, as when exact samples are fitted, it does not); an iterative one only where
        # the best level gained from a larger lambda too (noise): its held-out error comes from a
        # short solve started at the best level's fit, so it lies near that one's in any case
        near = NOISE_ABOVE and (levels.direct(above) or errors[above] < errors[first] * NOISE_NEAR)
        noisy = False
        for l in [first] + ([above] if near and above != first else []):
            if l != first and not (levels.direct(l) or noisy):
                break
            prev, y, mu = errors[l], sols[l], lams[l]
            while True:
                mu *= LAMBDA_STEP
                y = levels.solve(l, mu, y)
                e = levels.holdout_error(l, y, rms)
                lam_errors.append((mu / scale, l, e))
                if not e < prev * LEVEL_GAIN:
                    break
                prev = e
                noisy = noisy or l == first
                if e < errors[best] * LEVEL_GAIN:
                    best = l
                    errors[best], sols[best], lams[best] = e, y, mu
                    limited = "noise"
    info.update(levels=[list(g.nint) for g in levels.grids[:len(sols)]], holdout_errors=errors,
                limited_by=limited, lambda_holdout_errors=[(float(m), int(l), float(e)) for m, l, e in lam_errors])
    return best, lams[best], sols


def prepare(points, P: int, D: int, box, max_level: Optional[int]):
    """The unit box and the candidate grids of a fit: (lo, ext, grids, scale). The points' spacing
    (and so the finest level and lambda's unit) comes from their own bounding box, also when the
    fit covers a larger one."""
    p_lo, p_hi = (np.asarray(v, np.float64) for v in points)
    lo, hi = p_lo, p_hi
    if box is not None:
        lo, hi = np.minimum(lo, box[0]), np.maximum(hi, box[1])
    with np.errstate(over="ignore", invalid="ignore"):
        ext = hi - lo
    if not np.all(np.isfinite(ext)):
        raise ValueError("points: the coordinates' extent overflows float64; rescale them first")
    span = float(ext.max())
    if not span > 0:
        raise ValueError("points: all points coincide; at least two distinct positions are needed")
    ext = np.maximum(ext, span * 1e-9)
    p_ext = np.maximum(p_hi - p_lo, span * 1e-9)
    occupied = float(np.prod(p_ext / ext))  # the points' box, in the unit box
    spacing = (occupied / P) ** (1.0 / D)
    coarsest, L = _hierarchy(np.zeros(D), np.ones(D), spacing)
    if max_level is not None:
        L = min(L, max_level)
    grids = [coarsest]
    for _ in range(L):
        grids.append(grids[-1].finer())
    scale = (P / occupied) * spacing**4  # lambda's unit: smoothing at the scale of the point spacing
    return lo, ext, grids, scale


def spread(values: np.ndarray) -> float:
    """The values' RMS about their per-channel means (what a fit has to explain)."""
    if values.size == 0:
        return 0.0
    centred = values - values.mean(axis=0)
    return float(np.sqrt(np.mean(centred * centred)))


def holdout_of(P: int) -> np.ndarray:
    return _holdout(P) if P >= MIN_HOLDOUT_POINTS * 10 else np.zeros(0, np.int64)


def fit(points: np.ndarray, values: np.ndarray, tol: float = DEFAULT_TOL, ridge: Optional[float] = None,
        max_level: Optional[int] = None, box: Optional[Tuple[np.ndarray, np.ndarray]] = None) -> SplineModel:
    """Fit a cubic B-spline to points (P, D) float64 and values (P, C) float64 (checked by the
    caller: finite, D = 1..3, P >= 1). ``ridge``: a fixed lambda / (rho s^4) (no held-out choice of
    lambda; the resolution is still held out). ``box``: (lo, hi) the fit must cover besides the
    points. Returns a SplineModel with float64 coefficients of shape (*grid, C)."""
    t0 = time.perf_counter()
    P, D = points.shape
    C = values.shape[1]
    lo, ext, grids, scale = prepare((points.min(axis=0), points.max(axis=0)), P, D, box, max_level)
    unit = np.ascontiguousarray((points - lo) / ext)  # the unit box: every axis in its own units
    vrange = float(np.ptp(values)) if values.size else 0.0
    rms = spread(values)
    info: Dict[str, Any] = {"preconditioner": "V-cycle over the nested B-spline grids (Chebyshev smoothing)"}
    hold = holdout_of(P)
    levels = _HostLevels(grids, unit, values, hold)
    best, lam, sols = choose(levels, scale, vrange, rms, tol, ridge, hold.size > 0, info)
    x, it, rel = levels.final(best, lam, sols[best] if best < len(sols) else None)
    g = grids[best]
    info.update(iterations=int(it), residual=rel, converged=bool(rel <= levels.cg_tol) or it == 0, tol=tol,
                cg_tol=levels.cg_tol, ridge_relative=float(lam / scale), grid=list(g.nint), h=g.h,
                seconds=time.perf_counter() - t0)
    return SplineModel(coef=x.reshape(g.shape + (C,)), lo=tuple(float(v) for v in lo),
                       scale=tuple(float(v) for v in ext), h=g.h, ridge=float(lam), info=info)
