"""``kronpe fit`` and ``kronpe demo``: fit real signals and report PSNR and time.

Both commands use the papers' evaluation protocol (seed 000 sec. 6): a signal of shape
(N_1, ..., N_D[, C]) sampled at coordinates x_i = linspace(0, 1, N_i + 1)[:-1] is trained on its
regular subsample (every s-th sample per axis, channels untouched) and judged on the samples that
were left out ("held-out" PSNR; "train" PSNR is measured on the training samples).

``kronpe demo`` prints one table over several bundled photographs (512 x 512 from 256 x 256) and
a 128^3 video (from its 64^3 subsample). Its rows are the functions listed in ``DEMO_ROWS``; a
row takes a ``Case`` and returns a ``RowResult`` (or None when it does not apply to the case).
Later work adds rows (scattered points, gradient descent) by appending to ``DEMO_ROWS``.
"""
from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import _validate, data

# ---- the evaluation protocol (shared by fit, demo and the benchmarks) ---------------------------


def grid_coords(shape: Sequence[int]) -> List[np.ndarray]:
    """The papers' sample coordinates per axis: linspace(0, 1, N + 1)[:-1] (float64)."""
    return [np.arange(n, dtype=np.float64) / n for n in shape]


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
    from .data import psnr

    held = ~mask
    return psnr(full[mask], pred[mask], peak), (psnr(full[held], pred[held], peak) if held.any() else float("nan"))


def split_psnr(
    truth: np.ndarray, pred: np.ndarray, ndim: int, stride: int, peak: float = 1.0
) -> Tuple[float, float]:
    """(train PSNR, held-out PSNR) of ``pred`` against ``truth`` (NaN when nothing is held out)."""
    if pred.shape != truth.shape:
        raise ValueError(f"pred must have the signal's shape {truth.shape}, got {pred.shape}")
    mask = heldout_mask(truth.shape[:ndim], stride)
    train = data.psnr(subsample(truth, ndim, stride), subsample(pred, ndim, stride), peak)
    held = data.psnr(truth[mask], pred[mask], peak) if mask.any() else float("nan")
    return train, held


# ---- the papers' closed-form settings (seed 000, Tables 1 and 3; official scripts) ---------------

#: The papers' closed-form settings. 2-D: ``2D_separable_points.py`` of the official code, section
#: "Closed Form Complex Encoding" (K = 256 per axis for a 256 x 256 training grid). 3-D:
#: ``3D_separable_points_GD.py``: K = 64 per axis for a 64^3 training grid; its closed-form loop
#: iterates over the list of the gradient-descent section (it zips ``encoding_methods, params``,
#: which that section assigned last), so Table 3's closed-form numbers come from these values,
#: not from the list declared just above the loop (LinF 4, Gau 0.009, Tri 3/64): we use the ones
#: that ran. Gau is the Gaussian's sigma, Tri the triangle's half-width d, LinF/LogF the exponent
#: of the largest frequency 2^sigma, RFF the standard deviation of the random frequencies; the
#: Fourier families use K/2 frequencies (cos and sin).
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
    from . import embedders as E

    if family == "Gau":
        return E.Gaussian(K, param)
    if family == "Tri":
        return E.Triangle(K, param)
    cls = {"LinF": "LinearFourier", "LogF": "LogFourier", "RFF": "RandomFourier"}[family]
    cls = getattr(E, cls, None)
    return None if cls is None else cls(K, param)


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


@dataclass
class RowResult:
    """What a row produced for one case: the prediction on the full grid and its times."""

    pred: np.ndarray  # the full grid's shape
    fit_s: float  # time to fit (for interpolation: time to prepare, e.g. the spline prefilter)
    total_s: float  # fit + evaluation on the full grid
    note: str = ""


@dataclass(frozen=True)
class DemoRow:
    """A method of the demo table: ``run(case) -> RowResult`` or None (does not apply)."""

    label: str
    run: Callable[[Case], Optional[RowResult]]
    quick: bool = True  # part of ``kronpe demo --quick``


def _timed_fit(fit: Callable[[], object], case: Case) -> RowResult:
    t0 = time.perf_counter()
    model = fit()
    t1 = time.perf_counter()
    pred = np.asarray(model.predict_grid(case.coords))
    t2 = time.perf_counter()
    return RowResult(pred.reshape(case.full.shape), t1 - t0, t2 - t0, note=_model_note(model))


def _model_note(model) -> str:
    ridge = getattr(model, "ridge", None)
    return "" if ridge is None else f"ridge={float(ridge):.3g}"


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


def paper_row(family: str) -> Callable[[Case], Optional[RowResult]]:
    """Row: the papers' closed form (pseudo-inverse, ridge 0, centres k/K) with ``family``."""

    def run(case: Case) -> Optional[RowResult]:
        import kronpe

        if case.scattered:
            return None
        settings = paper_settings(case.ndim, case.K)
        emb = paper_embedder(family, int(settings["K"]), settings[family])
        if emb is None:
            return None
        rcond = paper_rcond(case.train.shape[: case.ndim], emb.K)
        return _timed_fit(
            lambda: kronpe.fit_grid(
                case.train, [emb] * case.ndim, coords=case.train_coords, ridge=0.0, rcond=rcond
            ),
            case,
        )

    run.__name__ = f"paper_{family}"
    return run


def gcv_row(case: Case) -> Optional[RowResult]:
    """Row: kronpe's own choice (embedders=None: covering margin, width and ridge by GCV)."""
    import kronpe

    if case.scattered:
        return None
    return _timed_fit(lambda: kronpe.fit_grid(case.train, None, coords=case.train_coords), case)


def spline_row(case: Case) -> Optional[RowResult]:
    """Row: cubic-spline interpolation (scipy.ndimage, order 3, mirror boundary)."""
    from scipy import ndimage

    if case.scattered:
        return None
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
    return RowResult(pred.reshape(case.full.shape).astype(case.full.dtype), t1 - t0, t2 - t0)


def points_row(case: Case) -> Optional[RowResult]:
    """Row: kronpe's exact scattered fit (fit_points, embedders=None, ridge chosen automatically)."""
    import kronpe

    if not case.scattered:
        return None
    return _timed_fit(lambda: kronpe.fit_points(case.points, case.values, None), case)


def griddata_row(method: str) -> Callable[[Case], Optional[RowResult]]:
    """Row: scipy.interpolate.griddata (``method``) from the random samples, 2-D only.

    Outside the convex hull of the samples griddata has no value: those few pixels take the
    nearest sample's value, as a user would fill them.
    """

    def run(case: Case) -> Optional[RowResult]:
        from scipy.interpolate import NearestNDInterpolator, griddata

        if not case.scattered or case.ndim != 2:
            return None
        t0 = time.perf_counter()
        pts, vals = case.points, case.values.reshape(case.points.shape[0], -1)
        grid = np.stack(np.meshgrid(*case.coords, indexing="ij"), axis=-1).reshape(-1, case.ndim)
        pred = griddata(pts, vals, grid, method=method)
        bad = ~np.isfinite(pred).all(axis=1)
        if bad.any():
            pred[bad] = NearestNDInterpolator(pts, vals)(grid[bad])
        t1 = time.perf_counter()
        return RowResult(pred.reshape(case.full.shape).astype(case.full.dtype), t1 - t0, t1 - t0)

    run.__name__ = f"griddata_{method}"
    return run


#: The rows of ``kronpe demo``, in table order. Append to add methods.
DEMO_ROWS: List[DemoRow] = [
    DemoRow("Tri, paper (closed form)", paper_row("Tri")),
    DemoRow("Gau, paper (closed form)", paper_row("Gau")),
    DemoRow("LinF, paper (closed form)", paper_row("LinF"), quick=False),
    DemoRow("LogF, paper (closed form)", paper_row("LogF"), quick=False),
    DemoRow("RFF, paper (closed form)", paper_row("RFF"), quick=False),
    DemoRow("kronpe GCV (embedders=None)", gcv_row),
    DemoRow("cubic spline (scipy.ndimage)", spline_row),
    DemoRow("kronpe fit_points (scattered, exact)", points_row),
    DemoRow("griddata linear (scattered)", griddata_row("linear")),
    DemoRow("griddata cubic (scattered)", griddata_row("cubic")),
]


def demo_cases(quick: bool = False) -> List[Case]:
    """The demo's signals: photographs at 512 x 512 and the 128^3 video (small ones if quick)."""
    if quick:
        img = data.load_sample("astronaut", size=64, crop=True)
        return [Case("astronaut 64x64 (crop)", img, 2),
                Case("astronaut 64x64 (crop), 25% random", img, 2, fraction=0.25)]
    images = [(name, data.load_sample(name, size=512)) for name in data.DEMO_IMAGES]
    video = data.load_video()
    cases = [Case(f"{name} 512x512", img, 2) for name, img in images]
    cases.append(Case(f"video {data.DEFAULT_VIDEO} 128^3", video, 3))
    # seed 000 Tables 2 and 4: 25% random pixels in 2-D, 12.5% random samples in 3-D
    cases += [Case(f"{name} 512x512, 25% random", img, 2, fraction=0.25) for name, img in images]
    cases.append(Case(f"video {data.DEFAULT_VIDEO} 128^3, 12.5% random", video, 3, fraction=0.125))
    return cases


@dataclass
class DemoEntry:
    case: str
    row: str
    train_psnr: float
    heldout_psnr: float
    fit_s: float
    total_s: float
    note: str = ""


def run_demo_table(
    cases: Sequence[Case], rows: Sequence[DemoRow], progress: bool = True, warmup: bool = True
) -> List[DemoEntry]:
    """Run every row on every case; rows that do not apply give NaN entries marked "n/a".

    ``warmup`` first runs every row once, untimed, on a small subsample of the first case.
    """
    from tqdm.auto import tqdm

    entries = []
    if warmup and cases:  # first calls pay for imports and allocations: keep them out of the times
        first = cases[0]
        small = Case("warm-up", first.full[(slice(0, 32),) * first.ndim], first.ndim, first.stride)
        for row in rows:
            row.run(small)
    with tqdm(total=len(cases) * len(rows), disable=not progress, file=sys.stderr, desc="demo") as bar:
        for case in cases:
            for row in rows:
                bar.set_postfix_str(f"{case.name}: {row.label}")
                res = row.run(case)
                if res is None:
                    entries.append(DemoEntry(case.name, row.label, *(float("nan"),) * 4, note="n/a"))
                else:
                    tr, ho = case.score(res.pred)
                    entries.append(DemoEntry(case.name, row.label, tr, ho, res.fit_s, res.total_s, res.note))
                bar.update(1)
    return entries


def _fmt(x: float, digits: int) -> str:
    if np.isnan(x):
        return "n/a"
    return "inf" if np.isinf(x) else f"{x:.{digits}f}"


def format_demo(entries: Sequence[DemoEntry]) -> str:
    """Markdown: held-out PSNR per method and signal, then the long table with times."""
    cases = list(dict.fromkeys(e.case for e in entries))
    rows = list(dict.fromkeys(e.row for e in entries))
    by = {(e.case, e.row): e for e in entries}
    out = ["Held-out PSNR (dB):", ""]
    out.append("| method | " + " | ".join(cases) + " |")
    out.append("|---|" + "---:|" * len(cases))
    for r in rows:
        out.append(f"| {r} | " + " | ".join(_fmt(by[c, r].heldout_psnr, 2) for c in cases) + " |")
    out += ["", "All numbers:", ""]
    out.append("| signal | method | held-out PSNR (dB) | train PSNR (dB) | fit (s) | fit + predict (s) | note |")
    out.append("|---|---|---:|---:|---:|---:|---|")
    for e in entries:
        out.append(
            f"| {e.case} | {e.row} | {_fmt(e.heldout_psnr, 2)} | {_fmt(e.train_psnr, 2)} | "
            f"{_fmt(e.fit_s, 3)} | {_fmt(e.total_s, 3)} | {e.note} |"
        )
    return "\n".join(out)


def run_demo(args) -> int:
    """``kronpe demo [--quick] [--out DIR] [--no-progress]``: print the table, save it as Markdown/JSON."""
    import json

    quick = bool(getattr(args, "quick", False))
    rows = [r for r in DEMO_ROWS if r.quick or not quick]
    if getattr(args, "adam", False):
        try:
            from .torch.train import adam_rows
        except ImportError as exc:
            raise ValueError("kronpe demo --adam needs torch (pip install torch)") from exc
        rows += [r for r in adam_rows() if r.quick or not quick]
    entries = run_demo_table(demo_cases(quick), rows, progress=not args.no_progress)
    table = format_demo(entries)
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "demo.md").write_text(table + "\n")
    (out / "demo.json").write_text(json.dumps([e.__dict__ for e in entries], indent=1) + "\n")
    print(f"\nwrote {out / 'demo.md'} and {out / 'demo.json'}")
    return 0


# ---- kronpe fit ----------------------------------------------------------------------------------


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


def fit_signal(signal: np.ndarray, ndim: int, stride: int):
    """Fit ``signal``'s regular subsample with kronpe's own choice; (model, prediction, fit s, predict s)."""
    return fit_case(Case("fit", signal, ndim, stride))


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

    channels = signal.shape[ndim:]
    print(f"signal: {stem} ({kind}), shape {signal.shape}: {ndim} sampled {'axis' if ndim == 1 else 'axes'}"
          + (f", channels {channels}" if channels else ""))
    case = Case(stem, signal, ndim, stride, peak, fraction=fraction, seed=getattr(args, "seed", 0))
    total = int(np.prod(signal.shape[:ndim]))
    if case.scattered:
        print(f"training: a random {fraction:g} of the samples (--random, seed {case.seed}), "
              f"{int(case.mask.sum())} of {total} samples")
    else:
        n_train = int(np.prod([-(-n // stride) for n in signal.shape[:ndim]]))
        print(f"training: one sample in {stride} per axis (--stride), {n_train} of {total} samples")

    model, pred, fit_s, pred_s = fit_case(case)
    tr, ho = case.score(pred)
    embs = getattr(model, "embedders", None)
    if embs:
        print("embedders: " + ", ".join(repr(e) for e in embs))
    print(f"ridge: {float(model.ridge):.4g}")
    info = getattr(model, "info", None)
    if info and "iterations" in info:
        print(f"solver: {info['iterations']} iterations, relative residual {float(info.get('residual', float('nan'))):.2e}"
              + ("" if info.get("converged", True) else " (NOT converged)"))
    print(f"train PSNR: {tr:.2f} dB   held-out PSNR: {_fmt(ho, 2)} dB   (peak {peak:g})")
    print(f"time: fit {fit_s:.3f} s, predict {pred_s:.3f} s")

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lo, hi = (0.0, 1.0) if kind in ("image", "video") else (float(signal.min()), float(signal.max()))
    files = _write_pictures(out, stem, "input", signal, ndim, lo, hi)
    files += _write_pictures(out, stem, "fit", pred.astype(np.float32), ndim, lo, hi)
    print("wrote " + ", ".join(str(f) for f in files))
    return 0
