"""Fourier-type embedders: sin/cos features at chosen frequencies."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Optional, Tuple

import numpy as np

from .. import _formulas
from .._adapters import validate as _validate
from ._base import Embedder, _BYTES_PER_FREQUENCY, _CHUNK_ELEMENTS, _Nyquist, _even_positive_int, _finite_array, _frequency_count, _int_in_range, _set



@dataclass(frozen=True, init=False, repr=False)
class FourierFeatures(_Nyquist, Embedder):
    """sin/cos features at frequencies f_j (cycles over [0, 1]), with the modulations of the
    sinusoidal-embeddings tutorial of the neuraloperator library.

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

    LinearFourier(2 L, log2(L)) has the integer frequencies 1..L of the sinusoidal-embeddings
    tutorial's first example.
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
    """NeRF style: [x]? , sin(2^k pi u), cos(2^k pi u), k = 0..L-1, u = 2 x.

    u = 2 x spans a domain of length 2 like NeRF's [-1, 1], so frequency k makes 2^k cycles over
    [0, 1] (= sin(2^k x') with x' = 2 pi x) and the Nyquist bound is 2^(L-1) m < N/2, as in the
    sinusoidal-embeddings tutorial of the neuraloperator library.
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
    """Transformer style: sin(x' / P^(k/L)), cos(x' / P^(k/L)), x' = 2 pi x.

    As in the sinusoidal-embeddings tutorial of the neuraloperator library and eq. 1 of "Learnable
    Fourier Features for Multi-Dimensional Spatial Positional Encoding" (Li et al.).

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
