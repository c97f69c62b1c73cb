"""A pipeline that alternates NumPy's products and kronpe's, at the libraries' default threads.

Each library keeps a pool of threads that busy-wait for a while after a call (NumPy's OpenBLAS
workers, the OpenMP team kronpe's kernels run on), so the first call of the other library finds
the cores taken. This script times a D=2 chain (n x n through two n x n matrices, float32) by
kronpe and by two ``numpy.tensordot`` calls: each alone (every call of one library, back to back),
then alternating one call of each, and prints the medians and the ratio alternating / alone.
kronpe backs off to fewer threads when its teams come late on oversubscribed cores
(kronpe/threads.h), which keeps both libraries near their own times.

With ``--busy`` it measures another kind of load instead: another process spinning on one core
for the whole run (a neighbour's job), kronpe's chain at its default threads against the same
chain on one thread, alternating, with the same process running beside both: a team whose
second thread shares a core with that process waits a scheduler tick for it, unless kronpe
backs off.

Run: ``python benches/bench_interleaved.py [--busy] [ROUNDS] [N ...]`` (default 60 rounds,
n = 256 512).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np

_PY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python")
if _PY not in sys.path:  # benches run from the source tree when kronpe is not installed
    sys.path.insert(0, _PY)

import kronpe  # noqa: E402
from kronpe import _core  # noqa: E402


def medians(fns: dict, rounds: int) -> dict:
    """Median seconds per call of each of ``fns``, called in turn once per round, each result
    dropped at once (as a loop of a user's would)."""
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: float(np.median(t)) for name, t in times.items()}


def main(rounds: int, sizes: list) -> None:
    rng = np.random.default_rng(0)
    print(f"threads: kronpe {kronpe.get_num_threads()}, {os.cpu_count()} CPUs; {rounds} rounds; medians in ms")
    print("| n | kronpe alone | kronpe alternating | NumPy alone | NumPy alternating | kronpe ratio | NumPy ratio | kronpe back-offs |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        X, A1, A2 = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(3))
        fns = {"kronpe": lambda: kronpe.multi_mode_product(X, [A1, A2]),
               "NumPy": lambda: np.tensordot(np.tensordot(X, A1, axes=(0, 1)), A2, axes=(0, 1))}
        alone = {name: medians({name: fn}, rounds)[name] for name, fn in fns.items()}
        marks = _core._tuning.busy_cores()[1]
        both = medians(fns, rounds)
        marks = _core._tuning.busy_cores()[1] - marks
        # checked after the timings: the check's float64 work leaves the threads in another state
        np.testing.assert_allclose(fns["kronpe"](), fns["NumPy"](), rtol=1e-3, atol=1e-2 * n)
        print(f"| {n} | {alone['kronpe'] * 1e3:.3f} | {both['kronpe'] * 1e3:.3f} | {alone['NumPy'] * 1e3:.3f} | "
              f"{both['NumPy'] * 1e3:.3f} | {both['kronpe'] / alone['kronpe']:.2f} | "
              f"{both['NumPy'] / alone['NumPy']:.2f} | {marks} |")


def busy(rounds: int, sizes: list) -> None:
    """kronpe's default threads against one thread, alternating, beside a process that spins on
    one core from before the first call to after the last."""
    rng = np.random.default_rng(0)
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)  # the spinning process has its core
        print(f"{os.cpu_count()} CPUs, one of them taken by a spinning process; {rounds} rounds, alternating; "
              "medians in ms")
        print("| n | kronpe, default threads | kronpe, one thread | default / one | slowest default round | back-offs |")
        print("|---:|---:|---:|---:|---:|---:|")
        default = kronpe.get_num_threads()
        for n in sizes:
            X, A1, A2 = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(3))
            times = {"default": [], "one": []}
            marks = _core._tuning.busy_cores()[1]
            for _ in range(rounds):
                for name, threads in (("default", default), ("one", 1)):
                    kronpe.set_num_threads(threads)
                    t0 = time.perf_counter()
                    kronpe.multi_mode_product(X, [A1, A2])
                    times[name].append(time.perf_counter() - t0)
            marks = _core._tuning.busy_cores()[1] - marks
            kronpe.set_num_threads(None)
            d, o = float(np.median(times["default"])), float(np.median(times["one"]))
            print(f"| {n} | {d * 1e3:.3f} | {o * 1e3:.3f} | {d / o:.2f} | {max(times['default']) * 1e3:.3f} | {marks} |")
    finally:
        spin.kill()
        spin.wait()


if __name__ == "__main__":
    args = sys.argv[1:]
    run = busy if "--busy" in args else main
    args = [a for a in args if a != "--busy"]
    run(int(args[0]) if args else 60, [int(a) for a in args[1:]] or [256, 512])
