"""The command line's files: the signal a command reads (``PATH`` or ``--sample``), the output
folder, the pictures it writes and the model it saves (``--save``)."""
from __future__ import annotations

from pathlib import Path
from typing import List, Tuple

import numpy as np

from .. import data


def out_dir(args) -> Path:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    return out


def save_model(args, model) -> List[Path]:
    """``--save PATH``: the fitted model to PATH (``model.save``); the file written, if any."""
    path = getattr(args, "save", None)
    if path is None:
        return []
    if not str(path).lower().endswith(".npz"):
        raise ValueError(f"--save must name a .npz file, got {path!r}")
    model.save(path)
    return [Path(path)]


def load_for_fit(args) -> Tuple[np.ndarray, str, str]:
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


def write_pictures(out: Path, stem: str, tag: str, x: np.ndarray, ndim: int, lo: float, hi: float) -> List[Path]:
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
