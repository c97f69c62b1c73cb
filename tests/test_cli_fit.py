"""`kronpe fit` and `kronpe demo` (called through kronpe.app.cli.main) and the protocol helpers."""
import re

import numpy as np
import pytest

from kronpe import data
from kronpe.app import demo
from kronpe.bench import protocol
from kronpe.app.cli import main


def _psnrs(text):
    """(train, held-out) PSNR printed by `kronpe fit`."""
    m = re.search(r"train PSNR: ([\d.]+|inf) dB\s+held-out PSNR: ([\d.]+) dB", text)
    assert m, text
    return float(m.group(1)), float(m.group(2))


def test_fit_sample_crop(tmp_path, capsys):
    import imageio.v3 as iio

    rc = main(["fit", "--sample", "astronaut", "--size", "64", "--crop", "--out", str(tmp_path), "--no-progress"])
    assert rc == 0
    text = capsys.readouterr().out
    train, held = _psnrs(text)
    assert held > 18.0  # a real fit of a real photograph, not noise
    assert train >= held
    assert "time: fit" in text
    for tag in ("input", "fit"):
        img = iio.imread(tmp_path / f"astronaut_{tag}.png")
        assert img.shape == (64, 64, 3) and img.dtype == np.uint8
    # the input picture is the photograph's central crop
    want = data.load_sample("astronaut", size=64, crop=True)
    np.testing.assert_allclose(iio.imread(tmp_path / "astronaut_input.png") / 255.0, want, atol=1 / 255)


def _smooth_volume(shape):
    axes = np.meshgrid(*[np.arange(n) / n for n in shape], indexing="ij")
    return 0.5 + 0.25 * np.sin(2 * np.pi * axes[0]) * np.cos(np.pi * axes[1]) + 0.2 * axes[2] ** 2


def test_fit_npy_3d(tmp_path, capsys):
    import imageio.v3 as iio

    vol = _smooth_volume((24, 20, 16))
    np.save(tmp_path / "vol.npy", vol)
    out = tmp_path / "out"
    assert main(["fit", str(tmp_path / "vol.npy"), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "3 sampled axes" in text
    _, held = _psnrs(text)
    assert held > 25.0  # a smooth field is easy to interpolate
    frames = sorted(p.name for p in out.glob("vol_fit_t*.png"))
    assert frames == ["vol_fit_t000.png", "vol_fit_t012.png", "vol_fit_t023.png"]
    assert iio.imread(out / "vol_input_t012.png").shape == (20, 16)


def test_fit_npy_channels_auto(tmp_path, capsys):
    rgbish = np.stack([_smooth_volume((12, 14, 1))[..., 0] * (c + 1) / 3 for c in range(3)], axis=-1)
    np.save(tmp_path / "img.npy", rgbish)
    assert main(["fit", str(tmp_path / "img.npy"), "--out", str(tmp_path), "--stride", "2"]) == 0
    text = capsys.readouterr().out
    assert "2 sampled axes, channels (3,)" in text
    assert (tmp_path / "img_fit.png").exists()


def test_demo_quick(tmp_path, capsys):
    assert main(["demo", "--quick", "--out", str(tmp_path), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "Held-out PSNR" in text
    for label in ("Tri, paper", "Gau, paper", "kronpe GCV", "cubic spline"):
        line = next(ln for ln in text.splitlines() if ln.startswith(f"| {label}"))
        value = float(line.split("|")[2])
        assert 15.0 < value < 60.0, line
    assert (tmp_path / "demo.md").read_text().startswith("Held-out PSNR")
    assert (tmp_path / "demo.json").exists()


@pytest.mark.parametrize(
    "argv, match",
    [
        (["fit"], "exactly one of PATH or --sample"),
        (["fit", "x.png", "--sample", "camera"], "exactly one of PATH or --sample"),
        (["fit", "--sample", "nope"], "name must be one of"),
        (["fit", "--sample", "camera", "--stride", "0"], "stride must be a positive integer"),
        (["fit", "--sample", "camera", "--size", "8", "--crop", "--stride", "8"], "stride must leave at least 2"),
        (["fit", "--sample", "camera", "--size", "16", "--crop", "--random", "1.5"], "fraction"),
        (["fit", "--sample", "camera", "--size", "16", "--crop", "--random", "-0.1"], "fraction"),
        (["fit", "--sample", "camera", "--size", "16", "--crop", "--peak", "-1"], "peak"),
    ],
)
def test_fit_bad_input(argv, match, tmp_path, capsys):
    # a user error: one line "kronpe: error: ..." and exit 2, no traceback
    assert main(argv + ["--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kronpe: error: ") and re.search(match, err), err


def test_fit_bad_files(tmp_path, capsys):
    assert main(["fit", str(tmp_path / "missing.npy"), "--out", str(tmp_path)]) == 2
    assert "kronpe: error: path does not exist" in capsys.readouterr().err
    np.save(tmp_path / "a.npy", np.zeros((4, 4)))
    assert main(["fit", str(tmp_path / "a.npy"), "--size", "4", "--out", str(tmp_path)]) == 2
    assert "--size and --crop apply to --sample only" in capsys.readouterr().err
    with pytest.raises(ValueError, match="path does not exist"):  # --debug: the exception itself
        main(["--debug", "fit", str(tmp_path / "missing.npy"), "--out", str(tmp_path)])


def test_protocol_helpers():
    mask = protocol.heldout_mask((5, 4), 2)
    assert mask.sum() == 20 - 3 * 2 and not mask[0, 0] and not mask[4, 2] and mask[1, 0]
    truth = np.arange(20.0).reshape(5, 4) / 20
    pred = truth.copy()
    pred[1, 1] += 0.1  # a held-out sample
    train, held = protocol.split_psnr(truth, pred, 2, 2)
    assert train == float("inf")
    assert held == pytest.approx(10 * np.log10(14 / 0.01))
    assert protocol.grid_coords((4,))[0].tolist() == [0.0, 0.25, 0.5, 0.75]
    assert protocol.subsample(np.zeros((5, 4, 3)), 2, 2).shape == (3, 2, 3)
    with pytest.raises(ValueError, match="pred must have"):
        protocol.split_psnr(truth, pred[:2], 2, 2)


def test_paper_settings():
    assert protocol.paper_settings(2, 256) == pytest.approx(protocol.PAPER_SETTINGS[2])
    assert protocol.paper_settings(3, 64) == pytest.approx(protocol.PAPER_SETTINGS[3])
    small = protocol.paper_settings(2, 64)
    assert small["Gau"] == pytest.approx(0.0025 * 4) and small["Tri"] == pytest.approx(1 / 64)
    assert small["LinF"] == pytest.approx(4.0) and small["RFF"] == pytest.approx(10.5)


def test_spline_row_reproduces_smooth_signal():
    case = protocol.Case("smooth", _smooth_volume((24, 20, 1))[..., 0], 2)
    res = demo.spline_row(case)
    assert res.pred.shape == case.full.shape
    train, held = case.score(res.pred)
    assert train > 100  # an interpolant: exact at the training samples
    assert held > 35


def test_fit_random_fraction_fits_points(tmp_path, capsys):
    """--random trains fit_points on a random subset and scores the held-out samples."""
    rc = main(["fit", "--sample", "astronaut", "--size", "48", "--crop", "--random", "0.3",
               "--out", str(tmp_path), "--no-progress"])
    assert rc == 0
    text = capsys.readouterr().out
    assert "random 0.3 of the samples" in text
    assert "solver:" in text
    ho = float(text.split("held-out PSNR:")[1].split("dB")[0])
    assert 15.0 < ho < 60.0  # a real fit of a photograph crop, not noise and not a copy
    assert (tmp_path / "astronaut_fit.png").exists()


def test_demo_quick_has_scattered_rows(tmp_path, capsys):
    rc = main(["demo", "--quick", "--out", str(tmp_path), "--no-progress"])
    assert rc == 0
    text = capsys.readouterr().out
    line = next(l for l in text.splitlines() if "25% random" in l and "fit_points" in l)
    psnr = float(line.split("|")[3])
    assert psnr > 15.0
    assert any("griddata cubic" in l and "25% random" in l for l in text.splitlines())
