"""`kronpe fill` and `kronpe grid` (kronpe.app.jobs) through kronpe.app.cli.main."""
import numpy as np
import pytest

from kronpe import data
from kronpe.app.cli import main


def _smooth(shape):
    y, x = np.meshgrid(*data.grid_coords(shape), indexing="ij")
    return (0.5 + 0.3 * np.sin(3 * x) * np.cos(2 * y)).astype(np.float32)


def test_fill_missing_recovers_a_photograph(tmp_path, capsys):
    assert main(["fill", "--sample", "camera", "--size", "64", "--missing", "0.5", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    psnr = float(out.split("PSNR on the dropped pixels:")[1].split()[0])
    assert psnr > 22  # a constant fill of the camera gives about 11 dB
    assert (tmp_path / "camera_filled.png").is_file() and (tmp_path / "camera_holes.png").is_file()


def test_fill_with_a_mask_keeps_the_observed_pixels(tmp_path):
    import imageio.v3 as iio

    img = _smooth((40, 48))
    iio.imwrite(tmp_path / "img.png", (img * 255 + 0.5).astype(np.uint8))
    mask = np.zeros((40, 48), np.uint8)
    mask[10:20, 12:30] = 255  # a rectangular hole
    iio.imwrite(tmp_path / "mask.png", mask)
    assert main(["fill", str(tmp_path / "img.png"), "--mask", str(tmp_path / "mask.png"),
                 "--out", str(tmp_path)]) == 0
    filled = iio.imread(tmp_path / "img_filled.png").astype(np.float64) / 255
    original = iio.imread(tmp_path / "img.png").astype(np.float64) / 255
    hole = mask > 0
    assert np.array_equal(filled[~hole], original[~hole])
    assert np.max(np.abs(filled[hole] - img[hole])) < 0.03  # a smooth image: the hole is filled smoothly


def test_grid_from_scattered_samples(tmp_path):
    shape = (48, 40)
    truth = _smooth(shape)
    rng = np.random.default_rng(1)
    idx = rng.choice(truth.size, truth.size // 4, replace=False)
    ys, xs = data.grid_coords(shape)
    table = np.c_[ys[idx // shape[1]], xs[idx % shape[1]], truth.reshape(-1)[idx]]
    np.save(tmp_path / "pts.npy", table)
    assert main(["grid", str(tmp_path / "pts.npy"), "--shape", "48", "40", "--out", str(tmp_path)]) == 0
    grid = np.load(tmp_path / "pts_grid.npy")
    assert grid.shape == shape
    assert data.psnr(truth, grid) > 40
    assert (tmp_path / "pts_grid.png").is_file()


@pytest.mark.parametrize("argv, words", [
    (["fill", "--sample", "camera", "--size", "32"], "--mask"),
    (["fill", "--sample", "camera", "--size", "32", "--missing", "1.5"], "--missing"),
    (["fill", "--sample", "camera", "--size", "32", "--missing", "0.5", "--mask", "m.png"], "--mask"),
    (["grid", "nope.csv", "--shape", "8", "8"], "nope.csv"),
    (["grid", "PTS", "--shape", "8", "8", "8"], "columns"),
    (["grid", "PTS", "--shape", "0", "8"], "--shape"),
])
def test_job_user_errors_one_line_exit_2(tmp_path, capsys, argv, words):
    np.save(tmp_path / "pts.npy", np.random.default_rng(0).random((20, 3)))
    argv = [str(tmp_path / "pts.npy") if a == "PTS" else a for a in argv]
    assert main(argv + ["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("kronpe: error:") and words in err[-1]
