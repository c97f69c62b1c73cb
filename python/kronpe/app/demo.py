"""``kronpe demo``: one PSNR/time table over bundled photographs and a video.

The table prints several bundled photographs (512 x 512 from 256 x 256) and a 128^3 video (from
its 64^3 subsample) under the evaluation protocol of :mod:`kronpe.bench.protocol`. Its rows are
the functions listed in ``DEMO_ROWS``; a row takes a ``Case`` and returns a ``RowResult`` (or
None when it does not apply to the case); ``--adam`` adds the papers' gradient-descent rows
(:func:`adam_rows`, through :mod:`kronpe.torch.train`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Sequence

import numpy as np

from .. import data
from ..bench.protocol import Case, cubic_spline, fmt as _fmt, paper_embedder, paper_rcond, paper_settings
from ..data import psnr
from ..embedders import Gaussian, Triangle
from .output import Output

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
    if case.scattered:
        return None
    return RowResult(*cubic_spline(case))


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
    # The papers report no LogFourier closed-form result (and the official float32 least squares is
    # unstable with it): this row is kronpe's own run of that formulation, labelled as ours.
    DemoRow("LogF, ours (closed form)", paper_row("LogF"), quick=False),
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
    # Tables 2 and 4 of "Trading Positional Complexity vs. Deepness in Coordinate Networks":
    # 25% random pixels in 2-D, 12.5% random samples in 3-D
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
    from .._progress import bar as _bar

    entries = []
    if warmup and cases:  # first calls pay for imports and allocations: keep them out of the times
        first = cases[0]
        small = Case("warm-up", first.full[(slice(0, 32),) * first.ndim], first.ndim, first.stride)
        for row in rows:
            row.run(small)
    with _bar(len(cases) * len(rows), progress, "demo", leave=True) as bar:
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
            import torch  # noqa: F401
        except ImportError as exc:
            raise ValueError("kronpe demo --adam needs torch (pip install torch)") from exc
        rows += [r for r in adam_rows() if r.quick or not quick]
    report = Output(args, "demo")
    entries = run_demo_table(demo_cases(quick), rows, progress=report.progress)
    table = format_demo(entries)
    report.say(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "demo.md").write_text(table + "\n")
    (out / "demo.json").write_text(json.dumps([e.__dict__ for e in entries], indent=1) + "\n")
    report.put(entries=[e.__dict__ for e in entries])
    report.say("")
    report.wrote([out / "demo.md", out / "demo.json"])
    return report.done()


# ---- the papers' gradient-descent rows (kronpe demo --adam; torch) -------------------------------

#: the papers' gradient-descent embedder widths at K = 256 (2-D): the settings of docs/math/
#: encodings.rst ("The papers' settings and numbers") for the grid rows, the official
#: 2D_random_points.py for the scattered rows.
GD_GRID = {"Gau": 0.004, "Tri": 2 / 256}
GD_POINTS = {"Gau": 0.005, "Tri": 2.5 / 256}


def _gd_embedder(family: str, K: int, width_at_256: float):
    w = width_at_256 * 256 / K  # widths scale with the centre spacing 1/K
    return Gaussian(K, w) if family == "Gau" else Triangle(K, w)


def _steps_for(case, steps: Optional[int]) -> int:
    return steps if steps is not None else (2000 if case.ndim <= 2 else 500)


def adam_grid_run(case, family: str, steps: Optional[int] = None, progress: bool = False) -> dict:
    """One demo row: ComplexEncoding trained by Adam on ``case``'s regular training grid.

    ``case`` is a ``Case`` (``train``, ``train_coords``, ``coords``, ``full``, ``ndim``,
    ``K``). K = training samples per axis, the papers' gradient-descent width for ``family``.
    Returns dict(pred (the full grid), fit_s, total_s, note).
    """
    import torch

    from ..torch.train import fit_grid_adam

    emb = _gd_embedder(family, case.K, GD_GRID[family])
    t0 = time.perf_counter()
    model, hist = fit_grid_adam(case.train, [emb] * case.ndim, coords=case.train_coords,
                                steps=_steps_for(case, steps), progress=progress)
    t1 = time.perf_counter()
    with torch.no_grad():
        pred = model.forward_grid([torch.as_tensor(c) for c in case.coords]).numpy()
    t2 = time.perf_counter()
    return dict(pred=pred.reshape(case.full.shape).astype(case.full.dtype), fit_s=t1 - t0, total_s=t2 - t0,
                note=f"{hist.step[-1] if hist.step else 0} Adam steps")


def adam_random_run(case, family: str, steps: Optional[int] = None, progress: bool = False,
                    seed: int = 0) -> dict:
    """One demo row: ComplexEncoding trained by Adam at a random subset of ``case``'s full grid
    holding as many samples as its training grid (the blending path), evaluated everywhere.

    Returns dict(pred, fit_s, total_s, note); the note gives the PSNR on the unseen samples.
    """
    import torch

    from ..torch.train import fit_points_adam

    shape = case.full.shape[: case.ndim]
    n_all = int(np.prod(shape))
    n_train = int(np.prod(case.train.shape[: case.ndim]))
    pick = np.zeros(n_all, dtype=bool)
    pick[np.random.default_rng(seed).choice(n_all, size=n_train, replace=False)] = True
    mesh = np.stack(np.meshgrid(*case.coords, indexing="ij"), axis=-1).reshape(n_all, case.ndim)
    vals = case.full.reshape((n_all,) + case.full.shape[case.ndim:])
    emb = _gd_embedder(family, case.K, GD_POINTS[family])
    t0 = time.perf_counter()
    model, hist = fit_points_adam(mesh[pick], vals[pick], [emb] * case.ndim,
                                  steps=_steps_for(case, steps), progress=progress)
    t1 = time.perf_counter()
    with torch.no_grad():
        pred = model(torch.as_tensor(mesh)).numpy()
    t2 = time.perf_counter()
    unseen = psnr(pred[~pick], vals[~pick], getattr(case, "peak", 1.0))
    return dict(pred=pred.reshape(case.full.shape).astype(case.full.dtype), fit_s=t1 - t0, total_s=t2 - t0,
                note=f"random {n_train / n_all:.1%}; PSNR on unseen samples {unseen:.2f} dB")


def adam_rows(steps: Optional[int] = None, families: Sequence[str] = ("Gau", "Tri"),
              scattered: bool = True, progress: bool = False) -> list:
    """``kronpe demo`` rows (:class:`DemoRow`) for the papers' gradient-descent complex
    encodings: "<fam>, paper (Adam, grid)" (:func:`adam_grid_run`) and, with ``scattered``,
    "<fam>, paper (Adam, random)" (:func:`adam_random_run`: the demo's held-out column then
    counts some of its training samples; its note gives the PSNR on the samples it never saw).

    ``steps`` defaults to the papers' epochs: 2000 in 2-D, 500 in 3-D.
    """
    def row(run_fn, family: str):
        def run(case):
            return RowResult(**run_fn(case, family, steps=steps, progress=progress))

        run.__name__ = f"{run_fn.__name__}_{family}"
        return run

    rows = [DemoRow(f"{f}, paper (Adam, grid)", row(adam_grid_run, f)) for f in families]
    if scattered:
        rows += [DemoRow(f"{f}, paper (Adam, random)", row(adam_random_run, f)) for f in families]
    return rows
