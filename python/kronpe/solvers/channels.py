"""The channels of the default fill (:mod:`.smooth`), solved one after the other in the
orthonormal basis of their second moments (``principal_basis``), strongest first: the solution is
the same (the basis is orthonormal and every channel sees the same operator), and the weak
components converge in an iteration or two. Here: that basis, the channels mixed into it and back
(``mix_planes``, ``unmix``, one compiled pass each: no BLAS threads), and the one signal lambda is
held out on (``selection_signal``).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from .. import _core

Array = np.ndarray
SELECTION_SUM_SHARE = 0.5  # the channels' sum is the selection signal unless it holds less of the variance


def as_planes(rhs) -> List[Array]:
    """A right-hand side as C contiguous float32 planes: a list of them as it is, or (N..., C)."""
    if isinstance(rhs, (list, tuple)):
        return [np.ascontiguousarray(p, dtype=np.float32) for p in rhs]
    return channel_planes(np.asarray(rhs, np.float32))


def channel_planes(X: Array) -> List[Array]:
    """The channels of X (..., C) as C contiguous float32 arrays (copied once: mixing strided
    channels would cost five times as much for a 512^2 RGB image)."""
    return [np.ascontiguousarray(X[..., c], dtype=np.float32) for c in range(X.shape[-1])]


def mix_planes(planes: List[Array], V: Array) -> List[Array]:
    """sum_k V[k, c] planes[k] for every column c, in float32, one compiled pass (no BLAS threads)."""
    V = np.asarray(V, np.float32)
    if len(planes) == 1 and V[0, 0] == 1:
        return [planes[0]]
    out = [np.empty_like(planes[0]) for _ in range(V.shape[1])]
    _core.mix_channels([p.reshape(-1) for p in planes], np.ascontiguousarray(V), [o.reshape(-1) for o in out])
    return out


def unmix(planes: List[Array], V: Array, out: Array, value_range: Optional[Tuple[Array, Array]]) -> float:
    """out[..., c] = sum_k V[k, c] planes[k] (out C-contiguous (N..., C)), each channel clipped to
    its (min, max) of ``value_range`` (None: not clipped) on the way: one compiled pass
    (``_core.mix_channels``; NumPy's multiply-adds, clips and counts per channel would take 1.1 ms
    at 451 x 300 RGB). Returns the fraction of values clipped."""
    C = V.shape[1]
    if not out.flags.c_contiguous:  # (reshape would copy: the writes would be lost)
        tmp = np.empty(out.shape, out.dtype)
        frac = unmix(planes, V, tmp, value_range)
        out[...] = tmp
        return frac
    cols = list(out.reshape(-1, C).T)  # the channels of out, element stride C
    lo = hi = None
    if value_range is not None:
        lo, hi = (np.ascontiguousarray(np.asarray(v, out.dtype).reshape(-1)) for v in value_range)
    n = _core.mix_channels([p.reshape(-1) for p in planes], np.ascontiguousarray(V, out.dtype), cols, lo, hi)
    return n / max(out.size, 1)


def principal_basis(planes: List[Array], moments: Optional[Array] = None) -> Array:
    """The orthonormal (C, C) basis of the channels' second moments (``moments``: ``second_moments(planes)``
    when the caller has it), strongest first (the identity for one channel); ``planes`` the C
    channels as arrays of one shape."""
    C = len(planes)
    if C == 1:
        return np.ones((1, 1), np.float32)
    w, V = np.linalg.eigh(second_moments(planes) if moments is None else moments)
    return np.ascontiguousarray(V[:, ::-1], dtype=np.float32)


def second_moments(planes: List[Array]) -> Array:
    """(C, C) sums of products of the planes (compiled dot products in float64, every pair of a
    block in one pass: no BLAS threads)."""
    C = len(planes)
    return np.array(_core.dots([np.ascontiguousarray(p) for p in planes])).reshape(C, C)


def selection_signal(planes: List[Array], count: float, moments: Optional[Array] = None,
                      basis: Optional[Array] = None, leading: Optional[Array] = None) -> Tuple[Array, bool]:
    """The one signal lambda is chosen on, and whether it is ``basis``' leading component: that
    component (``basis`` given, the channels' ``principal_basis``: the final solve's first
    component, whose start the sweep's fit then is) or the sum of the channels, unless those
    cancel the channels (the sum's variance less than SELECTION_SUM_SHARE of the leading
    principal component's of the covariance, over the ``count`` samples; the planes are sums of
    samples at nodes, or the samples themselves): then that centred component. (Channels a and
    1 - a sum to a constant, which any lambda fits: the choice would be left to rounding noise. On
    photographs the sum holds 90%+ of the leading centred component's variance; that component
    itself chose another lambda on rocket, 25% of its pixels, 0.08 dB worse. The sum and the
    leading component of the second moments chose the same lambda, boundary and lead penalty on
    the twelve photograph rows.) ``moments``: ``second_moments(planes)`` when the caller has them.
    The means are float32 sums (float64 ones would cost 70 us per 451 x 300 channel). ``leading``:
    that component itself (``mix_planes``' first), when the caller has it: the same values, not
    mixed again (a pass of 0.1 ms at 451 x 300 RGB)."""
    C = len(planes)
    if C == 1:
        return planes[0], True
    n = max(count, 1.0)
    mean = np.array([float(p.sum()) for p in planes]) / n
    cov = (second_moments(planes) if moments is None else moments) / n - np.outer(mean, mean)
    w, V = np.linalg.eigh(cov)
    ones = np.full(C, 1.0 / np.sqrt(C))
    share = float(ones @ cov @ ones) / max(float(w[-1]), 1e-300)
    lead = share >= SELECTION_SUM_SHARE and basis is not None
    if lead and leading is not None:
        return leading, True
    v = basis[:, 0] if lead else (np.ones(C) if share >= SELECTION_SUM_SHARE else V[:, -1])
    y = np.empty_like(planes[0])
    _core.mix_channels([np.ascontiguousarray(p).reshape(-1) for p in planes], np.ascontiguousarray(v, y.dtype).reshape(C, 1),
                       [y.reshape(-1)])
    return y, lead
