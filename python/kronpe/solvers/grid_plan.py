"""Separable (grid) fits in closed form (docs/math/encodings.rst): ``GridPlan``, the per-axis
factorisations of a grid, computed once, then ``.fit`` any number of signals.

A signal sampled on a grid, S of shape (N_1, ..., N_D, *channels), is fitted by weights W of
shape (K_1, ..., K_D, *channels) minimising

    ||S - W x_1 Phi_1 ... x_D Phi_D||^2 + ridge * ||W||^2,     Phi_i = embedders[i](coords[i])

exactly, with one thin SVD per axis (float64, Phi_i = U_i diag(s_i) V_i^T) and three steps:
Z0 = S x_i U_i^T, Z = Z0 * s / (s^2 + ridge) with s the outer product of the s_i, W = Z x_i V_i.
The Kronecker product is never formed. ``ridge`` is absolute: it weighs ||W||^2 against the
squared residual of the raw (unscaled) embeddings.

- ``ridge=0`` is the minimum-norm least-squares solution (pseudo-inverse): products of singular
  values below ``rcond * max`` are dropped, with ``rcond`` defaulting to
  ``max(prod N_i, prod K_i) * eps`` (eps of the signal's dtype), scipy.linalg.pinv's convention
  applied to the whole Kronecker matrix. When no product falls below the cutoff the solution is
  separable, W = S x_1 Phi_1^+ ... x_D Phi_D^+: one chain instead of two, with per-axis
  pseudo-inverses that need no SVD when an elimination or QR proves it (``Axis.inverse``: the
  product of the axes' condition bounds below 1 / rcond); otherwise the SVDs decide, and a cutoff
  that drops products keeps the three steps. A ridge > 0 weighs the whole Kronecker system and is
  never separable.
- ``ridge="gcv"`` chooses the ridge by generalised cross-validation,
  GCV = n ||S - S_hat||^2 / (n - tr H)^2 (n = prod N_i; channels share one ridge and add their
  residuals), each value costing O(prod r_i) after the projection Z0 (r_i = min(N_i, K_i));
  the search is :mod:`.gcv`'s.
- A difference penalty, or a mask, is solved by preconditioned CG (:mod:`.penalised`).

Batches: ``GridPlan.fit(signal, batch_axes=b)`` treats the last b axes of the signal as
independent signals (each its own GCV ridge); the axes between the D grid axes and the batch
axes are channels of one signal (one shared ridge).

Device signals (a CuPy array, a CUDA torch tensor) are fitted on their GPU and stream, and their
models predict there: see ``GridPlan`` and :class:`~.grid_model.GridModel` for what crosses to
the host.
"""
from __future__ import annotations

import math
import warnings
from typing import List, Optional, Sequence, Tuple

import numpy as np

from .._adapters import arrays as _arrays, cuda as _cuda, validate as _validate
from .._shared import Ridge, gemm_operand, outer, ridge_or_gcv
from ..embedders import Embedder
from ..operators.penalty import DifferencePenalty, IdentityPenalty, penalty_arg
from ..ops import host_chain
from . import penalised
from .gcv import GCVCurve
from .grid import Axis, coords_arg, coords_list, embedders_arg, observed_mask, signal_arg
from .grid_model import GridModel, to_device
from .krylov import ConvergenceWarning

__all__ = ["GridPlan"]

# The factor by which the product of the axes' condition bounds (Axis.inverse) must stay below
# 1 / rcond for the separable pseudo-inverse without the SVDs.
_BOUND_MARGIN = 1.01


class GridPlan:
    """Per-axis factorisations for grid fits: computed once, then ``.fit`` any number of signals.

    Parameters
    ----------
    coords : list of D 1-D arrays in [0, 1]
        The sample coordinates of each grid axis.
    embedders : Embedder or list of D Embedder
    ridge : float >= 0 or "gcv"
        Default ridge of ``.fit`` (see the module docstring).
    rcond : float, optional
        Relative cutoff of the pseudo-inverse when the ridge is 0 (see the module docstring).
    pad : int
        Pad each axis with this many samples at each end before fitting (at most N_i - 1): at
        coordinates mirrored about the end sample, values point-reflected about the end value
        (2 S[0] - S[j]: numpy's "reflect" padding with reflect_type="odd"), a continuation that
        keeps the slope at the ends. This steadies the model between the last sample and the
        edge of the domain. Needs shifted-basis embedders, and no more padding than the margin
        (padded samples beyond the outermost centres cannot be fitted and mislead GCV).
    penalty : DifferencePenalty, optional
        What the ridge weighs (None: ||W||^2, the closed form above). A difference penalty, or a
        ``mask`` given to ``.fit``, is solved by preconditioned CG (module docstring).
    tol, maxiter : float, int
        Relative residual at which that CG stops (default 1e-10), and its iteration limit.

    Device signals (a CuPy array or a CUDA torch tensor) are fitted on their GPU, on the caller's
    current stream, and give a GridModel whose weights are the same kind on the same device:
    float32 stays float32, anything else computes in float64. The closed form runs there as
    two mode-product chains (cuBLAS) and one broadcast multiply; a batch (``batch_axes``) goes
    through the same single chains. The plan keeps device copies of the per-axis factors (the
    padding folded into them: pad(S) x_i U_i^T = S x_i (U_i^T P_i), P_i the (N_i + 2 pad, N_i)
    reflection) and of the fixed-ridge filters, per (array kind, device, dtype), so repeated fits
    upload nothing. What crosses to the host: the finiteness check of the signal (one boolean,
    read back at the end: a synchronisation); with ``ridge="gcv"`` one copy of the squared
    projections summed over channels ((r_1..r_D, *batch) float64, plus the signals' squared norms
    when U_i are not square), the ridge minimised on the host per batch entry and the filters
    uploaded as one array. A penalty or a mask is a host solve: the signal is copied to the host,
    fitted as a NumPy signal, and the weights copied back to its device.
    """

    def __init__(
        self,
        coords,
        embedders,
        ridge: Ridge = "gcv",
        rcond: Optional[float] = None,
        pad: int = 0,
        penalty: Optional[DifferencePenalty] = None,
        tol: float = 1e-10,
        maxiter: Optional[int] = None,
    ):
        coords = coords_list(coords)
        if not coords:
            raise ValueError("coords must hold at least one axis")
        shape = []
        for i, c in enumerate(coords):
            a = _validate.real_array(f"coords[{i}]", c)
            if a.ndim != 1:
                raise ValueError(f"coords[{i}] must be a 1-D array, got shape {a.shape}")
            if a.shape[0] == 0:
                raise ValueError(f"coords[{i}] is empty: every grid axis needs at least one sample")
            shape.append(a.shape[0])
        self.coords = coords_arg(coords, shape)
        self.embedders = embedders_arg(embedders, len(shape))
        self.ridge = ridge_or_gcv(ridge)
        self.rcond = None if rcond is None else _validate.nonnegative_float("rcond", rcond)
        pad = _validate.nonnegative_int("pad", pad)
        self.pads = tuple(min(pad, n - 1) for n in shape)
        self.penalty = penalty_arg(penalty)
        self.tol = _validate.positive_float("tol", tol)
        self.maxiter = None if maxiter is None else _validate.positive_int("maxiter", maxiter)
        self._axes = [Axis.factor(e, c, p) for e, c, p in zip(self.embedders, self.coords, self.pads)]
        self._cast = {}
        self._dev = {}  # device factors and filters, per (kind, device, dtype): _device_factors

    def __getstate__(self):  # device arrays stay in this process
        return {k: v for k, v in self.__dict__.items() if k != "_dev"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._dev = {}

    # -- shapes ----------------------------------------------------------------------------

    @property
    def ndim(self) -> int:
        return len(self._axes)

    @property
    def shape(self) -> Tuple[int, ...]:
        """Samples per axis (N_1, ..., N_D)."""
        return tuple(c.shape[0] for c in self.coords)

    @property
    def K(self) -> Tuple[int, ...]:
        """Features per axis (K_1, ..., K_D)."""
        return tuple(a.K for a in self._axes)

    @property
    def singular_values(self) -> List[np.ndarray]:
        """Each axis's singular values (its SVD, computed now if no fit needed it yet)."""
        return [a.s for a in self._axes]

    # -- the three steps ------------------------------------------------------------------

    def _factors(self, dt: np.dtype, which: str) -> List[np.ndarray]:
        key = (np.dtype(dt).char, which)
        if key not in self._cast:
            if which == "Ut":
                mats = [gemm_operand(a.U.T, dt) for a in self._axes]
            else:
                mats = [gemm_operand(a.V, dt) for a in self._axes]
            self._cast[key] = mats
        return self._cast[key]

    def _padded(self, S: np.ndarray) -> np.ndarray:
        if not any(self.pads):
            return S
        widths = [(p, p) for p in self.pads] + [(0, 0)] * (S.ndim - self.ndim)
        return np.pad(S, widths, mode="reflect", reflect_type="odd")

    def _project(self, S: np.ndarray) -> np.ndarray:
        """Z0 = S_padded x_i U_i^T, shape (r_1..r_D, *rest), in S's dtype (any dense layout)."""
        mats = self._factors(S.dtype, "Ut")
        return host_chain(self._padded(S), mats, tuple(range(len(mats))))

    def _products(self) -> np.ndarray:
        """The products s of singular values over the axes, shape (r_1, ..., r_D), cached."""
        if "s" not in self._cast:
            self._cast["s"] = outer([a.s for a in self._axes])
        return self._cast["s"]

    def _filter(self, ridge: float, dt, s: Optional[np.ndarray] = None) -> np.ndarray:
        """s / (s^2 + ridge) over the products s of singular values (ridge 0: pseudo-inverse), all
        of them or the block ``s`` of them (kronpe.dask filters its blocks of Z0 one at a time)."""
        if s is None:
            s = self._products()
        if ridge > 0:
            return (s / (s * s + ridge)).astype(dt)
        rcond = self._rcond(dt)
        smax = math.prod(float(a.s.max()) if a.s.size else 0.0 for a in self._axes)  # = max of all products
        with np.errstate(divide="ignore"):
            return np.where(s > rcond * smax, 1.0 / s, 0.0).astype(dt)

    def _rcond(self, dt) -> float:
        """The pseudo-inverse's cutoff for signals of dtype dt (module docstring)."""
        if self.rcond is not None:
            return self.rcond
        rows = math.prod(a.rows for a in self._axes)
        return max(rows, math.prod(self.K)) * float(np.finfo(dt).eps)

    def _pinvs(self, dt) -> Optional[List[np.ndarray]]:
        """The per-axis pseudo-inverses Phi_i^+ P_i (K_i x N_i, the padding P_i folded in, dtype
        dt) when the pseudo-inverse fit is separable (no product of singular values below the
        cutoff), else None; cached per (dtype, cutoff)."""
        rcond = self._rcond(dt)
        key = (np.dtype(dt).char, "pinv", rcond)
        if key not in self._cast:
            self._cast[key] = self._separable_pinvs(rcond, dt)
        return self._cast[key]

    def _separable_pinvs(self, rcond: float, dt) -> Optional[List[np.ndarray]]:
        limit = 1.0 / rcond if rcond > 0 else math.inf
        invs = [a.inverse(dt) for a in self._axes]
        # the bounds prove it (with a margin for the rounding of the bounds)
        if not all(invs) or not math.prod(k for _, k in invs) * _BOUND_MARGIN < limit:
            svds = [a.svd() for a in self._axes]  # the exact decision: _filter's rule
            smax = math.prod(float(s.max()) for _, s, _ in svds)
            smin = math.prod(float(s.min()) for _, s, _ in svds)
            if not smin > rcond * smax:
                return None
            invs = [a.svd_inverse() for a in self._axes]
        cast = {}  # axes that share their factors (a square image) share the cast too
        for (X, _), p in zip(invs, self.pads):
            if (id(X), p) not in cast:
                cast[id(X), p] = gemm_operand(_fold_pad(X.T, p).T, dt)
        return [cast[id(X), p] for (X, _), p in zip(invs, self.pads)]

    def _weights(self, Z: np.ndarray) -> np.ndarray:
        mats = self._factors(Z.dtype, "V")
        return host_chain(Z, mats, tuple(range(len(mats))), order="C")

    @property
    def _full(self) -> bool:
        """Every U_i square: the projection reaches the whole (padded) signal (rss0 = 0)."""
        return all(a.rows <= a.K for a in self._axes)

    def _curve(self, S: np.ndarray, Z0: np.ndarray) -> GCVCurve:
        """The GCV curve of one signal S (N.., *channels) with projection Z0 (r.., *channels)."""
        return self._gcv_curve(*self._gcv_sums(S, Z0, 0))

    def _gcv_sums(self, S: np.ndarray, Z0: np.ndarray, nb: int):
        """(w, ss) of the GCV curves of signals S (N.., *channels, *batch) with projections Z0:
        w (r.., *batch) the squared projections summed over channels, ss (*batch) the squared
        norms of the padded signals (None when every U_i is square), float64."""
        D = self.ndim
        z = Z0.astype(np.float64)
        w = np.sum(z * z, axis=tuple(range(D, Z0.ndim - nb)))
        ss = (None if self._full
              else np.sum(np.square(self._padded(S), dtype=np.float64), axis=tuple(range(S.ndim - nb))))
        return w, ss

    def _gcv_curve(self, w: np.ndarray, ss) -> GCVCurve:
        """The GCV curve of one signal from its (w, ss) of ``_gcv_sums``."""
        rss0 = 0.0 if ss is None else float(ss) - float(w.sum())
        s = self._products()
        return GCVCurve(s * s, w, rss0, math.prod(a.rows for a in self._axes))

    def _gcv_filters(self, w: np.ndarray, ss, nb: int, dt):
        """(filters (r.., *batch) of dtype dt, ridges, GCV scores) of signals whose (w, ss) are those
        of ``_gcv_sums``: each batch entry's ridge by its own GCV minimisation (floats for nb = 0)."""
        batch = w.shape[w.ndim - nb:]
        lams, scores = np.empty(batch), np.empty(batch)
        F = np.empty(w.shape, dt)
        for b in np.ndindex(*batch):
            idx = (Ellipsis,) + b
            # a batch entry's w is a strided view: contiguous, the curve's passes over it run faster
            lams[b], scores[b] = self._gcv_curve(np.ascontiguousarray(w[idx]), None if ss is None else ss[b]).minimise()
            F[idx] = self._filter(float(lams[b]), dt)
        return (F, lams, scores) if nb else (F, float(lams[()]), float(scores[()]))

    # -- public -----------------------------------------------------------------------------

    def gcv(self, signal, ridges) -> np.ndarray:
        """Exact GCV scores of ``signal`` (one signal, channels share the ridge) at ``ridges``."""
        S = signal_arg(_arrays.host_if_device(signal, "signal"), self.shape)
        ridges = np.asarray(ridges, dtype=np.float64)
        if ridges.size and (not np.isfinite(ridges).all() or ridges.min() < 0):
            raise ValueError("ridges must be non-negative finite numbers")
        return self._curve(S, self._project(S))(ridges).reshape(ridges.shape)

    def fit(self, signal, ridge: Optional[Ridge] = None, batch_axes: int = 0, mask=None) -> GridModel:
        """Fit weights to ``signal`` of shape (N_1, ..., N_D, *channels, *batch).

        Parameters
        ----------
        signal : array, shape (N_1, ..., N_D, *channels, *batch)
            float32 gives float32 weights; anything else float64. A CuPy array or a CUDA torch
            tensor is fitted on its GPU and gives weights of its kind there (class docstring).
        ridge : float >= 0 or "gcv", optional
            Overrides the plan's ridge.
        batch_axes : int
            How many trailing axes index independent signals (each its own GCV ridge).
        mask : bool array (N_1, ..., N_D), optional
            True where the signal is observed; values elsewhere are ignored (NaN allowed).

        Returns
        -------
        GridModel
        """
        ridge = self.ridge if ridge is None else ridge_or_gcv(ridge)
        if mask is not None:
            mask = observed_mask(_arrays.host_if_device(mask, "mask"), self.shape)
            if any(self.pads):
                raise ValueError("pad must be 0 with a mask (reflected samples of missing values are unknown)")
        nb = _validate.nonnegative_int("batch_axes", batch_axes)
        kd = _arrays.dask_api(signal)
        if kd is not None:
            return kd.fit_plan(self, signal, ridge, nb, mask)
        if _arrays.is_device(signal):
            if self.penalty is None and mask is None:
                return self._fit_device(signal, ridge, nb)
            return to_device(self.fit(_arrays.to_host(signal, "signal"), ridge, nb, mask), signal)  # host solve
        S = signal_arg(signal, self.shape, mask)
        if nb > S.ndim - self.ndim:
            raise ValueError(f"batch_axes={nb} but the signal has only {S.ndim - self.ndim} axes after the grid axes")
        return self._fit(S, ridge, nb, mask)

    def _fit(self, S: np.ndarray, ridge: Ridge, nb: int = 0, mask: Optional[np.ndarray] = None) -> GridModel:
        """The fit of a signal checked once (``signal_arg``): float32/float64, finite where
        observed, the plan's grid shape; nothing here asks it again."""
        if self.penalty is not None or mask is not None:
            return self._fit_penalised(S, ridge, nb, mask)
        dt = S.dtype
        if ridge == 0:  # "gcv" != 0
            pinvs = self._pinvs(dt)
            if pinvs is not None:  # separable: one chain
                return GridModel(host_chain(S, pinvs, tuple(range(self.ndim)), order="C"), self.embedders, ridge)
        Z0 = self._project(S)
        if ridge != "gcv":
            F, lam, score = self._filter(ridge, dt), ridge, None
        else:
            F, lam, score = self._gcv_filters(*self._gcv_sums(S, Z0, nb), nb, dt)
        return GridModel(self._weights(_filtered(Z0, F, self.ndim, nb)), self.embedders, lam, score)

    # -- device signals (CuPy, CUDA torch): the class docstring --------------------------------

    def _device_factors(self, X) -> dict:
        """The factors on X's device in X's dtype, uploaded once per (kind, device, dtype): "Ut"
        (U_i^T P_i, the padding folded in), "V", "P" (the padding matrices, only when the GCV of a
        padded signal needs its norm) and the cache of fixed-ridge "filters"."""
        key = (_arrays.kind(X), _arrays.device_index(X), _arrays.dtype_name(X))
        hit = self._dev.get(key)
        if hit is None:
            up = lambda m: _arrays.device_from_host(np.asarray(m, np.float64).astype(key[2]), X)  # noqa: E731
            hit = self._dev[key] = dict(
                Ut=[up(_fold_pad(a.U, p).T) for a, p in zip(self._axes, self.pads)], V=[up(a.V) for a in self._axes],
                P=([up(_fold_pad(np.eye(n + 2 * p), p).T) for n, p in zip(self.shape, self.pads)]
                   if any(self.pads) and not self._full else None),
                filters={})
        return hit

    def _device_filter(self, X, ridge: float):
        """The filter of a fixed ridge on X's device (``_filter``), cached (the last 8 ridges)."""
        cache = self._device_factors(X)["filters"]
        key = (float(ridge), self.rcond)
        F = cache.get(key)
        if F is None:
            while len(cache) >= 8:
                cache.pop(next(iter(cache)))
            F = cache[key] = _arrays.device_from_host(self._filter(ridge, np.dtype(_arrays.dtype_name(X))), X)
        return F

    def _fit_device(self, signal, ridge: Ridge, nb: int) -> GridModel:
        """The closed form of a device signal on its device and current stream (class docstring)."""
        _cuda.require("GridPlan.fit")
        X = _device_signal(signal, self.shape, nb)
        D = self.ndim
        with _arrays.device_scope(X):
            f = self._device_factors(X)
            ok = _arrays.finite_flag(X)  # read back at the end: one scalar, one sync
            Z0 = _cuda.multi_mode_product(X, f["Ut"], tuple(range(D)), "K")
            if ridge != "gcv":
                F, lam, score = self._device_filter(X, ridge), ridge, None
            else:  # the flag travels with GCV's one copy to the host (ValueError there)
                F, lam, score = self._device_gcv(X, Z0, nb, ok, f["P"])
                ok = True
            W = _cuda.multi_mode_product(_filtered(Z0, F, D, nb), f["V"], tuple(range(D)), "C")
            _arrays.check_finite(X, ok)  # a fixed ridge: the one synchronisation, after everything is queued
        return GridModel(W, self.embedders, lam, score)

    def _device_gcv(self, X, Z0, nb: int, ok, pads):
        """The GCV filters of device signals: w (and ss) reduced on the device, one copy to the
        host (with the finiteness flag), each entry minimised there, the filters uploaded as one
        array. Returns (filters, ridge(s), score(s)); ValueError for a signal with NaN or Inf."""
        D = self.ndim
        z = _arrays.cast(Z0, "float64")
        w = _arrays.device_sum(z * z, tuple(range(D, len(Z0.shape) - nb)))  # (r.., *batch)
        parts = [w.reshape(-1)]
        if not self._full:
            Xp = _cuda.multi_mode_product(X, pads, tuple(range(D)), "K") if pads is not None else X
            x = _arrays.cast(Xp, "float64")
            parts.append(_arrays.device_sum(x * x, tuple(range(len(X.shape) - nb))).reshape(-1))  # (*batch)
        parts.append(_arrays.cast(ok.reshape(1), "float64"))
        host = _arrays.to_host(_arrays.device_concat(parts))  # the one copy (a synchronisation)
        if host[-1] != 1:
            _arrays.check_finite(X, False)  # raises, unless a float64 sum of huge finite values overflowed
        wh = host[:math.prod(w.shape)].reshape(tuple(w.shape))
        ss = None if self._full else host[wh.size:-1].reshape(wh.shape[D:])
        F, lam, score = self._gcv_filters(wh, ss, nb, np.dtype(_arrays.dtype_name(X)))
        return _arrays.device_from_host(F, X), lam, score

    def _fit_penalised(self, S: np.ndarray, ridge: Ridge, nb: int, mask: Optional[np.ndarray]) -> GridModel:
        """CG on (A^T A + ridge R) w = A^T s (kronpe.solvers.penalised), one solve per batch entry."""
        D = self.ndim
        system = penalised.GridSystem([a.phi for a in self._axes], self.K, mask)
        pen = self.penalty if self.penalty is not None else IdentityPenalty()
        lam_arg = None if ridge == "gcv" else float(ridge)
        Sp = self._padded(S)
        batch = Sp.shape[Sp.ndim - nb:]
        chans = Sp.shape[D:Sp.ndim - nb]
        W = np.empty(self.K + chans + batch, S.dtype)
        lams = np.empty(batch)
        for b in np.ndindex(*batch):
            Sb = Sp[(Ellipsis,) + b]
            y = system.samples(Sb.reshape(Sb.shape[:D] + (-1,)).astype(np.float64))
            w, lams[b], info = penalised.fit(system, y, pen, lam_arg, self.tol, self.maxiter)
            if not info["converged"]:
                warnings.warn(f"fit_grid: conjugate gradients stopped at maxiter={info['maxiter']} with relative "
                              f"residual {info['residual']:.3g} > tol={info['tol']:g}; raise maxiter or ridge",
                              ConvergenceWarning, stacklevel=3)
            W[(Ellipsis,) + b] = w.reshape(self.K + chans)
        return GridModel(W, self.embedders, lams if nb else float(lams[()]), info=info)

    def _with_embedders(self, embedders: Sequence[Embedder]) -> "GridPlan":
        """The same plan with other embedders (same coordinates, ridge, cutoff and padding)."""
        new = object.__new__(GridPlan)
        new.coords, new.ridge, new.rcond, new.pads = self.coords, self.ridge, self.rcond, self.pads
        new.penalty, new.tol, new.maxiter = self.penalty, self.tol, self.maxiter
        new.embedders = list(embedders)
        new._axes = [Axis.factor(e, c, p) for e, c, p in zip(new.embedders, self.coords, self.pads)]
        new._cast = {}
        new._dev = {}
        return new


# ---- helpers of the plan ------------------------------------------------------------------------


def _filtered(Z0, F, D: int, nb: int):
    """Z0 (r.., *channels, *batch) times the filter F: (r..) for all, or (r.., *batch) one per
    batch entry, broadcast over the channels (NumPy or device arrays alike)."""
    fs = tuple(F.shape)
    return Z0 * F.reshape(fs[:D] + (1,) * (len(Z0.shape) - len(fs)) + fs[D:])


def _fold_pad(U: np.ndarray, p: int) -> np.ndarray:
    """P^T U for P the (n + 2p, n) odd-reflection padding of p samples per end (np.pad "reflect",
    reflect_type="odd": padded row j < p is 2 S[0] - S[p - j], row n + p + j is 2 S[n-1] - S[n-2-j]),
    U of n + 2p rows: so that pad(S) x U^T = S x (P^T U)^T."""
    if not p:
        return U
    n = U.shape[0] - 2 * p
    out = np.array(U[p:p + n], dtype=np.float64)
    left, right = U[:p], U[p + n:]
    out[0] += 2.0 * left.sum(axis=0)
    out[p - np.arange(p)] -= left
    out[n - 1] += 2.0 * right.sum(axis=0)
    out[n - 2 - np.arange(p)] -= right
    return out


def _device_signal(x, shape: Tuple[int, ...], nb: int):
    """A device signal checked where it lies (shape, dtype: float32 stays, else float64; its
    values by the caller's finiteness flag), detached from autograd."""
    xs, D = tuple(int(n) for n in x.shape), len(shape)
    if len(xs) < D:
        raise ValueError(f"signal must have at least {D} axes (N_1..N_{D}, *channels), got shape {xs}")
    if xs[:D] != tuple(shape):
        raise ValueError(f"signal must have shape {tuple(shape)} + channels to match the coordinates/embedders, "
                         f"got {xs}")
    if 0 in xs:
        raise ValueError(f"signal is empty (shape {xs}): every axis needs at least one value")
    if nb > len(xs) - D:
        raise ValueError(f"batch_axes={nb} but the signal has only {len(xs) - D} axes after the grid axes")
    if _arrays.kind(x) == "torch":
        x = x.detach()
    return _arrays.cast(x, _cuda.float_dtype("signal", x))
