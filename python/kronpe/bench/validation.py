"""The fill's tuned defaults checked on photographs and fields they were never tuned on.

``kronpe bench --suite validation``: a PSNR study, not a timing (minutes long, so it runs only when
named). The default fill (:mod:`kronpe.solvers.smooth`) has constants that were chosen on the
``scattered`` suite's photographs (``TUNING``: ``bench.scattered.IMAGES``, their masks drawn with
seed ``TUNING_SEED``). This suite measures, on the other photographs of ``kronpe.data.SAMPLES``
and two synthetic fields (``VALIDATION``), each with masks of seeds ``SEEDS`` (none the tuning's):

- ``masked``: half of the pixels missing; ``kronpe.fit_grid(img, mask=observed)`` against
  ``skimage.restoration.inpaint_biharmonic`` (``bench.scattered``'s methods);
- ``scattered``: a quarter of the pixels kept, given as points (pixel (i, j) at (i / N, j / N));
  ``kronpe.fit_points(points, values)`` against inpaint_biharmonic of the same pixels.

PSNR on the missing pixels, peak 1 (the photographs are in [0, 1]; the fields are scaled to
[0, 1], so the peak is their range). For each task, per (image, seed) pair, the margin
d = PSNR(kronpe's default) - PSNR(other): against the peer, and against the fill with one tuned
constant set to its neutral value (``constants()``; the constant is the module attribute that
``smooth.fit`` reads at every call, set for that fit by ``patched``). A row: the mean of d, its
95% t-interval over the pairs, n, and the verdict: "win" (the interval above 0), "loss" (below)
or "tie" (it holds 0). The pairs of one image share the image, so the interval over pairs is the
narrower one; ``by_image`` in the JSON has the interval over the images' means too.

Not ablated, because the study's 2-D fills never read them: ``WEIGHT_STEP``, ``WEIGHT_MARGIN``,
``WEIGHT_ITERATIONS`` (the order-3 penalty of 3-axis fills) and ``SWEEP_FLAT`` (the PCG sweep of a
blended data term; a mask or a lattice sweeps by V-cycles, whose flatness test is
``SWEEP_FLAT_NODES``). Every library runs on one thread for the whole study (``one_thread``).
"""
from __future__ import annotations

import contextlib
import datetime
import math
import re
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from . import scattered
from .field import franke, terrain

#: The photographs the fill's constants were tuned on (the ``scattered`` suite's), and the seed
#: of their masks.
TUNING: Tuple[str, ...] = scattered.IMAGES
TUNING_SEED = 0
#: The synthetic fields: Franke's function on the grid, and the fractal terrain of ``bench.field``.
FIELDS: Tuple[str, ...] = ("franke", "terrain")


def validation_images() -> Tuple[str, ...]:
    """Every sample photograph not in TUNING, then FIELDS."""
    from kronpe import data

    return tuple(n for n in data.SAMPLES if n not in TUNING) + FIELDS


VALIDATION: Tuple[str, ...] = validation_images()
SEEDS: Tuple[int, ...] = (1, 2, 3)  # the masks' seeds (the tuning's was TUNING_SEED)
SIZE = 384  # every signal is SIZE x SIZE (the photographs' central square, resized)
#: --quick: a colour and two grey photographs and a field, two seeds, 128 x 128
QUICK_IMAGES: Tuple[str, ...] = ("retina", "coins", "brick", "terrain")
QUICK_SEEDS: Tuple[int, ...] = (1, 2)
QUICK_SIZE = 128
PEER = "inpaint_biharmonic"
#: task -> (kronpe's default, the fraction of pixels observed)
TASKS: Dict[str, Tuple[Callable[[dict], np.ndarray], float]] = {
    "masked": (scattered.kronpe_mask, 1.0 - scattered.MISSING),
    "scattered": (scattered.kronpe_points, scattered.KEEP),
}
LEVEL = 0.95  # the intervals' confidence


def constants() -> List[Tuple[str, Any, str]]:
    """(name, neutral value, what the fill does then) of each tuned constant of
    :mod:`kronpe.solvers.smooth` that a 2-D fill reads, its neutral value read now."""
    from ..solvers import smooth

    return [
        ("HIGHER", 0.0, "the higher-order penalty not tried"),
        ("TOL_INTERPOLATING", smooth.TOL, "the interpolation limit solved to TOL"),
        ("SWEEP_FLAT_NODES", 0.0, "the sweep stopped only by a rising held-out error"),
        ("INTERPOLATION_EXPONENT", max(smooth.EXPONENTS), "interpolation at the sweep's smallest lambda"),
        ("SWEEP_OMEGA", 1.0, "the sweep's V-cycle steps not over-relaxed"),
    ]


@contextlib.contextmanager
def patched(module, name: str, value) -> Iterator[None]:
    """``module.name = value`` inside, the old value restored after (also when the body raises)."""
    old = getattr(module, name)  # an AttributeError for a name the module does not have
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, old)


@contextlib.contextmanager
def one_thread() -> Iterator[Dict[str, Any]]:
    """kronpe's kernels and every BLAS on one thread inside (kronpe.set_num_threads, and
    threadpoolctl where installed); yields the threads each library then uses; restores them."""
    import kronpe

    from .._adapters import blas
    from .harness import thread_settings

    before, blas_before = kronpe.get_num_threads(), blas.blas_threads()
    with contextlib.ExitStack() as stack:
        try:
            from threadpoolctl import threadpool_limits

            stack.enter_context(threadpool_limits(1))
        except ImportError:  # threadpoolctl is optional: kronpe's BLAS alone is set
            pass
        kronpe.set_num_threads(1)
        try:
            yield thread_settings()
        finally:
            kronpe.set_num_threads(before)
            if blas_before is not None:
                blas.set_blas_threads(blas_before)


def signal(name: str, size: int) -> np.ndarray:
    """A validation signal (size, size, C) float32 in [0, 1]: a sample photograph, or a field
    scaled to [0, 1] (its range is then the PSNR's peak)."""
    if name == "franke":
        from kronpe import data

        x, y = data.grid_coords((size, size))
        f = franke(x[:, None], y[None, :])
        f = (f - f.min()) / np.ptp(f)
    elif name == "terrain":
        f = terrain(size, seed=0)
    else:
        return scattered.image(name, size)
    return f.astype(np.float32)[..., None]


def inputs(img: np.ndarray, task: str, seed: int) -> dict:
    """The task's inputs (``bench.scattered``'s layout) with a mask drawn with ``seed``."""
    return scattered.prepared(img, scattered.kept(img, TASKS[task][1], seed))


def interval(d: Sequence[float], level: float = LEVEL) -> Dict[str, Any]:
    """mean, the t-interval at ``level``, n and the verdict ("win": above 0, "loss": below,
    "tie": holds 0) of the margins ``d``; an interval of one value where they are all equal."""
    from scipy import stats

    d = np.asarray(d, np.float64)
    n = int(d.size)
    mean = float(d.mean()) if n else math.nan
    if n >= 2 and np.ptp(d) > 0:
        half = float(stats.t.ppf(0.5 + level / 2, n - 1) * d.std(ddof=1) / math.sqrt(n))
    else:
        half = 0.0 if n else math.nan
    lower, upper = mean - half, mean + half
    verdict = "win" if lower > 0 else "loss" if upper < 0 else "tie"
    return {"mean": mean, "lower": lower, "upper": upper, "n": n, "verdict": verdict}


def run(quick: bool = False, match: Optional[str] = None, progress: bool = False,
        images: Optional[Sequence[str]] = None, seeds: Optional[Sequence[int]] = None,
        size: Optional[int] = None, argv: Optional[Sequence[str]] = None) -> dict:
    """The study (module docstring): the document that ``kronpe bench --suite validation`` writes
    as validation.json. ``match``: a regular expression searched in the validation signals'
    names; ``images``, ``seeds``, ``size``: instead of the defaults (or --quick's)."""
    from tqdm.auto import tqdm

    from ..solvers import smooth
    from .harness import machine_info

    images = list(images or (QUICK_IMAGES if quick else VALIDATION))
    if match:
        pattern = re.compile(match)
        images = [n for n in images if pattern.search(n)]
        if not images:
            raise ValueError(f"no validation signal matches {match!r}")
    seeds = list(seeds or (QUICK_SEEDS if quick else SEEDS))
    size = int(size or (QUICK_SIZE if quick else SIZE))
    consts = constants()
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    records: List[dict] = []
    with one_thread() as threads:
        work = [(n, s) for n in images for s in seeds]
        with tqdm(work, disable=None if progress else True, unit="pair") as bar:
            for name, seed in bar:
                bar.set_postfix_str(f"{name} {seed}")
                img = signal(name, size)
                for task, (default, _) in TASKS.items():
                    s = inputs(img, task, seed)
                    fits = [("default", default, None), (PEER, scattered.biharmonic, None)]
                    fits += [(f"{c}={v!r}", default, (c, v)) for c, v, _ in consts]
                    for label, fn, patch in fits:
                        with patched(smooth, *patch) if patch else contextlib.nullcontext():
                            t = time.perf_counter()
                            pred = fn(s)
                            seconds = time.perf_counter() - t
                        records.append({"task": task, "image": name, "seed": seed, "fit": label,
                                        "psnr": scattered.psnr(pred, s["truth"]), "seconds": seconds})
    return {"kronpe_validation": 1, "datetime": started, "argv": list(argv) if argv is not None else None,
            "quick": quick, "seconds": time.perf_counter() - t0, "machine_info": machine_info(),
            "threads": threads, "tuning": {"images": list(TUNING), "seed": TUNING_SEED},
            "validation": {"images": images, "seeds": seeds, "size": size},
            "constants": [{"name": c, "default": getattr(smooth, c), "neutral": v, "neutral_does": why}
                          for c, v, why in consts],
            "level": LEVEL, "records": records, "rows": rows(records, consts, smooth)}


def rows(records: List[dict], consts: List[Tuple[str, Any, str]], smooth) -> List[dict]:
    """One row per task and comparison: kronpe's default against the peer, then against the fill
    without each constant (``interval`` of the margins, over the pairs and over the images)."""
    psnr = {(r["task"], r["image"], r["seed"], r["fit"]): r["psnr"] for r in records}
    pairs = sorted({(r["task"], r["image"], r["seed"]) for r in records})
    out = []
    others = [(PEER, f"kronpe default vs {PEER}", None)] + [
        (f"{c}={v!r}", f"{c} {getattr(smooth, c)!r} vs {v!r}", c) for c, v, _ in consts]
    for task in TASKS:
        mine = [p for p in pairs if p[0] == task]
        for fit, what, constant in others:
            d = [psnr[p + ("default",)] - psnr[p + (fit,)] for p in mine]
            by_image: Dict[str, List[float]] = {}
            for p, v in zip(mine, d):
                by_image.setdefault(p[1], []).append(v)
            out.append(dict(task=task, what=what, constant=constant, **interval(d),
                            changed=int(np.count_nonzero(d)),
                            by_image=interval([float(np.mean(v)) for v in by_image.values()])))
    return out


def machine_line(doc: dict) -> str:
    """CPU, cores, threads, date and duration of the study."""
    m = doc["machine_info"]
    threads = ", ".join(f"{k} {v}" for k, v in doc["threads"].items())
    return (f"Machine: {m.get('cpu', '?')}; {m.get('cores_usable', m.get('cores', '?'))} cores; threads: {threads}; "
            f"{doc['datetime']}; {doc['seconds']:.0f} s")


def markdown(doc: dict) -> str:
    """The table of the study's rows, under its machine line and sets."""
    v, t = doc["validation"], doc["tuning"]
    lines = [machine_line(doc), "",
             f"Validation: {', '.join(v['images'])} at {v['size']} x {v['size']}, mask seeds "
             f"{', '.join(map(str, v['seeds']))}. Tuned on: {', '.join(t['images'])} (mask seed {t['seed']}).",
             "",
             f"| task | what | mean margin dB | {round(100 * doc['level'])}% interval dB | n | verdict | changed |",
             "|---|---|---:|---:|---:|---|---:|"]
    for r in doc["rows"]:
        lines.append(f"| {r['task']} | {r['what']} | {r['mean']:+.3f} | [{r['lower']:+.3f}, {r['upper']:+.3f}] "
                     f"| {r['n']} | {r['verdict']} | {r['changed']} |")
    lines += ["", "Margin: PSNR of kronpe's default fill minus the other's on the missing pixels, per (signal, "
              "seed); 'A vs B': the default (A) against the fill with the constant at B. win / loss: the "
              "interval above / below 0; tie: it holds 0. changed: the pairs whose PSNR differs at all."]
    return "\n".join(lines)
