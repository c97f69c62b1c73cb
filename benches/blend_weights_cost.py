"""What the blending weights cost when computed on the fly, against issue 11's budget (>= 50% of copy).

An on-the-fly product computes every point's weights (per axis: its cell, then for a distance
kernel two exponentials and three divisions) before it gathers or scatters. This script measures
that arithmetic alone, per axis and point, in cache (``_core.blend_axis_weights``: the slope
between 4096 and 20480 coordinates, 10th percentiles of 1500 calls, one thread), on every vector
path this CPU has (AVX-512, AVX2, portable); then the blend suite's 2d-512-100pct case (262144
random points, 3 float32 channels, Gaussian weights): the on-the-fly and stored gathers (warm, default threads, medians of 40), the
copy bandwidth of the same run, and the time 50% of it allows for the on-the-fly product's bytes
(``kronpe.bench.blend.blend_bytes``) next to what the weights alone need at that thread count.

    PYTHONPATH=python python benches/blend_weights_cost.py
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np

_PY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python")
if _PY not in sys.path:  # benches run from the source tree when kronpe is not installed
    sys.path.insert(0, _PY)

import kronpe  # noqa: E402
from kronpe import _core  # noqa: E402
from kronpe._adapters import arrays as _arrays  # noqa: E402
from kronpe.bench.blend import CHANNELS, blend_bytes, matrices  # noqa: E402
from kronpe.bench.harness import copy_bandwidth  # noqa: E402
from kronpe.solvers import blending  # noqa: E402

M = 512
KINDS = [("linear", blending.LINEAR, 0.0), ("gaussian", blending.GAUSSIAN, 1 / (4 * (1 / M) ** 2)),
         ("bspline3", blending.BSPLINE3, float(M))]


def axis_cost(kind: int, param: float, calls: int = 1500) -> float:
    """Seconds per coordinate of one axis's cells and weight pairs, in cache (a slope: the call's
    fixed cost, building the axis's tables, drops out)."""
    axes = [(_arrays.describe(np.linspace(0.0, 1.0, M)), kind, param)]
    at = {}
    for n in (4096, 20480):
        q = np.sort(np.random.default_rng(0).random(n))
        out = (np.empty(n, np.int64), np.empty(n), np.empty(n))
        args = (axes, True, 0, _arrays.describe(q)) + tuple(_arrays.describe(a) for a in out)
        ts = []
        for _ in range(calls):
            t0 = time.perf_counter()
            _core.blend_axis_weights(*args)
            ts.append(time.perf_counter() - t0)
        at[n] = float(np.percentile(ts, 10))
    return (at[20480] - at[4096]) / (20480 - 4096)


def median_ms(fn, rounds: int = 40) -> float:
    fn()
    ts = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(ts))


def main() -> None:
    before = _core._tuning.blend_set_simd(2)
    top = _core._tuning.blend_set_simd(2)
    names = ["portable", "AVX2", "AVX-512"][: top + 1][::-1]
    print(f"kronpe {kronpe.__version__}; threads {kronpe.get_num_threads()}; vector paths: {', '.join(names)}")
    print("\n| weights | " + " | ".join(f"{n} ns per axis and point" for n in names) + " |\n|---|"
          + "---:|" * len(names))
    cost = {}
    for name, kind, param in KINDS:
        row = []
        for level in range(top, -1, -1):
            _core._tuning.blend_set_simd(level)
            row.append(axis_cost(kind, param) * 1e9)
        cost[name] = row[0]
        print(f"| {name} | " + " | ".join(f"{c:.2f}" for c in row) + " |")
    _core._tuning.blend_set_simd(before)

    _, fly, stored = matrices((M, M), 1.0)
    P, G = fly.shape
    v = np.random.default_rng(3).standard_normal((G, CHANNELS)).astype(np.float32)
    t_fly = median_ms(lambda: fly.matvec(v))
    t_stored = median_ms(lambda: stored.matvec(v))
    bw = copy_bandwidth()
    nbytes = blend_bytes(fly, CHANNELS, 4, "points")
    budget = 1e3 * nbytes / (0.5 * bw)
    threads = kronpe.get_num_threads()
    weights = 1e3 * 2 * P * cost["gaussian"] * 1e-9 / threads
    print(f"\n2d-512-100pct, {P} points, C={CHANNELS} float32, Gaussian weights, {threads} threads, copy {bw / 1e9:.1f} GB/s:")
    print(f"- on the fly {t_fly:.3f} ms = {nbytes / (t_fly * 1e-3) / bw:.0%} of copy; stored {t_stored:.3f} ms")
    print(f"- 50% of copy allows {budget:.3f} ms for the on-the-fly product's {nbytes / 1e6:.1f} MB")
    print(f"- its weights alone (2 axes x {cost['gaussian']:.2f} ns per point, {threads} threads, perfect scaling): "
          f"{weights:.3f} ms = {weights / budget:.0%} of that budget")


if __name__ == "__main__":
    main()
