"""Separable (grid) fits in closed form (MATH.md 3.2 and 3.5).

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
  applied to the whole Kronecker matrix.
- ``ridge="gcv"`` chooses the ridge by generalised cross-validation,
  GCV = n ||S - S_hat||^2 / (n - tr H)^2 (n = prod N_i; channels share one ridge and add their
  residuals), each value costing O(prod r_i) after the projection Z0 (r_i = min(N_i, K_i)).
  The search: GCV on a log grid of ``ridge / max(s^2)`` from 1e-14 to 1e2 (4 points per
  decade), then golden-section search in log10(ridge) between the neighbours of the best grid
  point (to 1e-3). Beyond 2^16 products the search runs on an 8192-bin histogram of log(s^2)
  (each bin narrower than 1% of the range of log(s^2)); the reported score is exact.
- ``width="gcv"`` also chooses the width parameters (``emb.width_param``: sigma, width) by GCV,
  the ridge re-optimised for every trial: one factor applied to every axis's starting width
  (9 factors 2^-2..2^2, then golden section in log(factor) between the best neighbours), then,
  when the axes differ, each axis alone within 2^-0.5..2^0.5 of that.

With ``embedders=None`` kronpe chooses the embedders (``default_embedders``): cubic B-splines
``BSpline(K, 3, margin=2)`` with centres at the spacing of the training samples
(``K = round(1 / median sample spacing)``) and two extra centres beyond each end so the basis
covers the domain (MATH.md 3.5), the signal padded by 2 point-reflected samples per end, the
ridge by GCV. See ``default_embedders`` for the measurements behind this choice (held-out PSNR on
photographs; GCV-chosen widths measured worse there, so the width is a fixed rule).

Coordinates are in [0, 1]; the default for an axis of N samples is linspace(0, 1, N + 1)[:-1].
For a signal subsampled with stride s from a grid of N_full, the training coordinates are
``linspace(0, 1, N_full + 1)[:-1][::s]``.

Batches: ``GridPlan.fit(signal, batch_axes=b)`` treats the last b axes of the signal as
independent signals (each its own GCV ridge); the axes between the D grid axes and the batch
axes are channels of one signal (one shared ridge). ``fit_grid`` fits one signal (b = 0).

Device signals (a CuPy array, a CUDA torch tensor) are fitted on their GPU and stream, and their
models predict there: see ``GridPlan`` and ``GridModel`` for what crosses to the host.
"""
from __future__ import annotations

import collections
import contextlib
import functools
import math
import threading
import warnings

from typing import List, Optional, Sequence, Tuple

import numpy as np

from .. import _caches
from .._adapters import arrays as _arrays, validate as _validate
from ..embedders import BSpline, Embedder, Triangle
from ..ops import host_chain
from . import penalised, smooth
from .gcv import _GCVCurve, _search_widths
from .penalty import DifferencePenalty, IdentityPenalty, penalty_arg
from .points import ConvergenceWarning
from .grid import (
    Ridge,
    _Axis,
    _coords_arg,
    _coords_list,
    _embedders_arg,
    _grid_ndim,
    _outer,
    _ridge_arg,
    _signal_arg,
)

__all__ = ["fit_grid", "GridPlan", "GridModel", "default_embedders"]


# The default embedders (measured on photographs; see default_embedders)
_DEFAULT_MARGIN = 2
# predict_grid's device basis matrices, shared by every model of the same embedders (frozen
# dataclasses, compared by value): a plan's fresh fit predicted at a grid seen before embeds and
# uploads nothing (a 3-D 64^3 -> 128^3 fit + predict on an H200 spent half its time embedding).
# Keyed by the embedders, the weights' kind, device and dtype and the coordinates; four sets and
# _DEVICE_BASES_BYTES at most (larger sets are kept by their model alone, as before).
_DEVICE_BASES: "collections.OrderedDict" = collections.OrderedDict()
_DEVICE_BASES_MAX = 4
_DEVICE_BASES_BYTES = 256 << 20
_DEVICE_BASES_LOCK = threading.Lock()
_DEFAULT_ORDER = 3
_DEFAULT_PAD = 2


# ---- the model -------------------------------------------------------------------------------


class GridModel:
    """A fitted Kronecker model: weights W (K_1, ..., K_D, *channels) and one embedder per axis.

    Device weights (a CuPy array or a CUDA torch tensor, from the fit of such a signal) stay on
    their GPU: ``predict_grid`` and ``predict`` embed the coordinates on the host (they are small),
    upload the basis matrices and compute on the weights' device and current stream, returning the
    weights' kind; ``save`` copies the weights to the host.

    Attributes
    ----------
    weights : array, shape (K_1, ..., K_D, *channels)
        NumPy, or the signal's device kind (CuPy, CUDA torch) for a device fit.
    ridge : float or np.ndarray
        The ridge used (an array over the batch axes when a batch was fitted with GCV).
    embedders : list of Embedder
    gcv : float, np.ndarray or None
        The GCV score at ``ridge`` (None when the ridge was given or not chosen by GCV).
    info : dict
        Of the iterative fits (penalty or mask): ``iterations``, ``residual``, ``converged``,
        ``data_residual``, ``rho``, ``penalty``, and the held-out lambda search (last batch entry);
        the default fill of a grid with holes also ``boundary`` (the penalty's, held out:
        "natural" or "reflect"), ``boundary_holdout_errors``, ``clipped`` (the fraction of
        values clipped to the samples' range) and, at the interpolation limit of a 2-D grid,
        ``higher_holdout_errors`` (thin-plate, thin-plate + a tenth of the third power) and
        ``lead_penalty`` when the leading component took the higher-order penalty.
    """

    def __init__(self, weights: np.ndarray, embedders: Sequence[Embedder], ridge, gcv=None, info=None):
        self.weights = weights
        self.info = {} if info is None else info
        self.embedders = list(embedders)
        self.ridge = ridge
        self.gcv = gcv

    @property
    def ndim(self) -> int:
        return len(self.embedders)

    @property
    def channels(self) -> Tuple[int, ...]:
        return tuple(self.weights.shape[self.ndim :])

    def __repr__(self) -> str:
        r = self.ridge if np.ndim(self.ridge) else f"{float(self.ridge):.4g}"
        return f"GridModel(weights={self.weights.shape} {self.weights.dtype}, ridge={r}, embedders={self.embedders})"

    def save(self, path) -> None:
        """Write the model to ``path`` (``.npz``, no pickle; ``kronpe.load`` reads it back)."""
        from .saving import save_model

        model = self
        if _arrays.is_device(self.weights):  # the file holds host arrays
            model = GridModel(_arrays.to_host(self.weights, "weights"), self.embedders, self.ridge, self.gcv, self.info)
        save_model(model, path)

    def predict_grid(self, coords) -> np.ndarray:
        """Values on the grid of ``coords`` (D 1-D arrays in [0, 1], any lengths).

        Returns
        -------
        array, shape (M_1, ..., M_D, *channels), C-contiguous, the weights' dtype
            NumPy (torch for torch coordinates); the weights' kind for device weights, computed
            on their GPU (the basis matrices are evaluated on the host and uploaded).
        """
        coords = _coords_list(coords)
        if len(coords) != self.ndim:
            raise ValueError(f"coords must hold {self.ndim} arrays (one per grid axis), got {len(coords)}")
        W = self.weights
        kd = _arrays.dask_api(W)
        if kd is not None:  # dask weights: a dask array, blocks predicted on the workers
            return kd.predict_grid(self, coords)
        dev = _arrays.is_device(W)
        dt = np.dtype(_arrays.dtype_name(W))
        template = coords[0] if coords else None
        coords = [_validate.coords_1d(f"coords[{i}]", _host(c, f"coords[{i}]"), np.float64)
                  for i, c in enumerate(coords)]
        if not dev:
            _validate.check_array_budget("coords", [c.size for c in coords] + list(self.channels), 2 * dt.itemsize,
                                         "the predicted grid: pass fewer coordinates per axis")
        if dev:  # the device basis matrices, kept per embedders and coordinates (_DEVICE_BASES)
            place = (_arrays.kind(W), _arrays.device_index(W), dt.char) + tuple(
                (c.size, c.tobytes()) for c in coords)
            own = self.__dict__.setdefault("_device_bases", collections.OrderedDict())
            key, store = (tuple(self.embedders),) + place, _DEVICE_BASES
            try:
                hash(key)
            except TypeError:  # an embedder with unhashable fields: this model's own store
                key, store = place, own
            with _DEVICE_BASES_LOCK:
                hit = None
                for kept in (store, own):
                    hit = kept.get(key)
                    if hit is not None:
                        kept.move_to_end(key)
                        break
            if hit is not None:
                modes, mats = hit
                return _device_chain(W, mats, modes) if modes else _device_copy(W)
        # identity factors (a fill's Triangle(N) at its own nodes) are left out of the chain; a
        # Triangle at its centres is known to be one without its N x N matrix (0.25 ms at 451 x 300)
        phis = [None if _hats_at_centres(e, c) else np.asarray(e(c), dtype=np.float64).astype(dt, copy=False)
                for c, e in zip(coords, self.embedders)]
        modes = tuple(i for i, p in enumerate(phis) if p is not None and not _is_identity(p))
        if dev:
            mats = [_arrays.device_from_host(np.ascontiguousarray(phis[i]), W) for i in modes]
            if store is _DEVICE_BASES and sum(int(a.nbytes) for a in mats) > _DEVICE_BASES_BYTES:
                store = own
            with _DEVICE_BASES_LOCK:
                store[key] = (modes, mats)
                while len(store) > _DEVICE_BASES_MAX or (store is _DEVICE_BASES and sum(
                        int(a.nbytes) for _, ms in store.values() for a in ms) > _DEVICE_BASES_BYTES):
                    store.popitem(last=False)
            return _device_chain(W, mats, modes) if modes else _device_copy(W)
        out = (host_chain(W, [phis[i] for i in modes], modes, order="C") if modes
               else np.array(W, dtype=dt, order="C"))
        # torch coordinates give a torch tensor back (NumPy in, NumPy out)
        return _arrays.like(out, template)

    def predict(self, points, chunk: int = 1 << 22) -> np.ndarray:
        """Values at scattered points, without any Kronecker product.

        Row p is sum over k of W[k_1..k_D] * prod_i Psi_i(x_pi)[k_i], contracted one axis at a
        time (a GEMM on the first axis, batched products on the others), in blocks of points so
        that no work array exceeds about ``chunk`` elements.

        Parameters
        ----------
        points : array, shape (P, D), coordinates in [0, 1]

        Returns
        -------
        array, shape (P, *channels)
            NumPy (torch for torch points); the weights' kind for device weights, computed on
            their GPU (the points are embedded on the host, the embeddings uploaded).
        """
        kd = _arrays.dask_api(self.weights)
        if kd is not None:
            return kd.predict_points(self, points, chunk)
        pts = _validate.real_array("points", _host(points, "points"))
        D = self.ndim
        if pts.ndim != 2 or pts.shape[1] != D:
            raise ValueError(f"points must have shape (P, {D}), got {pts.shape}")
        _validate.check_array_budget("points", (pts.shape[0], D + max(1, math.prod(self.channels))), 8,
                                     "predict fewer points at once")
        pts = pts.astype(np.float64)
        _validate.finite("points", pts)
        if pts.size and (pts.min() < 0 or pts.max() > 1):  # noqa: SIM102
            raise ValueError(f"points must lie in [0, 1], got values in [{pts.min():g}, {pts.max():g}]")
        W = self.weights
        dev = _arrays.is_device(W)
        dt = np.dtype(_arrays.dtype_name(W))
        K = tuple(W.shape[:D])
        P = pts.shape[0]
        out = (_arrays.device_empty(W, (P,) + self.channels, dt.name) if dev else np.empty((P,) + self.channels, dt))
        rest = int(np.prod(W.shape[1:], dtype=np.int64))
        W0 = W.reshape(K[0], rest)

        def embed(i: int, x: np.ndarray):  # (p, K_i) in W's dtype, on W's device for device weights
            e = np.asarray(self.embedders[i](x), np.float64).astype(dt, copy=False)
            return _arrays.device_from_host(e, W) if dev else e

        step = max(1, int(_validate.positive_int("chunk", chunk) // max(1, rest)))
        for start in range(0, P, step):
            x = pts[start : start + step]
            p = x.shape[0]
            t = embed(0, x[:, 0]) @ W0  # (p, rest)
            for i in range(1, D):
                t = (embed(i, x[:, i])[:, None, :] @ t.reshape(p, K[i], -1))[:, 0, :]  # (p, rest / K_i)
            out[start : start + p] = t.reshape((p,) + self.channels)
        return out if dev else _arrays.like(out, points)


# ---- the plan --------------------------------------------------------------------------------


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
        coords = _coords_list(coords)
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
        self.coords = _coords_arg(coords, shape)
        self.embedders = _embedders_arg(embedders, len(shape))
        self.ridge = _ridge_arg(ridge)
        self.rcond = None if rcond is None else _validate.nonnegative_float("rcond", rcond)
        pad = _validate.nonnegative_int("pad", pad)
        self.pads = tuple(min(pad, n - 1) for n in shape)
        self.penalty = penalty_arg(penalty)
        self.tol = _validate.positive_float("tol", tol)
        self.maxiter = None if maxiter is None else _validate.positive_int("maxiter", maxiter)
        self._axes = [_Axis.factor(e, c, p) for e, c, p in zip(self.embedders, self.coords, self.pads)]
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
        return tuple(a.V.shape[0] for a in self._axes)

    @property
    def singular_values(self) -> List[np.ndarray]:
        return [a.s for a in self._axes]

    # -- the three steps ------------------------------------------------------------------

    def _factors(self, dt: np.dtype, which: str) -> List[np.ndarray]:
        key = (np.dtype(dt).char, which)
        if key not in self._cast:
            if which == "Ut":
                mats = [np.ascontiguousarray(a.U.T.astype(dt)) for a in self._axes]
            else:
                mats = [np.ascontiguousarray(a.V.astype(dt)) for a in self._axes]
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
            self._cast["s"] = _outer([a.s for a in self._axes])
        return self._cast["s"]

    def _filter(self, ridge: float, dt, s: Optional[np.ndarray] = None) -> np.ndarray:
        """s / (s^2 + ridge) over the products s of singular values (ridge 0: pseudo-inverse), all
        of them or the block ``s`` of them (kronpe.dask filters its blocks of Z0 one at a time)."""
        if s is None:
            s = self._products()
        if ridge > 0:
            return (s / (s * s + ridge)).astype(dt)
        rcond = self.rcond
        if rcond is None:
            eps = np.finfo(dt).eps
            rows = int(np.prod([a.U.shape[0] for a in self._axes]))
            rcond = max(rows, int(np.prod(self.K))) * eps
        smax = math.prod(float(a.s.max()) if a.s.size else 0.0 for a in self._axes)  # = max of all products
        with np.errstate(divide="ignore"):
            return np.where(s > rcond * smax, 1.0 / s, 0.0).astype(dt)

    def _weights(self, Z: np.ndarray) -> np.ndarray:
        mats = self._factors(Z.dtype, "V")
        return host_chain(Z, mats, tuple(range(len(mats))), order="C")

    @property
    def _full(self) -> bool:
        """Every U_i square: the projection reaches the whole (padded) signal (rss0 = 0)."""
        return all(a.U.shape[0] == a.U.shape[1] for a in self._axes)

    def _curve(self, S: np.ndarray, Z0: np.ndarray) -> _GCVCurve:
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

    def _gcv_curve(self, w: np.ndarray, ss) -> _GCVCurve:
        """The GCV curve of one signal from its (w, ss) of ``_gcv_sums``."""
        rss0 = 0.0 if ss is None else float(ss) - float(w.sum())
        s = self._products()
        return _GCVCurve(s * s, w, rss0, int(np.prod([a.U.shape[0] for a in self._axes])))

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
        S = _signal_arg(_host(signal, "signal"), self.shape)
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
        ridge = self.ridge if ridge is None else _ridge_arg(ridge)
        if mask is not None:
            mask = _observed_mask(_host(mask, "mask"), self.shape)
            if any(self.pads):
                raise ValueError("pad must be 0 with a mask (reflected samples of missing values are unknown)")
        nb = _validate.nonnegative_int("batch_axes", batch_axes)
        kd = _arrays.dask_api(signal)
        if kd is not None:
            return kd.fit_plan(self, signal, ridge, nb, mask)
        if _arrays.is_device(signal):
            if self.penalty is None and mask is None:
                return self._fit_device(signal, ridge, nb)
            return _to_device(self.fit(_arrays.to_host(signal, "signal"), ridge, nb, mask), signal)  # host solve
        S = _signal_arg(signal, self.shape, mask)
        if nb > S.ndim - self.ndim:
            raise ValueError(f"batch_axes={nb} but the signal has only {S.ndim - self.ndim} axes after the grid axes")
        return self._fit(S, ridge, nb, mask)

    def _fit(self, S: np.ndarray, ridge: Ridge, nb: int = 0, mask: Optional[np.ndarray] = None) -> GridModel:
        """The fit of a signal checked once (``_signal_arg``): float32/float64, finite where
        observed, the plan's grid shape; nothing here asks it again."""
        if self.penalty is not None or mask is not None:
            return self._fit_penalised(S, ridge, nb, mask)
        dt = S.dtype
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
        from .._adapters import cuda as _cuda

        _cuda.require("GridPlan.fit")
        X = _device_signal(signal, self.shape, nb)
        D = self.ndim
        with _device_scope(X):
            f = self._device_factors(X)
            ok = _finite_flag(X)  # read back at the end: one scalar, one sync
            Z0 = _device_chain(X, f["Ut"], tuple(range(D)), order="K")
            if ridge != "gcv":
                F, lam, score = self._device_filter(X, ridge), ridge, None
            else:  # the flag travels with GCV's one copy to the host (ValueError there)
                F, lam, score = self._device_gcv(X, Z0, nb, ok, f["P"])
                ok = True
            W = _device_chain(_filtered(Z0, F, D, nb), f["V"], tuple(range(D)))
            _check_finite(X, ok)  # a fixed ridge: the one synchronisation, after everything is queued
        return GridModel(W, self.embedders, lam, score)

    def _device_gcv(self, X, Z0, nb: int, ok, pads):
        """The GCV filters of device signals: w (and ss) reduced on the device, one copy to the
        host (with the finiteness flag), each entry minimised there, the filters uploaded as one
        array. Returns (filters, ridge(s), score(s)); ValueError for a signal with NaN or Inf."""
        D = self.ndim
        z = _arrays.cast(Z0, "float64")
        w = _device_sum(z * z, tuple(range(D, len(Z0.shape) - nb)))  # (r.., *batch)
        parts = [w.reshape(-1)]
        if not self._full:
            Xp = _device_chain(X, pads, tuple(range(D)), order="K") if pads is not None else X
            x = _arrays.cast(Xp, "float64")
            parts.append(_device_sum(x * x, tuple(range(len(X.shape) - nb))).reshape(-1))  # (*batch)
        parts.append(_arrays.cast(ok.reshape(1), "float64"))
        host = _arrays.to_host(_device_concat(parts))  # the one copy (a synchronisation)
        if host[-1] != 1:
            _check_finite(X, False)  # raises, unless a float64 sum of huge finite values overflowed
        wh = host[:math.prod(w.shape)].reshape(tuple(w.shape))
        ss = None if self._full else host[wh.size:-1].reshape(wh.shape[D:])
        F, lam, score = self._gcv_filters(wh, ss, nb, np.dtype(_arrays.dtype_name(X)))
        return _arrays.device_from_host(F, X), lam, score

    def _fit_penalised(self, S: np.ndarray, ridge: Ridge, nb: int, mask: Optional[np.ndarray]) -> GridModel:
        """CG on (A^T A + ridge R) w = A^T s (kronpe.solvers.penalised), one solve per batch entry."""
        D = self.ndim
        system = penalised.GridSystem([a.U * a.s @ a.V.T for a in self._axes], self.K, mask)
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
        new._axes = [_Axis.factor(e, c, p) for e, c, p in zip(new.embedders, self.coords, self.pads)]
        new._cast = {}
        new._dev = {}
        return new


# ---- helpers of the fits -----------------------------------------------------------------------


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


def _host(x, name: str):
    """x, or a NumPy copy of a device array x."""
    return _arrays.to_host(x, name) if _arrays.is_device(x) else x


def _to_device(model: GridModel, template) -> GridModel:
    """A model fitted on the host with its weights copied to the template's device."""
    model.weights = _arrays.device_from_host(np.asarray(model.weights), template)
    return model


def _device_lib(x):
    """The array library of a device array: the cupy or the torch module."""
    if _arrays.kind(x) == "cupy":
        import cupy

        return cupy
    import torch

    return torch


def _device_scope(x):
    """A context with x's device current (CuPy's kernels run on the current device)."""
    if _arrays.kind(x) == "cupy":
        import cupy

        return cupy.cuda.Device(_arrays.device_index(x))
    return contextlib.nullcontext()


def _device_sum(x, axes: Tuple[int, ...]):
    """x summed over ``axes`` (none: x itself; torch sums everything for dim=())."""
    if not axes:
        return x
    return x.sum(axis=axes) if _arrays.kind(x) == "cupy" else x.sum(dim=axes)


def _device_concat(parts: list):
    lib = _device_lib(parts[0])
    return lib.concatenate(parts) if _arrays.kind(parts[0]) == "cupy" else lib.cat(parts)


def _device_copy(x):
    """A C-contiguous copy of a device array."""
    if _arrays.kind(x) == "cupy":
        return _device_lib(x).array(x, order="C", copy=True)
    return x.clone(memory_format=_device_lib(x).contiguous_format)


def _device_chain(T, mats, modes: Tuple[int, ...], order: str = "C"):
    """The mode-product chain on T's device and current stream (host matrices are uploaded)."""
    from .._adapters import cuda as _cuda

    return _cuda.multi_mode_product(T, mats, modes, order)


def _device_signal(x, shape: Tuple[int, ...], nb: int):
    """A device signal checked where it lies (shape, dtype: float32 stays, else float64; its
    values by the caller's finiteness flag), detached from autograd."""
    from .._adapters import cuda as _cuda

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


def _finite_flag(x):
    """A device boolean, true when every value of x is finite: its sum in float64 is (one
    reduction; NaN and Inf reach the sum, which float32 values cannot overflow), confirmed
    element by element by ``_check_finite`` only when it is not."""
    lib = _device_lib(x)
    return lib.isfinite(x.sum(dtype=lib.float64))


def _check_finite(x, ok) -> None:
    """ValueError naming the signal unless ``ok`` (a bool or a device boolean: read back here)."""
    if ok if isinstance(ok, bool) else bool(_arrays.to_host(ok)):
        return
    lib = _device_lib(x)
    if bool(_arrays.to_host(lib.isfinite(x).all())):  # a float64 sum of huge finite values overflowed
        return
    found = "NaN" if bool(_arrays.to_host(lib.isnan(x).any())) else "Inf"
    raise ValueError(f"signal must be finite, found {found}")


# ---- defaults and the one-call fit --------------------------------------------------------------

def default_embedders(coords: Sequence[np.ndarray]) -> List[Embedder]:
    """The embedders kronpe picks for samples at ``coords``.

    One ``BSpline(K, order=3, margin=2)`` per axis (width 1 / K: the cubic-spline space) with
    K = round(1 / h), h the median spacing of the sorted coordinates (K = N for the default
    coordinates; 1 for a single sample): cubic B-splines centred at the sample spacing over
    [0, 1], plus two beyond each end (MATH.md 3.5). ``fit_grid`` pairs them with a padding of 2
    samples per end (``GridPlan(pad=2)``) and a GCV ridge.

    Measured with benches/default_embedders.py (skimage astronaut, camera, coffee cropped square;
    fit the [::2, ::2] subsample at its coordinates, predict the full image, PSNR in dB):
    this choice 29.78 / 28.68 / 27.73, against the papers' Gaussian sigma = 0.0025 (0.64 / K,
    ridge 0) 29.47 / 28.19 / 27.48, Triangle d = 1/K 29.11 / 28.00 / 27.18,
    scipy.ndimage.zoom(order=3) 26.01 / 26.50 / 24.93, and a cubic spline evaluated at the right
    positions (scipy.ndimage.map_coordinates, mode "nearest") 29.78 / 28.73 / 27.87.
    Alternatives measured: widths chosen by GCV lose 1-2.5 dB (GCV's leave-one-out favours
    smoother bases than 2x upsampling wants); a narrower B-spline (0.9 / K) gains 0.15 dB on
    these photographs but no longer reproduces polynomials (errors of 2e-3 instead of 1e-7 on a
    smooth sinusoid); Gaussians (0.6 / K) 29.82 / 28.76 / 27.68; no padding costs 0.05-0.2 dB
    at the borders and far more on smooth signals.
    """
    embs = []
    for c in coords:
        c = np.sort(np.asarray(c, dtype=np.float64))
        if c.size < 2:
            K = 1
        else:
            d = np.diff(c)
            d = d[d > 0]
            K = int(round(1.0 / float(np.median(d)))) if d.size else 1
            K = max(1, min(K, 4 * c.size))
        embs.append(BSpline(K, order=_DEFAULT_ORDER, margin=_DEFAULT_MARGIN))
    return embs


def _hats_at_centres(e, c: np.ndarray) -> bool:
    """e is a Triangle of width 1 / K and no margin (a fill's model) and c its centres k / K,
    exactly: its matrix there is the identity (up to the rounding _is_identity allows)."""
    return (type(e) is Triangle and e.margin == 0 and not e.paper_distance and float(e.width) == 1.0 / e.K_base
            and c.shape == (e.K_base,) and bool(np.array_equal(c, _node_centres(e.K_base))))


@functools.lru_cache(maxsize=16)
def _node_centres(K: int) -> np.ndarray:
    """Triangle(K).centres (k / K), read-only: kept for the last few K (a prediction on a fill's
    own nodes compares its coordinates with them on every call)."""
    out = _fill_embedder(K).centres
    out.setflags(write=False)
    return out


@functools.lru_cache(maxsize=16)
def _fill_embedder(n: int) -> Triangle:
    """Triangle(n), the embedder of a fill's axis of n nodes (frozen: one instance per n)."""
    return Triangle(n)


def _is_identity(phi: np.ndarray) -> bool:
    """phi is the identity matrix up to rounding (|phi - I| <= 1e-12 everywhere: a Triangle(N) at
    coordinates i / N that are not binary fractions, N = 400 say, evaluates to I plus entries of
    1e-14; the chain they cost took 15 ms for a 400 x 600 RGB fill, and skipping it changes the
    prediction by less than 1e-12 relative)."""
    n = phi.shape[0]
    if phi.shape != (n, n):
        return False
    d = np.diagonal(phi)
    if not bool(np.all(np.abs(d - 1) <= 1e-12)):
        return False
    off = np.abs(phi).sum(axis=1) - np.abs(d)
    return bool(np.all(off <= 1e-12))


def _observed_mask(mask, shape) -> np.ndarray:
    """The validated boolean mask (True = observed), with at least one observed value."""
    mask = _validate.bool_array("mask", mask, shape)
    if mask.size and not mask.any():
        raise ValueError("mask marks no observed value (every entry is False); at least one True is needed")
    return mask


def _fit_smooth(signal, shape: Tuple[int, ...], mask: np.ndarray, ridge: Ridge, device: Optional[int] = None
                ) -> GridModel:
    """The default fit of a grid with holes (kronpe.solvers.smooth): Triangle(N_i) embedders
    (the identity at the default coordinates), thin-plate penalty, multigrid-preconditioned CG;
    ``device``: a CUDA device that solves it where it can (smooth.fit)."""
    planes, lo, hi = _signal_arg(signal, shape, mask, with_range=True, planar=True)  # (C, N...)
    D = len(shape)
    chans = np.shape(signal)[D:]
    # the solver's work arrays: about 12 float32 grids (multigrid levels, CG vectors) + the channels
    _validate.check_array_budget("signal", list(shape) + [12 + 2 * max(1, int(np.prod(chans)))], 4,
                                 "the fill of a grid with holes needs about 12 + 2 C float32 values per node")
    W, lam, info = smooth.fit(smooth.DataTerm(shape, mask, total=int(np.count_nonzero(mask))), list(planes), None if ridge == "gcv" else float(ridge),
                              value_range=(lo, hi), device=device)
    return GridModel(W.reshape(shape + chans).astype(planes.dtype, copy=False), [_fill_embedder(n) for n in shape], lam,
                     info=info)


def fit_grid(
    signal,
    embedders=None,
    coords=None,
    ridge: Ridge = "gcv",
    ndim: Optional[int] = None,
    width: Optional[str] = None,
    pad: Optional[int] = None,
    rcond: Optional[float] = None,
    mask=None,
    penalty: Optional[DifferencePenalty] = None,
    tol: float = 1e-10,
    maxiter: Optional[int] = None,
) -> GridModel:
    """Fit a signal sampled on a grid in closed form.

    Parameters
    ----------
    signal : array, shape (N_1, ..., N_D, *channels)
        float32 gives float32 weights; anything else float64. Must be finite. A CuPy array or a
        CUDA torch tensor is fitted on its GPU (``GridPlan``: the closed form there, the padding
        of the default embedders and the GCV ridge included) and gives weights of its kind there;
        the fits with a mask or a penalty, and the width search, run on a host copy.
    embedders : Embedder or list of D Embedder, optional
        None: kronpe chooses them (``default_embedders``: cubic B-splines at the sample spacing
        with a covering margin) and pads the signal by 2 samples per end.
    coords : list of D 1-D arrays in [0, 1], optional
        Default linspace(0, 1, N_i + 1)[:-1] per axis.
    ridge : float >= 0 or "gcv"
        0 is the pseudo-inverse; "gcv" (default) chooses it by generalised cross-validation.
    ndim : int, optional
        D, when neither embedders nor coords say it and the default guess (a last axis of 1-4
        on a 3-D+ signal is channels, every other axis a grid axis) is wrong.
    width : None or "gcv"
        "gcv": choose the embedders' width parameters by GCV too.
    pad : int, optional
        Padding in samples per end (``GridPlan``); default 2 with embedders=None, else 0.
    rcond : float, optional
        Pseudo-inverse cutoff for ridge=0.
    mask : bool array (N_1, ..., N_D), optional
        True where the signal is observed; values elsewhere are ignored (NaN allowed there).
        With no embedders, coords, pad or penalty: the default smooth fit of
        :mod:`kronpe.solvers.smooth` (values at the samples, thin-plate penalty, lambda held out).
    penalty : DifferencePenalty, optional
        What the ridge weighs (default: ||W||^2); see ``GridPlan``.
    tol, maxiter : float, int
        Of the conjugate gradients that solve fits with a penalty or a mask (``GridPlan``).

    Returns
    -------
    GridModel
    """
    kd = _arrays.dask_api(signal)
    dev = _arrays.is_device(signal)
    s = signal if kd is not None or dev else _validate.real_array("signal", signal)
    if width is not None:
        _validate.choice("width", width, ("gcv",))
    D = _grid_ndim(tuple(np.shape(s)), ndim, embedders, coords)
    if np.ndim(s) < D:
        raise ValueError(f"signal must have at least {D} axes, got shape {np.shape(s)}")
    shape = tuple(np.shape(s)[:D])
    if 0 in shape:
        raise ValueError(f"signal has an empty grid axis: shape {np.shape(s)}")
    default_coords = coords is None
    coords = _coords_arg(coords, shape)
    if mask is not None:
        mask = _observed_mask(_host(mask, "mask"), shape)
        if width is not None:
            raise ValueError("width='gcv' cannot be combined with a mask (GCV needs every sample)")
        if embedders is None and penalty is None and default_coords and pad is None and kd is None:
            if dev:  # copied to the host; the solve on the signal's GPU where it can (smooth.fit)
                from .. import cuda as kcuda

                device = _arrays.device_index(s) if kcuda.is_available() else None
                return _to_device(_fit_smooth(_arrays.to_host(s, "signal"), shape, mask, _ridge_arg(ridge), device), s)
            return _fit_smooth(s, shape, mask, _ridge_arg(ridge))
    if embedders is None:
        embedders = default_embedders(coords)
        pad = (_DEFAULT_PAD if mask is None else 0) if pad is None else pad
    plan = GridPlan(coords, _embedders_arg(embedders, D), ridge=_ridge_arg(ridge), rcond=rcond,
                    pad=0 if pad is None else pad, penalty=penalty, tol=tol, maxiter=maxiter)
    if kd is not None:
        if width is not None:
            raise ValueError("width='gcv' is not available for dask signals: give the embedders' widths")
        return kd.fit_plan(plan, s, plan.ridge, 0, mask)
    if mask is not None:
        return plan.fit(s, mask=mask)
    if dev:  # on the device (GridPlan.fit); the width search on a host copy
        if width == "gcv":
            plan = _search_widths(plan, _signal_arg(_arrays.to_host(s, "signal"), shape))
        return plan.fit(s)
    S = _signal_arg(s, shape)
    if width == "gcv":
        plan = _search_widths(plan, S)
    return plan._fit(S, plan.ridge)


for _cached in (_node_centres, _fill_embedder):  # kronpe.clear_caches forgets them too
    _caches.register(_cached.cache_clear)
