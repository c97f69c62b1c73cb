"""Argument checks shared by the public API. Every failure names the argument.

A wrong *type* (a string where a number or an array is expected, None where one is required, a
complex or object array) raises TypeError; a wrong *value* (negative, NaN, out of range, a wrong
shape) raises ValueError; a size whose memory is over the budget raises MemoryError before
anything is allocated (``check_budget``). One helper per kind of check.
"""
from __future__ import annotations

import numbers
import os
import time
from typing import Optional, Sequence, Tuple

import numpy as np

#: Largest ``threads`` any kernel accepts (OpenMP runtimes crash far above the core count).
MAX_THREADS = 1024
#: Bytes one call may allocate; None: ``KRONPE_MEMORY_BUDGET`` (bytes) if set, else the memory
#: available now (MemAvailable). Tests lower it.
MEMORY_BUDGET: Optional[int] = None
#: Allocations up to this many bytes are never refused (the budget guards against huge sizes).
NEVER_REFUSED = 64 << 20
INT64_MAX = np.iinfo(np.int64).max


def describe(value) -> str:
    """``value`` for an error message: its type and a short repr."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


# ---- scalars ------------------------------------------------------------------------------------


def integer(name: str, value, low: Optional[int] = None, high: Optional[int] = None) -> int:
    """int(value) for an integer (not a bool) in [low, high]; TypeError / ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {describe(value)}")
    v = int(value)
    if (low is not None and v < low) or (high is not None and v > high):
        if high is not None:
            what = f"an integer in [{'-inf' if low is None else low}, {high}]"
        else:
            what = {0: "a non-negative integer", 1: "a positive integer"}.get(low, f"an integer >= {low}")
        raise ValueError(f"{name} must be {what}, got {v}")
    return v


def positive_int(name: str, value) -> int:
    return integer(name, value, low=1)


def nonnegative_int(name: str, value) -> int:
    return integer(name, value, low=0)


def threads(name: str, value) -> int:
    """OpenMP threads: None (0: OpenMP's default) or an integer in [1, MAX_THREADS]."""
    return 0 if value is None else integer(name, value, 1, MAX_THREADS)


def _real(name: str, value, ok, kind: str) -> float:
    """float(value) when it is a real number (not a bool), finite, and ``ok(v)``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a {kind} number, got {describe(value)}")
    v = float(value)
    if not np.isfinite(v) or not ok(v):
        raise ValueError(f"{name} must be a {kind} finite number, got {value!r}")
    return v


def positive_float(name: str, value) -> float:
    return _real(name, value, lambda v: v > 0, "positive")


def nonnegative_float(name: str, value) -> float:
    return _real(name, value, lambda v: v >= 0, "non-negative")


def finite_nonzero(name: str, value) -> float:
    return _real(name, value, lambda v: v != 0, "non-zero")


def choice(name: str, value, options: Sequence[str]) -> str:
    """One of the strings ``options``."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {', '.join(map(repr, options))}, got {describe(value)}")
    if value not in options:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, options))}, got {value!r}")
    return value


def nonnegative_or_choice(name: str, value, options: Sequence[str]):
    """A non-negative finite number, or one of the strings ``options`` (e.g. ridge or "gcv")."""
    if isinstance(value, str):
        if value not in options:
            raise ValueError(f"{name} must be a non-negative number or one of {', '.join(map(repr, options))}, "
                             f"got {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a non-negative number or one of {', '.join(map(repr, options))}, "
                        f"got {describe(value)}")
    return nonnegative_float(name, value)


def sequence(name: str, value, what: str) -> list:
    """``value`` as a list (a list, tuple or other iterable that is not a string or a mapping)."""
    if value is None or isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{name} must be a sequence of {what}, got {describe(value)}")
    return list(value)


# ---- arrays -------------------------------------------------------------------------------------


def real_dtype(name: str, dtype) -> np.dtype:
    """The dtype of real numbers (bool, integer, float); TypeError for complex, object, strings."""
    dt = np.dtype(dtype)
    if dt.kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers (bool, integer or float), got dtype {dt}")
    return dt


def real_array(name: str, x) -> np.ndarray:
    """A NumPy array of real numbers from an array-like (CPU torch tensors are viewed)."""
    if isinstance(x, np.ndarray):
        arr = x
    else:
        if x is None or isinstance(x, (str, bytes, dict, set)):
            raise TypeError(f"{name} must be an array of real numbers, got {describe(x)}")
        from . import arrays

        try:
            arr = arrays.to_numpy(x, name)
        except (TypeError, ValueError) as exc:
            if name in str(exc):
                raise
            raise ValueError(f"{name} must be an array of real numbers: {exc}") from None
    real_dtype(name, arr.dtype)
    return arr


def bool_array(name: str, x, shape: Sequence[int]) -> np.ndarray:
    """A NumPy bool array of exactly ``shape`` (TypeError for another dtype, ValueError for
    another shape)."""
    if x is None or isinstance(x, (str, bytes, dict, set, numbers.Number)):
        raise TypeError(f"{name} must be a boolean array of shape {tuple(shape)}, got {describe(x)}")
    from . import arrays

    arr = x if isinstance(x, np.ndarray) else arrays.to_numpy(x, name)
    if arr.dtype != np.bool_:
        raise TypeError(f"{name} must be a boolean array (True = observed), got dtype {arr.dtype}")
    if tuple(arr.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)} (the signal's grid), got {arr.shape}")
    return arr


def float_dtype(name: str, arr: np.ndarray, default=np.float64) -> np.dtype:
    """float32 stays float32, float64 stays float64; integers and bools go to ``default``."""
    dt = real_dtype(name, arr.dtype)
    return dt if dt in (np.float32, np.float64) else np.dtype(default)


def compact(arr: np.ndarray) -> np.ndarray:
    """``arr`` without its repeated (zero-stride, broadcast) axes: the same set of values."""
    if arr.ndim == 0 or 0 not in arr.strides or arr.size == 0:
        return arr
    return arr[tuple(slice(0, 1) if s == 0 else slice(None) for s in arr.strides)]


def column_range(arr: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(min, max) of every column of a 2-D array with at least one row, one strided 1-D reduction
    per column (NumPy's axis-0 reduction of a C-ordered (P, D) array runs a D-long inner loop per
    row: 25 times slower for 200k points in 3-D)."""
    cols = range(arr.shape[1])
    return np.array([arr[:, i].min() for i in cols]), np.array([arr[:, i].max() for i in cols])


def finite(name: str, arr: np.ndarray) -> None:
    arr = compact(arr)
    if arr.size and not np.isfinite(arr).all():
        bad = "NaN" if np.isnan(arr).any() else "Inf"
        raise ValueError(f"{name} must be finite, found {bad}")


def coords_1d(name: str, x, dtype=None, unit: bool = True) -> np.ndarray:
    """A 1-D array of finite coordinates (in [0, 1] when ``unit``), as float32 or float64."""
    arr = real_array(name, x)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of coordinates, got shape {arr.shape}")
    dt = float_dtype(name, arr) if dtype is None else np.dtype(dtype)
    check_budget(name, arr.size * dt.itemsize, f"pass fewer {name}")
    arr = arr.astype(dt, copy=False)
    finite(name, arr)
    if not unit:
        return arr
    small = compact(arr)
    if arr.size and (small.min() < 0 or small.max() > 1):
        raise ValueError(
            f"{name} must lie in [0, 1], got values in [{small.min():g}, {small.max():g}]"
        )
    return arr


def separate(out: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``x``, copied when it shares memory with ``out`` (a result written in place)."""
    if isinstance(out, np.ndarray) and np.may_share_memory(out, x):
        return np.array(x, copy=True)
    return x


# ---- sizes --------------------------------------------------------------------------------------

_AVAILABLE = [0.0, 0]  # (time read, bytes)


def _available_memory() -> int:
    now = time.monotonic()
    if now - _AVAILABLE[0] > 1.0:
        avail = 0
        try:
            with open("/proc/meminfo") as f:
                for line in f:
                    if line.startswith("MemAvailable:"):
                        avail = int(line.split()[1]) * 1024
                        break
        except (OSError, ValueError):
            pass
        if not avail:
            try:
                avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
            except (AttributeError, ValueError, OSError):
                avail = 1 << 40
        _AVAILABLE[:] = [now, avail]
    return int(_AVAILABLE[1])


def memory_budget() -> int:
    """Bytes one call may allocate (see MEMORY_BUDGET)."""
    if MEMORY_BUDGET is not None:
        return int(MEMORY_BUDGET)
    env = os.environ.get("KRONPE_MEMORY_BUDGET")
    if env:
        try:
            return int(float(env))
        except ValueError:
            pass
    return _available_memory()


def _fmt(nbytes: int) -> str:
    for unit, shift in (("EiB", 60), ("PiB", 50), ("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.3g} {unit}"
    return f"{nbytes} bytes"


def size_product(name: str, sizes: Sequence[int]) -> int:
    """prod(sizes), ValueError naming ``name`` when it passes int64."""
    total = 1
    for n in sizes:
        total *= int(n)
    if total > INT64_MAX:
        raise ValueError(f"{name}: the sizes {tuple(int(n) for n in sizes)} multiply to {total}, "
                         "beyond int64 (at most 2^63 - 1 elements)")
    return total


def check_budget(name: str, nbytes: int, hint: str) -> None:
    """MemoryError naming ``name`` when ``nbytes`` is over the memory budget (before allocating)."""
    nbytes = int(nbytes)
    if nbytes <= NEVER_REFUSED:  # small allocations: no budget lookup on the hot paths
        return
    budget = memory_budget()
    if nbytes > budget:
        raise MemoryError(f"{name}: this needs {_fmt(nbytes)} of memory, more than the budget of "
                          f"{_fmt(budget)} (available memory, or KRONPE_MEMORY_BUDGET); {hint}")


def check_array_budget(name: str, shape: Sequence[int], itemsize: int, hint: str) -> int:
    """The element count of ``shape`` after checking its bytes (int64 and budget)."""
    count = size_product(name, shape)
    check_budget(name, size_product(name, (count, itemsize)), hint)
    return count
