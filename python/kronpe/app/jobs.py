"""The everyday jobs of the command line (not evaluations): ``kronpe fill`` fills the missing
pixels of an image, ``kronpe grid`` fits scattered samples onto a grid.

- ``kronpe fill IMAGE --mask MASK.png``: the mask's non-zero (white) pixels are the ones to fill,
  as in OpenCV's inpainting masks; ``--missing FRACTION`` drops that fraction of the pixels at
  random instead (a demonstration: the PSNR on the dropped pixels is printed). The fit is
  ``kronpe.fit_grid(image, mask=observed)`` with its defaults; observed pixels are kept as they
  are. Writes ``<stem>_holes.png`` (missing pixels black) and ``<stem>_filled.png``.
- ``kronpe grid POINTS.npy|.csv --shape N_1 ... N_D``: rows of D coordinates then the values
  (one or more channels; a CSV may have one header line). Coordinates are kronpe's, in [0, 1]
  (grid sample i of N at i / N); when some lie outside, every axis is rescaled from the points'
  bounding box to [0, 1] (said in the output). The fit is ``kronpe.fit_points`` with its defaults,
  predicted at ``kronpe.data.grid_coords(shape)``. Writes ``<stem>_grid.npy`` and, in 2-D,
  ``<stem>_grid.png``.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from .. import data
from .._adapters import validate as _validate
from .fit_cmd import _load_for_fit, _write_pictures
from .protocol import random_mask


def _missing_mask(args, shape) -> np.ndarray:
    """(H, W) bool, True where a pixel is to be filled (from --mask or --missing)."""
    if (args.mask is None) == (args.missing is None):
        raise ValueError("give exactly one of --mask MASK or --missing FRACTION")
    if args.missing is not None:
        fraction = _validate.positive_float("--missing", args.missing)
        if fraction >= 1:
            raise ValueError(f"--missing must lie in (0, 1), got {fraction}")
        return ~random_mask(shape, 1.0 - fraction, args.seed)
    m = data.load_image(args.mask)
    m = m.max(axis=-1) if m.ndim == 3 else m
    if m.shape != tuple(shape):
        raise ValueError(f"--mask must have the image's size {tuple(shape)}, got {m.shape}")
    return m > 0.5


def run_fill(args) -> int:
    """``kronpe fill IMAGE|--sample NAME --mask MASK | --missing FRACTION``."""
    import kronpe

    img, kind, stem = _load_for_fit(args)
    if kind != "image":
        raise ValueError(f"fill needs an image (PNG/JPEG/TIFF), got a {kind}")
    shape = img.shape[:2]
    missing = _missing_mask(args, shape)
    observed = ~missing
    if not observed.any():
        raise ValueError("the mask marks every pixel as missing: nothing to fill from")
    keep = observed if img.ndim == 2 else observed[..., None]
    print(f"image: {stem}, {shape[1]} x {shape[0]}, {int(missing.sum())} of {missing.size} pixels to fill")
    t0 = time.perf_counter()
    model = kronpe.fit_grid(np.where(keep, img, np.nan), mask=observed)
    pred = np.clip(model.predict_grid(data.grid_coords(shape)), 0.0, 1.0).astype(np.float32)
    seconds = time.perf_counter() - t0
    filled = np.where(keep, img, pred)
    print(f"time: {seconds:.3f} s (fit + predict)")
    if args.missing is not None:
        print(f"PSNR on the dropped pixels: {data.psnr(img[missing], pred[missing]):.2f} dB")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    files = _write_pictures(out, stem, "holes", np.where(keep, img, 0.0), 2, 0.0, 1.0)
    files += _write_pictures(out, stem, "filled", filled, 2, 0.0, 1.0)
    print("wrote " + ", ".join(str(f) for f in files))
    return 0


def _load_points(path: str) -> np.ndarray:
    """(P, columns) float64 from a .npy array or a CSV file (one header line allowed)."""
    if str(path).lower().endswith(".npy"):
        arr = data.load_array(path)
    else:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"path does not exist: {str(p)!r}")
        try:
            arr = np.loadtxt(p, delimiter=",", ndmin=2)
        except ValueError:
            try:
                arr = np.loadtxt(p, delimiter=",", ndmin=2, skiprows=1)
            except ValueError as exc:
                raise ValueError(f"path could not be read as CSV numbers ({exc}): {str(p)!r}") from None
    if arr.ndim != 2:
        raise ValueError(f"the points must be a table (P, D + channels), got shape {arr.shape}")
    _validate.finite("the points", arr)
    return arr.astype(np.float64, copy=False)


def run_grid(args) -> int:
    """``kronpe grid POINTS --shape N_1 ... N_D``."""
    import kronpe

    shape = tuple(_validate.positive_int("--shape", n) for n in args.shape)
    table = _load_points(args.path)
    D = len(shape)
    if table.shape[1] <= D:
        raise ValueError(f"each row needs {D} coordinates (--shape has {D} axes) and at least one value, "
                         f"got {table.shape[1]} columns")
    pts, vals = table[:, :D], table[:, D:]
    lo, hi = pts.min(axis=0), pts.max(axis=0)
    if (lo < 0).any() or (hi > 1).any():
        pts = (pts - lo) / np.where(hi > lo, hi - lo, 1.0)
        print("coordinates outside [0, 1]: each axis rescaled from the points' bounding box")
    print(f"points: {pts.shape[0]} in {D}-D, {vals.shape[1]} value column(s); grid {shape}")
    t0 = time.perf_counter()
    model = kronpe.fit_points(pts, vals[:, 0] if vals.shape[1] == 1 else vals)
    grid = np.asarray(model.predict_grid(data.grid_coords(shape)))
    print(f"time: {time.perf_counter() - t0:.3f} s (fit + predict)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = Path(args.path).stem or "points"
    files = [out / f"{stem}_grid.npy"]
    np.save(files[0], grid)
    if D == 2:
        files += _write_pictures(out, stem, "grid", grid, 2, float(vals.min()), float(vals.max()))
    print("wrote " + ", ".join(str(f) for f in files))
    return 0
