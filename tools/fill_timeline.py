"""Where a default fill's time goes: the phases of ``fit_grid(mask=)`` or ``fit_points`` and the
prediction, as the benchmark calls them, timed in a loop (medians, ms).

    PYTHONPATH=python python tools/fill_timeline.py [--image camera] [--size 128] [--task masked]
        [--calls 40] [--threads N]

Phases (wall time between marks on the calling thread): ``setup`` (the public function until the
solver starts: validation, the masked values or lattice sums), ``before sweep`` (the channels'
moments and basis, the speculative solve's set-up, the held-out nodes), ``sweep`` (the compiled
held-out sweep; with speculation the leading component's solve runs beside it on the other
thread), ``between`` (the sweep's end until the final solve: the hierarchy for the other
components; on one thread also the leading component's speculative solve, run then), ``final solve`` (the components, clipped and mixed back), ``model`` and ``predict``
(the benchmark's prediction and held-out gather). The marks wrap module functions of
kronpe.solvers.smooth (internal names: a tool for this repository's sessions, not an API).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Dict, List

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))

import kronpe  # noqa: E402
from kronpe import _core  # noqa: E402
from kronpe.bench import scattered as S  # noqa: E402
from kronpe.solvers import smooth  # noqa: E402

MARKS: Dict[str, List[float]] = {}


def mark(name: str) -> None:
    MARKS.setdefault(name, []).append(time.perf_counter())


def wrap(name: str, before: str, after: str) -> None:
    fn = getattr(smooth, name)

    def wrapped(*args, **kwargs):
        mark(before)
        out = fn(*args, **kwargs)
        mark(after)
        return out

    setattr(smooth, name, wrapped)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--image", default="camera", choices=S.IMAGES)
    ap.add_argument("--size", type=int, default=128, help="a central crop's side (0: the whole photograph)")
    ap.add_argument("--task", default="masked", choices=("masked", "scattered"))
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--threads", type=int, default=0, help="kronpe.set_num_threads (0: the default)")
    args = ap.parse_args(argv)
    if args.threads:
        kronpe.set_num_threads(args.threads)
    s = S.task_inputs(args.image, args.task, args.size or None)
    wrap("fit", "solver", "solver end")
    wrap("_compiled_sweep", "sweep", "sweep end")
    wrap("solve", "final solve", "final solve end")
    fill = S.kronpe_mask if args.task == "masked" else S.kronpe_points

    def call():
        mark("call")
        fill(s)
        mark("call end")

    for _ in range(3):
        call()
    MARKS.clear()
    for _ in range(args.calls):
        call()
    t = {k: np.array(v) for k, v in MARKS.items()}
    n = len(t["call"])

    def span(a: str, b: str) -> float:
        return float(np.median(t[b][:n] - t[a][:n])) * 1e3 if a in t and b in t and len(t[a]) >= n else float("nan")

    rows = [("setup", "call", "solver"), ("before sweep", "solver", "sweep"), ("sweep", "sweep", "sweep end"),
            ("between", "sweep end", "final solve"), ("final solve", "final solve", "final solve end"),
            ("model and predict", "final solve end", "call end"), ("total", "call", "call end")]
    print(f"{args.task} {args.image} {args.size or 'full'}, {args.calls} calls, "
          f"{_core.get_num_threads()} thread(s); medians, ms")
    for label, a, b in rows:
        print(f"  {label:18s} {span(a, b):8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
