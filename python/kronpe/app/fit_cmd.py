"""``kronpe fit PATH | --sample NAME``: fit a real signal under the evaluation protocol, report
train and held-out PSNR and time, write pictures of the input and the fit."""
from __future__ import annotations

import time
from pathlib import Path
from typing import List, Tuple

import numpy as np

from .. import data
from .._adapters import validate as _validate
from .output import Output
from .protocol import Case, check_stride, fmt as _fmt


def _out_dir(args) -> Path:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    return out


def _save_model(args, model) -> List[Path]:
    """``--save PATH``: the fitted model to PATH (``model.save``); the file written, if any."""
    path = getattr(args, "save", None)
    if path is None:
        return []
    if not str(path).lower().endswith(".npz"):
        raise ValueError(f"--save must name a .npz file, got {path!r}")
    model.save(path)
    return [Path(path)]

def _resolve_layout(arr: np.ndarray, kind: str, channels: str) -> int:
    """D (the number of sampled axes) of a loaded signal; the rest are channels."""
    if kind == "image":
        return 2
    if kind == "video":
        return 3
    if channels == "none":
        return arr.ndim
    if channels == "last":
        if arr.ndim < 2:
            raise ValueError(f"--channels last needs an array of at least 2 axes, got shape {arr.shape}")
        return arr.ndim - 1
    # auto: a short last axis (<= 4) of an array with >= 3 axes holds channels (RGB, RGBA, ...)
    return arr.ndim - 1 if arr.ndim >= 3 and arr.shape[-1] <= 4 else arr.ndim


def _load_for_fit(args) -> Tuple[np.ndarray, str, str]:
    """(signal, kind, stem) from ``PATH`` or ``--sample``."""
    path, sample = getattr(args, "path", None), getattr(args, "sample", None)
    if (path is None) == (sample is None):
        raise ValueError("give exactly one of PATH or --sample NAME")
    size, crop = getattr(args, "size", None), bool(getattr(args, "crop", False))
    if sample is not None:
        return data.load_sample(sample, size=size, crop=crop), "image", sample
    if size is not None or crop:
        raise ValueError("--size and --crop apply to --sample only")
    arr, kind = data.load_file(path)
    return arr, kind, Path(path).stem or "signal"


def _display(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """uint8 picture of ``x`` mapped from [lo, hi] (clipped)."""
    scale = 1.0 / (hi - lo) if hi > lo else 1.0
    return (np.clip((x - lo) * scale, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def _views(x: np.ndarray, ndim: int) -> List[Tuple[str, np.ndarray]]:
    """2-D pictures of a D-dimensional signal: itself (D = 2), frames (D = 3), central slices."""
    if x.ndim > ndim:
        x = x.reshape(x.shape[:ndim] + (-1,))
        if x.shape[-1] != 3 or ndim == 1:  # not an RGB colour: show the first channel
            x = x[..., 0]
    if ndim <= 2:
        return [("", x)]
    lead = x.shape[: ndim - 2]
    central = tuple(n // 2 for n in lead[1:])
    picks = sorted({0, lead[0] // 2, lead[0] - 1})
    return [(f"_t{t:03d}", x[(t,) + central]) for t in picks]


def _write_pictures(out: Path, stem: str, tag: str, x: np.ndarray, ndim: int, lo: float, hi: float) -> List[Path]:
    import imageio.v3 as iio

    written = []
    for suffix, view in _views(x, ndim):
        p = out / f"{stem}_{tag}{suffix}.png"
        if ndim == 1:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            fig, ax = plt.subplots(figsize=(6, 3))
            ax.plot(view.reshape(view.shape[0], -1))
            ax.set_title(f"{stem}: {tag}")
            fig.savefig(p, dpi=100)
            plt.close(fig)
        else:
            iio.imwrite(p, _display(view, lo, hi))
        written.append(p)
    return written

def fit_case(case: Case):
    """Fit a case with kronpe's own choice (fit_grid on a regular subsample, fit_points on a
    random one); (model, prediction on the full grid, fit s, predict s)."""
    import kronpe

    t0 = time.perf_counter()
    if case.scattered:
        model = kronpe.fit_points(case.points, case.values, None)
    else:
        model = kronpe.fit_grid(case.train, None, coords=case.train_coords)
    t1 = time.perf_counter()
    pred = np.asarray(model.predict_grid(case.coords)).reshape(case.full.shape)
    t2 = time.perf_counter()
    return model, pred, t1 - t0, t2 - t1


def run_fit(args) -> int:
    """``kronpe fit PATH | --sample NAME``: fit, print PSNR and time, write PNGs into ``--out``."""
    signal, kind, stem = _load_for_fit(args)
    ndim = _resolve_layout(signal, kind, getattr(args, "channels", "auto") or "auto")
    stride = check_stride(signal.shape[:ndim], args.stride)
    fraction = getattr(args, "random", None)
    peak = getattr(args, "peak", None)
    if peak is None:
        peak = 1.0 if kind in ("image", "video") else float(signal.max() - signal.min()) or 1.0
    peak = _validate.positive_float("peak", peak)

    report = Output(args, "fit")
    channels = signal.shape[ndim:]
    report.say(f"signal: {stem} ({kind}), shape {signal.shape}: {ndim} sampled {'axis' if ndim == 1 else 'axes'}"
               + (f", channels {channels}" if channels else ""))
    report.put(signal=stem, kind=kind, shape=signal.shape, ndim=ndim)
    case = Case(stem, signal, ndim, stride, peak, fraction=fraction, seed=getattr(args, "seed", 0))
    total = int(np.prod(signal.shape[:ndim]))
    if case.scattered:
        report.say(f"training: a random {fraction:g} of the samples (--random, seed {case.seed}), "
                   f"{int(case.mask.sum())} of {total} samples")
        report.put(training=int(case.mask.sum()))
    else:
        n_train = int(np.prod([-(-n // stride) for n in signal.shape[:ndim]]))
        report.say(f"training: one sample in {stride} per axis (--stride), {n_train} of {total} samples")
        report.put(training=n_train)

    with report.steps(["fit and predict", "write"]) as steps:
        model, pred, fit_s, pred_s = fit_case(case)
        steps.next()
        tr, ho = case.score(pred)
        embs = getattr(model, "embedders", None)
        if embs and all(e is None for e in embs):  # the smooth default: values on a grid
            info0 = getattr(model, "info", {}) or {}
            report.say(f"model: values on a {'x'.join(str(n) for n in model.weights.shape[:len(embs)])} grid "
                       f"({info0.get('grid', 'grid')}), penalty {info0.get('penalty', '')}, "
                       f"{info0.get('preconditioner', '')}")
        elif embs:
            report.say("embedders: " + ", ".join(repr(e) for e in embs))
        report.say(f"ridge: {float(model.ridge):.4g}")
        report.put(embedders=[repr(e) for e in embs or []], ridge=float(model.ridge))
        info = getattr(model, "info", None)
        if info and "iterations" in info:
            measure = "error estimate" if "error estimate" in str(info.get("stopping", "")) else "relative residual"
            report.say(f"solver: {info['iterations']} iterations, {measure} "
                       f"{float(info.get('residual', float('nan'))):.2e}"
                       + ("" if info.get("converged", True) else " (NOT converged)"))
            report.put(iterations=info["iterations"], converged=bool(info.get("converged", True)))
        report.say(f"train PSNR: {tr:.2f} dB   held-out PSNR: {_fmt(ho, 2)} dB   (peak {peak:g})")
        report.say(f"time: fit {fit_s:.3f} s, predict {pred_s:.3f} s")
        report.put(train_psnr_db=tr, heldout_psnr_db=ho, peak=peak, fit_seconds=fit_s, predict_seconds=pred_s)

        out = _out_dir(args)
        lo, hi = (0.0, 1.0) if kind in ("image", "video") else (float(signal.min()), float(signal.max()))
        files = _write_pictures(out, stem, "input", signal, ndim, lo, hi)
        files += _write_pictures(out, stem, "fit", pred.astype(np.float32), ndim, lo, hi)
        files += _save_model(args, model)
        steps.next()
    report.wrote(files)
    return report.done()
