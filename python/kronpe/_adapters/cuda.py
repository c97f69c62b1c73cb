"""The CUDA backend from Python (internal): cuBLAS discovery and calls into ``_core.cuda_*``.

Used only when a CuPy array or a CUDA torch tensor reaches kronpe (CuPy and torch themselves are
imported by :mod:`kronpe._adapters.arrays` when such an array arrives). Every function here takes device
arrays, checks them, allocates results and scratch memory with the caller's library on the
caller's device, and enqueues the kernels on the caller's current stream (no synchronisation,
except the one transfer of (min, max) that validates coordinates).

cuBLAS is loaded by the compiled module on first use (dlopen). The candidates handed to it are
the files where torch and CuPy find theirs: the nvidia-cublas wheel (``site-packages/nvidia/
cu13/lib/libcublas.so.13``), then ``$CUDA_HOME/lib64``; failing those, the soname on the system's
search path (or the copy already loaded by torch/CuPy).
"""
from __future__ import annotations

import os
import sys
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from .. import _core
from . import arrays as _arrays, validate as _validate

_NOT_BUILT = (
    "kronpe was built without CUDA: {what} got a GPU array. Reinstall kronpe where nvcc and the "
    "cuBLAS headers are available (pip install nvidia-cublas; KRONPE_CUDA=ON pip install .), or "
    "pass host arrays."
)
_paths_set = False


def built() -> bool:
    """Whether the compiled module has the CUDA kernels."""
    return bool(_core.cuda_built())


def require(what: str) -> None:
    """RuntimeError naming ``what`` when the module was built without CUDA."""
    if not built():
        raise RuntimeError(_NOT_BUILT.format(what=what))
    init()


def cublas_candidates() -> List[str]:
    """Files that may hold the cuBLAS kronpe was compiled against, most likely first."""
    major = int(_core.cuda_info(False)["cublas_header_version"]) // 10000 or 13
    name = f"libcublas.so.{major}"
    out: List[str] = []
    for pkg in (f"nvidia.cu{major}", "nvidia.cublas"):
        try:
            roots = list(__import__(pkg, fromlist=["_"]).__path__)
        except Exception:
            continue
        out += [os.path.join(r, "lib", name) for r in roots]
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            out.append(os.path.join(os.environ[env], "lib64", name))
    return [p for p in out if os.path.isfile(p)]


def init() -> None:
    """Hand the cuBLAS candidates to the compiled module (once)."""
    global _paths_set
    if not _paths_set and built():
        _core.cuda_set_cublas_paths(cublas_candidates())
        _paths_set = True


def check_same_device(template: Any, x: Any, name: str) -> None:
    if not _arrays.is_device(x) or not _arrays.same_device(template, x):
        where = f"{_arrays.kind(x)} array" + (f" on cuda:{_arrays.device_index(x)}" if _arrays.is_device(x) else " on the host")
        raise ValueError(
            f"{name} must be a {_arrays.kind(template)} array on cuda:{_arrays.device_index(template)} "
            f"(like the other operands), got a {where}"
        )


def float_dtype(name: str, x: Any) -> str:
    """float32 stays float32, float64 stays float64, other real dtypes become float64 (TypeError
    for complex and non-numbers, as on the host)."""
    dt = _validate.real_dtype(name, _arrays.dtype_name(x))
    return dt.name if dt in (np.float32, np.float64) else "float64"


def coords(name: str, x: Any, dtype: Optional[str] = None):
    """A 1-D device array of finite coordinates in [0, 1] (one device-to-host transfer)."""
    if len(x.shape) != 1:
        raise ValueError(f"{name} must be a 1-D array of coordinates, got shape {tuple(x.shape)}")
    x = _arrays.cast(x, dtype or float_dtype(name, x))
    if x.shape[0]:
        lo, hi = _arrays.device_minmax(x)
        if not (np.isfinite(lo) and np.isfinite(hi)):
            raise ValueError(f"{name} must be finite, found NaN or Inf")
        if lo < 0 or hi > 1:
            raise ValueError(f"{name} must lie in [0, 1], got values in [{lo:g}, {hi:g}]")
    return x


# ---- mode-n products -----------------------------------------------------------------------


def _one_torch_float(T: Any, matrices: Sequence[Any]) -> Optional[str]:
    """"float32" / "float64" when T and every matrix are CUDA torch tensors of that dtype on T's
    device (the usual call, known from a few attribute reads), else None (the general checks)."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(T, torch.Tensor) or not T.is_cuda:
        return None
    dt = T.dtype
    if dt is not torch.float32 and dt is not torch.float64:
        return None
    dev = T.get_device()
    for a in matrices:
        if not isinstance(a, torch.Tensor) or a.dtype is not dt or not a.is_cuda or a.get_device() != dev:
            return None
    return "float32" if dt is torch.float32 else "float64"


# workspace bytes of a chain by its signature (shapes, strides, modes, layout, dtype): the
# planner's answer, asked once per signature (a dict lookup instead of a call that plans)
_WORKSPACE: dict = {}
_WORKSPACE_MAX = 512


def _torch_chain(T: Any, mats: Sequence[Any], modes: Tuple[int, ...], order: str, dt: str):
    """The chain of CUDA torch tensors of one float dtype on one device (``_one_torch_float``),
    ``modes`` checked: descriptors built from the tensors directly, the workspace size from
    ``_WORKSPACE``: on a 64^3 x 3 chain the general path's checks and conversions would cost more
    than the GEMMs themselves."""
    import torch

    dev = T.get_device()
    at = (dev, _arrays.raw_stream(torch, dev))
    tb = _arrays.Array(T.data_ptr(), tuple(T.shape), T.stride(), dt, *at)
    mbs = [_arrays.Array(a.data_ptr(), tuple(a.shape), a.stride(), dt, *at) for a in mats]
    out_shape = list(tb.shape)
    for b, k in zip(mbs, modes):
        out_shape[k] = b.shape[0]
    any_layout = order == "K"
    key = (tb.shape, tb.strides, modes, any_layout, dt, *[(b.shape, b.strides) for b in mbs])
    nbytes = _WORKSPACE.get(key)
    if nbytes is None:
        nbytes = int(_core.cuda_multi_mode_workspace(tb, mbs, list(modes), any_layout))
        if len(_WORKSPACE) >= _WORKSPACE_MAX:
            _WORKSPACE.clear()
        _WORKSPACE[key] = nbytes
    out = torch.empty(out_shape, dtype=T.dtype, device=T.device)
    ob = _arrays.Array(out.data_ptr(), tuple(out_shape), out.stride(), dt, *at)
    ws = None
    if nbytes > 0:
        buf = torch.empty(nbytes + 255, dtype=torch.uint8, device=T.device)
        address = buf.data_ptr()
        ws = _arrays.Array(address + (-address) % 256, (nbytes,), (1,), "uint8", *at)
    axes = _core.cuda_multi_mode_product(tb, mbs, list(modes), ob, any_layout, ws)
    return _arrays.logical_view(out, out_shape, axes)


def multi_mode_product(T: Any, matrices: Sequence[Any], modes: Tuple[int, ...], order: str):
    """kronpe.ops.multi_mode_product for a device tensor (host matrices are uploaded)."""
    require("multi_mode_product")
    dt = _one_torch_float(T, matrices)
    if dt is not None:  # nothing to upload, check or cast
        return _torch_chain(T, matrices, modes, order, dt)
    mats = []
    for j, a in enumerate(matrices):
        if not _arrays.is_device(a):
            a = _arrays.device_from_host(_arrays.to_numpy(a, f"matrices[{j}]"), T)
        check_same_device(T, a, f"matrices[{j}]")
        mats.append(a)
    dts = [float_dtype("T", T)] + [float_dtype(f"matrices[{j}]", a) for j, a in enumerate(mats)]
    dt = "float32" if all(d == "float32" for d in dts) else "float64"
    T = _arrays.cast(T, dt)
    mats = [_arrays.cast(a, dt) for a in mats]
    at = _arrays.where(T)  # one stream lookup for every operand (all on T's device)
    tb = _arrays.describe(T, "T", at)
    mbs = [_arrays.describe(a, f"matrices[{j}]", at) for j, a in enumerate(mats)]
    out_shape = list(tb.shape)
    for b, k in zip(mbs, modes):
        out_shape[k] = b.shape[0]
    out = _arrays.device_empty(T, out_shape, dt)
    any_layout = order == "K"
    _keep, ws = _arrays.device_workspace(T, _core.cuda_multi_mode_workspace(tb, mbs, list(modes), any_layout), at)
    axes = _core.cuda_multi_mode_product(tb, mbs, list(modes), _arrays.describe(out, "out", at), any_layout, ws)
    return _arrays.logical_view(out, out_shape, axes)


def strided_copy(src: Any, dst: Any) -> None:
    """dst[...] = src[...] for two device arrays of one shape and dtype (any strides)."""
    require("strided_copy")
    _core.cuda_strided_copy(_arrays.describe(src, "src"), _arrays.describe(dst, "dst"))


# ---- embedders --------------------------------------------------------------------------------


def embed(embedder, x: Any, out: Any = None):
    """embedder(x) for a device x: (N, K) of x's kind, dtype and device."""
    require(f"{type(embedder).__name__}(x)")
    x = coords("x", x)
    if any(s < 0 for s in _arrays.describe(x, "x").strides):
        x = _arrays.device_contiguous(x)
    xb = _arrays.describe(x, "x")
    width = embedder.K
    if out is None:
        out = _arrays.device_empty(x, (xb.shape[0], width), xb.dtype)
    else:
        check_same_device(x, out, "out")
        if tuple(out.shape) != (xb.shape[0], width) or _arrays.dtype_name(out) != xb.dtype:
            raise ValueError(
                f"out must have shape {(xb.shape[0], width)} and dtype {xb.dtype}, got "
                f"{tuple(out.shape)} {_arrays.dtype_name(out)}"
            )
    ob = _arrays.describe(out, "out")
    if any(s < 0 for s in ob.strides):
        raise ValueError("out must have non-negative strides")
    kind, args = embedder._kernel_args()
    nbytes = _core.cuda_embed_fourier_workspace(len(args["omega"])) if kind == "fourier" else 0
    _keep, ws = _arrays.device_workspace(x, nbytes)
    embedder._run_kernel(xb, ob, ws)
    return out


# ---- blending matrix ------------------------------------------------------------------------


def blend_weights(axes, normalize: bool, points: Any, nnz: int):
    """Stored (indices int64, weights float64) of device points, each (P, nnz)."""
    require("BlendingMatrix")
    P = points.shape[0]
    idx = _arrays.device_empty(points, (P, nnz), "int64")
    w = _arrays.device_empty(points, (P, nnz), "float64")
    _keep, ws = _arrays.device_workspace(points, _core.cuda_blend_fly_workspace(axes))
    _core.cuda_blend_weights(axes, normalize, _arrays.describe(points, "points"), _arrays.describe(idx),
                             _arrays.describe(w), ws)
    return idx, w


def blend_plan(template: Any, P: int, nnz: int, grid_size: int, axes=None, points: Any = None,
               indices: Any = None):
    """(perm, offsets) of the deterministic transpose, from device points (with the kernels'
    axes) or from stored device indices."""
    require("blend_transpose")
    perm = _arrays.device_empty(template, (P * nnz,), "int64")
    offsets = _arrays.device_empty(template, (grid_size + 1,), "int64")
    nbytes = _core.cuda_blend_plan_workspace(P, nnz, grid_size)
    if points is not None:
        nbytes += _core.cuda_blend_fly_workspace(axes)
    _keep, ws = _arrays.device_workspace(template, nbytes)
    pa, oa = _arrays.describe(perm), _arrays.describe(offsets)
    if points is not None:
        _core.cuda_blend_plan_fly(axes, _arrays.describe(points, "points"), pa, oa, ws)
    else:
        _core.cuda_blend_plan_stored(_arrays.describe(indices, "indices"), grid_size, pa, oa, ws)
    return perm, offsets


def blend(values2: Any, out2: Any, *, axes=None, normalize: bool = True, points: Any = None,
          indices: Any = None, weights: Any = None) -> None:
    """out2 (P, C) = B values2 (G, C) on the device: on the fly from points (with the kernels'
    axes) or from stored (indices, weights)."""
    require("blend")
    at = _arrays.where(values2)  # one stream lookup for every operand
    vb, ob = _arrays.describe(values2, "values", at), _arrays.describe(out2, "out", at)
    if points is not None:
        _keep, ws = _arrays.device_workspace(values2, _core.cuda_blend_fly_workspace(axes), at)
        _core.cuda_blend_fly(axes, normalize, _arrays.describe(points, "points", at), vb, ob, ws)
    else:
        _core.cuda_blend_stored(_arrays.describe(indices, "indices", at), _arrays.describe(weights, "weights", at),
                                vb, ob)


def blend_transpose(values2: Any, out2: Any, *, plan=None, axes=None, normalize: bool = True,
                    points: Any = None, indices: Any = None, weights: Any = None) -> None:
    """out2 (G, C) = B^T values2 (P, C) on the device; deterministic with a plan (perm,
    offsets), atomic without."""
    require("blend_transpose")
    at = _arrays.where(values2)
    vb, ob = _arrays.describe(values2, "values", at), _arrays.describe(out2, "out", at)
    pa = oa = None
    if plan is not None:
        pa, oa = _arrays.describe(plan[0], "perm", at), _arrays.describe(plan[1], "offsets", at)
    if points is not None:
        _keep, ws = _arrays.device_workspace(values2, _core.cuda_blend_fly_workspace(axes), at)
        _core.cuda_blend_transpose_fly(axes, normalize, _arrays.describe(points, "points", at), vb, ob, pa, oa, ws)
    else:
        _core.cuda_blend_transpose_stored(_arrays.describe(indices, "indices", at),
                                          _arrays.describe(weights, "weights", at), vb, ob, pa, oa)
