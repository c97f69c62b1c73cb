"""Mode-n product chains: kronpe.multi_mode_product against the ways a user would write them.

The cases and peers are kronpe.bench.chains' (``kronpe bench --suite chains`` runs the same ones
interleaved): float32 and float64 tensors (n,) * D through one matrix per axis, (m, n), against
numpy.einsum(optimize=True), NumPy and torch tensordot chains, torch.einsum, tensorly's
multi_mode_dot and pyfastkron's gemkm (each skipped when it does not import). The raw BLAS rate of
the machine (a float32 square matmul) is measured in the same run, so report.py can state each
method's GFLOP/s as a fraction of it.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close, run_timed
from kronpe.bench.chains import (
    CASES,
    METHODS,
    chain_inputs,
    chain_tolerance,
    cheapest_chain_flops,
    group_name,
)
from kronpe.bench.harness import missing_module

BLAS_N = 3072  # side of the square float32 matmul that measures the BLAS rate

_INPUTS: dict = {}


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("D, n, m, rounds, dtype", [c[:4] + c[5:] for c in CASES],
                         ids=[f"D{d}-{n}to{m}-{dt}" for d, n, m, _, _, dt in CASES])
def test_mode_chain(benchmark, method, D, n, m, rounds, dtype):
    fn, peer, needs = METHODS[method]
    missing = missing_module(needs)
    if missing:
        pytest.skip(f"{missing} does not import here")
    key = (D, n, m, dtype)
    if key not in _INPUTS:
        _INPUTS[key] = chain_inputs(D, n, m, dtype=dtype)
    T, mats, factors, ref = _INPUTS[key]
    benchmark.group = group_name(D, n, m, dtype)
    benchmark.extra_info.update(method=method, peer=peer, D=D, n=n, m=m, dtype=dtype,
                                flops=cheapest_chain_flops((n,) * D, (m,) * D), size=float(n**D))
    out = run_timed(benchmark, fn, rounds, T, mats, factors)
    assert np.asarray(out).dtype == np.dtype(dtype)
    assert_close(out, ref, chain_tolerance(n, dtype), f"{method} D={D} {n}->{m} {dtype}")


def test_blas_rate(benchmark):
    """The machine's float32 matrix-product rate: numpy matmul of two BLAS_N x BLAS_N matrices."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((BLAS_N, BLAS_N), dtype=np.float32)
    b = rng.standard_normal((BLAS_N, BLAS_N), dtype=np.float32)
    benchmark.group = "BLAS rate"
    benchmark.extra_info.update(method="numpy.matmul float32", n=BLAS_N, flops=2 * BLAS_N**3, blas_rate=True)
    c = run_timed(benchmark, np.matmul, 5, a, b)
    # spot-check a few entries in float64
    rows = np.arange(0, BLAS_N, 511)
    want = a[rows].astype(np.float64) @ b[:, rows].astype(np.float64)
    assert_close(c[np.ix_(rows, rows)], want, 1e-4, "BLAS matmul")
