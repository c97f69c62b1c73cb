"""`kronpe bench --suite validation` (kronpe.bench.validation): its sets, a tiny run's rows, the
constants' patching and the command line."""
import json
import math

import kronpe
import numpy as np
import pytest
from kronpe import bench, data
from kronpe.app.cli import main
from kronpe.bench import scattered, validation
from kronpe.solvers import smooth

TINY = dict(images=["coins"], seeds=[1], size=32)


def test_the_validation_set_is_every_other_sample_and_misses_the_tuning_set():
    photos = [n for n in validation.VALIDATION if n not in validation.FIELDS]
    assert validation.TUNING == scattered.IMAGES
    assert set(validation.TUNING) <= set(data.SAMPLES)
    assert not set(validation.VALIDATION) & set(validation.TUNING)
    assert set(photos) | set(validation.TUNING) == set(data.SAMPLES)
    assert set(validation.FIELDS) <= set(validation.VALIDATION)
    assert validation.TUNING_SEED not in validation.SEEDS and len(validation.SEEDS) == 3
    assert set(validation.QUICK_IMAGES) <= set(validation.VALIDATION)


def test_the_fields_are_scaled_to_the_unit_range():
    for name in validation.FIELDS:
        f = validation.signal(name, 24)
        assert f.shape == (24, 24, 1) and f.dtype == np.float32
        assert f.min() == pytest.approx(0.0, abs=1e-6) and f.max() == pytest.approx(1.0, abs=1e-6)


def _check_row(r):
    assert math.isfinite(r["mean"]) and r["lower"] <= r["mean"] <= r["upper"]
    want = "win" if r["lower"] > 0 else "loss" if r["upper"] < 0 else "tie"
    assert r["verdict"] == want
    assert 0 <= r["changed"] <= r["n"]


def test_a_tiny_run_gives_well_formed_rows_and_restores_the_threads():
    before = kronpe.get_num_threads()
    doc = validation.run(**TINY)
    assert kronpe.get_num_threads() == before
    assert doc["threads"]["kronpe"] == 1
    names = [c for c, _, _ in validation.constants()]
    assert len(doc["rows"]) == len(validation.TASKS) * (1 + len(names))
    for r in doc["rows"]:
        assert r["n"] == 1 and r["lower"] == r["mean"] == r["upper"]  # one pair: no spread
        _check_row(r)
    assert {r["constant"] for r in doc["rows"]} == {None, *names}
    assert all(math.isfinite(rec["psnr"]) for rec in doc["records"])
    table = validation.markdown(doc)
    assert table.count("\n| masked |") == 1 + len(names) and "coins at 32 x 32" in table
    json.dumps(doc, default=float)
    for c in names:  # every constant is back
        assert getattr(smooth, c) == next(d["default"] for d in doc["constants"] if d["name"] == c)


def test_the_interval_and_its_verdicts():
    r = validation.interval([0.5, 0.6, 0.7, 0.55])
    _check_row(dict(r, changed=4))
    assert r["verdict"] == "win" and r["n"] == 4
    assert validation.interval([-0.5, -0.6, -0.7])["verdict"] == "loss"
    tie = validation.interval([1.0, -1.0, 0.5, -0.4])
    assert tie["verdict"] == "tie" and tie["lower"] < 0 < tie["upper"]
    zero = validation.interval([0.0, 0.0, 0.0])
    assert zero["verdict"] == "tie" and zero["lower"] == zero["upper"] == 0.0
    # the 95% t-interval: mean +- t(0.975, n - 1) s / sqrt(n)
    d = np.array([0.1, 0.3, 0.2, 0.4, 0.0])
    half = 2.7764451051977987 * d.std(ddof=1) / math.sqrt(d.size)
    assert validation.interval(d)["upper"] == pytest.approx(d.mean() + half)


def test_patched_restores_the_constant_even_when_the_fit_raises(monkeypatch):
    old = smooth.HIGHER

    def failing(*args, **kwargs):
        assert smooth.HIGHER == 0.0  # read at call time: the patched value
        raise RuntimeError("the fit failed")

    monkeypatch.setattr(smooth, "fit", failing)
    with pytest.raises(RuntimeError, match="the fit failed"):
        with validation.patched(smooth, "HIGHER", 0.0):
            kronpe.fit_grid(np.zeros((8, 8), np.float32), mask=np.ones((8, 8), bool))
    assert smooth.HIGHER == old
    with pytest.raises(AttributeError):
        with validation.patched(smooth, "NO_SUCH_CONSTANT", 1.0):
            pass
    assert not hasattr(smooth, "NO_SUCH_CONSTANT")


def test_a_patched_constant_reaches_the_fill():
    # a masked image whose fill takes the higher-order penalty by default: HIGHER = 0 removes it
    img = validation.signal("coins", 32)
    s = validation.inputs(img, "masked", 1)
    info = kronpe.fit_grid(s["img"], mask=s["mask"]).info
    with validation.patched(smooth, "HIGHER", 0.0):
        off = kronpe.fit_grid(s["img"], mask=s["mask"]).info
    if "lead_penalty" not in info:
        pytest.skip("the default fill did not take the higher-order penalty here")
    assert "lead_penalty" not in off


def test_the_command_runs_the_study_only_when_named(monkeypatch, tmp_path, capsys):
    assert "validation" in bench.STUDIES and "validation" not in bench.SUITES
    assert not any(c.suite == "validation" for c in bench.cases(["scattered"], quick=True))
    real = validation.run

    def tiny(**kwargs):
        assert kwargs["quick"] and kwargs["match"] == "coins"
        return real(**TINY)

    monkeypatch.setattr(validation, "run", tiny)
    out = tmp_path / "out"
    assert main(["bench", "--suite", "validation", "--quick", "-k", "coins", "--no-progress", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| masked | kronpe default vs inpaint_biharmonic |" in printed
    doc = json.loads((out / "validation.json").read_text())
    assert doc["validation"]["images"] == ["coins"]
    assert (out / "validation.md").read_text().startswith("Machine: ")
    assert not (out / "bench.json").exists()
    assert main(["bench", "--suite", "validation,nope", "--out", str(out)]) == 2
    assert "suite must be one of" in capsys.readouterr().err


def test_match_selects_the_validation_signals():
    with pytest.raises(ValueError, match="no validation signal"):
        validation.run(match="^no-such-image$", size=16)
