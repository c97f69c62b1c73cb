"""Grid fits (kronpe.solvers.fit) against dense Kronecker solutions (kronpe.reference)."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import kronpe
from kronpe import BSpline, Gaussian, GridModel, GridPlan, Triangle, fit_grid, reference
from kronpe.solvers.fit import default_embedders
from kronpe.solvers.gcv import GCVCurve as _GCVCurve

FAMILIES = [
    lambda K, m: Gaussian(K, 0.8 / K, margin=m),
    lambda K, m: Triangle(K, 1.5 / K, margin=m),
    lambda K, m: BSpline(K, 3, margin=m),
]


def _problem(rng, shape, Ks, channels=(), dtype=np.float64, margin=1, family=None):
    coords = [np.sort(rng.uniform(0, 1, n)) for n in shape]
    embs = [FAMILIES[(i if family is None else family) % 3](K, margin) for i, K in enumerate(Ks)]
    S = rng.standard_normal(tuple(shape) + tuple(channels)).astype(dtype)
    phis = [e(c) for e, c in zip(embs, coords)]
    return coords, embs, S, phis


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
    coords, embs, S, phis = _problem(rng, shape, Ks, channels, dtype)
    ridge = _scale(phis) * data.draw(st.sampled_from([1e-3, 1e-1, 1.0]))
    model = fit_grid(S, embs, coords=coords, ridge=ridge)
    expected = reference.grid_ridge_fit(S, phis, ridge)
    assert model.weights.dtype == dtype
    assert model.weights.shape == tuple(e.K for e in embs) + channels
    assert model.ridge == ridge
    tol = 2e-4 if dtype == np.float32 else 1e-9
    scale = max(1.0, np.abs(expected).max())
    np.testing.assert_allclose(model.weights, expected, rtol=tol, atol=tol * scale)


@pytest.mark.parametrize("shape, Ks", [((7,), (5,)), ((6, 5), (4, 8)), ((4, 5, 3), (6, 3, 4))])
def test_ridge_zero_is_pinv(rng, shape, Ks):
    coords, embs, S, phis = _problem(rng, shape, Ks, (2,))
    model = fit_grid(S, embs, coords=coords, ridge=0.0)
    expected = reference.grid_ridge_fit(S, phis, 0.0)
    np.testing.assert_allclose(model.weights, expected, rtol=1e-7, atol=1e-9 * np.abs(expected).max())


def test_ridge_zero_float32(rng):
    coords, embs, S, phis = _problem(rng, (12, 10), (8, 9), (), np.float32, margin=0, family=1)
    model = fit_grid(S, embs, coords=coords, ridge=0.0)
    assert model.weights.dtype == np.float32
    expected = reference.grid_ridge_fit(S, phis, 0.0)
    np.testing.assert_allclose(model.weights, expected, rtol=1e-3, atol=1e-3 * np.abs(expected).max())


@pytest.mark.parametrize("shape, Ks, channels", [((9,), (6,), ()), ((6, 5), (4, 7), (2,)), ((4, 3, 5), (3, 4, 2), ())])
def test_gcv_matches_hat_matrix(rng, shape, Ks, channels):
    coords, embs, S, phis = _problem(rng, shape, Ks, channels)
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
    coords, embs, S, phis = _problem(rng, (8, 7), (6, 5), (2, 3))  # channels 2, batch 3
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
    coords, embs, S, phis = _problem(rng, (9, 8, 5), (6, 7, 4), (2,), dtype)
    model = fit_grid(S, embs, coords=coords, ridge=1.0)
    q = [np.linspace(0, 1, n) for n in (5, 4, 3)]
    grid = model.predict_grid(q)
    assert grid.shape == (5, 4, 3, 2) and grid.dtype == dtype and grid.flags.c_contiguous
    expected = reference.multi_mode_product(model.weights, [e(c) for e, c in zip(embs, q)])
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(grid, expected, rtol=tol, atol=tol * np.abs(expected).max())
    pts = np.stack(np.meshgrid(*q, indexing="ij"), -1).reshape(-1, 3)
    for chunk in (7, 1 << 22):  # several blocks, then one
        values = model.predict(pts, chunk=chunk)
        assert values.shape == (pts.shape[0], 2) and values.dtype == dtype
        np.testing.assert_allclose(values.reshape(grid.shape), grid, rtol=tol, atol=tol * np.abs(grid).max())
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
    coords, embs, S, _ = _problem(rng, (6, 5), (4, 4), (), np.float32)
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
    coords, embs, S, _ = _problem(rng, (6, 5), (4, 4))
    S = S + 0.0  # values around 0: some above 1 for the NaN/Inf cases
    S[0, 0] = 2.0
    # a wrong type (a complex signal, a string for an embedder) is a TypeError, a wrong value a
    # ValueError (issue 10)
    with pytest.raises((TypeError, ValueError), match=match) as info:
        call(S, embs, coords)
    wrong_type = "real numbers" in str(info.value) or "must be a kronpe Embedder" in str(info.value)
    assert info.type is (TypeError if wrong_type else ValueError), info.value
