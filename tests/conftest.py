"""Fixtures shared by every test file: the device a test runs on, the dtype, its tolerances.

``device`` is "cpu" (NumPy arrays) and the CUDA devices "cuda-cupy" and "cuda-torch" (skipped
without kronpe's CUDA kernels, a CUDA device and CuPy or CUDA torch), so every test that takes it
runs the same inputs (tests/_samples.py) on the host and on a GPU.
"""
import numpy as np
import pytest

from _samples import DEVICES, Device, device_params, tolerance, use_device

DTYPES = [np.float32, np.float64]


@pytest.fixture(params=device_params(DEVICES))
def device(request) -> Device:
    return use_device(request.param)


@pytest.fixture(params=device_params([d for d in DEVICES if d.is_cuda]))
def cuda_device(request) -> Device:
    return use_device(request.param)


@pytest.fixture(params=DTYPES, ids=["float32", "float64"])
def dtype(request):
    return request.param


@pytest.fixture
def tol(device, dtype):
    """(rtol, atol) of a pointwise result of ``dtype`` on ``device``: ``tol()`` gives the dict,
    ``tol.rtol`` and ``tol.atol`` the numbers (tests/_samples.py: tolerance)."""
    return tolerance(device, dtype, "values")


@pytest.fixture
def sum_tol(device, dtype):
    """As ``tol``, for reductions (mode products, blending, the torch ops)."""
    return tolerance(device, dtype, "sums")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
