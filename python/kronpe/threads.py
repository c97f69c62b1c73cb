"""How many threads kronpe's CPU work uses on the NumPy side.

kronpe's own kernels (blending matrix products, the embedders) run on OpenMP, and its matrix
products on SciPy's BLAS (OpenBLAS in SciPy's wheels). :func:`set_num_threads` sets both; a call's
``threads=`` argument (``BlendingMatrix(..., threads=)``) still wins for that call.

``kronpe.torch`` does not follow this setting: there small matrix products run on torch's own
BLAS, large ones of a chain on kronpe's packed GEMM where the CPU has AVX-512 or AVX2, and kronpe's kernels
use ``torch.get_num_threads()`` threads (at most; small products run on fewer). kronpe and torch load the same OpenMP runtime (one ``libgomp.so.1`` per
process), so kronpe's kernels add no thread pool beside torch's.

Busy-waiting: libgomp's threads spin for a while after each parallel region before they sleep
(its default when ``OMP_WAIT_POLICY`` is unset). That policy belongs to the runtime, is read once
when it loads, and is the same for torch's operators and kronpe's kernels (benches/omp_spin.py:
with 2 threads the 20 ms after a torch 1024^2 matmul burn ~9 ms of CPU, after a kronpe blend of
2 M points ~5 ms; with ``OMP_WAIT_POLICY=passive`` both burn none). On a machine shared with other
busy processes set ``OMP_WAIT_POLICY=passive`` (for torch and kronpe alike) before starting Python:
the others get those cycles back, though kronpe's short kernels then wake a sleeping thread at
every region (a masked 451 x 300 RGB fill on two threads: 34 ms instead of 13). When another busy
process holds one of the CPUs kronpe's team runs on, its teams wait for the slower CPU at every
barrier: on two CPUs with a busy loop pinned to one, that fill took 20.6-22.7 ms on two threads and
19.7-20.2 on one, so ``set_num_threads(1)`` is then the faster choice.

kronpe never changes the CPU affinity of threads: OpenMP's workers are shared with NumPy, torch
and the user's own pinning (``OMP_PROC_BIND``, ``taskset``), which stay theirs to set.
"""
from __future__ import annotations

from typing import Optional

from . import _core
from ._adapters import blas as _blas
from ._adapters import validate as _validate

__all__ = ["set_num_threads", "get_num_threads"]


def set_num_threads(n: Optional[int]) -> None:
    """Use ``n`` threads for kronpe's CPU kernels and SciPy's BLAS under them.

    Parameters
    ----------
    n : int or None
        1 to ``MAX_THREADS``; None goes back to the defaults (OpenMP's, i.e. ``OMP_NUM_THREADS``
        or the number of cores, for kronpe's kernels; the BLAS keeps the count last set).

    Examples
    --------
    >>> import kronpe
    >>> kronpe.set_num_threads(1)   # e.g. one process per core
    >>> kronpe.get_num_threads()
    1
    """
    count = _validate.threads("n", n)
    _core.set_num_threads(count)
    if count:
        _blas.set_blas_threads(count)


def get_num_threads() -> int:
    """The number of threads kronpe's CPU kernels use when a call does not say."""
    return int(_core.get_num_threads())
