"""kronpe's CUDA backend: availability, versions and the TF32 policy.

CuPy arrays and CUDA torch tensors passed to kronpe's functions run on the GPU that holds them,
on the caller's current stream, and come back as the same kind on the same device (see
:mod:`kronpe._adapters.arrays`). This module answers what the installed kronpe can do there.

TF32: float32 mode-n products compute in full float32 by default (cuBLAS
``CUBLAS_COMPUTE_32F``). ``set_allow_tf32(True)`` lets cuBLAS use TF32 tensor cores (about 10
bits of mantissa in the products, several times faster on A100/H100), as
``torch.backends.cuda.matmul.allow_tf32`` does for torch. float64 is never affected.
"""
from __future__ import annotations

from typing import Any, Dict

from . import _core
from ._adapters import cuda as _cuda

__all__ = ["is_built", "is_available", "device_count", "info", "empty_cache", "set_allow_tf32", "allow_tf32"]


def is_built() -> bool:
    """True when this kronpe was compiled with its CUDA kernels."""
    return _cuda.built()


def device_count() -> int:
    """CUDA devices visible now (0 without a driver, a device, or a CUDA build)."""
    return int(_core.cuda_device_count()) if _cuda.built() else 0


def is_available() -> bool:
    """True when the CUDA kernels are built in and a device is visible."""
    return device_count() > 0


def info(load_cublas: bool = True) -> Dict[str, Any]:
    """Runtime facts: ``built``, ``devices``, ``runtime_version`` / ``driver_version`` (CUDA's
    integers, e.g. 13000), ``cublas_header_version`` (built against), and with ``load_cublas``
    (no device needed) ``cublas_loaded``, ``cublas_version``, ``cublas_path`` or
    ``cublas_error``."""
    out: Dict[str, Any] = {"built": is_built(), "devices": device_count()}
    if is_built():
        _cuda.init()
        out.update(_core.cuda_info(bool(load_cublas)))
    return out


def empty_cache() -> int:
    """Free the device memory kronpe's fills keep for the next ones (the GPU multigrid's arrays,
    kept between fills of the same sizes, at most 1 GiB in all; torch's and CuPy's caches are their
    own). Returns the bytes that were kept (0 without CUDA)."""
    if not is_built():
        return 0
    kept = int(_core.cuda_multigrid_cache(False))
    _core.cuda_multigrid_cache(True)
    return kept


def set_allow_tf32(allow: bool) -> None:
    """Let float32 GEMMs use TF32 tensor cores (off by default). No effect without CUDA."""
    if is_built():
        _core.cuda_set_allow_tf32(bool(allow))


def allow_tf32() -> bool:
    """Whether float32 GEMMs may use TF32."""
    return bool(_core.cuda_allow_tf32()) if is_built() else False
