"""kronpe's kernels as torch custom ops with autograd: ``torch.ops.kronpe.*``.

Three public ops, each with a fake (meta) implementation for ``torch.compile`` / ``torch.export``
and a backward made of kronpe ops, so that double backward works:

- ``multi_mode_product(T, matrices, modes)``: T x_{modes[0]} matrices[0] x ...
  (docs/math/encodings.rst). A CompositeImplicitAutograd op over two custom ops:
  ``multi_mode_product_chain`` (the fused chain in the planner's order; its adjoint recomputes what
  it needs) and, when autograd will want the matrices' gradients, ``multi_mode_product_steps`` (the
  chain one mode at a time, returning every intermediate, so that the backward reuses them as
  autograd through single-mode products would: D forward products, D for the gradient chain, D
  contractions). Eager calls on real tensors run the same computation through the device's kernel
  and an autograd.Function, without the custom ops' Python machinery; on the CPU, a chain whose
  every step is one GEMM on an end axis (``DIRECT_GEMMS``) is left to torch's autograd as
  ``torch.mm`` calls. The adjoint
  (:func:`_chain_adjoint`): wrt T the chain with the transposed matrices; wrt A_j the contraction of
  the gradient chain with the forward intermediate over every axis but mode j.
- ``blend(values, indices, weights)``: out[p] = sum_s weights[p, s] * values[indices[p, s]]
  (the blending matrix B of docs/math/scattered.rst applied to the flattened virtual grid,
  (G, C) -> (P, C)).
- ``blend_transpose(rows, indices, weights, num_nodes)``: B^T, a scatter-add (P, C) -> (G, C).

blend and blend_transpose are each other's adjoints. Their gradients with respect to
``weights`` are given too (a gather and a dot product, in torch); ``indices`` are integers and
get none. The blending weights come from :class:`kronpe.BlendingMatrix` (NumPy), so gradients do
not flow back to the point coordinates themselves: callers treat points as data.

The device implementations sit in ``KERNELS`` (device type -> op name -> function). The CPU ones
(:mod:`kronpe.torch._cpu`) run the planner's chain program (its GEMMs through ``_cpu.gemm``:
kronpe's packed GEMM or torch's, on torch's threads) and call kronpe's compiled blend kernels
with ``data_ptr()`` and strides (the extension never links libtorch); the CUDA ones
(:mod:`kronpe.torch._cuda`) call its CUDA kernels on torch's current stream, and raise RuntimeError
when kronpe was built without CUDA. Both are registered by :func:`register_kernels`.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence

import torch

from . import _cpu
from . import _cuda
from .._adapters import validate as _validate
from ._checks import chain_order as _chain_order
from ._checks import (chain_budget, check_blend, check_blend_transpose, check_mmp, mmp_shape, mode_list,
                      real_tensor, size, tensor)

__all__ = ["multi_mode_product", "blend", "blend_transpose", "KERNELS", "register_kernels"]

# ---- the ops (their default body runs on devices without a kernel: it says so) ---------------


def _no_kernel(name: str, device: torch.device):
    raise NotImplementedError(
        f"kronpe.{name} has no kernel for device {device}; kernels exist for: "
        + ", ".join(sorted(d for d, table in KERNELS.items() if name in table))
    )


@torch.library.custom_op("kronpe::multi_mode_product_chain", mutates_args=())
def _mmp_op(T: torch.Tensor, matrices: List[torch.Tensor], modes: List[int]) -> torch.Tensor:
    _no_kernel("multi_mode_product", T.device)


@torch.library.custom_op("kronpe::multi_mode_product_steps", mutates_args=())
def _mmp_steps_op(T: torch.Tensor, matrices: List[torch.Tensor], modes: List[int]) -> List[torch.Tensor]:
    """[Y_1, ..., Y_D]: the chain one mode at a time in :func:`_chain_order` (Y_D is the
    product), so that autograd keeps the intermediates the matrices' gradients need."""
    kernel = KERNELS.get(T.device.type, {}).get("multi_mode_product")
    if kernel is None:
        _no_kernel("multi_mode_product", T.device)
    mmp_shape(T, matrices, modes)
    Ys = [T]
    for j in _chain_order(matrices):
        Ys.append(kernel(Ys[-1], [matrices[j]], [modes[j]]))
    return Ys[1:]


# The public op: the fused chain, or, when autograd will want the matrices' gradients, the steps
# (the same products one mode at a time; the backward then reuses their intermediates as
# autograd does through single-mode products, instead of recomputing them).
_LIB = torch.library.Library("kronpe", "FRAGMENT")
_LIB.define("multi_mode_product(Tensor T, Tensor[] matrices, int[] modes) -> Tensor")


_PLAIN = (torch.Tensor, torch.nn.Parameter)

#: Eager CPU chains under autograd whose every step is one GEMM on an end axis (at most two modes,
#: a C-contiguous T, dense matrices: ``_cpu.end_chain``) run as ``torch.mm`` calls that autograd
#: records, as it would through ``torch.tensordot``: the same GEMMs as the op's own adjoint, without
#: the autograd.Function's Python around them (half the time of a 64 x 64 chain). False sends
#: them through the op's autograd.Function and adjoint like every other chain.
DIRECT_GEMMS = True


def _mmp_composite(T: torch.Tensor, matrices: List[torch.Tensor], modes: List[int]) -> torch.Tensor:
    steps = len(matrices) > 1 and torch.is_grad_enabled() and any(A.requires_grad for A in matrices)
    # Eager calls on real tensors skip the custom ops' Python machinery (the autograd wrapper,
    # pytree flattening: ~0.1 ms a call, as much as the GEMMs of a 64 x 64 chain): the device's
    # kernel directly, or under autograd the same computation and adjoint in an
    # autograd.Function. Traced calls (torch.compile, export, fake tensors) and torch.func
    # transforms take the custom ops.
    if (not torch.compiler.is_compiling() and not torch._C._are_functorch_transforms_active()
            and type(T) in _PLAIN and all(type(A) in _PLAIN for A in matrices)):
        kernel = KERNELS.get(T.device.type, {}).get("multi_mode_product")
        if kernel is not None:
            if not (torch.is_grad_enabled() and (T.requires_grad or any(A.requires_grad for A in matrices))):
                return kernel(T, matrices, modes)
            if (DIRECT_GEMMS and kernel is _cpu.multi_mode_product
                    and all(m == 0 or m == T.dim() - 1 for m in modes)):
                mmp_shape(T, matrices, modes)
                Y = _cpu.end_chain(T, matrices, modes, _chain_order(matrices))
                if Y is not None:
                    return Y
            return _KronpeMultiModeProduct.apply(T, list(modes), steps, kernel, *matrices)
    if steps:
        return torch.ops.kronpe.multi_mode_product_steps(T, matrices, modes)[-1]
    return torch.ops.kronpe.multi_mode_product_chain(T, matrices, modes)


class _KronpeMultiModeProduct(torch.autograd.Function):
    """The op's eager autograd: the fused chain (``steps`` False) or the per-mode steps whose
    intermediates the backward reuses, and :func:`_chain_adjoint`, as the custom ops do."""

    @staticmethod
    def forward(ctx, T, modes, steps, kernel, *mats):
        ctx.modes = modes
        ctx.n = len(mats)
        if not steps:
            ctx.save_for_backward(T, *mats)
            return kernel(T, list(mats), modes)
        mmp_shape(T, mats, modes)
        ctx.order = order = _chain_order(mats)
        cpu = T.device.type == "cpu"
        ctx.rotated = cpu and _rotates(T, mats, modes, order)
        if ctx.rotated:
            Ys = _rotation_forward(T, mats, modes)
            ctx.save_for_backward(T, *mats, *Ys[:-1])
            return Ys[-1].view(mmp_shape(T, mats, modes))
        Y = T
        Ys = []
        for j in order:
            X, A, m = Y, mats[j], modes[j]
            Y = _cpu.end_mode_product(X, A, m) if cpu else None  # one GEMM, without planning
            if Y is None:
                Y = kernel(X, [A], [m])
            Ys.append(Y)
        ctx.save_for_backward(T, *mats, *Ys[:-1])
        return Y

    @staticmethod
    def backward(ctx, grad):
        T, *rest = ctx.saved_tensors
        mats, Ys = rest[: ctx.n], [T, *rest[ctx.n:]]
        if torch.is_grad_enabled():  # a double backward: the saved intermediates are not in its graph
            Ys = [T]
        order = getattr(ctx, "order", None) or _chain_order(mats)
        if getattr(ctx, "rotated", False) and not torch.is_grad_enabled():
            gT, gA = _rotation_adjoint(grad, T, mats, ctx.modes, Ys, ctx.needs_input_grad[0],
                                       ctx.needs_input_grad[4:])
            return (gT, None, None, None, *gA)
        gT, gA = _chain_adjoint(grad, T, mats, ctx.modes, order, Ys,
                                ctx.needs_input_grad[0], ctx.needs_input_grad[4:])
        return (gT, None, None, None, *gA)


# The rotation (eager CPU, every axis a mode, no carried axes): the chain in axis order 0..D-1,
# each step one GEMM that contracts the tensor's first axis and appends the new one last,
# Y_k = (n_k, ..., n_{D-1}, m_0, ..., m_{k-1}) in C order, as a chain of torch.tensordot calls
# does; after D steps the layout is the result's. No step and no gradient contraction touches
# a middle axis (those need a strided batch or a permuting copy), and the adjoint runs the
# same rotation backwards: with G_k of layout (rest, m_k) and Y_k of layout (n_k, rest),
# dA_k = G_k^T Y_k^T and G_{k-1} = A_k^T G_k^T, each one GEMM on views (``_cpu.gemm``).


def _rotates(T, mats, modes, order) -> bool:
    """Whether the rotation applies: D >= 3 (with two axes both are end axes anyway, and
    the direct products are faster, by a tenth for K = 64), every axis of a
    C-contiguous, nonempty T is a mode, no matrix is banded (the kernel's banded chain is
    faster) and the axis order costs no more than the chain's order."""
    D = len(mats)
    if D < 3 or T.dim() != D or not T.is_contiguous() or T.numel() == 0:
        return False
    if any(A.numel() == 0 or _cpu._band(A) is not None for A in mats):
        return False
    axis_order = sorted(range(D), key=lambda j: modes[j])
    return list(axis_order) == list(order) or _cpu.chain_cost(T, mats, modes, axis_order) <= _cpu.chain_cost(
        T, mats, modes, order)


def _rotation_forward(T, mats, modes) -> List[torch.Tensor]:
    """[Y_1, ..., Y_D] in rotated layouts (each a C-contiguous (R, m_k) GEMM result)."""
    by_axis = sorted(range(len(mats)), key=lambda j: modes[j])
    X, Ys = T, []
    for j in by_axis:
        A = mats[j]
        n = A.shape[1]
        rows = X.numel() // n
        X = _cpu.gemm(X.view(n, rows).mT, A.mT, X.new_empty((rows, A.shape[0])))
        Ys.append(X)
    return Ys


def _rotation_adjoint(grad, T, mats, modes, Ys, needs_T, needs_A):
    by_axis = sorted(range(len(mats)), key=lambda j: modes[j])
    gA: List[Optional[torch.Tensor]] = [None] * len(mats)
    G = grad.contiguous()
    for k in range(len(by_axis) - 1, -1, -1):
        j = by_axis[k]
        A = mats[j]
        m, n = A.shape
        R = G.numel() // m
        Gm = G.view(R, m).mT  # (m, R)
        if needs_A[j]:
            gA[j] = _cpu.gemm(Gm, Ys[k].view(n, R).mT, G.new_empty((m, n)))
        if not needs_T and not any(needs_A[i] for i in by_axis[:k]):
            return None, gA
        G = _cpu.gemm(A.mT, Gm, G.new_empty((n, R)))  # (n, R): the layout of Y_{k-1}
    return G.view(T.shape), gA


_LIB.impl("multi_mode_product", _mmp_composite, "CompositeImplicitAutograd")


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


@_mmp_steps_op.register_fake
def _(T, matrices, modes):
    shape = list(T.shape)
    check_mmp(T, matrices, modes)
    out = []
    for j in _chain_order(matrices):
        shape[modes[j]] = matrices[j].shape[0]
        out.append(T.new_empty(shape))
    return out


@_blend_op.register_fake
def _(values, indices, weights):
    check_blend(values, indices, weights, "values")
    return values.new_empty((indices.shape[0], values.shape[1]))


@_blend_t_op.register_fake
def _(rows, indices, weights, num_nodes):
    check_blend_transpose(rows, indices, weights, num_nodes)
    return rows.new_empty((num_nodes, rows.shape[1]))


# ---- autograd -------------------------------------------------------------------------------


def _mmp_setup(ctx, inputs, output):
    T, matrices, modes = inputs
    ctx.modes = list(modes)
    ctx.n = len(matrices)
    ctx.save_for_backward(T, *matrices)


def _eager(*tensors) -> bool:
    """Whether a backward may call the kernels directly rather than the ops: plain tensors (not
    traced or fake; a saved parameter comes back as its Parameter) with grad mode off, i.e. no
    double backward is being recorded."""
    return not torch.is_grad_enabled() and all(type(t) in _PLAIN for t in tensors)


def _chain_adjoint(grad, T, mats, modes, order, Ys, needs_T, needs_A):
    """Reverse-mode through the chain Y_k = Y_{k-1} x_{s_k} A_{s_k} (Y_0 = T, s = ``order``), as
    autograd would through D single-mode products: G_D = grad, dA_{s_k} = <G_k, Y_{k-1}> over
    every axis but mode s_k, G_{k-1} = G_k x_{s_k} A_{s_k}^T, dT = G_0. ``Ys[k]`` is Y_k where
    given; missing ones (None, or past the list's end) are recomputed, as far as a matrix that
    needs a gradient asks. ``grad`` may be a list (the gradient of every Y_k, k = 1..D; None
    where there is none)."""
    grads = grad if isinstance(grad, (list, tuple)) else [None] * (len(order) - 1) + [grad]
    direct = _eager(T, *mats, *(g for g in grads if g is not None))
    kernel = KERNELS.get(T.device.type, {}).get("multi_mode_product") if direct else None
    mmp = kernel if kernel is not None else (lambda X, As, ms: multi_mode_product(X, As, ms))
    fast = direct and T.device.type == "cpu"

    def mmp1(X, A, m):  # X x_m A: one GEMM without planning where it can be (CPU, eager)
        Y = _cpu.end_mode_product(X, A, m) if fast else None
        return mmp(X, [A], [m]) if Y is None else Y

    gA: List[Optional[torch.Tensor]] = [None] * len(mats)
    if not any(needs_A) and all(g is None for g in grads[:-1]):
        gT = mmp(grads[-1], [A.mT for A in mats], list(modes)) if needs_T else None
        return gT, gA
    last = max((k for k, j in enumerate(order) if needs_A[j]), default=0)  # Y_0 .. Y_last needed
    Ys = list(Ys[: last + 1])
    for k in range(last + 1):
        if k >= len(Ys):
            Ys.append(None)
        if Ys[k] is None:
            j = order[k - 1]
            Ys[k] = mmp1(Ys[k - 1], mats[j], modes[j])
    G = None
    for k in range(len(order) - 1, -1, -1):
        if grads[k] is not None:
            G = grads[k] if G is None else G + grads[k]
        if G is None:
            continue
        j, m = order[k], modes[order[k]]
        if needs_A[j]:
            gA[j] = _contract_all_but(G, Ys[k], m)
        if not needs_T and not any(needs_A[i] for i in order[:k]):
            break
        G = mmp1(G, mats[j].mT, m)
    else:
        return (G if needs_T else None), gA
    return None, gA


def _contract_all_but(G: torch.Tensor, Y: torch.Tensor, m: int) -> torch.Tensor:
    """<G, Y> over every axis but ``m``: (G.shape[m], Y.shape[m]). One ``torch.mm`` on views
    when both are C-contiguous and ``m`` is their first or last axis, else ``torch.tensordot``."""
    if G.is_contiguous() and Y.is_contiguous() and G.numel() and Y.numel():
        if G.dim() == 2:
            return torch.mm(G, Y.mT) if m == 0 else torch.mm(G.mT, Y)
        if m == 0:
            return torch.mm(G.view(G.shape[0], -1), Y.view(Y.shape[0], -1).mT)
        if m == G.dim() - 1:
            return torch.mm(G.view(-1, G.shape[-1]).mT, Y.view(-1, Y.shape[-1]))
    axes = [a for a in range(G.dim()) if a != m]
    return torch.tensordot(G, Y, dims=(axes, axes))


def _mmp_backward(ctx, grad):
    """The fused chain's adjoint (:func:`_chain_adjoint`, its intermediates recomputed)."""
    T, *mats = ctx.saved_tensors
    gT, gA = _chain_adjoint(grad, T, mats, ctx.modes, _chain_order(mats), [T],
                            ctx.needs_input_grad[0], ctx.needs_input_grad[1])
    # ``modes`` (ints) gets None; an empty list must come back as an empty list (torch's
    # structure check counts it as a list of optional tensors)
    return gT, gA, (None if ctx.modes else [])


def _steps_setup(ctx, inputs, output):
    T, matrices, modes = inputs
    ctx.modes = list(modes)
    ctx.n = len(matrices)
    ctx.save_for_backward(T, *matrices, *output[:-1])
    ctx.set_materialize_grads(False)  # the intermediates get no gradient: None, not zeros


def _steps_backward(ctx, grads):
    T, *rest = ctx.saved_tensors
    mats, Ys = rest[: ctx.n], [T, *rest[ctx.n:]]
    gT, gA = _chain_adjoint(list(grads), T, mats, ctx.modes, _chain_order(mats), Ys,
                            ctx.needs_input_grad[0], ctx.needs_input_grad[1])
    return gT, gA, (None if ctx.modes else [])


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
_mmp_steps_op.register_autograd(_steps_backward, setup_context=_steps_setup)
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
    if not isinstance(device_type, str):
        raise TypeError(f"device_type must be a torch device type such as 'cpu' or 'cuda', got "
                        f"{_validate.describe(device_type)}")
    try:
        device = torch.device(device_type)
    except RuntimeError:
        device = None
    if device is None or device.index is not None:
        raise ValueError(f"device_type must be a torch device type (no index) such as 'cpu' or 'cuda', "
                         f"got {device_type!r}")
    if not isinstance(table, dict):
        raise TypeError(f"table must be a dict (op name -> function), got {_validate.describe(table)}")
    for name, fn in table.items():
        if name not in _OPS:
            raise ValueError(f"table: {name!r} is not a kronpe op; the ops are {', '.join(sorted(_OPS))}")
        if not callable(fn):
            raise TypeError(f"table[{name!r}] must be a function, got {_validate.describe(fn)}")
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

    ``modes`` defaults to 0..len(matrices)-1 and may be negative (counted from the end), or one
    integer for one matrix; axes not named are carried along (channels, batches). The chain runs
    in the cheapest order.
    """
    real_tensor("T", T)
    if isinstance(matrices, torch.Tensor):
        raise TypeError("matrices must be a sequence of 2-D tensors, got one tensor (pass [A])")
    matrices = _validate.sequence("matrices", matrices, "2-D tensors")
    matrices = [real_tensor(f"matrices[{j}]", A) for j, A in enumerate(matrices)]
    modes = mode_list(modes, len(matrices), T.dim())
    if not torch.compiler.is_compiling():
        chain_budget(T, matrices, modes)
    return torch.ops.kronpe.multi_mode_product(T, matrices, modes)


def blend(
    values: torch.Tensor,  # (G, C) or (G,)
    indices: torch.Tensor,  # (P, S) int64
    weights: torch.Tensor,  # (P, S)
) -> torch.Tensor:  # (P, C) or (P,)
    """out[p] = sum_s weights[p, s] * values[indices[p, s]]: the blending matrix applied."""
    real_tensor("values", values)
    tensor("indices", indices)
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
    tensor("indices", indices)
    real_tensor("weights", weights)
    num_nodes = size("num_nodes", num_nodes)
    if rows.dim() == 1:
        return torch.ops.kronpe.blend_transpose(rows.unsqueeze(1), indices, weights, num_nodes).squeeze(1)
    return torch.ops.kronpe.blend_transpose(rows, indices, weights, num_nodes)
