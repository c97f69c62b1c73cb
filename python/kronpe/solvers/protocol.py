"""One interface for the fits of scattered samples: a checked problem in, a model out.

``kronpe.fit_points`` checks its arguments into a :class:`PointProblem`; the table ``SOLVERS``
then decides which solver takes it: the one named by ``fit_points(..., solver=NAME)``, else the
first row whose ``accepts(problem)`` holds. A new solver is one class (in the module of its
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

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

__all__ = ["PointProblem", "Solver", "SOLVERS", "solve", "solver_names"]


@dataclass
class PointProblem:
    """A checked ``fit_points`` call: host points (P, D) and values (P, *channels), the options."""

    points: np.ndarray
    values: np.ndarray
    channels: Tuple[int, ...]
    embedders: Any = None
    grid: Any = None
    ridge: Optional[float] = None  # None: held out ("auto")
    penalty: Any = None
    tol: float = 1e-6
    maxiter: Optional[int] = None
    normalize: bool = True
    outside: str = "error"
    threads: Optional[int] = None
    device: Optional[int] = None  # the CUDA device of the points, where the solver can use it
    t0: float = 0.0
    raw_points: Any = None  # the points as given (the spline solver takes any units)
    raw_values: Any = None
    _lattice: Any = field(default=None, repr=False)
    _lattice_known: bool = field(default=False, repr=False)

    @property
    def ndim(self) -> int:
        return self.points.shape[1]

    @property
    def defaults(self) -> bool:
        """No embedders, grid, penalty or ridge given: kronpe chooses the model."""
        return self.embedders is None and self.grid is None and self.penalty is None and self.ridge is None

    @property
    def lattice(self) -> Optional[List[np.ndarray]]:
        """The lattice the points lie on (the nodes per axis), or None."""
        if not self._lattice_known:
            from . import smooth

            self._lattice = smooth.lattice_grid(self.points.astype(np.float64))
            self._lattice_known = True
        return self._lattice


@dataclass(frozen=True)
class Solver:
    """A row of the table: ``accepts(problem)`` (by default), ``solve(problem)`` -> a model."""

    name: str
    accepts: Callable[[PointProblem], bool]
    solve: Callable[[PointProblem], Any]
    needs_unit_points: bool = True  # points checked to lie in [0, 1] (a virtual grid over them)


def _smooth_axes(p: PointProblem) -> bool:
    from . import smooth

    return p.defaults and p.ndim <= smooth.MG_MAX_AXES


def _smooth_only(p: PointProblem, name: str) -> None:
    """A named smooth-fill row takes the default options only (it chooses its own model)."""
    from . import smooth

    if not p.defaults:
        raise ValueError(f"solver={name!r} chooses its own grid, penalty and lambda: give no embedders, grid, "
                         "penalty or ridge")
    if p.ndim > smooth.MG_MAX_AXES:
        raise ValueError(f"solver={name!r} takes 1 to {smooth.MG_MAX_AXES} axes, got {p.ndim}")


def _lattice(p: PointProblem):
    from .points import fit_smooth

    return fit_smooth(p, p.lattice)


def _blended(p: PointProblem):
    from .points import fit_smooth

    _smooth_only(p, "blended")
    return fit_smooth(p, None)


def _penalised(p: PointProblem):
    from .points import fit_penalised

    if p.penalty is None:
        raise ValueError("solver='penalised' needs a penalty (a kronpe.DifferencePenalty)")
    return fit_penalised(p)


def _lattice_only(p: PointProblem):
    _smooth_only(p, "lattice")
    if p.lattice is None:
        raise ValueError("solver='lattice' needs points on a lattice (every point on a node of a regular grid)")
    return _lattice(p)


def _ridge(p: PointProblem):
    from .points import fit_ridge

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
    from .._adapters import validate as _validate

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
