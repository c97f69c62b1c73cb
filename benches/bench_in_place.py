"""The packed GEMM's choice for a chain step's transposed operand, read in place or packed first,
on the chains of ``kronpe bench --suite chains`` whose steps make it (A = X^T, k <= 128).

Each kernel has its own limit (``Vec<T>::in_place_panels`` in csrc/cpu/packed_gemm.cpp: AVX-512
reads in place whatever the width of B, AVX2 up to 4 panels), measured on the AMD development
machine. This script measures the chains with every step read in place, every step packed and
the kernels' own choice (``kronpe._core._tuning.set_in_place_panels``), beside NumPy's tensordot
chain, interleaved, at one thread and at the default: on another CPU (an Intel core, whose
prefetchers and L1 differ) the table says whether the limit holds there.

    PYTHONPATH=python python benches/bench_in_place.py [rounds]
"""
from __future__ import annotations

import os
import sys

import numpy as np

_PY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python")
if _PY not in sys.path:
    sys.path.insert(0, _PY)

import kronpe  # noqa: E402
from kronpe import _core  # noqa: E402
from kronpe.bench.harness import Case, Method, measure  # noqa: E402

CHAINS = [(3, 64, 64), (3, 128, 128), (3, 64, 128), (3, 96, 96), (4, 64, 64), (2, 256, 512)]  # (D, n, m)
SETTINGS = {"kronpe, own limit": -1, "kronpe, all packed": 0, "kronpe, all in place": 1 << 40}
PEER = "numpy tensordot chain"


def tensordot_chain(T, mats):
    for A in mats:  # contracts the leading axis, appends the new one: the same order as the chain
        T = np.tensordot(T, A, axes=([0], [1]))
    return T


def kronpe_with(panels: int):
    def run(s):  # the setting is put in force by each call (the harness's warm call included)
        _core._tuning.set_in_place_panels(panels)
        return kronpe.multi_mode_product(s["T"], s["mats"])
    return run


def case(D: int, n: int, m: int) -> Case:
    def setup():
        rng = np.random.default_rng(0)
        return {"T": rng.standard_normal((n,) * D).astype(np.float32),
                "mats": [rng.standard_normal((m, n)).astype(np.float32) for _ in range(D)]}

    methods = [Method(name, kronpe_with(v), peer=False) for name, v in SETTINGS.items()]
    methods.append(Method(PEER, lambda s: tensordot_chain(s["T"], s["mats"])))
    return Case("in place", f"D={D} {n}->{m}", setup, methods)


def run(rounds: int, threads) -> str:
    """The table: per chain and thread setting (None: the default), each method's median ms and
    its ratio to the tensordot chain, timed by kronpe.bench's harness."""
    lines = [f"| chain | threads | {' | '.join(SETTINGS)} | {PEER} |", "|---|---|" + "---:|" * (len(SETTINGS) + 1)]
    try:
        for D, n, m in CHAINS:
            for th in threads:
                med = {r["name"]: r["stats"]["median"] * 1e3 for r in measure(case(D, n, m), rounds, threads=th)}
                cells = " | ".join(f"{med[k]:.3f} ({med[k] / med[PEER]:.2f}x)" for k in [*SETTINGS, PEER])
                lines.append(f"| D={D} {n}->{m} | {th or 'default'} | {cells} |")
    finally:
        _core._tuning.set_in_place_panels(-1)
    return "\n".join(lines)


if __name__ == "__main__":
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    print(f"kronpe chain GEMM: {kronpe.build_info().get('chain_gemm')}; median ms (x tensordot chain), {rounds} rounds")
    print(run(rounds, [1, None]))
