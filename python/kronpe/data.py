"""Real sample signals, loaders for user files, and PSNR.

Samples come from the natural photographs that scikit-image ships inside its wheel (a declared
dependency), so no download is ever needed:

- ``load_sample(name)`` returns one photograph as float32 in [0, 1], shape (H, W, 3) for colour
  photographs or (H, W) for grayscale ones, at its native size. ``size=S`` returns an S x S
  version: the central square of side min(H, W) is cut out and resized to S x S (anti-aliased
  when it shrinks, cubic interpolation either way). ``crop=True`` with ``size=S`` instead cuts the
  central S x S window at native resolution (no resampling; both sides must be >= S). The
  benchmarks and ``kronpe demo`` use ``size=512`` on photographs whose short side is at least
  500 pixels (astronaut, camera, immunohistochemistry: native 512 x 512; hubble_deep_field,
  retina: shrunk), so the held-out pixels are real pixels, not interpolated ones.
- ``load_video(name)`` builds a real video (T, H, W, 3) (or (T, H, W) with ``color=False``) from
  one photograph by a slow camera move: a square window pans across the photograph while
  zooming in, as a hand-held camera sweeping over a still scene would record it. See
  ``load_video`` for the exact path. The papers' video experiments (Table 3 of "Trading
  Positional Complexity vs. Deepness in Coordinate Networks", Zheng et al., ECCV 2022) use
  128 x 128 x 128 crops of real videos, trained on their 64^3 regular subsample; the default
  arguments give that shape.
- ``load_image(path)``, ``load_array(path)``, ``load_nifti(path)``, ``load_frames(folder)`` and
  ``load_file(path)`` read user files: PNG/JPEG/TIFF/BMP images, ``.npy`` arrays of any
  dimension, NIfTI volumes (with nibabel installed) and folders of frame images.
- ``psnr(a, b, peak=1.0)``: peak signal-to-noise ratio in dB.

Every bad argument raises ValueError naming the argument.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ._adapters import arrays as _arrays, validate as _validate

PathLike = Union[str, "os.PathLike[str]"]

#: name -> (scikit-image loader name, one-line description). Real photographs only (no
#: synthetic test patterns), each shipped inside the scikit-image wheel.
_SAMPLES: Dict[str, Tuple[str, str]] = {
    "astronaut": ("astronaut", "colour portrait of astronaut Eileen Collins, 512 x 512"),
    "camera": ("camera", "grayscale photograph of a man with a camera, 512 x 512"),
    "immunohistochemistry": ("immunohistochemistry", "colour microscopy of stained tissue, 512 x 512"),
    "hubble_deep_field": ("hubble_deep_field", "colour Hubble deep-field photograph, 872 x 1000"),
    "retina": ("retina", "colour fundus photograph of a human retina, 1411 x 1411"),
    "coffee": ("coffee", "colour photograph of a cup of coffee, 400 x 600"),
    "chelsea": ("chelsea", "colour photograph of Chelsea the cat, 300 x 451"),
    "rocket": ("rocket", "colour photograph of a rocket on its launch pad, 427 x 640"),
    "motorcycle": ("stereo_motorcycle", "colour photograph of a motorcycle (left stereo view), 500 x 741"),
    "moon": ("moon", "grayscale photograph of the lunar surface, 512 x 512"),
    "coins": ("coins", "grayscale photograph of Greek coins, 303 x 384"),
    "brick": ("brick", "grayscale photograph of a brick wall, 512 x 512"),
    "grass": ("grass", "grayscale photograph of grass, 512 x 512"),
    "gravel": ("gravel", "grayscale photograph of gravel, 512 x 512"),
    "clock": ("clock", "grayscale photograph of a wall clock in motion, 300 x 400"),
    "page": ("page", "grayscale scan of a book page, 191 x 384"),
}

#: The names ``load_sample`` accepts.
SAMPLES: Tuple[str, ...] = tuple(_SAMPLES)

#: The photographs ``kronpe demo`` and the benchmarks use at 512 x 512 (short side >= 512, so
#: that no pixel of the 512 x 512 version is an upsampled one).
DEMO_IMAGES: Tuple[str, ...] = ("astronaut", "camera", "immunohistochemistry", "hubble_deep_field")

#: The photograph ``load_video`` sweeps by default.
DEFAULT_VIDEO = "coffee"

_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".gif", ".webp")


def describe_samples() -> str:
    """One line per sample: ``name: description``."""
    return "\n".join(f"{name}: {desc}" for name, (_, desc) in _SAMPLES.items())


# ---- conversion --------------------------------------------------------------------------------


def to_unit_float(img: np.ndarray, name: str = "image") -> np.ndarray:
    """An image as float32 in [0, 1]: (H, W) stays grayscale, RGBA drops alpha, (H, W, 1) squeezes.

    Integer images are divided by the largest value of their type (uint8: 255, uint16: 65535),
    booleans become 0/1, float images must already lie in [0, 1].
    """
    arr = _validate.real_array(name, img)
    if arr.ndim == 3 and arr.shape[2] in (1, 2, 4):
        arr = arr[..., 0] if arr.shape[2] in (1, 2) else arr[..., :3]  # gray(+alpha) / RGBA
    if arr.ndim not in (2, 3) or (arr.ndim == 3 and arr.shape[2] != 3):
        raise ValueError(f"{name} must have shape (H, W) or (H, W, 3), got {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty, got shape {arr.shape}")
    if arr.dtype == bool:
        return arr.astype(np.float32)
    if arr.dtype.kind in "ui":
        info = np.iinfo(arr.dtype)
        if arr.min() < 0:
            raise ValueError(f"{name} has negative integer pixels; expected unsigned intensities")
        return (arr.astype(np.float64) / info.max).astype(np.float32)
    if arr.dtype.kind == "f":
        _validate.finite(name, arr)
        lo, hi = float(arr.min()), float(arr.max())
        if lo < 0 or hi > 1:
            raise ValueError(f"{name} is a float image with values in [{lo:g}, {hi:g}]; expected [0, 1]")
        return arr.astype(np.float32)
    raise ValueError(f"{name} must hold numbers, got dtype {arr.dtype}")


def _square(img: np.ndarray, size: int, crop: bool, name: str) -> np.ndarray:
    """Central square of ``img`` at ``size`` x ``size`` (see the module docstring)."""
    from skimage.transform import resize

    h, w = img.shape[:2]
    if crop:
        if h < size or w < size:
            raise ValueError(f"size must be <= the sample's sides {h} x {w} with crop=True, got {size}")
        top, left = (h - size) // 2, (w - size) // 2
        return np.ascontiguousarray(img[top : top + size, left : left + size])
    side = min(h, w)
    top, left = (h - side) // 2, (w - side) // 2
    sq = img[top : top + side, left : left + side]
    if side == size:
        return np.ascontiguousarray(sq)
    out = resize(sq, (size, size) + sq.shape[2:], order=3, mode="reflect", anti_aliasing=side > size)
    return np.clip(out, 0.0, 1.0).astype(np.float32)


# ---- bundled samples ---------------------------------------------------------------------------


def _sample_name(name) -> str:
    if not isinstance(name, str):
        raise TypeError(f"name must be one of {', '.join(SAMPLES)}; got {_validate.describe(name)}")
    if name not in _SAMPLES:
        raise ValueError(f"name must be one of {', '.join(SAMPLES)}; got {name!r}")
    return name


def load_sample(name: str, size: Optional[int] = None, crop: bool = False) -> np.ndarray:
    """A bundled real photograph as float32 in [0, 1].

    Parameters
    ----------
    name : str
        One of ``SAMPLES`` (``describe_samples()`` lists them with their native sizes).
    size : int, optional
        Return a ``size`` x ``size`` image: the central square, resized (default) or, with
        ``crop=True``, the central window at native resolution. None keeps the native size.
    crop : bool
        Cut instead of resizing (only with ``size``).

    Returns
    -------
    np.ndarray
        (H, W, 3) for colour photographs, (H, W) for grayscale ones; float32 in [0, 1].
    """
    import skimage.data

    name = _sample_name(name)
    if size is not None:
        size = _validate.positive_int("size", size)
        _validate.check_array_budget("size", (size, size, 3, 4), 8, "a size x size image: use a smaller size")
    elif crop:
        raise ValueError("crop=True needs size (the side of the central window)")
    raw = getattr(skimage.data, _SAMPLES[name][0])()
    if isinstance(raw, tuple):  # stereo_motorcycle returns (left, right, disparity)
        raw = raw[0]
    img = to_unit_float(raw, name=f"sample {name!r}")
    if size is not None:
        img = _square(img, size, crop, name)
    return img


def load_video(
    name: str = DEFAULT_VIDEO,
    frames: int = 128,
    size: int = 128,
    color: bool = True,
    pan: float = 0.3,
    zoom: float = 0.2,
) -> np.ndarray:
    """A real video built from a photograph by a slow pan and zoom.

    Frame t (t = 0..frames-1, u = t / (frames - 1)) shows the square window of side
    ``L * (0.75 - zoom * u)`` centred at ``(H / 2, W / 2 + pan * (u - 0.5) * W')``, where
    L = min(H, W) and W' = W - L * 0.75 is how far the window can travel sideways (``pan`` is the
    fraction of the photograph's width travelled, clipped to what fits). The photograph is first
    blurred with a Gaussian matched to the shrink factor (anti-aliasing), then sampled with
    bilinear interpolation at each output pixel. The default photograph (coffee, 400 x 600) gives
    a window of 300 -> 220 pixels shown at 128 x 128: about 0.6 output pixels of motion per frame,
    the speed of a slow hand-held pan.

    Parameters
    ----------
    name : str
        A sample of ``SAMPLES``.
    frames, size : int
        Number of frames T and side H = W of each frame.
    color : bool
        (T, H, W, 3) if True (grayscale photographs are repeated over 3 channels), else
        (T, H, W) (colour photographs converted with ITU-R 601 luma weights).
    pan, zoom : float
        Sideways travel (fraction of the photograph's width, >= 0) and window shrink (fraction of
        the short side, in [0, 0.7)).

    Returns
    -------
    np.ndarray
        float32 in [0, 1], shape (T, size, size, 3) or (T, size, size).
    """
    from scipy import ndimage

    frames = _validate.positive_int("frames", frames)
    size = _validate.positive_int("size", size)
    pan = _validate.nonnegative_float("pan", pan)
    zoom = _validate.nonnegative_float("zoom", zoom)
    _validate.check_array_budget("frames and size", (frames, size, size, 3, 2), 4,
                                 "the video: use fewer frames or a smaller size")
    if zoom >= 0.7:
        raise ValueError(f"zoom must lie in [0, 0.7), got {zoom}")
    img = load_sample(name)
    if img.ndim == 2:
        img = np.repeat(img[..., None], 3, axis=2)
    if not color:
        img = (img @ np.array([0.299, 0.587, 0.114], dtype=np.float32))[..., None]
    h, w = img.shape[:2]
    short = min(h, w)
    side0 = 0.75 * short
    shrink = side0 / size  # source pixels per output pixel at the start (largest)
    if shrink > 1:
        sigma = 0.5 * np.sqrt(shrink * shrink - 1.0)  # the usual anti-aliasing width
        img = ndimage.gaussian_filter(img, sigma=(sigma, sigma, 0), mode="reflect")
    travel = min(pan * w, max(w - side0, 0.0))
    u = np.linspace(0.0, 1.0, frames) if frames > 1 else np.zeros(1)
    grid = (np.arange(size) + 0.5) / size - 0.5  # output pixel centres, in window units
    out = np.empty((frames, size, size, img.shape[2]), dtype=np.float32)
    for t, ut in enumerate(u):
        side = short * (0.75 - zoom * ut)
        cy, cx = h / 2.0, w / 2.0 + travel * (ut - 0.5)
        rows = cy + side * grid - 0.5  # pixel centres are at integer + 0.5 in area units
        cols = cx + side * grid - 0.5
        rr, cc = np.meshgrid(rows, cols, indexing="ij")
        for c in range(img.shape[2]):
            out[t, :, :, c] = ndimage.map_coordinates(img[..., c], [rr, cc], order=1, mode="nearest")
    np.clip(out, 0.0, 1.0, out=out)
    return out if color else out[..., 0]


# ---- user files --------------------------------------------------------------------------------


def _existing(name: str, path) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a file path, got {_validate.describe(path)}")
    p = Path(path)
    if not p.exists():
        raise ValueError(f"{name} does not exist: {str(p)!r}")
    return p


def load_image(path: PathLike) -> np.ndarray:
    """Read a PNG/JPEG/TIFF/BMP image as float32 in [0, 1], (H, W) or (H, W, 3) (alpha dropped)."""
    import imageio.v3 as iio

    p = _existing("path", path)
    if not p.is_file():
        raise ValueError(f"path must be an image file, got a folder: {str(p)!r}")
    try:
        with warnings.catch_warnings():  # imageio's plugin probing warns about legacy plugins
            warnings.simplefilter("ignore", DeprecationWarning)
            raw = iio.imread(p)
    except Exception as exc:  # imageio raises many kinds; all mean "not an image we can read"
        raise ValueError(f"path could not be read as an image ({exc}): {str(p)!r}") from None
    if raw.ndim == 4:  # an animated image: first frame
        raw = raw[0]
    return to_unit_float(raw, name=f"image {p.name!r}")


def load_array(path: PathLike) -> np.ndarray:
    """Read a ``.npy`` array of any dimension as float32/float64 (values kept as they are).

    Integer and boolean arrays become float64; NaN/Inf, object and complex arrays are refused.
    """
    p = _existing("path", path)
    try:
        arr = np.load(p, allow_pickle=False)
    except Exception as exc:
        raise ValueError(f"path could not be read as a .npy array ({exc}): {str(p)!r}") from None
    if not isinstance(arr, np.ndarray):
        raise ValueError(f"path must hold a single .npy array, got {type(arr).__name__}: {str(p)!r}")
    if arr.size == 0 or arr.ndim == 0:
        raise ValueError(f"array in {p.name!r} must have at least one non-empty axis, got shape {arr.shape}")
    dt = _validate.float_dtype(f"array in {p.name!r}", arr)
    arr = arr.astype(dt, copy=False)
    _validate.finite(f"array in {p.name!r}", arr)
    return arr


def load_nifti(path: PathLike) -> np.ndarray:
    """Read a NIfTI volume (``.nii`` / ``.nii.gz``, through nibabel: ``pip install nibabel``) as a
    float array of its voxel values (scaling applied), axes as stored."""
    p = _existing("path", path)
    try:
        import nibabel
    except ImportError:
        raise ValueError(f"reading NIfTI files needs nibabel (pip install nibabel): {str(p)!r}") from None
    try:
        arr = np.asarray(nibabel.load(str(p)).get_fdata(dtype=np.float64))
    except Exception as exc:  # nibabel raises many kinds; all mean "not a volume we can read"
        raise ValueError(f"path could not be read as a NIfTI volume ({exc}): {str(p)!r}") from None
    if arr.size == 0:
        raise ValueError(f"NIfTI volume {p.name!r} is empty (shape {arr.shape})")
    _validate.finite(f"NIfTI volume {p.name!r}", arr)
    return arr


def load_frames(folder: PathLike) -> np.ndarray:
    """Read a folder of frame images (sorted by name) as a video (T, H, W[, 3]) in [0, 1]."""
    p = _existing("folder", folder)
    if not p.is_dir():
        raise ValueError(f"folder must be a directory of frame images, got {str(p)!r}")
    files = sorted(f for f in p.iterdir() if f.suffix.lower() in _IMAGE_SUFFIXES)
    if not files:
        raise ValueError(f"folder holds no images ({', '.join(_IMAGE_SUFFIXES)}): {str(p)!r}")
    frames = [load_image(f) for f in files]
    if any(f.shape != frames[0].shape for f in frames):
        shapes = sorted({f.shape for f in frames})
        raise ValueError(f"folder's frames must share one shape, found {shapes}")
    return np.stack(frames)


def load_file(path: PathLike) -> Tuple[np.ndarray, str]:
    """Read an image, a ``.npy`` array or a folder of frames.

    Returns
    -------
    (np.ndarray, str)
        The data and its kind: ``"image"`` ((H, W) or (H, W, 3) in [0, 1]), ``"array"`` (any
        shape, values as stored) or ``"video"`` ((T, H, W[, 3]) in [0, 1]).
    """
    p = _existing("path", path)
    if p.is_dir():
        return load_frames(p), "video"
    suffix = p.suffix.lower()
    if suffix == ".npy":
        return load_array(p), "array"
    if p.name.lower().endswith((".nii", ".nii.gz")):
        return load_nifti(p), "array"
    if suffix in _IMAGE_SUFFIXES:
        return load_image(p), "image"
    raise ValueError(
        f"path must be an image ({', '.join(_IMAGE_SUFFIXES)}), a .npy array, a NIfTI volume (.nii, "
        f".nii.gz) or a folder of frames, got {str(p)!r}"
    )


# ---- quality -----------------------------------------------------------------------------------


def psnr(a, b, peak: float = 1.0) -> float:
    """Peak signal-to-noise ratio 10 log10(peak^2 / mean((a - b)^2)) in dB (inf when equal).

    Parameters
    ----------
    a, b : arrays (NumPy, torch on any device, CuPy)
        Same shape, finite, not empty.
    peak : float
        The largest possible value (1 for images in [0, 1]).
    """
    peak = _validate.positive_float("peak", peak)
    a = _arrays.to_host(a, "a") if _arrays.is_device(a) else _validate.real_array("a", a)
    b = _arrays.to_host(b, "b") if _arrays.is_device(b) else _validate.real_array("b", b)
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape, got {a.shape} and {b.shape}")
    if a.size == 0:
        raise ValueError("a and b must not be empty")
    for nm, arr in (("a", a), ("b", b)):
        _validate.real_dtype(nm, arr.dtype)
        _validate.finite(nm, arr)
    diff = a.astype(np.float64) - b.astype(np.float64)
    return psnr_of_mse(float(np.mean(diff * diff)), peak)


def psnr_of_mse(mse: float, peak: float = 1.0) -> float:
    """10 log10(peak^2 / mse) in dB (inf when mse is 0): the one PSNR formula of kronpe."""
    return float("inf") if mse <= 0.0 else float(10.0 * np.log10(peak * peak / mse))


# ---- coordinates ---------------------------------------------------------------------------------


def grid_coords(shape: Sequence[int]) -> List[np.ndarray]:
    """The papers' sample coordinates per axis, ``linspace(0, 1, N + 1)[:-1]`` (as i / N, float64):
    the default coordinates of every grid fit and of the evaluation protocol."""
    return [np.arange(int(n), dtype=np.float64) / int(n) for n in shape]


__all__ = [
    "SAMPLES",
    "DEMO_IMAGES",
    "DEFAULT_VIDEO",
    "describe_samples",
    "load_sample",
    "load_video",
    "load_image",
    "load_array",
    "load_frames",
    "load_nifti",
    "load_file",
    "psnr",
    "psnr_of_mse",
    "grid_coords",
    "to_unit_float",
]
