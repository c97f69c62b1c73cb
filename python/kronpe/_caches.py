"""Every cache kronpe keeps between calls, in one place.

Modules that keep something between calls (factorisations, resampling operators, small tables)
register how to forget it; ``clear()`` (``kronpe.clear_caches``) forgets all of it, with the
compiled core's kept work memory and planned chains and the CUDA device blocks: the next call
starts cold, as in a new process.
"""
from __future__ import annotations

from typing import Callable, List

_CLEARERS: List[Callable[[], None]] = []


def register(clear: Callable[[], None]) -> Callable[[], None]:
    """Add ``clear`` (no arguments) to what ``clear()`` calls; returns it."""
    _CLEARERS.append(clear)
    return clear


def clear() -> None:
    from . import _core, cuda

    for fn in list(_CLEARERS):
        fn()
    _core.clear_caches()
    if cuda.is_available():
        cuda.empty_cache()
