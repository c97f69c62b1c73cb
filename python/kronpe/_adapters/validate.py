"""Argument checks shared by the public API. Every failure names the argument."""
from __future__ import annotations

import numbers

import numpy as np


def positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def nonnegative_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def _real(name: str, value, ok, kind: str) -> float:
    """float(value) when it is a real number (not a bool), finite, and ``ok(v)``; else ValueError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a {kind} number, got {value!r}")
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


def float_dtype(name: str, arr: np.ndarray, default=np.float64) -> np.dtype:
    """float32 stays float32, float64 stays float64; integers and bools go to ``default``."""
    dt = np.dtype(arr.dtype)
    if dt in (np.float32, np.float64):
        return dt
    if dt.kind in "biu":
        return np.dtype(default)
    raise ValueError(f"{name} must hold real numbers (float32 or float64), got dtype {dt}")


def finite(name: str, arr: np.ndarray) -> None:
    if arr.size and not np.isfinite(arr).all():
        bad = "NaN" if np.isnan(arr).any() else "Inf"
        raise ValueError(f"{name} must be finite, found {bad}")


def coords_1d(name: str, x, dtype=None) -> np.ndarray:
    """A 1-D array of finite coordinates in [0, 1], as float32 or float64."""
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of coordinates, got shape {arr.shape}")
    dt = float_dtype(name, arr) if dtype is None else np.dtype(dtype)
    arr = arr.astype(dt, copy=False)
    finite(name, arr)
    if arr.size and (arr.min() < 0 or arr.max() > 1):
        raise ValueError(
            f"{name} must lie in [0, 1], got values in [{arr.min():g}, {arr.max():g}]"
        )
    return arr
