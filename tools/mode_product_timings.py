"""Quick timings: kronpe.multi_mode_product against numpy.einsum(optimize=True), a tensordot
chain and tensorly.tenalg.multi_mode_dot (float32, D = 2, 3, 4, 64..512 per axis, with and
without 3 carried channels). Each case runs the methods in interleaved rounds and keeps each
one's best time. Not a test; benches/ holds the pytest-benchmark suite.

    PYTHONPATH=python python tools/mode_product_timings.py            # wall clock
    TIMER=cpu OPENBLAS_NUM_THREADS=1 PYTHONPATH=python python tools/mode_product_timings.py
      (single-threaded BLAS, process CPU time: steadier on a shared machine)

Rounds are interleaved by default; BLOCKS=1 times each method in its own block of consecutive
calls instead. With multi-threaded BLAS prefer BLOCKS=1: NumPy and SciPy load two OpenBLAS
copies whose worker threads keep spinning for a while after each call, so alternating between
them (as interleaving does) makes each wait for the other's idle threads on a 2-core machine.
"""
from __future__ import annotations

import os
import time

import numpy as np

from kronpe import _core, ops

clock = time.process_time if os.environ.get("TIMER") == "cpu" else time.perf_counter


def einsum_chain(T, mats):
    operands = [T, list(range(T.ndim))]
    out = list(range(T.ndim))
    for k, A in enumerate(mats):
        operands += [A, [T.ndim + k, k]]
        out[k] = T.ndim + k
    return np.einsum(*operands, out, optimize=True)


def tensordot_chain(T, mats):
    """Contract the leading axis each time; the new axis goes last."""
    for A in mats:
        T = np.tensordot(T, A, axes=([0], [1]))
    if T.ndim > len(mats):  # carried axes came first: put them back last
        T = np.moveaxis(T, list(range(T.ndim - len(mats))), list(range(len(mats), T.ndim)))
    return T


def tensorly_chain(T, mats):
    from tensorly.tenalg import multi_mode_dot

    return multi_mode_dot(T, mats, modes=list(range(len(mats))))


def raw_rate(n: int = 1024) -> float:
    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    c = np.empty_like(a)
    best = np.inf
    for _ in range(10):
        t = clock()
        _core.gemm("float32", False, False, n, n, n, 1.0, a.ctypes.data, n, a.ctypes.data, n, 0.0, c.ctypes.data, n)
        best = min(best, clock() - t)
    return 2 * n**3 / best


def main() -> None:
    cases = [(d, n, m, c) for d, ns in [(2, [64, 128, 256, 512]), (3, [64, 128, 256]), (4, [64])]
             for n in ns for m in (n, 2 * n) for c in (0, 3) if n**d * (m // n) ** d * max(c, 1) <= 40e6]
    rng = np.random.default_rng(0)
    rate = raw_rate()
    print(f"raw float32 GEMM rate (1024^3, kronpe's BLAS): {rate / 1e9:.1f} GFLOP/s")
    ratios = []
    for d, n, m, c in cases:
        T = rng.standard_normal((n,) * d + ((c,) if c else ()), dtype=np.float32)
        mats = [rng.standard_normal((m, n), dtype=np.float32) / np.float32(np.sqrt(n)) for _ in range(d)]
        methods = {
            "kronpe": lambda: ops.multi_mode_product(T, mats),
            "kronpe C-order": lambda: ops.multi_mode_product(T, mats, order="C"),
            "einsum": lambda: einsum_chain(T, mats),
            "tensordot": lambda: tensordot_chain(T, mats),
            "tensorly": lambda: tensorly_chain(T, mats),
        }
        ref = einsum_chain(T.astype(np.float64), [A.astype(np.float64) for A in mats])
        for name, f in methods.items():
            assert np.abs(f() - ref).max() <= 1e-4 * np.abs(ref).max(), name
        best = dict.fromkeys(methods, np.inf)
        if os.environ.get("BLOCKS"):
            for name, f in methods.items():
                f()
                end, rounds = time.perf_counter() + 1.0, 0
                while rounds < 3 or (time.perf_counter() < end and rounds < 30):
                    t = clock()
                    f()
                    best[name] = min(best[name], clock() - t)
                    rounds += 1
        else:
            end, rounds = time.perf_counter() + 4.0, 0
            while rounds < 3 or (time.perf_counter() < end and rounds < 30):
                for name, f in methods.items():
                    t = clock()
                    f()
                    best[name] = min(best[name], clock() - t)
                rounds += 1
        flops, size = 0, T.size
        for _ in range(d):
            flops += 2 * size * m
            size = size // n * m
        peer = min(best["einsum"], best["tensordot"], best["tensorly"])
        ratios.append((peer / best["kronpe"], peer / best["kronpe C-order"], best["einsum"] / best["kronpe"]))
        print(f"D={d} {n:4d}->{m:4d} C={c}: " + "  ".join(f"{k} {v * 1e3:8.3f}" for k, v in best.items())
              + f" ms | kronpe {flops / best['kronpe'] / rate:4.0%} of raw; best peer / kronpe "
              f"{ratios[-1][0]:.2f} (C-order {ratios[-1][1]:.2f}); einsum / kronpe {ratios[-1][2]:.2f}", flush=True)
    r = np.array(ratios)
    print(f"best peer / kronpe: median {np.median(r[:, 0]):.2f}, min {r[:, 0].min():.2f}; "
          f"C-order median {np.median(r[:, 1]):.2f}, min {r[:, 1].min():.2f}; "
          f"einsum / kronpe median {np.median(r[:, 2]):.2f}, min {r[:, 2].min():.2f}")


if __name__ == "__main__":
    main()
