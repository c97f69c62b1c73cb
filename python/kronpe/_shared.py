"""Private helpers that modules of several layers share (not public API).

The one place for small rules that the public modules (``resampling``, ``dask``), the solvers and
the command line each need: how many leading axes of an array are grid axes, the two ridge
arguments (a grid fit's and a scattered fit's), and the outer product of per-axis vectors.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import numpy as np

from ._adapters import validate as _validate

__all__ = ["Ridge", "guess_ndim", "ridge_or_gcv", "ridge_or_auto", "outer"]

#: A grid fit's ridge: a non-negative number, or "gcv" (chosen by generalised cross-validation).
Ridge = Union[float, str]


def guess_ndim(shape: Tuple[int, ...]) -> int:
    """All axes are grid axes, except a last axis of 1 to 4 (RGB/RGBA) on a 3-D+ signal."""
    if len(shape) == 0:
        raise ValueError("signal must have at least one axis")
    if len(shape) >= 3 and shape[-1] <= 4:
        return len(shape) - 1
    return len(shape)


def ridge_or_gcv(ridge) -> Ridge:
    """A grid fit's ridge: a non-negative number, or "gcv"."""
    return _validate.nonnegative_or_choice("ridge", ridge, ("gcv",))


def ridge_or_auto(ridge) -> Optional[float]:
    """A scattered fit's ridge: a non-negative number, or None for "auto" (or None): held out."""
    if ridge is None:
        return None
    value = _validate.nonnegative_or_choice("ridge", ridge, ("auto",))
    return None if value == "auto" else value


def outer(vectors: Sequence[np.ndarray]) -> np.ndarray:
    """The outer product of per-axis vectors, float64: shape (len(v_1), ..., len(v_D))."""
    out = np.asarray(vectors[0], dtype=np.float64)
    for v in vectors[1:]:
        out = np.multiply.outer(out, v)
    return out


def gemm_operand(X, dtype) -> np.ndarray:
    """A new C-ordered copy of ``X`` in ``dtype`` for kronpe's products, its subnormal entries 0.

    Cached factors (pseudo-inverses, singular vectors) of a decaying basis hold many entries below
    the smallest normal float32 (a Gaussian plan's pseudo-inverses: 8%); they change nothing at
    that scale, but as GEMM operands each costs a microcode assist on many x86 cores (that fit ran
    25 times slower there)."""
    out = np.array(X, dtype=dtype, order="C", copy=True)
    out[np.abs(out) < np.finfo(out.dtype).tiny] = 0
    return out
