"""fit_points: exact ridge fits at scattered points against a dense least-squares oracle, over the
cases of tests/_samples.py (point_fit_cases)."""
import warnings

import numpy as np
import pytest

import kronpe
from kronpe import reference
from kronpe import BlendingMatrix
from kronpe.embedders import Gaussian, Triangle
from kronpe import ConvergenceWarning, PointModel, fit_points
from _samples import CPU, POINT_FIT_GRIDS, assert_close, ids, point_fit_cases, point_fit_embedders

CASES = list(point_fit_cases())


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_matches_dense_ridge_lstsq(rng, case, dtype):
    """Points and values in any layout, float32 or float64 values (weights and predictions of
    their dtype): the dense ridge least-squares fit."""
    pts, vals = case.problem(rng, dtype)
    embs = point_fit_embedders(case.D)
    m = fit_points(CPU.view(pts, case.layout), CPU.view(vals, case.layout), embs, grid=POINT_FIT_GRIDS[case.D],
                   ridge=1e-3, tol=1e-12)
    W = reference.fit_points(pts, vals.astype(np.float64), embs, list(m.grid_coords), 1e-3)
    assert isinstance(m, PointModel)
    assert m.weights.shape == tuple(e.K for e in embs) + case.channels and m.weights.dtype == dtype
    assert_close(m.weights, W, 1e-8 if dtype == np.float64 else 1e-5)
    assert m.info["converged"] and m.info["residual"] <= 1e-12 and m.info["iterations"] > 0
    assert m.ridge == 1e-3
    assert m.predict(pts).dtype == dtype


def test_unnormalised_and_nonuniform_grid(rng):
    pts = rng.random((70, 2))
    vals = rng.standard_normal(70)
    embs = [Triangle(5, width=0.3, margin=1), Gaussian(4, 0.2)]
    grid = [np.array([0.0, 0.2, 0.45, 0.5, 0.8, 1.0]), 5]
    m = fit_points(pts, vals, embs, grid=grid, ridge=1e-2, tol=1e-12, normalize=False)
    W = reference.fit_points(pts, vals, embs, list(m.grid_coords), 1e-2, normalize=False)
    np.testing.assert_allclose(m.weights, W, rtol=1e-8, atol=1e-9)


def test_points_on_nodes_boundary_and_repeated(rng):
    nodes = [np.linspace(0, 1, 5), np.linspace(0, 1, 4)]
    on_nodes = np.stack(np.meshgrid(*nodes, indexing="ij"), -1).reshape(-1, 2)  # includes (1, 1)
    pts = np.concatenate([on_nodes, on_nodes[:5], rng.random((10, 2)), [[1.0, 1.0]] * 3])
    vals = rng.standard_normal((pts.shape[0], 2))
    embs = point_fit_embedders(2)
    m = fit_points(pts, vals, embs, grid=nodes, ridge=1e-4, tol=1e-13)
    W = reference.fit_points(pts, vals, embs, nodes, 1e-4)
    np.testing.assert_allclose(m.weights, W, rtol=1e-7, atol=1e-8 * np.abs(W).max())


def test_ridge_zero_is_least_squares(rng):
    # many points, few well-conditioned features: the unregularised solution is unique
    pts = rng.random((200, 2))
    vals = rng.standard_normal(200)
    embs = [Gaussian(3, 0.15, margin=0)] * 2
    m = fit_points(pts, vals, embs, grid=(5, 5), ridge=0.0, tol=1e-13)
    W = reference.fit_points(pts, vals, embs, list(m.grid_coords), 0.0)
    np.testing.assert_allclose(m.weights, W, rtol=1e-7, atol=1e-9)
    assert m.ridge == 0.0


def test_predictions_go_through_the_fitted_blend(rng):
    pts = rng.random((100, 2))
    vals = np.sin(4 * pts[:, 0]) + pts[:, 1] ** 2
    m = fit_points(pts, vals, point_fit_embedders(2, K=6), grid=(8, 7), ridge=1e-4, tol=1e-10)
    B = BlendingMatrix(pts, list(m.grid_coords), list(m.embedders))
    np.testing.assert_allclose(m.predict(pts), B @ m.grid_values.reshape(-1), rtol=1e-12, atol=1e-12)
    # the grid values are W x_i Psi(g_i)
    Phi = [e(g) for e, g in zip(m.embedders, m.grid_coords)]
    np.testing.assert_allclose(m.grid_values, Phi[0] @ m.weights @ Phi[1].T, rtol=1e-10, atol=1e-12)
    # predict_grid on the nodes is the grid values; elsewhere it equals predict on the mesh
    np.testing.assert_allclose(m.predict_grid(list(m.grid_coords)), m.grid_values, rtol=1e-12, atol=1e-13)
    cx, cy = np.array([0.0, 0.33, 0.71, 1.0]), np.array([0.1, 0.5, 0.95])
    mesh = np.stack(np.meshgrid(cx, cy, indexing="ij"), -1).reshape(-1, 2)
    np.testing.assert_allclose(m.predict_grid([cx, cy]).reshape(-1), m.predict(mesh), rtol=1e-12, atol=1e-13)


def test_fit_generalises_on_a_smooth_signal(rng):
    f = lambda p: np.sin(3 * p[:, 0]) * np.cos(2 * p[:, 1]) + 0.5 * p[:, 0]  # noqa: E731
    pts = rng.random((1500, 2))
    test = rng.random((500, 2))
    m = fit_points(pts, f(pts), None)  # the defaults: thin-plate values on a grid by density, lambda held out
    err = np.sqrt(np.mean((m.predict(test) - f(test)) ** 2))
    assert err < 0.01, err
    assert m.info["grid"] == "NODES_PER_SPACING nodes per mean sample spacing" and m.weights.shape == (118, 118)
    assert m.ridge > 0 and "holdout_errors" in m.info
    auto = fit_points(pts, f(pts), embedders=None, ridge=1e-4)  # a ridge given: the automatic embedders
    assert all(e.margin > 0 for e in auto.embedders)
    # points off any lattice: the chosen lambda is the largest candidate whose held-out error is
    # within BLENDED_FLAT of the smallest, never the interpolation limit
    from kronpe.solvers import smooth

    lams, errs = m.info["ridge_candidates"], m.info["holdout_errors"]
    floor = min(errs) * (1.0 + smooth.BLENDED_FLAT)
    assert m.ridge == max(lam for lam, e in zip(lams, errs) if e <= floor)
    assert not m.info["interpolating"]


@pytest.mark.parametrize("D", [1, 3])
def test_automatic_embedders_any_dimension(rng, D):
    pts = rng.random((120 if D == 1 else 300, D))
    vals = np.cos(2 * pts.sum(1))
    m = fit_points(pts, vals, None, ridge=1e-3)
    assert len(m.embedders) == D and m.weights.ndim == D
    assert np.sqrt(np.mean((m.predict(pts) - vals) ** 2)) < 0.05


def test_not_converged_warns(rng):
    pts = rng.random((100, 2))
    vals = rng.standard_normal(100)
    with pytest.warns(ConvergenceWarning, match="maxiter=1"):
        m = fit_points(pts, vals, point_fit_embedders(2, K=6), grid=(8, 8), ridge=1e-8, tol=1e-12, maxiter=1)
    assert not m.info["converged"] and m.info["iterations"] == 1
    assert kronpe.ConvergenceWarning is ConvergenceWarning


def test_tol_is_honoured(rng):
    pts = rng.random((300, 2))
    vals = rng.standard_normal(300)
    loose = fit_points(pts, vals, point_fit_embedders(2, K=8), grid=(10, 10), ridge=1e-6, tol=1e-2)
    tight = fit_points(pts, vals, point_fit_embedders(2, K=8), grid=(10, 10), ridge=1e-6, tol=1e-10)
    assert loose.info["residual"] <= 1e-2 * 1.0001 and tight.info["residual"] <= 1e-10 * 1.0001
    assert loose.info["iterations"] < tight.info["iterations"]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(points=np.array([[0.5, np.nan]] * 3)), "points must be finite"),
        (dict(points=np.array([[0.5, 1.2]] * 3)), r"points must lie in \[0, 1\]"),
        (dict(points=np.zeros(3)), r"points must have shape \(P, D\)"),
        (dict(points=np.zeros((0, 2)), values=np.zeros(0)), "at least one point"),
        (dict(values=np.zeros(4)), r"values must have one row per point \(3\)"),
        (dict(values=np.array([0.0, np.inf, 1.0])), "values must be finite"),
        (dict(ridge=-1.0), "ridge must be a non-negative"),
        (dict(ridge="gcv"), "ridge must be a non-negative number or"),
        (dict(tol=0.0), "tol must be a positive"),
        (dict(maxiter=0), "maxiter must be a positive integer"),
        (dict(embedders=[Gaussian(4, 0.1)] * 3), "embedders must have one entry per axis"),
        (dict(grid=(4,)), "grid must have one entry per axis"),
        (dict(outside="nope"), "outside must be"),
    ],
)
def test_bad_arguments(kwargs, match):
    args = dict(points=np.array([[0.1, 0.2], [0.5, 0.5], [0.9, 0.3]]), values=np.zeros(3),
                embedders=[Gaussian(4, 0.1)] * 2, grid=(4, 4), ridge=1e-3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        fit_points(**args)


def test_outside_clamp(rng):
    pts = np.array([[0.1, 0.2], [0.5, 0.5], [0.9, 0.3], [0.95, 0.7]])
    grid = [np.linspace(0.2, 0.8, 4), np.linspace(0, 1, 4)]
    with pytest.raises(ValueError, match="grid range"):
        fit_points(pts, np.ones(4), [Gaussian(4, 0.1)] * 2, grid=grid, ridge=1e-3)
    m = fit_points(pts, np.ones(4), [Gaussian(4, 0.1)] * 2, grid=grid, ridge=1e-3, outside="clamp")
    clamped = np.clip(pts, [0.2, 0.0], [0.8, 1.0])
    m2 = fit_points(clamped, np.ones(4), [Gaussian(4, 0.1)] * 2, grid=grid, ridge=1e-3)
    np.testing.assert_allclose(m.weights, m2.weights, rtol=1e-10, atol=1e-12)


def test_exported_at_top_level():
    assert kronpe.fit_points is fit_points and kronpe.PointModel is PointModel


def test_mixed_precision_products(rng):
    # tol >= 1e-4: float32 products, float64 CG vectors; the reported residual is float64's
    pts = rng.random((400, 2))
    vals = np.sin(5 * pts[:, 0]) * pts[:, 1]
    embs = point_fit_embedders(2, K=8)
    fast = fit_points(pts, vals, embs, grid=(10, 10), ridge=1e-3, tol=1e-4)
    exact = fit_points(pts, vals, embs, grid=(10, 10), ridge=1e-3, tol=1e-12)
    assert fast.info["products"] == "float32" and exact.info["products"] == "float64"
    assert fast.info["residual"] <= 1e-4
    rel = np.linalg.norm(fast.weights - exact.weights) / np.linalg.norm(exact.weights)
    assert rel < 1e-2


def test_default_fit_refuses_a_grid_over_the_memory_budget(monkeypatch):
    """The default fit's grid follows the sample density: too many points for the memory budget
    give a MemoryError naming the argument, before anything large is allocated."""
    monkeypatch.setenv("KRONPE_MEMORY_BUDGET", str(100 * 2**20))
    pts = np.random.default_rng(0).random((2_000_000, 2)).astype(np.float32)
    with pytest.raises(MemoryError, match="points: this needs"):
        fit_points(pts, pts[:, 0])
