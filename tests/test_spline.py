"""The cubic B-spline fit of scattered samples (kronpe.solvers.spline, kronpe.fit_spline, kronpe.grid):
its kernels against kronpe.reference, its fits against dense solves, coordinates as users have
them, and bad input."""
import math

import numpy as np
import pytest

import kronpe
from kronpe import _core, reference as R
from kronpe.solvers import spline as S
from _samples import CPU, LAYOUTS, SPLINE_GRIDS, TORCH_CUDA_ONLY, ids, spline_cases, spline_points


def franke(x, y):
    return (0.75 * np.exp(-((9 * x - 2) ** 2 + (9 * y - 2) ** 2) / 4) + 0.75 * np.exp(-(9 * x + 1) ** 2 / 49 - (9 * y + 1) / 10)
            + 0.5 * np.exp(-((9 * x - 7) ** 2 + (9 * y - 3) ** 2) / 4) - 0.2 * np.exp(-(9 * x - 4) ** 2 - (9 * y - 7) ** 2))


NORMAL_CASES = list(spline_cases())
WEIGHTED_CASES = list(spline_cases([(50, 2)]))
VALUE_CASES = list(spline_cases([(60, 1), (60, 2)]))


@pytest.mark.parametrize("case", NORMAL_CASES, ids=ids(NORMAL_CASES))
def test_normal_equations_match_the_dense_reference(rng, case):
    g = S.Grid(case.nint, case.lo, case.h)
    pts = case.points(rng)
    vals = rng.standard_normal((case.P, case.C))
    st, rhs = S.normal_equations(g, pts, vals)
    st_ref, rhs_ref = R.spline_normal(pts, vals, case.nint, case.lo, case.h)
    np.testing.assert_allclose(st, st_ref, rtol=0, atol=1e-13)
    np.testing.assert_allclose(rhs, rhs_ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("case", WEIGHTED_CASES, ids=ids(WEIGHTED_CASES))
def test_weighted_normal_equations(rng, case):
    g = S.Grid(case.nint, case.lo, case.h)
    pts = case.points(rng)
    vals, w = rng.standard_normal((case.P, case.C)), rng.random(case.P)
    st = np.zeros((7 ** len(case.nint), math.prod(g.shape)))
    rhs = np.zeros((st.shape[1], case.C))
    _core.spline_normal(g.args(), pts, vals, w, st, rhs)
    st_ref, rhs_ref = R.spline_normal(pts, vals, case.nint, case.lo, case.h, weights=w)
    np.testing.assert_allclose(st, st_ref, atol=1e-13)
    np.testing.assert_allclose(rhs, rhs_ref, atol=1e-12)


@pytest.mark.parametrize("case", VALUE_CASES, ids=ids(VALUE_CASES))
def test_values_and_stencil_products_match_the_reference(rng, case, dtype):
    """The spline's values at points, and stencil products with a stencil of either dtype (the
    smoother's float32 copy of an operator: products in float64 of the float32 entries), against
    the reference; an empty grid is nothing to do."""
    nint, lo, h = case.nint, case.lo, case.h
    g = S.Grid(nint, lo, h)
    pts = case.points(rng)
    coef = rng.standard_normal((math.prod(g.shape), case.C))
    np.testing.assert_allclose(S.values_at(g, coef, pts), R.spline_values(pts, coef, nint, lo, h), atol=1e-13)
    st = rng.standard_normal((7 ** len(nint), coef.shape[0]))
    st = R.stencil_from_dense(_dense_of(st, g.shape), g.shape).astype(dtype)  # entries beyond the grid zeroed
    y = np.empty_like(coef)
    _core.stencil_apply(list(g.shape), st, coef, y)
    np.testing.assert_allclose(y, R.stencil_apply(st.astype(np.float64), coef, g.shape), atol=1e-12)
    empty = np.empty((0, case.C))
    _core.stencil_apply([0] + [3] * (len(nint) - 1), np.zeros((7 ** len(nint), 0), dtype), empty,
                        np.empty_like(empty))


def _dense_of(st, shape):
    """The dense operator whose stencil rows are st (entries that point outside the grid dropped)."""
    D = len(shape)
    N = math.prod(shape)
    A = np.zeros((N, N))
    idx = np.array(np.unravel_index(np.arange(N), shape)).T
    for o in range(7 ** D):
        off = np.array(np.unravel_index(o, (7,) * D)) - 3
        nb = idx + off
        ok = np.all((nb >= 0) & (nb < np.array(shape)), axis=1)
        A[np.arange(N)[ok], np.ravel_multi_index(tuple(nb[ok].T), shape)] = st[o, ok]
    return A


@pytest.mark.parametrize("nint,lo,h", SPLINE_GRIDS)
def test_penalty_is_the_thin_plate_energy(nint, lo, h):
    g = S.Grid(nint, lo, h)
    ref = R.stencil_from_dense(R.thin_plate_spline_energy(list(nint), h), g.shape)
    np.testing.assert_allclose(S.penalty_stencil(g), ref, rtol=0, atol=2e-3 * np.abs(ref).max())


def test_penalty_vanishes_on_linear_functions():
    g = S.Grid((4, 5), (0.0, 0.0), 0.25)
    pen = S.penalty_stencil(g)
    xs = [(np.arange(n) - 1) * g.h for n in g.shape]  # a linear function's coefficients are its node values
    X, Y = np.meshgrid(*xs, indexing="ij")
    for f in (np.ones_like(X), X, Y, 2 * X - 3 * Y + 1):
        out = np.empty((pen.shape[1], 1))
        _core.stencil_apply(list(g.shape), pen, np.ascontiguousarray(f.reshape(-1, 1)), out)
        assert np.abs(out).max() < 1e-10
    out = np.empty((pen.shape[1], 1))
    _core.stencil_apply(list(g.shape), pen, np.ascontiguousarray((X * Y).reshape(-1, 1)), out)
    assert np.abs(out).max() > 1e-3  # a bending function is penalised


@pytest.mark.parametrize("axis", [0, 1])
def test_subdivision_keeps_the_spline_and_restriction_is_its_transpose(rng, axis):
    coarse = S.Grid((3, 4), (0.5, -1.0), 0.4)
    fine = coarse.finer()
    c = rng.standard_normal(coarse.shape)
    f = S.subdivide(c, axis)
    f = S.subdivide(f, 1 - axis)
    pts = spline_points(rng, coarse.nint, coarse.lo, coarse.h, 80)
    np.testing.assert_allclose(S.values_at(fine, f.reshape(-1, 1), pts),
                               S.values_at(coarse, c.reshape(-1, 1), pts), atol=1e-12)
    a = S.subdivide(c, axis)
    b = rng.standard_normal(a.shape)
    assert abs(float(np.sum(a * b)) - float(np.sum(c * S.restrict(b, axis)))) < 1e-10


@pytest.mark.parametrize("nint,lo,h", SPLINE_GRIDS)
def test_factorised_solve_matches_the_dense_system(rng, nint, lo, h):
    """The banded factorisation of a level's operator (grids as narrow as 4 coefficients, where
    flat offsets of the stencil wrap) solves the dense system."""
    g = S.Grid(nint, lo, h)
    pts = spline_points(rng, nint, lo, h, 40)
    st, rhs = S.normal_equations(g, pts, rng.standard_normal((40, 2)))
    lev = S._Level(g, st, S.penalty_stencil(g), 1e-2)
    x = lev.solve_exact(rhs)
    np.testing.assert_allclose(_dense_of(lev.A, g.shape) @ x, rhs, rtol=0, atol=1e-8 * np.abs(rhs).max())


@pytest.mark.parametrize("nint", [(30,), (14, 12), (5, 4, 6)])
def test_smoother_lmax_bounds_the_spectrum(rng, nint):
    """The smoother's lmax (Lanczos, with its margin) lies above the largest eigenvalue of D^-1 A
    and not far above it, from a random start and from the Ritz vector of another lambda."""
    D = len(nint)
    g = S.Grid(nint, (0.0,) * D, 1.0 / max(nint))
    pts = spline_points(rng, nint, g.lo, g.h, 2 * math.prod(g.shape))
    st, _ = S.normal_equations(g, pts, np.zeros((pts.shape[0], 1)))
    pen = S.penalty_stencil(g)
    start = None
    for lam in (1e-6, 1e-3, 1.0):
        lev = S._Level(g, st, pen, lam * (g.h ** 2), start)
        A = _dense_of(lev.A, g.shape)
        root = np.sqrt(lev.dinv)
        top = np.linalg.eigvalsh(root[:, None] * A * root[None, :])[-1]
        assert top <= lev.lmax() <= 1.25 * top
        start = lev.start


def test_a_slow_lower_lambda_counts_as_no_gain(monkeypatch):
    """On an iterative level, a solve at a lower lambda that CG does not finish in LOWER_MAXITER
    iterations gives no fit (choose counts it as no gain); a higher one is solved as usual."""
    rng = np.random.default_rng(22)
    pts = rng.random((6000, 2))
    vals = (np.sin(60 * pts[:, 0]) * np.cos(50 * pts[:, 1]))[:, None]
    lo, ext, grids, scale = S.prepare((pts.min(axis=0), pts.max(axis=0)), 6000, 2, None, 4)
    levels = S._HostLevels(grids, np.ascontiguousarray((pts - lo) / ext), vals, S.holdout_of(6000))
    assert not levels.direct(4)
    y = levels.solve(4, 1e-3 * scale, None)
    monkeypatch.setattr(S, "LOWER_MAXITER", 1)
    assert levels.solve(4, 1e-6 * scale, y) is None
    assert levels.solve(4, 1e-2 * scale, y) is not None



def test_a_lower_lambda_behind_its_pace_stops_at_the_probe():
    """A solve given ``probe`` iterations that lags the geometric pace reaching its tolerance in
    maxiter stops there, reported as maxiter iterations; one on pace (or without a probe) goes on to
    the tolerance, restarted from the probe's fit."""
    rng = np.random.default_rng(22)
    pts = rng.random((6000, 2))
    vals = (np.sin(60 * pts[:, 0]) * np.cos(50 * pts[:, 1]))[:, None]
    lo, ext, grids, scale = S.prepare((pts.min(axis=0), pts.max(axis=0)), 6000, 2, None, 4)
    levels = S._HostLevels(grids, np.ascontiguousarray((pts - lo) / ext), vals, S.holdout_of(6000))
    levels._assemble(4)
    ops = levels._levels(4, 1e-3 * scale)
    b = levels.rhs[4]
    x, it, rel = S._pcg(ops, b, None, 1e-30, 40, probe=2)  # no pace reaches 1e-30 in 40 iterations
    assert it == 40
    x, it, rel = S._pcg(ops, b, None, 1e-6, 60, probe=3)  # on pace: solved
    assert 3 < it < 60 and rel <= 1e-6
    x2, it2, rel2 = S._pcg(ops, b, None, 1e-6, 60)
    assert rel2 <= 1e-6 and np.linalg.norm(x - x2) <= 1e-4 * np.linalg.norm(x2)


def test_a_fit_still_resolving_at_its_finest_level_tries_no_larger_lambda():
    """Where the finest level beats the one below by more than RESOLVING (a fractal terrain), the
    noise test is skipped: no larger lambda is tried; noisy samples of it still get the test."""
    from kronpe.bench import field as F

    s = F.inputs("terrain", 16384)
    m = S.fit(s["pts"], s["vals"][:, None])
    err = m.info["holdout_errors"]
    assert m.info["limited_by"] == "representation" and len(err) == len(m.info["levels"])
    assert err[-1] < S.RESOLVING * err[-2]
    assert all(lam <= S.LAMBDA_START * 1.001 for lam, _, _ in m.info["lambda_holdout_errors"])
    noisy = s["vals"] + 0.05 * np.ptp(s["vals"]) * np.random.default_rng(1).standard_normal(s["vals"].shape)
    m = S.fit(s["pts"], noisy[:, None])  # the best level a coarser one: larger lambdas tried there
    assert m.info["grid"] != m.info["levels"][-1]
    assert any(lam > S.LAMBDA_START * 1.001 for lam, _, _ in m.info["lambda_holdout_errors"])


def test_rough_explorations_are_refined_before_the_noise_test(monkeypatch):
    """The fits the noise test starts from are solved to cg_tol first (explorations stop early):
    the choice on noisy samples is the one of explorations held to cg_tol throughout."""
    from kronpe.bench import field as F
    from scipy.ndimage import map_coordinates

    rng = np.random.default_rng(5)
    pts = rng.random((16384, 2))
    v = map_coordinates(F.terrain(), (pts * 255).T, order=3, mode="mirror")
    v = (v + 0.02 * np.ptp(v) * rng.standard_normal(v.shape))[:, None]
    rough = S.fit(pts, v)
    orig = S._HostLevels.__init__

    def tight(self, *a, **k):
        orig(self, *a, **k)
        self.loose = False

    monkeypatch.setattr(S._HostLevels, "__init__", tight)
    held = S.fit(pts, v)
    assert rough.info["grid"] == held.info["grid"] and rough.ridge == pytest.approx(held.ridge)
    assert rough.info["limited_by"] == held.info["limited_by"] == "noise"

def test_the_final_fit_solves_the_system_of_every_point():
    """The final fit of an iterative level holds the held-out points too, and its reported
    residual is that of the system of every point."""
    rng = np.random.default_rng(21)
    pts = rng.random((6000, 2))
    vals = (np.sin(60 * pts[:, 0]) * np.cos(50 * pts[:, 1]))[:, None]
    m = S.fit(pts, vals, ridge=1e-5, max_level=4)
    g = m.grid
    assert m.info["grid"] == [64, 64] and m.info["iterations"] > 0 and m.info["converged"]
    unit = np.ascontiguousarray((pts - np.asarray(m.lo)) / np.asarray(m.scale))
    st, rhs = S.normal_equations(g, unit, vals)
    A = st + m.ridge * S.penalty_stencil(g)
    Ac = np.empty_like(rhs)
    _core.stencil_apply(list(g.shape), A, np.ascontiguousarray(m.coef.reshape(-1, 1)), Ac)
    assert np.linalg.norm(rhs - Ac) <= 1.01 * m.info["residual"] * np.linalg.norm(rhs)


@pytest.mark.parametrize("D", [1, 2])
def test_fit_matches_a_dense_penalised_solve(rng, D):
    """With a fixed lambda and one level, the fit is the dense solve of (B^T B + lambda R) c = B^T y."""
    P = 30 if D == 1 else 60
    pts = rng.random((P, D))
    vals = rng.standard_normal((P, 1))
    m = S.fit(pts, vals, ridge=1e-3, max_level=1)
    g = m.grid  # in the unit box of the points
    unit = (pts - np.asarray(m.lo)) / np.asarray(m.scale)
    B = R.spline_design(unit, list(g.nint), list(g.lo), g.h)
    Rm = R.thin_plate_spline_energy(list(g.nint), g.h, samples=256)
    want = np.linalg.solve(B.T @ B + m.ridge * Rm, B.T @ vals)
    got = m.coef.reshape(-1, 1)
    assert np.linalg.norm(got - want) <= 1e-3 * np.linalg.norm(want)


def test_franke_reaches_interpolation_accuracy():
    rng = np.random.default_rng(3)
    pts = rng.random((2000, 2))
    y = franke(pts[:, 0], pts[:, 1])
    m = kronpe.fit_spline(pts, y)
    test = 0.1 + 0.8 * rng.random((500, 2))
    err = m.predict(test) - franke(test[:, 0], test[:, 1])
    psnr = 20 * np.log10(np.ptp(y) / np.sqrt(np.mean(err**2)))
    assert psnr > 80, psnr
    assert m.info["limited_by"] in ("representation", "tolerance")


def test_noisy_samples_are_smoothed():
    rng = np.random.default_rng(4)
    pts = rng.random((4000, 2))
    clean = franke(pts[:, 0], pts[:, 1])
    m = kronpe.fit_spline(pts, clean + 0.05 * rng.standard_normal(clean.shape))
    test = 0.1 + 0.8 * rng.random((500, 2))
    rmse = np.sqrt(np.mean((m.predict(test) - franke(test[:, 0], test[:, 1])) ** 2))
    assert rmse < 0.02  # well below the noise
    assert m.info["limited_by"] in ("noise", "representation")


@pytest.mark.parametrize("scale,shift", [((1.0,), (0.0,)), ((1e3, 1e-2), (5e5, -3.0)), ((2.0, 1.0, 0.5), (0.0, 1.0, 2.0))])
def test_coordinates_in_any_units(scale, shift):
    """A field sampled in other units and boxes fits the same (relative to its scale)."""
    rng = np.random.default_rng(5)
    D = len(scale)
    u = rng.random((3000 if D < 3 else 6000, D))
    f = np.cos(2 * u).prod(axis=1) + u.sum(axis=1)
    x = u * np.asarray(scale) + np.asarray(shift)
    m = kronpe.fit_spline(x, f)
    t = 0.2 + 0.6 * rng.random((200, D))
    err = m.predict(t * np.asarray(scale) + np.asarray(shift)) - (np.cos(2 * t).prod(axis=1) + t.sum(axis=1))
    assert np.sqrt(np.mean(err**2)) < 1e-3 * np.ptp(f)


def test_clustered_tracks_and_outside_the_hull_stay_bounded():
    rng = np.random.default_rng(6)
    t = rng.random(3000)
    k = rng.integers(0, 6, 3000)
    start, direction = rng.random((6, 2)), rng.standard_normal((6, 2))
    pts = np.clip(start[k] + (t[:, None] - 0.5) * direction[k], 0, 1)
    y = franke(pts[:, 0], pts[:, 1])
    g, coords = kronpe.grid(pts, y, shape=(64, 64))
    assert np.all(np.isfinite(g))
    assert np.abs(g).max() < 10 * np.abs(y).max()


def test_grid_shape_spacing_region_and_distance_mask():
    rng = np.random.default_rng(7)
    pts = rng.random((800, 2)) * [10.0, 4.0]
    y = pts[:, 0] - 2 * pts[:, 1]
    g, (x0, x1) = kronpe.grid(pts, y, spacing=0.5)
    assert g.shape == (x0.size, x1.size)
    np.testing.assert_allclose(x0[1] - x0[0], 0.5)
    g, (x0, x1) = kronpe.grid(pts, y, shape=(5, 3), region=(-1, 11, 0, 4))  # beyond the points: linear
    np.testing.assert_allclose(g, x0[:, None] - 2 * x1[None, :], atol=1e-4)
    g, _ = kronpe.grid(pts[pts[:, 0] < 5], y[pts[:, 0] < 5], shape=(20, 8), region=(0, 10, 0, 4), maxdist=0.5)
    assert np.isnan(g[-5:]).all() and np.isfinite(g[:5]).all()
    g, _ = kronpe.grid(pts, np.stack([y, 2 * y], -1), shape=(6, 6))
    np.testing.assert_allclose(g[..., 1], 2 * g[..., 0], rtol=1e-9, atol=1e-9)


def test_grid_as_xarray():
    xr = pytest.importorskip("xarray")
    rng = np.random.default_rng(8)
    pts = rng.random((300, 2))
    da = kronpe.grid(pts, pts[:, 0], shape=(4, 5), xarray=True, dims=("lon", "lat"))
    assert isinstance(da, xr.DataArray) and da.dims == ("lon", "lat") and da.shape == (4, 5)
    np.testing.assert_allclose(da["lon"].values, np.linspace(pts[:, 0].min(), pts[:, 0].max(), 4))


def test_duplicates_collinear_and_tiny_sets():
    rng = np.random.default_rng(9)
    pts = rng.random((200, 2))
    pts = np.concatenate([pts, pts[:20]])
    y = np.concatenate([pts[:200, 0], pts[:20, 0] + 0.1])  # duplicates with other values: averaged
    m = kronpe.fit_spline(pts, y)
    assert np.all(np.isfinite(m.coef))
    line = np.stack([np.linspace(0, 1, 100), np.linspace(0, 1, 100) * 0.5], -1)  # all on a line
    m = kronpe.fit_spline(line, line[:, 0])
    assert np.all(np.isfinite(m.coef))
    np.testing.assert_allclose(m.predict(line[10:90]), line[10:90, 0], atol=1e-4)
    m = kronpe.fit_spline([[0.0, 0.0], [1.0, 1.0]], [1.0, 2.0])
    assert np.all(np.isfinite(m.predict([[0.5, 0.5]])))


@pytest.mark.parametrize("points,values,match", [
    (np.zeros((0, 2)), np.zeros(0), "at least one point"),
    (np.zeros((5, 4)), np.zeros(5), "D = 1, 2 or 3"),
    (np.array([[0.0, np.nan], [1.0, 1.0]]), np.zeros(2), "points"),
    (np.array([[0.0, np.inf], [1.0, 1.0]]), np.zeros(2), "points"),
    (np.random.default_rng(0).random((5, 2)), np.zeros(4), "one row per point"),
    (np.random.default_rng(0).random((5, 2)), np.array([0, 1, np.nan, 0, 0.0]), "values"),
    (np.random.default_rng(0).random((300, 2)), np.zeros((300, 0)), "at least one value"),
    (np.ones((5, 2)), np.zeros(5), "same position"),
])
def test_bad_input_is_named(points, values, match):
    with pytest.raises(ValueError, match=match):
        kronpe.fit_spline(points, values)


def test_bad_grid_arguments_and_predictions_are_named():
    rng = np.random.default_rng(10)
    pts = rng.random((100, 2))
    with pytest.raises(ValueError, match="exactly one of shape"):
        kronpe.grid(pts, pts[:, 0])
    with pytest.raises(ValueError, match="exactly one of shape"):
        kronpe.grid(pts, pts[:, 0], shape=4, spacing=0.1)
    with pytest.raises(ValueError, match="spacing"):
        kronpe.grid(pts, pts[:, 0], spacing=-1.0)
    with pytest.raises(ValueError, match="region"):
        kronpe.grid(pts, pts[:, 0], shape=4, region=(0, 1))
    with pytest.raises(ValueError, match="shape"):
        kronpe.grid(pts, pts[:, 0], shape=(4, 0))
    with pytest.raises(MemoryError):
        kronpe.grid(pts, pts[:, 0], spacing=1e-7)
    m = kronpe.fit_spline(pts, pts[:, 0])
    with pytest.raises(ValueError, match=r"points must have shape \(P, 2\)"):
        m.predict(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="fitted box"):
        m.predict([[5.0, 0.5]])
    with pytest.raises(ValueError, match="coords"):
        m.predict_grid([np.linspace(0.2, 0.8, 3)])


def test_kernel_bindings_refuse_bad_arrays():
    g = S.Grid((2, 2), (0.0, 0.0), 1.0)
    N = math.prod(g.shape)
    pts = np.zeros((3, 2))
    vals = np.zeros((3, 1))
    with pytest.raises(ValueError, match="stencil"):
        _core.spline_normal(g.args(), pts, vals, None, np.zeros((49, N - 1)), np.zeros((N, 1)))
    with pytest.raises(ValueError, match="C-contiguous"):
        _core.spline_normal(g.args(), np.zeros((2, 3))[:, :2], np.zeros((2, 1)), None, np.zeros((49, N)),
                            np.zeros((N, 1)))
    with pytest.raises(ValueError, match="float64"):
        _core.spline_values(g.args(), pts.astype(np.float32), np.zeros((N, 1)), np.zeros((3, 1)))
    with pytest.raises(ValueError, match="grid"):
        _core.spline_values(([2, 0], [0.0, 0.0], [1.0, 1.0]), pts, np.zeros((N, 1)), np.zeros((3, 1)))
    x = np.zeros((N, 1))
    with pytest.raises(ValueError, match="y must not be x"):
        _core.stencil_apply(list(g.shape), np.zeros((49, N)), x, x)
    frozen = np.zeros((N, 1))
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="y is read-only"):
        _core.stencil_apply(list(g.shape), np.zeros((49, N)), x, frozen)
    _core.stencil_apply(list(g.shape), np.zeros((49, N)), frozen, x)  # (read-only and read: taken)
    coarse, fine = np.zeros((1, 4, 1)), np.zeros((1, 5, 1))
    coarse.flags.writeable = False
    _core.spline_subdivide(coarse, fine)
    with pytest.raises(ValueError, match="coarse is read-only"):
        _core.spline_restrict(fine, coarse)


def test_the_smoother_refuses_a_zero_operator():
    """A zero operator (a level without points at lambda 0) has no spectrum to smooth: a solve
    never reaches it (its right-hand side is zero), and the smoother says so by name."""
    g = S.Grid((3, 3), (0.0, 0.0), 1.0)
    N = math.prod(g.shape)
    lev = S._Level(g, np.zeros((49, N)), None, 0.0)
    assert lev.lmax() == 0.0
    with pytest.raises(AssertionError, match="largest eigenvalue > 0"):
        lev.smooth(np.ones((N, 1)), None)
    g = S.Grid((57, 57), (0.0, 0.0), 1.0)  # a level solved by CG, not factorised
    N = math.prod(g.shape)
    lev = S._Level(g, np.zeros((49, N)), None, 0.0)
    assert not S._factorised(g.shape)
    x, it, rel = S._pcg([lev], np.zeros((N, 1)), None, 1e-8, 10)
    assert not x.any() and it == 0 and rel == 0.0


def test_results_do_not_depend_on_the_thread_count():
    rng = np.random.default_rng(11)
    pts = rng.random((20000, 2))
    vals = rng.standard_normal((20000, 1))
    g = S.Grid((64, 64), (0.0, 0.0), 1 / 64)
    before = kronpe.get_num_threads()
    try:
        kronpe.set_num_threads(1)
        one = S.normal_equations(g, pts, vals)
        kronpe.set_num_threads(2)
        two = S.normal_equations(g, pts, vals)
    finally:
        kronpe.set_num_threads(before)
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_array_equal(one[1], two[1])


# ---- the device twin (kronpe.solvers.spline_torch): on CPU torch and on a GPU (``torch_device``) ------


@pytest.mark.parametrize("P,noise,D", [(900, 0.0, 2), (3000, 0.02, 2), (600, 0.0, 1), (3000, 0.0, 3)])
def test_device_fit_chooses_and_fits_as_the_host(torch_device, P, noise, D):
    import torch

    from kronpe.solvers import spline_torch

    rng = np.random.default_rng(12)
    pts = rng.random((P, D))
    vals = (np.cos(3 * pts).prod(axis=1) + pts.sum(axis=1))[:, None] + noise * rng.standard_normal((P, 1))
    host = S.fit(pts, vals)
    dev = spline_torch.fit(torch, torch.tensor(pts, device=torch_device.torch),
                           torch.tensor(vals, device=torch_device.torch))
    if dev is None:  # the data want finer levels than the device solves densely: the host's call
        assert math.prod(S.Grid(tuple(host.info["grid"]), (0.0,) * D, host.h).shape) > spline_torch.MAX_COEFFICIENTS \
            or host.info["limited_by"] == "representation"
        return
    assert dev.info["grid"] == host.info["grid"] and dev.ridge == pytest.approx(host.ridge)
    q = 0.05 + 0.9 * rng.random((300, D))
    np.testing.assert_allclose(dev.predict(q), host.predict(q), atol=1e-6 * np.ptp(vals))


def test_device_fit_wants_the_host_for_detailed_signals(torch_device):
    """A signal with detail at the points' spacing wants levels finer than the device solves."""
    import torch

    from kronpe.solvers import spline_torch

    rng = np.random.default_rng(13)
    pts = rng.random((20000, 2))
    vals = (np.sin(90 * pts[:, 0]) * np.cos(70 * pts[:, 1]))[:, None]
    assert spline_torch.fit(torch, torch.tensor(pts, device=torch_device.torch),
                            torch.tensor(vals, device=torch_device.torch)) is None


@TORCH_CUDA_ONLY
def test_fit_spline_of_cuda_tensors(torch_device):
    import torch

    rng = np.random.default_rng(14)
    pts = rng.random((5000, 2))
    y = franke(pts[:, 0], pts[:, 1])
    m = kronpe.fit_spline(torch.tensor(pts, device="cuda"), torch.tensor(y, device="cuda"))
    assert m.info["device"].startswith("cuda")
    host = kronpe.fit_spline(pts, y)
    np.testing.assert_allclose(m.predict(pts[:100]), host.predict(pts[:100]), atol=1e-7)
    with pytest.raises(ValueError, match="finite"):
        kronpe.fit_spline(torch.tensor(pts, device="cuda"), torch.full((5000,), float("nan"), device="cuda"))


def test_save_and_load_give_the_same_predictions(tmp_path):
    rng = np.random.default_rng(15)
    pts = rng.random((500, 2)) * [100.0, 3.0] + [-50.0, 7.0]
    vals = np.stack([pts[:, 0] / 100 + np.sin(pts[:, 1]), pts[:, 1]], -1)
    m = kronpe.fit_spline(pts, vals)
    m.save(tmp_path / "m.npz")
    back = kronpe.load(tmp_path / "m.npz")
    assert isinstance(back, kronpe.SplineModel) and back.info["limited_by"] == m.info["limited_by"]
    np.testing.assert_array_equal(back.predict(pts[:50]), m.predict(pts[:50]))
    coords = [np.linspace(m.lo[0], m.hi[0], 7), np.linspace(m.lo[1], m.hi[1], 5)]
    np.testing.assert_array_equal(back.predict_grid(coords), m.predict_grid(coords))


def test_fit_points_solver_table():
    """fit_points goes through kronpe.solvers.protocol's table: the default choice is recorded in
    info["solver"], solver= names a row, "spline" gives the SplineModel of fit_spline."""
    rng = np.random.default_rng(16)
    pts = rng.random((400, 2))
    y = franke(pts[:, 0], pts[:, 1])
    assert kronpe.fit_points(pts, y).info["solver"] == "blended"
    lattice = np.argwhere(np.ones((20, 20))) / 20.0
    assert kronpe.fit_points(lattice, lattice[:, 0]).info["solver"] == "lattice"
    assert kronpe.fit_points(pts, y, embedders=kronpe.Gaussian(16, 0.05)).info["solver"] == "ridge"
    m = kronpe.fit_points(pts * 1000.0, y, solver="spline")
    assert isinstance(m, kronpe.SplineModel) and m.info["solver"] == "spline"
    np.testing.assert_allclose(m.predict(pts[:20] * 1000.0), kronpe.fit_spline(pts * 1000.0, y).predict(pts[:20] * 1000.0))
    with pytest.raises(ValueError, match="solver must be one of"):
        kronpe.fit_points(pts, y, solver="magic")
    with pytest.raises(ValueError, match="give no embedders"):
        kronpe.fit_points(pts, y, solver="spline", embedders=kronpe.Gaussian(16, 0.05))
    with pytest.raises(ValueError, match="give no ridge"):
        kronpe.fit_points(pts, y, solver="spline", ridge=1e-3)


def test_named_solvers_refuse_problems_they_cannot_take():
    rng = np.random.default_rng(17)
    pts = rng.random((300, 2))
    with pytest.raises(ValueError, match="needs a penalty"):
        kronpe.fit_points(pts, pts[:, 0], solver="penalised")
    with pytest.raises(ValueError, match="needs points on a lattice"):
        kronpe.fit_points(pts, pts[:, 0], solver="lattice")
    assert kronpe.fit_points(pts, pts[:, 0], solver="blended").info["solver"] == "blended"


@pytest.mark.parametrize("layout", ["float32"] + [lay for lay in LAYOUTS[1:] if lay != "broadcast"])
def test_fit_spline_takes_any_real_layout(layout):
    """float32 inputs are fitted in float64; points in any other layout (and strided values) give
    the bits of C-contiguous ones (broadcast points would all be one)."""
    rng = np.random.default_rng(18)
    base = rng.random((1200, 4))
    pts = np.ascontiguousarray(base[:, :2])
    y = franke(pts[:, 0], pts[:, 1])
    want = kronpe.fit_spline(pts, y)
    if layout == "float32":
        got = kronpe.fit_spline(pts.astype(np.float32), y.astype(np.float32))
        q = pts[:50].astype(np.float32).astype(np.float64)
        np.testing.assert_allclose(got.predict(q), want.predict(q), atol=1e-5)
        return
    given = CPU.view(pts, layout)
    assert not given.flags.c_contiguous
    got = kronpe.fit_spline(given, CPU.view(y, "stepped"))
    np.testing.assert_array_equal(got.coef, want.coef)


def test_offset_values_and_larger_regions_fit_as_well():
    """Level choice follows the values' spread about their mean (a constant offset changes
    nothing), and a region larger than the points keeps the points' own spacing."""
    rng = np.random.default_rng(19)
    x = rng.random((2000, 1))
    y = np.sin(2 * np.pi * 12 * x[:, 0])
    a = kronpe.fit_spline(x, y)
    b = kronpe.fit_spline(x, y + 1000.0)
    assert b.info["grid"] == a.info["grid"]
    q = np.linspace(0.05, 0.95, 200)[:, None]
    assert np.abs(b.predict(q) - 1000.0 - np.sin(2 * np.pi * 12 * q[:, 0])).max() < 1e-3
    pts = rng.random((3000, 2))
    f = franke(pts[:, 0], pts[:, 1])
    g_small, (c0, c1) = kronpe.grid(pts, f, shape=(41, 41), region=(0, 1, 0, 1))
    g_large, (d0, d1) = kronpe.grid(pts, f, shape=(401, 401), region=(0, 10, 0, 10))
    inner = slice(2, 39)  # (near the corners both extrapolate, each over its own box)
    np.testing.assert_allclose(g_large[:41, :41][inner, inner], g_small[inner, inner], atol=2e-4)


def test_overflowing_extents_and_named_solver_options_are_named():
    with pytest.raises(ValueError, match="overflows"):
        kronpe.fit_spline([[-1e308], [1e308], [0.0]], [0.0, 1.0, 2.0])
    rng = np.random.default_rng(20)
    pts = rng.random((300, 2))
    with pytest.raises(ValueError, match="give no embedders"):
        kronpe.fit_points(pts, pts[:, 0], solver="blended", ridge=1e-3)
    with pytest.raises(ValueError, match="1 to 3 axes"):
        kronpe.fit_points(rng.random((300, 4)), pts[:, 0], solver="blended")
