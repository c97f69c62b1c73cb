"""The fitted model of a grid fit: ``GridModel``, weights W (K_1, ..., K_D, *channels) and one
embedder per axis, predicted on grids (mode-n products) and at scattered points (one axis at a
time), on the host or on the weights' GPU.
"""
from __future__ import annotations

import collections
import functools
import math
import threading
from typing import Sequence, Tuple

import numpy as np

from .. import _caches
from .. import io as _io
from .._adapters import arrays as _arrays, cuda as _cuda, validate as _validate
from ..embedders import Embedder, Triangle
from ..ops import host_chain
from .grid import coords_list

__all__ = ["GridModel"]

# predict_grid's device basis matrices, shared by every model of the same embedders (frozen
# dataclasses, compared by value): a plan's fresh fit predicted at a grid seen before embeds and
# uploads nothing. Keyed by the embedders, the weights' kind, device and dtype and the
# coordinates; _DEVICE_BASES_MAX sets and _DEVICE_BASES_BYTES at most (larger sets are kept by
# their model alone).
_DEVICE_BASES: "collections.OrderedDict" = collections.OrderedDict()
_DEVICE_BASES_MAX = 4
_DEVICE_BASES_BYTES = 256 << 20
_DEVICE_BASES_LOCK = threading.Lock()


@_io.model_kind("grid")
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
        model = self
        if _arrays.is_device(self.weights):  # the file holds host arrays
            model = GridModel(_arrays.to_host(self.weights, "weights"), self.embedders, self.ridge, self.gcv, self.info)
        _io.save_model(model, path)

    def predict_grid(self, coords) -> np.ndarray:
        """Values on the grid of ``coords`` (D 1-D arrays in [0, 1], any lengths).

        Returns
        -------
        array, shape (M_1, ..., M_D, *channels), C-contiguous, the weights' dtype
            NumPy (torch for torch coordinates); the weights' kind for device weights, computed
            on their GPU (the basis matrices are evaluated on the host and uploaded).
        """
        coords = coords_list(coords)
        if len(coords) != self.ndim:
            raise ValueError(f"coords must hold {self.ndim} arrays (one per grid axis), got {len(coords)}")
        W = self.weights
        kd = _arrays.dask_api(W)
        if kd is not None:  # dask weights: a dask array, blocks predicted on the workers
            return kd.predict_grid(self, coords)
        dev = _arrays.is_device(W)
        dt = np.dtype(_arrays.dtype_name(W))
        template = coords[0] if coords else None
        coords = [_validate.coords_1d(f"coords[{i}]", _arrays.host_if_device(c, f"coords[{i}]"), np.float64)
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
                return _cuda.multi_mode_product(W, mats, modes, "C") if modes else _arrays.device_copy(W)
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
            return _cuda.multi_mode_product(W, mats, modes, "C") if modes else _arrays.device_copy(W)
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
        pts = _validate.real_array("points", _arrays.host_if_device(points, "points"))
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


def _hats_at_centres(e, c: np.ndarray) -> bool:
    """e is a Triangle of width 1 / K and no margin (a fill's model) and c its centres k / K,
    exactly: its matrix there is the identity (up to the rounding _is_identity allows)."""
    return (type(e) is Triangle and e.margin == 0 and not e.paper_distance and float(e.width) == 1.0 / e.K_base
            and c.shape == (e.K_base,) and bool(np.array_equal(c, _node_centres(e.K_base))))


@functools.lru_cache(maxsize=16)
def _node_centres(K: int) -> np.ndarray:
    """Triangle(K).centres (k / K), read-only: kept for the last few K (a prediction on a fill's
    own nodes compares its coordinates with them on every call)."""
    out = fill_embedder(K).centres
    out.setflags(write=False)
    return out


@functools.lru_cache(maxsize=16)
def fill_embedder(n: int) -> Triangle:
    """Triangle(n), the embedder of a fill's axis of n nodes (frozen: one instance per n)."""
    return Triangle(n)


def _is_identity(phi: np.ndarray) -> bool:
    """phi is the identity matrix up to rounding (|phi - I| <= 1e-12 everywhere: a Triangle(N) at
    coordinates i / N that are not binary fractions, N = 400 say, evaluates to I plus entries of
    1e-14; the chain they would cost takes 15 ms for a 400 x 600 RGB fill, and skipping it changes
    the prediction by less than 1e-12 relative)."""
    n = phi.shape[0]
    if phi.shape != (n, n):
        return False
    d = np.diagonal(phi)
    if not bool(np.all(np.abs(d - 1) <= 1e-12)):
        return False
    off = np.abs(phi).sum(axis=1) - np.abs(d)
    return bool(np.all(off <= 1e-12))


def to_device(model: GridModel, template) -> GridModel:
    """A model fitted on the host with its weights copied to the template's device."""
    model.weights = _arrays.device_from_host(np.asarray(model.weights), template)
    return model


for _cached in (_node_centres, fill_embedder):  # kronpe.clear_caches forgets them too
    _caches.register(_cached.cache_clear)
