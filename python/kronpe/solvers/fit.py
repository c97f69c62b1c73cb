"""Grid fits in one call: ``fit_grid`` and the choices it makes when the caller leaves them open
(docs/math/encodings.rst: the grid fit in closed form, borders).

``fit_grid`` checks its arguments, then hands the signal to the closed form of
:class:`~.grid_plan.GridPlan` (or, for a dask signal, to :mod:`kronpe.dask`); a grid with holes
and no other option goes to the default fill of :mod:`.smooth`. Its model is a
:class:`~.grid_model.GridModel`.

- **Embedders** (``embedders=None``, ``default_embedders``): cubic B-splines
  ``BSpline(K, 3, margin=2)`` with centres at the spacing of the training samples
  (``K = round(1 / median sample spacing)``) and two extra centres beyond each end so the basis
  covers the domain (docs/math/encodings.rst, "Borders"), the signal padded by 2 point-reflected
  samples per end, the ridge by GCV. The width is a fixed rule: widths chosen by GCV predicted
  held-out photographs worse (``default_embedders`` says by how much).
- **Widths** (``width="gcv"``): the embedders' width parameters (``emb.width_param``: sigma,
  width) chosen by GCV too, the ridge re-optimised for every trial (:mod:`.gcv`).
- **Coordinates** are in [0, 1]; the default for an axis of N samples is
  linspace(0, 1, N + 1)[:-1]. For a signal subsampled with stride s from a grid of N_full, the
  training coordinates are ``linspace(0, 1, N_full + 1)[:-1][::s]``.
- **Batches**: ``fit_grid`` fits one signal; ``GridPlan.fit(signal, batch_axes=b)`` many.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from .. import cuda as _kcuda
from .._adapters import arrays as _arrays, validate as _validate
from .._shared import Ridge, ridge_or_gcv
from ..embedders import BSpline, Embedder
from ..operators.penalty import DifferencePenalty
from . import smooth
from .gcv import search_widths
from .grid import coords_arg, embedders_arg, grid_ndim, observed_mask, signal_arg
from .grid_model import GridModel, fill_embedder, to_device
from .grid_plan import GridPlan

__all__ = ["fit_grid", "GridPlan", "GridModel", "default_embedders"]

# The default embedders (measured on photographs; see default_embedders)
_DEFAULT_MARGIN = 2  # centres beyond each end of the domain (a basis that covers it)
_DEFAULT_ORDER = 3  # cubic B-splines
_DEFAULT_PAD = 2  # point-reflected samples per end


def default_embedders(coords: Sequence[np.ndarray]) -> List[Embedder]:
    """The embedders kronpe picks for samples at ``coords``.

    One ``BSpline(K, order=3, margin=2)`` per axis (width 1 / K: the cubic-spline space) with
    K = round(1 / h), h the median spacing of the sorted coordinates (K = N for the default
    coordinates; 1 for a single sample): cubic B-splines centred at the sample spacing over [0, 1],
    plus two beyond each end (docs/math/encodings.rst, "Borders"). ``fit_grid`` pairs them with a
    padding of 2 samples per end (``GridPlan(pad=2)``) and a GCV ridge.

    Why (benches/default_embedders.py: three photographs, each fitted from its [::2, ::2]
    subsample at its coordinates and predicted on the full image): this choice matches a cubic
    spline evaluated at the right positions (within 0.15 dB) and beats the papers' settings
    (Gaussians of sigma 0.0025 with no ridge, triangles of half-width 1 / K) and
    ``scipy.ndimage.zoom(order=3)`` on every photograph. Widths chosen by GCV lose 1-2.5 dB
    (GCV's leave-one-out favours smoother bases than 2x upsampling wants); a narrower B-spline
    gains a little on photographs but stops reproducing polynomials (smooth signals lose accuracy);
    Gaussians of width 0.6 / K do as well on photographs (within 0.1 dB), without the
    cubic-spline space's exact polynomials; without the padding the borders lose accuracy, smooth
    signals most.
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


def _fit_smooth(signal, shape: Tuple[int, ...], mask: np.ndarray, ridge: Ridge, device: Optional[int] = None
                ) -> GridModel:
    """The default fit of a grid with holes (kronpe.solvers.smooth): Triangle(N_i) embedders
    (the identity at the default coordinates), thin-plate penalty, multigrid-preconditioned CG;
    ``device``: a CUDA device that solves it where it can (smooth.fit)."""
    planes, lo, hi = signal_arg(signal, shape, mask, with_range=True, planar=True)  # (C, N...)
    D = len(shape)
    chans = np.shape(signal)[D:]
    # the solver's work arrays: about 12 float32 grids (multigrid levels, CG vectors) + the channels
    _validate.check_array_budget("signal", list(shape) + [12 + 2 * max(1, int(np.prod(chans)))], 4,
                                 "the fill of a grid with holes needs about 12 + 2 C float32 values per node")
    W, lam, info = smooth.fit(smooth.DataTerm(shape, mask, total=int(np.count_nonzero(mask))), list(planes), None if ridge == "gcv" else float(ridge),
                              value_range=(lo, hi), device=device)
    return GridModel(W.reshape(shape + chans).astype(planes.dtype, copy=False), [fill_embedder(n) for n in shape], lam,
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
    D = grid_ndim(tuple(np.shape(s)), ndim, embedders, coords)
    if np.ndim(s) < D:
        raise ValueError(f"signal must have at least {D} axes, got shape {np.shape(s)}")
    shape = tuple(np.shape(s)[:D])
    if 0 in shape:
        raise ValueError(f"signal has an empty grid axis: shape {np.shape(s)}")
    default_coords = coords is None
    coords = coords_arg(coords, shape)
    if mask is not None:
        mask = observed_mask(_arrays.host_if_device(mask, "mask"), shape)
        if width is not None:
            raise ValueError("width='gcv' cannot be combined with a mask (GCV needs every sample)")
        if embedders is None and penalty is None and default_coords and pad is None and kd is None:
            if dev:  # copied to the host; the solve on the signal's GPU where it can (smooth.fit)
                device = _arrays.device_index(s) if _kcuda.is_available() else None
                return to_device(_fit_smooth(_arrays.to_host(s, "signal"), shape, mask, ridge_or_gcv(ridge), device), s)
            return _fit_smooth(s, shape, mask, ridge_or_gcv(ridge))
    if embedders is None:
        embedders = default_embedders(coords)
        pad = (_DEFAULT_PAD if mask is None else 0) if pad is None else pad
    plan = GridPlan(coords, embedders_arg(embedders, D), ridge=ridge_or_gcv(ridge), rcond=rcond,
                    pad=0 if pad is None else pad, penalty=penalty, tol=tol, maxiter=maxiter)
    if kd is not None:
        if width is not None:
            raise ValueError("width='gcv' is not available for dask signals: give the embedders' widths")
        return kd.fit_plan(plan, s, plan.ridge, 0, mask)
    if mask is not None:
        return plan.fit(s, mask=mask)
    if dev:  # on the device (GridPlan.fit); the width search on a host copy
        if width == "gcv":
            plan = search_widths(plan, signal_arg(_arrays.to_host(s, "signal"), shape))
        return plan.fit(s)
    S = signal_arg(s, shape)
    if width == "gcv":
        plan = search_widths(plan, S)
    return plan._fit(S, plan.ridge)
