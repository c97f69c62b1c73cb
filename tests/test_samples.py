"""The shared test inputs (tests/_samples.py): every layout holds the values it was given, with
the strides its name promises, on every device."""
import numpy as np
import pytest

from _samples import LAYOUTS, random_values


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
