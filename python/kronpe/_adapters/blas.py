"""Hand the C++ core the BLAS that SciPy already loaded (DESIGN.md, "Decisions taken").

SciPy exports its BLAS as PyCapsules in ``scipy.linalg.cython_blas.__pyx_capi__``. We check
each capsule's signature string (LP64 Fortran ``?gemm``: 32-bit ``int`` counts, arguments by
pointer) before taking its address, so a changed SciPy fails loudly instead of corrupting memory.
"""
from __future__ import annotations

import ctypes
import functools

_EXPECTED = {
    "sgemm": ("void (char *, char *, int *, int *, int *", "cython_blas_s *"),
    "dgemm": ("void (char *, char *, int *, int *, int *", "cython_blas_d *"),
}

_get_name = ctypes.pythonapi.PyCapsule_GetName
_get_name.restype = ctypes.c_char_p
_get_name.argtypes = [ctypes.py_object]
_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _address(capi: dict, name: str) -> int:
    capsule = capi[name]
    signature = _get_name(capsule)
    text = signature.decode()
    head, scalar = _EXPECTED[name]
    if not text.startswith(head) or scalar not in text or text.count("*") != 13:
        raise RuntimeError(f"kronpe: unexpected signature for scipy BLAS {name}: {text!r}")
    return int(_get_pointer(capsule, signature))


@functools.lru_cache(maxsize=None)
def blas_name() -> str:
    """Name and version of the BLAS SciPy was built with (the one kronpe calls)."""
    try:
        import scipy

        cfg = scipy.show_config(mode="dicts")
        blas = cfg["Build Dependencies"]["blas"]
        return f"{blas.get('name', 'unknown')} {blas.get('version', '')}".strip()
    except Exception:  # pragma: no cover - very old SciPy
        return "scipy cython_blas"


def init(core) -> None:
    """Give ``core`` (the compiled module) the addresses of sgemm and dgemm."""
    from scipy.linalg import cython_blas

    capi = cython_blas.__pyx_capi__
    core.set_blas(_address(capi, "sgemm"), _address(capi, "dgemm"))
