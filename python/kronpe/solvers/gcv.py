"""Generalised cross-validation of the separable fits (docs/math/encodings.rst, "Choosing the
ridge: generalised cross-validation"): the GCV curve of one signal
over the products of per-axis singular values, its minimisation over the ridge, and the search
over the embedders' widths.

- The ridge: GCV on a log grid of ``ridge / max(s^2)`` from 1e-14 to 1e2 (4 points per decade),
  then golden-section search in log10(ridge) between the neighbours of the best grid point (to
  1e-3). Beyond 2^16 products the search runs on an 8192-bin histogram of log(s^2) (each bin
  narrower than 1% of the range of log(s^2)); the reported score is exact.
- The widths (``emb.width_param``): one factor applied to every axis's starting width (9 factors
  2^-2..2^2, then golden section in log(factor) between the best neighbours), then, when the
  axes differ, each axis alone within 2^-0.5..2^0.5 of that; the ridge re-optimised every trial.
"""
from __future__ import annotations

import math
from typing import Tuple

import numpy as np

from .. import _core
from ..embedders import Embedder

# GCV search (see the module docstring)
_GRID_DECADES = (-14.0, 2.0)
_GRID_PER_DECADE = 4
_EXACT_LIMIT = 1 << 16
_BINS = 8192
_WIDTH_FACTORS = 2.0 ** np.linspace(-2.0, 2.0, 9)

# ---- GCV -------------------------------------------------------------------------------------


def _grid_then_golden(f, grid: np.ndarray, xtol: float, grid_values=None) -> Tuple[float, float]:
    """Minimise f over a sorted grid, then by golden section between the best point's neighbours.

    Returns (x, f(x)) for the best point seen. ``grid_values`` may give f on the grid at once.
    """
    values = np.asarray([f(float(x)) for x in grid] if grid_values is None else grid_values, float)
    k = int(np.argmin(values))
    best_x, best_f = float(grid[k]), float(values[k])
    a, b = float(grid[max(k - 1, 0)]), float(grid[min(k + 1, len(grid) - 1)])
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = f(c), f(d)
    while b - a > xtol:
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = f(d)
    for x, fx in ((c, fc), (d, fd)):
        if fx < best_f:
            best_x, best_f = x, fx
    return best_x, best_f


class GCVCurve:
    """GCV(ridge) = n rss / (n - tr H)^2 for fixed singular-value products and projections.

    m: the products of squared singular values (any shape); w: the squared projections Z0^2
    summed over channels (same shape); rss0: the part of ||S||^2 outside the row space.
    Calls are exact; ``minimise`` searches on a histogram of log(m) when there are more than
    ``_EXACT_LIMIT`` products and scores its result exactly.
    """

    def __init__(self, m: np.ndarray, w: np.ndarray, rss0: float, n: int):
        m = np.asarray(m, dtype=np.float64).ravel()
        w = np.asarray(w, dtype=np.float64).ravel()
        zero = m <= 0
        if zero.any():  # directions the basis cannot reach
            rss0 = float(rss0) + float(w[zero].sum())
            m, w = m[~zero], w[~zero]
        self.n, self.rss0 = float(n), max(float(rss0), 0.0)
        self.m, self.w = m, w
        self.m_max = float(m.max()) if m.size else 0.0

    @staticmethod
    def _eval(ridges, m, count, w, rss0, n) -> np.ndarray:
        """GCV at each ridge: the compiled kernel (kronpe.reference.gcv_scores is the formula)."""
        ridges = np.ascontiguousarray(np.atleast_1d(np.asarray(ridges, dtype=np.float64)))
        c = [np.ascontiguousarray(a, dtype=np.float64) for a in (m, count, w)]
        scores = _core.gcv_scores(*c, ridges.reshape(-1), float(rss0), float(n), float(c[1].sum()))
        return np.asarray(scores, dtype=np.float64).reshape(ridges.shape)

    def __call__(self, ridges) -> np.ndarray:
        return self._eval(ridges, self.m, np.ones_like(self.m), self.w, self.rss0, self.n)

    def _binned(self):
        if self.m.size <= _EXACT_LIMIT:
            return self.m, np.ones_like(self.m), self.w
        logm = np.log(self.m)
        lo, hi = float(logm.min()), float(logm.max())
        idx = np.minimum(((logm - lo) * (_BINS / max(hi - lo, 1e-12))).astype(np.int64), _BINS - 1)
        count = np.bincount(idx, minlength=_BINS).astype(np.float64)
        keep = count > 0
        mean_log = np.bincount(idx, weights=logm, minlength=_BINS)[keep] / count[keep]
        return np.exp(mean_log), count[keep], np.bincount(idx, weights=self.w, minlength=_BINS)[keep]

    def minimise(self) -> Tuple[float, float]:
        """(ridge, GCV) minimising GCV: log grid, then golden section between the best neighbours."""
        if self.m_max == 0.0:
            return 0.0, float(self(1.0)[0])
        m, count, w = self._binned()
        curve = lambda r: self._eval(r, m, count, w, self.rss0, self.n)  # noqa: E731
        lo, hi = _GRID_DECADES
        exps = np.linspace(lo, hi, int(round((hi - lo) * _GRID_PER_DECADE)) + 1)
        best, _ = _grid_then_golden(
            lambda e: float(curve(self.m_max * 10.0**e)[0]), exps, 1e-3,
            grid_values=curve(self.m_max * 10.0**exps),
        )
        ridge = self.m_max * 10.0**best
        return ridge, float(self(ridge)[0])


# ---- width search ------------------------------------------------------------------------------


def _scaled(emb: Embedder, factor: float) -> Embedder:
    pname = getattr(emb, "width_param", None)
    if pname is None:
        return emb
    return emb.replace(**{pname: float(getattr(emb, pname)) * factor})


def search_widths(plan, S: np.ndarray):
    """The GridPlan ``plan`` with its width parameters chosen by GCV for the signal S (the ridge
    re-optimised for every trial): the plan of the best trial (``plan`` itself without widths).

    First one factor for all axes (2^-2..2^2 of the starting widths, then golden section);
    then, when the axes differ (embedders or coordinates), each axis alone around that result.
    """
    if not any(getattr(e, "width_param", None) for e in plan.embedders):
        return plan
    trials = {}

    def evaluate(embs) -> float:
        key = tuple(embs)
        if key not in trials:
            trial = plan._with_embedders(embs)
            trials[key] = (trial._curve(S, trial._project(S)).minimise()[1], trial)
        return trials[key][0]

    base = list(plan.embedders)
    _grid_then_golden(lambda lf: evaluate([_scaled(e, math.exp(lf)) for e in base]), np.log(_WIDTH_FACTORS), 0.02)
    best = min(trials, key=lambda k: trials[k][0])
    same = all(e == base[0] for e in base) and all(np.array_equal(c, plan.coords[0]) for c in plan.coords)
    if not same and plan.ndim > 1:
        for i in range(plan.ndim):
            start = list(best)
            _grid_then_golden(
                lambda lf: evaluate(start[:i] + [_scaled(start[i], math.exp(lf))] + start[i + 1 :]),
                np.log(2.0 ** np.linspace(-0.5, 0.5, 5)),
                0.02,
            )
            best = min(trials, key=lambda k: trials[k][0])
    return trials[best][1]
