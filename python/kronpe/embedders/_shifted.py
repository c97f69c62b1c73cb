"""Shifted-basis embedders: one function translated to K centres (and the random embedder)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Optional, Tuple

import numpy as np

from .. import _core, _formulas
from .._adapters import arrays as _arrays, validate as _validate
from ._base import Embedder, _Nyquist, _finite_array, _int_in_range, _set


@dataclass(frozen=True, repr=False)
class ShiftedBasis(Embedder):
    """Psi(x)_k = psi(x - t_k) with t_k = k / K_base for k = -margin .. K_base - 1 + margin."""

    K_base: int = 0
    margin: int = 0

    #: kernel name of psi (kronpe._core.embed_basis) and the field it takes as its parameter
    _basis: ClassVar[str] = ""
    _param_field: ClassVar[Optional[str]] = None

    def __post_init__(self):
        _validate.positive_int("K", self.K_base)
        _validate.nonnegative_int("margin", self.margin)

    def _init_shifted(self, K: int, margin: int) -> None:
        _set(self, K_base=_validate.positive_int("K", K), margin=_validate.nonnegative_int("margin", margin))
        _validate.size_product("K and margin", (self.K, 8))  # the bytes of one row fit in int64

    def _init_value(self, name: str):
        return self.K_base if name == "K" else getattr(self, name)

    @property
    def K(self) -> int:
        return self.K_base + 2 * self.margin

    @property
    def spacing(self) -> float:
        return 1.0 / self.K_base

    @property
    def centres(self) -> np.ndarray:
        _validate.check_array_budget("K", (self.K,), 8, "use fewer features")
        return np.arange(-self.margin, self.K_base + self.margin, dtype=np.float64) / self.K_base

    @property
    def _param(self) -> float:
        """The kernel's width/frequency parameter."""
        return float(getattr(self, self._param_field)) if self._param_field else 0.0

    @property
    def _degree(self) -> int:
        return 0

    def _kernel_args(self):
        return "basis", dict(kind=self._basis, first_index=-self.margin, K_base=float(self.K_base),
                             param=self._param, degree=self._degree, seed=0)

    def psi(self, u) -> np.ndarray:
        """The basis function psi(u) (u = x - t), any shape, in float64."""
        u = _finite_array("u", u)
        flat = np.ascontiguousarray(u).ravel()
        out = np.empty((flat.shape[0], 1))
        _core.embed_basis(_arrays.describe(flat, "u"), _arrays.describe(out, "out"), self._basis, 0, 1.0,
                          self._param, self._degree, 0)
        return out.reshape(u.shape)

    @property
    def _quadrature_weight(self) -> float:
        return self.spacing

    def _average_positions(self, samples: int):
        middle = np.floor(0.5 * self.K_base + 0.5) / self.K_base  # the centre nearest 0.5
        return middle + ((np.arange(samples) + 0.5) / samples - 0.5) * self.spacing, False


def _shifted(cls):
    """Make a ShiftedBasis subclass a frozen dataclass whose __init__ is its own."""
    return dataclass(frozen=True, init=False, repr=False)(cls)


@_shifted
class Gaussian(ShiftedBasis):
    """Gaussian bumps psi(u) = exp(-u^2 / (2 sigma^2)) (``Gau`` in the papers).

    Distance sqrt(pi) sigma exp(-delta^2 / (4 sigma^2)); stable rank min(N, 1 / (2 sqrt(pi) sigma)).
    """

    sigma: float = 0.0
    width_param: ClassVar[str] = "sigma"
    _basis: ClassVar[str] = "gaussian"
    _param_field: ClassVar[str] = "sigma"

    def __init__(self, K: int, sigma: float, margin: int = 0):
        self._init_shifted(K, margin)
        _set(self, sigma=_validate.positive_float("sigma", sigma))

    def blend_kernel(self) -> Optional[Tuple[str, float]]:
        return "gaussian", 1.0 / (4.0 * float(self.sigma) ** 2)

    def distance(self, delta) -> np.ndarray:
        return _formulas.gaussian_distance(_finite_array("delta", delta), self.sigma)

    def stable_rank_bound(self, N: int) -> float:
        return _formulas.gaussian_stable_rank(self.sigma, _validate.positive_int("N", N))


@_shifted
class Triangle(ShiftedBasis):
    """Hat functions psi(u) = max(1 - |u| / d, 0), d the half-width (default 1 / K).

    Distance: the exact autocorrelation d * B3(delta / d); ``paper_distance=True`` uses Prop. 5 of
    "Trading Positional Complexity vs. Deepness in Coordinate Networks" (Zheng et al.) instead,
    (sigma^2 / 4) max(1 - |delta| / sigma, 0)^2 with sigma = 2 d (the official code's). Stable rank
    min(N, 4 / (3 sigma)), sigma = 2 d the full width.
    """

    width: float = 0.0
    paper_distance: bool = False
    width_param: ClassVar[str] = "width"
    _basis: ClassVar[str] = "triangle"
    _param_field: ClassVar[str] = "width"

    def __init__(self, K: int, width: Optional[float] = None, margin: int = 0, paper_distance: bool = False):
        self._init_shifted(K, margin)
        w = 1.0 / self.K_base if width is None else _validate.positive_float("width", width)
        _set(self, width=w, paper_distance=bool(paper_distance))

    def blend_kernel(self) -> Optional[Tuple[str, float]]:
        if self.paper_distance:
            return "tri_sq", 1.0 / (2.0 * float(self.width))
        return "bspline3", 1.0 / float(self.width)

    def distance(self, delta) -> np.ndarray:
        delta = _finite_array("delta", delta)
        if self.paper_distance:
            return _formulas.triangle_distance_paper(delta, self.width)
        return _formulas.triangle_distance(delta, self.width)

    def stable_rank_bound(self, N: int) -> float:
        return _formulas.triangle_stable_rank(2.0 * self.width, _validate.positive_int("N", N))


@_shifted
class Rectangle(ShiftedBasis):
    """Boxes psi(u) = 1 if |u| < d / 2 else 0, d the width (nearest-neighbour regression).

    Distance d * tri(delta / d); stable rank min(N, 1 / d).
    """

    width: float = 0.0
    width_param: ClassVar[str] = "width"
    _basis: ClassVar[str] = "rectangle"
    _param_field: ClassVar[str] = "width"

    def __init__(self, K: int, width: float, margin: int = 0):
        self._init_shifted(K, margin)
        _set(self, width=_validate.positive_float("width", width))

    def blend_kernel(self) -> Optional[Tuple[str, float]]:
        return "tri", 1.0 / float(self.width)

    def distance(self, delta) -> np.ndarray:
        return _formulas.rectangle_distance(_finite_array("delta", delta), self.width)

    def stable_rank_bound(self, N: int) -> float:
        return _formulas.rectangle_stable_rank(self.width, _validate.positive_int("N", N))


@_shifted
class Impulse(ShiftedBasis):
    """One-hot at the nearest centre (ties go to the upper one; clipped to the centres that exist).

    Its distance is the sampled one: spacing * tri(delta / spacing) away from the borders.
    """

    _basis: ClassVar[str] = "impulse"

    def __init__(self, K: int, margin: int = 0):
        self._init_shifted(K, margin)

    def psi(self, u) -> np.ndarray:
        """Indicator of the centre's cell, -spacing/2 <= u < spacing/2."""
        u = _finite_array("u", u)
        h = self.spacing
        return ((u >= -0.5 * h) & (u < 0.5 * h)).astype(np.float64)


@_shifted
class Sine(_Nyquist, ShiftedBasis):
    """psi_k(x) = sin(f (t_k - x)), f an angular frequency (radians per unit of x).

    sin(f t - f x) = sin(f t) cos(f x) - cos(f t) sin(f x): the rank is at most 2, so the stable
    rank is at most min(N, 2).
    """

    freq: float = 0.0
    _basis: ClassVar[str] = "sine"
    _param_field: ClassVar[str] = "freq"

    def __init__(self, K: int, freq: float, margin: int = 0):
        self._init_shifted(K, margin)
        _set(self, freq=_validate.positive_float("freq", freq))

    def _base_frequency(self):
        return self.freq / (2.0 * math.pi), "freq / (2 pi)"

    def stable_rank_bound(self, N: int) -> float:
        return min(float(_validate.positive_int("N", N)), 2.0)


@_shifted
class Square(_Nyquist, ShiftedBasis):
    """psi_k(x) = sign(sin(f (t_k - x))): a square wave, mostly its first harmonic.

    As in section 4 of the complex-encoding paper (Zheng et al., ECCV 2022).
    """

    freq: float = 0.0
    _basis: ClassVar[str] = "square"
    _param_field: ClassVar[str] = "freq"

    def __init__(self, K: int, freq: float, margin: int = 0):
        self._init_shifted(K, margin)
        _set(self, freq=_validate.positive_float("freq", freq))

    def _base_frequency(self):
        return self.freq / (2.0 * math.pi), "freq / (2 pi)"


@_shifted
class BSpline(ShiftedBasis):
    """Centred cardinal B-splines of degree ``order`` scaled to ``width``: psi(u) = B_p(u / w).

    ``order`` 1 is the Triangle of half-width w, 3 the cubic B-spline (with w = 1/K, cubic-spline
    regression); ``width`` defaults to the centre spacing 1/K. Distance w * B_{2p+1}(delta / w);
    stable rank min(N, B_{2p+1}(0) / w), the argument of Props. 4-5 of the complex-encoding paper.
    """

    order: int = 3
    width: float = 0.0
    width_param: ClassVar[str] = "width"
    _basis: ClassVar[str] = "bspline"
    _param_field: ClassVar[str] = "width"

    def __init__(self, K: int, order: int = 3, width: Optional[float] = None, margin: int = 0):
        self._init_shifted(K, margin)
        p = _int_in_range("order", order, 0, 7)
        w = 1.0 / self.K_base if width is None else _validate.positive_float("width", width)
        _set(self, order=p, width=w)

    @property
    def _degree(self) -> int:
        return self.order

    def distance(self, delta) -> np.ndarray:
        return _formulas.bspline_distance(_finite_array("delta", delta), self.order, self.width)

    def stable_rank_bound(self, N: int) -> float:
        return _formulas.bspline_stable_rank(self.order, self.width, _validate.positive_int("N", N))


# ---- random noise ---------------------------------------------------------------------------


@dataclass(frozen=True, init=False, repr=False)
class Random(Embedder):
    """i.i.d. uniform noise in [-1, 1) per (x, k) (the random embedder of "Rethinking Positional
    Encoding", Zheng et al.).

    The value is a hash of (seed, the float64 bits of x, k): the same x always gets the same row
    (in float32 and float64, in any batch), a different x an independent one.
    """

    K: int = 0
    seed: int = 0

    def __init__(self, K: int, seed: int = 0):
        _set(self, K=_validate.positive_int("K", K), seed=_int_in_range("seed", seed, 0, 2**64 - 1))

    def _kernel_args(self):
        return "basis", dict(kind="random", first_index=0, K_base=1.0, param=0.0, degree=0, seed=self.seed)


# ---- Fourier features -----------------------------------------------------------------------
