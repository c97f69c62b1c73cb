"""CPU implementations of the ops: kronpe's compiled kernels on torch CPU tensors.

Each function validates its arguments (the same checks as the fake implementations), allocates
a contiguous output tensor and hands the core descriptors of the tensors
(:func:`kronpe._adapters.arrays.describe`).
"""
from __future__ import annotations

import weakref
from typing import Dict, List

import torch

from .. import _core
from .._adapters.arrays import cast, describe
from ._checks import blend_output, check_blend, check_blend_transpose, check_mmp


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
    _core.multi_mode_product(describe(T, "T"), [describe(A, "matrices") for A in matrices], list(modes),
                             describe(out, "out"), False)
    return out


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
        _core.blend_plan_stored(describe(indices, "indices"), num_nodes, sc.span, describe(sc.perm),
                                describe(sc.ptr), 0)
    i = id(indices)
    sc.ref = weakref.ref(indices, lambda _r, i=i: _SCHEDULES.pop(i, None))
    _SCHEDULES[i] = sc
    return sc


def blend(values: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    check_blend(values, indices, weights, "values")
    out, done = blend_output(values, indices)
    if done:
        return out
    w64 = cast(weights, "float64")  # a local: it must outlive the call
    # the kernel checks every index against the grid (ValueError) before writing
    _core.blend_stored(describe(indices, "indices"), describe(w64, "weights"), describe(values, "values"),
                       describe(out), 0)
    return out


def blend_transpose(
    rows: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor, num_nodes: int
) -> torch.Tensor:
    check_blend_transpose(rows, indices, weights, num_nodes)
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
    w64 = cast(weights, "float64")  # a local: it must outlive the call
    _core.blend_transpose_stored(describe(indices, "indices"), describe(w64, "weights"), describe(rows, "rows"),
                                 describe(out), sc.span, 0, describe(sc.perm), describe(sc.ptr))
    return out
