"""Grid handling of the separable fits: argument checks (signal, mask, coordinates, embedders,
number of grid axes), reflection padding of the coordinates and the per-axis embeddings with
their factorisations (``Axis``, cached), each computed when a fit first needs it: the thin SVD
(ridges, GCV), or the pseudo-inverse of a pseudo-inverse fit by elimination or QR with a bound on
the condition number, which an SVD of a 256 x 256 axis takes about ten times longer to give.

Used by the grid fit's modules (:mod:`.fit`, :mod:`.grid_plan`, :mod:`.grid_model`) and by
:mod:`kronpe.dask`; the formulas are in docs/math/encodings.rst.
"""
from __future__ import annotations

import contextlib
import math
import threading
from typing import List, Optional, Sequence, Tuple

import numpy as np

from .. import _caches
from .. import _core
from .._adapters import blas as _blas, validate as _validate
from .._shared import guess_ndim
from ..data import grid_coords
from ..embedders import Embedder, ShiftedBasis


# ---- argument checks ------------------------------------------------------------------------


def coords_list(coords) -> list:
    """coords as a list of per-axis arrays (a single 1-D array is one axis)."""
    if isinstance(coords, np.ndarray) and coords.ndim == 1:
        return [coords]
    return _validate.sequence("coords", coords, "D 1-D arrays of coordinates in [0, 1]")


def coords_arg(coords, shape: Sequence[int]) -> List[np.ndarray]:
    """D 1-D float64 arrays in [0, 1]; None gives linspace(0, 1, N + 1)[:-1] per axis."""
    if coords is None:
        return grid_coords(shape)
    coords = coords_list(coords)
    if len(coords) != len(shape):
        raise ValueError(f"coords must hold {len(shape)} arrays (one per grid axis), got {len(coords)}")
    out = []
    for i, (c, n) in enumerate(zip(coords, shape)):
        c = _validate.coords_1d(f"coords[{i}]", c, np.float64)
        if c.shape[0] != n:
            raise ValueError(f"coords[{i}] must hold {n} coordinates (signal axis {i}), got {c.shape[0]}")
        out.append(c)
    return out


def embedders_arg(embedders, ndim: int) -> List[Embedder]:
    if isinstance(embedders, Embedder):
        return [embedders] * ndim
    embs = _validate.sequence("embedders", embedders, "kronpe embedders")
    for i, e in enumerate(embs):
        if not isinstance(e, Embedder):
            raise TypeError(f"embedders[{i}] must be a kronpe Embedder, got {_validate.describe(e)}")
    if len(embs) != ndim:
        raise ValueError(f"embedders must hold {ndim} embedders (one per grid axis), got {len(embs)}")
    return embs


def signal_arg(signal, shape: Sequence[int], mask: Optional[np.ndarray] = None, with_range: bool = False,
                planar: bool = False):
    """The signal as float32/float64, finite where ``mask`` is True (everywhere without a mask);
    with a mask its unobserved values become 0 (on a copy, (C, N...) with ``planar``), and
    ``with_range`` returns (signal, per-channel min, max of the observed values)
    (``masked_signal``)."""
    s = _validate.real_array("signal", signal)
    D = len(shape)
    if s.ndim < D:
        raise ValueError(f"signal must have at least {D} axes (N_1..N_{D}, *channels), got shape {s.shape}")
    if tuple(s.shape[:D]) != tuple(shape):
        raise ValueError(
            f"signal must have shape {tuple(shape)} + channels to match the coordinates/embedders, "
            f"got {s.shape}"
        )
    if s.size == 0:
        raise ValueError(f"signal is empty (shape {s.shape}): every axis needs at least one value")
    dt = np.float32 if s.dtype == np.float32 else np.float64
    _validate.check_array_budget("signal", s.shape, 3 * np.dtype(dt).itemsize,
                                 "the signal and the fit's work arrays: fit a smaller signal")
    s = s.astype(dt, copy=False)
    if mask is None:
        _validate.finite("signal", s)
        return s
    out = masked_signal(s, mask, planar)
    return out if with_range else out[0]


def observed_mask(mask, shape) -> np.ndarray:
    """The validated boolean mask (True = observed), with at least one observed value."""
    mask = _validate.bool_array("mask", mask, shape)
    if mask.size and not mask.any():
        raise ValueError("mask marks no observed value (every entry is False); at least one True is needed")
    return mask


def masked_signal(s: np.ndarray, mask: np.ndarray, planar: bool = False
                  ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(s with its unobserved values 0, per-channel min and max of the observed values), s float32
    or float64 (N..., *channels), mask bool (N...) True = observed; one compiled pass
    (``_core.masked_fill``, where NumPy's boolean indexing, NaN-aware reductions and ``where``
    would take 15 ms for a 512^2 RGB image). ``planar``: the first result is (C, N...), one
    contiguous plane per channel (C the channels flattened), as the default fill's solver takes
    them (no second copy out of the interleaved array). Non-finite observed values are a named
    error."""
    n = mask.size
    flat = np.ascontiguousarray(s).reshape(n, -1)
    out = np.empty((flat.shape[1], n) if planar else flat.shape, flat.dtype)
    lo, hi, bad = _core.masked_fill(flat, np.ascontiguousarray(mask).reshape(-1).view(np.uint8), out, planar)
    if bad:
        obs = flat[mask.reshape(-1)]
        found = "NaN" if np.isnan(obs).any() else "Inf"
        raise ValueError(f"signal (where mask is True) must be finite, found {found}")
    out = out.reshape((flat.shape[1],) + mask.shape) if planar else out.reshape(s.shape)
    return out, np.asarray(lo, s.dtype), np.asarray(hi, s.dtype)


# ---- per-axis factorisation --------------------------------------------------------------------


def _reflect_coords(c: np.ndarray, pad: int) -> np.ndarray:
    """c with `pad` samples mirrored about each end sample (as numpy's "reflect" padding)."""
    if pad == 0:
        return c
    left = 2.0 * c[0] - c[pad:0:-1]
    right = 2.0 * c[-1] - c[-2 : -2 - pad : -1]
    return np.concatenate([left, c, right])


def _embed_anywhere(embedder: Embedder, x: np.ndarray) -> np.ndarray:
    """embedder(x) in float64, also at coordinates outside [0, 1] for shifted bases."""
    if x.size == 0 or (x.min() >= 0.0 and x.max() <= 1.0):
        return np.asarray(embedder(x), dtype=np.float64)
    if not isinstance(embedder, ShiftedBasis):
        raise ValueError(
            f"pad needs shifted-basis embedders (defined beyond [0, 1]); {type(embedder).__name__} is not"
        )
    return np.asarray(embedder.psi(x[:, None] - embedder.centres[None, :]), dtype=np.float64)


class Axis:
    """One axis's embedding matrix Phi (rows x K, float64; rows = N + 2 pad, the reflect-padded
    coordinates) and its factorisations, each computed when a fit first asks for it and kept:

    - ``U, s, V``: the thin SVD Phi = U diag(s) V^T (ridge > 0, GCV, and the cases below);
    - ``inverse(dtype)``: the pseudo-inverse Phi^+ (K x rows) with a bound on the condition
      number, for the separable pseudo-inverse fit (``GridPlan``): by Gauss-Jordan elimination
      or LU (square) or QR, in the signal's precision while that is accurate, else in float64, else by
      the SVD (also when the SVD is known already).
    """

    def __init__(self, embedder: Embedder, coords: np.ndarray, phi: np.ndarray):
        self.embedder = embedder
        self.coords = coords  # (N,)
        self.phi = phi  # (N + 2 pad, K)
        self._svd = None
        self._inv = {}  # dtype char -> (inverse() result,)
        self._lock = threading.Lock()

    def __getstate__(self):  # the lock stays in this process
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def rows(self) -> int:
        return self.phi.shape[0]

    @property
    def K(self) -> int:
        return self.phi.shape[1]

    def svd(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(U (rows, r), s (r,), V (K, r)), r = min(rows, K), computed once."""
        with self._lock:
            if self._svd is None:
                from scipy.linalg import svd  # the LAPACK of the BLAS that kronpe's GEMMs use

                with _lapack_threads(self.phi):
                    U, s, Vt = svd(self.phi, full_matrices=False, check_finite=False)
                self._svd = (U, s, np.ascontiguousarray(Vt.T))
            return self._svd

    U = property(lambda self: self.svd()[0])
    s = property(lambda self: self.svd()[1])
    V = property(lambda self: self.svd()[2])

    def svd_inverse(self) -> Optional[Tuple[np.ndarray, float]]:
        """(Phi^+ = V diag(1/s) U^T with every singular value kept, s_max / s_min), None when
        s_min is 0."""
        U, s, V = self.svd()
        smin = float(s.min())
        return ((V / s) @ U.T, float(s.max()) / smin) if smin > 0 else None

    def inverse(self, dtype=np.float64) -> Optional[Tuple[np.ndarray, float]]:
        """(Phi^+ (K x rows) with every singular value kept, an upper bound of s_max / s_min),
        computed once per dtype; None when Phi is rank deficient. By the SVD when it is known;
        else ``_fast_inverse`` in ``dtype``, trusted up to the condition number ``_FAST_KAPPA``
        of that precision (its rounding error, about eps times the condition number, then stays
        that of the SVD's fit), else in float64, else by the SVD."""
        dt = np.dtype(dtype)
        with self._lock:
            known, hit = self._svd is not None, self._inv.get(dt.char)
        if hit is not None:
            return hit[0]
        out = None if known else _fast_inverse(self.phi, dt)
        if out is None or not out[1] <= _FAST_KAPPA.get(dt.char, 0.0):
            out = self.inverse(np.float64) if dt != np.float64 and not known else self.svd_inverse()
        with self._lock:
            self._inv[dt.char] = (out,)
        return out

    @staticmethod
    def factor(embedder: Embedder, coords: np.ndarray, pad: int = 0) -> "Axis":
        """The axis of ``embedder`` at ``coords`` padded by ``pad`` samples per end (its
        embedding; the factorisations follow when asked), cached."""
        key = (embedder, pad, coords.shape[0], coords.tobytes())
        with _FACTORS_LOCK:
            hit = _FACTORS.get(key)
        if hit is not None:
            return hit
        rows = coords.shape[0] + 2 * pad
        _validate.check_array_budget("embedders", (rows, int(embedder.K), 3), 8,
                                     f"{rows} samples x K = {embedder.K} (the embedding and its SVD): "
                                     "use a smaller K")
        phi = _embed_anywhere(embedder, _reflect_coords(coords, pad))  # (N + 2 pad, K)
        if not np.isfinite(phi).all():
            raise ValueError(f"embedder {embedder!r} gave non-finite values at the coordinates")
        phi.setflags(write=False)  # shared by every plan of these axes
        axis = Axis(embedder, coords, phi)
        with _FACTORS_LOCK:
            while len(_FACTORS) >= _FACTOR_CACHE:
                _FACTORS.pop(next(iter(_FACTORS)))
            _FACTORS[key] = axis
        return axis


# The fast pseudo-inverse of each precision is used up to this condition number bound.
_FAST_KAPPA = {"d": 1e6, "f": 1e2}
# Factorisations of matrices up to this many entries run on one LAPACK thread (one_lapack_thread),
# square ones up to it by Gauss-Jordan in the compiled core (_fast_inverse).
_ONE_THREAD_SIZE = 512 * 512


def _lapack_threads(a: np.ndarray):
    """One LAPACK thread for a small matrix ``a``, the BLAS's own count otherwise."""
    return _blas.one_lapack_thread() if a.size <= _ONE_THREAD_SIZE else contextlib.nullcontext()


def _norm_bound(a: np.ndarray) -> float:
    """sqrt(||a||_1 ||a||_inf) >= ||a||_2 (summed in float64)."""
    m = np.abs(a)
    return math.sqrt(float(m.sum(axis=0, dtype=np.float64).max()) * float(m.sum(axis=1, dtype=np.float64).max()))


def _fast_inverse(phi: np.ndarray, dt: np.dtype) -> Optional[Tuple[np.ndarray, float]]:
    """(phi^+ of dtype dt, a bound of the condition number of phi) by Gauss-Jordan elimination
    with row pivoting (square, up to _ONE_THREAD_SIZE entries; ``_core.invert_in_place``), LU
    (larger square) or QR of the tall orientation (tall: R^-1 Q^T; wide: Q R^-T, the minimum-norm
    inverse); None when a pivot is exactly 0, the inverse is not finite or the bound cannot be
    given.

    The computed X is the inverse of phi + E, ||E|| <= d ||phi|| with d = max(rows, K) eps (the
    rounding of the factorisation); with b = sqrt(||phi||_1 ||phi||_inf ||X||_1 ||X||_inf) (the
    2-norm condition number of phi + E at most), that of phi is at most b (1 + d) / (1 - b d)."""
    from scipy.linalg import get_lapack_funcs, qr, solve_triangular

    m, n = phi.shape
    if m == n and phi.size <= _ONE_THREAD_SIZE:
        # Gauss-Jordan with row pivoting in the compiled core, on a copy (phi is shared): LAPACK's
        # getrf + getri on one thread took 1.5 times as long at 256^2 and 512^2 in float32 (and
        # as long at 768^2; larger ones go to the threads of LAPACK below)
        X = np.array(phi, dtype=dt, order="C")
        return _bounded(phi, X, dt) if _core.invert_in_place(X) else None
    a = phi.astype(dt, copy=False)
    with _lapack_threads(a), np.errstate(all="ignore"):
        if m == n:
            # LAPACK factors phi^T, one Fortran-ordered copy of a C-ordered phi, and the inverse
            # of phi^T it gives is phi^-1 in C order: no copy into Fortran order and none back
            at = np.array(a.T, order="F")
            getrf, getri, getri_lwork = get_lapack_funcs(("getrf", "getri", "getri_lwork"), (at,))
            lu, piv, info = getrf(at, overwrite_a=True)
            if info != 0:
                return None
            lwork, info = getri_lwork(n)
            Xt, info = getri(lu, piv, lwork=max(1, int(lwork)), overwrite_lu=True)
            if info != 0:
                return None
            X = Xt.T
        else:
            A = a if m > n else a.T  # tall: full column rank means A^+ = R^-1 Q^T
            q, r = qr(A, mode="economic", check_finite=False)
            if not np.all(np.diagonal(r)):
                return None
            X = solve_triangular(r, q.T, check_finite=False)
            if m < n:
                X = X.T
    return _bounded(phi, X, dt)


def _bounded(phi: np.ndarray, X: np.ndarray, dt: np.dtype) -> Optional[Tuple[np.ndarray, float]]:
    """(X, the bound of _fast_inverse) for phi^+ computed as X, or None."""
    m, n = phi.shape
    with np.errstate(all="ignore"):
        b = _norm_bound(phi) * _norm_bound(X)  # NaN or Inf where X is not finite
    d = max(m, n) * float(np.finfo(dt).eps)
    if not b * d < 0.5:
        return None
    return X, b * (1 + d) / (1 - b * d)


# Recent factorisations, keyed by (embedder, coordinates): axes that share both (a square image)
# and width-search trials that come back to a width are factored once.
_FACTOR_CACHE = 16
_FACTORS: dict = {}
_FACTORS_LOCK = threading.Lock()


@_caches.register
def _forget_factors() -> None:
    with _FACTORS_LOCK:
        _FACTORS.clear()


def grid_ndim(signal_shape: Tuple[int, ...], ndim, embedders, coords) -> int:
    """D from ndim=, else the number of embedders, else of coords, else a guess."""
    if ndim is not None:
        D = _validate.positive_int("ndim", ndim)
        if D > len(signal_shape):
            raise ValueError(f"ndim={D} but the signal has only {len(signal_shape)} axes")
        return D
    if embedders is not None and not isinstance(embedders, Embedder):
        D, source = len(_validate.sequence("embedders", embedders, "kronpe embedders")), "embedders"
    elif coords is not None:
        D, source = len(coords_list(coords)), "coords"
    else:
        return guess_ndim(signal_shape)
    if D == 0:
        raise ValueError(f"{source} must hold one entry per grid axis, got none")
    if D > len(signal_shape):
        raise ValueError(f"{source} has {D} entries (one per grid axis) but the signal has only "
                         f"{len(signal_shape)} axes (shape {tuple(signal_shape)})")
    return D

