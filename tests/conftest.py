"""Fixtures shared by every test file: the device a test runs on, the dtype, its tolerances.

``device`` is "cpu" (NumPy arrays) and the CUDA devices "cuda-cupy" and "cuda-torch" (skipped
without kronpe's CUDA kernels, a CUDA device and CuPy or CUDA torch), so every test that takes it
runs the same inputs (tests/_samples.py) on the host and on a GPU. ``cuda_device`` is its CUDA
part alone, for what only a GPU can show (a device result against the host's); ``torch_device``
gives torch tensors on "cpu" and "cuda-torch" (``_samples.TORCH_CUDA_ONLY`` keeps a test to the
GPU). The CUDA cases carry the ``gpu`` marker (``pytest -m gpu``).

Tolerances: ``tol`` and ``sum_tol`` for a kernel against its reference, by device and dtype
(``_samples.tolerance``); a solver's result against its reference goes through
``_samples.assert_close`` (by dtype and kind of solve). They live in tests/_samples.py, beside the
cases, because test files import them: this file cannot be imported by name (benches/ has a
conftest.py of its own).
"""
import numpy as np
import pytest

from _samples import CUDA_DEVICES, DEVICES, TORCH_DEVICES, Device, device_params, tolerance, use_device

DTYPES = [np.float32, np.float64]


@pytest.fixture(params=device_params(DEVICES))
def device(request) -> Device:
    return use_device(request.param)


@pytest.fixture(params=device_params(CUDA_DEVICES))
def cuda_device(request) -> Device:
    return use_device(request.param)


@pytest.fixture(params=device_params(TORCH_DEVICES))
def torch_device(request) -> Device:
    """torch tensors on the CPU and on a GPU: ``torch_device.torch`` is "cpu" or "cuda"."""
    pytest.importorskip("torch")
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
