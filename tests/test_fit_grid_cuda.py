"""Grid fits of device signals (CuPy arrays, CUDA torch tensors): GridPlan.fit and fit_grid run
the closed form on the signal's GPU and give weights of its kind there; every result is compared
with the host fit of the same values (the ``cuda_device`` fixture: skipped without a GPU).

The fold of the padding into the projection (pad(S) x U^T = S x (P^T U)^T) is checked on the host
too."""
from __future__ import annotations

import numpy as np
import pytest

import kronpe
from kronpe import DifferencePenalty, Gaussian, GridPlan, fit_grid
from kronpe._adapters import arrays as _arrays
from kronpe.solvers import grid_model as _fit
from kronpe.solvers.grid_plan import _fold_pad

DTYPES = [np.float32, np.float64]

# (grid shape, K per axis, channels); Gaussians of width 0.6 / K at jittered grid coordinates are
# well conditioned (the singular values of each axis within a factor 5), so that float32 fits of
# different summation orders agree to about 1e-6, the pseudo-inverse included
CASES = [((24, 20), (16, 14), (2,)), ((10, 9, 8), (8, 7, 6), ())]


def _rtol(dtype) -> float:
    return 1e-4 if np.dtype(dtype) == np.float32 else 1e-10


def _close(got, expected, dtype, factor: float = 1.0) -> None:
    """Relative to the largest expected value (the host fit of the same dtype)."""
    tol = _rtol(dtype) * factor
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * max(float(np.abs(expected).max()), 1e-30))


def _problem(shape, Ks, channels=(), batch=(), dtype=np.float64, seed=0, margin=0):
    """Coordinates, embedders and a smooth signal plus noise (a clear GCV minimum), each channel
    and batch entry of another scale."""
    rng = np.random.default_rng(seed)
    coords = [(np.arange(n) + rng.uniform(0, 0.5, n)) / n for n in shape]
    embs = [Gaussian(K, 0.6 / K, margin=margin) for K in Ks]
    smooth = np.ones(())
    for i, c in enumerate(coords):
        smooth = np.multiply.outer(smooth, np.sin(3.0 * c + i))
    extra = tuple(channels) + tuple(batch)
    scale = 1.0 + np.arange(int(np.prod(extra, dtype=np.int64))).reshape(extra)
    S = np.multiply.outer(smooth, scale) + 0.1 * rng.standard_normal(tuple(shape) + extra)
    return coords, embs, S.astype(dtype)


def _same_place(device, got, signal) -> None:
    """got is the signal's kind, on the signal's device."""
    assert device.kind_of(got) == device.lib
    assert _arrays.device_index(got) == _arrays.device_index(signal)


def _check_model(device, model, host_model, signal, dtype, factor: float = 1.0) -> None:
    _same_place(device, model.weights, signal)
    W = device.host(model.weights)
    assert W.dtype == dtype and W.shape == host_model.weights.shape
    _close(W, host_model.weights, dtype, factor)


# ---- everywhere ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("n, p", [(5, 1), (6, 2), (7, 6), (3, 2)])
def test_padding_folds_into_the_projection(n, p):
    rng = np.random.default_rng(n + p)
    U = rng.standard_normal((n + 2 * p, 4))
    S = rng.standard_normal((n, 3))
    padded = np.pad(S, [(p, p), (0, 0)], mode="reflect", reflect_type="odd")
    np.testing.assert_allclose(_fold_pad(U, p).T @ S, U.T @ padded, rtol=1e-13, atol=1e-13)


# ---- on a GPU -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("ridge", [1e-2, 0.0, "gcv"], ids=["ridge", "pinv", "gcv"])
@pytest.mark.parametrize("shape, Ks, channels", CASES, ids=["2d", "3d"])
def test_plan_fit_on_device_equals_host(cuda_device, shape, Ks, channels, ridge, dtype):
    coords, embs, S = _problem(shape, Ks, channels, dtype=dtype)
    plan = GridPlan(coords, embs, ridge=ridge)
    host = plan.fit(S)
    X = cuda_device.put(S)
    model = plan.fit(X)
    if ridge == "gcv":
        assert model.ridge == pytest.approx(host.ridge, rel=1e-2 if dtype == np.float32 else 1e-6)
        assert model.gcv == pytest.approx(host.gcv, rel=1e-4 if dtype == np.float32 else 1e-9)
        host = plan.fit(S, ridge=model.ridge)  # the weights at the ridge the device fit chose
    else:
        assert model.ridge == ridge and model.gcv is None
    _check_model(cuda_device, model, host, X, dtype)
    # a second fit uploads nothing: the plan's device factors are reused
    cached = dict(plan._dev)
    again = plan.fit(X)
    assert plan._dev.keys() == cached.keys()
    assert all(plan._dev[k]["Ut"] is cached[k]["Ut"] for k in cached)
    _close(cuda_device.host(again.weights), cuda_device.host(model.weights), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("ridge", [1e-2, "gcv"], ids=["ridge", "gcv"])
@pytest.mark.parametrize("shape, Ks, channels", CASES, ids=["2d", "3d"])
def test_batches_on_device(cuda_device, shape, Ks, channels, ridge, dtype):
    coords, embs, S = _problem(shape, Ks, channels, batch=(3,), dtype=dtype, seed=1)
    S[..., 1] *= 10.0  # the entries differ in scale: GCV must choose per entry
    plan = GridPlan(coords, embs, ridge=ridge)
    X = cuda_device.put(S)
    model = plan.fit(X, batch_axes=1)
    host = plan.fit(S, batch_axes=1)
    if ridge != "gcv":
        _check_model(cuda_device, model, host, X, dtype)
        return
    assert np.shape(model.ridge) == (3,) and np.shape(model.gcv) == (3,)
    np.testing.assert_allclose(model.ridge, host.ridge, rtol=1e-2 if dtype == np.float32 else 1e-6)
    _same_place(cuda_device, model.weights, X)
    W = cuda_device.host(model.weights)
    for j in range(3):  # each entry: the host fit at the ridge the device chose for it
        one = plan.fit(S[..., j], ridge=float(model.ridge[j]))
        _close(W[..., j], one.weights, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
@pytest.mark.parametrize("D", [2, 3])
def test_default_fit_grid_pads_on_device(cuda_device, D, dtype):
    """embedders=None: B-splines with a margin, 2 reflected samples per end, GCV."""
    rng = np.random.default_rng(D)
    shape = (20, 17, 9)[:D]
    S = rng.standard_normal(shape + (3,)).astype(dtype)  # RGB: the last axis is channels
    X = cuda_device.put(S)
    model = fit_grid(X)
    host = fit_grid(S)
    assert model.ridge == pytest.approx(host.ridge, rel=1e-2 if dtype == np.float32 else 1e-6)
    host_at = GridPlan(kronpe.data.grid_coords(shape), host.embedders, ridge=model.ridge, pad=2).fit(S)
    _check_model(cuda_device, model, host_at, X, dtype, factor=10.0)


@pytest.mark.parametrize("ridge", [0.1, "gcv"])
def test_padding_with_a_thin_basis_on_device(cuda_device, ridge):
    """K < N + 2 pad: the projection misses part of the padded signal (GCV needs its norm)."""
    coords, embs, S = _problem((30, 26), (12, 10), (2,), batch=(2,), seed=3, margin=2)
    plan = GridPlan(coords, embs, ridge=ridge, pad=2)
    assert not plan._full
    X = cuda_device.put(S)
    model = plan.fit(X, batch_axes=1)
    host = plan.fit(S, batch_axes=1)
    np.testing.assert_allclose(model.ridge, host.ridge, rtol=1e-6)
    _check_model(cuda_device, model, host, X, np.float64, factor=10.0)


def test_predict_on_device_equals_host(cuda_device):
    coords, embs, S = _problem((12, 10, 7), (9, 8, 6), (2,), dtype=np.float32, seed=4)
    plan = GridPlan(coords, embs, ridge=1e-2)
    model, host = plan.fit(cuda_device.put(S)), plan.fit(S)
    q = [np.linspace(0, 1, n) for n in (9, 6, 5)]
    grid = model.predict_grid(q)
    _same_place(cuda_device, grid, model.weights)
    _close(cuda_device.host(grid), host.predict_grid(q), np.float32, factor=10.0)
    assert cuda_device.is_dense(grid, "C")
    # the device bases are kept per embedders and coordinates: again, at other coordinates, and back
    _fit._DEVICE_BASES.clear()
    q2 = [np.linspace(0, 1, n) ** 2 for n in (9, 6, 5)]
    for c in (q, q2, q, q2):
        _close(cuda_device.host(model.predict_grid(c)), host.predict_grid(c), np.float32, factor=10.0)
    assert len(_fit._DEVICE_BASES) == 2
    # another model of the plan (other values) shares them and predicts its own weights
    S2 = np.random.default_rng(6).standard_normal(S.shape).astype(np.float32)
    model2 = plan.fit(cuda_device.put(S2))
    for c in (q2, q):
        _close(cuda_device.host(model2.predict_grid(c)), plan.fit(S2).predict_grid(c), np.float32, factor=10.0)
    assert len(_fit._DEVICE_BASES) == 2
    # other embedders (equal by value to none kept) get their own
    other = GridPlan(coords, [e.replace(sigma=1.5 * e.sigma) for e in embs], ridge=1e-2)
    _close(cuda_device.host(other.fit(cuda_device.put(S)).predict_grid(q)), other.fit(S).predict_grid(q),
           np.float32, factor=10.0)
    assert len(_fit._DEVICE_BASES) == 3
    pts = np.random.default_rng(5).uniform(0, 1, (50, 3))
    for chunk in (8, 1 << 22):
        values = model.predict(pts, chunk=chunk)
        _same_place(cuda_device, values, model.weights)
        _close(cuda_device.host(values), host.predict(pts), np.float32, factor=10.0)
    # device coordinates and points are read on the host
    _close(cuda_device.host(model.predict(cuda_device.put(pts))), host.predict(pts), np.float32, factor=10.0)
    assert model.predict(np.zeros((0, 3))).shape == (0, 2)


def test_large_device_bases_stay_with_their_model(cuda_device, monkeypatch):
    """Bases over the shared store's byte budget are kept by their model alone (and found there)."""
    coords, embs, S = _problem((12, 10), (9, 8), dtype=np.float32, seed=7)
    plan = GridPlan(coords, embs, ridge=1e-2)
    model, host = plan.fit(cuda_device.put(S)), plan.fit(S)
    _fit._DEVICE_BASES.clear()
    monkeypatch.setattr(_fit, "_DEVICE_BASES_BYTES", 16)
    q = [np.linspace(0, 1, n) for n in (7, 5)]
    for _ in range(3):
        _close(cuda_device.host(model.predict_grid(q)), host.predict_grid(q), np.float32, factor=10.0)
    assert len(_fit._DEVICE_BASES) == 0 and len(model._device_bases) == 1


def test_penalty_and_mask_on_device_are_host_solves(cuda_device):
    coords, embs, S = _problem((14, 12), (10, 9), (2,), seed=6)
    X = cuda_device.put(S)
    pen = GridPlan(coords, embs, ridge=0.05, penalty=DifferencePenalty(2))
    _check_model(cuda_device, pen.fit(X), pen.fit(S), X, np.float64)
    mask = np.random.default_rng(7).random((14, 12)) < 0.7
    Sm = S.copy()
    Sm[~mask] = np.nan  # ignored where unobserved
    Xm = cuda_device.put(Sm)
    plan = GridPlan(coords, embs, ridge=0.05)
    _check_model(cuda_device, plan.fit(Xm, mask=mask), plan.fit(Sm, mask=mask), Xm, np.float64)
    _check_model(cuda_device, plan.fit(Xm, mask=cuda_device.put(mask)), plan.fit(Sm, mask=mask), Xm, np.float64)
    # fit_grid's default fill of a grid with holes: solved on the device (tests/test_multigrid_cuda.py
    # compares it with the host's fill; float32 solves stopped at a tolerance, so to that)
    dev, host = fit_grid(Xm, mask=mask), fit_grid(Sm, mask=mask)
    assert dev.info["device"] == "cuda:0" and "device" not in host.info
    _check_model(cuda_device, dev, host, Xm, np.float64, factor=1e5)


def test_side_stream_and_float32_kinds(cuda_device):
    coords, embs, S = _problem((16, 12), (10, 8), (), batch=(4,), dtype=np.float32, seed=8)
    plan = GridPlan(coords, embs, ridge="gcv")
    host = plan.fit(S, batch_axes=1)
    with cuda_device.stream():
        X = cuda_device.put(S)
        model = plan.fit(X, batch_axes=1)
        W = cuda_device.host(model.weights)
    assert W.dtype == np.float32
    for j in range(4):
        _close(W[..., j], plan.fit(S[..., j], ridge=float(model.ridge[j])).weights, np.float32)
    np.testing.assert_allclose(model.ridge, host.ridge, rtol=1e-2)
    # integers compute in float64
    Si = np.arange(16 * 12).reshape(16, 12) % 7
    _check_model(cuda_device, GridPlan(coords, embs, ridge=0.1).fit(cuda_device.put(Si)),
                 GridPlan(coords, embs, ridge=0.1).fit(Si), cuda_device.put(Si), np.float64)


def test_save_device_model(cuda_device, tmp_path):
    coords, embs, S = _problem((10, 8), (7, 6), (2,), seed=9)
    model = GridPlan(coords, embs, ridge="gcv").fit(cuda_device.put(S))
    model.save(tmp_path / "m.npz")
    back = kronpe.load(tmp_path / "m.npz")
    np.testing.assert_array_equal(back.weights, cuda_device.host(model.weights))
    assert back.ridge == pytest.approx(model.ridge, rel=1e-15)


@pytest.mark.parametrize("bad", ["nan", "inf"])
def test_bad_device_values(cuda_device, bad):
    coords, embs, S = _problem((10, 8), (7, 6), seed=10)
    S[3, 4] = np.nan if bad == "nan" else np.inf
    X = cuda_device.put(S)
    found = "NaN" if bad == "nan" else "Inf"
    for ridge in (0.1, "gcv"):
        with pytest.raises(ValueError, match=f"signal must be finite, found {found}"):
            GridPlan(coords, embs, ridge=ridge).fit(X)
    with pytest.raises(ValueError, match="signal must be finite"):
        fit_grid(X)


def test_finiteness_check_on_device(cuda_device):
    """One float64 sum flags NaN and Inf; a sum that overflows on huge finite values is confirmed
    element by element and passes."""
    from kronpe._adapters.arrays import check_finite as _check_finite, finite_flag as _finite_flag

    huge = np.full((40, 30), 1e307)
    X = cuda_device.put(huge)
    assert not bool(_arrays.to_host(_finite_flag(X)))  # the sum overflowed ...
    _check_finite(X, _finite_flag(X))  # ... and the values are finite: no error
    for bad, found in ((np.nan, "NaN"), (np.inf, "Inf"), (-np.inf, "Inf")):
        a = np.ones((5, 4), np.float32)
        a[2, 1] = bad
        X = cuda_device.put(a)
        with pytest.raises(ValueError, match=f"signal must be finite, found {found}"):
            _check_finite(X, _finite_flag(X))
    _check_finite(cuda_device.put(np.ones((5, 4), np.float32)), _finite_flag(cuda_device.put(np.ones((5, 4), np.float32))))


def test_bad_device_shapes(cuda_device):
    coords, embs, S = _problem((10, 8), (7, 6), (2,), seed=11)
    plan = GridPlan(coords, embs, ridge=0.1)
    with pytest.raises(ValueError, match=r"signal must have shape \(10, 8\)"):
        plan.fit(cuda_device.put(S[:9]))
    with pytest.raises(ValueError, match="signal must have at least 2 axes"):
        plan.fit(cuda_device.put(S[:, 0, 0]))
    with pytest.raises(ValueError, match="batch_axes=2"):
        plan.fit(cuda_device.put(S), batch_axes=2)
    with pytest.raises(ValueError, match="signal has an empty grid axis"):
        fit_grid(cuda_device.put(np.zeros((0, 5))))
