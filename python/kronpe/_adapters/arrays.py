"""Array adapters: NumPy, torch and CuPy arrays in; (address, shape, strides, dtype) out.

The compiled core sees raw addresses, shapes and strides in elements. Arrays of other
libraries are imported only when such an array arrives (torch and CuPy are optional).
Results go back as the caller's kind: NumPy in gives NumPy out, torch gives torch, and a
CuPy array or a CUDA torch tensor gives the same kind on the same device.

Every array crosses into the core as one :class:`Array` from :func:`describe`: the address, shape
and strides in elements, the dtype, and for device arrays (CuPy arrays, CUDA torch tensors) the
device ordinal and the caller's current stream on that device (``cupy.cuda.get_current_stream().ptr``,
``torch.cuda.current_stream(device).cuda_stream``), on which kronpe enqueues its kernels. New
device arrays (results, scratch memory) come from the same library's allocator on the same
device, so that they are ordered with the caller's work like any CuPy or torch operation.
"""
from __future__ import annotations

import contextlib
import math
from typing import Any, NamedTuple, Optional, Tuple, Union

import numpy as np


class Array(NamedTuple):
    """The one description of an array that the compiled core takes (every ``kronpe._core``
    function that reads or writes an array takes it as an ``Array``, see ``_core.pyi``).
    ``strides`` are in elements, not bytes; ``device`` is -1 for host memory, else the CUDA
    ordinal; ``stream`` is the caller's current cudaStream_t on that device as an integer (0 on
    the host, and the legacy default stream on a device)."""

    address: int
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]
    dtype: str  # "float32" | "float64" | "int64" | "uint8" (workspace)
    device: int
    stream: int

    @property
    def on_device(self) -> bool:
        return self.device >= 0


#: What the bindings take for an array: an :class:`Array`, or a host NumPy array (its own).
Descriptor = Union[Array, np.ndarray]


def on_device(d: Descriptor) -> bool:
    """Whether a descriptor is of device memory."""
    return type(d) is Array and d.device >= 0


def kind(x: Any) -> str:
    """"numpy", "torch" or "cupy" (anything array-like that is neither counts as numpy)."""
    mod = type(x).__module__
    if mod.startswith("torch"):
        return "torch"
    if mod.startswith("cupy"):
        return "cupy"
    return "numpy"


def is_device(x: Any) -> bool:
    """True for a CuPy array or a CUDA torch tensor."""
    if type(x) is np.ndarray:
        return False
    k = kind(x)
    if k == "cupy":
        return hasattr(x, "data") and hasattr(x, "device")
    if k == "torch":
        return getattr(getattr(x, "device", None), "type", None) == "cuda"
    return False


def is_dask(x: Any) -> bool:
    """True for a dask array (dask is not imported to find out)."""
    return type(x).__module__.startswith("dask.")


_DASK_MODULE: list = [None]  # the function that imports kronpe.dask (``set_dask_module``)


def set_dask_module(load) -> None:
    """``load()`` returns :mod:`kronpe.dask`: kronpe's top level gives it (this layer names no
    module above it)."""
    _DASK_MODULE[0] = load


def dask_api(*xs: Any):
    """The module :mod:`kronpe.dask` when any of ``xs`` is a dask array, else None: the one test
    by which the public functions hand dask arrays to it."""
    if not any(is_dask(x) for x in xs):
        return None
    return _DASK_MODULE[0]()


def to_numpy(x: Any, name: str = "array") -> np.ndarray:
    """A NumPy view of a CPU array (torch CPU tensors share memory, gradients are dropped)."""
    k = kind(x)
    if k == "torch":
        if x.device.type != "cpu":
            raise ValueError(f"{name} is a torch tensor on {x.device}; this operation runs on CPU")
        return x.detach().numpy()
    if k == "cupy":
        raise ValueError(f"{name} is a CuPy array on the GPU; this operation runs on CPU")
    try:
        return np.asarray(x)
    except ValueError as exc:  # ragged nested lists
        raise ValueError(f"{name} must be a rectangular array (nested lists of one length per axis): "
                         f"{' '.join(str(exc).split())[:160]}") from None


def to_host(x: Any, name: str = "array") -> np.ndarray:
    """A NumPy array of any array (device arrays are copied to the host)."""
    if is_device(x):
        if kind(x) == "cupy":
            return x.get()
        return x.detach().cpu().numpy()
    return to_numpy(x, name)


def like(result: np.ndarray, template: Any):
    """Return ``result`` as the same kind of array as ``template`` (CPU)."""
    if kind(template) == "torch":
        import torch

        return torch.from_numpy(np.ascontiguousarray(result))
    return result


_KERNEL_DTYPES = ("float32", "float64", "int64")


_NUMPY_NAMES = {np.dtype(n): n for n in _KERNEL_DTYPES}  # dtype.name is slow on hot paths


def _element_strides(name: str, strides, item: int) -> Tuple[int, ...]:
    if any(s % item for s in strides):
        raise ValueError(f"{name} has strides {strides} that are not a multiple of its item size")
    return tuple(s // item for s in strides)


def describe(x: Any, name: str = "array", at: Optional[Tuple[int, int]] = None) -> Descriptor:
    """The :class:`Array` of a torch tensor (CPU or CUDA), a CuPy array or an array-like of
    float32, float64 or int64 (indices); a NumPy array is its own descriptor (the bindings read
    its buffer). The caller keeps ``x`` alive while the core uses a descriptor: it holds only an
    address (``_core.f(describe(np.empty(n)))`` hands the core freed memory). ``at``, the
    (device index, stream) of a device array when the caller already knows them (:func:`where`),
    saves asking torch or CuPy for the current stream once per operand."""
    if type(x) is np.ndarray:  # the hot path: a host NumPy array is its own descriptor (the
        # binding reads its buffer: address, shape, strides, dtype), and it stays alive with it
        if x.dtype not in _NUMPY_NAMES:
            raise ValueError(f"{name} must be float32 or float64, got {x.dtype}")
        return x
    k = kind(x)
    if k == "torch":
        dt = str(x.dtype)[6:]  # "torch.float32" -> "float32"
        if dt not in _KERNEL_DTYPES:
            raise ValueError(f"{name} must be float32 or float64, got {dt}")
        if not x.is_cuda:
            at = (-1, 0)
        elif at is None:
            at = where(x)
        return Array(x.data_ptr(), tuple(x.shape), tuple(x.stride()), dt, *at)
    x = np.asarray(x) if k == "numpy" else x
    dt = np.dtype(x.dtype).name
    if dt not in _KERNEL_DTYPES:
        raise ValueError(f"{name} must be float32 or float64, got {dt}")
    if k == "numpy":
        return x
    strides = _element_strides(name, x.strides, np.dtype(x.dtype).itemsize)
    return Array(int(x.data.ptr), tuple(x.shape), strides, dt, *(at or where(x)))


def where(x: Any) -> Tuple[int, int]:
    """(device index, current stream) of a device array: what :func:`describe` records."""
    return device_index(x), current_stream(x)


def host_array(x: np.ndarray, name: str = "array") -> Array:
    """The explicit :class:`Array` of a host NumPy array: what the bindings read from the array
    itself (for tests and tools that edit a descriptor)."""
    dt = _NUMPY_NAMES.get(x.dtype)
    if dt is None:
        raise ValueError(f"{name} must be float32 or float64, got {x.dtype}")
    return Array(x.ctypes.data, x.shape, _element_strides(name, x.strides, x.itemsize), dt, -1, 0)


# ---- device arrays (CuPy, CUDA torch) ------------------------------------------------------------


def device_index(x: Any) -> int:
    """CUDA ordinal of a device array."""
    return int(x.device.id) if kind(x) == "cupy" else int(x.device.index or 0)


def current_stream(x: Any) -> int:
    """The caller's current stream on the array's device, as an integer cudaStream_t."""
    if kind(x) == "cupy":
        import cupy

        with cupy.cuda.Device(device_index(x)):
            return int(cupy.cuda.get_current_stream().ptr)
    import torch

    return raw_stream(torch, device_index(x))


def raw_stream(torch: Any, device: int) -> int:
    """torch's current cudaStream_t on ``device`` as an integer: its C accessor where the build has
    it (what torch's own compiled kernels call; 0.3 us) else ``torch.cuda.current_stream`` (3.3 us
    on an H100 machine's host, for a Python stream object)."""
    get = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if get is not None:
        return int(get(device))
    return int(torch.cuda.current_stream(device).cuda_stream)


def dtype_name(x: Any) -> str:
    """NumPy name of any array's dtype ("float32", "int64", ...)."""
    if isinstance(x, np.ndarray):  # (the kernels' dtypes by lookup: dtype.name is slow)
        return _NUMPY_NAMES.get(x.dtype) or x.dtype.name
    if kind(x) == "torch":
        return str(x.dtype).replace("torch.", "")
    return np.dtype(x.dtype).name


def device_empty(template: Any, shape, dtype: str):
    """An uninitialised array of the template's kind on its device."""
    shape = tuple(int(n) for n in shape)
    if kind(template) == "cupy":
        import cupy

        with cupy.cuda.Device(device_index(template)):
            return cupy.empty(shape, dtype=dtype)
    import torch

    return torch.empty(shape, dtype=getattr(torch, dtype), device=template.device)


def device_workspace(template: Any, nbytes: int, at: Optional[Tuple[int, int]] = None) -> Tuple[Any, Optional[Array]]:
    """Scratch memory on the template's device: (keep-alive array, its uint8 :class:`Array`
    aligned to 256 bytes as the kernels want), or (None, None) for no bytes. ``at``: the
    template's (device, stream) when known (:func:`where`)."""
    nbytes = int(nbytes)
    if nbytes <= 0:
        return None, None
    buf = device_empty(template, (nbytes + 255,), "uint8")
    address = int(buf.data.ptr) if kind(template) == "cupy" else int(buf.data_ptr())
    return buf, Array(address + (-address) % 256, (nbytes,), (1,), "uint8", *(at or where(template)))


def cast(x: Any, dtype: str):
    """x with the given dtype, of the same kind and on the same device (no copy when it
    already has it); e.g. blending weights, which the kernels read in float64."""
    if dtype_name(x) == dtype:
        return x
    k = kind(x)
    if k == "numpy":
        return np.asarray(x, dtype=dtype)
    if k == "cupy":
        return x.astype(dtype)
    import torch

    return x.to(getattr(torch, dtype))


_ALIGN = 64  # bytes: a cache line, what the CPU kernels' streaming stores need
_ALIGN_FROM = 16 << 20  # bytes: smaller arrays come as NumPy allocates them


def empty_aligned(shape, dtype) -> np.ndarray:
    """``np.empty(shape, dtype)``, its data starting on a 64-byte boundary when it is 16 MiB or
    more (NumPy aligns large arrays to 16 bytes only): the CPU chains write results that large
    with streaming stores, which take whole aligned cache lines."""
    dt = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
    nbytes = math.prod(shape) * dt.itemsize
    if nbytes < _ALIGN_FROM:
        return np.empty(shape, dt)
    raw = np.empty(nbytes + _ALIGN, np.uint8)
    skip = -raw.ctypes.data % _ALIGN
    return raw[skip:skip + nbytes].view(dt).reshape(shape)


def logical_view(buf: Any, shape, axes) -> Any:
    """A dense buffer written with its axes in the physical order ``axes`` (outermost first, as
    the mode-product kernels report it), viewed with the logical ``shape`` (no copy)."""
    axes = [int(a) for a in axes]
    if axes == sorted(axes):
        return buf
    phys = buf.reshape([int(shape[a]) for a in axes])
    perm = sorted(range(len(axes)), key=axes.__getitem__)  # the inverse permutation
    return phys.permute(perm) if kind(buf) == "torch" else phys.transpose(perm)


def device_contiguous(x: Any):
    """A C-contiguous version of a device array (no copy when it already is)."""
    if kind(x) == "cupy":
        import cupy

        return cupy.ascontiguousarray(x)
    return x.contiguous()


def device_from_host(arr: np.ndarray, template: Any):
    """A host array copied onto the template's device, as the template's kind."""
    arr = np.ascontiguousarray(arr)
    if kind(template) == "cupy":
        import cupy

        with cupy.cuda.Device(device_index(template)):
            return cupy.asarray(arr)
    import torch

    return torch.from_numpy(arr).to(template.device)


def device_minmax(x: Any) -> Tuple[float, float]:
    """(min, max) of a non-empty device array in one transfer (NaN propagates into both)."""
    if kind(x) == "cupy":
        import cupy

        lo, hi = cupy.stack([x.min(), x.max()]).get().tolist()
    else:
        import torch

        t = x.detach()
        lo, hi = torch.stack([t.min(), t.max()]).double().cpu().tolist()
    return float(lo), float(hi)


def same_device(x: Any, y: Any) -> bool:
    """Whether two device arrays are of the same kind on the same device."""
    return kind(x) == kind(y) and device_index(x) == device_index(y)


def host_if_device(x: Any, name: str = "array"):
    """x itself, or a NumPy copy of x when it is a device array."""
    return to_host(x, name) if is_device(x) else x


def device_module(x: Any):
    """The array library of a device array: the cupy or the torch module."""
    if kind(x) == "cupy":
        import cupy

        return cupy
    import torch

    return torch


def device_scope(x: Any):
    """A context with x's device current (CuPy's kernels run on the current device)."""
    if kind(x) == "cupy":
        import cupy

        return cupy.cuda.Device(device_index(x))
    return contextlib.nullcontext()


def device_sum(x: Any, axes: Tuple[int, ...]):
    """x summed over ``axes`` (none: x itself; torch sums everything for dim=())."""
    if not axes:
        return x
    return x.sum(axis=axes) if kind(x) == "cupy" else x.sum(dim=axes)


def device_concat(parts: list):
    """The device arrays ``parts`` (one kind) joined along their first axis."""
    lib = device_module(parts[0])
    return lib.concatenate(parts) if kind(parts[0]) == "cupy" else lib.cat(parts)


def device_copy(x: Any):
    """A C-contiguous copy of a device array."""
    if kind(x) == "cupy":
        return device_module(x).array(x, order="C", copy=True)
    return x.clone(memory_format=device_module(x).contiguous_format)


def finite_flag(x: Any):
    """A device boolean, true when every value of x is finite: its sum in float64 is (one
    reduction; NaN and Inf reach the sum, which float32 values cannot overflow), confirmed
    element by element by ``check_finite`` only when it is not."""
    lib = device_module(x)
    return lib.isfinite(x.sum(dtype=lib.float64))


def check_finite(x: Any, ok, name: str = "signal") -> None:
    """ValueError naming ``name`` unless ``ok`` (a bool or a device boolean: read back here)."""
    if ok if isinstance(ok, bool) else bool(to_host(ok)):
        return
    lib = device_module(x)
    if bool(to_host(lib.isfinite(x).all())):  # a float64 sum of huge finite values overflowed
        return
    found = "NaN" if bool(to_host(lib.isnan(x).any())) else "Inf"
    raise ValueError(f"{name} must be finite, found {found}")
