"""Multigrid-preconditioned CG for the thin-plate smoothing systems of grids with holes and
scattered samples (docs/math/penalties.rst, "Multigrid"), on grids of 1 to 3 axes:

    (S + lam R) x = b,     R = DifferencePenalty(2, mixed=True[, boundary="reflect"])

or R = (sum_i w_i L_i)^q, q = 2, 3 (L_i the Neumann Laplacian along axis i: the mirrored
boundary, DifferencePenalty(q, mixed=True, boundary="reflect", weights=w); ``order=3`` or
``weights=`` below: the Laplacian-power form),

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
  which holds with any m >= 0; for the Laplacian-power form ``chebyshev_lmax`` computes it);
  the same polynomial before and after the coarse correction, so the V-cycle is a symmetric
  preconditioner. They vectorise (no colouring) and need no eigenvalue estimate. Order 3
  (POWER_SMOOTHER) keeps degree 3 over [lmax / 8, lmax]: higher degrees cut the iterations of a
  solve (from 11 to 4 at degree 6 on a 32 x 64 x 64 video) but not the time of the default fit,
  whose lambda sweep and weight choice run fixed numbers of iterations.
- **Laplacian-power form**: the coarse grids' weights are the fine ones / 4 along each halved
  axis and lam_c = lam 2^c (the same rediscretisation, axis by axis); R is applied as q weighted
  7-point Laplacian passes over rings of rows (kronpe/smooth.h), diag(R) from the axes'
  diag(L^a): an order-3 V-cycle costs half of one with the banded order-2 thin-plate stencil.
- **Krylov**: CG preconditioned by one V-cycle, in the working precision of the vectors
  (float32 for images) with float64 dot products. Stopping: the preconditioned residual z = M r
  estimates the error; stop when ``||z|| <= tol * ||x||``. (The residual of the normal
  equations is a poor guide for small lam: there it is small while the error in the holes is
  still large.) The estimate's sums ride on passes CG makes anyway ((r, z) with (z, z); ||x||
  with the update of x and r); with tol <= 0 (a fixed number of iterations) it is not computed.
  **Predicted stop**: the estimates shrink by a steady rate (0.2-0.7 per iteration on the
  photographs' fills, rising slowly), so when the last estimate times that rate (the larger of
  the last two ratios of estimates, at least 0.5; 0.6 after the start) is within tol, the next
  update is the last and its V-cycle, computed only to measure it, is skipped; the returned
  estimate is then that expectation. On the photographs' fills the predicted stops come after
  the same iterations as the measured ones (the same bits) and save one V-cycle per solve, up to
  9% of a masked photograph's fill. Not on grids of one axis, where the rate jumps (a stop
  predicted there can leave several times tol), and not where the hierarchy holds a lumped data
  term (points off the nodes, ``ThinPlateMG(predicted_stop=False)``, kronpe.solvers.smooth):
  there the estimates wander and predicted stops cost accuracy.
  ``_core.ThinPlateHierarchy*.set_predicted_stop(False)`` turns it off.
- **Stationary cycles** (``cycles``): x + omega V (b - A x) with the V-cycle smoothing from x
  itself, so a step costs one V-cycle (a PCG step also applies A and makes five vector passes:
  1.6 times as long at 512^2). The lambda sweep of the default fits takes one such step per
  lambda (kronpe.solvers.smooth), each from the fit before it into an array of its own
  (``cycles_from``: the first smoother reads its start from there, which gives the bits of
  copying it first and cycling in place, without the copy).
- **Start**: full multigrid (``fmg``): b restricted to the coarsest grid, solved there, then on
  each finer grid the prolonged solution corrected by one V-cycle, about 4/3 V-cycles in all
  (each smoothing from the prolonged iterate itself, x + V (b - A x) without a residual and a
  correction pass of its own). On photographs with 25% random pixels its held-out PSNR lies
  within 0.6 dB of the converged fit's, closer than the normalised convolution of the samples,
  and CG from it stops after fewer iterations.
- **Compiled**: the hierarchy, V-cycle, full multigrid and CG loop are one C++ object
  (``kronpe._core.ThinPlateHierarchy32/64``, kronpe/multigrid.h; its NumPy reference
  ``kronpe.reference.thin_plate_vcycle`` / ``thin_plate_fmg``): one call per solve, work arrays
  allocated once per fit (``set_data`` reuses them after the lambda sweep) from a process-wide
  cache (kronpe/multigrid.h; a new 512^2 hierarchy would fault in ~4000 fresh pages every fit).
- **Kernels** (csrc/cpu/smooth.cpp): the smoother is one wavefront pass over the rows (start,
  steps, the final update and the residual fused, each stage two rows behind the one before it,
  so the work arrays stay in cache), diag(A)^-1 is stored per level with lam, and on planes R is
  applied in factored form, R = L^2 (+ a two-node correction per end for the natural boundary),
  L the Neumann Laplacian: two 5-point passes over a ring of L v rows instead of the 13-point
  stencil. CG's dot products are summed in blocks of 32k values in order, so results do not
  depend on the thread count (tested with 1, 2 and 3 threads). Each level keeps what the kernels
  would build per call (the penalty's bands, every thread's scratch rows and stencil rings,
  diag(R) so that a new lam is one streaming pass), one-thread teams run on the calling thread
  (an OpenMP region of one thread still wakes a futex per call) and teams start at 8k nodes per
  thread. On AVX-512 the planes' Laplacian pass (half of a V-cycle's time, bound by its five
  loads per vector) takes each row's left and right neighbours from the vectors it loaded
  (valignd) and masks the last partial vector instead of a scalar tail, bit for bit the same
  values. A V-cycle from zero (CG's preconditioner, every coarse level) writes its
  first step as 0 + d without reading x (no pass filling it with zeros first; the same bits).
- **Non-diagonal data terms** (points off the nodes): the compiled CG calls the exact operator,
  given as a Python function (v -> A v on a read-only view of its vector; the vector updates and
  dot products stay compiled: in NumPy they would take ~20% of an off-grid fit); the
  hierarchy uses its lumped diagonal (row sums of B^T B, i.e. B^T 1).
"""
from __future__ import annotations

import functools
import itertools
from math import factorial
from typing import Callable, Optional, Sequence, Tuple

import numpy as np

from .. import _caches
from .. import _core

Array = np.ndarray
DEGREE = 3
LMAX = 4.0
ALPHA = 8.0
#: (degree, alpha) of the smoother for the order-3 (Laplacian-power) penalty
POWER_SMOOTHER = (3, 8.0)
COARSEST = 64


def thin_plate_apply(x: Array, m: Array, lam: float, out: Optional[Array] = None, reflect: bool = False,
                     order: int = 2, weights: Optional[Sequence[float]] = None, top: float = 1.0,
                     tail: float = 0.0) -> Array:
    """``m * x + lam * R x`` (R the thin-plate penalty, mirrored at the ends with ``reflect``; with
    ``order`` 3, ``weights`` or a polynomial (``top``, ``tail``), mirrored only, R = top L_w^order +
    tail L_w^(order - 1), L_w = sum_i w_i L_i) on a grid of 1 to 3 axes, x and m of one float
    dtype and shape, any memory layout (copied to C order when not in it)."""
    x = np.ascontiguousarray(x)
    m = np.ascontiguousarray(m)
    out = np.empty_like(x) if out is None else out
    _core.thin_plate(x, m, float(lam), out, reflect=bool(reflect), order=int(order),
                     weights=None if weights is None else [float(w) for w in weights], top=float(top),
                     tail=float(tail))
    return out


def chebyshev_lmax(ndim: int, order: int = 2, weights: Optional[Sequence[float]] = None, top: float = 1.0,
                   tail: float = 0.0) -> float:
    """An upper bound of the eigenvalues of diag(A)^-1 A for A = diag(m) + lam R, any m >= 0 and lam
    >= 0: LMAX = 4 for the thin-plate penalty; for the Laplacian-power form R = top L_w^q + tail
    L_w^(q - 1), L_w = sum_i w_i L_i, Gershgorin's bound max_k sum_j |R_kj| / R_kk with sum_j |R_kj|
    <= (top |L_w|^q 1 + tail |L_w|^(q - 1) 1)_k (|.| entrywise; equal in the interior, where the
    signs of L_w^q alternate with the distance), on a grid of 2 q + 3 nodes per axis (every kind of
    row near the ends and the interior appear; diag(R) from the axes' diag(L^a), which act on
    separate indices). Microseconds (the dense Gershgorin bound on that grid would take 40 ms per
    set of weights)."""
    if order == 2 and weights is None and top == 1.0 and tail == 0.0:
        return LMAX
    return _power_lmax(int(ndim), int(order), None if weights is None else tuple(float(v) for v in weights),
                       float(top), float(tail))


@functools.lru_cache(maxsize=64)
def _power_lmax(ndim: int, order: int, weights: Optional[Tuple[float, ...]], top: float = 1.0,
                tail: float = 0.0) -> float:
    """chebyshev_lmax of the Laplacian-power form, kept per (ndim, order, weights, top, tail): the
    held-out weight choice asks for the same few sets in every fit."""
    w = [1.0] * ndim if weights is None else list(weights)
    n = 2 * order + 3
    shape = (n,) * ndim

    def abs_laplacian(v: Array) -> Array:  # |L_w| v: diagonal (neighbours) + off-diagonal (+1 each)
        out = np.zeros_like(v)
        for a in range(ndim):
            lo = [slice(None)] * ndim
            hi = [slice(None)] * ndim
            lo[a], hi[a] = slice(0, -1), slice(1, None)
            out[tuple(lo)] += w[a] * (v[tuple(lo)] + v[tuple(hi)])
            out[tuple(hi)] += w[a] * (v[tuple(hi)] + v[tuple(lo)])
        return out

    L = np.diag(np.r_[1.0, np.full(n - 2, 2.0), 1.0]) - np.eye(n, k=1) - np.eye(n, k=-1)
    dpow = [np.diag(np.linalg.matrix_power(L, a)) for a in range(order + 1)]  # diag(L^a), one axis

    def power_diag(q: int) -> Array:  # diag(L_w^q): the multinomial sum over the axes' powers
        diag = np.zeros(shape)
        for alpha in itertools.product(range(q + 1), repeat=ndim):
            if sum(alpha) != q:
                continue
            term = np.ones(shape) * float(factorial(q) / np.prod([factorial(k) for k in alpha]))
            for a, k in enumerate(alpha):
                idx = [None] * ndim
                idx[a] = slice(None)
                term = term * (w[a] ** k * dpow[k])[tuple(idx)]
            diag += term
        return diag

    rows_low = np.ones(shape)
    for _ in range(order - 1):
        rows_low = abs_laplacian(rows_low)
    rows = top * abs_laplacian(rows_low) + tail * rows_low
    diag = top * power_diag(order) + (tail * power_diag(order - 1) if tail else 0.0)
    return float(max(1.0, np.max(rows / diag)))


class ThinPlateMG:
    """The multigrid hierarchy of ``diag(m) + lam R`` (module docstring); ``m`` (grid of 1 to 3
    axes, at least one node) >= 0. ``set_ridge(lam)`` (or the constructor's ``lam``) fixes lam;
    the hierarchy of m is kept, so a sweep over lam costs one small factorisation per value.
    ``reflect``: R mirrored at the grid's ends (``DifferencePenalty(2, mixed=True,
    boundary="reflect")``) on every level. ``predicted_stop``: ``solve``'s predicted stop (module
    docstring; False where ``m`` lumps a data term off the nodes)."""

    def __init__(self, m: Array, lam: Optional[float] = None, dtype=np.float32, reflect: bool = False,
                 order: int = 2, weights: Optional[Sequence[float]] = None, degree: Optional[int] = None,
                 alpha: Optional[float] = None, top: float = 1.0, tail: float = 0.0, threads: int = 0,
                 predicted_stop: bool = True, _hierarchy=None):
        m = np.ascontiguousarray(m, dtype=dtype)
        if not 1 <= m.ndim <= 3 or m.size == 0:
            raise ValueError(f"m must be a grid of 1 to 3 axes with at least one node, got shape {m.shape}")
        self.shape, self.dtype = m.shape, m.dtype
        kind = _core.ThinPlateHierarchy32 if m.dtype == np.float32 else _core.ThinPlateHierarchy64
        self.reflect = bool(reflect)
        self.order = int(order)
        self.weights = None if weights is None else tuple(float(w) for w in weights)
        #: the power form's polynomial R = top L_w^order + tail L_w^(order - 1) (thin_plate_apply)
        self.top, self.tail = float(top), float(tail)
        #: the smoother's degree, Chebyshev interval [lmax / alpha, lmax] (POWER_SMOOTHER for order 3)
        default_degree, default_alpha = (DEGREE, ALPHA) if self.order == 2 else POWER_SMOOTHER
        self.degree = default_degree if degree is None else int(degree)
        self.alpha = default_alpha if alpha is None else float(alpha)
        self.lmax = chebyshev_lmax(m.ndim, self.order, self.weights, self.top, self.tail)
        #: the kernels' threads (0: kronpe's default)
        self.threads = int(threads)
        # _hierarchy: a compiled hierarchy built with these arguments elsewhere (smooth.py's
        # LeadSolve), wrapped instead of built
        self._h = _hierarchy if _hierarchy is not None else kind(
            m, self.degree, self.lmax, self.alpha, COARSEST, self.reflect, self.threads, self.order,
            None if self.weights is None else list(self.weights), self.top, self.tail)
        #: solve's predicted stop (module docstring): on where the estimates' rate is steady
        self.predicted_stop = bool(predicted_stop)
        self._h.set_predicted_stop(self.predicted_stop)
        #: every level's grid shape, finest first
        self.levels = [tuple(s[3 - m.ndim:]) for s in self._h.shapes]
        self.lam: Optional[float] = None
        if lam is not None:
            self.set_ridge(lam)

    def set_ridge(self, lam: float) -> "ThinPlateMG":
        self._h.set_lambda(float(lam))
        self.lam = float(lam)
        return self

    def set_boundary(self, reflect: bool) -> "ThinPlateMG":
        """The penalty's boundary on every level: mirrored (True) or natural; lam kept."""
        self.reflect = bool(reflect)
        self._h.set_reflect(self.reflect)
        return self

    def set_weights(self, weights: Sequence[float]) -> "ThinPlateMG":
        """New axis weights of the Laplacian-power form (built with ``weights`` or order 3), with
        their Chebyshev bound; lam kept."""
        w = tuple(float(v) for v in weights)
        self._h.set_weights(list(w))
        self.lmax = chebyshev_lmax(len(self.shape), self.order, w, self.top, self.tail)
        self._h.set_chebyshev(self.lmax, self.alpha)
        self.weights = w
        return self

    def set_data(self, m: Array) -> "ThinPlateMG":
        """A new data term m (this grid's shape, >= 0): the coarse grids' are restricted again, the
        work arrays and lam kept."""
        self._h.set_data_term(self._grid(m))
        if self.lam is not None:
            self._h.set_lambda(self.lam)
        return self

    def _grid(self, b: Array) -> Array:
        b = np.ascontiguousarray(b, dtype=self.dtype)
        if b.shape != self.shape:
            b = b.reshape(self.shape)
        return b

    def vcycle(self, b: Array, out: Optional[Array] = None) -> Array:
        """One V-cycle from zero: an approximation of A^-1 b (symmetric in b)."""
        out = np.empty(self.shape, self.dtype) if out is None else out
        self._h.vcycle(self._grid(b), out)
        return out

    def fmg(self, b: Array, out: Optional[Array] = None, cycles: int = 1) -> Array:
        """Full multigrid from zero (module docstring): an approximation of A^-1 b close to each
        grid's discretisation error, at the cost of about 4/3 ``cycles`` V-cycles."""
        out = np.empty(self.shape, self.dtype) if out is None else out
        self._h.fmg(self._grid(b), out, int(cycles))
        return out

    def cycles(self, b: Array, x0: Optional[Array] = None, count: int = 1, omega: float = 1.0) -> Array:
        """``count`` V-cycles for A x = b as a stationary iteration, from ``x0`` (None: ``fmg(b)``):
        each step is x + omega V (b - A x), smoothed from x itself, so one costs a V-cycle and two
        vector passes (a PCG iteration adds two operator applications and five vector passes: 1.6
        times as long at 512^2); 0 < omega < 2. A the hierarchy's finest matrix (a diagonal data
        term). Returns x (a new array)."""
        if not 0 < omega < 2:
            raise ValueError(f"omega must be in (0, 2), got {omega}")
        b, x = self._iterands(b, x0)
        self._h.cycles(b, x, x0 is not None, int(count), float(omega))
        return x

    def _iterands(self, b: Array, x0: Optional[Array]) -> Tuple[Array, Array]:
        """(b on this grid, the iterate: a copy of x0, or uninitialised for a start from fmg(b))
        of cycles and solve; lam must be set."""
        if self.lam is None:
            raise ValueError("set_ridge(lam) first")
        b = self._grid(b)
        x = np.empty_like(b) if x0 is None else np.array(x0, dtype=self.dtype, copy=True).reshape(self.shape)
        return b, x

    def solve(self, b: Array, x0: Optional[Array] = None, tol: float = 1e-3, maxiter: int = 100,
              operator: Optional[Callable[[Array], Array]] = None, scale: Optional[float] = None
              ) -> Tuple[Array, int, float]:
        """PCG for A x = b (A = ``operator`` or the hierarchy's finest matrix) from ``x0`` (None: the
        full multigrid approximation, ``fmg``), stopped when ||z|| <= tol * ``scale`` (default
        ||x||), z the preconditioned residual, or when the next iteration is expected to reach that
        (the predicted stop, module docstring); tol <= 0: after exactly ``maxiter`` iterations, with
        no error estimate (NaN). Returns (x, iterations, ||z|| / scale at the end: measured, or the
        predicted stop's expectation)."""
        b, x = self._iterands(b, x0)
        # operator(v): v a read-only view of CG's vector, valid during the call
        its, rel = self._h.pcg(b, x, x0 is not None, float(tol), int(maxiter), 0.0 if scale is None else float(scale),
                               operator=operator)
        return x, int(its), float(rel)


def dot(a: Array, b: Array) -> float:
    """The sum of a * b in float64 (two arrays of one shape)."""
    # the compiled loop accumulating in float64 (not BLAS: its threads spin against the kernels'
    # on a busy machine, 20x slower here); NumPy's pairwise sum for other layouts
    if a.dtype == b.dtype and a.flags.c_contiguous and b.flags.c_contiguous and a.shape == b.shape:
        return _core.dot(a, b)
    return float(np.sum(a * b, dtype=np.float64))


for _cached in (_power_lmax,):  # kronpe.clear_caches forgets them too
    _caches.register(_cached.cache_clear)
