"""Array adapters: NumPy, torch and CuPy arrays in; (address, shape, strides, dtype) out.

The compiled core sees raw addresses, shapes and strides in elements. Arrays of other
libraries are imported only when such an array arrives (torch and CuPy are optional).
Results go back as the caller's kind: NumPy in gives NumPy out, torch gives torch, and a
CuPy array or a CUDA torch tensor gives the same kind on the same device.

Device arrays (CuPy arrays, CUDA torch tensors) are described by :func:`device_buffer`: the
address, shape and strides as for host arrays, plus the device ordinal and the caller's current
stream on that device (``cupy.cuda.get_current_stream().ptr``,
``torch.cuda.current_stream(device).cuda_stream``), on which kronpe enqueues its kernels. New
device arrays (results, scratch memory) come from the same library's allocator on the same
device, so that they are ordered with the caller's work like any CuPy or torch operation.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Tuple

import numpy as np


@dataclass(frozen=True)
class Buffer:
    """What a kernel needs of an array. ``strides`` are in elements, not bytes."""

    address: int
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]
    dtype: str  # "float32" | "float64"
    device: str  # "cpu" | "cuda:N"


@dataclass(frozen=True)
class DeviceBuffer(Buffer):
    """A device array: ``device_index`` (CUDA ordinal) and ``stream`` (the current
    cudaStream_t on that device, as an integer; 0 is the legacy default stream)."""

    device_index: int = 0
    stream: int = 0


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
    k = kind(x)
    if k == "cupy":
        return hasattr(x, "data") and hasattr(x, "device")
    if k == "torch":
        return getattr(getattr(x, "device", None), "type", None) == "cuda"
    return False


def to_numpy(x: Any, name: str = "array") -> np.ndarray:
    """A NumPy view of a CPU array (torch CPU tensors share memory, gradients are dropped)."""
    k = kind(x)
    if k == "torch":
        if x.device.type != "cpu":
            raise ValueError(f"{name} is a torch tensor on {x.device}; this operation runs on CPU")
        return x.detach().numpy()
    if k == "cupy":
        raise ValueError(f"{name} is a CuPy array on the GPU; this operation runs on CPU")
    return np.asarray(x)


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


def buffer(arr: np.ndarray, name: str = "array") -> Buffer:
    """Describe a NumPy float32/float64 array for the core (strides in elements)."""
    if arr.dtype not in (np.float32, np.float64):
        raise ValueError(f"{name} must be float32 or float64, got {arr.dtype}")
    item = arr.itemsize
    if any(s % item for s in arr.strides):
        raise ValueError(f"{name} has strides {arr.strides} that are not a multiple of its item size")
    return Buffer(
        address=arr.ctypes.data,
        shape=tuple(int(s) for s in arr.shape),
        strides=tuple(int(s) // item for s in arr.strides),
        dtype=arr.dtype.name,
        device="cpu",
    )


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

    return int(torch.cuda.current_stream(x.device).cuda_stream)


def device_buffer(x: Any, name: str = "array") -> DeviceBuffer:
    """Describe a float32/float64 (or int64, for indices) device array (strides in elements)."""
    k = kind(x)
    if k == "cupy":
        dt = np.dtype(x.dtype)
        item = dt.itemsize
        if any(s % item for s in x.strides):
            raise ValueError(f"{name} has strides {x.strides} that are not a multiple of its item size")
        strides = tuple(int(s) // item for s in x.strides)
        address = int(x.data.ptr)
    else:
        dt = np.dtype(str(x.dtype).replace("torch.", ""))
        strides = tuple(int(s) for s in x.stride())
        address = int(x.data_ptr())
    if dt not in (np.float32, np.float64, np.int64):
        raise ValueError(f"{name} must be float32 or float64, got {dt}")
    dev = device_index(x)
    return DeviceBuffer(
        address=address,
        shape=tuple(int(n) for n in x.shape),
        strides=strides,
        dtype=dt.name,
        device=f"cuda:{dev}",
        device_index=dev,
        stream=current_stream(x),
    )


def dtype_name(x: Any) -> str:
    """NumPy name of any array's dtype ("float32", "int64", ...)."""
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


def device_workspace(template: Any, nbytes: int):
    """Scratch memory on the template's device: (keep-alive array or None, address, bytes)."""
    nbytes = int(nbytes)
    if nbytes <= 0:
        return None, 0, 0
    buf = device_empty(template, (nbytes + 255,), "uint8")
    address = int(buf.data.ptr) if kind(template) == "cupy" else int(buf.data_ptr())
    pad = (-address) % 256  # the kernels want 256-byte aligned scratch
    return buf, address + pad, nbytes


def device_cast(x: Any, dtype: str):
    """x with the given dtype (no copy when it already has it)."""
    if dtype_name(x) == dtype:
        return x
    if kind(x) == "cupy":
        return x.astype(dtype)
    import torch

    return x.to(getattr(torch, dtype))


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
