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

import functools
import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import _core
from .. import io as _io
from .._adapters import blas as _blas, validate as _validate

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
CHEB_DEGREE = 4
CHEB_RATIO = 30.0  # the smoother damps D^-1 A's spectrum in [lmax / CHEB_RATIO, lmax]
LANCZOS_STEPS = 8  # Lanczos steps for the smoother's lmax (too few underestimate it, and CG stalls)
STOP_LEVELS = 1  # levels without a gain after which refinement stops
EXPLAINED = 0.5  # ... once the best level's held-out error is below this fraction of the values' RMS
LEVEL_GAIN = 0.99  # a level counts as a gain when it cuts the held-out error below this fraction
RESOLVING = 0.9  # the finest level still resolves detail: its error below this fraction of the level below's
DEFAULT_TOL = 1e-5  # held-out RMS error / value range at which refinement stops
CG_TOL = 1e-8  # CG's relative residual: at most CG_TOL_FACTOR x the held-out error / the values' RMS,
CG_TOL_MAX = 1e-4  # within [CG_TOL, CG_TOL_MAX]
CG_TOL_FACTOR = 0.01
WARM_REDUCTION = 0.01  # a warm-started solve reduces its initial residual at least this much
EXPLORE_REDUCTION = 0.1  # ... and one judged by its held-out error only (a level or lambda tried)
DIRECT_WORK = 3e7  # N bw^2 of the largest level solved by a factorisation (a 35 x 35 grid: 1.4e7)
VCYCLE_DIRECT_WORK = 3e6  # ... and of a V-cycle's coarsest level (a 19 x 19 grid: 1.3e6)
DENSE_SPEEDUP = 30.0  # the size rule counts N^3 / 3 at this discount (3-D levels up to 11^3 factorised)
CG_MAXITER = 300  # CG's iterations at most,
LOWER_MAXITER = 25  # ... and at an iterative level's lower lambda (more count as no gain there;
LOWER_PROBE = 6  # behind the pace that finishes in LOWER_MAXITER after this many, it stops there)
_GAUSS = np.polynomial.legendre.leggauss(4)  # exact for the products of cubic pieces (degree 6)


# ---- the B-spline grid --------------------------------------------------------------------------


@dataclass(frozen=True)
class Grid:
    """nint intervals of width h per axis from lo: nint + 3 coefficients per axis."""

    nint: Tuple[int, ...]
    lo: Tuple[float, ...]
    h: float

    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(n + 3 for n in self.nint)

    @property
    def hi(self) -> Tuple[float, ...]:
        return tuple(lo + n * self.h for lo, n in zip(self.lo, self.nint))

    def args(self):
        return (list(self.nint), list(self.lo), [self.h] * len(self.nint))

    def finer(self) -> "Grid":
        return Grid(tuple(2 * n for n in self.nint), self.lo, self.h / 2)


def _pieces(t: np.ndarray, d: int) -> np.ndarray:
    """The four cubic B-spline pieces (or their d-th derivatives in u) at t in [0, 1]: (..., 4)."""
    s = 1.0 - t
    if d == 0:
        return np.stack([s**3 / 6, (3 * t**3 - 6 * t**2 + 4) / 6, (-3 * t**3 + 3 * t**2 + 3 * t + 1) / 6, t**3 / 6], -1)
    if d == 1:
        return np.stack([-(s**2) / 2, (3 * t**2 - 4 * t) / 2, (-3 * t**2 + 2 * t + 1) / 2, t**2 / 2], -1)
    return np.stack([s, 3 * t - 2, 1 - 3 * t, t], -1)


def axis_grams(nint: int, h: float) -> List[np.ndarray]:
    """Band forms (n, 7) of the Gram matrices of the B-splines, their first and their second
    derivatives over [lo, lo + nint h]: band[i, o + 3] = integral of B_i^(d) B_{i+o}^(d)."""
    return [g.copy() for g in _axis_grams(nint, h)]


@functools.lru_cache(maxsize=32)
def _axis_grams(nint: int, h: float) -> Tuple[np.ndarray, ...]:
    x, w = _GAUSS
    t = (x + 1) / 2
    w = w / 2
    n = nint + 3
    vals = np.stack([_pieces(t, d) / h**d for d in range(3)])  # (3, q, 4)
    local = np.einsum("dqa,q,dqb->dab", vals, w, vals) * h  # (3, 4, 4): one interval's couplings
    out = np.zeros((3, n, 7))
    for a in range(4):  # piece a of interval i is B-spline i + a
        out[:, a:a + nint, 3 - a:7 - a] += local[:, a, None, :]
    out.flags.writeable = False
    return tuple(out)


def penalty_stencil(grid: Grid) -> np.ndarray:
    """The thin-plate energy's stencil (7^D, prod(shape)), offset-major as kronpe/spline.h keeps it:
    sum over i, j of the integral of (d_i d_j s)^2."""
    out = np.empty((7 ** len(grid.nint), math.prod(grid.shape)))
    add_penalty(grid, 1.0, out, add=False)
    return out


def add_penalty(grid: Grid, scale: float, out: np.ndarray, add: bool = True) -> None:
    """out (7^D, prod(shape)) += scale * the penalty stencil (``add``; else =), a block of rows at a
    time (no array of the stencil's size besides out)."""
    D = len(grid.nint)
    grams = [_axis_grams(n, grid.h) for n in grid.nint]  # per axis: bands (n, 7) of orders 0, 1, 2
    # the energy is a sum of T Kronecker products (one per pure and per mixed second derivative,
    # the mixed ones twice): per axis a (T, 7, n) factor; each offset's block is a product of the
    # leading axes' factors (n_1 ... n_(D-1), T) @ the last axis' (T, n_D)
    orders: List[Tuple[int, ...]] = [tuple(2 if i == a else 0 for i in range(D)) for a in range(D)]
    weights = [1.0] * D
    for a in range(D):
        for b in range(a + 1, D):
            orders.append(tuple(1 if i in (a, b) else 0 for i in range(D)))
            weights.append(2.0)
    factors = [np.stack([scale * w * grams[i][o[i]].T if i == 0 else grams[i][o[i]].T
                         for o, w in zip(orders, weights)]) for i in range(D)]  # (T, 7, n_i)
    T = len(orders)
    shape = grid.shape
    blocks = out.reshape((7,) * D + shape)
    if D == 1:
        if add:
            blocks += factors[0].sum(axis=0)
        else:
            blocks[:] = factors[0].sum(axis=0)
        return
    Np = math.prod(shape[:-1])
    part = np.empty((Np, shape[-1])) if add else None
    for pre in itertools.product(range(7), repeat=D - 1):  # the leading axes' offsets
        left = factors[0][:, pre[0], :]
        for i in range(1, D - 1):
            left = (left[:, :, None] * factors[i][:, pre[i], None, :]).reshape(T, -1)
        lt = np.ascontiguousarray(left.T)  # (n_1 ... n_(D-1), T)
        for o in range(7):  # each offset's block, in place
            block = blocks[pre + (o,)].reshape(Np, shape[-1])
            if add:
                np.matmul(lt, factors[-1][:, o, :], out=part)
                block += part
            else:
                np.matmul(lt, factors[-1][:, o, :], out=block)


def _along(x: np.ndarray, axis: int) -> Tuple[int, int, int]:
    """(outer, n, inner) of a C-contiguous array seen along ``axis``."""
    return math.prod(x.shape[:axis]), x.shape[axis], math.prod(x.shape[axis + 1:])


Buffers = Optional[Callable[[str, Tuple[int, ...]], np.ndarray]]  # (name, shape) -> a work array


def subdivide(coarse: np.ndarray, axis: int, out: Optional[np.ndarray] = None) -> np.ndarray:
    """The fine coefficients (2 n - 3 along ``axis``) of the same spline as ``coarse`` (n): the
    taps 1 4 6 4 1 / 8 (``_core.spline_subdivide``; ``reference.spline_subdivide``); into ``out``
    where given."""
    c = np.ascontiguousarray(coarse, dtype=np.float64)
    outer, n, inner = _along(c, axis)
    shape = c.shape[:axis] + (2 * n - 3,) + c.shape[axis + 1:]
    fine = np.empty(shape) if out is None else out
    _core.spline_subdivide(c.reshape(outer, n, inner), fine.reshape(outer, 2 * n - 3, inner))
    return fine


def restrict(fine: np.ndarray, axis: int, out: Optional[np.ndarray] = None) -> np.ndarray:
    """The transpose of ``subdivide``: (2 n - 3 along ``axis``) -> n; into ``out`` where given."""
    f = np.ascontiguousarray(fine, dtype=np.float64)
    outer, nf, inner = _along(f, axis)
    n = (nf + 3) // 2
    shape = f.shape[:axis] + (n,) + f.shape[axis + 1:]
    coarse = np.empty(shape) if out is None else out
    _core.spline_restrict(f.reshape(outer, nf, inner), coarse.reshape(outer, n, inner))
    return coarse


def _transfer(x: np.ndarray, D: int, fine: bool, buffers: Buffers = None) -> np.ndarray:
    """x subdivided (``fine``) or restricted along every axis; each step into buffers(name, shape)
    where given (work arrays kept between V-cycles), else new arrays."""
    for a in range(D):
        n = x.shape[a]
        shape = x.shape[:a] + ((2 * n - 3) if fine else (n + 3) // 2,) + x.shape[a + 1:]
        out = None if buffers is None else buffers(f"{'fine' if fine else 'coarse'}{a}", shape)
        x = subdivide(x, a, out) if fine else restrict(x, a, out)
    return x


def _prolong(x: np.ndarray, D: int, buffers: Buffers = None) -> np.ndarray:
    return _transfer(x, D, True, buffers)


def _restrict(x: np.ndarray, D: int, buffers: Buffers = None) -> np.ndarray:
    return _transfer(x, D, False, buffers)


def normal_equations(grid: Grid, points: np.ndarray, values: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(B^T B as a stencil (7^D, N), B^T values (N, C)) of C-contiguous float64 points and values."""
    N = math.prod(grid.shape)
    st = np.zeros((7 ** len(grid.nint), N))
    rhs = np.zeros((N, values.shape[1]))
    _core.spline_normal(grid.args(), points, values, None, st, rhs)
    return st, rhs


def values_at(grid: Grid, coef: np.ndarray, points: np.ndarray) -> np.ndarray:
    """The spline (coefficients (N, C)) at C-contiguous float64 points: (P, C)."""
    out = np.empty((points.shape[0], coef.shape[1]))
    _core.spline_values(grid.args(), points, np.ascontiguousarray(coef), out)
    return out


# ---- one level's operator and the multigrid preconditioner --------------------------------------


class _Level:
    """A = data + lam * penalty on one grid, with what its smoother needs. ``own``: A is ``data``
    itself, changed in place (a new lambda adds (new - old) * penalty: no copy per lambda)."""

    def __init__(self, grid: Grid, data: np.ndarray, penalty: Optional[np.ndarray], lam: float,
                 start: Optional[np.ndarray] = None, own: bool = False):
        self.grid = grid
        self.shape = grid.shape
        self.pen = penalty  # (None: added a block at a time where lambda changes)
        self.A = data if own else data.copy()
        self.lam = 0.0
        self.start = start  # the Lanczos steps' start: the Ritz vector at a neighbouring lambda
        self._lmaxes: Dict[float, float] = {}  # per lambda solved: its lmax
        self._A32: Optional[np.ndarray] = None
        self._fresh32 = False
        self._buffers: Dict[str, np.ndarray] = {}
        self._lmax: Optional[float] = None
        self.set_lambda(lam, force=True)

    def set_lambda(self, lam: float, force: bool = False) -> None:
        """A = data + lam * penalty, in place."""
        if lam == self.lam and not force:
            return
        if self._lmax is not None:
            self._lmaxes[self.lam] = self._lmax
        if lam != self.lam:
            step = lam - self.lam
            if self.pen is None:
                add_penalty(self.grid, step, self.A)
            else:
                self.A += step * self.pen
        self.lam = lam
        self.changed()
        self._lmax = self._lmaxes.get(lam)

    def changed(self) -> None:
        """After A changed in place: its diagonal, factorisation and float32 copy follow (lmax
        stays: the caller decides)."""
        diag = self.A[(self.A.shape[0] - 1) // 2]
        self.dinv = 1.0 / np.where(diag > 0, diag, 1.0)
        self._chol = None
        self._fresh32 = False

    def single(self) -> np.ndarray:
        """A's float32 copy (the smoother's: half the memory traffic of the stencil products)."""
        if not self._fresh32:
            if self._A32 is None:
                self._A32 = self.A.astype(np.float32)
            else:
                np.copyto(self._A32, self.A, casting="same_kind")
            self._fresh32 = True
        return self._A32

    def apply(self, x: np.ndarray, single: bool = False) -> np.ndarray:
        """A x; ``single``: through A's float32 copy. In a buffer of the level's, valid until the
        next product (CG reads each at once)."""
        flat = np.ascontiguousarray(x.reshape(self.A.shape[1], -1))
        y = self.buffer("Ax", flat.shape)
        _core.stencil_apply(list(self.shape), self.single() if single else self.A, flat, y)
        return y.reshape(x.shape)

    def residual(self, b: np.ndarray, x: np.ndarray) -> np.ndarray:
        """b - A x (b and x (N, C)): a new array."""
        y = np.empty_like(b)
        _core.stencil_apply(list(self.shape), self.A, np.ascontiguousarray(x), y, np.ascontiguousarray(b))
        return y

    def lmax(self) -> float:
        """The largest eigenvalue of D^-1 A (with a 10% margin): the largest Ritz value of a few
        Lanczos steps on D^-1/2 A D^-1/2 (closer from below than as many power steps) from a
        random vector, plus ``start`` (the Ritz vector at a neighbouring lambda) where given; the
        Ritz vector is kept as ``start``."""
        if self._lmax is None:
            from scipy.linalg import eigh_tridiagonal

            N = self.A.shape[1]
            basis = np.empty((LANCZOS_STEPS, N))  # (every step in place: no temporaries)
            q = basis[0]
            np.random.default_rng(1).standard_normal(out=q)
            q /= np.linalg.norm(q)
            if self.start is not None:
                q += self.start[:, 0] / max(float(np.linalg.norm(self.start)), 1e-300)
                q /= max(float(np.linalg.norm(q)), 1e-300)
            root = np.sqrt(self.dinv)
            single = self.single()
            t, w = np.empty((N, 1)), np.empty((N, 1))
            alphas, betas = [], []
            beta = 0.0
            for k in range(LANCZOS_STEPS):
                q = basis[k]
                np.multiply(root, q, out=t[:, 0])
                _core.stencil_apply(list(self.shape), single, t, w)
                v = w[:, 0]
                v *= root
                alpha = float(np.dot(q, v))
                v -= np.multiply(q, alpha, out=t[:, 0])
                if k:
                    v -= np.multiply(basis[k - 1], beta, out=t[:, 0])
                alphas.append(alpha)
                beta = float(np.linalg.norm(v))
                if not beta > 1e-12 * abs(alpha) or k + 1 == LANCZOS_STEPS:  # (an invariant subspace: exact)
                    break
                betas.append(beta)
                np.divide(v, beta, out=basis[k + 1])
            m = len(alphas)
            vals, vecs = eigh_tridiagonal(np.array(alphas), np.array(betas[:m - 1]))
            self._lmax = 1.1 * float(vals[-1])
            self.start = (vecs[:, -1] @ basis[:m])[:, None]
        return self._lmax

    def bandwidth(self) -> int:
        """Half-bandwidth of A in the flat coefficient order."""
        return _bandwidth(self.shape)

    def direct(self, work: float = 0.0) -> bool:
        """Whether a factorisation is cheap enough (``_direct_work`` <= work, DIRECT_WORK)."""
        return _direct_work(self.shape)[0] <= (work or DIRECT_WORK)

    def solve_exact(self, b: np.ndarray) -> np.ndarray:
        """A x = b by a banded Cholesky factorisation (LAPACK pbtrf), kept for the next call; on
        one LAPACK thread (every direct level is small). Banded even where a dense factorisation
        has fewer flops: pbtrf runs at potrf's rate, ten times faster than its flop count gives
        on a 19 x 19 grid and four times on an 11^3 one."""
        import scipy.linalg as sl

        if self._chol is None:
            N = self.A.shape[1]
            rows, shifts, vals = _upper_entries(self.A, self.shape)
            bw = self.bandwidth()
            ab = np.zeros((bw + 1, N))  # upper form: ab[bw + i - j, j] = A[i, j]
            ab[bw - shifts, rows + shifts] = vals
            ab[bw] += 1e-13 * max(float(ab[bw].max()), 1e-300)
            with _blas.one_lapack_thread():
                self._chol = sl.cholesky_banded(ab, lower=False, check_finite=False)
        with _blas.one_lapack_thread():
            return sl.cho_solve_banded((self._chol, False), b, check_finite=False)

    def buffer(self, name: str, shape: Tuple[int, ...]) -> np.ndarray:
        """A work array of this level kept between calls (no fresh pages per V-cycle)."""
        buf = self._buffers.get(name)
        if buf is None or buf.shape != shape:
            buf = self._buffers[name] = np.empty(shape)
        return buf

    def smooth(self, b: np.ndarray, x: Optional[np.ndarray], residual: bool = False,
               out: Optional[np.ndarray] = None):
        """CHEB_DEGREE Chebyshev steps on D^-1 A over [lmax / CHEB_RATIO, lmax] from x (None: zero,
        the result in ``out`` or a new array; else x updated in place), through A's float32 copy
        (``_core.spline_chebyshev``); ``residual``: also return b - A x (one more product; in a
        buffer of the level's, valid until its next smoothing)."""
        hi = self.lmax()
        lo = hi / CHEB_RATIO
        b = np.ascontiguousarray(b)
        out = (np.empty_like(b) if out is None else out) if x is None else x
        res, work = self.buffer("res", b.shape), self.buffer("work", (2,) + b.shape)
        _core.spline_chebyshev(list(self.shape), self.single(), self.dinv, b, CHEB_DEGREE, (hi + lo) / 2,
                               (hi - lo) / 2, x is None, residual, out, res, work)
        return (out, res) if residual else out


def _upper_entries(A: np.ndarray, shape: Sequence[int]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The entries A[i, i + shift], shift >= 0, of a stencil (7^D, N) whose neighbour lies inside
    the grid: (rows i, shifts, values)."""
    rows, shifts, offsets = _upper_pattern(tuple(shape))
    return rows, shifts, A[offsets, rows]


@functools.lru_cache(maxsize=8)
def _upper_pattern(shape: Tuple[int, ...]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, shifts, stencil offsets) of ``_upper_entries`` on a grid of this shape."""
    D = len(shape)
    N = math.prod(shape)
    offsets = np.array(np.unravel_index(np.arange(7**D), (7,) * D)) - 3  # (D, 7^D)
    strides = np.array([math.prod(shape[a + 1:]) for a in range(D)])
    shift = strides @ offsets  # (7^D,)
    up = np.flatnonzero(shift >= 0)
    idx = np.unravel_index(np.arange(N), shape)
    inside = np.ones((up.size, N), bool)
    for a in range(D):
        nb = idx[a][None, :] + offsets[a, up][:, None]
        inside &= (nb >= 0) & (nb < shape[a])
    o, i = np.nonzero(inside)
    return i, shift[up[o]], up[o]


def _vcycle(levels: List[_Level], b: np.ndarray, top: bool = True) -> np.ndarray:
    """One V-cycle over levels[0] (coarsest) .. levels[-1] for A x = b (b (N, C)): a new array
    (``top``), else one of the level's buffers (the caller's prolongation reads it at once)."""
    lev = levels[-1]
    if len(levels) == 1:
        return lev.solve_exact(b)
    D = len(lev.shape)
    C = b.shape[1]
    x, r = lev.smooth(b, None, residual=True, out=None if top else lev.buffer("x", b.shape))
    rc = _restrict(r.reshape(lev.shape + (C,)), D, lev.buffer).reshape(-1, C)
    xc = _vcycle(levels[:-1], rc, top=False)
    x += _prolong(xc.reshape(levels[-2].shape + (C,)), D, lev.buffer).reshape(-1, C)
    return lev.smooth(b, x)


def _pcg(levels: List[_Level], b: np.ndarray, x0: Optional[np.ndarray], tol: float, maxiter: int,
         reduction: float = WARM_REDUCTION, probe: int = 0, start: Optional[List[float]] = None
         ) -> Tuple[np.ndarray, int, float]:
    """CG on levels[-1]'s system, preconditioned by a V-cycle (the coarsest level exactly).
    ``probe``: after that many iterations, a solve behind the geometric pace that reaches its
    tolerance in ``maxiter`` stops there, reported as ``maxiter`` iterations (too slow); one on
    pace goes on (CG restarted from there). ``start``: gets the start's relative residual appended.
    Returns (x, iterations, the largest relative residual ||b - A x|| / ||b|| of the channels)."""
    from .krylov import cdot, pcg

    lev = levels[-1]
    if lev.direct():
        return lev.solve_exact(b), 0, 0.0
    levels = levels[_first_level([v.shape for v in levels]):]
    bn = np.sqrt(cdot(b, b))
    r0 = b if x0 is None else lev.residual(b, x0)
    rn = np.sqrt(cdot(r0, r0))
    ok = (bn > 0) & (rn > 0)
    if start is not None:
        start.append(float(np.min(rn[ok] / bn[ok])) if np.any(ok) else 0.0)
    x = np.zeros_like(b) if x0 is None else x0.copy()
    if not np.any(ok):
        x[:, bn == 0] = 0.0
        return x, 0, 0.0
    if x0 is not None:  # a warm start (a neighbouring lambda or level) still takes a real step
        tol = max(min(tol, reduction * float(np.min(rn[ok] / bn[ok]))), 1e-13)
    # CG on the correction (A d = r0: no second product for the start's residual) to tol times ||b||
    tol_r = tol * float(np.min(bn[ok] / rn[ok]))
    vcycle = lambda r: _vcycle(levels, r)  # noqa: E731
    d, it, rel = pcg(lev.apply, vcycle, r0, None, tol_r, probe if 0 < probe < maxiter else maxiter)
    if it < maxiter and np.any((rel > tol_r) & ok):  # the probe's iterations done, not converged
        if float(np.max(rel[ok])) > tol_r ** (it / maxiter):
            it = maxiter  # behind the pace: too slow
        else:
            d, more, rel = pcg(lev.apply, vcycle, r0, d, tol_r, maxiter - it)
            it += more
    x += d
    x[:, bn == 0] = 0.0
    return x, it, float(np.max(np.where(bn > 0, rel * rn / np.where(bn > 0, bn, 1.0), 0.0)))


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
        out = self.coef.astype(np.float64)
        grid = self.grid
        for a, c in enumerate(coords):
            c = _validate.coords_1d(f"coords[{a}]", c, dtype=np.float64, unit=False)
            self._check_inside(f"coords[{a}]", c, axis=a)
            _validate.check_array_budget(f"coords[{a}]", (c.size, grid.nint[a] + 3), 8,
                                         "the evaluation matrix of this axis: ask for fewer coordinates")
            E = axis_matrix(grid.nint[a], 0.0, grid.h, self._unit(c, a))
            out = np.moveaxis(np.tensordot(E, np.moveaxis(out, a, 0), axes=(1, 0)), 0, a)
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
        self.tight_tol: Dict[int, float] = {}  # per level: the residual its last solve held to cg_tol reaches
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
        return _direct_work(self.grids[l].shape)[0] <= DIRECT_WORK

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
        self.tight_tol[l] = self.cg_tol if x0 is None or not start else max(
            min(self.cg_tol, EXPLORE_REDUCTION * start[0]), 1e-13)
        return None if lower and it >= LOWER_MAXITER else x

    def refine(self, l: int, lam: float, x: np.ndarray) -> np.ndarray:
        """The fit at level l and lam from x (its last, rough solve) to the residual that solve
        would have reached held to cg_tol; every solve after this is held to cg_tol (the noise
        test's steps compare close errors)."""
        self.loose = False
        if self.direct(l):
            return x
        self.solved[l] = lam
        return _pcg(self._levels(l, lam), self.rhs[l], x, self.tight_tol.get(l, self.cg_tol), CG_MAXITER, 1.0)[0]

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


def _first_level(shapes: Sequence[Sequence[int]]) -> int:
    """The coarsest of these levels a solve of the last one uses: the last itself when it is
    factorised, else the V-cycle's coarsest (the finest level cheap to factorise)."""
    if _direct_work(shapes[-1])[0] <= DIRECT_WORK:
        return len(shapes) - 1
    return max([k for k, s in enumerate(shapes) if _direct_work(s)[0] <= VCYCLE_DIRECT_WORK], default=0)


def _bandwidth(shape: Sequence[int]) -> int:
    return 3 * sum(math.prod(shape[a + 1:]) for a in range(len(shape)))


@functools.lru_cache(maxsize=64)
def _direct_work(shape: Tuple[int, ...]) -> Tuple[float, str]:
    """A level's size in the choice between a factorisation and CG (levels up to DIRECT_WORK are
    factorised, always banded): N bw^2, or N^3 / 3 / DENSE_SPEEDUP where that is smaller; and
    which of the two it is."""
    N = math.prod(shape)
    banded = float(N) * _bandwidth(shape) ** 2
    dense = float(N) ** 3 / 3 / DENSE_SPEEDUP
    return (banded, "banded") if banded <= dense else (dense, "dense")


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
