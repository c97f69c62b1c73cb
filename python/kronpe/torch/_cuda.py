"""CUDA implementations of the ops: kronpe's CUDA kernels on CUDA torch tensors.

Registered for the "cuda" device by :mod:`kronpe.torch._ops` (one registration per op). Each
function validates its arguments (the same checks as the fake implementations), allocates the
output with torch on the tensors' device and enqueues the kernel on torch's current stream
(``torch.cuda.current_stream().cuda_stream``). Without kronpe's CUDA kernels they raise
RuntimeError ("kronpe was built without CUDA").

- ``multi_mode_product``: cuBLAS GEMM chain (float32 in full float32 unless
  ``kronpe.cuda.set_allow_tf32(True)``).
- ``blend``: one thread per point, float64 accumulation.
- ``blend_transpose``: atomicAdd scatter; deterministic (a plan sorting the nonzeros by grid
  node, built per call) when ``torch.are_deterministic_algorithms_enabled()``.

Indices are checked against the number of grid nodes: an out-of-range index raises ValueError,
as on the CPU. The check reads their min and max back to the host (a synchronisation), once per
indices tensor and version: a training loop that blends at fixed points pays it at its first
step only, and a step captured in a CUDA graph (``torch.cuda.graph``, where no host read is
allowed) needs its indices checked once before the capture (torch's warm-up steps do that);
capturing with indices never checked raises ValueError.
"""
from __future__ import annotations

from typing import List

import torch
from torch.utils.weak import WeakTensorKeyDictionary

from .._adapters import arrays as _arrays, cuda as _cuda
from ._checks import blend_output, check_blend, check_blend_transpose, index_error, mmp_shape


def multi_mode_product(T: torch.Tensor, matrices: List[torch.Tensor], modes: List[int]) -> torch.Tensor:
    mmp_shape(T, matrices, modes)  # the quick test of a valid chain; check_mmp's named errors otherwise
    _cuda.require("kronpe.multi_mode_product")
    if not matrices:
        return T.clone(memory_format=torch.contiguous_format)
    return _cuda.multi_mode_product(T, list(matrices), tuple(int(m) for m in modes), "C")


# indices tensors found in range: tensor -> (version, data pointer, numel, min, max)
# (keyed by identity: torch.utils.weak's dictionary, since tensors compare elementwise)
_CHECKED = WeakTensorKeyDictionary()


def _check_indices(indices: torch.Tensor, num_nodes: int) -> None:
    if indices.numel() == 0:
        return
    key = (indices._version, indices.data_ptr(), indices.numel())
    seen = _CHECKED.get(indices)
    if seen is not None and seen[:3] == key:
        lo, hi = seen[3:]
    elif torch.cuda.is_current_stream_capturing():
        raise ValueError("indices must be checked before a CUDA graph capture: run the step once "
                         "outside the capture (the graph cannot read them back to the host)")
    else:
        lo, hi = (int(v) for v in _arrays.device_minmax(indices))
        if 0 <= lo and hi < num_nodes:
            _CHECKED[indices] = key + (lo, hi)
    if lo < 0 or hi >= num_nodes:
        raise index_error(num_nodes, lo, hi)


def blend(values: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    check_blend(values, indices, weights, "values")
    _cuda.require("kronpe.blend")
    out, done = blend_output(values, indices)
    if done:
        return out
    _check_indices(indices, values.shape[0])
    _cuda.blend(values, out, indices=indices, weights=_arrays.cast(weights, "float64"))
    return out


def blend_transpose(rows: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor, num_nodes: int) -> torch.Tensor:
    check_blend_transpose(rows, indices, weights, num_nodes)
    _cuda.require("kronpe.blend_transpose")
    P, S, C = indices.shape[0], indices.shape[1], rows.shape[1]
    if P == 0 or C == 0 or S == 0 or num_nodes == 0:
        return rows.new_zeros((num_nodes, C))
    _check_indices(indices, num_nodes)
    out = rows.new_empty((num_nodes, C))
    plan = None
    if torch.are_deterministic_algorithms_enabled():
        plan = _cuda.blend_plan(rows, P, S, num_nodes, indices=indices)
    _cuda.blend_transpose(rows, out, plan=plan, indices=indices, weights=_arrays.cast(weights, "float64"))
    return out


KERNELS = {
    "multi_mode_product": multi_mode_product,
    "blend": blend,
    "blend_transpose": blend_transpose,
}
