"""kronpe: fit signals with Kronecker-structured positional encodings.

Closed-form fits of images, videos and volumes on grids (mode-n products and per-axis SVDs),
exact ridge fits at scattered points (a sparse blending matrix and a Krylov solver), the
embedders of the papers with their analysis, and torch ops for other people's models.
"""
from __future__ import annotations

from . import _core, cuda
from ._adapters import arrays as _arrays
from ._adapters.blas import blas_name as _blas_name, init as _init_blas

_init_blas(_core)


def _dask_module():
    """kronpe.dask, imported when the first dask array arrives (dask is optional)."""
    from . import dask

    return dask


# the public functions hand dask arrays to kronpe.dask through _adapters.arrays.dask_api: wired
# here, at the top, so that no module below the public API imports it
_arrays.set_dask_module(_dask_module)

from .ops import mode_product, multi_mode_product  # noqa: E402
from .operators.blending import BlendingMatrix  # noqa: E402
from .operators.penalty import DifferencePenalty  # noqa: E402
from .solvers.krylov import ConvergenceWarning  # noqa: E402
from .solvers.points import PointModel  # noqa: E402
from .solvers.protocol import fit_points  # noqa: E402
from .solvers.fit import GridModel, GridPlan, fit_grid  # noqa: E402
from .resampling import resample, upsample  # noqa: E402
from .gridding import SplineModel, fit_spline, grid  # noqa: E402
from .io import ModelFileError, ModelVersionError, load  # noqa: E402
from . import data  # noqa: E402  (sample loaders; scikit-image is imported on first use)
from .threads import get_num_threads, set_num_threads  # noqa: E402

__version__ = _core.build_info()["version"]

from . import embedders as _embedders  # noqa: E402  (after the BLAS is wired)
from .embedders import *  # noqa: E402,F401,F403  (the names in embedders.__all__)
from .analysis import (  # noqa: E402
    embedded_distance,
    gaussian_sigma_for_rff,
    plot_distance,
    plot_stable_rank_vs_n,
    plot_stable_rank_vs_sigma,
    rff_sigma_for_gaussian,
    sigma_for_spacing,
    stable_rank,
)


def clear_caches() -> None:
    """Forget everything kronpe keeps between calls: per-axis factorisations, resampling
    operators, planned mode-n chains, the solvers' work memory and the CUDA device blocks (the
    next call runs cold, as in a new process)."""
    from . import _caches

    _caches.clear()


def build_info() -> dict:
    """What this kronpe was built with.

    Returns
    -------
    dict
        ``version``, ``compiler``, ``build_type``, ``blas`` (the library the CPU kernels call),
        ``openmp`` (bool), ``cuda`` (bool: CUDA kernels compiled in), ``cuda_compiler``,
        ``cuda_architectures``, ``cuda_devices`` (devices visible now), ``cublas`` (version
        string of the cuBLAS found at run time, or None) and ``cublas_path`` (where it was found,
        or why not). Without CUDA the last three are 0, None and "". ``chain_gemm``: the GEMM of
        the CPU mode-product chains, "packed AVX-512" or "packed AVX2" (kronpe's own, on CPUs with
        AVX-512, or with AVX2 and FMA) or "BLAS".
    """
    info = dict(_core.build_info())
    info["blas"] = _blas_name()
    if _core.chain_gemm() == "packed":  # its kernels are the widest the vector paths allow
        info["chain_gemm"] = "packed AVX-512" if info["simd"] == "avx512" else "packed AVX2"
    else:
        info["chain_gemm"] = "BLAS"
    info["cuda_devices"] = cuda.device_count()
    info["cublas"], info["cublas_path"] = None, ""
    if info["cuda"]:
        c = cuda.info(load_cublas=True)
        if c["cublas_loaded"]:
            v = int(c["cublas_version"])
            info["cublas"] = f"{v // 10000}.{v // 100 % 100}.{v % 100}"
            info["cublas_path"] = c["cublas_path"]
        else:
            info["cublas_path"] = c["cublas_error"]
    return info


__all__ = [
    "build_info",
    "clear_caches",
    "__version__",
    "set_num_threads",
    "get_num_threads",
    # mode-n products and grid fits
    "mode_product",
    "multi_mode_product",
    "fit_grid",
    "GridPlan",
    "GridModel",
    "DifferencePenalty",
    # scattered points
    "BlendingMatrix",
    "fit_points",
    "PointModel",
    "ConvergenceWarning",
    # scattered field data anywhere
    "fit_spline",
    "grid",
    "SplineModel",
    # everyday jobs
    "upsample",
    "resample",
    # models to and from files
    "load",
    "ModelFileError",
    "ModelVersionError",
    # analysis
    "stable_rank",
    "embedded_distance",
    "sigma_for_spacing",
    "rff_sigma_for_gaussian",
    "gaussian_sigma_for_rff",
    "plot_stable_rank_vs_sigma",
    "plot_stable_rank_vs_n",
    "plot_distance",
] + list(_embedders.__all__)
