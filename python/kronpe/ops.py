"""Compiled tensor operations: mode-n products (docs/math/encodings.rst, "Mode-n products").

``mode_product(T, A, k)`` multiplies every mode-k fibre of ``T`` by ``A``; ``multi_mode_product``
chains such products over several modes. The chain is planned in C++ (the order that costs the
fewest flops, and for each step one large GEMM or a strided batch of GEMMs on the buffer as it
lies, with a permuting copy only where it is cheaper than many small GEMMs), runs on kronpe's own
packed GEMM with AVX-512 or AVX2 kernels where the CPU has AVX-512, or AVX2 and FMA (else on the
BLAS that NumPy or SciPy loaded; the choice is in ``kronpe.build_info()["chain_gemm"]``), and
releases the GIL. NumPy arrays
in give NumPy out; CPU torch tensors in give torch out (no autograd here: see ``kronpe.torch``). A
CuPy array or a CUDA torch tensor (T or any matrix) runs the same plan on its GPU, GEMMs in cuBLAS,
on the caller's current stream, and gives the same kind on the same device (host operands are
uploaded there; see :mod:`kronpe.cuda` for TF32).

dtypes: float32 when the tensor and every matrix are float32, float64 otherwise (float64,
integers, bools and mixed float32/float64 all compute in float64). Complex input is refused.
Any strides are accepted: a tensor that is one dense block in some axis order (C order, Fortran
order, transposed views) is read in place; any other view (steps, negative strides, broadcasts)
is copied once. The result is one dense block, in C order with ``order="C"``, else in the axis
order that cost least (``order="K"``, the default, as ``numpy.einsum`` does). Values are not checked: NaN and Inf propagate as in ``numpy.einsum``.
"""
from __future__ import annotations

import math
import numbers
import os
import sys
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from . import _core
from ._adapters import arrays as _arrays, validate as _validate

__all__ = ["mode_product", "multi_mode_product"]

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def _chain_layouts(mode: str) -> None:
    """How the CPU planner costs the four GEMM layouts of a step: "fixed" (default: the built-in
    penalties, plans never depend on timings) or "measured" (a short timing per shape class, the
    first time a plan needs it, kept for the process). From ``KRONPE_CHAIN_LAYOUTS``.

    "measured" is not the default: the layouts differ by 10% or less at the measured size, so
    short timings on a busy machine pick worse plans (up to 1.8x slower chains on 2 cores) and
    nothing faster, and each new shape class stalls the first call that meets it."""
    mode = mode.strip().lower() or "fixed"
    if mode not in ("measured", "fixed"):
        raise ValueError(f"KRONPE_CHAIN_LAYOUTS must be 'measured' or 'fixed', got {mode!r}")
    _core._tuning.set_mode_layout_measured(mode == "measured")


_chain_layouts(os.environ.get("KRONPE_CHAIN_LAYOUTS", ""))


def _as_float(name: str, x: Any) -> np.ndarray:
    return _validate.real_array(name, x)


def matrix_list(matrices) -> list:
    if isinstance(matrices, np.ndarray) and matrices.ndim == 2:
        raise ValueError("matrices must be a sequence of 2-D arrays (use mode_product for one)")
    if matrices is None or isinstance(matrices, (str, bytes, dict)) or not hasattr(matrices, "__iter__"):
        raise TypeError(f"matrices must be a sequence of 2-D arrays, got {_validate.describe(matrices)}")
    return list(matrices)


def _unbroadcast(t: np.ndarray, mats: List[np.ndarray], modes: Tuple[int, ...]):
    """A broadcast T (zero-stride axes) reduced to one slice per such axis: a matrix on such an
    axis becomes its row sums (m, 1). Returns (t, mats, the result's final shape or None)."""
    if t.size == 0 or 0 not in t.strides:
        return t, mats, None
    final = list(t.shape)
    for j, k in enumerate(modes):
        final[k] = mats[j].shape[0]
    mats = list(mats)
    for k, stride in enumerate(t.strides):
        if stride == 0 and t.shape[k] > 1 and k in modes:
            j = modes.index(k)
            mats[j] = mats[j].sum(axis=1, keepdims=True, dtype=np.float64).astype(mats[j].dtype)
    return _validate.compact(t), mats, tuple(final)


def _check_sizes(shape: Tuple[int, ...], mat_shapes, modes: Tuple[int, ...], itemsize: int) -> None:
    """The result and every intermediate of the chain within the memory budget."""
    bound = list(shape)
    for ms, k in zip(mat_shapes, modes):
        if ms[0] > bound[k]:
            bound[k] = ms[0]
    if math.prod(bound) * itemsize <= _validate.NEVER_REFUSED:  # every step is small (bound >= out)
        return
    out = [int(n) for n in shape]
    for ms, k in zip(mat_shapes, modes):
        out[k] = int(ms[0])
    hint = "the result of T x matrices is too large: multiply fewer rows or a smaller T"
    _validate.check_array_budget("T x matrices", out, itemsize, hint)
    _validate.check_array_budget("T x matrices", bound, itemsize, hint + " (an intermediate of the chain)")


def _mode_list(modes, count: int, ndim: int) -> Tuple[int, ...]:
    if modes is None:
        if count > ndim:
            raise ValueError(
                f"matrices: got {count} matrices for a tensor with {ndim} axes (modes=None "
                "contracts axes 0..len(matrices)-1)"
            )
        return tuple(range(count))
    if isinstance(modes, numbers.Integral) and not isinstance(modes, bool):
        modes = (modes,)
    if isinstance(modes, (str, bytes)) or not hasattr(modes, "__iter__"):
        raise TypeError(f"modes must be a sequence of integer axes, got {_validate.describe(modes)}")
    out = []
    for m in modes:
        if isinstance(m, bool) or not isinstance(m, numbers.Integral):
            raise TypeError(f"modes must be integers, got {_validate.describe(m)}")
        if not -ndim <= m < ndim:
            raise ValueError(f"modes: axis {m} is out of range for a tensor with {ndim} axes")
        out.append(int(m) % ndim)
    if len(set(out)) != len(out):
        raise ValueError(f"modes must be distinct axes, got {tuple(modes)}")
    if len(out) != count:
        raise ValueError(f"modes has {len(out)} entries but {count} matrices were given")
    return tuple(out)


def multi_mode_product(
    T: Any, matrices: Sequence[Any], modes: Optional[Sequence[int]] = None, order: str = "K"
):
    """Chain of mode-n products ``T x_{modes[0]} matrices[0] x ... x_{modes[-1]} matrices[-1]``.

    Parameters
    ----------
    T : array, shape (n_0, ..., n_{d-1})
        Any number of axes (at least one), any strides.
    matrices : sequence of arrays, each of shape (m_j, n_{modes[j]})
    modes : sequence of int, optional
        Distinct axes of ``T`` (negative counts from the end); default ``0..len(matrices)-1``.
        Axes not named are carried along untouched (channels, batches).
    order : {"K", "C"}
        "K" (default, as in ``numpy.einsum``): the result is one dense block whose axes may lie
        in any order (possibly a transposed view), whichever the planner found cheapest: this
        saves a permuting copy, e.g. when channels are last. "C": a C-contiguous result.

    Returns
    -------
    array, shape of ``T`` with n_{modes[j]} replaced by m_j
        A new array (float32 if ``T`` and all matrices are float32, else float64).
    """
    if type(T) is np.ndarray:
        out = _numpy_chain(T, matrices, modes, order)
        if out is not None:
            return out
    out = _torch_cuda_chain(T, matrices, modes, order)
    if out is not None:
        return out
    _validate.choice("order", order, ("K", "C"))
    matrices = matrix_list(matrices)
    kd = _arrays.dask_api(T)
    if kd is not None:  # a dask T: a dask array, the chain run block by block (kronpe.dask)
        return kd.multi_mode_product(T, matrices, modes, order)
    on_device = [x for x in [T, *matrices] if _arrays.is_device(x)]
    if on_device:
        return _device_chain(T, matrices, modes, order, on_device[0])
    template = T
    t = _as_float("T", T)
    mats = [_as_float(f"matrices[{j}]", a) for j, a in enumerate(matrices)]
    mode_tuple = check_chain(t.shape, [a.shape for a in mats], modes)
    dt = t.dtype
    if dt.char not in "fd" or any(a.dtype != dt for a in mats):
        # float32 only when everything is float32; any other mix computes in float64
        all32 = dt.char == "f" and all(a.dtype.char == "f" for a in mats)
        dt = _F32 if all32 else _F64
    out = host_chain(t.astype(dt, copy=False), [a.astype(dt, copy=False) for a in mats], mode_tuple, order)
    return out if template is t else _arrays.like(out, template)


def _quick_modes(modes: Any, matrices: Sequence[Any], shape: Sequence[int]) -> Optional[Tuple[int, ...]]:
    """The short paths' modes: None (0..n-1) or a list or tuple of n distinct plain ints, each
    an axis of a tensor of ``shape`` (negative counts from the end), as a tuple of axes, when
    every matrix is 2-D with as many columns as its axis; else None."""
    n, nd = len(matrices), len(shape)
    if modes is None:
        if n > nd:
            return None
        picked = tuple(range(n))
    else:
        if not isinstance(modes, (list, tuple)) or len(modes) != n:
            return None
        axes = []
        for m in modes:
            if type(m) is not int or not -nd <= m < nd:
                return None
            axes.append(m % nd)
        if len(set(axes)) != n:
            return None
        picked = tuple(axes)
    for a, k in zip(matrices, picked):
        if len(a.shape) != 2 or a.shape[1] != shape[k]:
            return None
    return picked


def _numpy_chain(T: np.ndarray, matrices: Any, modes: Any, order: Any):
    """The chain when T and the matrices (a list or tuple of at least one) are NumPy arrays of one
    native float dtype, T not broadcast, the modes and shapes valid (straight to host_chain),
    else None: the general path then checks, converts and names any error. Small chains are
    mostly call overhead: through the general path an 8^3 x 3 chain spends 70% of its time outside
    the core."""
    dt = T.dtype
    if (dt != _F32 and dt != _F64) or (order != "K" and order != "C"):
        return None
    if type(matrices) is not list and type(matrices) is not tuple:
        return None
    if not matrices or T.ndim == 0 or 0 in T.strides:
        return None
    if any(type(a) is not np.ndarray or a.dtype != dt for a in matrices):
        return None
    mode_tuple = _quick_modes(modes, matrices, T.shape)
    return None if mode_tuple is None else host_chain(T, matrices, mode_tuple, order)


def _torch_cuda_chain(T: Any, matrices: Any, modes: Any, order: Any):
    """The chain when T and the matrices (a list or tuple of at least one) are CUDA torch tensors
    of one float dtype on one device and the modes and shapes are valid (read off the tensors
    directly), else None: the general path then checks, converts and names any error. The usual
    call inside torch models: the general path's checks would take a quarter of a 64^3 x 3 chain's
    time on a GPU machine's host."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(T, torch.Tensor) or not T.is_cuda or (order != "K" and order != "C"):
        return None
    if not isinstance(matrices, (list, tuple)) or not matrices:
        return None
    from ._adapters import cuda as _cuda

    dt = _cuda._one_torch_float(T, matrices)
    if dt is None or T.dim() < 1:
        return None
    mode_tuple = _quick_modes(modes, matrices, T.shape)
    if mode_tuple is None:
        return None
    _cuda.require("multi_mode_product")
    return _cuda._torch_chain(T, matrices, mode_tuple, order, dt)


def host_chain(t: np.ndarray, mats: Sequence[np.ndarray], modes: Tuple[int, ...], order: str = "K") -> np.ndarray:
    """The chain of :func:`multi_mode_product` on validated host operands: NumPy arrays of one
    float dtype, ``modes`` a checked tuple (the solvers call this with what they checked once)."""
    dt = t.dtype
    t, mats, final = _unbroadcast(t, list(mats), modes)
    _check_sizes(t.shape, [a.shape for a in mats], modes, dt.itemsize)
    if final is not None:
        _validate.check_array_budget("T x matrices", final, dt.itemsize, "the result is too large")
    out_shape = list(t.shape)
    for a, k in zip(mats, modes):
        out_shape[k] = a.shape[0]
    buf = _arrays.empty_aligned(out_shape, dt)
    # NumPy arrays are their own descriptors (_arrays.describe), their dtype checked by the caller
    axes = _core.multi_mode_product(t, mats, list(modes), buf, order == "K")
    out = _arrays.logical_view(buf, out_shape, axes)
    if final is not None:
        out = np.array(np.broadcast_to(out, final), order="C" if order == "C" else "K")
    return out


def check_chain(shape: Tuple[int, ...], mat_shapes: Sequence[Tuple[int, ...]], modes) -> Tuple[int, ...]:
    """The mode tuple of a valid chain (ValueError naming the argument otherwise), checked
    before the result is allocated."""
    shape = tuple(map(int, shape))
    if len(shape) < 1:
        raise ValueError(f"T must have at least one axis, got a {len(shape)}-D array")
    mode_tuple = _mode_list(modes, len(mat_shapes), len(shape))
    for j, (ms, k) in enumerate(zip(mat_shapes, mode_tuple)):
        ms = tuple(map(int, ms))
        if len(ms) != 2:
            raise ValueError(f"matrices[{j}] must be 2-D (m, n), got shape {ms}")
        if ms[1] != shape[k]:
            raise ValueError(
                f"matrices[{j}] must have shape (m, {shape[k]}) to multiply mode {k} of T "
                f"with shape {shape}, got {ms}"
            )
    return mode_tuple


def _device_chain(T: Any, matrices: List[Any], modes, order: str, template: Any):
    """The chain on the GPU holding ``template`` (host operands are uploaded there)."""
    from ._adapters import cuda as _cuda

    if not _arrays.is_device(T):
        T = _arrays.device_from_host(_as_float("T", T), template)
    _cuda.check_same_device(template, T, "T")
    mode_tuple = check_chain(tuple(T.shape), [tuple(a.shape) for a in matrices], modes)
    return _cuda.multi_mode_product(T, matrices, mode_tuple, order)


def mode_product(T: Any, A: Any, mode: int, order: str = "K"):
    """Mode-n product ``T x_mode A``: every mode-``mode`` fibre of ``T`` multiplied by ``A``.

    Parameters
    ----------
    T : array, shape (n_0, ..., n_{d-1})
    A : array, shape (m, n_mode)
    mode : int
        Axis of ``T`` (negative counts from the end).
    order : {"K", "C"}
        As in :func:`multi_mode_product`.

    Returns
    -------
    array, shape of ``T`` with n_mode replaced by m
    """
    _validate.integer("mode", mode)
    ndim = len((T if _arrays.is_device(T) or _arrays.is_dask(T) else _as_float("T", T)).shape)
    if not -ndim <= mode < ndim:
        raise ValueError(f"mode: axis {mode} is out of range for T with {ndim} axes")
    return multi_mode_product(T, [A], [mode], order=order)
