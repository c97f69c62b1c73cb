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


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


@functools.lru_cache(maxsize=None)
def _thread_controls():
    """(set, get) of the thread count of the library behind SciPy's sgemm, or None: found by
    asking the dynamic loader which file holds sgemm (dladdr), then looking for OpenBLAS's
    ``[scipy_]openblas_set_num_threads`` / ``..._get_num_threads`` in it."""
    from scipy.linalg import cython_blas

    try:
        libc = ctypes.CDLL(None)
        libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
        info = _DlInfo()
        if not libc.dladdr(ctypes.c_void_p(_address(cython_blas.__pyx_capi__, "sgemm")), ctypes.byref(info)):
            return None
        lib = ctypes.CDLL(info.dli_fname.decode())
    except (OSError, AttributeError, TypeError):  # pragma: no cover - no dladdr (not glibc/macOS)
        return None
    for prefix in ("scipy_openblas", "openblas"):
        setter = getattr(lib, f"{prefix}_set_num_threads", None)
        getter = getattr(lib, f"{prefix}_get_num_threads", None)
        if setter is not None and getter is not None:
            setter.argtypes, setter.restype = [ctypes.c_int], None
            getter.argtypes, getter.restype = [], ctypes.c_int
            return setter, getter
    return None


def set_blas_threads(n: int) -> bool:
    """Set the thread count of SciPy's BLAS (OpenBLAS); False when it has no such control."""
    controls = _thread_controls()
    if controls is None:
        return False
    controls[0](int(n))
    return True


def blas_threads():
    """The thread count of SciPy's BLAS, or None when it cannot be read."""
    controls = _thread_controls()
    return None if controls is None else int(controls[1]())
