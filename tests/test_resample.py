"""kronpe.upsample / kronpe.resample (kronpe.resampling) against the NumPy reference and the
properties the model promises (pixel means reproduced, box-downsampled images aligned)."""
import numpy as np
import pytest

import kronpe
from kronpe import data, reference
from _samples import CPU, ids, resample_cases

RESAMPLE_CASES = list(resample_cases())


def _box(x, s):
    """Means of s x ... x s blocks over the leading axes of x (sizes divisible by s)."""
    D = x.ndim if x.ndim < 3 or x.shape[-1] > 4 else x.ndim - 1
    shape = []
    for n in x.shape[:D]:
        shape += [n // s, s]
    y = x.reshape(tuple(shape) + x.shape[D:])
    return y.mean(axis=tuple(range(1, 2 * D, 2)))


@pytest.mark.parametrize("case", RESAMPLE_CASES, ids=ids(RESAMPLE_CASES))
def test_matches_reference_1d(case):
    y = np.random.default_rng(case.n * 100 + case.N).random((case.n, 3)).astype(case.dtype)
    got = kronpe.resample(CPU.view(y, case.layout), [case.N])
    assert got.dtype == case.dtype and got.shape == (case.N, 3)
    want = reference.resample_area_1d(y, case.N)
    np.testing.assert_allclose(got, want, atol=1e-5)  # the reference's midpoint rule: ~2e-6


def test_separable_matches_reference_per_axis():
    x = np.random.default_rng(1).random((6, 5, 4))
    got = kronpe.resample(x, (9, 13, 3))
    want = x
    for axis, N in enumerate((9, 13, 3)):
        want = np.moveaxis(reference.resample_area_1d(np.moveaxis(want, axis, 0), N), 0, axis)
    np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("shape, scale", [((32, 48), 2), ((20, 24, 3), 2), ((8, 6, 10), 3), ((12,), 4)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_upsample_averages_back_to_its_input(shape, scale, dtype):
    low = np.random.default_rng(0).random(shape).astype(dtype)
    up = kronpe.upsample(low, scale)
    D = len(shape) if len(shape) < 3 or shape[-1] > 4 else len(shape) - 1
    assert up.shape == tuple(n * scale for n in shape[:D]) + shape[D:] and up.dtype == dtype
    np.testing.assert_allclose(_box(up.astype(np.float64), scale), low, atol=1e-5 if dtype == np.float32 else 1e-12)


def test_downsample_by_two_is_the_box_mean():
    img = np.random.default_rng(2).random((40, 30, 3))
    np.testing.assert_allclose(kronpe.resample(img, (20, 15)), _box(img, 2), atol=1e-12)


def test_constants_and_interior_quadratics_are_reproduced():
    np.testing.assert_allclose(kronpe.upsample(np.full((7, 5), 0.3), 3), 0.3, atol=1e-14)
    # pixel means of a quadratic are reproduced away from the ends (the mirror changes the ends)
    n, N = 64, 192
    f = lambda a, b: ((b ** 3 - a ** 3) / 3 - (b ** 2 - a ** 2) / 2) / (b - a)  # mean of x^2 - x
    y = f(np.arange(n) / n, np.arange(1, n + 1) / n)
    got = kronpe.resample(y, [N])
    want = f(np.arange(N) / N, np.arange(1, N + 1) / N)
    np.testing.assert_allclose(got[30:-30], want[30:-30], atol=1e-12)


def test_round_trip_beats_the_cubic_spline_on_a_photograph():
    from scipy import ndimage

    img = data.load_sample("camera", size=128).astype(np.float64)
    low = _box(img, 2)
    ours = data.psnr(img, np.clip(kronpe.upsample(low, 2), 0, 1))
    c = (np.arange(128) + 0.5) / 2 - 0.5
    rr, cc = np.meshgrid(c, c, indexing="ij")
    spline = ndimage.map_coordinates(low, [rr, cc], order=3, mode="reflect")
    assert ours > data.psnr(img, np.clip(spline, 0, 1))


def test_strided_and_non_contiguous_inputs():
    base = np.random.default_rng(3).random((20, 30, 3))
    strided = base[::2, ::3]  # (10, 10, 3), non-contiguous
    np.testing.assert_allclose(kronpe.upsample(strided, 2), kronpe.upsample(np.ascontiguousarray(strided), 2))
    fortran = np.asfortranarray(base)
    np.testing.assert_allclose(kronpe.resample(fortran, (7, 9)), kronpe.resample(base, (7, 9)))


def test_shape_scale_and_ndim_forms():
    x = np.random.default_rng(4).random((6, 8, 3))
    assert kronpe.upsample(x, shape=(12, 16)).shape == (12, 16, 3)
    assert kronpe.upsample(x, (2, 0.5)).shape == (12, 4, 3)
    assert kronpe.upsample(x, 2, ndim=3).shape == (12, 16, 6)
    assert kronpe.upsample(x, 1.5).shape == (9, 12, 3)
    assert kronpe.resample(x, [3]).shape == (3, 8, 3)
    np.testing.assert_array_equal(kronpe.resample(x, (6, 8)), x)


def test_torch_in_torch_out():
    torch = pytest.importorskip("torch")
    x = torch.rand(5, 6, dtype=torch.float64)
    out = kronpe.upsample(x, 2)
    assert isinstance(out, torch.Tensor) and tuple(out.shape) == (10, 12)
    np.testing.assert_allclose(out.numpy(), kronpe.upsample(x.numpy(), 2))


@pytest.mark.parametrize("call, exc, words", [
    (lambda x: kronpe.upsample(x), ValueError, "scale or shape"),
    (lambda x: kronpe.upsample(x, 2, shape=(4, 4)), ValueError, "scale or shape"),
    (lambda x: kronpe.upsample(x, 0), ValueError, "scale"),
    (lambda x: kronpe.upsample(x, float("nan")), ValueError, "scale"),
    (lambda x: kronpe.upsample(x, "2"), TypeError, "scale"),
    (lambda x: kronpe.upsample(x, (2, 2, 2, 2)), ValueError, "axes"),
    (lambda x: kronpe.resample(x, (0, 3)), ValueError, "shape[0]"),
    (lambda x: kronpe.resample(x, 3), TypeError, "shape"),
    (lambda x: kronpe.resample(x, ()), ValueError, "shape"),
    (lambda x: kronpe.resample(x, (3, 3), ndim=1), ValueError, "ndim"),
    (lambda x: kronpe.resample(np.zeros((0, 3)), (3, 3)), ValueError, "empty"),
    (lambda x: kronpe.resample(np.full((3, 3), np.nan), (3, 3)), ValueError, "array"),
    (lambda x: kronpe.resample(np.float64(1.0), (3,)), ValueError, "array"),
    (lambda x: kronpe.resample("img.png", (3,)), TypeError, "array"),
])
def test_bad_arguments_name_the_argument(call, exc, words):
    with pytest.raises(exc) as info:
        call(np.ones((4, 5)))
    assert words in str(info.value)


@pytest.mark.parametrize("shape", [(0, 3), (4, 0), (0,)])
def test_empty_input_is_a_named_error(shape):
    """An array without samples has no means to resample: the error names the argument."""
    for call in (lambda a: kronpe.resample(a, [6]), lambda a: kronpe.upsample(a, 2)):
        with pytest.raises(ValueError, match="array must not be empty"):
            call(np.zeros(shape, np.float32))
