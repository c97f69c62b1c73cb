"""Argument checks shared by the fake (meta) and the real implementations of the ops.

``torch._check_value`` raises ValueError naming the argument and works on symbolic shapes, so the
same checks serve eager calls and ``torch.compile`` tracing.
"""
from __future__ import annotations

from typing import List, Sequence

import torch

_FLOATS = (torch.float32, torch.float64)


def real_tensor(name: str, x, floating: bool = False) -> torch.Tensor:
    """``x`` if it is a tensor of real numbers (only float32/float64 with ``floating``);
    TypeError naming ``name`` otherwise (a complex tensor would lose its imaginary part)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch tensor, got {type(x).__name__}")
    if x.is_complex() or (floating and x.dtype not in _FLOATS):
        want = "float32 or float64" if floating else "real numbers"
        raise TypeError(f"{name} must hold {want}, got {x.dtype}")
    return x


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


def blend_output(values: torch.Tensor, indices: torch.Tensor) -> "tuple[torch.Tensor, bool]":
    """blend's (P, C) output and whether it is already final (no points, channels or corners)."""
    P, C = indices.shape[0], values.shape[1]
    out = values.new_empty((P, C))
    if P == 0 or C == 0:
        return out, True
    if indices.shape[1] == 0:
        return out.zero_(), True
    return out, False
