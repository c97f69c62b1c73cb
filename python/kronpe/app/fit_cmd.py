"""``kronpe fit PATH | --sample NAME``: fit a real signal under the evaluation protocol, report
train and held-out PSNR and time, write pictures of the input and the fit."""
from __future__ import annotations

import time

import numpy as np

from .._adapters import validate as _validate
from ..bench.protocol import Case, check_stride, fmt as _fmt
from .files import load_for_fit, out_dir, save_model, write_pictures
from .output import Output


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
    signal, kind, stem = load_for_fit(args)
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

        out = out_dir(args)
        lo, hi = (0.0, 1.0) if kind in ("image", "video") else (float(signal.min()), float(signal.max()))
        files = write_pictures(out, stem, "input", signal, ndim, lo, hi)
        files += write_pictures(out, stem, "fit", pred.astype(np.float32), ndim, lo, hi)
        files += save_model(args, model)
        steps.next()
    report.wrote(files)
    return report.done()
