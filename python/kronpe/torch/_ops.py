"""kronpe's kernels as torch custom ops with autograd: ``torch.ops.kronpe.*``.

Three ops, each a ``torch.library.custom_op`` with a fake (meta) implementation for
``torch.compile`` and a backward made of kronpe ops, so that double backward works:

- ``multi_mode_product(T, matrices, modes)``: T x_{modes[0]} matrices[0] x ... (MATH.md 3.1).
  Adjoint wrt T: the same chain with the transposed matrices. Adjoint wrt matrix j:
  G_(j) U_(j)^T with U = T x_{i != j} A_i (a mode-product chain, then one matrix product).
- ``blend(values, indices, weights)``: out[p] = sum_s weights[p, s] * values[indices[p, s]]
  (the blending matrix B of MATH.md 3.3 applied to the flattened virtual grid, (G, C) -> (P, C)).
- ``blend_transpose(rows, indices, weights, num_nodes)``: B^T, a scatter-add (P, C) -> (G, C).

blend and blend_transpose are each other's adjoints. Their gradients with respect to
``weights`` are given too (a gather and a dot product, in torch); ``indices`` are integers and
get none. The blending weights come from :class:`kronpe.BlendingMatrix` (NumPy), so gradients do
not flow back to the point coordinates themselves: callers treat points as data.

The device implementations sit in ``KERNELS`` (device type -> op name -> function). The CPU ones
call kronpe's compiled core with ``data_ptr()`` and strides (the extension never links libtorch);
the CUDA ones (:mod:`kronpe.torch._cuda`) call its CUDA kernels on torch's current stream, and
raise RuntimeError when kronpe was built without CUDA. Both are registered by
:func:`register_kernels`.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence

import torch

from . import _cpu
from . import _cuda
from ._checks import check_blend, check_mmp, real_tensor

__all__ = ["multi_mode_product", "blend", "blend_transpose", "KERNELS", "register_kernels"]

# ---- the ops (their default body runs on devices without a kernel: it says so) ---------------


def _no_kernel(name: str, device: torch.device):
    raise NotImplementedError(
        f"kronpe.{name} has no kernel for device {device}; kernels exist for: "
        + ", ".join(sorted(d for d, table in KERNELS.items() if name in table))
    )


@torch.library.custom_op("kronpe::multi_mode_product", mutates_args=())
def _mmp_op(T: torch.Tensor, matrices: List[torch.Tensor], modes: List[int]) -> torch.Tensor:
    _no_kernel("multi_mode_product", T.device)


@torch.library.custom_op("kronpe::blend", mutates_args=())
def _blend_op(values: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    _no_kernel("blend", values.device)


@torch.library.custom_op("kronpe::blend_transpose", mutates_args=())
def _blend_t_op(
    rows: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor, num_nodes: int
) -> torch.Tensor:
    _no_kernel("blend_transpose", rows.device)


@_mmp_op.register_fake
def _(T, matrices, modes):
    return T.new_empty(check_mmp(T, matrices, modes))


@_blend_op.register_fake
def _(values, indices, weights):
    check_blend(values, indices, weights, "values")
    return values.new_empty((indices.shape[0], values.shape[1]))


@_blend_t_op.register_fake
def _(rows, indices, weights, num_nodes):
    check_blend(rows, indices, weights, "rows")
    torch._check_value(
        rows.shape[0] == indices.shape[0],
        lambda: f"rows must have one row per point ({indices.shape[0]}), got shape {tuple(rows.shape)}",
    )
    torch._check_value(num_nodes >= 0, lambda: f"num_nodes must be >= 0, got {num_nodes}")
    return rows.new_empty((num_nodes, rows.shape[1]))


# ---- autograd -------------------------------------------------------------------------------


def _mmp_setup(ctx, inputs, output):
    T, matrices, modes = inputs
    ctx.modes = list(modes)
    ctx.n = len(matrices)
    ctx.save_for_backward(T, *matrices)


def _mmp_backward(ctx, grad):
    T, *mats = ctx.saved_tensors
    modes = ctx.modes
    needs_T = ctx.needs_input_grad[0]
    needs_A = ctx.needs_input_grad[1]  # one flag per matrix
    gT = None
    if needs_T:
        gT = multi_mode_product(grad, [A.mT for A in mats], modes)
    gA: List[Optional[torch.Tensor]] = [None] * len(mats)
    for j, (A, m) in enumerate(zip(mats, modes)):
        if not needs_A[j]:
            continue
        others = [i for i in range(len(mats)) if i != j]
        axes = [a for a in range(T.dim()) if a != m]
        # dA_j[a, b] = sum over every axis but m of grad[..a..] * U[..b..], U = T x_{i != j} A_i.
        # Or contract grad with A_i^T first (H = grad x_{i != j} A_i^T) against T: whichever of
        # U and H is smaller.
        size_u = T.numel() // max(T.shape[m], 1) * A.shape[1]
        size_h = grad.numel() // max(grad.shape[m], 1) * A.shape[0]
        for i in others:
            size_u = size_u // max(T.shape[modes[i]], 1) * mats[i].shape[0]
            size_h = size_h // max(grad.shape[modes[i]], 1) * mats[i].shape[1]
        if not others:
            gA[j] = torch.tensordot(grad, T, dims=(axes, axes))
        elif size_u <= size_h:
            U = multi_mode_product(T, [mats[i] for i in others], [modes[i] for i in others])
            gA[j] = torch.tensordot(grad, U, dims=(axes, axes))
        else:
            H = multi_mode_product(grad, [mats[i].mT for i in others], [modes[i] for i in others])
            gA[j] = torch.tensordot(H, T, dims=(axes, axes))
    # ``modes`` (ints) gets None; an empty list must come back as an empty list (torch's
    # structure check counts it as a list of optional tensors)
    return gT, gA, (None if modes else [])


def _gather_dot(table: torch.Tensor, indices: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """d/d weights: out[p, s] = <table[indices[p, s]], rows[p]> (P, S); differentiable torch."""
    return (table[indices] * rows.unsqueeze(1)).sum(-1)


def _blend_setup(ctx, inputs, output):
    values, indices, weights = inputs
    ctx.num_nodes = values.shape[0]
    ctx.save_for_backward(values, indices, weights)


def _blend_backward(ctx, grad):
    values, indices, weights = ctx.saved_tensors
    gv = gw = None
    if ctx.needs_input_grad[0]:
        gv = blend_transpose(grad, indices, weights, ctx.num_nodes)
    if ctx.needs_input_grad[2]:
        gw = _gather_dot(values, indices, grad).to(weights.dtype)
    return gv, None, gw


def _blend_t_setup(ctx, inputs, output):
    rows, indices, weights, num_nodes = inputs
    ctx.save_for_backward(rows, indices, weights)


def _blend_t_backward(ctx, grad):
    rows, indices, weights = ctx.saved_tensors
    gr = gw = None
    if ctx.needs_input_grad[0]:
        gr = blend(grad, indices, weights)
    if ctx.needs_input_grad[2]:
        gw = _gather_dot(grad, indices, rows).to(weights.dtype)
    return gr, None, gw, None


_mmp_op.register_autograd(_mmp_backward, setup_context=_mmp_setup)
_blend_op.register_autograd(_blend_backward, setup_context=_blend_setup)
_blend_t_op.register_autograd(_blend_t_backward, setup_context=_blend_t_setup)


# ---- kernels per device ---------------------------------------------------------------------

#: device type -> op name -> implementation. A backend for another device adds one entry.
KERNELS: Dict[str, Dict[str, Callable]] = {
    "cpu": {
        "multi_mode_product": _cpu.multi_mode_product,
        "blend": _cpu.blend,
        "blend_transpose": _cpu.blend_transpose,
    },
    "cuda": dict(_cuda.KERNELS),
}

_OPS = {"multi_mode_product": _mmp_op, "blend": _blend_op, "blend_transpose": _blend_t_op}


def register_kernels(device_type: str, table: Dict[str, Callable]) -> None:
    """Register ``table`` (op name -> implementation) as the kernels for ``device_type``."""
    for name, fn in table.items():
        _OPS[name].register_kernel(device_type)(fn)
    KERNELS.setdefault(device_type, {}).update(table)


for _device, _table in list(KERNELS.items()):
    register_kernels(_device, _table)


# ---- Python entry points (argument normalisation, then the op) ------------------------------


def multi_mode_product(
    T: torch.Tensor,  # (n_1, ..., n_d, *rest)
    matrices: Sequence[torch.Tensor],  # each (m_j, n_{modes[j]})
    modes: Optional[Sequence[int]] = None,
) -> torch.Tensor:
    """T x_{modes[0]} matrices[0] x_{modes[1]} matrices[1] ... (differentiable).

    ``modes`` defaults to 0..len(matrices)-1 and may be negative (counted from the end); axes
    not named are carried along (channels, batches). The chain runs in the cheapest order.
    """
    real_tensor("T", T)
    if matrices is None or isinstance(matrices, (str, bytes, torch.Tensor)):
        raise TypeError(f"matrices must be a sequence of 2-D tensors, got {type(matrices).__name__}")
    matrices = [real_tensor(f"matrices[{j}]", A) for j, A in enumerate(matrices)]
    if modes is None:
        modes = list(range(len(matrices)))
    modes = [int(m) + T.dim() if int(m) < 0 else int(m) for m in modes]
    return torch.ops.kronpe.multi_mode_product(T, matrices, modes)


def blend(
    values: torch.Tensor,  # (G, C) or (G,)
    indices: torch.Tensor,  # (P, S) int64
    weights: torch.Tensor,  # (P, S)
) -> torch.Tensor:  # (P, C) or (P,)
    """out[p] = sum_s weights[p, s] * values[indices[p, s]]: the blending matrix applied."""
    real_tensor("values", values)
    real_tensor("weights", weights)
    if values.dim() == 1:
        return torch.ops.kronpe.blend(values.unsqueeze(1), indices, weights).squeeze(1)
    return torch.ops.kronpe.blend(values, indices, weights)


def blend_transpose(
    rows: torch.Tensor,  # (P, C) or (P,)
    indices: torch.Tensor,  # (P, S) int64
    weights: torch.Tensor,  # (P, S)
    num_nodes: int,
) -> torch.Tensor:  # (num_nodes, C) or (num_nodes,)
    """out[g] = sum over (p, s) with indices[p, s] == g of weights[p, s] * rows[p]: B^T rows."""
    real_tensor("rows", rows)
    real_tensor("weights", weights)
    if rows.dim() == 1:
        return torch.ops.kronpe.blend_transpose(rows.unsqueeze(1), indices, weights, num_nodes).squeeze(1)
    return torch.ops.kronpe.blend_transpose(rows, indices, weights, num_nodes)
