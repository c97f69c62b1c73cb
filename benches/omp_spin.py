"""How much CPU the OpenMP threads burn while idle after a parallel region (busy-waiting).

Runs a torch matmul (1024^2) and a kronpe.torch blend (2 M points, 4 corners, 3 channels) on 2
threads, then sleeps 20 ms and reports the process's CPU time during the sleep (mean of 20):
CPU spent while the program does nothing is threads spinning. Compare
``python benches/omp_spin.py`` with ``OMP_WAIT_POLICY=passive python benches/omp_spin.py``.
"""
from __future__ import annotations

import os
import sys
import time

_PY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python")
if _PY not in sys.path:  # benches run from the source tree when kronpe is not installed
    sys.path.insert(0, _PY)

import torch  # noqa: E402

import kronpe.torch as kt  # noqa: E402


def idle_cpu_ms(fn, calls: int = 20, sleep: float = 0.02) -> float:
    """Mean CPU time (ms) of this process during a ``sleep`` after each call of ``fn``."""
    total = 0.0
    for _ in range(calls):
        fn()
        c0 = time.process_time()
        time.sleep(sleep)
        total += time.process_time() - c0
    return total / calls * 1e3


def main() -> None:
    torch.set_num_threads(2)
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 100_000, (2_000_000, 4), generator=g)
    w = torch.rand(2_000_000, 4, generator=g)
    V = torch.randn(100_000, 3, generator=g)
    a = torch.randn(1024, 1024, generator=g)
    print(f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')} GOMP_SPINCOUNT={os.environ.get('GOMP_SPINCOUNT')}")
    print("CPU ms burnt in the 20 ms after: torch matmul %.2f, kronpe blend %.2f, nothing %.2f" % (
        idle_cpu_ms(lambda: a @ a), idle_cpu_ms(lambda: kt.blend(V, idx, w)), idle_cpu_ms(lambda: None)))


if __name__ == "__main__":
    main()
