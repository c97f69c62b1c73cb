"""The papers' evaluation protocol ("Trading Positional Complexity vs. Deepness in Coordinate
Networks", Zheng, Ramasinghe, Li, Lucey, ECCV 2022, sec. 6), shared by the benchmarks and the
command line (``kronpe fit``, ``kronpe demo``, the jobs).

A signal of shape (N_1, ..., N_D[, C]) sampled at coordinates x_i = linspace(0, 1, N_i + 1)[:-1]
(:func:`kronpe.data.grid_coords`) is trained on its regular subsample (every s-th sample per
axis, channels untouched) or on a random fraction of its samples, and judged on the samples
that were left out ("held-out" PSNR; "train" PSNR is measured on the training samples). A
:class:`Case` holds one such signal; the papers' settings (``PAPER_SETTINGS``) and embedders
are here too, and the peers' cubic-spline baseline of a grid case (``cubic_spline``).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .._adapters import validate as _validate
from ..data import grid_coords, psnr

__all__ = [
    "Case", "PAPER_SETTINGS", "check_stride", "cubic_spline", "fmt", "grid_coords", "heldout_mask", "mask_psnr",
    "paper_embedder", "paper_rcond", "paper_settings", "psnr", "random_mask", "split_psnr", "subsample",
]


def check_stride(shape: Sequence[int], stride) -> int:
    """``stride`` as an int, after checking every axis keeps at least 2 training samples."""
    stride = _validate.positive_int("stride", stride)
    for axis, n in enumerate(shape):
        if -(-n // stride) < 2:
            raise ValueError(
                f"stride must leave at least 2 training samples per axis; axis {axis} has "
                f"{n} samples, stride {stride} keeps {-(-n // stride)}"
            )
    return stride


def subsample(signal: np.ndarray, ndim: int, stride: int) -> np.ndarray:
    """Every ``stride``-th sample along the first ``ndim`` axes (trailing axes untouched)."""
    return np.ascontiguousarray(signal[(slice(None, None, stride),) * ndim])


def heldout_mask(shape: Sequence[int], stride: int) -> np.ndarray:
    """Boolean grid over ``shape``: True where a sample is NOT in the training subsample."""
    train = np.ones(tuple(shape), dtype=bool)
    for axis, n in enumerate(shape):
        on_axis = np.zeros(n, dtype=bool)
        on_axis[::stride] = True
        train &= on_axis.reshape((1,) * axis + (n,) + (1,) * (len(shape) - axis - 1))
    return ~train


def random_mask(shape: Sequence[int], fraction: float, seed: int = 0) -> np.ndarray:
    """A boolean mask of ``shape`` with round(fraction * size) True entries, seeded."""
    fraction = _validate.positive_float("fraction", fraction)
    if fraction > 1:
        raise ValueError(f"fraction must lie in (0, 1], got {fraction}")
    size = int(np.prod(shape))
    n = max(1, int(round(fraction * size)))
    mask = np.zeros(size, dtype=bool)
    mask[np.random.default_rng(seed).choice(size, n, replace=False)] = True
    return mask.reshape(tuple(shape))


def mask_psnr(full: np.ndarray, pred: np.ndarray, mask: np.ndarray, peak: float = 1.0) -> Tuple[float, float]:
    """(train PSNR, held-out PSNR) with ``mask`` (over the sampled axes) marking the training samples."""
    held = ~mask
    return psnr(full[mask], pred[mask], peak), (psnr(full[held], pred[held], peak) if held.any() else float("nan"))


def split_psnr(
    truth: np.ndarray, pred: np.ndarray, ndim: int, stride: int, peak: float = 1.0
) -> Tuple[float, float]:
    """(train PSNR, held-out PSNR) of ``pred`` against ``truth`` (NaN when nothing is held out)."""
    if pred.shape != truth.shape:
        raise ValueError(f"pred must have the signal's shape {truth.shape}, got {pred.shape}")
    mask = heldout_mask(truth.shape[:ndim], stride)
    train = psnr(subsample(truth, ndim, stride), subsample(pred, ndim, stride), peak)
    held = psnr(truth[mask], pred[mask], peak) if mask.any() else float("nan")
    return train, held


# ---- the papers' closed-form settings (Tables 1 and 3; official scripts) -------------------------

#: The papers' closed-form settings. 2-D: ``2D_separable_points.py`` of the official code, section
#: "Closed Form Complex Encoding" (K = 256 per axis for a 256 x 256 training grid). 3-D:
#: ``3D_separable_points_GD.py``: K = 64 per axis for a 64^3 training grid; its closed-form loop
#: iterates over the list of the gradient-descent section (it zips ``encoding_methods, params``,
#: which that section assigned last), so Table 3's closed-form numbers come from these values, not
#: from the list declared just above the loop (LinF 4, Gau 0.009, Tri 3/64): kronpe uses the ones
#: that ran. Gau is the Gaussian's sigma, Tri the triangle's half-width d, LinF/LogF the exponent of
#: the largest frequency 2^sigma, RFF the standard deviation of the random frequencies; the Fourier
#: families use K/2 frequencies (cos and sin).
PAPER_SETTINGS: Dict[int, Dict[str, float]] = {
    2: {"K": 256, "Gau": 0.0025, "Tri": 1 / 256, "LinF": 6.0, "LogF": 6.5, "RFF": 42.0},
    3: {"K": 64, "Gau": 0.015, "Tri": 2 / 64, "LinF": 3.0, "LogF": 3.0, "RFF": 6.0},
}


def paper_settings(ndim: int, K: int) -> Dict[str, float]:
    """The papers' settings for a D-dimensional signal trained on K samples per axis.

    At the papers' K (256 in 2-D, 64 in 3-D) these are ``PAPER_SETTINGS`` exactly. For another
    K (``--quick`` runs on smaller signals) the widths scale with the centre spacing 1/K
    (Gau, Tri), the linear/log frequency ranges keep their ratio to the Nyquist frequency K/2
    (LinF, LogF: sigma - log2(K_paper / K)) and RFF's scale shrinks by K / K_paper. Signals of
    other dimensions use the 3-D settings.
    """
    base = PAPER_SETTINGS[2 if ndim == 2 else 3]
    r = K / base["K"]
    return {
        "K": K,
        "Gau": base["Gau"] / r,
        "Tri": base["Tri"] / r,
        "LinF": max(base["LinF"] + math.log2(r), 0.5),
        "LogF": max(base["LogF"] + math.log2(r), 0.5),
        "RFF": base["RFF"] * r,
    }


def paper_embedder(family: str, K: int, param: float):
    """The papers' embedder of ``family`` (Gau, Tri, LinF, LogF, RFF), papers' centres.

    Returns None when this build of kronpe lacks the class (rows then show "n/a").
    """
    from .. import embedders as E

    if family == "Gau":
        return E.Gaussian(K, param)
    if family == "Tri":
        return E.Triangle(K, param)
    cls = {"LinF": "LinearFourier", "LogF": "LogFourier", "RFF": "RandomFourier"}[family]
    cls = getattr(E, cls, None)
    return None if cls is None else cls(K, param)

def paper_rcond(train_shape: Sequence[int], K: int) -> float:
    """The papers' pseudo-inverse cutoff, relative to the largest singular value.

    The official code solves each axis by a float32 least-squares solve (``torch.linalg.lstsq``,
    whose default cutoff is eps(float32) * max(N, K) of that axis). kronpe applies one cutoff to
    the products of the per-axis singular values; the papers' rows use this per-axis value for it
    (fit_grid's own default, max(prod N_i, prod K_i) * eps, is far larger on 3-D grids). It only
    matters for the rank-deficient Fourier families (LinF, LogF, RFF), whose held-out PSNR moves by
    several dB with the cutoff: the papers report no closed-form LogF result in 2-D for that reason.
    """
    return float(np.finfo(np.float32).eps) * max(max(int(n) for n in train_shape), int(K))


# ---- demo cases and rows -------------------------------------------------------------------------


@dataclass
class Case:
    """One demo signal: the full grid, what is kept for training, and how to score it."""

    name: str
    full: np.ndarray  # (N_1, ..., N_D[, C])
    ndim: int  # D, the number of sampled axes
    stride: int = 2
    peak: float = 1.0
    #: train on this random fraction of the samples instead of the regular subsample (None: grid)
    fraction: Optional[float] = None
    seed: int = 0
    _cache: Dict[str, object] = field(default_factory=dict, repr=False)

    @property
    def scattered(self) -> bool:
        return self.fraction is not None

    @property
    def mask(self) -> np.ndarray:  # (N_1, ..., N_D) bool: the random training samples
        if "mask" not in self._cache:
            self._cache["mask"] = random_mask(self.full.shape[: self.ndim], self.fraction, self.seed)
        return self._cache["mask"]  # type: ignore[return-value]

    @property
    def points(self) -> np.ndarray:  # (P, D) coordinates of the random training samples
        idx = np.nonzero(self.mask)
        return np.stack([c[i] for c, i in zip(self.coords, idx)], axis=1)

    @property
    def values(self) -> np.ndarray:  # (P, *channels)
        return self.full[self.mask]

    @property
    def train(self) -> np.ndarray:  # (ceil(N_1 / s), ..., [C])
        if "train" not in self._cache:
            self._cache["train"] = subsample(self.full, self.ndim, self.stride)
        return self._cache["train"]  # type: ignore[return-value]

    @property
    def coords(self) -> List[np.ndarray]:
        """Coordinates of every sample per axis."""
        return grid_coords(self.full.shape[: self.ndim])

    @property
    def train_coords(self) -> List[np.ndarray]:
        return [c[:: self.stride] for c in self.coords]

    @property
    def K(self) -> int:
        """Training samples per axis (the papers' K: one centre per training sample)."""
        return int(min(self.train.shape[: self.ndim]))

    def score(self, pred: np.ndarray) -> Tuple[float, float]:
        if self.scattered:
            return mask_psnr(self.full, pred, self.mask, self.peak)
        return split_psnr(self.full, pred, self.ndim, self.stride, self.peak)

def fmt(x: float, digits: int) -> str:
    if np.isnan(x):
        return "n/a"
    return "inf" if np.isinf(x) else f"{x:.{digits}f}"


def cubic_spline(case: Case) -> Tuple[np.ndarray, float, float]:
    """The peers' baseline of a grid case: cubic-spline interpolation of its training grid
    (scipy.ndimage, order 3, mirror boundary) at every sample. Returns (the prediction in the full
    grid's shape and dtype, seconds to prefilter, seconds in all)."""
    from scipy import ndimage

    t0 = time.perf_counter()
    train = case.train.reshape(case.train.shape[: case.ndim] + (-1,))
    coeffs = [
        ndimage.spline_filter(train[..., c], order=3, mode="mirror", output=np.float64)
        for c in range(train.shape[-1])
    ]
    t1 = time.perf_counter()
    # full-grid sample j along an axis sits at training index j / stride
    idx = np.meshgrid(*[np.arange(n) / case.stride for n in case.full.shape[: case.ndim]], indexing="ij")
    pred = np.stack(
        [ndimage.map_coordinates(c, idx, order=3, mode="mirror", prefilter=False) for c in coeffs],
        axis=-1,
    )
    t2 = time.perf_counter()
    return pred.reshape(case.full.shape).astype(case.full.dtype), t1 - t0, t2 - t0
