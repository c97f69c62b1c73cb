"""Resampling of images and N-D arrays by an area-consistent spline fit: ``upsample``, ``resample``.

The model (one axis; the D axes are separable, channels are carried along). An axis of n
samples covers [0, 1]; sample i is the *mean* of a continuous signal f over its pixel
[i / n, (i + 1) / n) (a camera pixel, a box-downsampled pixel, a voxel). f is a quadratic spline
with one B-spline per input pixel, centred on it (``kronpe.BSpline`` of order 2 and width 1 / n),
plus ``MARGIN`` more beyond each end:

    f(x) = sum_k c_k B_2(n x - k - 1/2),     k = -2 .. n + 1.

The coefficients are fitted so that the pixel means of f reproduce the samples exactly (the fit
at input resolution whose box averages give the input). Beyond each end the coefficients mirror
as the samples do (c_{-1-k} = c_k, the samples extended by ``numpy.pad(mode="symmetric")``), so
constants are reproduced exactly and the system stays n x n: A c = y with
A[j, k] = B_3(j - k) folded at the ends (the mean of B_2 over a unit pixel is B_3, the B-spline
convolution identity of docs/math/embedders.rst), tridiagonal and diagonally dominant.
Output sample J of N is the mean of f over its own pixel [J / N, (J + 1) / N) (exact, through
the antiderivative of B_2: sum_i B_3(u - 1/2 - i)). So

- a box-downsampled image comes back aligned: box-averaging ``upsample(y, 2)`` gives ``y`` back
  (to rounding), and ``resample(x, shape=half)`` of an even-sized x is its 2 x 2 box mean;
- the per-axis operator M = F E A^-1 (N x n, E the mirroring) is linear; it is formed once per axis (exact rows
  of A^-1 decay by 0.268 per pixel, so entries below 1e-14 of the largest are dropped: M is
  stored sparse, about 50 entries per row) and applied along each axis: O(N * 50) per line.

Measured (benches/bench_upsample.py, the table in benches/README.md): 2x box-downsample and back
on the sample photographs, this model beats Pillow's bicubic resize and SciPy's cubic spline at
the right pixel centres on every photograph. Of the spline orders 1-4, order 2 is the best or
within 0.02 dB of it on each photograph, and any ridge loses (interpolating the pixel means
exactly is what the forward model asks for).
"""
from __future__ import annotations

import math
import numbers
import threading
from typing import Optional, Sequence, Tuple, Union

import numpy as np

from . import _caches
from ._adapters import arrays as _arrays, validate as _validate
from ._shared import guess_ndim
from .embedders import BSpline

__all__ = ["upsample", "resample", "resample_matrix"]

#: Degree of the B-splines (see the module docstring for the measurements behind it).
ORDER = 2
#: Coefficients beyond each end (and mirrored samples): 1 covers [0, 1] for order 2; 2 is safe.
MARGIN = 2
#: Entries of the per-axis operator below this fraction of its largest are dropped.
CUTOFF = 1e-14
#: How the input was sampled: "area" (each pixel the mean over its area: cameras, box
#: downsampling) or "point" (values at the pixels' corners: every k-th node of a simulation or a
#: terrain model, slices of a volume).
SAMPLINGS = ("area", "point")

_B_NEXT = BSpline(1, order=ORDER + 1, width=1.0)  # B_{p+1}(u), the compiled kernel


def _b_next(u: np.ndarray) -> np.ndarray:
    return _B_NEXT.psi(u)


def _antiderivative(u: np.ndarray) -> np.ndarray:
    """C(u) = integral of B_p from -inf to u = sum_{i >= 0} B_{p+1}(u - 1/2 - i) (0 left, 1 right)."""
    half = (ORDER + 1) / 2.0
    v = np.clip(u, -half, half)
    return sum(_b_next(v - 0.5 - i) for i in range(ORDER + 2))


def _axis_matrix(n: int, N: int) -> "scipy.sparse.csr_matrix":  # noqa: F821
    """The operator of one axis, n samples -> N samples (CSR, float64)."""
    from scipy import sparse
    from scipy.linalg import solve_banded

    m = MARGIN
    # The coefficients mirror about each end as the samples do (c_{-1-k} = c_k): then the pixel
    # means of f reproduce the samples mirrored to infinity, and constants are reproduced
    # exactly. pad_index[k + m] is the coefficient that extended index k (-m..n-1+m) stands for.
    pad_index = np.pad(np.arange(n), m, mode="symmetric")
    # A c = y (n x n): A[j, refl(k)] += B_{p+1}(j - k) for |j - k| <= bw; banded (bw each side)
    bw = (ORDER + 1) // 2
    ab = np.zeros((2 * bw + 1, n))
    j = np.arange(n)
    for d in range(-bw, bw + 1):
        col = pad_index[j + d + m]
        np.add.at(ab, (bw + j - col, col), float(_b_next(np.array([float(d)]))[0]))
    X = solve_banded((bw, bw), ab, np.eye(n), check_finite=False)  # A^-1, (n, n)
    # F (N x K): mean of the B-spline k over output pixel J, in input-pixel units u = n x
    a = np.arange(N, dtype=np.float64) * (n / N)
    b = np.arange(1, N + 1, dtype=np.float64) * (n / N)
    half = (ORDER + 1) / 2.0
    first = np.maximum(np.floor(a - half - 0.5).astype(np.int64), -m)  # centres k + 1/2 in reach
    last = np.minimum(np.ceil(b + half - 0.5).astype(np.int64), n - 1 + m)
    counts = last - first + 1
    rows = np.repeat(np.arange(N), counts)
    starts = np.cumsum(counts) - counts  # where each row's run begins
    cols = first[rows] + (np.arange(rows.size) - starts[rows])
    centre = cols + 0.5
    vals = (_antiderivative(b[rows] - centre) - _antiderivative(a[rows] - centre)) / (b[rows] - a[rows])
    F = sparse.csr_matrix((vals, (rows, pad_index[cols + m])), shape=(N, n))  # F E: duplicates add
    M = np.asarray(F @ X)  # (N, n), dense: A^-1 has no zeros, only decay
    M[np.abs(M) < CUTOFF * max(float(np.abs(M).max()), 1e-300)] = 0.0
    return sparse.csr_matrix(M)


def _reflect(k: np.ndarray, n: int) -> np.ndarray:
    """Indices k mirrored about the first and the last sample (period 2 (n - 1), SciPy's "mirror")."""
    if n == 1:
        return np.zeros_like(k)
    period = 2 * (n - 1)
    k = np.mod(k, period)
    return np.where(k > n - 1, period - k, k)


def _point_matrix(n: int, N: int) -> "scipy.sparse.csr_matrix":  # noqa: F821
    """The operator of one axis for point samples, n -> N (CSR, float64): the interpolating cubic
    B-spline of the samples (mirrored about the first and last), sample i at i / n and output J at
    J / N of [0, 1)."""
    from scipy import sparse
    from scipy.linalg import solve_banded

    if n == 1:
        return sparse.csr_matrix(np.ones((N, 1)))
    # (c_{i-1} + 4 c_i + c_{i+1}) / 6 = y_i with the coefficients mirrored as the samples are
    ab = np.zeros((3, n))
    ab[0, 1:] = 1.0 / 6.0
    ab[1, :] = 4.0 / 6.0
    ab[2, :-1] = 1.0 / 6.0
    ab[0, 1] = 2.0 / 6.0  # row 0: 4 c_0 + 2 c_1 (c_{-1} = c_1)
    ab[2, n - 2] = 2.0 / 6.0  # row n - 1: 2 c_{n-2} + 4 c_{n-1}
    X = solve_banded((1, 1), ab, np.eye(n), check_finite=False)  # (n, n)
    u = np.arange(N, dtype=np.float64) * (n / N)
    base = np.floor(u).astype(np.int64)
    rows, cols, vals = [], [], []
    for d in (-1, 0, 1, 2):
        k = base + d
        t = np.abs(u - k)
        w = np.where(t < 1, 2.0 / 3.0 - t**2 + t**3 / 2, np.where(t < 2, (2 - t) ** 3 / 6, 0.0))
        rows.append(np.arange(N))
        cols.append(_reflect(k, n))
        vals.append(w)
    E = sparse.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(N, n))
    M = np.asarray(E @ X)
    M[np.abs(M) < CUTOFF * max(float(np.abs(M).max()), 1e-300)] = 0.0
    return sparse.csr_matrix(M)


_CACHE: dict = {}
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 16


@_caches.register
def _forget_operators() -> None:
    with _CACHE_LOCK:
        _CACHE.clear()


def resample_matrix(n: int, N: int, dtype=np.float64, sampling: str = "area"):
    """The operator of one axis as a SciPy CSR matrix (N, n): ``resample`` applies it along each
    axis. Cached (the 16 most recent (n, N, dtype, sampling))."""
    n = _validate.positive_int("n", n)
    N = _validate.positive_int("N", N)
    sampling = _validate.choice("sampling", sampling, SAMPLINGS)
    dt = np.dtype(dtype)
    key = (n, N, dt.char, sampling)
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
    if hit is not None:
        return hit
    _validate.check_array_budget("n and N", (N, n + 2 * MARGIN), 8 * 3,
                                 f"an {N} x {n} resampling operator: resample in smaller steps")
    M = (_axis_matrix(n, N) if sampling == "area" else _point_matrix(n, N)).astype(dt)
    with _CACHE_LOCK:
        while len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = M
    return M


# ---- arguments ------------------------------------------------------------------------------


def _array_arg(array) -> np.ndarray:
    if _arrays.is_device(array):
        array = _arrays.to_host(array, "array")
    a = _validate.real_array("array", array)
    if a.ndim == 0:
        raise ValueError("array must have at least one axis, got a scalar")
    if a.size == 0:
        raise ValueError(f"array must not be empty, got shape {a.shape}")
    a = a.astype(np.float32 if a.dtype == np.float32 else np.float64, copy=False)
    _validate.finite("array", a)
    return a


def _ndim_arg(shape: Tuple[int, ...], ndim, given: Optional[int]) -> int:
    """D, the resampled (leading) axes: ``ndim``, else the length of scale/shape, else all axes but
    a last one of 1-4 entries (RGB/RGBA) on a 3-D+ array (``fit_grid``'s guess)."""
    if ndim is not None:
        D = _validate.positive_int("ndim", ndim)
        if D > len(shape):
            raise ValueError(f"ndim={D} but the array has only {len(shape)} axes (shape {shape})")
        if given is not None and given != D:
            raise ValueError(f"ndim={D} but {given} sizes or scales were given")
        return D
    if given is not None:
        if given > len(shape):
            raise ValueError(f"{given} sizes or scales were given but the array has only {len(shape)} axes "
                             f"(shape {shape})")
        return given
    return guess_ndim(shape)


def _sizes(name: str, value, what) -> Optional[list]:
    """value as a list (a single number is one entry per axis: None length)."""
    if isinstance(value, (numbers.Number, np.generic)) and not isinstance(value, bool):
        return None
    return _validate.sequence(name, value, what)


# ---- public ---------------------------------------------------------------------------------


def resample(array, shape: Sequence[int], ndim: Optional[int] = None, sampling: str = "area"):
    """Resample an image, a video, a volume or any N-D array to ``shape`` (area-consistent spline).

    Parameters
    ----------
    array : array, shape (n_1, ..., n_D, *channels)
        Any real values (NumPy, torch or CuPy; computed on the host). float32 stays float32,
        anything else becomes float64.
    shape : sequence of D positive ints
        The new sizes of the leading D axes (a size may be smaller: the pixel means of the
        fitted spline over the larger pixels, an anti-aliased shrink).
    ndim : int, optional
        D, if not ``len(shape)`` (must agree with it).
    sampling : "area" or "point"
        "area" (default): each input pixel is the mean over its area and so is each output pixel
        (module docstring). "point": input sample i of n is the value at i / n and output J of N
        the value at J / N (``img[::2, ::2]`` of an image, every k-th node of a field), through the
        interpolating cubic B-spline of the samples mirrored about the first and last (the model
        of ``scipy.ndimage.map_coordinates(order=3, mode="mirror")`` at those positions).

    Returns
    -------
    array, shape (*shape, *channels)
        The means of the fitted spline over the output pixels, or its values there for point
        samples; the same kind of array as the input (a torch tensor for a torch tensor). Values
        are not clipped.
    """
    sampling = _validate.choice("sampling", sampling, SAMPLINGS)
    a = _array_arg(array)
    sizes = _validate.sequence("shape", shape, "the new size of each resampled axis")
    if not sizes:
        raise ValueError("shape must hold at least one size")
    D = _ndim_arg(a.shape, ndim, len(sizes))
    sizes = [_validate.positive_int(f"shape[{i}]", s) for i, s in enumerate(sizes)]
    return _arrays.like(_apply(a, sizes, D, sampling), array)


def upsample(array, scale: Union[float, Sequence[float], None] = None, shape: Optional[Sequence[int]] = None,
             ndim: Optional[int] = None, sampling: str = "area"):
    """Upsample an image (H, W[, C]) or any N-D array by ``scale`` or to ``shape``.

    Exactly one of ``scale`` and ``shape``. The input's pixels are taken as means over their
    areas and the output's too (module docstring), so a box-downsampled image comes back aligned:
    ``upsample(box_mean_2x2(img), 2)`` averages back to its input exactly.

    Parameters
    ----------
    array : array, shape (n_1, ..., n_D, *channels)
    scale : float > 0 or sequence of D of them
        Output size ``round(n_i * scale_i)`` per axis (at least 1). A single number applies to
        every resampled axis: all axes but a last one of 1-4 entries (colour) on a 3-D+ array,
        unless ``ndim`` says otherwise.
    shape : sequence of D positive ints
        The output sizes instead.
    ndim : int, optional
        How many leading axes to resample (the rest are channels).
    sampling : "area" or "point"
        How the input was sampled (see ``resample``): ``upsample(img[::2, ::2], 2,
        sampling="point")`` puts every input sample back where it was taken.

    Returns
    -------
    array, shape (*new sizes, *channels): see ``resample``.
    """
    if (scale is None) == (shape is None):
        raise ValueError("give exactly one of scale or shape")
    sampling = _validate.choice("sampling", sampling, SAMPLINGS)
    if shape is not None:
        return resample(array, shape, ndim, sampling)
    a = _array_arg(array)
    scales = _sizes("scale", scale, "a positive number per resampled axis")
    D = _ndim_arg(a.shape, ndim, None if scales is None else len(scales))
    if scales is None:
        scales = [scale] * D
    if not scales:
        raise ValueError("scale must hold at least one number")
    new = []
    for i, s in enumerate(scales):
        s = _validate.positive_float("scale" if len(scales) == 1 else f"scale[{i}]", s)
        if not math.isfinite(s):
            raise ValueError(f"scale must be finite, got {s}")
        new.append(max(1, int(round(a.shape[i] * s))))
    return _arrays.like(_apply(a, new, D, sampling), array)


def _apply(a: np.ndarray, sizes: Sequence[int], D: int, sampling: str = "area") -> np.ndarray:
    """``a`` with its leading D axes resampled to ``sizes`` (C-contiguous, a's dtype)."""
    out_shape = tuple(sizes) + a.shape[D:]
    _validate.check_array_budget("shape", out_shape, 2 * a.dtype.itemsize,
                                 "the resampled array: ask for a smaller shape or scale")
    x = a
    for i in range(D):
        n, N = x.shape[i], sizes[i]
        if n == N:
            continue
        M = resample_matrix(n, N, a.dtype, sampling)
        moved = np.moveaxis(x, i, 0)
        flat = moved.reshape(n, -1)  # a copy when axis i is not leading
        y = np.asarray(M @ flat).reshape((N,) + moved.shape[1:])
        x = np.moveaxis(y, 0, i)
    return np.ascontiguousarray(x, dtype=a.dtype)
