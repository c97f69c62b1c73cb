"""The everyday jobs of the command line (not evaluations): ``kronpe fill`` fills the missing
pixels of an image, ``kronpe grid`` fits scattered samples onto a grid, ``kronpe upsample`` /
``resample`` resample an image or an N-D array (``kronpe.upsample`` / ``kronpe.resample``), and
``kronpe predict`` evaluates a saved model (``kronpe.load``) on a grid.

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
  ``<stem>_grid.png``; ``--save MODEL.npz`` keeps the fitted model.
- ``kronpe upsample IMAGE --scale S | --size W H`` writes ``<stem>_upsample.png`` (an image) or
  ``<stem>_upsample.npy`` (a ``.npy`` / NIfTI array: every axis but a last one of 1-4 entries is
  scaled); ``kronpe resample ARRAY --shape N_1 ... N_D`` resamples the leading D axes and writes
  ``<stem>_resample.npy`` (images: ``.png``). Pixels are means over their areas (kronpe.resampling).
- ``kronpe predict MODEL.npz --shape N_1 ... N_D`` writes ``<stem>_predict.npy`` (and a picture in
  2-D) of the model at ``kronpe.data.grid_coords(shape)``.

Every command takes ``--json`` (one JSON object on stdout: the numbers and the files written).
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from .. import data
from .._adapters import validate as _validate
from .._shared import guess_ndim
from ..bench.protocol import random_mask
from .files import load_for_fit, out_dir, save_model, write_pictures
from .output import Output


def _shape_arg(sizes, name: str = "--shape"):
    return tuple(_validate.positive_int(name, n) for n in sizes)


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

    report = Output(args, "fill")
    img, kind, stem = load_for_fit(args)
    if kind != "image":
        raise ValueError(f"fill needs an image (PNG/JPEG/TIFF), got a {kind}")
    shape = img.shape[:2]
    missing = _missing_mask(args, shape)
    observed = ~missing
    if not observed.any():
        raise ValueError("the mask marks every pixel as missing: nothing to fill from")
    keep = observed if img.ndim == 2 else observed[..., None]
    report.say(f"image: {stem}, {shape[1]} x {shape[0]}, {int(missing.sum())} of {missing.size} pixels to fill")
    report.put(image=stem, shape=shape, missing=int(missing.sum()))
    with report.steps(["fit", "predict", "write"]) as steps:
        t0 = time.perf_counter()
        model = kronpe.fit_grid(img, mask=observed)  # the missing pixels' values are ignored
        steps.next()
        pred = np.clip(model.predict_grid(data.grid_coords(shape)), 0.0, 1.0).astype(np.float32)
        seconds = time.perf_counter() - t0
        steps.next()
        filled = np.where(keep, img, pred)
        _say_model(report, model)
        report.say(f"time: {seconds:.3f} s (fit + predict)")
        report.put(seconds=seconds)
        if args.missing is not None:
            dropped = data.psnr(img[missing], pred[missing])
            report.say(f"PSNR on the dropped pixels: {dropped:.2f} dB")
            report.put(psnr_dropped_db=dropped)
        out = out_dir(args)
        files = write_pictures(out, stem, "holes", np.where(keep, img, 0.0), 2, 0.0, 1.0)
        files += write_pictures(out, stem, "filled", filled, 2, 0.0, 1.0)
        steps.next()
    report.wrote(files)
    return report.done()


def _say_model(report: Output, model) -> None:
    """The default fit's model: its penalty (with the held-out boundary / axis weights) and lambda."""
    penalty = model.info.get("penalty", "the identity (ridge)")
    lead = model.info.get("lead_penalty")
    report.say(f"model: {penalty}, lambda {model.ridge:.3g} (held out)"
               + (f"; leading component: {lead} (held out)" if lead else ""))
    report.put(penalty=penalty, ridge=float(model.ridge), lead_penalty=lead)


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

    report = Output(args, "grid")
    if (args.shape is None) == (getattr(args, "spacing", None) is None):
        raise ValueError("grid needs exactly one of --shape (nodes per axis, coordinates in [0, 1]) and "
                         "--spacing (node spacing in the points' own units)")
    if args.spacing is not None:
        return _run_field_grid(args, report)
    if args.region is not None or args.maxdist is not None:
        raise ValueError("--region and --maxdist go with --spacing")
    shape = _shape_arg(args.shape)
    table = _load_points(args.path)
    D = len(shape)
    if table.shape[1] <= D:
        raise ValueError(f"each row needs {D} coordinates (--shape has {D} axes) and at least one value, "
                         f"got {table.shape[1]} columns")
    pts, vals = table[:, :D], table[:, D:]
    lo, hi = _validate.column_range(pts)
    if (lo < 0).any() or (hi > 1).any():
        pts = (pts - lo) / np.where(hi > lo, hi - lo, 1.0)
        report.say("coordinates outside [0, 1]: each axis rescaled from the points' bounding box")
        report.put(rescaled=True)
    report.say(f"points: {pts.shape[0]} in {D}-D, {vals.shape[1]} value column(s); grid {shape}")
    report.put(points=pts.shape[0], value_columns=vals.shape[1], shape=shape)
    with report.steps(["fit", "predict", "write"]) as steps:
        t0 = time.perf_counter()
        model = kronpe.fit_points(pts, vals[:, 0] if vals.shape[1] == 1 else vals)
        steps.next()
        grid = np.asarray(model.predict_grid(data.grid_coords(shape)))
        seconds = time.perf_counter() - t0
        steps.next()
        _say_model(report, model)
        report.say(f"time: {seconds:.3f} s (fit + predict)")
        report.put(seconds=seconds)
        out = out_dir(args)
        stem = Path(args.path).stem or "points"
        files = [out / f"{stem}_grid.npy"]
        np.save(files[0], grid)
        if D == 2:
            files += write_pictures(out, stem, "grid", grid, 2, float(vals.min()), float(vals.max()))
        files += save_model(args, model)
        steps.next()
    report.wrote(files)
    return report.done()


def _run_field_grid(args, report: Output) -> int:
    """``kronpe grid POINTS --spacing H [--region ...] [--maxdist D]``: kronpe.grid in the points' units
    (one spacing: 2-D points, unless --region names the axes)."""
    table = _load_points(args.path)
    D = len(args.spacing) if len(args.spacing) > 1 else (len(args.region) // 2 if args.region else 2)
    if table.shape[1] <= D:
        raise ValueError(f"each row needs {D} coordinates and at least one value, got {table.shape[1]} columns")
    pts, vals = table[:, :D], table[:, D:]
    spacing = args.spacing[0] if len(args.spacing) == 1 else args.spacing
    report.say(f"points: {pts.shape[0]} in {D}-D, {vals.shape[1]} value column(s); spacing {args.spacing}")
    report.put(points=pts.shape[0], value_columns=vals.shape[1], spacing=list(args.spacing))
    t0 = time.perf_counter()
    from ..gridding import gridded

    grid, coords, model = gridded(pts, vals[:, 0] if vals.shape[1] == 1 else vals, spacing=spacing,
                                  region=args.region, maxdist=args.maxdist)
    seconds = time.perf_counter() - t0
    report.say(f"grid: {list(grid.shape)}, time {seconds:.3f} s (fit + grid)")
    report.put(seconds=seconds, shape=list(grid.shape), coords_lo=[float(c[0]) for c in coords],
               coords_hi=[float(c[-1]) for c in coords])
    out = out_dir(args)
    stem = Path(args.path).stem or "points"
    files = [out / f"{stem}_grid.npy"]
    np.save(files[0], grid)
    files += save_model(args, model)
    report.wrote(files)
    return report.done()


# ---- upsample, resample, predict -------------------------------------------------------------------


def _write_result(out: Path, stem: str, tag: str, result: np.ndarray, kind: str, D: int) -> list:
    """An image as PNG (clipped to [0, 1]); any other array as .npy (plus a picture in 2-D)."""
    if kind == "image":
        return write_pictures(out, stem, tag, result.astype(np.float32), 2, 0.0, 1.0)
    path = out / f"{stem}_{tag}.npy"
    np.save(path, result)
    files = [path]
    if D == 2:
        files += write_pictures(out, stem, tag, result, 2, float(result.min()), float(result.max()))
    return files


def _resample_job(args, command: str, shape_of) -> int:
    """Read PATH, resample to ``shape_of(array, kind)`` (D sizes), write the result."""
    import kronpe

    report = Output(args, command)
    arr, kind = data.load_file(args.path)
    stem = Path(args.path).name.split(".")[0] or "signal"
    shape = shape_of(arr, kind)
    D = len(shape)
    if D > arr.ndim:
        raise ValueError(f"{len(shape)} sizes given but {args.path!r} has only {arr.ndim} axes (shape {arr.shape})")
    report.say(f"{kind}: {stem}, shape {arr.shape} -> {tuple(shape) + arr.shape[D:]}")
    report.put(input=str(args.path), kind=kind, input_shape=arr.shape, shape=tuple(shape) + arr.shape[D:],
               sampling=getattr(args, "sampling", "area"))
    with report.steps(["resample", "write"]) as steps:
        t0 = time.perf_counter()
        result = kronpe.resample(arr, shape, sampling=getattr(args, "sampling", "area"))
        seconds = time.perf_counter() - t0
        steps.next()
        report.say(f"time: {seconds:.3f} s")
        report.put(seconds=seconds)
        files = _write_result(out_dir(args), stem, command, result, kind, D)
        steps.next()
    report.wrote(files)
    return report.done()


def run_upsample(args) -> int:
    """``kronpe upsample IMAGE|ARRAY --scale S | --size W H``: kronpe.upsample, PNG out (arrays: .npy)."""
    if (args.scale is None) == (args.size is None):
        raise ValueError("give exactly one of --scale S or --size W H")

    def shape_of(arr, kind):
        D = guess_ndim(arr.shape)  # images: 2; arrays: all axes but a last one of 1-4 entries
        if args.size is not None:
            if kind != "image":
                raise ValueError("--size W H applies to images; use --scale, or kronpe resample --shape for arrays")
            w, h = _shape_arg(args.size, "--size")
            return (h, w)
        scale = _validate.positive_float("--scale", args.scale)
        if not np.isfinite(scale):
            raise ValueError(f"--scale must be a finite positive number, got {args.scale}")
        return tuple(max(1, int(round(n * scale))) for n in arr.shape[:D])

    return _resample_job(args, "upsample", shape_of)


def run_resample(args) -> int:
    """``kronpe resample ARRAY --shape N_1 ... N_D``: kronpe.resample of the leading D axes, .npy out."""
    return _resample_job(args, "resample", lambda arr, kind: _shape_arg(args.shape))


def run_predict(args) -> int:
    """``kronpe predict MODEL.npz --shape N_1 ... N_D``: a saved model on a grid, .npy (and PNG in 2-D)."""
    import kronpe

    report = Output(args, "predict")
    model = kronpe.load(args.model)
    shape = _shape_arg(args.shape)
    if len(shape) != model.ndim:
        raise ValueError(f"--shape must give {model.ndim} sizes (the model's axes), got {len(shape)}")
    kind = type(model).__name__
    report.say(f"model: {args.model} ({kind}, {model.ndim}-D, channels {tuple(model.channels)}); grid {shape}")
    report.put(model=str(args.model), model_kind=kind, shape=shape)
    with report.steps(["predict", "write"]) as steps:
        t0 = time.perf_counter()
        if isinstance(model, kronpe.SplineModel):  # its own box, in the units it was fitted in
            coords = [np.linspace(lo, hi, n) for lo, hi, n in zip(model.lo, model.hi, shape)]
        else:
            coords = data.grid_coords(shape)
        grid = np.asarray(model.predict_grid(coords))
        seconds = time.perf_counter() - t0
        steps.next()
        report.say(f"time: {seconds:.3f} s")
        report.put(seconds=seconds)
        stem = Path(args.model).name.split(".")[0] or "model"
        files = _write_result(out_dir(args), stem, "predict", grid, "array", len(shape))
        steps.next()
    report.wrote(files)
    return report.done()
