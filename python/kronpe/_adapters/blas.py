"""Hand the C++ core a BLAS the process already loaded (docs/design.rst, "One BLAS").

First choice: NumPy's own OpenBLAS. NumPy's wheels link an ILP64 OpenBLAS whose symbols carry the
suffix ``64_`` (``scipy_sgemm_64_``); SciPy's wheels load a second, LP64 copy. Two copies mean two
thread pools, and on a small machine the idle threads of one spin while the other works (on 2 cores
a sub-millisecond product took 150 times as long right after a NumPy call). So kronpe looks the
symbols up through NumPy's extension module (``dlsym`` searches the libraries it depends on), and
takes them only when the library says it was built with 64-bit integers (``openblas_get_config``
names ``USE64BITINT``): a NumPy user then has one BLAS and one pool.

Otherwise (NumPy built against another BLAS, MKL, Accelerate...): SciPy's BLAS, which SciPy exports
as PyCapsules in ``scipy.linalg.cython_blas.__pyx_capi__``. kronpe checks each capsule's signature
string (LP64 Fortran ``?gemm``: 32-bit ``int`` counts, arguments by pointer) before taking its
address, so a changed SciPy fails loudly instead of corrupting memory. ``KRONPE_BLAS=scipy`` forces
SciPy's (``numpy`` asks for NumPy's and fails if it is not found).
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import os
from typing import Optional, Tuple

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


#: (prefix, suffix) of the ILP64 OpenBLAS builds NumPy ships (scipy-openblas64) or links
_ILP64_NAMES = (("scipy_", "64_"), ("", "64_"))


def _numpy_module_path() -> str:
    try:
        from numpy._core import _multiarray_umath as mod  # NumPy 2
    except ImportError:  # pragma: no cover - NumPy 1
        from numpy.core import _multiarray_umath as mod
    return mod.__file__


def _numpy_ilp64() -> Optional[Tuple[int, int, str]]:
    """(sgemm, dgemm, config) of NumPy's ILP64 OpenBLAS, or None when it is not one."""
    try:
        lib = ctypes.CDLL(_numpy_module_path())  # already loaded: the same handle, no new copy
    except (OSError, ImportError, AttributeError):  # pragma: no cover - static or odd builds
        return None
    for prefix, suffix in _ILP64_NAMES:
        try:
            sgemm = getattr(lib, f"{prefix}sgemm_{suffix}")
            dgemm = getattr(lib, f"{prefix}dgemm_{suffix}")
            config = getattr(lib, f"{prefix}openblas_get_config{suffix}")
        except AttributeError:
            continue
        config.restype, config.argtypes = ctypes.c_char_p, []
        text = (config() or b"").decode(errors="replace")
        if "USE64BITINT" not in text.split():
            continue
        return (ctypes.cast(sgemm, ctypes.c_void_p).value, ctypes.cast(dgemm, ctypes.c_void_p).value,
                text)
    return None


#: which library init() wired: "numpy" or "scipy" (None before init)
_chosen: Optional[str] = None
_numpy_config = ""


def which() -> Optional[str]:
    """The BLAS kronpe calls: "numpy" (NumPy's OpenBLAS) or "scipy" (SciPy's cython_blas)."""
    return _chosen


@functools.lru_cache(maxsize=None)
def blas_name() -> str:
    """Name, version and origin of the BLAS kronpe calls."""
    if _chosen == "numpy":
        try:
            import numpy

            blas = numpy.show_config(mode="dicts")["Build Dependencies"]["blas"]
            name = f"{blas.get('name', 'openblas')} {blas.get('version', '')}".strip()
        except Exception:  # pragma: no cover - very old NumPy
            name = " ".join(_numpy_config.split()[:2]) or "openblas"
        return f"{name} (NumPy's, ILP64)"
    try:
        import scipy

        cfg = scipy.show_config(mode="dicts")
        blas = cfg["Build Dependencies"]["blas"]
        name = f"{blas.get('name', 'unknown')} {blas.get('version', '')}".strip()
    except Exception:  # pragma: no cover - very old SciPy
        name = "scipy cython_blas"
    return f"{name} (SciPy's)"


def init(core) -> None:
    """Give ``core`` (the compiled module) the addresses of sgemm and dgemm: NumPy's ILP64
    OpenBLAS when found (``KRONPE_BLAS=scipy`` skips it), else SciPy's."""
    global _chosen, _numpy_config
    want = os.environ.get("KRONPE_BLAS", "").strip().lower()
    if want not in ("", "numpy", "scipy"):
        raise ValueError(f"KRONPE_BLAS must be 'numpy' or 'scipy', got {want!r}")
    if want != "scipy":
        found = _numpy_ilp64()
        if found is not None:
            core.set_blas64(found[0], found[1])
            _chosen, _numpy_config = "numpy", found[2]
            blas_name.cache_clear()
            return
        if want == "numpy":
            raise RuntimeError("KRONPE_BLAS=numpy: NumPy's BLAS is not an ILP64 OpenBLAS kronpe can find")
    from scipy.linalg import cython_blas

    capi = cython_blas.__pyx_capi__
    core.set_blas(_address(capi, "sgemm"), _address(capi, "dgemm"))
    _chosen = "scipy"
    blas_name.cache_clear()


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


@functools.lru_cache(maxsize=None)
def _thread_controls():
    """(set, get) of the thread count of the BLAS kronpe calls (``which()``), or None. NumPy's
    ILP64 OpenBLAS: ``[scipy_]openblas_set_num_threads64_`` through NumPy's module; SciPy's: the
    file that holds its sgemm (asking the dynamic loader, dladdr), then OpenBLAS's
    ``[scipy_]openblas_set_num_threads`` / ``..._get_num_threads`` in it."""
    from scipy.linalg import cython_blas

    if _chosen == "numpy":
        try:
            lib = ctypes.CDLL(_numpy_module_path())
        except (OSError, ImportError, AttributeError):  # pragma: no cover
            return None
        return _controls_in(lib, [(f"{p}openblas_", s) for p, s in _ILP64_NAMES])
    return _scipy_controls(_address(cython_blas.__pyx_capi__, "sgemm"))


def _scipy_controls(address: int):
    """(set, get) of the OpenBLAS threads of the library holding ``address`` (one of SciPy's
    functions: the dynamic loader names its file, dladdr), or None."""
    try:
        libc = ctypes.CDLL(None)
        libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
        info = _DlInfo()
        if not libc.dladdr(ctypes.c_void_p(address), ctypes.byref(info)):
            return None
        lib = ctypes.CDLL(info.dli_fname.decode())
    except (OSError, AttributeError, TypeError):  # pragma: no cover - no dladdr (not glibc/macOS)
        return None
    return _controls_in(lib, [("scipy_openblas_", ""), ("openblas_", "")])


@functools.lru_cache(maxsize=None)
def _lapack_controls():
    """(set, get) of the threads of the LAPACK that ``scipy.linalg`` calls, or None."""
    from scipy.linalg import cython_lapack

    capsule = cython_lapack.__pyx_capi__.get("dpotrf")
    if capsule is None:  # pragma: no cover
        return None
    return _scipy_controls(int(_get_pointer(capsule, _get_name(capsule))))


@contextlib.contextmanager
def one_lapack_thread():
    """Run ``scipy.linalg`` factorisations inside on one thread. For small ones (a few ms):
    threads gain little there, and a pool that waits for a descheduled worker loses a great deal
    on a busy machine (a 289 x 289 Cholesky: 0.7 ms on one thread, up to a second on two)."""
    controls = _lapack_controls()
    if controls is None:
        yield
        return
    before = int(controls[1]())
    controls[0](1)
    try:
        yield
    finally:
        controls[0](before)


def _controls_in(lib, names):
    """The first (set, get) pair ``{prefix}set_num_threads{suffix}`` / ``..get..`` in ``lib``."""
    for prefix, suffix in names:
        setter = getattr(lib, f"{prefix}set_num_threads{suffix}", None)
        getter = getattr(lib, f"{prefix}get_num_threads{suffix}", None)
        if setter is not None and getter is not None:
            setter.argtypes, setter.restype = [ctypes.c_int], None
            getter.argtypes, getter.restype = [], ctypes.c_int
            return setter, getter
    return None


def set_blas_threads(n: int) -> bool:
    """Set the thread count of the BLAS kronpe calls (OpenBLAS); False when it has no such control."""
    controls = _thread_controls()
    if controls is None:
        return False
    controls[0](int(n))
    return True


def blas_threads():
    """The thread count of the BLAS kronpe calls, or None when it cannot be read."""
    controls = _thread_controls()
    return None if controls is None else int(controls[1]())
