"""Argument checks of kronpe.torch: the ops (their fake (meta) and real implementations) and the
modules. Every failure names the argument and what was expected.

``torch._check_value`` raises ValueError naming the argument and works on symbolic shapes, so the
same checks serve eager calls and ``torch.compile`` tracing. The other checks read Python values
(types, ints, devices); those that read a tensor's data (:func:`coords`) skip it while
``torch.compile`` traces or a CUDA graph captures. Sizes over the memory budget are a MemoryError
before anything is allocated (:func:`budget`: the host's budget of
:mod:`kronpe._adapters.validate` for host tensors, the device's free memory for CUDA tensors).
"""
from __future__ import annotations

import math
import numbers
from typing import List, Sequence

import numpy as np
import torch

from .._adapters import validate as _validate
from ..embedders import Embedder

_FLOATS = (torch.float32, torch.float64)


def real_tensor(name: str, x, floating: bool = False) -> torch.Tensor:
    """``x`` if it is a tensor of real numbers (only float32/float64 with ``floating``);
    TypeError naming ``name`` otherwise (a complex tensor would lose its imaginary part)."""
    tensor(name, x)
    if x.is_complex() or (floating and x.dtype not in _FLOATS):
        want = "float32 or float64" if floating else "real numbers"
        raise TypeError(f"{name} must hold {want}, got {x.dtype}")
    return x


def tensor(name: str, x) -> torch.Tensor:
    """``x`` if it is a torch tensor; TypeError naming ``name`` otherwise."""
    if not isinstance(x, torch.Tensor):
        if isinstance(x, np.ndarray):
            raise TypeError(f"{name} must be a torch tensor, got a NumPy array of shape {x.shape} "
                            "(torch.from_numpy converts it)")
        raise TypeError(f"{name} must be a torch tensor, got {_validate.describe(x)}")
    return x


def embedder(name: str, e, modules: bool = False, callables: bool = False):
    """``e`` if it is a kronpe embedder (an instance), or with ``modules`` an ``nn.Module`` with
    ``K`` (its output width), or with ``callables`` any callable but a class; TypeError naming
    ``name`` otherwise."""
    if isinstance(e, Embedder) and not isinstance(e, type):
        return e
    if not isinstance(e, type) and ((modules and isinstance(e, torch.nn.Module) and hasattr(e, "K"))
                                    or (callables and callable(e))):
        return e
    what = "a kronpe Embedder"
    if modules:
        what += " or an nn.Module with K (its output width)"
    if callables:
        what += " or a callable (N,) -> (N, K) tensor (e.g. an nn.Module)"
    if isinstance(e, type):
        raise TypeError(f"{name} must be {what}, got the class {e.__name__} (make one: {e.__name__}(...))")
    raise TypeError(f"{name} must be {what}, got {_validate.describe(e)}")


def modulation(name: str, m, x: torch.Tensor):
    """None, a finite real number (as float), or a real tensor (NumPy arrays and lists are
    converted) on x's device whose shape broadcasts to x's."""
    if m is None:
        return None
    if isinstance(m, numbers.Real) and not isinstance(m, bool):
        return _validate._real(name, m, lambda v: True, "real")
    if isinstance(m, (np.ndarray, list, tuple)):
        arr = _validate.real_array(name, m)
        m = torch.as_tensor(arr if arr.dtype.kind == "f" else arr.astype(np.float64), device=x.device)
    if not isinstance(m, torch.Tensor) or m.dtype == torch.bool:
        raise TypeError(f"{name} must be a real number or a tensor of them (broadcastable to x's shape "
                        f"{tuple(x.shape)}), got {_validate.describe(m)}")
    real_tensor(name, m)
    same_device(name, m, x.device, "x")
    try:
        shape = torch.broadcast_shapes(m.shape, x.shape)
    except RuntimeError:
        shape = None
    if shape != x.shape:
        raise ValueError(f"{name} must broadcast to x's shape {tuple(x.shape)} (e.g. (batch, 1, 1): one "
                         f"value per sample), got shape {tuple(m.shape)}")
    return m


def has_data(name: str, x: torch.Tensor) -> torch.Tensor:
    """``x`` if its values can be read (not a meta tensor, which has a shape and no data)."""
    if x.is_meta:
        raise ValueError(f"{name} is a meta tensor (a shape without data); it must hold values "
                         "(a CPU or CUDA tensor)")
    return x


def same_device(name: str, x: torch.Tensor, device: torch.device, other: str) -> None:
    """ValueError when ``x`` is not on ``device`` (that of ``other``)."""
    if x.device != device:
        raise ValueError(f"{name} is on {x.device}, {other} on {device}: move them to one device")


def coords(name: str, x) -> torch.Tensor:
    """``x`` if it is a 1-D real tensor of finite coordinates in [0, 1] (the values are not read
    while torch.compile traces or a CUDA graph captures: both forbid reading data back to the
    host)."""
    real_tensor(name, x)
    if x.dim() != 1:
        raise ValueError(f"{name} must be a 1-D tensor of coordinates, got shape {tuple(x.shape)}")
    if torch.compiler.is_compiling() or x.numel() == 0 or (x.is_cuda and torch.cuda.is_current_stream_capturing()):
        return x
    v = has_data(name, x).detach()
    if not bool(torch.isfinite(v).all()):
        raise ValueError(f"{name} must be finite, found NaN or Inf")
    lo, hi = float(v.min()), float(v.max())
    if lo < 0 or hi > 1:
        raise ValueError(f"{name} must lie in [0, 1], got values in [{lo:g}, {hi:g}]")
    return x


def size(name: str, value) -> int:
    """An integer argument that torch passes as int64 (a SymInt while torch.compile traces is
    kept); its sign is the op's own check."""
    if type(value) is int and 0 <= value <= _validate.INT64_MAX:  # the common case, quickly
        return value
    if isinstance(value, torch.SymInt):
        return value
    v = _validate.integer(name, value)
    if abs(v) > _validate.INT64_MAX:
        raise ValueError(f"{name} must fit in int64 (at most 2^63 - 1), got {v}")
    return v


def budget(name: str, shape: Sequence[int], dtype: torch.dtype, device: torch.device, hint: str) -> None:
    """MemoryError naming ``name`` when a tensor of ``shape`` and ``dtype`` on ``device`` would not
    fit: the host's memory budget (validate.check_array_budget) for host tensors, the free memory
    of the GPU for CUDA tensors. Nothing is checked while torch.compile traces."""
    if any(isinstance(n, torch.SymInt) for n in shape):
        return
    itemsize = dtype.itemsize
    if math.prod(shape) * itemsize <= _validate.NEVER_REFUSED or device.type == "meta" or torch.compiler.is_compiling():
        return  # small allocations (the hot paths) look nothing else up
    if device.type != "cuda":
        _validate.check_array_budget(name, shape, itemsize, hint)
        return
    nbytes = _validate.size_product(name, (_validate.size_product(name, shape), itemsize))
    if nbytes <= _validate.NEVER_REFUSED:
        return
    free = torch.cuda.mem_get_info(device)[0] + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    if nbytes > free:
        raise MemoryError(f"{name}: this needs {_validate._fmt(nbytes)} of GPU memory, more than the "
                          f"{_validate._fmt(free)} free on {device}; {hint}")


def mode_list(modes, count: int, ndim: int) -> List[int]:
    """``modes`` as a list of axes (negative ones counted from the end; default 0..count-1); one
    integer is one axis. TypeError naming modes for anything but integers; their range, count and
    distinctness are :func:`check_mmp`'s."""
    if modes is None:
        return list(range(count))
    if type(modes) not in (list, tuple):  # the common case skips the abstract-class checks
        if isinstance(modes, (numbers.Integral, torch.SymInt)) and not isinstance(modes, bool):
            modes = [modes]
        if isinstance(modes, (str, bytes, dict)) or not hasattr(modes, "__iter__"):
            raise TypeError(f"modes must be a sequence of integer axes, got {_validate.describe(modes)}")
    out = []
    for j, m in enumerate(modes):
        if type(m) is not int:
            if isinstance(m, bool) or not isinstance(m, (numbers.Integral, torch.SymInt)):
                raise TypeError(f"modes[{j}] must be an integer axis, got {_validate.describe(m)}")
            m = int(m) if isinstance(m, numbers.Integral) else m
        out.append(m + ndim if m < 0 else m)
    return out


def chain_order(matrices) -> List[int]:
    """The order of a chain's modes for autograd: the modes that shrink the tensor most (least
    m_j / n_j) first. The backward runs it in reverse on the gradient, where the same modes grow
    it most, so both chains stay small."""
    return sorted(range(len(matrices)), key=lambda j: matrices[j].shape[0] / max(matrices[j].shape[1], 1))


def chain_budget(T: torch.Tensor, matrices: Sequence[torch.Tensor], modes: Sequence[int]) -> None:
    """The chain's largest step (the result or an intermediate, in :func:`chain_order`) within
    the memory budget (nothing is checked for an invalid chain: :func:`check_mmp` names its
    error)."""
    bound = list(T.shape)  # every step fits in the largest size along each axis
    for A, m in zip(matrices, modes):
        if A.dim() != 2 or not 0 <= m < len(bound):
            return
        bound[m] = max(bound[m], A.shape[0])
    if len(matrices) != len(modes) or math.prod(bound) * T.dtype.itemsize <= _validate.NEVER_REFUSED:
        return
    shape, peak = list(T.shape), []
    for j in chain_order(matrices):
        shape[modes[j]] = matrices[j].shape[0]
        peak = max(peak, list(shape), key=math.prod)
    budget("T x matrices", peak, T.dtype, T.device, "the result of T x matrices (or a step of the chain) is "
           "too large: multiply fewer rows or a smaller T")


def index_error(num_nodes: int, lo: int, hi: int) -> ValueError:
    """The named error of indices outside [0, num_nodes)."""
    return ValueError(f"indices must lie in [0, {num_nodes}) (the number of grid nodes), got values in "
                      f"[{lo}, {hi}]: an index lies outside the grid")


def check_mmp(T: torch.Tensor, matrices: Sequence[torch.Tensor], modes: Sequence[int]) -> List:
    """Validate a mode-product chain; return the output shape."""
    torch._check_value(T.dtype in _FLOATS, lambda: f"T must be float32 or float64, got {T.dtype}")
    torch._check_value(
        len(matrices) == len(modes),
        lambda: f"modes must name one mode per matrix: {len(matrices)} matrices, {len(modes)} modes",
    )
    torch._check_value(
        len(set(modes)) == len(modes), lambda: f"modes must be distinct, got {list(modes)}"
    )
    shape = list(T.shape)
    for j, (A, m) in enumerate(zip(matrices, modes)):
        torch._check_value(
            0 <= m < T.dim(), lambda: f"modes[{j}] = {m} is out of range for T with {T.dim()} axes"
        )
        torch._check_value(
            A.dim() == 2, lambda: f"matrices[{j}] must be 2-D (m, n), got shape {tuple(A.shape)}"
        )
        torch._check_value(
            A.dtype == T.dtype, lambda: f"matrices[{j}] has dtype {A.dtype}, T has {T.dtype}"
        )
        torch._check_value(
            A.device == T.device, lambda: f"matrices[{j}] is on {A.device}, T is on {T.device}"
        )
        torch._check_value(
            A.shape[1] == T.shape[m],
            lambda: f"matrices[{j}] must have shape (m, {T.shape[m]}) to multiply mode {m} of T "
            f"{tuple(T.shape)}, got {tuple(A.shape)}",
        )
        shape[m] = A.shape[0]
    return shape


def mmp_shape(T: torch.Tensor, matrices: Sequence[torch.Tensor], modes: Sequence[int]) -> List:
    """The chain's output shape when it is valid, by a quick test for the common case (eager
    calls pay a few microseconds); otherwise :func:`check_mmp`'s ValueError."""
    shape = list(T.shape)
    ok = T.dtype in _FLOATS and len(matrices) == len(modes) == len(set(modes))
    if ok:
        for A, m in zip(matrices, modes):
            if not (0 <= m < len(shape) and A.dim() == 2 and A.dtype == T.dtype and A.device == T.device
                    and A.shape[1] == T.shape[m]):
                ok = False
                break
            shape[m] = A.shape[0]
    return shape if ok else check_mmp(T, matrices, modes)


def check_blend(values: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor, name: str) -> None:
    torch._check_value(
        values.dim() == 2, lambda: f"{name} must be 2-D (rows, channels), got shape {tuple(values.shape)}"
    )
    torch._check_value(values.dtype in _FLOATS, lambda: f"{name} must be float32 or float64, got {values.dtype}")
    torch._check_value(
        indices.dim() == 2,
        lambda: f"indices must be 2-D (P, S) (S = 2^D corners), got shape {tuple(indices.shape)}",
    )
    torch._check_value(indices.dtype == torch.int64, lambda: f"indices must be int64, got {indices.dtype}")
    torch._check_value(
        weights.shape == indices.shape,
        lambda: f"weights must have the shape of indices {tuple(indices.shape)}, got {tuple(weights.shape)}",
    )
    torch._check_value(
        weights.dtype in _FLOATS, lambda: f"weights must be float32 or float64, got {weights.dtype}"
    )
    for t, n in ((indices, "indices"), (weights, "weights")):
        torch._check_value(t.device == values.device, lambda: f"{n} is on {t.device}, {name} on {values.device}")


def check_blend_transpose(rows: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor, num_nodes: int) -> None:
    check_blend(rows, indices, weights, "rows")
    torch._check_value(
        rows.shape[0] == indices.shape[0],
        lambda: f"rows must have one row per point ({indices.shape[0]}), got shape {tuple(rows.shape)}",
    )
    torch._check_value(num_nodes >= 0, lambda: f"num_nodes must be >= 0, got {num_nodes}")
    budget("num_nodes", (num_nodes, rows.shape[1]), rows.dtype, rows.device,
           "the output has num_nodes rows (one per grid node): pass the number of grid nodes")


def blend_output(values: torch.Tensor, indices: torch.Tensor) -> "tuple[torch.Tensor, bool]":
    """blend's (P, C) output and whether it is already final (no points, channels or corners)."""
    P, C = indices.shape[0], values.shape[1]
    out = values.new_empty((P, C))
    if P == 0 or C == 0:
        return out, True
    if indices.shape[1] == 0:
        return out.zero_(), True
    return out, False
