"""kronpe._core.strided_copy (the chains' and kronpe.torch's permuting copies) against
reference.strided_copy: general permutations and the (de-)interleaving of a few channels, which
take dedicated kernels, over dtypes, strided and reversed views, and empty boxes."""
import itertools

import numpy as np
import pytest

from kronpe import _core, reference

DTYPES = [np.float32, np.float64]


def _check(src, dst):
    want = reference.strided_copy(src, np.empty_like(dst))
    _core.strided_copy(src, dst)
    np.testing.assert_array_equal(dst, want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("c", [1, 2, 3, 4, 5, 7, 8, 9])
@pytest.mark.parametrize("n", [1, 5, 513, 1100])
def test_channels_to_planes_and_back(dtype, c, n):
    rng = np.random.default_rng(c * 1000 + n)
    x = rng.standard_normal((n, c)).astype(dtype)
    planes = np.full((c, n), np.nan, dtype)
    _check(x, planes.T)  # de-interleave: the source's fastest axis holds the channels
    back = np.full((n, c), np.nan, dtype)
    _check(planes.T, back)  # interleave: the destination's does
    np.testing.assert_array_equal(back, x)


@pytest.mark.parametrize("dtype", DTYPES)
def test_channels_with_outer_axes_strides_and_reversal(dtype):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 6, 9, 3)).astype(dtype)
    # (b, h, w, c) -> (b, c, h, w): one slab of planes per outer index
    _check(x, np.zeros((4, 3, 6, 9), dtype).transpose(0, 2, 3, 1))
    # every other row of the source, reversed columns, planes with padding between them
    src = x[:, ::2, ::-1, :]
    dst = np.zeros((4, 3, 3, 12), dtype)[..., 1:10].transpose(0, 2, 3, 1)
    _check(src, dst)
    # planes into interleaved rows with a gap after each pixel (not tightly packed: generic path)
    _check(np.ascontiguousarray(x.transpose(0, 3, 1, 2)).transpose(0, 2, 3, 1),
           np.zeros((4, 6, 9, 4), dtype)[..., :3])


@pytest.mark.parametrize("dtype", DTYPES)
def test_permutations_of_a_4d_box(dtype):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 5, 2, 7)).astype(dtype)
    for perm in itertools.permutations(range(4)):
        dst = np.zeros(tuple(x.shape[p] for p in perm), dtype)
        inv = np.argsort(perm)
        _check(x, dst.transpose(inv))


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0,), (1, 1)])
def test_empty_and_single_element_boxes(shape):
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    dst = np.full(shape[::-1], -1.0, np.float32).T
    _check(x, dst)


def test_mismatched_arguments_are_refused():
    with pytest.raises(ValueError, match="shape or dtype"):
        _core.strided_copy(np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32))
    with pytest.raises(ValueError, match="shape or dtype"):
        _core.strided_copy(np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float64))
