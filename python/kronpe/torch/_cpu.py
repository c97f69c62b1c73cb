"""CPU implementations of the ops: kronpe's compiled kernels on torch CPU tensors.

Each function validates its arguments (the same checks as the fake implementations), allocates
a contiguous output tensor and hands the core its address, shape and strides.
"""
from __future__ import annotations

import weakref
from typing import Dict, List

import torch

from .. import _core
from ._checks import blend_output, check_blend, check_mmp


def multi_mode_product(T: torch.Tensor, matrices: List[torch.Tensor], modes: List[int]) -> torch.Tensor:
    shape = check_mmp(T, matrices, modes)
    out = T.new_empty(shape)  # C-contiguous, as the fake implementation says
    if out.numel() == 0:
        return out
    if not matrices:
        return out.copy_(T)
    if any(A.shape[1] == 0 for A in matrices):  # an empty contraction: the sum of nothing
        return out.zero_()
    # the chain planner reads any strides; the result is written in C order (any_layout=False)
    _core.multi_mode_product(
        _dtype(T), T.data_ptr(), list(T.shape), list(T.stride()), list(modes),
        [A.data_ptr() for A in matrices], [n for A in matrices for n in A.shape],
        [n for A in matrices for n in A.stride()], out.data_ptr(), False,
    )
    return out


def _mat(t: torch.Tensor) -> tuple:
    """(address, rows, cols, row stride, col stride) of a 2-D CPU tensor (strides in elements).

    The caller keeps ``t`` alive until the kernel has returned (never pass a temporary)."""
    return (t.data_ptr(), t.shape[0], t.shape[1], t.stride(0), t.stride(1))


def _dtype(t: torch.Tensor) -> str:
    return "float32" if t.dtype == torch.float32 else "float64"


def _weights64(weights: torch.Tensor) -> torch.Tensor:
    """The kernels read blending weights in float64 (they are computed in float64)."""
    return weights if weights.dtype == torch.float64 else weights.to(torch.float64)


class _Schedule:
    """What blend_transpose needs of an indices tensor besides its values: the largest row span,
    the index range (checked once) and the bucketing of the rows by output slab."""

    __slots__ = ("key", "ref", "span", "lo", "hi", "perm", "ptr", "__weakref__")


#: id(indices) -> _Schedule, while that tensor lives (training reuses one plan every step)
_SCHEDULES: Dict[int, _Schedule] = {}


def _row_range(indices: torch.Tensor):
    """(smallest, largest) index of every row, by columns (reductions over a short inner axis
    of an int64 tensor are slow in torch)."""
    lo = hi = indices[:, 0]
    for k in range(1, indices.shape[1]):
        col = indices[:, k]
        lo, hi = torch.minimum(lo, col), torch.maximum(hi, col)
    return lo, hi


def _schedule(indices: torch.Tensor, num_nodes: int) -> _Schedule:
    key = (indices.data_ptr(), indices._version, tuple(indices.shape), indices.stride(), num_nodes)
    cached = _SCHEDULES.get(id(indices))
    if cached is not None and cached.ref() is indices and cached.key == key:
        return cached
    row_lo, row_hi = _row_range(indices)
    sc = _Schedule()
    sc.key, sc.lo, sc.hi = key, int(row_lo.min()), int(row_hi.max())
    sc.span = int((row_hi - row_lo).max())
    if 0 <= sc.lo and sc.hi < num_nodes:
        _, slabs = _core.blend_layout(num_nodes, sc.span)
        sc.perm = torch.empty(indices.shape[0], dtype=torch.int64)
        sc.ptr = torch.empty(slabs + 1, dtype=torch.int64)
        _core.blend_plan_stored(_mat(indices), num_nodes, sc.span, sc.perm.data_ptr(), sc.ptr.data_ptr(), 0)
    i = id(indices)
    sc.ref = weakref.ref(indices, lambda _r, i=i: _SCHEDULES.pop(i, None))
    _SCHEDULES[i] = sc
    return sc


def blend(values: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    check_blend(values, indices, weights, "values")
    out, done = blend_output(values, indices)
    if done:
        return out
    w64 = _weights64(weights)  # a local: it must outlive the call
    # the kernel checks every index against the grid (ValueError) before writing
    _core.blend_stored(_dtype(values), _mat(indices), _mat(w64), _mat(values), _mat(out), 0)
    return out


def blend_transpose(
    rows: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor, num_nodes: int
) -> torch.Tensor:
    check_blend(rows, indices, weights, "rows")
    if rows.shape[0] != indices.shape[0]:
        raise ValueError(f"rows must have one row per point ({indices.shape[0]}), got shape {tuple(rows.shape)}")
    if num_nodes < 0:
        raise ValueError(f"num_nodes must be >= 0, got {num_nodes}")
    P, S, C = indices.shape[0], indices.shape[1], rows.shape[1]
    out = rows.new_zeros((num_nodes, C))
    if P == 0 or C == 0 or S == 0:
        return out
    # the transpose buckets the rows by slabs of the grid at least as long as every row's span;
    # that schedule is computed once per indices tensor (and version)
    sc = _schedule(indices, num_nodes)
    if sc.lo < 0 or sc.hi >= num_nodes:
        raise ValueError(
            f"indices must lie in [0, {num_nodes}) (the number of grid nodes), got values in [{sc.lo}, {sc.hi}]"
        )
    w64 = _weights64(weights)  # a local: it must outlive the call
    _core.blend_transpose_stored(_dtype(rows), _mat(indices), _mat(w64), _mat(rows), _mat(out), sc.span, 0,
                                 sc.perm.data_ptr(), sc.ptr.data_ptr())
    return out
