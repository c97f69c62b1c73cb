"""Resampling of point samples (kronpe.resample / upsample with sampling="point"): the interpolating
cubic B-spline of the samples, mirrored about the first and last, against SciPy's
map_coordinates(order=3, mode="mirror") at the same positions."""
import numpy as np
import pytest
from scipy.ndimage import map_coordinates

import kronpe
from kronpe.resampling import resample_matrix


@pytest.mark.parametrize("n,N", [(1, 5), (2, 7), (3, 3), (17, 34), (64, 256), (50, 20), (31, 93)])
def test_axis_operator_is_the_mirrored_cubic_spline(n, N):
    rng = np.random.default_rng(n * 1000 + N)
    y = rng.standard_normal(n)
    M = resample_matrix(n, N, np.float64, sampling="point")
    want = map_coordinates(y, [np.arange(N) * (n / N)], order=3, mode="mirror")
    np.testing.assert_allclose(M @ y, want, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [2, 3, 4])
def test_upsampled_point_samples_keep_their_values(dtype, k):
    rng = np.random.default_rng(k)
    img = rng.random((40, 36, 3)).astype(dtype)
    low = img[::k, ::k]
    out = kronpe.upsample(low, k, sampling="point")
    assert out.dtype == dtype and out.shape[:2] == (low.shape[0] * k, low.shape[1] * k)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out[::k, ::k], low, atol=tol)  # every sample back where it was taken


def test_strided_and_non_contiguous_inputs():
    rng = np.random.default_rng(3)
    base = rng.random((30, 40))
    view = base[::2, ::-1].T  # strided, reversed, transposed
    got = kronpe.resample(view, (40, 30), sampling="point")
    want = kronpe.resample(np.ascontiguousarray(view), (40, 30), sampling="point")
    np.testing.assert_array_equal(got, want)
    g = [np.arange(40) * (view.shape[0] / 40), np.arange(30) * (view.shape[1] / 30)]
    X, Y = np.meshgrid(*g, indexing="ij")
    np.testing.assert_allclose(got, map_coordinates(np.ascontiguousarray(view), [X, Y], order=3, mode="mirror"),
                               atol=1e-12)


def test_point_sampling_beats_the_area_model_on_point_samples():
    img = kronpe.data.load_sample("camera", size=256).astype(np.float64)
    low = img[::2, ::2]
    point = kronpe.upsample(low, 2, sampling="point")
    area = kronpe.upsample(low, 2)
    assert np.mean((point - img) ** 2) < 0.8 * np.mean((area - img) ** 2)


def test_bad_sampling_is_named():
    with pytest.raises(ValueError, match="sampling"):
        kronpe.upsample(np.zeros((4, 4)), 2, sampling="corner")
    with pytest.raises(TypeError, match="sampling"):
        kronpe.resample(np.zeros((4, 4)), (8, 8), sampling=None)


def test_cli_sampling_option(tmp_path):
    from kronpe.app.cli import main

    arr = np.random.default_rng(5).random((12, 10))
    np.save(tmp_path / "a.npy", arr)
    assert main(["resample", str(tmp_path / "a.npy"), "--shape", "24", "20", "--sampling", "point",
                 "--out", str(tmp_path), "--no-progress"]) == 0
    out = np.load(tmp_path / "a_resample.npy")
    np.testing.assert_allclose(out[::2, ::2], arr, atol=1e-12)
