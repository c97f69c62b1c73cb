"""Grid fits (kronpe.solvers.fit) against dense Kronecker solutions (kronpe.reference), over the
cases of tests/_samples.py (grid_problem, grid_fit_cases); device signals (CuPy arrays, CUDA torch
tensors) against the host fit of the same values (the ``cuda_device`` fixture: skipped without a
GPU)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import kronpe
from kronpe import BSpline, DifferencePenalty, Gaussian, GridModel, GridPlan, fit_grid, reference
from kronpe._adapters import arrays as _arrays
from kronpe.solvers import grid as _grid, grid_model as _fit
from kronpe.solvers.fit import default_embedders
from kronpe.solvers.gcv import GCVCurve as _GCVCurve
from kronpe.solvers.grid_plan import _filtered, _fold_pad
from _samples import (CPU, DEVICE_GRID_FITS, assert_close, device_grid_problem, grid_fit_cases, grid_problem,
                      ids)

CASES = list(grid_fit_cases())


def _scale(phis):
    """max product of squared singular values: ridges are given relative to it."""
    return float(np.prod([np.linalg.norm(p, 2) ** 2 for p in phis]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    D=st.integers(1, 4),
    dtype=st.sampled_from([np.float32, np.float64]),
    nchan=st.integers(0, 2),
)
def test_fit_matches_dense_ridge(data, D, dtype, nchan):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    limit = {1: 9, 2: 6, 3: 4, 4: 3}[D]
    shape = [data.draw(st.integers(1, limit)) for _ in range(D)]
    Ks = [data.draw(st.integers(1, limit)) for _ in range(D)]
    channels = (2,) * nchan
    coords, embs, S, phis = grid_problem(rng, shape, Ks, channels, dtype=dtype)
    ridge = _scale(phis) * data.draw(st.sampled_from([1e-3, 1e-1, 1.0]))
    model = fit_grid(S, embs, coords=coords, ridge=ridge)
    expected = reference.grid_ridge_fit(S, phis, ridge)
    assert model.weights.dtype == dtype
    assert model.weights.shape == tuple(e.K for e in embs) + channels
    assert model.ridge == ridge
    assert_close(model.weights, expected, 2e-4 if dtype == np.float32 else 1e-9, floor=1.0)


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_ridge_zero_is_pinv(rng, case):
    coords, embs, S, phis = case.problem(rng)
    model = fit_grid(CPU.view(S, case.layout), embs, coords=coords, ridge=0.0)
    expected = reference.grid_ridge_fit(S, phis, 0.0)
    np.testing.assert_allclose(model.weights, expected, rtol=1e-7, atol=1e-9 * np.abs(expected).max())


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_fit_of_any_layout_matches_dense_ridge(rng, case, dtype):
    """A signal in any memory layout, float32 or float64: the dense ridge fit of its values."""
    coords, embs, S, phis = case.problem(rng, dtype)
    ridge = 0.1 * _scale(phis)
    model = fit_grid(CPU.view(S, case.layout), embs, coords=coords, ridge=ridge)
    assert model.weights.dtype == dtype and model.weights.shape == tuple(e.K for e in embs) + case.channels
    assert_close(model.weights, reference.grid_ridge_fit(S, phis, ridge), 2e-4 if dtype == np.float32 else 1e-9,
                 floor=1.0)


def test_ridge_zero_float32(rng):
    coords, embs, S, phis = grid_problem(rng, (12, 10), (8, 9), (), dtype=np.float32, margin=0, family=1)
    model = fit_grid(S, embs, coords=coords, ridge=0.0)
    assert model.weights.dtype == np.float32
    expected = reference.grid_ridge_fit(S, phis, 0.0)
    np.testing.assert_allclose(model.weights, expected, rtol=1e-3, atol=1e-3 * np.abs(expected).max())


@pytest.mark.parametrize("shape, Ks, channels", [((9,), (6,), ()), ((6, 5), (4, 7), (2,)), ((4, 3, 5), (3, 4, 2), ())])
def test_gcv_matches_hat_matrix(rng, shape, Ks, channels):
    coords, embs, S, phis = grid_problem(rng, shape, Ks, channels)
    plan = GridPlan(coords, embs)
    scale = _scale(phis)
    ridges = scale * np.logspace(-6, 1, 15)
    ours = plan.gcv(S, ridges)
    brute = np.array([reference.grid_gcv(S, phis, r) for r in ridges])
    np.testing.assert_allclose(ours, brute, rtol=1e-7)
    # the chosen ridge is at least as good as the best of a fine brute-force grid
    model = plan.fit(S)
    fine = scale * np.logspace(-8, 2, 41)
    best = min(reference.grid_gcv(S, phis, r) for r in fine)
    assert reference.grid_gcv(S, phis, model.ridge) <= best * (1 + 1e-6)
    assert model.gcv == pytest.approx(reference.grid_gcv(S, phis, model.ridge), rel=1e-7)


def test_gcv_binned_search_finds_the_minimum(rng):
    """More than 2^16 products: the search runs on a histogram; the result must stay optimal."""
    m = np.outer(rng.uniform(0.01, 4, 300) ** 2, rng.uniform(0.01, 4, 300) ** 2)
    truth = rng.standard_normal(m.shape) * np.sqrt(m)
    w = (truth + 0.3 * rng.standard_normal(m.shape)) ** 2
    curve = _GCVCurve(m, w, rss0=5.0, n=m.size + 100)
    ridge, score = curve.minimise()
    grid = curve.m_max * np.logspace(-14, 2, 321)
    assert score <= curve(grid).min() * (1 + 1e-4)
    assert score == pytest.approx(float(curve(ridge)[0]), rel=1e-12)


@pytest.mark.parametrize("r", [0, 1, 7, 8, 4099, 33000, 70000])
def test_gcv_scores_kernel_matches_reference(rng, r):
    m = rng.random(r) ** 6 + 1e-12
    count = rng.integers(1, 4, r).astype(np.float64)
    w = rng.random(r)
    ridges = np.r_[0.0, np.logspace(-12, 2, 9)]
    n = count.sum() + 50.0
    got = np.asarray(kronpe._core.gcv_scores(m, count, w, ridges, 0.25, n, count.sum()))
    np.testing.assert_allclose(got, reference.gcv_scores(m, count, w, ridges, 0.25, n), rtol=1e-12)
    # the curve's own call takes strided, float32 and any-shaped inputs (copied contiguous, float64)
    M = np.repeat(m, 2)[::2].reshape(1, -1)
    curve = _GCVCurve(M.astype(np.float32) if r else M, np.repeat(w, 2)[::2], rss0=0.25, n=r + 50.0)
    np.testing.assert_allclose(curve(ridges[1:]), reference.gcv_scores(curve.m, np.ones(curve.m.size), curve.w,
                                                                      ridges[1:], 0.25, r + 50.0), rtol=1e-12)
    assert kronpe._core.gcv_scores(m, count, w, np.empty(0), 0.25, n, count.sum()) == []
    # ridges are scored in groups of four per pass: each score the same bits as alone
    alone = [kronpe._core.gcv_scores(m, count, w, ridges[i:i + 1], 0.25, n, count.sum())[0] for i in range(ridges.size)]
    assert got.tolist() == alone


def test_gcv_scores_kernel_rejects_bad_arrays():
    a = np.ones(10)
    with pytest.raises(ValueError, match="must be float64"):
        kronpe._core.gcv_scores(a.astype(np.float32), a.astype(np.float32), a.astype(np.float32), a, 0.0, 20.0, 10.0)
    with pytest.raises(ValueError, match="must have one size"):
        kronpe._core.gcv_scores(a, a[:9], a, a, 0.0, 20.0, 10.0)
    with pytest.raises(ValueError, match="C-contiguous"):
        kronpe._core.gcv_scores(np.ones(20)[::2], a, a, a, 0.0, 20.0, 10.0)
    with pytest.raises(ValueError, match="ridges must be float64"):
        kronpe._core.gcv_scores(a, a, a, a.astype(np.float32), 0.0, 20.0, 10.0)


def test_plan_reuse_and_batches(rng):
    coords, embs, S, phis = grid_problem(rng, (8, 7), (6, 5), (2, 3))  # channels 2, batch 3
    plan = GridPlan(coords, embs, ridge=0.5)
    a = plan.fit(S[..., 0])
    b = plan.fit(S[..., 1])
    np.testing.assert_allclose(a.weights, reference.grid_ridge_fit(S[..., 0], phis, 0.5), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(b.weights, reference.grid_ridge_fit(S[..., 1], phis, 0.5), rtol=1e-9, atol=1e-9)
    # a fixed ridge: batch and channels are the same linear solve
    whole = plan.fit(S, batch_axes=1)
    np.testing.assert_allclose(whole.weights[..., 1], b.weights, rtol=1e-10, atol=1e-12)
    # GCV: one ridge per batch element, shared by its channels
    gcv = plan.fit(S, ridge="gcv", batch_axes=1)
    assert np.shape(gcv.ridge) == (3,)
    for j in range(3):
        one = plan.fit(S[..., j], ridge="gcv")
        assert gcv.ridge[j] == pytest.approx(one.ridge, rel=1e-9)
        np.testing.assert_allclose(gcv.weights[..., j], one.weights, rtol=1e-8, atol=1e-10)
    # channels share one ridge: two channels (2 and 3 of a (2, 3) block) give one value
    shared = plan.fit(S, ridge="gcv")
    assert np.ndim(shared.ridge) == 0 and shared.weights.shape == (8, 7, 2, 3)


def test_predict_and_predict_grid_agree(rng, dtype):
    coords, embs, S, phis = grid_problem(rng, (9, 8, 5), (6, 7, 4), (2,), dtype=dtype)
    model = fit_grid(S, embs, coords=coords, ridge=1.0)
    q = [np.linspace(0, 1, n) for n in (5, 4, 3)]
    grid = model.predict_grid(q)
    assert grid.shape == (5, 4, 3, 2) and grid.dtype == dtype and grid.flags.c_contiguous
    expected = reference.multi_mode_product(model.weights, [e(c) for e, c in zip(embs, q)])
    assert_close(grid, expected, dtype)
    pts = np.stack(np.meshgrid(*q, indexing="ij"), -1).reshape(-1, 3)
    for chunk in (7, 1 << 22):  # several blocks, then one
        values = model.predict(pts, chunk=chunk)
        assert values.shape == (pts.shape[0], 2) and values.dtype == dtype
        assert_close(values.reshape(grid.shape), grid, dtype)
    assert model.predict(np.zeros((0, 3))).shape == (0, 2)


def test_fit_reproduces_training_values(rng):
    """K = N and a tiny ridge: the fit interpolates its samples (predict_grid at the coords)."""
    coords = [np.linspace(0, 1, 13)[:-1]] * 2
    S = rng.standard_normal((12, 12))
    model = fit_grid(S, [Gaussian(12, 0.6 / 12)] * 2, coords=coords, ridge=1e-12)
    np.testing.assert_allclose(model.predict_grid(coords), S, atol=1e-6)


def test_padding_matches_dense_reference(rng):
    coords = [np.sort(rng.uniform(0, 1, 9)), np.sort(rng.uniform(0, 1, 7))]
    embs = [BSpline(6, 3, margin=2), Gaussian(5, 0.2, margin=2)]
    S = rng.standard_normal((9, 7, 2))
    model = GridPlan(coords, embs, ridge=0.3, pad=2).fit(S)
    padded = np.pad(S, [(2, 2), (2, 2), (0, 0)], mode="reflect", reflect_type="odd")
    phis = [reference.embed_padded(e, c, 2) for e, c in zip(embs, coords)]
    np.testing.assert_allclose(model.weights, reference.grid_ridge_fit(padded, phis, 0.3), rtol=1e-9, atol=1e-9)


def test_width_search(rng):
    x = np.linspace(0, 1, 33)[:-1]
    S = np.sin(6 * x)[:, None] * np.cos(4 * x)[None, :] + 0.05 * rng.standard_normal((32, 32))
    start = Gaussian(32, 0.25 / 32, margin=2)
    plan = GridPlan([x, x], [start] * 2)
    fixed = plan.fit(S)
    searched = fit_grid(S, [start] * 2, width="gcv")
    assert searched.embedders[0].sigma != start.sigma
    assert searched.gcv < fixed.gcv


def test_default_embedders_and_ndim_guess(rng):
    x = np.linspace(0, 1, 41)[:-1]
    smooth = np.sin(3 * x)[:, None, None] * np.cos(2 * x)[None, :, None] * np.array([1.0, 0.5, -0.2])
    model = fit_grid(smooth.astype(np.float32))  # (40, 40, 3): RGB channels, D = 2
    assert model.ndim == 2 and model.weights.shape == (44, 44, 3) and model.weights.dtype == np.float32
    assert all(isinstance(e, BSpline) and e.margin == 2 for e in model.embedders)
    xf = np.linspace(0, 1, 81)[:-1]
    truth = np.sin(3 * xf)[:, None, None] * np.cos(2 * xf)[None, :, None] * np.array([1.0, 0.5, -0.2])
    err = np.abs(model.predict_grid([xf, xf]) - truth)
    assert err.max() < 2e-2  # the last row and column lie beyond the last sample
    assert err[8:-8, 8:-8].max() < 1e-4  # a cubic spline inside
    assert fit_grid(smooth, ndim=3).weights.shape == (44, 44, 7)
    # K follows the sample spacing of the coordinates
    sub = np.linspace(0, 1, 257)[:-1][::2]
    assert default_embedders([sub])[0].K_base == 128
    assert default_embedders([np.array([0.5])])[0].K_base == 1


def test_float32_weights_and_exports(rng):
    coords, embs, S, _ = grid_problem(rng, (6, 5), (4, 4), (), dtype=np.float32)
    model = kronpe.fit_grid(S, embs, coords=coords)
    assert isinstance(model, GridModel) and model.weights.dtype == np.float32
    assert model.ridge > 0 and np.isfinite(model.gcv)
    assert "GridModel" in repr(model)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda S, e, c: fit_grid(S[:4], e, coords=c), "signal"),
        (lambda S, e, c: fit_grid(S[:, :, None][:, :, :0], e, coords=c), "signal"),
        (lambda S, e, c: fit_grid(np.where(S > 1, np.nan, S), e, coords=c), "signal"),
        (lambda S, e, c: fit_grid(np.where(S > 1, np.inf, S), e, coords=c), "signal"),
        (lambda S, e, c: fit_grid(S.astype(complex), e, coords=c), "signal"),
        (lambda S, e, c: fit_grid(S, e, coords=c, ridge=-1.0), "ridge"),
        (lambda S, e, c: fit_grid(S, e, coords=c, ridge="loo"), "ridge"),
        (lambda S, e, c: fit_grid(S, e, coords=c, ridge=np.nan), "ridge"),
        (lambda S, e, c: fit_grid(S, e[:1], coords=c), "coords"),
        (lambda S, e, c: GridPlan(c, e[:1]), "embedders"),
        (lambda S, e, c: fit_grid(S, e, coords=[c[0], c[1] + 1]), r"coords\[1\]"),
        (lambda S, e, c: fit_grid(S, e, coords=[c[0], c[1][:3]]), r"coords\[1\]"),
        (lambda S, e, c: fit_grid(S, e, coords=c, width="wide"), "width"),
        (lambda S, e, c: fit_grid(S, [e[0], "x"], coords=c), r"embedders\[1\]"),
        (lambda S, e, c: fit_grid(S, None, ndim=3), "ndim"),
        (lambda S, e, c: fit_grid(S, None, ndim=0), "ndim"),
        (lambda S, e, c: fit_grid(np.zeros((0, 5)), None), "empty"),
        (lambda S, e, c: fit_grid(np.zeros(())), "signal"),
        (lambda S, e, c: GridPlan([c[0], np.zeros(0)], e), r"coords\[1\]"),
        (lambda S, e, c: GridPlan(c, e, pad=-1), "pad"),
        (lambda S, e, c: GridPlan(c, e).fit(S, batch_axes=1), "batch_axes"),
        (lambda S, e, c: GridPlan(c, e).gcv(S, [-1.0]), "ridges"),
        (lambda S, e, c: fit_grid(S, e, coords=c, ridge=1.0).predict(np.zeros((3, 3))), "points"),
        (lambda S, e, c: fit_grid(S, e, coords=c, ridge=1.0).predict(np.full((3, 2), 2.0)), "points"),
        (lambda S, e, c: fit_grid(S, e, coords=c, ridge=1.0).predict_grid([c[0]]), "coords"),
        (lambda S, e, c: fit_grid(S, e, coords=c, ridge=1.0).predict_grid([c[0], -c[1]]), r"coords\[1\]"),
        (lambda S, e, c: GridPlan(c, [Gaussian(4, 0.2), kronpe.LinearFourier(4, 2.0)], pad=1), "pad"),
    ],
)
def test_bad_input(rng, call, match):
    coords, embs, S, _ = grid_problem(rng, (6, 5), (4, 4))
    S = S + 0.0  # values around 0: some above 1 for the NaN/Inf cases
    S[0, 0] = 2.0
    # a wrong type (a complex signal, a string for an embedder) is a TypeError, a wrong value a
    # ValueError
    with pytest.raises((TypeError, ValueError), match=match) as info:
        call(S, embs, coords)
    wrong_type = "real numbers" in str(info.value) or "must be a kronpe Embedder" in str(info.value)
    assert info.type is (TypeError if wrong_type else ValueError), info.value


# ---- device signals: the closed form on the signal's GPU, against the host fit ------------------------


def _same_place(device, got, signal) -> None:
    """got is the signal's kind, on the signal's device."""
    assert device.kind_of(got) == device.lib
    assert _arrays.device_index(got) == _arrays.device_index(signal)


def _check_model(device, model, host_model, signal, dtype, factor: float = 1.0) -> None:
    """The device model's weights: on the signal's device, of its dtype, the host model's values
    (relative to the largest)."""
    _same_place(device, model.weights, signal)
    W = device.host(model.weights)
    assert W.dtype == dtype and W.shape == host_model.weights.shape
    assert_close(W, host_model.weights, dtype, factor=factor)


# ---- the separable pseudo-inverse (ridge 0 with no product of singular values cut) -------------


def _three_steps(plan, S, nb=0):
    """The SVD path of a ridge-0 fit: Z0 = S x U^T, the cutoff's filter, x V."""
    return plan._weights(_filtered(plan._project(S), plan._filter(0.0, S.dtype), plan.ndim, nb))


# (grid shape, K per axis, padding): square, tall (more samples than centres), wide and mixed
# axes, well conditioned in float32 too (the padded ones with as many centres of margin)
PINV_CASES = [((24, 20), (24, 20), 0), ((24, 20), (24, 20), 2), ((28, 24), (20, 18), 0), ((28, 24), (20, 18), 2),
              ((12, 10), (16, 14), 0), ((12, 10), (16, 14), 2), ((9, 12, 10), (7, 12, 12), 0)]


@pytest.mark.parametrize("shape, Ks, pad", PINV_CASES,
                         ids=["square", "square-pad", "tall", "tall-pad", "wide", "wide-pad", "mixed"])
def test_pseudo_inverse_is_one_chain_without_svd(shape, Ks, pad, dtype):
    """Well-conditioned axes: the fit is S x_i Phi_i^+ by LU or QR, no SVD computed, the SVD
    path's weights (and, in float64, the dense pseudo-inverse's)."""
    coords, embs, S, phis = device_grid_problem(shape, Ks, (2,), dtype=dtype, margin=pad)
    kronpe.clear_caches()
    plan = GridPlan(coords, embs, ridge=0.0, pad=pad)
    model = plan.fit(S)
    assert all(a._svd is None for a in plan._axes)
    assert model.weights.dtype == dtype and model.weights.flags.c_contiguous and model.ridge == 0.0
    assert plan._pinvs(dtype) is not None
    assert_close(model.weights, _three_steps(plan, S), dtype, factor=10.0)
    if pad == 0 and dtype == np.float64:
        assert_close(model.weights, reference.grid_ridge_fit(S, phis, 0.0), dtype, factor=10.0)


def test_pseudo_inverse_of_batches(rng):
    coords, embs, S, _ = device_grid_problem((14, 12), (10, 12), (2,), batch=(3,))
    plan = GridPlan(coords, embs, ridge=0.0)
    whole = plan.fit(S, batch_axes=1)
    for b in range(3):
        assert_close(whole.weights[..., b], plan.fit(S[..., b]).weights, np.float64)
    assert_close(whole.weights, _three_steps(plan, S, nb=1), np.float64)


@pytest.mark.parametrize("dtype_", [np.float32, np.float64])
def test_cutoff_decides_separability(dtype_):
    """Just below the products' smallest ratio every product is kept (one chain); just above,
    the cutoff drops some and the three steps run: both the dense pseudo-inverse with that cutoff."""
    coords, embs, S, phis = device_grid_problem((10, 9), (8, 9), (), dtype=dtype_)
    svals = [np.linalg.svd(p, compute_uv=False) for p in phis]
    ratio = np.prod([s.min() / s.max() for s in svals])
    A = reference.kron_matrix(phis)
    for rcond, separable in ((0.99 * ratio, True), (1.01 * ratio, False), (0.1 * ratio, True)):
        kronpe.clear_caches()
        plan = GridPlan(coords, embs, ridge=0.0, rcond=rcond)
        W = plan.fit(S).weights
        assert (plan._pinvs(dtype_) is not None) == separable
        dense = (np.linalg.pinv(A, rcond=rcond) @ S.astype(np.float64).reshape(-1)).reshape(W.shape)
        assert_close(W, dense, dtype_, factor=100.0)
    # a bound far from the ratio: the LU proves it and the SVD is never computed
    assert all(a._svd is None for a in plan._axes)


def test_ill_conditioned_axes_fall_back_to_the_svd():
    """A condition number beyond the fast inverse's limit: the SVD decides and inverts."""
    x = np.linspace(0, 1, 33)[:-1]
    S = np.random.default_rng(3).standard_normal((32, 32))
    bad, good = Gaussian(32, 1.8 / 32), Gaussian(32, 1.0 / 32)  # condition numbers 2e6 and 70
    kronpe.clear_caches()
    plan = GridPlan([x, x], [bad, good], ridge=0.0, rcond=1e-12)
    W = plan.fit(S).weights
    assert plan._axes[0]._svd is not None and plan._axes[1]._svd is None and plan._pinvs(np.float64) is not None
    assert_close(W, _three_steps(plan, S), 1e-8)
    assert_close(W, reference.grid_ridge_fit(S, [bad(x), good(x)], 0.0), 1e-8)
    # a cutoff that drops products: the three steps
    plan = GridPlan([x, x], [bad, good], ridge=0.0, rcond=1e-6)
    assert plan._pinvs(np.float64) is None
    A = reference.kron_matrix([bad(x), good(x)])
    assert_close(plan.fit(S).weights, (np.linalg.pinv(A, rcond=1e-6) @ S.reshape(-1)).reshape(32, 32), 1e-8)


@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 12), n=st.integers(1, 12), log_scale=st.floats(0, 6), seed=st.integers(0, 2**31),
       single=st.booleans())
def test_condition_bound_is_an_upper_bound(m, n, log_scale, seed, single):
    """_fast_inverse's bound is at least the 2-norm condition number, its matrix the
    pseudo-inverse (to its precision's rounding times the condition number)."""
    rng = np.random.default_rng(seed)
    phi = rng.standard_normal((m, n)) * np.logspace(0, -log_scale, n)[None, :]
    dt = np.dtype(np.float32 if single else np.float64)
    got = _grid._fast_inverse(phi, dt)
    s = np.linalg.svd(phi, compute_uv=False)
    kappa = s.max() / s.min()
    if got is None:
        return
    X, bound = got
    assert X.dtype == dt and X.shape == (n, m)
    assert bound >= kappa * (1 - 1e-9)
    err = np.abs(X - np.linalg.pinv(phi)).max() / np.abs(np.linalg.pinv(phi)).max()
    assert err <= 100 * max(m, n) * np.finfo(dt).eps * kappa


def test_factorisations_are_forgotten_and_pickled():
    import pickle

    coords, embs, S, _ = device_grid_problem((12, 10), (12, 10), ())
    plan = GridPlan(coords, embs, ridge=0.0)
    W = plan.fit(S).weights
    assert _grid._FACTORS
    again = pickle.loads(pickle.dumps(plan))
    assert_close(again.fit(S).weights, W, np.float64)
    assert_close(again.fit(S, ridge=0.1).weights, plan.fit(S, ridge=0.1).weights, np.float64)
    kronpe.clear_caches()
    assert not _grid._FACTORS


@pytest.mark.parametrize("n, p", [(5, 1), (6, 2), (7, 6), (3, 2)])
def test_padding_folds_into_the_projection(n, p):
    rng = np.random.default_rng(n + p)
    U = rng.standard_normal((n + 2 * p, 4))
    S = rng.standard_normal((n, 3))
    padded = np.pad(S, [(p, p), (0, 0)], mode="reflect", reflect_type="odd")
    np.testing.assert_allclose(_fold_pad(U, p).T @ S, U.T @ padded, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("ridge", [1e-2, 0.0, "gcv"], ids=["ridge", "pinv", "gcv"])
@pytest.mark.parametrize("shape, Ks, channels", DEVICE_GRID_FITS, ids=["2d", "3d"])
def test_plan_fit_on_device_equals_host(cuda_device, shape, Ks, channels, ridge, dtype):
    coords, embs, S, _ = device_grid_problem(shape, Ks, channels, dtype=dtype)
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
    assert_close(cuda_device.host(again.weights), cuda_device.host(model.weights), dtype)


@pytest.mark.parametrize("ridge", [1e-2, "gcv"], ids=["ridge", "gcv"])
@pytest.mark.parametrize("shape, Ks, channels", DEVICE_GRID_FITS, ids=["2d", "3d"])
def test_batches_on_device(cuda_device, shape, Ks, channels, ridge, dtype):
    coords, embs, S, _ = device_grid_problem(shape, Ks, channels, batch=(3,), dtype=dtype, seed=1)
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
        assert_close(W[..., j], one.weights, dtype)


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
    coords, embs, S, _ = device_grid_problem((30, 26), (12, 10), (2,), batch=(2,), seed=3, margin=2)
    plan = GridPlan(coords, embs, ridge=ridge, pad=2)
    assert not plan._full
    X = cuda_device.put(S)
    model = plan.fit(X, batch_axes=1)
    host = plan.fit(S, batch_axes=1)
    np.testing.assert_allclose(model.ridge, host.ridge, rtol=1e-6)
    _check_model(cuda_device, model, host, X, np.float64, factor=10.0)


def test_predict_on_device_equals_host(cuda_device):
    coords, embs, S, _ = device_grid_problem((12, 10, 7), (9, 8, 6), (2,), dtype=np.float32, seed=4)
    plan = GridPlan(coords, embs, ridge=1e-2)
    model, host = plan.fit(cuda_device.put(S)), plan.fit(S)
    q = [np.linspace(0, 1, n) for n in (9, 6, 5)]
    grid = model.predict_grid(q)
    _same_place(cuda_device, grid, model.weights)
    assert_close(cuda_device.host(grid), host.predict_grid(q), np.float32, factor=10.0)
    assert cuda_device.is_dense(grid, "C")
    # the device bases are kept per embedders and coordinates: again, at other coordinates, and back
    _fit._DEVICE_BASES.clear()
    q2 = [np.linspace(0, 1, n) ** 2 for n in (9, 6, 5)]
    for c in (q, q2, q, q2):
        assert_close(cuda_device.host(model.predict_grid(c)), host.predict_grid(c), np.float32, factor=10.0)
    assert len(_fit._DEVICE_BASES) == 2
    # another model of the plan (other values) shares them and predicts its own weights
    S2 = np.random.default_rng(6).standard_normal(S.shape).astype(np.float32)
    model2 = plan.fit(cuda_device.put(S2))
    for c in (q2, q):
        assert_close(cuda_device.host(model2.predict_grid(c)), plan.fit(S2).predict_grid(c), np.float32, factor=10.0)
    assert len(_fit._DEVICE_BASES) == 2
    # other embedders (equal by value to none kept) get their own
    other = GridPlan(coords, [e.replace(sigma=1.5 * e.sigma) for e in embs], ridge=1e-2)
    assert_close(cuda_device.host(other.fit(cuda_device.put(S)).predict_grid(q)), other.fit(S).predict_grid(q),
                 np.float32, factor=10.0)
    assert len(_fit._DEVICE_BASES) == 3
    pts = np.random.default_rng(5).uniform(0, 1, (50, 3))
    for chunk in (8, 1 << 22):
        values = model.predict(pts, chunk=chunk)
        _same_place(cuda_device, values, model.weights)
        assert_close(cuda_device.host(values), host.predict(pts), np.float32, factor=10.0)
    # device coordinates and points are read on the host
    assert_close(cuda_device.host(model.predict(cuda_device.put(pts))), host.predict(pts), np.float32, factor=10.0)
    assert model.predict(np.zeros((0, 3))).shape == (0, 2)


def test_large_device_bases_stay_with_their_model(cuda_device, monkeypatch):
    """Bases over the shared store's byte budget are kept by their model alone (and found there)."""
    coords, embs, S, _ = device_grid_problem((12, 10), (9, 8), dtype=np.float32, seed=7)
    plan = GridPlan(coords, embs, ridge=1e-2)
    model, host = plan.fit(cuda_device.put(S)), plan.fit(S)
    _fit._DEVICE_BASES.clear()
    monkeypatch.setattr(_fit, "_DEVICE_BASES_BYTES", 16)
    q = [np.linspace(0, 1, n) for n in (7, 5)]
    for _ in range(3):
        assert_close(cuda_device.host(model.predict_grid(q)), host.predict_grid(q), np.float32, factor=10.0)
    assert len(_fit._DEVICE_BASES) == 0 and len(model._device_bases) == 1


def test_penalty_and_mask_on_device_are_host_solves(cuda_device):
    coords, embs, S, _ = device_grid_problem((14, 12), (10, 9), (2,), seed=6)
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
    # fit_grid's default fill of a grid with holes: solved on the device (test_multigrid.py compares
    # it with the host's fill; float32 solves stopped at a tolerance, so to that)
    dev, host = fit_grid(Xm, mask=mask), fit_grid(Sm, mask=mask)
    assert dev.info["device"] == "cuda:0" and "device" not in host.info
    _check_model(cuda_device, dev, host, Xm, np.float64, factor=1e5)


def test_side_stream_and_float32_kinds(cuda_device):
    coords, embs, S, _ = device_grid_problem((16, 12), (10, 8), (), batch=(4,), dtype=np.float32, seed=8)
    plan = GridPlan(coords, embs, ridge="gcv")
    host = plan.fit(S, batch_axes=1)
    with cuda_device.stream():
        X = cuda_device.put(S)
        model = plan.fit(X, batch_axes=1)
        W = cuda_device.host(model.weights)
    assert W.dtype == np.float32
    for j in range(4):
        assert_close(W[..., j], plan.fit(S[..., j], ridge=float(model.ridge[j])).weights, np.float32)
    np.testing.assert_allclose(model.ridge, host.ridge, rtol=1e-2)
    # integers compute in float64
    Si = np.arange(16 * 12).reshape(16, 12) % 7
    _check_model(cuda_device, GridPlan(coords, embs, ridge=0.1).fit(cuda_device.put(Si)),
                 GridPlan(coords, embs, ridge=0.1).fit(Si), cuda_device.put(Si), np.float64)


def test_save_device_model(cuda_device, tmp_path):
    coords, embs, S, _ = device_grid_problem((10, 8), (7, 6), (2,), seed=9)
    model = GridPlan(coords, embs, ridge="gcv").fit(cuda_device.put(S))
    model.save(tmp_path / "m.npz")
    back = kronpe.load(tmp_path / "m.npz")
    np.testing.assert_array_equal(back.weights, cuda_device.host(model.weights))
    assert back.ridge == pytest.approx(model.ridge, rel=1e-15)


@pytest.mark.parametrize("bad", ["nan", "inf"])
def test_bad_device_values(cuda_device, bad):
    coords, embs, S, _ = device_grid_problem((10, 8), (7, 6), seed=10)
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
    coords, embs, S, _ = device_grid_problem((10, 8), (7, 6), (2,), seed=11)
    plan = GridPlan(coords, embs, ridge=0.1)
    with pytest.raises(ValueError, match=r"signal must have shape \(10, 8\)"):
        plan.fit(cuda_device.put(S[:9]))
    with pytest.raises(ValueError, match="signal must have at least 2 axes"):
        plan.fit(cuda_device.put(S[:, 0, 0]))
    with pytest.raises(ValueError, match="batch_axes=2"):
        plan.fit(cuda_device.put(S), batch_axes=2)
    with pytest.raises(ValueError, match="signal has an empty grid axis"):
        fit_grid(cuda_device.put(np.zeros((0, 5))))
