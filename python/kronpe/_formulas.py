"""Closed forms of docs/math/analysis.rst, shared by kronpe.embedders and kronpe.analysis.

The propositions cited are those of "Trading Positional Complexity vs. Deepness in Coordinate
Networks" (Zheng, Ramasinghe, Li, Lucey; ECCV 2022), "the complex-encoding paper" below.

Everything here is vectorised NumPy in float64 with no validation (callers validate).
Distances are the continuous ones, D(delta) = integral over t of psi(t - x1) psi(t - x2) with
delta = x1 - x2 (for RFF: the integral over frequencies weighted by exp(-xi^2 / (2 sigma^2))).
"""
from __future__ import annotations

import math

import numpy as np

from ._adapters import validate as _validate

SQRT_PI = math.sqrt(math.pi)
SQRT_2PI = math.sqrt(2.0 * math.pi)


def bspline(u, degree: int) -> np.ndarray:
    """Centred cardinal B-spline of degree ``degree`` (support [-(p+1)/2, (p+1)/2]).

    Cox-de Boor recursion on uniform knots (all terms non-negative: stable for any degree);
    the loops run over the degree, never over points. Same algorithm as the compiled kernel.
    """
    u = np.asarray(u, dtype=np.float64)
    s = u + 0.5 * (degree + 1)
    inside = (s > 0.0) & (s < degree + 1.0)
    s = np.where(inside, s, 0.5)
    cell = np.floor(s)
    t = s - cell
    v = [np.ones_like(t)]  # v[j] = N_d(t + j)
    for d in range(1, degree + 1):
        new = []
        for j in range(d + 1):
            current = v[j] if j < d else 0.0
            previous = v[j - 1] if j > 0 else 0.0
            new.append(((t + j) * current + (d + 1 - t - j) * previous) / d)
        v = new
    stacked = np.stack(np.broadcast_arrays(*v), axis=0)  # (degree + 1, ...)
    idx = np.clip(cell.astype(np.int64), 0, degree)
    out = np.take_along_axis(stacked, idx[None, ...], axis=0)[0]
    return np.where(inside, out, 0.0)


# ---- continuous embedded distances ---------------------------------------------------------


def bspline_truncated_power(u, degree: int, where):
    """Centred cardinal B-spline of degree p by its definition as a sum of truncated powers,

    B_p(u) = 1/p! sum_{j=0}^{p+1} (-1)^j C(p+1, j) (u + (p+1)/2 - j)_+^p, zero outside its support.

    Written once for NumPy arrays and torch tensors: ``where`` is ``np.where`` or ``torch.where``
    and ``u`` a float64 array of that kind. Exact in exact arithmetic, but it cancels: for low
    degrees only (the test oracle of the kernels' stable recursion, and differentiable in torch).
    """
    s = u + 0.5 * (degree + 1)
    zero = s * 0
    out = zero
    for j in range(degree + 2):
        v = s - j
        term = where(v >= 0, v**0, zero) if degree == 0 else where(v > 0, v, zero) ** degree
        out = out + (-1) ** j * math.comb(degree + 1, j) * term
    out = out / math.factorial(degree)
    return where((s > 0) & (s < degree + 1), out, zero)


def gaussian_distance(delta, sigma: float) -> np.ndarray:
    """sqrt(pi) sigma exp(-delta^2 / (4 sigma^2)) (complex-encoding paper, Prop. 2, eq. 24)."""
    delta = np.asarray(delta, dtype=np.float64)
    return SQRT_PI * sigma * np.exp(-(delta * delta) / (4.0 * sigma * sigma))


def rff_distance(delta, sigma: float) -> np.ndarray:
    """sqrt(2 pi) sigma exp(-2 pi^2 sigma^2 delta^2) (complex-encoding paper, Prop. 3, eq. 29)."""
    delta = np.asarray(delta, dtype=np.float64)
    return SQRT_2PI * sigma * np.exp(-2.0 * math.pi**2 * sigma**2 * (delta * delta))


def rectangle_distance(delta, width: float) -> np.ndarray:
    """width * tri(delta / width) (complex-encoding paper, Prop. 4, eq. 34)."""
    delta = np.asarray(delta, dtype=np.float64)
    return width * np.maximum(1.0 - np.abs(delta) / width, 0.0)


def triangle_distance(delta, half_width: float) -> np.ndarray:
    """Exact autocorrelation of a triangle of half-width h: h * B3(delta / h)."""
    return half_width * bspline(np.asarray(delta, dtype=np.float64) / half_width, 3)


def triangle_distance_paper(delta, half_width: float) -> np.ndarray:
    """Prop. 5 of the complex-encoding paper (an approximation), with sigma = 2h:
    (sigma^2 / 4) max(1 - |delta| / sigma, 0)^2."""
    delta = np.asarray(delta, dtype=np.float64)
    sigma = 2.0 * half_width
    return 0.25 * sigma**2 * np.maximum(1.0 - np.abs(delta) / sigma, 0.0) ** 2


def bspline_distance(delta, degree: int, width: float) -> np.ndarray:
    """Autocorrelation of B_p(u / w): w * B_{2p+1}(delta / w)."""
    return width * bspline(np.asarray(delta, dtype=np.float64) / width, 2 * degree + 1)


# ---- theoretical stable ranks (the complex-encoding paper, Props. 2-5) ---------------------


def gaussian_stable_rank(sigma: float, N: float = math.inf) -> float:
    """min(N, 1 / (2 sqrt(pi) sigma))."""
    return min(float(N), 1.0 / (2.0 * SQRT_PI * sigma))


def rff_stable_rank(sigma: float, N: float = math.inf) -> float:
    """min(N, sqrt(2 pi) sigma)."""
    return min(float(N), SQRT_2PI * sigma)


def rectangle_stable_rank(width: float, N: float = math.inf) -> float:
    """min(N, 1 / width)."""
    return min(float(N), 1.0 / width)


def triangle_stable_rank(full_width: float, N: float = math.inf) -> float:
    """min(N, 4 / (3 sigma)) with sigma the full width (twice the half-width)."""
    return min(float(N), 4.0 / (3.0 * full_width))


def bspline_stable_rank(degree: int, width: float, N: float = math.inf) -> float:
    """min(N, B_{2p+1}(0) / w): the integral of sinc^{2p+2}(w xi), by the argument of Props. 4-5.

    Degree 0 gives the rectangle's 1 / w and degree 1 the triangle's 2 / (3 h).
    """
    return min(float(N), float(bspline(0.0, 2 * degree + 1)) / width)


# ---- choosing sigma --------------------------------------------------------------------------


def sigma_for_interval(interval: float, k: float = 1.6) -> float:
    """Gaussian sigma whose normalised distance stays >= 10^-k over ``interval``: l / (2 sqrt(k ln 10))."""
    interval = _validate.positive_float("interval", interval)
    k = _validate.positive_float("k", k)
    return interval / (2.0 * math.sqrt(k * math.log(10.0)))


def sigma_for_spacing(spacing: float, k: float = 1.6) -> float:
    """Preserve the distance over half the sample spacing, l = spacing / 2.

    The rule of "Rethinking Positional Encoding" (Zheng, Ramasinghe, Lucey; 2021), section 4.3.

    With spacing 1/N this is sigma = 1 / (4 N sqrt(k ln 10)).
    """
    return sigma_for_interval(0.5 * _validate.positive_float("spacing", spacing), k)


def rff_sigma_for_gaussian(sigma_gaussian: float) -> float:
    """RFF sigma with the stable rank and distance of a Gaussian embedder of width sigma_g.

    Equating 1 / (2 sqrt(pi) sigma_g) (Prop. 2) with sqrt(2 pi) sigma_f (Prop. 3) gives
    sigma_g sigma_f = 1 / (2 sqrt(2) pi). The complex-encoding paper prints 1 / (2 sqrt(2 pi)),
    which does not follow from the two propositions; with 1 / (2 sqrt(2) pi) the normalised
    distances exp(-delta^2 / (4 sigma_g^2)) and exp(-2 pi^2 sigma_f^2 delta^2) coincide as well,
    which is the equivalence the paper claims.
    """
    return 1.0 / (2.0 * math.sqrt(2.0) * math.pi * _validate.positive_float("sigma_gaussian", sigma_gaussian))


def gaussian_sigma_for_rff(sigma_rff: float) -> float:
    """Gaussian sigma equivalent to RFF of scale sigma_f: 1 / (2 sqrt(2) pi sigma_f) (see above)."""
    return rff_sigma_for_gaussian(_validate.positive_float("sigma_rff", sigma_rff))  # sigma_g sigma_f = const is symmetric
