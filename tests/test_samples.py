"""The shared test inputs (tests/_samples.py): every layout holds the values it was given, with
the strides its name promises, on every device; every family's cases have distinct ids; the
tolerance helper holds results as its kinds say."""
import numpy as np
import pytest

import _samples
from _samples import LAYOUTS, assert_close, random_values


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", [(5,), (4, 3), (3, 4, 2), (0, 3), (2, 0)], ids=str)
def test_layout_holds_the_values(device, layout, shape, rng):
    a = random_values(rng, shape, np.float64, layout)
    x = device.view(a, layout)
    assert device.kind_of(x) == device.lib and tuple(x.shape) == shape
    np.testing.assert_array_equal(device.host(x), a)
    if 0 in shape or len(shape) == 1 and layout in ("fortran", "permuted"):
        return
    strides = device.strides(x)
    dense = ("contiguous", "fortran", "permuted") + (("padded",) if len(shape) == 1 else ())
    assert device.is_dense(x, "K") == (layout in dense), strides
    assert device.is_dense(x, "C") == (layout in dense[:1] + dense[3:]), strides
    if layout == "reversed":
        assert strides[0] < 0 and strides[-1] < 0
    if layout == "broadcast":
        assert strides[0] == 0


GENERATORS = ["mode_product_cases", "embed_cases", "blend_cases", "blend_factor_cases", "gemm_cases",
              "stencil_cases", "stencil_layout_cases", "spline_cases", "grid_fit_cases", "point_fit_cases"]


@pytest.mark.parametrize("name", GENERATORS)
def test_case_ids_are_distinct(name):
    cases = list(getattr(_samples, name)())
    assert cases and len({c.id for c in cases}) == len(cases)
    assert all(isinstance(c.id, str) and c.id for c in cases)


def test_torch_op_sample_ids_are_distinct():
    pytest.importorskip("torch")
    samples = list(_samples.torch_op_samples("cpu", False))
    assert len({s.id for s in samples}) == len(samples)


def test_assert_close_kinds():
    want = np.array([100.0, 1e-3, 0.0])
    assert_close(want + 1e-9, want, np.float64)  # solves: within 1e-10 of the largest value
    with pytest.raises(AssertionError):
        assert_close(want + 1e-6, want, np.float64)
    assert_close(want * (1 + 5e-5), want, np.float32)
    assert_close(np.array([1.5e-4]), np.array([0.0]), np.float32, "stencils")  # relative to at least 1
    with pytest.raises(AssertionError):
        assert_close(np.array([1.5e-4]), np.array([0.0]), np.float32, "stencils", floor=1e-3)
    assert_close(want + 1.9e-4, want, 2e-6, "max")  # relative to the largest value alone
    with pytest.raises(AssertionError):
        assert_close(want + 2.1e-4, want, 2e-6, "max")
    assert_close(want + 2e-4, want, 1e-6, "max", factor=2.01)
    assert_close(np.zeros(0), np.zeros(0), np.float64)
