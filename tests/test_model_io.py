"""model.save / kronpe.load: round trips of grid and scattered models with every embedder type,
and the named errors of damaged, foreign and other-version files."""
import json
import zipfile

import numpy as np
import pytest

import kronpe
from kronpe import data

EMBEDDERS = [
    kronpe.Gaussian(12, 0.05, margin=2),
    kronpe.Triangle(12, margin=1, paper_distance=True),
    kronpe.Rectangle(12, 0.1),
    kronpe.Impulse(12),
    kronpe.Sine(12, 3.0),
    kronpe.Square(12, 3.0),
    kronpe.Random(12, seed=3),
    kronpe.BSpline(12, order=2, margin=2),
    kronpe.LinearFourier(12, 4.0),
    kronpe.LogFourier(12, 3.0, amplitude_mod=0.5, frequency_mod=1.5),
    kronpe.RandomFourier(12, 2.5, seed=7),
    kronpe.NeRF(3, include_input=True),
    kronpe.Transformer(3, max_positions=100.0),
]


def test_every_embedder_type_is_covered():
    names = {type(e).__name__ for e in EMBEDDERS}
    concrete = {n for n in kronpe.embedders.__all__ if n not in ("Embedder", "ShiftedBasis", "FourierFeatures",
                                                                  "NyquistWarning")}
    assert names == concrete


def _signal(shape, channels=()):
    grids = np.meshgrid(*data.grid_coords(shape), indexing="ij")
    base = 0.5 + 0.3 * np.sin(3 * grids[0]) * np.cos(2 * grids[-1])
    return np.stack([base * (c + 1) for c in range(channels[0])], -1) if channels else base


@pytest.mark.parametrize("emb", EMBEDDERS, ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_grid_model_round_trip(tmp_path, emb, dtype):
    S = _signal((10, 9), (2,)).astype(dtype)
    model = kronpe.fit_grid(S, [emb, emb], ridge=1e-3)
    path = tmp_path / "model.npz"
    model.save(path)
    back = kronpe.load(path)
    assert isinstance(back, kronpe.GridModel)
    assert back.embedders == model.embedders and back.weights.dtype == model.weights.dtype
    np.testing.assert_array_equal(back.weights, model.weights)
    assert back.ridge == model.ridge
    coords = data.grid_coords((13, 7))
    np.testing.assert_array_equal(back.predict_grid(coords), model.predict_grid(coords))


def test_grid_model_with_gcv_and_batch(tmp_path):
    S = np.stack([_signal((16, 16)), 2 * _signal((16, 16))], -1)
    model = kronpe.GridPlan(data.grid_coords((16, 16)), kronpe.Gaussian(16, 0.04)).fit(S, batch_axes=1)
    model.save(tmp_path / "m.npz")
    back = kronpe.load(tmp_path / "m.npz")
    np.testing.assert_array_equal(back.ridge, model.ridge)
    np.testing.assert_array_equal(back.gcv, model.gcv)
    default = kronpe.fit_grid(_signal((16, 16)))  # kronpe's own choice
    default.save(tmp_path / "d.npz")
    np.testing.assert_array_equal(kronpe.load(tmp_path / "d.npz").predict(np.array([[0.3, 0.7]])),
                                  default.predict(np.array([[0.3, 0.7]])))


def test_point_models_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    pts = rng.random((400, 2))
    vals = np.c_[np.sin(4 * pts[:, 0]), pts[:, 1] ** 2]
    for i, model in enumerate([
        kronpe.fit_points(pts, vals),  # automatic Gaussians
        kronpe.fit_points(pts, vals, [kronpe.BSpline(8, margin=2)] * 2, grid=(9, 9), ridge=1e-4),
    ]):
        path = tmp_path / f"p{i}.npz"
        model.save(str(path))
        back = kronpe.load(str(path))
        assert isinstance(back, kronpe.PointModel) and back.embedders == model.embedders
        np.testing.assert_array_equal(back.predict(pts[:50]), model.predict(pts[:50]))
        assert back.info["iterations"] == model.info["iterations"]
    # samples on a pixel lattice: the default smooth model (no embedders: a blend of grid values)
    lattice = np.stack(np.meshgrid(*data.grid_coords((12, 12)), indexing="ij"), -1).reshape(-1, 2)
    keep = rng.random(144) < 0.6
    model = kronpe.fit_points(lattice[keep], _signal((12, 12)).reshape(-1)[keep])
    assert all(e is None for e in model.embedders)
    model.save(tmp_path / "s.npz")
    back = kronpe.load(tmp_path / "s.npz")
    coords = data.grid_coords((12, 12))
    np.testing.assert_array_equal(back.predict_grid(coords), model.predict_grid(coords))


def _rewrite(src, dst, **changes):
    with np.load(src, allow_pickle=False) as z:
        entries = {k: z[k] for k in z.files}
    entries.update(changes)
    with open(dst, "wb") as f:
        np.savez(f, **entries)


def test_bad_files_raise_named_errors(tmp_path):
    model = kronpe.fit_grid(_signal((8, 8)), kronpe.Gaussian(8, 0.1), ridge=1e-3)
    good = tmp_path / "good.npz"
    model.save(good)
    raw = good.read_bytes()
    (tmp_path / "truncated.npz").write_bytes(raw[: len(raw) // 2])
    (tmp_path / "text.npz").write_text("not a model")
    np.savez(tmp_path / "other.npz", a=np.ones(3))
    np.save(tmp_path / "array.npy", np.ones(3))
    _rewrite(good, tmp_path / "v2.npz", format_version=np.array(2))
    header = json.loads(str(np.load(good)["header"]))
    header["embedders"][0]["name"] = "os.system"
    _rewrite(good, tmp_path / "evil.npz", header=np.array(json.dumps(header)))
    _rewrite(good, tmp_path / "badw.npz", weights=np.ones((3, 3)))
    cases = {
        "missing.npz": (kronpe.ModelFileError, "does not exist"),
        "truncated.npz": (kronpe.ModelFileError, "truncated.npz"),
        "text.npz": (kronpe.ModelFileError, "not a kronpe model"),
        "other.npz": (kronpe.ModelFileError, "not a kronpe model"),
        "array.npy": (kronpe.ModelFileError, "not a kronpe model"),
        "v2.npz": (kronpe.ModelVersionError, "version 2"),
        "evil.npz": (kronpe.ModelFileError, "unknown embedder"),
        "badw.npz": (kronpe.ModelFileError, "K = 8"),
    }
    for name, (exc, words) in cases.items():
        with pytest.raises(exc) as info:
            kronpe.load(tmp_path / name)
        assert words in str(info.value), (name, str(info.value))
        assert isinstance(info.value, ValueError)  # the CLI's one-line user errors
    assert zipfile.is_zipfile(good)
    with pytest.raises(TypeError, match="path"):
        kronpe.load(3)
    with pytest.raises(TypeError, match="model"):
        from kronpe.io import save_model

        save_model(object(), tmp_path / "x.npz")
