"""One-dimensional embedders (MATH.md section 1).

Every embedder maps a 1-D array of N coordinates in [0, 1] to an (N, K) array. float32 input
gives float32 output; float64 (and integer) input gives float64. Values are unscaled (the
official code divides by the largest row norm; kronpe does not, so a ridge weight always
refers to the raw basis: document in fits that lambda is relative to these values).

Shifted-basis embedders place centres t_k = k / K (k = 0..K-1, the papers' placement). With
``margin=m`` they add m centres at the same spacing beyond each end, k = -m .. K-1+m, so the
basis covers [0, 1] (MATH.md 3.5); ``.K`` is then the number of output features, K + 2m.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Optional

import numpy as np

from . import _validate


@dataclass(frozen=True)
class Embedder:
    """Base class: a frozen dataclass whose fields are the embedder's parameters."""

    #: name of the field that sets the basis width (searched by GCV), None if there is none
    width_param: ClassVar[Optional[str]] = None

    @property
    def K(self) -> int:  # pragma: no cover - every family overrides
        raise NotImplementedError

    def replace(self, **changes) -> "Embedder":
        """A copy with some parameters changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def __call__(self, x) -> np.ndarray:
        x = _validate.coords_1d("x", x)
        return self._embed(x)

    def _embed(self, x: np.ndarray) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def distance(self, delta) -> np.ndarray:
        """Embedded distance <Psi(x1), Psi(x2)> as a function of delta = x1 - x2.

        Shift-invariant families override this with a closed form. The fallback samples the
        embedder: it averages <Psi(x), Psi(x - delta)> over x in [0, 1] where both are inside.
        """
        delta = np.asarray(delta, dtype=np.float64)
        x = np.linspace(0.0, 1.0, 257)
        out = np.empty(delta.shape)
        for idx, d in np.ndenumerate(delta):  # small, scalar-wise on purpose: a fallback
            x1 = x[(x - d >= 0) & (x - d <= 1)]
            if x1.size == 0:
                out[idx] = 0.0
                continue
            out[idx] = np.mean(np.sum(self._embed(x1) * self._embed(x1 - d), axis=1))
        return out

    def stable_rank_bound(self, N: int) -> float:
        raise NotImplementedError(f"{type(self).__name__} has no theoretical stable-rank bound")


@dataclass(frozen=True)
class ShiftedBasis(Embedder):
    """Psi(x)_k = psi(x - t_k) with t_k = k / K_base for k = -margin .. K_base - 1 + margin."""

    K_base: int = 0
    margin: int = 0

    def __post_init__(self):
        _validate.positive_int("K", self.K_base)
        _validate.nonnegative_int("margin", self.margin)

    @property
    def K(self) -> int:
        return self.K_base + 2 * self.margin

    @property
    def spacing(self) -> float:
        return 1.0 / self.K_base

    @property
    def centres(self) -> np.ndarray:
        return np.arange(-self.margin, self.K_base + self.margin, dtype=np.float64) / self.K_base

    def psi(self, u: np.ndarray) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def _embed(self, x: np.ndarray) -> np.ndarray:
        t = self.centres.astype(x.dtype)
        return self.psi(x[:, None] - t[None, :]).astype(x.dtype, copy=False)


def _shifted(cls):
    """Give a ShiftedBasis subclass the signature (K, <params>, margin=0)."""
    return dataclass(frozen=True, init=False)(cls)


@_shifted
class Gaussian(ShiftedBasis):
    """Gaussian bumps psi(u) = exp(-u^2 / (2 sigma^2)) (``Gau`` in the papers)."""

    sigma: float = 0.0
    width_param: ClassVar[str] = "sigma"

    def __init__(self, K: int, sigma: float, margin: int = 0):
        object.__setattr__(self, "K_base", K)
        object.__setattr__(self, "margin", margin)
        object.__setattr__(self, "sigma", _validate.positive_float("sigma", sigma))
        ShiftedBasis.__post_init__(self)

    def replace(self, **changes):
        kw = dict(K=self.K_base, sigma=self.sigma, margin=self.margin)
        kw.update(changes)
        return Gaussian(**kw)

    def psi(self, u):
        return np.exp(-(u * u) / (2.0 * self.sigma**2))

    def distance(self, delta):
        delta = np.asarray(delta, dtype=np.float64)
        s = self.sigma
        return np.sqrt(np.pi) * s * np.exp(-delta**2 / (4 * s * s))

    def stable_rank_bound(self, N: int) -> float:
        return min(float(N), 1.0 / (2 * np.sqrt(np.pi) * self.sigma))


@_shifted
class Triangle(ShiftedBasis):
    """Hat functions psi(u) = max(1 - |u| / d, 0), d the half-width (default 1 / K)."""

    width: float = 0.0
    width_param: ClassVar[str] = "width"

    def __init__(self, K: int, width: Optional[float] = None, margin: int = 0):
        object.__setattr__(self, "K_base", K)
        object.__setattr__(self, "margin", margin)
        ShiftedBasis.__post_init__(self)
        w = 1.0 / K if width is None else _validate.positive_float("width", width)
        object.__setattr__(self, "width", w)

    def replace(self, **changes):
        kw = dict(K=self.K_base, width=self.width, margin=self.margin)
        kw.update(changes)
        return Triangle(**kw)

    def psi(self, u):
        return np.maximum(1.0 - np.abs(u) / self.width, 0.0)
