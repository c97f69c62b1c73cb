"""The nested cubic B-spline grids of :mod:`kronpe.solvers.spline` and the multigrid solve of one
level's system (the decisions are that module's docstring's): the grids and the thin-plate
penalty's stencil, the transfers between levels, each level's operator with its smoother, the
V-cycle and the preconditioned CG."""
from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import _core
from .._adapters import blas as _blas

CHEB_DEGREE = 4  # Chebyshev steps per smoothing (why 4: the docstring of kronpe.solvers.spline)
CHEB_RATIO = 30.0  # the smoother damps D^-1 A's spectrum in [lmax / CHEB_RATIO, lmax]
LANCZOS_STEPS = 8  # Lanczos steps for the smoother's lmax (too few underestimate it, and CG stalls)
WARM_REDUCTION = 0.01  # a warm-started solve reduces its initial residual at least this much
DIRECT_WORK = 3e7  # N bw^2 of the largest level solved by a factorisation (a 35 x 35 grid: 1.4e7)
VCYCLE_DIRECT_WORK = 3e6  # ... and of a V-cycle's coarsest level (a 19 x 19 grid: 1.3e6)
DENSE_SPEEDUP = 30.0  # the size rule counts N^3 / 3 at this discount (3-D levels up to 11^3 factorised)
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
    factors = [np.ascontiguousarray(np.stack([scale * w * grams[i][o[i]].T if i == 0 else grams[i][o[i]].T
                                              for o, w in zip(orders, weights)])) for i in range(D)]  # (T, 7, n_i)
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
                _product(lt, factors[-1][:, o, :], part)
                block += part
            else:
                _product(lt, factors[-1][:, o, :], block)


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

    def apply(self, x: np.ndarray) -> np.ndarray:
        """A x, in a buffer of the level's, valid until the next product (CG reads each at once)."""
        flat = np.ascontiguousarray(x.reshape(self.A.shape[1], -1))
        y = self.buffer("Ax", flat.shape)
        _core.stencil_apply(list(self.shape), self.A, flat, y)
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
            q /= _norm(q)
            if self.start is not None:
                q += self.start[:, 0] / max(_norm(np.ascontiguousarray(self.start[:, 0])), 1e-300)
                q /= max(_norm(q), 1e-300)
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
                alpha = _core.dot(q, v)
                v -= np.multiply(q, alpha, out=t[:, 0])
                if k:
                    v -= np.multiply(basis[k - 1], beta, out=t[:, 0])
                alphas.append(alpha)
                beta = _norm(v)
                if not beta > 1e-12 * abs(alpha) or k + 1 == LANCZOS_STEPS:  # (an invariant subspace: exact)
                    break
                betas.append(beta)
                np.divide(v, beta, out=basis[k + 1])
            m = len(alphas)
            vals, vecs = eigh_tridiagonal(np.array(alphas), np.array(betas[:m - 1]))
            self._lmax = 1.1 * float(vals[-1])
            self.start = np.einsum("k,kn->n", vecs[:, -1], basis[:m])[:, None]
        return self._lmax

    def bandwidth(self) -> int:
        """Half-bandwidth of A in the flat coefficient order."""
        return _bandwidth(self.shape)

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
        # (lmax > 0 wherever a solve smooths: D^-1 A is zero only where A is, on a level without
        # points at lambda 0, and there b = B^T values is zero too, which _pcg returns before smoothing)
        assert math.isfinite(hi) and hi > 0, f"the smoother needs D^-1 A's largest eigenvalue > 0, got {hi}"
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
    if _factorised(lev.shape):
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
    if x0 is not None:
        tol = _warm_tol(tol, reduction, float(np.min(rn[ok] / bn[ok])))
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


def _warm_tol(tol: float, reduction: float, start: float) -> float:
    """The tolerance of a warm-started solve (from a neighbouring lambda or level) whose start has
    the relative residual ``start``: tol, or ``reduction`` times start where smaller (a warm start
    still takes a real step), at least 1e-13."""
    return max(min(tol, reduction * start), 1e-13)


def _first_level(shapes: Sequence[Sequence[int]]) -> int:
    """The coarsest of these levels a solve of the last one uses: the last itself when it is
    factorised, else the V-cycle's coarsest (the finest level cheap to factorise)."""
    if _factorised(shapes[-1]):
        return len(shapes) - 1
    return max([k for k, s in enumerate(shapes) if _factor_work(tuple(s)) <= VCYCLE_DIRECT_WORK], default=0)


def _bandwidth(shape: Sequence[int]) -> int:
    return 3 * sum(math.prod(shape[a + 1:]) for a in range(len(shape)))


def _product(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
    """out = a @ b for small float64 matrices with contiguous rows: kronpe's packed GEMM on the
    calling thread where it runs, else NumPy's. (NumPy's BLAS would wake its own thread pool,
    whose workers then spin beside the teams of the solver's kernels on the same cores: a
    terrain fit on two threads took 1.4x its time on one.)"""
    if _core._tuning.packed_gemm_supported():
        _core.packed_gemm(a, b, out, False, False, 1)
    else:
        np.matmul(a, b, out=out)


def _norm(v: np.ndarray) -> float:
    """The 2-norm of a C-contiguous float64 vector by kronpe's kernel, on kronpe's threads (the
    BLAS's own would wake a second thread pool beside the smoother's team, on the same cores)."""
    return math.sqrt(_core.dot(v, v))


@functools.lru_cache(maxsize=64)
def _factor_work(shape: Tuple[int, ...]) -> float:
    """A level's size in the choice between a factorisation and CG: N bw^2, or N^3 / 3 /
    DENSE_SPEEDUP where that is smaller (the factorisation itself is always banded)."""
    N = math.prod(shape)
    return min(float(N) * _bandwidth(shape) ** 2, float(N) ** 3 / 3 / DENSE_SPEEDUP)


def _factorised(shape: Sequence[int]) -> bool:
    """Whether a level of this shape is solved by a factorisation (``_factor_work`` up to
    DIRECT_WORK) rather than by CG: the one rule of the host's and the device's solves."""
    return _factor_work(tuple(shape)) <= DIRECT_WORK
