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


# ---- upsample, resample, fit --save, predict, --json: end to end in a subprocess ---------------------

import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402


def _kronpe(*argv, cwd):
    """``python -m kronpe ARGV`` in a subprocess (the package this test imported)."""
    env = dict(os.environ)
    src = os.path.dirname(os.path.dirname(os.path.abspath(data.__file__)))
    env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "kronpe", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def test_upsample_resample_save_predict_end_to_end(tmp_path):
    import imageio.v3 as iio

    img = data.load_sample("chelsea", size=64)
    low = img.reshape(32, 2, 32, 2, 3).mean(axis=(1, 3))
    iio.imwrite(tmp_path / "low.png", (low * 255 + 0.5).astype(np.uint8))
    r = _kronpe("upsample", "low.png", "--scale", "2", "--out", "o", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    up = iio.imread(tmp_path / "o" / "low_upsample.png")
    assert up.shape == (64, 64, 3)
    assert data.psnr(img, up / 255.0) > 24  # the 2x round trip of a real photograph
    r = _kronpe("upsample", "low.png", "--size", "50", "40", "--out", "o", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["command"] == "upsample" and result["shape"] == [40, 50, 3]
    assert iio.imread(result["files"][0] if os.path.isabs(result["files"][0])
                      else tmp_path / result["files"][0]).shape == (40, 50, 3)

    vol = np.random.default_rng(0).random((6, 7, 8))
    np.save(tmp_path / "vol.npy", vol)
    r = _kronpe("resample", "vol.npy", "--shape", "12", "14", "16", "--out", "o", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["shape"] == [12, 14, 16]
    out = np.load(tmp_path / "o" / "vol_resample.npy")
    np.testing.assert_allclose(out.reshape(6, 2, 7, 2, 8, 2).mean(axis=(1, 3, 5)), vol, atol=1e-12)

    r = _kronpe("fit", "--sample", "camera", "--size", "48", "--save", "m.npz", "--out", "o", "--json",
                cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    fit = json.loads(r.stdout)
    assert fit["heldout_psnr_db"] > 20 and "m.npz" in fit["files"]
    r = _kronpe("predict", "m.npz", "--shape", "96", "96", "--out", "o", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    pred = np.load(tmp_path / "o" / "m_predict.npy")
    assert pred.shape == (96, 96)
    camera = data.load_sample("camera", size=96)
    assert data.psnr(camera, np.clip(pred, 0, 1)) > 20

    rng = np.random.default_rng(1)
    pts = rng.random((300, 2))
    np.save(tmp_path / "pts.npy", np.c_[pts, np.sin(3 * pts[:, 0]) + pts[:, 1]])
    r = _kronpe("grid", "pts.npy", "--shape", "16", "16", "--save", "p.npz", "--out", "o", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = _kronpe("predict", "p.npz", "--shape", "16", "16", "--out", "o", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["model_kind"] == "PointModel"
    np.testing.assert_allclose(np.load(tmp_path / "o" / "p_predict.npy"), np.load(tmp_path / "o" / "pts_grid.npy"))


@pytest.mark.parametrize("argv, words", [
    (["upsample", "IMG"], "--scale"),
    (["upsample", "IMG", "--scale", "2", "--size", "4", "4"], "--scale"),
    (["upsample", "IMG", "--scale", "-2"], "--scale"),
    (["upsample", "IMG", "--scale", "inf"], "--scale"),
    (["upsample", "IMG", "--size", "0", "4"], "--size"),
    (["upsample", "IMG", "--scale", "two"], "--scale"),
    (["upsample", "nope.png", "--scale", "2"], "nope.png"),
    (["upsample", "BAD", "--scale", "2"], "bad.png"),
    (["upsample", "ARR", "--size", "4", "4"], "--size"),
    (["resample", "ARR", "--shape", "4", "4", "4", "4"], "axes"),
    (["resample", "ARR", "--shape", "0", "4"], "--shape"),
    (["resample", "ARR"], "--shape"),
    (["resample", "VOL.nii", "--shape", "4"], "nibabel"),
    (["predict", "IMG", "--shape", "4", "4"], "not a kronpe model"),
    (["predict", "missing.npz", "--shape", "4", "4"], "does not exist"),
    (["predict", "MODEL", "--shape", "4"], "--shape"),
    (["fit", "--sample", "camera", "--size", "16", "--save", "m.txt"], "--save"),
    (["upsample", "IMG", "--scale", "2", "--bogus"], "--bogus"),
])
def test_new_commands_user_errors_one_line_exit_2(tmp_path, argv, words):
    import imageio.v3 as iio

    iio.imwrite(tmp_path / "img.png", np.zeros((8, 8), np.uint8))
    (tmp_path / "bad.png").write_bytes(b"not a png")
    np.save(tmp_path / "arr.npy", np.ones((5, 6)))
    (tmp_path / "vol.nii").write_bytes(b"\0" * 400)
    import kronpe

    kronpe.fit_grid(np.ones((6, 6)), kronpe.Gaussian(6, 0.1), ridge=1e-3).save(tmp_path / "model.npz")
    names = {"IMG": "img.png", "BAD": "bad.png", "ARR": "arr.npy", "MODEL": "model.npz", "VOL.nii": "vol.nii"}
    if "VOL.nii" in argv:
        try:
            import nibabel  # noqa: F401

            words = "vol.nii"  # nibabel installed: the damaged volume is named instead
        except ImportError:
            pass
    r = _kronpe(*[names.get(a, a) for a in argv], "--out", "o", cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("kronpe: error:") and words in last, r.stderr
    assert "Traceback" not in r.stderr


def test_grid_of_volume_points_reports_the_order_3_model(tmp_path, capsys):
    """kronpe grid on 3-D points: the default model's penalty (order 3, axis weights held out) and
    lambda are reported, in text and in --json."""
    import json as _json

    rng = np.random.default_rng(4)
    n = (10, 12, 14)
    x = [np.arange(k) / k for k in n]
    vol = np.sin(6 * x[0])[:, None, None] + np.cos(2 * x[1])[None, :, None] * x[2][None, None, :]
    idx = np.argwhere(rng.random(n) < 0.3)
    table = np.concatenate([idx / np.array(n), vol[tuple(idx.T)][:, None]], 1)
    path = tmp_path / "pts.npy"
    np.save(path, table)
    assert main(["grid", str(path), "--shape", *map(str, n), "--out", str(tmp_path / "o"), "--json"]) == 0
    rec = _json.loads(capsys.readouterr().out)
    assert rec["penalty"].startswith("DifferencePenalty(3, mixed=True, boundary='reflect', weights=(")
    assert rec["ridge"] > 0
    grid = np.load(tmp_path / "o" / "pts_grid.npy")
    assert grid.shape == n and np.sqrt(np.mean((grid - vol) ** 2)) < 0.05


def test_grid_field_data_by_spacing_save_and_predict(tmp_path):
    rng = np.random.default_rng(6)
    xy = rng.random((600, 2)) * [5000.0, 2000.0]
    z = np.sin(xy[:, 0] / 900) + xy[:, 1] / 1000
    path = tmp_path / "field.csv"
    np.savetxt(path, np.c_[xy, z], delimiter=",", header="x,y,z", comments="")
    assert main(["grid", str(path), "--spacing", "250", "--maxdist", "400", "--out", str(tmp_path),
                 "--save", str(tmp_path / "m.npz"), "--no-progress"]) == 0
    grid = np.load(tmp_path / "field_grid.npy")
    x0 = xy[:, 0].min() + 250 * np.arange(grid.shape[0])
    x1 = xy[:, 1].min() + 250 * np.arange(grid.shape[1])
    want = np.sin(x0[:, None] / 900) + x1[None, :] / 1000
    inside = np.isfinite(grid)
    assert inside.mean() > 0.8 and np.abs(grid[inside] - want[inside]).max() < 0.05
    assert main(["predict", str(tmp_path / "m.npz"), "--shape", "9", "7", "--out", str(tmp_path), "--no-progress"]) == 0
    assert np.load(tmp_path / "m_predict.npy").shape == (9, 7)
    assert main(["grid", str(path), "--shape", "8", "8", "--spacing", "250"]) == 2  # one line, exit 2
