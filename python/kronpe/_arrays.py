"""Array adapters: NumPy, torch and CuPy arrays in; (address, shape, strides, dtype) out.

The compiled core sees raw addresses, shapes and strides in elements. Arrays of other
libraries are imported only when such an array arrives (torch and CuPy are optional).
Results go back as the caller's kind: NumPy in gives NumPy out, torch gives torch.
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


def kind(x: Any) -> str:
    """"numpy", "torch" or "cupy" (anything array-like that is neither counts as numpy)."""
    mod = type(x).__module__
    if mod.startswith("torch"):
        return "torch"
    if mod.startswith("cupy"):
        return "cupy"
    return "numpy"


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
