"""One-dimensional embedders (MATH.md section 1).

Every embedder maps a 1-D array of N coordinates in [0, 1] to an (N, K) array. float32 input
gives float32 output; float64 (and integer) input gives float64; a torch CPU tensor gives a
torch tensor. Values are computed by the compiled kernel (kronpe._core.embed_basis /
embed_fourier) in double precision and rounded once; kronpe.reference holds the NumPy formulas.
Values are unscaled (the official code divides by the largest row norm; kronpe does not, so a
ridge weight always refers to the raw basis).

Shifted-basis embedders (Gaussian, Triangle, Rectangle, Impulse, Sine, Square, BSpline) place
centres t_k = k / K (k = 0..K-1, the papers' placement). With ``margin=m`` they add m centres at
the same spacing beyond each end, k = -m .. K-1+m, so the basis covers [0, 1] (MATH.md 3.5);
``.K`` is then the number of output features, K + 2m.

Fourier-type embedders (LinearFourier, LogFourier, RandomFourier, NeRF, Transformer) follow the
coordinate convention of seed 004: x in [0, 1] is mapped to x' = 2 pi x in [0, 2 pi] and the
features are sin/cos(f m x'), so a frequency f is a number of cycles over [0, 1]:

- LinearFourier / LogFourier / RandomFourier: cos(2 pi b x) = cos(b x') (seed 000, D.1);
- NeRF: sin(2^k pi u), u = 2 x in [0, 2] (NeRF's own domain [-1, 1] has length 2), that is
  sin(2^k x'): frequency 2^k, the highest 2^(L-1), as seed 004's Nyquist bound assumes;
- Transformer: sin(x' / P^(k/L)), P = max_positions (seed 004 applies it to x' = 2 pi x).

Each has ``amplitude_mod`` (m * g(x)) and ``frequency_mod`` (g(m x)) as in seed 004, and
``check_nyquist(N)`` for N samples of [0, 1): the highest frequency times m must stay below N/2.
"""
from __future__ import annotations

import inspect
import math
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, Optional, Tuple

import numpy as np

from . import _core, _formulas
from ._adapters import arrays as _arrays, validate as _validate

__all__ = [
    "Embedder",
    "ShiftedBasis",
    "FourierFeatures",
    "NyquistWarning",
    "Gaussian",
    "Triangle",
    "Rectangle",
    "Impulse",
    "Sine",
    "Square",
    "Random",
    "BSpline",
    "LinearFourier",
    "LogFourier",
    "RandomFourier",
    "NeRF",
    "Transformer",
]

# Work arrays of the sampled-distance computation stay below this many elements.
_CHUNK_ELEMENTS = 1 << 22
# Bytes per frequency while a Fourier embedder computes its frequencies (array + temporaries).
_BYTES_PER_FREQUENCY = 32


class NyquistWarning(UserWarning):
    """An embedder's highest frequency is at or above the Nyquist limit of the sampling."""


# ---- argument checks that only embedders need ------------------------------------------------


def _int_in_range(name: str, value, low: int, high: int) -> int:
    return _validate.integer(name, value, low, high)


def _frequency_count(name: str, count: int) -> int:
    """``count`` frequencies, after checking their memory (the array and its temporaries)."""
    _validate.check_budget(name, count * _BYTES_PER_FREQUENCY,
                           f"use a smaller {name} ({count} frequencies asked for)")
    return count


def _even_positive_int(name: str, value) -> int:
    v = _validate.positive_int(name, value)
    if v % 2:
        raise ValueError(f"{name} must be even (K/2 cosine and K/2 sine features), got {value!r}")
    _frequency_count(name, v // 2)
    return v


def _finite_array(name: str, value) -> np.ndarray:
    arr = _validate.real_array(name, value)
    _validate.check_array_budget(name, arr.shape, 8, f"pass a smaller {name}")
    arr = arr.astype(np.float64, copy=False)
    _validate.finite(name, arr)
    return arr


def _set(obj, **fields) -> None:
    """Assign fields of a frozen dataclass from its __init__."""
    for name, value in fields.items():
        object.__setattr__(obj, name, value)


# ---- base classes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Embedder:
    """Base class: a frozen dataclass whose fields are the embedder's parameters.

    Subclasses provide ``K`` (output features) and ``_kernel_args()``; everything else
    (validation, the compiled call, distances) is shared.
    """

    #: name of the field that sets the basis width (searched by GCV), None if there is none
    width_param: ClassVar[Optional[str]] = None

    # -- parameters ------------------------------------------------------------------------

    def _init_value(self, name: str):
        return getattr(self, name)

    def _init_kwargs(self) -> Dict[str, Any]:
        """The keyword arguments that rebuild this embedder."""
        params = inspect.signature(type(self).__init__).parameters
        return {name: self._init_value(name) for name in params if name != "self"}

    def replace(self, **changes) -> "Embedder":
        """A copy with some parameters changed (validated again)."""
        kw = self._init_kwargs()
        unknown = set(changes) - set(kw)
        if unknown:
            raise ValueError(f"{type(self).__name__} has no parameter {sorted(unknown)}; it has {sorted(kw)}")
        kw.update(changes)
        return type(self)(**kw)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._init_kwargs().items())
        return f"{type(self).__name__}({args})"

    # -- evaluation ------------------------------------------------------------------------

    def __call__(self, x, out: Optional[np.ndarray] = None):
        """Embed coordinates.

        Parameters
        ----------
        x : array of shape (N,)
            Coordinates in [0, 1] (NumPy, torch, or CuPy).
        out : array of shape (N, K), optional
            Where to write the result (any strides, the dtype of x; on x's device for device x).

        Returns
        -------
        (N, K) array of x's dtype (float64 for integer input) and kind: a torch tensor for torch
        input, a CuPy array for CuPy input; CuPy arrays and CUDA tensors are embedded on their GPU.
        """
        if _arrays.is_device(x):
            from ._adapters import cuda as _cuda

            return _cuda.embed(self, x, out)
        xn = _validate.real_array("x", x)
        if not xn.dtype.isnative:  # byte-swapped input: to native order first
            xn = xn.astype(xn.dtype.newbyteorder("="))
        xn = _validate.coords_1d("x", xn)
        xn = _validate.separate(out, xn)
        result = self._embed(xn, out)
        return result if out is not None else _arrays.like(result, x)

    def _embed(self, x: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
        """The compiled embedder on any finite float32/float64 x (no range check)."""
        width = self.K
        self._check_call_budget(x.shape[0], x.dtype.itemsize if out is None else 0)
        if out is None:
            out = np.empty((x.shape[0], width), dtype=x.dtype)
        else:
            if not isinstance(out, np.ndarray):
                raise TypeError(f"out must be a NumPy array, got {type(out).__name__}")
            if out.shape != (x.shape[0], width):
                raise ValueError(f"out must have shape {(x.shape[0], width)}, got {out.shape}")
            if out.dtype != x.dtype:
                raise ValueError(f"out must have dtype {x.dtype} (that of x), got {out.dtype}")
            if not out.flags.writeable:
                raise ValueError("out must be writeable")
        self._run_kernel(_arrays.describe(x, "x"), _arrays.describe(out, "out"))
        return out

    def _parameter_bytes(self) -> int:
        """Bytes an embedding call allocates for the embedder's parameters (0: none)."""
        return 0

    def _check_call_budget(self, N: int, itemsize: int, temporaries: int = 1) -> None:
        """MemoryError naming x and K, before anything is allocated, when embedding N coordinates
        (an (N, K) output of ``itemsize`` bytes, ``temporaries`` of them) and the parameters the
        call computes are over the memory budget."""
        features = "K + 2 margin" if getattr(self, "margin", 0) else "K"
        name = f"x (N = {N}) x {features} (= {self.K})"
        out = _validate.size_product(name, (N, self.K, itemsize, temporaries))
        _validate.check_budget(name, out + self._parameter_bytes(),
                               "embed fewer coordinates at once, or use fewer features")

    def _run_kernel(self, x: "_arrays.Array", out: "_arrays.Array", workspace=None) -> None:
        """The compiled embedder (host or CUDA, by where x lives) from descriptors x (N,) and
        out (N, K); ``workspace``: device scratch for the CUDA Fourier kernel."""
        kind, args = self._kernel_args()
        cuda = _arrays.on_device(x)
        if kind == "basis":
            fn = _core.cuda_embed_basis if cuda else _core.embed_basis
            fn(x, out, args["kind"], args["first_index"], args["K_base"], args["param"],
               args["degree"], args["seed"])
        else:
            omega = np.ascontiguousarray(args["omega"], dtype=np.float64)
            extra = (workspace,) if cuda else ()
            fn = _core.cuda_embed_fourier if cuda else _core.embed_fourier
            fn(x, out, _arrays.describe(omega, "omega"), args["layout"], args["include_input"],
               args["amplitude"], *extra)

    def _kernel_args(self) -> Tuple[str, Dict[str, Any]]:  # pragma: no cover - every family overrides
        """("basis", kwargs of reference.embed_basis) or ("fourier", kwargs of reference.embed_fourier)."""
        raise NotImplementedError

    def reference(self, x) -> np.ndarray:
        """The NumPy oracle (kronpe.reference) of this embedder, for tests."""
        from . import reference

        xn = _validate.coords_1d("x", _arrays.to_numpy(x, "x"))
        self._check_call_budget(xn.shape[0], 8, temporaries=3)  # the formulas' float64 temporaries
        kind, args = self._kernel_args()
        if kind == "basis":
            return reference.embed_basis(xn, K=self.K, **args)
        return reference.embed_fourier(xn, **args)

    # -- distances -------------------------------------------------------------------------

    @property
    def _quadrature_weight(self) -> float:
        """Factor that turns the sampled distance into the continuous one of ``distance``."""
        return 1.0

    def blend_kernel(self) -> Optional[Tuple[str, float]]:
        """The closed-form distance the blending kernels can evaluate for this embedder:
        ``(kind, param)`` with kind one of "gaussian" (exp(-param d^2)), "bspline3"
        (B3(|d| param)), "tri" (max(1 - |d| param, 0)) or "tri_sq" (its square), up to scale;
        None when there is none (the weights then come from :meth:`distance`). Families with a
        closed form override this; :class:`kronpe.BlendingMatrix` uses it only after checking it
        against :meth:`distance`, so a subclass that changes the distance stays correct."""
        return None

    def distance(self, delta) -> np.ndarray:
        """Embedded distance D(delta) = <Psi(x1), Psi(x2)> as a function of delta = x1 - x2.

        Families with a closed form in MATH.md section 2 override this with it (the continuous
        integral over centres or frequencies). The others return
        ``sampled_distance(delta, scaled=True)``. Vectorised over any shape of ``delta``.
        """
        return self.sampled_distance(delta, scaled=True)

    def sampled_distance(self, delta, x=None, *, scaled: bool = False, samples: int = 64) -> np.ndarray:
        """Inner product of the sampled embeddings, sum_k Psi(x)_k Psi(x - delta)_k.

        Parameters
        ----------
        delta : array
            Offsets x1 - x2 (any shape).
        x : array, optional
            Positions x1 (broadcast with ``delta``). When omitted the inner product is averaged
            over positions: over one centre spacing in the middle of the domain for shifted
            bases (the integral over a period of the centre lattice), over the x in [0, 1] with
            x - delta in [0, 1] otherwise; Fourier features need no average (they are exactly
            shift-invariant).
        scaled : bool
            Multiply by the quadrature weight that makes it comparable with ``distance`` (the
            centre spacing for shifted bases, sqrt(2 pi) sigma / (K/2) for RFF, else 1).
        samples : int
            Positions in the average.
        """
        delta = _finite_array("delta", delta)
        samples = _validate.positive_int("samples", samples)
        if x is None:
            d = self._mean_sampled_distance(delta.ravel(), samples).reshape(delta.shape)
        else:
            x = _finite_array("x", x)
            try:
                shape = np.broadcast_shapes(x.shape, delta.shape)
            except ValueError:
                raise ValueError(f"x must broadcast with delta: got shapes {x.shape} and {delta.shape}") from None
            _validate.check_array_budget("x and delta", shape, 8 * 3, "pass fewer positions or offsets")
            x1, d2 = np.broadcast_arrays(x, delta)
            x1 = np.ascontiguousarray(x1).ravel()
            e1 = self._embed(x1)
            e2 = self._embed(x1 - np.ascontiguousarray(d2).ravel())
            d = np.einsum("nk,nk->n", e1, e2).reshape(d2.shape)
        return d * self._quadrature_weight if scaled else d

    def _average_positions(self, samples: int) -> Tuple[np.ndarray, bool]:
        """Positions x1 of the average, and whether pairs leaving [0, 1] are dropped."""
        return (np.arange(samples) + 0.5) / samples, True

    def _mean_sampled_distance(self, delta: np.ndarray, samples: int) -> np.ndarray:  # (M,) -> (M,)
        # the positions and their embeddings
        _validate.check_array_budget("samples", (samples, self.K + 1), 8, "use fewer samples")
        x1, mask_outside = self._average_positions(samples)
        e1 = self._embed(x1)  # (G, K)
        G, K = e1.shape
        out = np.empty(delta.shape[0])
        step = max(1, _CHUNK_ELEMENTS // max(1, G * K))
        for start in range(0, delta.shape[0], step):  # chunks of offsets, not points
            d = delta[start:start + step]
            x2 = x1[None, :] - d[:, None]  # (m, G)
            e2 = self._embed(x2.ravel()).reshape(d.shape[0], G, K)
            prod = np.einsum("mgk,gk->mg", e2, e1)
            if mask_outside:
                valid = (x2 >= 0.0) & (x2 <= 1.0)
                count = valid.sum(axis=1)
                total = np.where(valid, prod, 0.0).sum(axis=1)
                out[start:start + step] = np.where(count > 0, total / np.maximum(count, 1), 0.0)
            else:
                out[start:start + step] = prod.mean(axis=1)
        return out

    def stable_rank_bound(self, N: int) -> float:
        """Theoretical stable rank of the (N, K) embedding matrix of N coordinates."""
        _validate.positive_int("N", N)
        raise NotImplementedError(f"{type(self).__name__} has no theoretical stable-rank bound")


class _Nyquist:
    """Nyquist check (seed 004) for embedders with a highest frequency.

    Subclasses define ``_base_frequency()`` -> (the highest frequency before frequency
    modulation, in cycles over [0, 1], and the formula that gives it), ``_modulation`` and
    optionally ``_nyquist_hint(N)``.
    """

    _modulation = 1.0

    def _base_frequency(self) -> Tuple[float, str]:  # pragma: no cover
        raise NotImplementedError

    def _nyquist_hint(self, N: int) -> str:
        return ""

    @property
    def highest_frequency(self) -> float:
        """The highest frequency in cycles over [0, 1] (after frequency modulation)."""
        return self._base_frequency()[0] * self._modulation

    def nyquist_limit(self, N: int) -> float:
        """N / (2 m): the bound the unmodulated highest frequency must stay below for N samples."""
        N = _validate.positive_int("N", N)
        return N / (2.0 * self._modulation)

    def check_nyquist(self, N: int, action: str = "warn") -> bool:
        """Whether the highest frequency is below the Nyquist limit of N samples of [0, 1).

        Parameters
        ----------
        N : int
            Number of (equally spaced) samples.
        action : {"warn", "raise", "ignore"}
            What to do on a violation: a NyquistWarning, a ValueError, or nothing.
        """
        if action not in ("warn", "raise", "ignore"):
            raise ValueError(f"action must be 'warn', 'raise' or 'ignore', got {action!r}")
        limit = self.nyquist_limit(N)
        f, formula = self._base_frequency()
        if f < limit:
            return True
        message = (
            f"{self!r} violates the Nyquist limit for N = {N} samples of [0, 1): its highest "
            f"frequency {formula} = {f:g} cycles over [0, 1] must stay below N / (2 m) = "
            f"{N} / (2 * {self._modulation:g}) = {limit:g} (m = frequency modulation)"
            f"{self._nyquist_hint(N)}"
        )
        if action == "raise":
            raise ValueError(message)
        if action == "warn":
            warnings.warn(message, NyquistWarning, stacklevel=2)
        return False


# ---- shifted bases --------------------------------------------------------------------------


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

    Distance: the exact autocorrelation d * B3(delta / d); ``paper_distance=True`` uses seed 000's
    Prop. 5 instead, (sigma^2 / 4) max(1 - |delta| / sigma, 0)^2 with sigma = 2 d (the official
    code's). Stable rank min(N, 4 / (3 sigma)), sigma = 2 d the full width.
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
    """psi_k(x) = sign(sin(f (t_k - x))): a square wave, mostly its first harmonic (seed 000 sec. 4)."""

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
    stable rank min(N, B_{2p+1}(0) / w), the argument of seed 000 Props. 4-5.
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
    """i.i.d. uniform noise in [-1, 1) per (x, k) (seed 001's random embedder).

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


@dataclass(frozen=True, init=False, repr=False)
class FourierFeatures(_Nyquist, Embedder):
    """sin/cos features at frequencies f_j (cycles over [0, 1]), with seed 004's modulations.

    Psi(x) = [x]? + a * g(m x), g made of cos(2 pi f_j x) and sin(2 pi f_j x); ``amplitude_mod``
    is a, ``frequency_mod`` is m (> 0). The raw coordinate (``include_input``) is not modulated.
    """

    amplitude_mod: float = 1.0
    frequency_mod: float = 1.0

    _layout: ClassVar[str] = "blocks"
    _include_input: ClassVar[bool] = False

    def _init_modulation(self, amplitude_mod: float, frequency_mod: float) -> None:
        _set(self, amplitude_mod=_validate.finite_nonzero("amplitude_mod", amplitude_mod),
             frequency_mod=_validate.positive_float("frequency_mod", frequency_mod))

    def _set_frequencies(self, f: np.ndarray) -> None:
        f = np.asarray(f, dtype=np.float64)
        f.flags.writeable = False
        object.__setattr__(self, "_frequencies", f)

    def _draw_frequencies(self) -> np.ndarray:  # pragma: no cover - the families override it
        """The frequencies, computed at their first use (so that an embedding too large for
        memory is refused before they are allocated)."""
        raise NotImplementedError(f"{type(self).__name__} sets no frequencies")

    @property
    def _frequency_count(self) -> int:
        """F, without computing the frequencies (the families that know it override this)."""
        return self.frequencies.shape[0]

    def _parameter_bytes(self) -> int:
        return self._frequency_count * _BYTES_PER_FREQUENCY

    @property
    def frequencies(self) -> np.ndarray:
        """The F frequencies f_j before frequency modulation, in cycles over [0, 1]."""
        f = self.__dict__.get("_frequencies")
        if f is None:
            self._set_frequencies(self._draw_frequencies())
            f = self.__dict__["_frequencies"]
        return f

    @property
    def omega(self) -> np.ndarray:
        """Angular frequencies 2 pi m f_j (radians per unit of x) that the kernel uses."""
        f = self.frequencies
        omega = (2.0 * math.pi * self.frequency_mod) * f
        if not np.isfinite(omega).all():
            raise ValueError(
                f"frequency_mod: 2 pi m f overflows for m = {self.frequency_mod:g} and the largest frequency "
                f"|f| = {float(np.max(np.abs(f))):g} (from {self.width_param or 'the parameters'}); "
                "use a smaller frequency_mod or smaller frequencies")
        return omega

    @property
    def _uses_input(self) -> bool:
        return bool(getattr(self, "include_input", False))

    @property
    def K(self) -> int:
        return 2 * self._frequency_count + (1 if self._uses_input else 0)

    @property
    def _modulation(self) -> float:
        return self.frequency_mod

    def _kernel_args(self):
        return "fourier", dict(omega=self.omega, layout=self._layout, include_input=self._uses_input,
                               amplitude=self.amplitude_mod)

    def _base_frequency(self):
        return float(np.max(np.abs(self.frequencies))), "max |f|"

    def _mean_sampled_distance(self, delta: np.ndarray, samples: int) -> np.ndarray:
        # cos(w x1) cos(w x2) + sin(w x1) sin(w x2) = cos(w (x1 - x2)): exact for every position.
        omega = self.omega
        d = np.empty(delta.shape[0])
        step = max(1, _CHUNK_ELEMENTS // max(1, omega.shape[0]))
        for start in range(0, delta.shape[0], step):  # (offsets, frequencies) in chunks
            d[start:start + step] = np.cos(delta[start:start + step, None] * omega[None, :]).sum(axis=1)
        d *= self.amplitude_mod**2
        if self._uses_input:
            # the raw coordinate's x1 x2, averaged over x1 in [0, 1] with x1 - delta in [0, 1]
            a = np.minimum(np.abs(delta), 1.0)
            d = d + (1.0 - a) * (2.0 + a) / 6.0
        return d


def _fourier(cls):
    return dataclass(frozen=True, init=False, repr=False)(cls)


def _fourier_sigma(sigma) -> float:
    """sigma of LinearFourier / LogFourier: positive, and 2^sigma (the highest frequency) finite."""
    value = _validate.positive_float("sigma", sigma)
    if not value < 1000.0:
        raise ValueError(f"sigma must be below 1000 (the highest frequency is 2^sigma), got {value:g}")
    return value


@_fourier
class LinearFourier(FourierFeatures):
    """``LinF``: K/2 frequencies b = linspace(2^0, 2^sigma, K/2); Psi = [cos(2 pi b x), sin(2 pi b x)].

    LinearFourier(2 L, log2(L)) has the integer frequencies 1..L of seed 004's first example.
    """

    K: int = 0
    sigma: float = 0.0
    width_param: ClassVar[str] = "sigma"

    def __init__(self, K: int, sigma: float, amplitude_mod: float = 1.0, frequency_mod: float = 1.0):
        _set(self, K=_even_positive_int("K", K), sigma=_fourier_sigma(sigma))
        self._init_modulation(amplitude_mod, frequency_mod)

    def _draw_frequencies(self) -> np.ndarray:
        return np.linspace(1.0, 2.0**self.sigma, self.K // 2)

    @property
    def _frequency_count(self) -> int:
        return self.K // 2

    def _base_frequency(self):
        return float(self.frequencies.max()), "2^sigma"

    def _nyquist_hint(self, N: int) -> str:
        return f"; choose sigma < log2(N / (2 m)) = {math.log2(self.nyquist_limit(N)):.4g}"


@_fourier
class LogFourier(FourierFeatures):
    """``LogF``: K/2 frequencies b = 2^linspace(0, sigma, K/2); Psi = [cos(2 pi b x), sin(2 pi b x)]."""

    K: int = 0
    sigma: float = 0.0
    width_param: ClassVar[str] = "sigma"

    def __init__(self, K: int, sigma: float, amplitude_mod: float = 1.0, frequency_mod: float = 1.0):
        _set(self, K=_even_positive_int("K", K), sigma=_fourier_sigma(sigma))
        self._init_modulation(amplitude_mod, frequency_mod)

    def _draw_frequencies(self) -> np.ndarray:
        return 2.0 ** np.linspace(0.0, self.sigma, self.K // 2)

    _frequency_count = LinearFourier._frequency_count
    _base_frequency = LinearFourier._base_frequency
    _nyquist_hint = LinearFourier._nyquist_hint


@_fourier
class RandomFourier(FourierFeatures):
    """``RFF``: K/2 frequencies b ~ Normal(0, sigma^2) drawn with ``seed``; Psi = [cos(2 pi b x), sin(2 pi b x)].

    Distance sqrt(2 pi) s exp(-2 pi^2 s^2 delta^2) (times a^2), s = m sigma the effective scale;
    stable rank min(N, sqrt(2 pi) s). The draws are b = sigma * z with z fixed by the seed.
    """

    K: int = 0
    sigma: float = 0.0
    seed: int = 0
    width_param: ClassVar[str] = "sigma"

    def __init__(self, K: int, sigma: float, seed: int = 0, amplitude_mod: float = 1.0, frequency_mod: float = 1.0):
        _set(self, K=_even_positive_int("K", K), sigma=_validate.positive_float("sigma", sigma),
             seed=_int_in_range("seed", seed, 0, 2**63 - 1))
        self._init_modulation(amplitude_mod, frequency_mod)

    def _draw_frequencies(self) -> np.ndarray:
        b = np.random.default_rng(self.seed).standard_normal(self.K // 2)
        b *= self.sigma  # sigma * z, in place
        return b

    _frequency_count = LinearFourier._frequency_count

    @property
    def _scale(self) -> float:
        return self.frequency_mod * self.sigma

    @property
    def _quadrature_weight(self) -> float:
        return _formulas.SQRT_2PI * self._scale / (self.K // 2)

    def blend_kernel(self) -> Optional[Tuple[str, float]]:
        return "gaussian", 2.0 * math.pi**2 * float(self._scale) ** 2

    def distance(self, delta) -> np.ndarray:
        return self.amplitude_mod**2 * _formulas.rff_distance(_finite_array("delta", delta), self._scale)

    def stable_rank_bound(self, N: int) -> float:
        return _formulas.rff_stable_rank(self._scale, _validate.positive_int("N", N))


@_fourier
class NeRF(FourierFeatures):
    """NeRF style (seed 004): [x]? , sin(2^k pi u), cos(2^k pi u), k = 0..L-1, u = 2 x.

    u = 2 x spans a domain of length 2 like NeRF's [-1, 1], so frequency k makes 2^k cycles over
    [0, 1] (= sin(2^k x') with x' = 2 pi x) and the Nyquist bound is seed 004's 2^(L-1) m < N/2.
    """

    L: int = 0
    include_input: bool = False

    _layout: ClassVar[str] = "interleaved"

    def __init__(self, L: int, include_input: bool = False, amplitude_mod: float = 1.0, frequency_mod: float = 1.0):
        _set(self, L=_int_in_range("L", L, 1, 60), include_input=bool(include_input))
        self._init_modulation(amplitude_mod, frequency_mod)

    def _draw_frequencies(self) -> np.ndarray:
        return 2.0 ** np.arange(self.L)

    @property
    def _frequency_count(self) -> int:
        return self.L

    def _base_frequency(self):
        return float(2.0 ** (self.L - 1)), "2^(L-1)"

    def _nyquist_hint(self, N: int) -> str:
        return f"; choose L < 1 + log2(N / (2 m)) = {1.0 + math.log2(self.nyquist_limit(N)):.4g}"


@_fourier
class Transformer(FourierFeatures):
    """Transformer style (seed 004, seed 002 eq. 1): sin(x' / P^(k/L)), cos(x' / P^(k/L)), x' = 2 pi x.

    P = max_positions. The frequencies 1 / P^(k/L) are at most one cycle over [0, 1]; to embed
    integer positions 0..N-1 as the transformer does, use frequency_mod = N / (2 pi).
    """

    L: int = 0
    max_positions: float = 10000.0
    include_input: bool = False

    _layout: ClassVar[str] = "interleaved"

    def __init__(self, L: int, max_positions: float = 10000, include_input: bool = False,
                 amplitude_mod: float = 1.0, frequency_mod: float = 1.0):
        _set(self, L=_frequency_count("L", _validate.positive_int("L", L)),
             max_positions=_validate.positive_float("max_positions", max_positions),
             include_input=bool(include_input))
        self._init_modulation(amplitude_mod, frequency_mod)

    def _draw_frequencies(self) -> np.ndarray:
        return self.max_positions ** (-np.arange(self.L) / self.L)

    _frequency_count = NeRF._frequency_count

    def _base_frequency(self):
        return float(np.max(self.frequencies)), "max_k P^(-k/L)"
