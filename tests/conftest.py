import numpy as np
import pytest

# float32 kernels are compared with a float64 reference at this relative tolerance.
RTOL = {np.float32: 2e-5, np.float64: 1e-12}
DTYPES = [np.float32, np.float64]


@pytest.fixture(params=DTYPES, ids=["float32", "float64"])
def dtype(request):
    return request.param


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
