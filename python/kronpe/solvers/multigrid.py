"""Multigrid-preconditioned CG for the thin-plate smoothing systems of grids with holes and
scattered samples (MATH.md 3.6), on grids of 1 to 3 axes:

    (S + lam R) x = b,     R = DifferencePenalty(2, mixed=True)

with S the data term: a diagonal (a mask, points on the nodes) or any symmetric product (a
blending matrix's B^T B), given as a function. The compiled kernels (``kronpe._core.thin_plate*``,
``grid_transfer``; NumPy references in :mod:`kronpe.reference`) apply ``m x + lam R x`` for a
diagonal m in one pass and carry out the smoother's steps fused. Decisions (documented once, here):

- **Hierarchy.** Each coarser grid halves every axis of >= 3 nodes (coarse node j at fine node
  2 j, n -> n // 2 + 1) until at most ``COARSEST`` nodes remain, solved there by the explicit
  Cholesky factorisation. Transfers are linear interpolation P and its transpose. The coarse
  operator is rediscretised, not a Galerkin product: ``m_c = P^T m`` (the lumped Galerkin data
  term) and ``lam_c = lam * 2^c / 16`` with c the number of halved axes (P^T P ~ 2^c I, and the
  fourth differences of R shrink 16-fold when the spacing doubles), so every level is the same
  stencil and the same kernel.
- **Smoother**: Chebyshev polynomials of degree ``DEGREE`` in diag(A)^-1 A over
  [LMAX / ALPHA, LMAX], LMAX = 4 (Gershgorin's bound for the thin-plate stencil in 1 to 3 axes,
  which holds with any m >= 0); the same polynomial before and after the coarse correction,
  so the V-cycle is a symmetric preconditioner. They vectorise (no colouring) and need no
  eigenvalue estimate.
- **Krylov**: CG preconditioned by one V-cycle, in the working precision of the vectors
  (float32 for images) with float64 dot products. Stopping: the preconditioned residual z = M r
  estimates the error; stop when ``||z|| <= tol * ||x||``. (The residual of the normal
  equations is a poor guide for small lam: there it is small while the error in the holes is
  still large.)
- **Non-diagonal data terms** (points off the nodes): CG runs on the exact operator; the
  hierarchy uses its lumped diagonal (row sums of B^T B, i.e. B^T 1).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Callable, List, Optional, Tuple

import numpy as np

from .. import _core

Array = np.ndarray
DEGREE = 3
LMAX = 4.0
ALPHA = 8.0
COARSEST = 64
MIN_NODES = 3


def thin_plate_apply(x: Array, m: Array, lam: float, out: Optional[Array] = None) -> Array:
    """``m * x + lam * R x`` (R the thin-plate penalty) on a grid of 1 to 3 axes, x and m of one
    float dtype and shape, any memory layout (copied to C order when not in it)."""
    x = np.ascontiguousarray(x)
    m = np.ascontiguousarray(m)
    out = np.empty_like(x) if out is None else out
    _core.thin_plate(x, m, float(lam), out)
    return out


def _coarse_shapes(shape: Tuple[int, ...], axes: Tuple[int, ...]) -> List[Tuple[int, ...]]:
    """The shapes after halving each of ``axes`` in turn."""
    out, s = [], list(shape)
    for a in axes:
        s[a] = s[a] // 2 + 1
        out.append(tuple(s))
    return out


def restrict(f: Array, axes: Tuple[int, ...], bufs: Optional[List[Array]] = None) -> Array:
    """``P^T f`` along ``axes`` (each n -> n // 2 + 1), into ``bufs`` (one per axis) if given."""
    for i, shape in enumerate(_coarse_shapes(f.shape, axes)):
        c = np.empty(shape, f.dtype) if bufs is None else bufs[i]
        _core.grid_transfer(f, c, axes[i], True)
        f = c
    return f


def prolong(c: Array, axes: Tuple[int, ...], shape: Tuple[int, ...], bufs: Optional[List[Array]] = None,
            out: Optional[Array] = None, add: bool = False) -> Array:
    """``P c`` along ``axes`` up to ``shape``, through ``bufs`` (one per axis, reversed) if given,
    the last pass into ``out`` if given (``add``: ``out += P c``, in that pass)."""
    shapes = [tuple(shape)] + _coarse_shapes(shape, axes)[:-1]
    if not axes:  # P is the identity
        if out is None:
            return c.copy()
        if add:
            out += c
        else:
            np.copyto(out, c)
        return out
    for i, a in enumerate(reversed(axes)):
        last = i == len(axes) - 1
        if last and out is not None:
            f = out
        else:
            f = np.empty(shapes[len(axes) - 1 - i], c.dtype) if bufs is None else bufs[i]
        _core.grid_transfer(c, f, a, False, add and last and out is not None)
        c = f
    return c


def _chebyshev_coefficients(degree: int) -> Tuple[float, List[Tuple[float, float]]]:
    """theta and the (c1, c2) of each later step of the Chebyshev smoother over
    [LMAX / ALPHA, LMAX]."""
    lo, hi = LMAX / ALPHA, LMAX
    theta, delta = (hi + lo) / 2, (hi - lo) / 2
    sigma = theta / delta
    rho = 1.0 / sigma
    steps = []
    for _ in range(degree - 1):
        rho_n = 1.0 / (2.0 * sigma - rho)
        steps.append((rho_n * rho, 2.0 * rho_n / delta))
        rho = rho_n
    return theta, steps


THETA, STEPS = _chebyshev_coefficients(DEGREE)


class _Level:
    def __init__(self, m: Array):
        self.m = np.ascontiguousarray(m)
        self.lam = 0.0
        self.shape = m.shape
        self.axes = tuple(a for a, n in enumerate(m.shape) if n >= MIN_NODES)
        # work arrays, allocated once: x and b of this level's V-cycle, the residual, the
        # smoother's vectors, the transfers' intermediate grids
        self.x, self.b, self.res, self.r, self.d, self.d2 = (np.empty_like(self.m) for _ in range(6))
        self.fx = self.fr = None  # full multigrid's iterate and residual (allocated when first needed)
        cs = _coarse_shapes(self.shape, self.axes)
        self.down = [np.empty(s, m.dtype) for s in cs]
        self.up = [np.empty(s, m.dtype) for s in ([tuple(self.shape)] + cs[:-1])[::-1]]

    def smooth(self, x: Array, b: Array, zero: bool = False) -> None:
        """DEGREE Chebyshev steps on x (in place; ``zero``: x holds zeros)."""
        r, d, d2 = self.r, self.d, self.d2
        if zero:
            x.fill(0)
        _core.thin_plate_cheb_start(None if zero else x, b, self.m, self.lam, THETA, r, d)
        for c1, c2 in STEPS:
            _core.thin_plate_cheb_step(d, r, x, self.m, self.lam, c1, c2, d2)
            d, d2 = d2, d
        x += d


@lru_cache(maxsize=8)
def _dense_penalty(shape: Tuple[int, ...]) -> Array:
    """R as a dense (n, n) matrix (the coarsest grids only: n <= COARSEST)."""
    from .penalty import DifferencePenalty

    n = int(np.prod(shape))
    unit = np.eye(n).reshape(tuple(shape) + (n,))  # column j: the j-th unit grid, as a trailing channel
    R = DifferencePenalty(2, mixed=True).apply(unit, len(shape)).reshape(n, n)
    R.setflags(write=False)
    return R


def _spd_inverse(A: Array) -> Array:
    """The inverse of a small symmetric positive definite matrix by Gauss-Jordan elimination in
    NumPy's own loops: no LAPACK call, whose threads spin against the kernels on a busy machine
    (a 176 x 176 Cholesky factorisation took 70 ms there)."""
    n = A.shape[0]
    M = np.concatenate([A, np.eye(n)], axis=1)
    for k in range(n):
        M[k] /= M[k, k]
        col = M[:, k].copy()
        col[k] = 0.0
        M -= np.multiply.outer(col, M[k])
    return np.ascontiguousarray(M[:, n:])


class ThinPlateMG:
    """The multigrid hierarchy of ``diag(m) + lam R`` (module docstring); ``m`` (grid) >= 0.
    ``set_ridge(lam)`` (or the constructor's ``lam``) fixes lam; the hierarchy of m is kept,
    so a sweep over lam costs one small factorisation per value."""

    def __init__(self, m: Array, lam: Optional[float] = None, dtype=np.float32):
        m = np.ascontiguousarray(m, dtype=dtype)
        self.levels = [_Level(m)]
        while self.levels[-1].m.size > COARSEST and self.levels[-1].axes:
            L = self.levels[-1]
            self.levels.append(_Level(restrict(L.m, L.axes)))
        self.lam = None
        if lam is not None:
            self.set_ridge(lam)

    def set_ridge(self, lam: float) -> "ThinPlateMG":
        self.lam = float(lam)
        scale = 1.0
        for L in self.levels:
            L.lam = self.lam * scale
            scale *= 2.0 ** len(L.axes) / 16.0
        last = self.levels[-1]
        A = last.lam * _dense_penalty(last.shape) + np.diag(last.m.ravel().astype(np.float64))
        A += 1e-10 * max(float(np.abs(A).max()), 1e-300) * np.eye(A.shape[0])  # R's null space where m == 0
        self._inverse = _spd_inverse(A)
        return self

    def vcycle(self, b: Array, level: int = 0) -> Array:
        """One V-cycle from zero: an approximation of A^-1 b (symmetric in b). The result lives
        in the level's work array ``x`` (overwritten by the next V-cycle)."""
        L = self.levels[level]
        if level == len(self.levels) - 1:
            L.x.reshape(-1)[:] = np.einsum("ij,j->i", self._inverse, b.reshape(-1).astype(np.float64))
            return L.x
        x = L.x
        L.smooth(x, b, zero=True)
        _core.thin_plate(x, L.m, L.lam, L.res, "residual", b)
        C = self.levels[level + 1]
        restrict(L.res, L.axes, L.down[:-1] + [C.b])
        ec = self.vcycle(C.b, level + 1)
        prolong(ec, L.axes, L.shape, L.up, out=x, add=True)
        L.smooth(x, b)
        return x

    def fmg(self, b: Array, out: Optional[Array] = None, cycles: int = 1) -> Array:
        """Full multigrid from zero: b restricted down to the coarsest grid, solved there, then on
        each finer grid the prolonged solution corrected by ``cycles`` V-cycles. An approximation
        of A^-1 b, close to each grid's discretisation error, at the cost of about 4/3
        ``cycles`` V-cycles: the start of CG (module docstring)."""
        levels = self.levels
        b = np.ascontiguousarray(b, dtype=levels[0].m.dtype)
        for L in levels:
            if L.fx is None:  # full multigrid's iterate and residual on each level
                L.fx, L.fr = np.empty_like(L.m), np.empty_like(L.m)
        bs = [b]  # the coarse right-hand sides live in each level's b: a V-cycle on a level
        for L, C in zip(levels[:-1], levels[1:]):  # writes only the b's below it
            restrict(bs[-1], L.axes, L.down[:-1] + [C.b])
            bs.append(C.b)
        x = levels[-1].fx
        x.reshape(-1)[:] = np.einsum("ij,j->i", self._inverse, bs[-1].reshape(-1).astype(np.float64))
        for lev in range(len(levels) - 2, -1, -1):
            L = levels[lev]
            xf = out if lev == 0 and out is not None else L.fx
            prolong(x, L.axes, L.shape, L.up, out=xf)
            for _ in range(cycles):
                _core.thin_plate(xf, L.m, L.lam, L.fr, "residual", bs[lev])
                xf += self.vcycle(L.fr, lev)
            x = xf
        if out is not None and x is not out:  # a single level
            np.copyto(out, x)
            return out
        return x  # a work array of the finest level, overwritten by the next call

    def solve(self, b: Array, x0: Optional[Array] = None, tol: float = 1e-3, maxiter: int = 100,
              operator: Optional[Callable[[Array], Array]] = None, scale: Optional[float] = None
              ) -> Tuple[Array, int, float]:
        """PCG for A x = b (A = ``operator`` or the hierarchy's finest matrix) from ``x0`` (None: the
        full multigrid approximation, ``fmg``), stopped when
        ||z|| <= tol * ``scale`` (default ||x||), z the preconditioned residual; tol <= 0: after
        exactly ``maxiter`` iterations. Returns (x, iterations, ||z|| / scale at the end)."""
        L = self.levels[0]
        dt = L.m.dtype
        b = np.ascontiguousarray(b, dtype=dt)
        Ap = np.empty_like(b)
        if operator is None:
            def operator(v: Array) -> Array:
                _core.thin_plate(v, L.m, L.lam, Ap)
                return Ap
        x = self.fmg(b, np.empty_like(b)) if x0 is None else np.array(x0, dtype=dt, copy=True).reshape(b.shape)
        r = b - operator(x)
        z = self.vcycle(r).copy()
        rel = self._error(x, z, scale)
        if tol > 0 and rel <= tol:
            return x, 0, rel
        p = z.copy()
        tmp = np.empty_like(b)
        rz = _dot(r, z)
        it = 0
        for it in range(1, maxiter + 1):
            Ap = operator(p)
            pAp = _dot(p, Ap)
            if not pAp > 0:
                break
            a = np.asarray(rz / pAp, dt)
            x += np.multiply(p, a, out=tmp)
            r -= np.multiply(Ap, a, out=tmp)
            if it == maxiter and tol <= 0:
                break  # a fixed number of iterations: no error estimate wanted (sweeps)
            np.copyto(z, self.vcycle(r))
            rel = self._error(x, z, scale)
            if rel <= tol:
                break
            rz_new = _dot(r, z)
            p *= np.asarray(rz_new / rz, dt)
            p += z
            rz = rz_new
        return x, it, rel

    @staticmethod
    def _error(x: Array, z: Array, scale: Optional[float]) -> float:
        """||z|| / scale (default ||x||): the stopping measure."""
        xn = np.sqrt(_dot(x, x)) if scale is None else scale
        zn = np.sqrt(_dot(z, z))
        return float(zn / xn) if xn > 0 else (0.0 if zn == 0 else np.inf)


def _dot(a: Array, b: Array) -> float:
    # the compiled loop accumulating in float64 (not BLAS: its threads spin against the kernels'
    # on a busy machine, 20x slower here); NumPy's pairwise sum for other layouts
    if a.dtype == b.dtype and a.flags.c_contiguous and b.flags.c_contiguous and a.shape == b.shape:
        return _core.dot(a, b)
    return float(np.sum(a * b, dtype=np.float64))
