"""CPU implementations of the ops: kronpe's compiled kernels on torch CPU tensors.

Each function validates its arguments (the same checks as the fake implementations), allocates
a contiguous output tensor and hands the core its address, shape and strides.
"""
from __future__ import annotations

from typing import List

import torch

from ._checks import check_blend, check_index_range, check_mmp


def multi_mode_product(T: torch.Tensor, matrices: List[torch.Tensor], modes: List[int]) -> torch.Tensor:
    shape = check_mmp(T, matrices, modes)
    # TEMPORARY: a torch implementation until the compiled mode-product kernel lands.
    out = T
    for A, m in zip(matrices, modes):
        out = torch.movedim(torch.tensordot(A, out, dims=([1], [m])), 0, m)
    return out.contiguous() if matrices else T.clone()


def blend(values: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    check_blend(values, indices, weights, "values")
    check_index_range(indices, values.shape[0])
    # TEMPORARY: torch until the compiled blend kernel lands.
    return (values[indices] * weights.unsqueeze(-1)).sum(1).contiguous()


def blend_transpose(
    rows: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor, num_nodes: int
) -> torch.Tensor:
    check_blend(rows, indices, weights, "rows")
    if rows.shape[0] != indices.shape[0]:
        raise ValueError(f"rows must have one row per point ({indices.shape[0]}), got shape {tuple(rows.shape)}")
    if num_nodes < 0:
        raise ValueError(f"num_nodes must be >= 0, got {num_nodes}")
    check_index_range(indices, num_nodes)
    out = rows.new_zeros((num_nodes, rows.shape[1]))
    contrib = (weights.unsqueeze(-1) * rows.unsqueeze(1)).reshape(-1, rows.shape[1])
    out.index_add_(0, indices.reshape(-1), contrib)
    return out
