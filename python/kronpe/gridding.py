"""Scattered measurements of a field onto a grid, the way gridding tools do it.

``fit_spline`` fits a cubic B-spline with a thin-plate penalty to points anywhere (any units, any
bounding box, 1-3 axes; :mod:`kronpe.solvers.spline`), and ``grid`` evaluates such a fit on a
regular grid given by its shape or spacing and region, with NaN outside an optional distance
mask, as plain arrays or as an ``xarray.DataArray`` (``pip install "kronpe[xarray]"``).
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple, Union

import numpy as np

from ._adapters import arrays as _arrays, validate as _validate
from .solvers import spline as _spline
from .solvers.spline import SplineModel

__all__ = ["fit_spline", "grid", "SplineModel"]

SPLINE_ARRAYS = 6  # stencil-sized float64 arrays alive at once on the finest level


def _points_values(points, values) -> Tuple[np.ndarray, np.ndarray, Tuple[int, ...]]:
    pts = _validate.real_array("points", points)
    if pts.ndim == 1:
        pts = pts[:, None]
    if pts.ndim != 2 or not 1 <= pts.shape[1] <= 3:
        raise ValueError(f"points must have shape (P, D) with D = 1, 2 or 3 coordinates, got shape {pts.shape}")
    if pts.shape[0] == 0:
        raise ValueError("points must hold at least one point, got P = 0")
    pts = np.ascontiguousarray(pts, dtype=np.float64)
    _validate.finite("points", pts)
    vals = _validate.real_array("values", values)
    if vals.ndim == 0 or vals.shape[0] != pts.shape[0]:
        raise ValueError(f"values must have one row per point ({pts.shape[0]}), got shape {vals.shape}")
    channels = vals.shape[1:]
    if math.prod(channels) == 0:
        raise ValueError(f"values must have at least one value per point, got shape {vals.shape}")
    flat = np.ascontiguousarray(vals.reshape(vals.shape[0], -1), dtype=np.float64)
    _validate.finite("values", flat)
    return pts, flat, channels


def fit_spline(points, values, tol: float = _spline.DEFAULT_TOL, ridge: Optional[float] = None,
               _box=None) -> SplineModel:
    """Fit scattered samples of a field with a cubic B-spline and a thin-plate penalty.

    Parameters
    ----------
    points : array (P, D) or (P,)
        Sample positions, D = 1, 2 or 3 axes, each in any units (the fit works in the unit box of
        the points' bounding box). Duplicates are allowed (their values are averaged).
    values : array (P,) or (P, *channels)
        Finite values at the points.
    tol : float
        Held-out RMS error, relative to the values' range, at which refinement stops (1e-5:
        field data is rarely known better).
    ridge : float, optional
        A fixed lambda in units of the sampling density times the point spacing^4 (1e-6 is the
        interpolation limit); None holds it out with the resolution.

    Returns
    -------
    SplineModel
        ``predict(points)``, ``predict_grid(coords)`` inside the box ``[lo, hi]``; ``info`` says
        which levels were tried, their held-out errors and what limited the fit.

    Examples
    --------
    >>> import numpy as np, kronpe
    >>> rng = np.random.default_rng(0)
    >>> xy = rng.random((500, 2)) * [1000.0, 500.0]          # metres
    >>> z = np.sin(xy[:, 0] / 300) + np.cos(xy[:, 1] / 200)
    >>> model = kronpe.fit_spline(xy, z)
    >>> float(abs(model.predict([[500.0, 250.0]])[0] - (np.sin(5 / 3) + np.cos(1.25)))) < 1e-3
    True
    """
    tol = _validate.positive_float("tol", tol)
    if ridge is not None:
        ridge = _validate.positive_float("ridge", ridge)
    if _arrays.is_device(points) or _arrays.is_device(values):
        model = _fit_on_device(points, values, tol, ridge, _box)
        if model is not None:
            return model
        points, values = _arrays.to_host(points, "points"), _arrays.to_host(values, "values")
    pts, vals, channels = _points_values(points, values)
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    with np.errstate(over="ignore"):
        if not float((hi - lo).max()) > 0:
            raise ValueError("points: every point has the same position; at least two distinct positions are "
                             "needed")
    # the finest candidate level's operators (stencils of 7^D per coefficient: the data term, the
    # penalty, the sum and its float32 copy, the assembly's scratch, the smoother's) must fit
    P, D = pts.shape
    grids = _spline.prepare((lo, hi), P, D, _box, None)[2]
    coefs = math.prod(grids[-1].shape)
    _validate.check_array_budget("points", [coefs, 7**D, SPLINE_ARRAYS], 8,
                                 f"a finest grid of {list(grids[-1].shape)} coefficients for the points' "
                                 "density: pass fewer points")
    model = _spline.fit(pts, vals, tol=tol, ridge=ridge, box=_box)
    model.coef = model.coef.reshape(model.coef.shape[:D] + channels)
    return model


def _fit_on_device(points, values, tol: float, ridge: Optional[float], box) -> Optional[SplineModel]:
    """The fit of CUDA torch tensors or CuPy arrays on their GPU (kronpe.solvers.spline_torch), or
    None where it belongs on the host (finer levels than the device solves densely)."""
    import torch

    from .solvers import spline_torch

    def tensor(x, name):
        if not _arrays.is_device(x):
            raise ValueError(f"{name} must be on the same device as the other array, got a host array")
        t = torch.from_dlpack(x) if _arrays.kind(x) == "cupy" else x.detach()
        if t.is_complex() or not (t.is_floating_point() or t.dtype in (torch.int32, torch.int64)):
            raise ValueError(f"{name} must hold real numbers, got {t.dtype}")
        return t.to(torch.float64)

    pts, vals = tensor(points, "points"), tensor(values, "values")
    if pts.device != vals.device:
        raise ValueError(f"points and values must be on one device, got {pts.device} and {vals.device}")
    if pts.ndim == 1:
        pts = pts[:, None]
    if pts.ndim != 2 or not 1 <= pts.shape[1] <= 3 or pts.shape[0] == 0:
        raise ValueError(f"points must have shape (P, D) with P >= 1 and D = 1, 2 or 3, got {tuple(pts.shape)}")
    if vals.ndim == 0 or vals.shape[0] != pts.shape[0]:
        raise ValueError(f"values must have one row per point ({pts.shape[0]}), got shape {tuple(vals.shape)}")
    channels = tuple(vals.shape[1:])
    vals = vals.reshape(vals.shape[0], -1)
    if vals.shape[1] == 0:
        raise ValueError(f"values must have at least one value per point, got shape {tuple(vals.shape)}")
    if not bool(torch.isfinite(pts).all()):
        raise ValueError("points must be finite (no NaN or Inf)")
    if not bool(torch.isfinite(vals).all()):
        raise ValueError("values must be finite (no NaN or Inf)")
    if not bool((pts.amax(0) > pts.amin(0)).any()):
        raise ValueError("points: every point has the same position; at least two distinct positions are needed")
    model = spline_torch.fit(torch, pts.contiguous(), vals.contiguous(), tol=tol, ridge=ridge, box=box)
    if model is not None:
        model.coef = model.coef.reshape(model.coef.shape[:pts.shape[1]] + channels)
    return model


def grid(points, values, shape: Union[int, Sequence[int], None] = None,
         spacing: Union[float, Sequence[float], None] = None,
         region: Optional[Sequence[float]] = None, maxdist: Optional[float] = None,
         xarray: bool = False, dims: Optional[Sequence[str]] = None, tol: float = _spline.DEFAULT_TOL):
    """Grid scattered samples: ``fit_spline`` evaluated on a regular grid.

    Parameters
    ----------
    points, values
        As in :func:`fit_spline`.
    shape : int or D ints, optional
        Nodes per axis (the first and last on the region's edges).
    spacing : float or D floats, optional
        Node spacing per axis (from the region's lower edge; the last node at or below the upper
        one). Exactly one of ``shape`` and ``spacing``.
    region : 2 D floats, optional
        ``(lo_1, hi_1, ..., lo_D, hi_D)``; default: the points' bounding box. The fit covers the
        region and the points; beyond the points' convex hull it continues with the least bending
        (the thin-plate energy's natural boundary), so mask far nodes with ``maxdist``.
    maxdist : float, optional
        Nodes farther than this from every point are NaN (a distance mask, in the points' units).
    xarray : bool
        Return an ``xarray.DataArray`` with its coordinates (needs xarray: ``kronpe[xarray]``).
    dims : D str, optional
        The DataArray's dimension names (default ``x0, x1, ...``; channels ``channel``).
    tol
        As in :func:`fit_spline`.

    Returns
    -------
    (grid, coords) or xarray.DataArray
        ``grid`` (N_1, ..., N_D, *channels) float64 and ``coords`` a tuple of D 1-D arrays.
    """
    out, coords, model = gridded(points, values, shape, spacing, region, maxdist, tol)
    if not xarray:
        return out, coords
    try:
        import xarray as xr
    except ImportError:
        raise ImportError("grid(xarray=True) needs xarray: pip install \"kronpe[xarray]\"") from None
    D = len(coords)
    channels = out.shape[D:]
    names = [f"x{a}" for a in range(D)] if dims is None else [str(d) for d in dims]
    if len(names) != D:
        raise ValueError(f"dims must name the {D} axes, got {list(dims)!r}")
    extra = [f"channel{i}" if len(channels) > 1 else "channel" for i in range(len(channels))]
    return xr.DataArray(out, dims=names + extra, coords={n: c for n, c in zip(names, coords)},
                        attrs={"method": "kronpe cubic B-spline, thin-plate penalty",
                               "limited_by": model.info.get("limited_by", "")})


def gridded(points, values, shape=None, spacing=None, region=None, maxdist=None, tol: float = _spline.DEFAULT_TOL):
    """``grid``'s work: (the grid, its coordinates, the fitted SplineModel)."""
    pts, vals, channels = _points_values(points, values)
    D = pts.shape[1]
    if (shape is None) == (spacing is None):
        raise ValueError("grid: give exactly one of shape (nodes per axis) and spacing (node spacing per axis)")
    if region is None:
        lo, hi = pts.min(axis=0), pts.max(axis=0)
    else:
        reg = np.asarray(_validate.real_array("region", region), np.float64).ravel()
        if reg.size != 2 * D:
            raise ValueError(f"region must hold 2 D = {2 * D} numbers (lo_1, hi_1, ..., lo_D, hi_D), got {reg.size}")
        _validate.finite("region", reg)
        lo, hi = reg[0::2], reg[1::2]
        if np.any(hi < lo):
            raise ValueError(f"region: every axis needs lo <= hi, got {reg.tolist()}")
    if shape is not None:
        counts = [int(shape)] * D if np.ndim(shape) == 0 else [int(v) for v in shape]
        if len(counts) != D or any(c < 1 for c in counts):
            raise ValueError(f"shape must be {D} positive node counts, got {shape!r}")
        coords = [np.linspace(lo[a], hi[a], counts[a]) for a in range(D)]
    else:
        steps = np.broadcast_to(np.asarray(spacing, np.float64), (D,)) if np.ndim(spacing) <= 1 else None
        if steps is None or steps.size != D or not np.all(np.isfinite(steps)) or np.any(steps <= 0):
            raise ValueError(f"spacing must be a positive number or {D} positive numbers, got {spacing!r}")
        counts = [int(math.floor((hi[a] - lo[a]) / steps[a] * (1 + 1e-12))) + 1 for a in range(D)]
        coords = [lo[a] + steps[a] * np.arange(counts[a]) for a in range(D)]
    _validate.check_array_budget("grid", counts + [max(1, math.prod(channels)), 2], 8,
                                 "a grid this large: use a coarser spacing or a smaller shape")
    if maxdist is not None:
        maxdist = _validate.positive_float("maxdist", maxdist)
    model = fit_spline(pts, vals.reshape((pts.shape[0],) + channels), tol=tol, _box=(lo, hi))
    mlo, mhi = np.asarray(model.lo), np.asarray(model.hi)
    inside = [(c >= mlo[a]) & (c <= mhi[a]) for a, c in enumerate(coords)]
    out = np.full(tuple(counts) + channels, np.nan)
    sub = model.predict_grid([c[m] for c, m in zip(coords, inside)])
    out[np.ix_(*inside)] = sub
    if maxdist is not None:
        from scipy.spatial import cKDTree

        mesh = np.stack(np.meshgrid(*coords, indexing="ij"), -1).reshape(-1, D)
        dist, _ = cKDTree(pts).query(mesh, k=1, distance_upper_bound=maxdist)
        far = ~np.isfinite(dist).reshape(counts)
        out[far] = np.nan
    return out, tuple(coords), model
