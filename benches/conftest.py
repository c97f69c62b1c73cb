"""Shared helpers of the benchmarks (pytest-benchmark).

Run them with ``python -m pytest benches --benchmark-only`` (plain ``pytest`` collects tests/
only); ``--benchmark-disable`` runs every benchmark once, untimed, with its checks. Each benchmark sets ``benchmark.group`` so that kronpe and its baselines land in one
table (the cases, peers and checks are kronpe.bench's: ``kronpe bench`` runs the same ones with its
own interleaved timer), records its floating-point operation count in ``benchmark.extra_info["flops"]`` where one
is defined, and asserts that its result is right. ``benches/report.py`` turns the JSON of a run
(``--benchmark-json=FILE``) into ratio tables.
"""
from __future__ import annotations

import os
import sys
from typing import Callable

import numpy as np
import pytest

# benches import kronpe from the source tree when it is not installed (tools/dev_build.sh)
_PY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python")
if _PY not in sys.path:
    sys.path.insert(0, _PY)

# the cases, peers and checks live in kronpe.bench (``kronpe bench`` runs the same ones)
from kronpe.bench.chains import chain_flops, cheapest_chain_flops, relative_error  # noqa: E402,F401


def run_timed(benchmark, fn: Callable, rounds: int, *args):
    """``benchmark.pedantic`` with one warm-up round; returns fn's result."""
    return benchmark.pedantic(fn, args=args, rounds=rounds, iterations=1, warmup_rounds=1)


def median_seconds(benchmark):
    """The median of the rounds pytest-benchmark timed; None when it did not time them
    (``--benchmark-disable``: every benchmark then runs once, as a check)."""
    return benchmark.stats.stats.median if benchmark.stats else None


def assert_close(got, want, rtol: float, what: str) -> None:
    """max |got - want| <= rtol * max |want| (a relative check that tolerates cancellation)."""
    err = relative_error(got, want)
    assert err <= rtol, f"{what}: relative error {err:.3g} > {rtol:g}"


@pytest.fixture(scope="session")
def rng():
    return np.random.default_rng(20240601)


def pytest_benchmark_update_machine_info(config, machine_info):
    """Record what shapes the timings: threads, BLAS, kronpe's build and the load at the start."""
    import kronpe

    machine_info["kronpe"] = {k: str(v) for k, v in kronpe.build_info().items()}
    machine_info["thread_env"] = {
        k: os.environ.get(k, "")
        for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    }
    machine_info["numpy"] = np.__version__
    try:
        machine_info["loadavg_at_start"] = os.getloadavg()
    except OSError:  # pragma: no cover - not on every platform
        pass
