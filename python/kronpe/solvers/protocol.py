"""One interface for the fits of scattered samples: a checked problem in, a model out.

``fit_points`` (``kronpe.fit_points``, here) checks its arguments into a
:class:`~.points.PointProblem`; the table ``SOLVERS`` then decides which solver takes it: the one
named by ``fit_points(..., solver=NAME)``, else the first row whose ``accepts(problem)`` holds. A new solver is one class (in the module of its
mathematics) and one row here; ``fit_points`` does not change.

=============  ==========================================================  =======================
name           takes by default                                            model
=============  ==========================================================  =======================
``lattice``    default options, 1-3 axes, every point on a lattice         PointModel (the smooth
               (pixels, voxels): a diagonal data term                      fill, solvers.smooth)
``blended``    default options, 1-3 axes, points off any lattice: grid     PointModel (the smooth
               values blended multilinearly                                fill)
``penalised``  a difference penalty given                                  PointModel
                                                                           (solvers.penalised)
``ridge``      anything else: embedders and/or a ridge, the exact ridge    PointModel
               fit in the per-axis SVD basis                               (solvers.points)
``spline``     only when named: a cubic B-spline with a thin-plate         SplineModel
               penalty, points in any units (``kronpe.fit_spline``)        (solvers.spline)
=============  ==========================================================  =======================
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from .. import cuda as _cuda
from .._adapters import arrays as _arrays, validate as _validate
from .._shared import ridge_or_auto
from ..operators.blending import validate_points
from ..operators.penalty import DifferencePenalty, penalty_arg
from .points import PointProblem, fit_penalised, fit_ridge, fit_smooth
from .smooth_system import MG_MAX_AXES

__all__ = ["fit_points", "PointProblem", "Solver", "SOLVERS", "solve", "solver_names"]


@dataclass(frozen=True)
class Solver:
    """A row of the table: ``accepts(problem)`` (by default), ``solve(problem)`` -> a model."""

    name: str
    accepts: Callable[[PointProblem], bool]
    solve: Callable[[PointProblem], Any]
    needs_unit_points: bool = True  # points checked to lie in [0, 1] (a virtual grid over them)


def _smooth_axes(p: PointProblem) -> bool:
    return p.defaults and p.ndim <= MG_MAX_AXES


def _smooth_only(p: PointProblem, name: str) -> None:
    """A named smooth-fill row takes the default options only (it chooses its own model)."""
    if not p.defaults:
        raise ValueError(f"solver={name!r} chooses its own grid, penalty and lambda: give no embedders, grid, "
                         "penalty or ridge")
    if p.ndim > MG_MAX_AXES:
        raise ValueError(f"solver={name!r} takes 1 to {MG_MAX_AXES} axes, got {p.ndim}")


def _lattice(p: PointProblem):
    return fit_smooth(p, p.lattice)


def _blended(p: PointProblem):
    _smooth_only(p, "blended")
    return fit_smooth(p, None)


def _penalised(p: PointProblem):
    if p.penalty is None:
        raise ValueError("solver='penalised' needs a penalty (a kronpe.DifferencePenalty)")
    return fit_penalised(p)


def _lattice_only(p: PointProblem):
    _smooth_only(p, "lattice")
    if p.lattice is None:
        raise ValueError("solver='lattice' needs points on a lattice (every point on a node of a regular grid)")
    return _lattice(p)


def _ridge(p: PointProblem):
    return fit_ridge(p)


def _spline(p: PointProblem):
    from ..gridding import fit_spline

    if p.embedders is not None or p.grid is not None or p.penalty is not None:
        raise ValueError("solver='spline' chooses its own grid and penalty: give no embedders, grid or penalty")
    return fit_spline(p.raw_points, p.raw_values, ridge=p.ridge if p.ridge else None)


#: the table, in the order of the default choice
SOLVERS: List[Solver] = [
    Solver("lattice", lambda p: _smooth_axes(p) and p.lattice is not None, _lattice_only),
    Solver("blended", lambda p: _smooth_axes(p) and p.lattice is None, _blended),
    Solver("penalised", lambda p: p.penalty is not None, _penalised),
    Solver("ridge", lambda p: True, _ridge),
    Solver("spline", lambda p: False, _spline, needs_unit_points=False),
]


def solver_names() -> Tuple[str, ...]:
    return tuple(s.name for s in SOLVERS)


def named(name: Optional[str]) -> Optional[Solver]:
    """The row called ``name`` (None: None)."""
    if name is None:
        return None
    _validate.choice("solver", name, solver_names())
    return next(s for s in SOLVERS if s.name == name)


def solve(problem: PointProblem, solver: Optional[Solver] = None):
    """The model of ``problem`` by ``solver``, else by the first row that accepts it."""
    if solver is None:
        solver = next(s for s in SOLVERS if s.accepts(problem))
    model = solver.solve(problem)
    info: Dict[str, Any] = getattr(model, "info", None)
    if isinstance(info, dict):
        info.setdefault("solver", solver.name)
    return model


# ---- the entry point ----------------------------------------------------------------------------


def fit_points(points, values, embedders=None, grid=None, ridge: Union[float, str, None] = "auto",
               tol: float = 1e-6, maxiter: Optional[int] = None, normalize: bool = True,
               outside: str = "error", threads: Optional[int] = None,
               penalty: Optional[DifferencePenalty] = None, solver: Optional[str] = None):
    """Exact ridge fit of scattered samples with a complex encoding (docs/math/scattered.rst).

    Parameters
    ----------
    points : array (P, D)
        Sample coordinates in [0, 1]. CuPy arrays and CUDA torch tensors are accepted: they are
        copied to the host once; the default fit of points on a lattice (pixels of a 1-D or 2-D
        grid) then solves on their GPU (kronpe.solvers.smooth, "Threads and devices"), every other fit on the
        host. ``PointModel.predict`` of device points runs on their GPU.
    values : array (P,) or (P, *channels)
    embedders : embedder, list of D embedders, or None
        With nothing else given either (grid, ridge, penalty) and D <= 3: the default smooth fit
        of :mod:`kronpe.solvers.smooth`, values on a grid with a thin-plate penalty, lambda held
        out, multigrid-preconditioned CG; the grid is the points' lattice when they lie on one
        (pixels, voxels), else a few nodes per mean sample spacing (multilinear blending). Otherwise
        None chooses Gaussians from the sampling density (module docstring).
    grid : shape or list of node arrays, optional
        The virtual grid (default: K_base + 1 nodes per axis over [0, 1]).
    ridge : float >= 0 or "auto"
        lambda of the penalty lambda ||W||^2 on the raw (unscaled) embedders; "auto" (or None)
        chooses it on held-out points.
    tol : float
        Relative residual of the normal equations at which CG stops (every channel).
    maxiter : int, optional
        CG iteration limit (default 10 * sum of the axes' ranks, at least 500); a
        ConvergenceWarning is issued when it is reached first.
    normalize, outside, threads
        As in BlendingMatrix.
    penalty : DifferencePenalty, optional
        What lambda weighs: None is the identity (lambda ||W||^2, solved in the SVD basis above);
        a difference penalty is solved in K-space (:mod:`kronpe.solvers.penalised`).
    solver : str, optional
        A row of :mod:`kronpe.solvers.protocol`'s table: "lattice", "blended", "penalised",
        "ridge" or "spline" (a cubic B-spline in the points' own units, as ``kronpe.fit_spline``:
        it returns a SplineModel and takes no embedders, grid, penalty or ridge). None: the table
        chooses from the arguments.

    Returns
    -------
    PointModel (SplineModel with solver="spline")
    """
    t0 = time.perf_counter()
    kd = _arrays.dask_api(points, values)
    chosen = named(solver)
    if kd is not None:  # points partitioned along their first axis: CG as map-reduce (kronpe.dask)
        if chosen is not None and chosen.name != "ridge":
            raise ValueError(f"dask points are fitted by the 'ridge' solver, got solver={solver!r}")
        return kd.fit_points(points, values, embedders, grid, ridge, tol, maxiter, normalize, outside, penalty)
    if chosen is not None and not chosen.needs_unit_points:  # the solver checks the points itself
        if ridge_or_auto(ridge) is not None:
            raise ValueError(f"solver={solver!r} holds its lambda out itself: give no ridge")
        return solve(PointProblem(points=None, values=None, channels=(), embedders=embedders, grid=grid,
                                  penalty=penalty, t0=t0, raw_points=points, raw_values=values), chosen)
    return solve(_checked(points, values, embedders, grid, ridge, tol, maxiter, normalize, outside, threads, penalty,
                          t0), chosen)


def _checked(points, values, embedders, grid, ridge, tol, maxiter, normalize, outside, threads, penalty,
             t0: float) -> PointProblem:
    """fit_points' arguments, checked, as a PointProblem."""
    pts_in = _arrays.to_host(points, "points") if _arrays.is_device(points) else _validate.real_array("points", points)
    # (the default fill solves on the points' GPU: kronpe.solvers.smooth, "Threads and devices")
    device = _arrays.device_index(points) if _arrays.is_device(points) and _cuda.is_available() else None
    D = pts_in.shape[1] if pts_in.ndim == 2 else None
    if D == 0:
        raise ValueError("points must have shape (P, D) with D >= 1, got D = 0")
    threads = _validate.threads("threads", threads) or None
    lam_arg = ridge_or_auto(ridge)
    pen = penalty_arg(penalty)
    tol = _validate.positive_float("tol", tol)
    if maxiter is not None:
        maxiter = _validate.positive_int("maxiter", maxiter)
    pts = validate_points(pts_in, outside)
    if pts.shape[0] == 0:
        raise ValueError("points must hold at least one point, got P = 0")
    vals, channels = _values(values, pts.shape[0])
    return PointProblem(points=pts, values=vals, channels=channels, embedders=embedders, grid=grid,
                        ridge=lam_arg, penalty=pen, tol=tol, maxiter=maxiter, normalize=normalize, outside=outside,
                        threads=threads, device=device, t0=t0)


def _values(values, P: int) -> Tuple[np.ndarray, Tuple[int, ...]]:
    arr = _arrays.to_host(values, "values") if _arrays.is_device(values) else _validate.real_array("values", values)
    if arr.ndim == 0 or arr.shape[0] != P:
        raise ValueError(f"values must have one row per point ({P}), got shape {arr.shape}")
    if math.prod(arr.shape[1:]) == 0:
        raise ValueError(f"values must have at least one value per point, got shape {arr.shape}")
    dt = _validate.float_dtype("values", arr)
    arr = arr.astype(dt, copy=False)
    _validate.finite("values", arr)
    return arr, arr.shape[1:]
