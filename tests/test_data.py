"""kronpe.data: bundled samples, the video builder, file loaders and PSNR."""
import numpy as np
import pytest

from kronpe import data


@pytest.mark.parametrize("name", ["astronaut", "camera", "coffee"])
def test_load_sample_native(name):
    img = data.load_sample(name)
    assert img.dtype == np.float32
    assert img.min() >= 0.0 and img.max() <= 1.0
    assert img.max() > 0.5 and img.min() < 0.2  # a real photograph, not a blank
    if name == "camera":
        assert img.ndim == 2 and img.shape == (512, 512)
    else:
        assert img.ndim == 3 and img.shape[2] == 3
    assert img.shape[:2] == {"astronaut": (512, 512), "camera": (512, 512), "coffee": (400, 600)}[name]


def test_load_sample_size_and_crop():
    full = data.load_sample("coffee")
    small = data.load_sample("coffee", size=64)
    assert small.shape == (64, 64, 3) and small.dtype == np.float32
    assert 0.0 <= small.min() and small.max() <= 1.0
    crop = data.load_sample("coffee", size=100, crop=True)
    # the central window at native resolution, pixel for pixel
    np.testing.assert_array_equal(crop, full[150:250, 250:350])
    # the astronaut is natively 512 x 512: size=512 is the photograph itself
    np.testing.assert_array_equal(data.load_sample("astronaut", size=512), data.load_sample("astronaut"))


def test_samples_all_listed():
    assert "astronaut" in data.SAMPLES and "camera" in data.SAMPLES
    assert set(data.DEMO_IMAGES) <= set(data.SAMPLES)
    assert len(data.describe_samples().splitlines()) == len(data.SAMPLES)


def test_load_sample_bad_input():
    with pytest.raises(ValueError, match="name"):
        data.load_sample("no-such-photo")
    with pytest.raises(ValueError, match="size"):
        data.load_sample("camera", size=0)
    with pytest.raises(ValueError, match="size"):
        data.load_sample("coffee", size=1000, crop=True)
    with pytest.raises(ValueError, match="crop"):
        data.load_sample("coffee", crop=True)


def test_load_video_shapes():
    v = data.load_video(frames=8, size=16)
    assert v.shape == (8, 16, 16, 3) and v.dtype == np.float32
    assert 0.0 <= v.min() and v.max() <= 1.0
    # the camera moves: frames differ, but consecutive frames are close (a slow pan)
    step = np.abs(np.diff(v, axis=0)).mean()
    assert step > 1e-3
    assert step < np.abs(v[0] - v[-1]).mean()
    g = data.load_video("camera", frames=4, size=12, color=False)
    assert g.shape == (4, 12, 12)


def test_load_video_bad_input():
    with pytest.raises(ValueError, match="frames"):
        data.load_video(frames=0)
    with pytest.raises(ValueError, match="size"):
        data.load_video(size=-3)
    with pytest.raises(ValueError, match="zoom"):
        data.load_video(frames=2, size=4, zoom=0.9)
    with pytest.raises(ValueError, match="name"):
        data.load_video("nope", frames=2, size=4)


def test_psnr_values():
    a = np.zeros((4, 4))
    b = np.full((4, 4), 0.1)
    assert data.psnr(a, b) == pytest.approx(20.0)
    assert data.psnr(a, b, peak=2.0) == pytest.approx(20.0 + 20 * np.log10(2.0))
    assert data.psnr(a, a) == float("inf")
    assert data.psnr(np.float32(0.5) * np.ones(3, np.float32), np.ones(3)) == pytest.approx(6.0206, abs=1e-4)


def test_psnr_bad_input():
    with pytest.raises(ValueError, match="same shape"):
        data.psnr(np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="peak"):
        data.psnr(np.zeros(3), np.zeros(3), peak=0)
    with pytest.raises(ValueError, match="b must be finite"):
        data.psnr(np.zeros(3), np.array([0, np.nan, 0]))
    with pytest.raises(ValueError, match="empty"):
        data.psnr(np.zeros(0), np.zeros(0))


def test_user_files_roundtrip(tmp_path):
    import imageio.v3 as iio

    rgb = (np.arange(5 * 7 * 3).reshape(5, 7, 3) % 256).astype(np.uint8)
    iio.imwrite(tmp_path / "x.png", rgb)
    img = data.load_image(tmp_path / "x.png")
    assert img.shape == (5, 7, 3) and img.dtype == np.float32
    np.testing.assert_allclose(img, rgb / 255.0, atol=1e-7)
    rgba = np.concatenate([rgb, np.full((5, 7, 1), 255, np.uint8)], axis=2)
    iio.imwrite(tmp_path / "a.png", rgba)
    assert data.load_image(tmp_path / "a.png").shape == (5, 7, 3)
    got, kind = data.load_file(tmp_path / "x.png")
    assert kind == "image" and got.shape == (5, 7, 3)

    vol = np.random.default_rng(0).random((3, 4, 5, 6))
    np.save(tmp_path / "v.npy", vol)
    got, kind = data.load_file(tmp_path / "v.npy")
    assert kind == "array" and got.dtype == np.float64
    np.testing.assert_array_equal(got, vol)
    np.save(tmp_path / "i.npy", np.arange(6, dtype=np.int16).reshape(2, 3))
    assert data.load_array(tmp_path / "i.npy").dtype == np.float64

    frames = tmp_path / "frames"
    frames.mkdir()
    for t in range(3):
        iio.imwrite(frames / f"f{t:02d}.png", rgb[..., 0] + t)
    video, kind = data.load_file(frames)
    assert kind == "video" and video.shape == (3, 5, 7)
    np.testing.assert_allclose(video[2], (rgb[..., 0] + 2) / 255.0, atol=1e-7)


def test_user_files_bad_input(tmp_path):
    with pytest.raises(ValueError, match="path does not exist"):
        data.load_file(tmp_path / "missing.png")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match="path must be an image"):
        data.load_file(tmp_path / "notes.txt")
    (tmp_path / "bad.png").write_bytes(b"not a png")
    with pytest.raises(ValueError, match="path could not be read"):
        data.load_image(tmp_path / "bad.png")
    np.save(tmp_path / "nan.npy", np.array([1.0, np.nan]))
    with pytest.raises(ValueError, match="finite"):
        data.load_array(tmp_path / "nan.npy")
    np.save(tmp_path / "c.npy", np.ones(3, dtype=complex))
    with pytest.raises(TypeError, match="real numbers"):  # a wrong type
        data.load_array(tmp_path / "c.npy")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="folder holds no images"):
        data.load_frames(tmp_path / "empty")
    with pytest.raises(TypeError, match="path must be a file path"):  # a wrong type
        data.load_file(42)
    with pytest.raises(ValueError, match="expected \\[0, 1\\]"):
        data.to_unit_float(np.full((2, 2), 1.5))
    with pytest.raises(ValueError, match="shape"):
        data.to_unit_float(np.zeros((2, 2, 5)))
