"""First calls after a pause: kronpe's two-thread work with and without the cold-wake steering of
kronpe/threads.h (a cold team moves its workers off the launching thread's CPU first).

For each job, rounds of: sleep PAUSE seconds, then four calls in a row, timed; printed: the
median and the maximum of each call's time over the rounds (ms), steering off then on, in
alternating processes. The first call after a pause is the one the steering is for.

    PYTHONPATH=python python tools/cold_wake.py [--jobs chain512,chain64,crop,chelsea] [--rounds 15]
                                                [--pause 0.3] [--repeats 2]

Jobs: chain512 (kronpe.multi_mode_product of a 512^2 matrix by two 512^2 matrices), chain64 (64^3
by three 64^2), crop (fit_grid(mask=) and predict_grid of camera 128^2 with 50% missing, the
benchmark's masked crop), chelsea (the same on the 451 x 300 RGB photograph).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time

JOBS = ("chain512", "chain64", "crop", "chelsea")


def job(name: str):
    import numpy as np

    import kronpe

    rng = np.random.default_rng(0)
    if name.startswith("chain"):
        shape = (512, 512) if name == "chain512" else (64, 64, 64)
        T = rng.standard_normal(shape, dtype=np.float32)
        mats = [rng.standard_normal((n, n), dtype=np.float32) for n in shape]
        return lambda: kronpe.multi_mode_product(T, mats)
    from kronpe.bench import scattered as S

    s = S.task_inputs("camera", "masked", 128) if name == "crop" else S.task_inputs(name, "masked")
    return lambda: S.kronpe_mask(s)


def child(name: str, steering: bool, rounds: int, pause: float) -> None:
    import numpy as np

    from kronpe import _core

    _core.set_cold_wake_steering(steering)
    f = job(name)
    for _ in range(5):
        f()
    times = []
    for _ in range(rounds):
        time.sleep(pause)
        row = []
        for _ in range(4):
            t0 = time.perf_counter()
            f()
            row.append((time.perf_counter() - t0) * 1e3)
        times.append(row)
    a = np.array(times)
    med = " ".join(f"{v:6.2f}" for v in np.median(a, 0))
    top = " ".join(f"{v:6.2f}" for v in a.max(0))
    print(f"{name:9s} steering {'on ' if steering else 'off'}  median {med}   max {top}   "
          f"workers moved {_core.cold_wake_steering()[1]}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", default=",".join(JOBS))
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--pause", type=float, default=0.3)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child[0], args.child[1] == "on", args.rounds, args.pause)
        return
    print(f"ms per call, calls 1-4 after a {args.pause} s pause ({args.rounds} rounds)")
    for name in args.jobs.split(","):
        if name not in JOBS:
            raise SystemExit(f"cold_wake: unknown job {name!r} (jobs: {', '.join(JOBS)})")
        for _ in range(args.repeats):
            for steering in ("off", "on"):
                subprocess.run([sys.executable, __file__, "--child", name, steering, "--rounds", str(args.rounds),
                                "--pause", str(args.pause)], check=True)


if __name__ == "__main__":
    main()
