"""Scattered measurements of smooth fields: kronpe.grid against SciPy's griddata (cubic) and
RBFInterpolator (thin plate, 30 neighbours), same points, same output grid, same thread count.

Each row: Franke's function (Franke 1979) sampled at P uniform random points of the unit square
(optionally with N(0, sigma) noise), gridded onto 256 x 256 nodes; PSNR (peak = the field's range)
over the nodes inside the points' convex hull against the noise-free field, and the median
wall time of ``--repeats`` interleaved calls (each method's first call untimed, alike for all).

    PYTHONPATH=python OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benches/bench_field.py [--quick]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
from scipy.interpolate import RBFInterpolator, griddata
from scipy.spatial import Delaunay

import kronpe


def franke(x, y):
    return (0.75 * np.exp(-((9 * x - 2) ** 2 + (9 * y - 2) ** 2) / 4) + 0.75 * np.exp(-(9 * x + 1) ** 2 / 49 - (9 * y + 1) / 10)
            + 0.5 * np.exp(-((9 * x - 7) ** 2 + (9 * y - 3) ** 2) / 4) - 0.2 * np.exp(-(9 * x - 4) ** 2 - (9 * y - 7) ** 2))


def case(P: int, noise: float, seed: int, n: int = 256):
    rng = np.random.default_rng(seed)
    pts = rng.random((P, 2))
    y = franke(pts[:, 0], pts[:, 1]) + noise * rng.standard_normal(P)
    g = np.linspace(0.0, 1.0, n)
    X, Y = np.meshgrid(g, g, indexing="ij")
    ref = franke(X, Y)
    inside = Delaunay(pts).find_simplex(np.c_[X.ravel(), Y.ravel()]).reshape(n, n) >= 0
    return pts, y, g, (X, Y), ref, inside


def methods(P: int):
    out = {
        "kronpe.grid": lambda pts, y, g, XY: kronpe.grid(pts, y, shape=(g.size, g.size), region=(0, 1, 0, 1))[0],
        "griddata cubic": lambda pts, y, g, XY: griddata(pts, y, XY, method="cubic"),
    }
    out["RBF thin plate 30"] = lambda pts, y, g, XY: RBFInterpolator(pts, y, neighbors=30, kernel="thin_plate_spline")(
        np.c_[XY[0].ravel(), XY[1].ravel()]).reshape(XY[0].shape)
    return out


def psnr(est, ref, inside):
    e = est[inside] - ref[inside]
    return 20 * np.log10(np.ptp(ref) / np.sqrt(np.mean(e**2)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 000 and 20 000 points, one seed")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args(argv)
    sizes = [2000, 20000] if args.quick else [2000, 20000, 100000]
    seeds = 1 if args.quick else args.seeds
    rows = [(P, 0.0) for P in sizes] + [(20000, 0.02)]
    print(f"threads: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')} "
          f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')} kronpe {kronpe.get_num_threads()}")
    print("| points | noise | method | PSNR dB (mean over seeds, min..max) | time s (median) | time / griddata |")
    print("|---|---|---|---|---|---|")
    for P, noise in rows:
        ms = methods(P)
        q = {k: [] for k in ms}
        t = {k: [] for k in ms}
        for seed in range(seeds):
            pts, y, g, XY, ref, inside = case(P, noise, seed)
            for name, f in ms.items():  # first calls untimed, for every method
                f(pts, y, g, XY)
            for _ in range(args.repeats):
                for name, f in ms.items():  # interleaved
                    t0 = time.perf_counter()
                    est = f(pts, y, g, XY)
                    t[name].append(time.perf_counter() - t0)
            for name, f in ms.items():
                q[name].append(psnr(f(pts, y, g, XY), ref, inside))
        base = float(np.median(t["griddata cubic"]))
        for name in ms:
            med = float(np.median(t[name]))
            print(f"| {P} | {noise:g} | {name} | {np.mean(q[name]):.2f} ({min(q[name]):.2f}..{max(q[name]):.2f}) "
                  f"| {med:.4f} | {med / base:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
