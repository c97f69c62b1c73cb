"""Difference penalties (kronpe.DifferencePenalty) and the penalised fits against dense solves of
(A^T A + ridge R) w = A^T y (kronpe.reference), on full grids, grids with holes and scattered points."""
import numpy as np
import pytest

import kronpe
from kronpe import DifferencePenalty, Gaussian, GridPlan, Triangle, fit_grid, fit_points, reference
from _samples import (CPU, PENALTY_GRIDS, PENALTY_LAYOUTS, PENALTY_ORDERS, PENALTY_WEIGHTS, assert_close,
                      penalty_problem)


# ---- the penalty -------------------------------------------------------------------------------


@pytest.mark.parametrize("order", [1, 2, 3])
def test_matrix_is_the_difference_matrix(order):
    P = DifferencePenalty(order)
    for K in (1, order, order + 1, 7):
        D = P.matrix(K)
        assert D.shape == (max(K - order, 0), K)
        np.testing.assert_array_equal(D, reference.difference_matrix(K, order))
    # rows annihilate polynomials of degree < order
    x = np.arange(7.0)
    for deg in range(order):
        np.testing.assert_allclose(P.matrix(7) @ x**deg, 0, atol=1e-9)
    assert np.abs(P.matrix(7) @ x**order).min() > 0


@pytest.mark.parametrize("order,mixed,boundary", PENALTY_ORDERS)
@pytest.mark.parametrize("Ks", [(6,), (5, 4), (4, 1, 3), (7, 6, 5)])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("layout", PENALTY_LAYOUTS)
def test_apply_matches_dense_kronecker_sum(rng, order, mixed, boundary, Ks, weighted, layout):
    weights = PENALTY_WEIGHTS[len(Ks)] if weighted else None
    P = DifferencePenalty(order, mixed, boundary, weights=weights)
    W = rng.standard_normal(tuple(Ks) + (2,))
    R = reference.penalty_matrix(Ks, order, mixed, boundary, weights)
    Wv = CPU.view(W, layout)  # the same values in a memory layout
    np.testing.assert_allclose(P.apply(Wv, len(Ks)).reshape(-1, 2), R @ W.reshape(-1, 2), atol=1e-12)
    np.testing.assert_allclose(P.energy(Wv, len(Ks)), np.einsum("ic,ij,jc->c", W.reshape(-1, 2), R,
                                                                W.reshape(-1, 2)), rtol=1e-12)


@pytest.mark.parametrize("args,exc,name", [
    ((0,), ValueError, "order"), ((4,), ValueError, "order"), (("2",), TypeError, "order"),
    ((2.0,), TypeError, "order"), ((1, True), ValueError, "mixed"), ((2, "yes"), TypeError, "mixed"),
])
def test_bad_penalty_arguments(args, exc, name):
    with pytest.raises(exc, match=name):
        DifferencePenalty(*args)


@pytest.mark.parametrize("order", [2, 3])
@pytest.mark.parametrize("Ks", [(9,), (8, 6), (6, 5, 4)])
def test_mirrored_mixed_penalty_is_a_power_of_the_weighted_laplacian(order, Ks):
    """DifferencePenalty(q, mixed=True, boundary="reflect", weights=w) is (sum_i w_i L_i)^q: in the
    DCT-II basis the diagonal (sum_i w_i (2 - 2 cos(pi k_i / K_i)))^q."""
    from scipy.fft import dctn, idctn

    w = PENALTY_WEIGHTS[len(Ks)]
    P = DifferencePenalty(order, mixed=True, boundary="reflect", weights=w)
    mu = sum(np.meshgrid(*[wi * (2 - 2 * np.cos(np.pi * np.arange(K) / K)) for wi, K in zip(w, Ks)],
                         indexing="ij"))
    W = np.random.default_rng(1).standard_normal(Ks)
    spectral = idctn(dctn(W, norm="ortho") * mu ** order, norm="ortho")
    np.testing.assert_allclose(P.apply(W, len(Ks)), spectral, atol=1e-10)


def test_weights_scale_the_axes():
    """Weights are squared inverse spacings: a second-order penalty of weight w along an axis is w^2
    times the unweighted one; with mixed terms the cross term of axes i, j gets w_i w_j."""
    W = np.random.default_rng(2).standard_normal((7, 6))
    one = DifferencePenalty(2, weights=(3.0, 1.0)).apply(W, 2) - DifferencePenalty(2, weights=(1e-300, 1.0)).apply(W, 2)
    np.testing.assert_allclose(one, 9.0 * DifferencePenalty(2, weights=(1.0, 1e-300)).apply(W, 2), atol=1e-12)
    terms = DifferencePenalty(3, mixed=True, weights=(2.0, 0.5)).axis_terms(2)
    assert sorted((c, tuple(sorted(m.items()))) for c, m in terms) == sorted([
        (8.0, ((0, 3),)), (3 * 4 * 0.5, ((0, 2), (1, 1))), (3 * 2 * 0.25, ((0, 1), (1, 2))), (0.125, ((1, 3),))])


@pytest.mark.parametrize("weights,exc,match", [
    ((1.0, 0.0), ValueError, r"weights\[1\]"), ((1.0, np.nan), ValueError, r"weights\[1\]"),
    ("ab", TypeError, "weights"), (2.0, TypeError, "weights"), ((), ValueError, "weights"),
    ((1.0, "x"), TypeError, r"weights\[1\]"),
])
def test_bad_weights(weights, exc, match):
    with pytest.raises(exc, match=match):
        DifferencePenalty(2, weights=weights)


def test_weights_for_another_number_of_axes():
    with pytest.raises(ValueError, match="weights are for 2 axes"):
        DifferencePenalty(2, weights=(1.0, 2.0)).apply(np.zeros((3, 3, 3)), 3)
    P = DifferencePenalty(3, mixed=True, boundary="reflect", weights=[0.5, 1, 1])
    assert P.weights == (0.5, 1.0, 1.0) and P == DifferencePenalty(3, True, "reflect", (0.5, 1.0, 1.0))
    assert P != DifferencePenalty(3, True, "reflect") and hash(P) != hash(DifferencePenalty(3, True, "reflect"))
    assert repr(P) == "DifferencePenalty(3, mixed=True, boundary='reflect', weights=(0.5, 1.0, 1.0))"


def test_bad_matrix_size():
    with pytest.raises(ValueError, match="K"):
        DifferencePenalty(2).matrix(0)
    with pytest.raises(TypeError, match="K"):
        DifferencePenalty(2).matrix(3.5)


def test_exported():
    assert "DifferencePenalty" in kronpe.__all__ and kronpe.DifferencePenalty is DifferencePenalty
    assert repr(DifferencePenalty(2, mixed=True)) == "DifferencePenalty(2, mixed=True)"


# ---- grid fits -------------------------------------------------------------------------------------


@pytest.mark.parametrize("D", [1, 2, 3])
@pytest.mark.parametrize("order,mixed,boundary", PENALTY_ORDERS)
def test_grid_fit_matches_dense(rng, D, order, mixed, boundary, dtype):
    coords, embs, S, phis = penalty_problem(rng, D, dtype)
    m = fit_grid(S, embs, coords, ridge=0.1, penalty=DifferencePenalty(order, mixed, boundary))
    ref = reference.grid_penalised_fit(S.astype(np.float64), phis, 0.1, order, mixed, boundary=boundary)
    assert m.weights.dtype == dtype and m.weights.shape == ref.shape
    assert_close(m.weights, ref, 1e-6 if dtype == np.float64 else 1e-5)
    assert m.info["converged"] and m.info["iterations"] > 0 and m.ridge == 0.1


@pytest.mark.parametrize("D", [1, 2, 3])
@pytest.mark.parametrize("order,mixed,boundary", PENALTY_ORDERS)
def test_masked_grid_fit_matches_dense(rng, D, order, mixed, boundary):
    coords, embs, S, phis = penalty_problem(rng, D)
    mask = rng.random(S.shape[:D]) < 0.6
    S[~mask] = np.nan  # ignored
    m = fit_grid(S, embs, coords, ridge=0.05, penalty=DifferencePenalty(order, mixed, boundary), mask=mask)
    ref = reference.grid_penalised_fit(np.nan_to_num(S), phis, 0.05, order, mixed, mask, boundary)
    assert_close(m.weights, ref, 1e-6)


@pytest.mark.parametrize("D", [2, 3])
@pytest.mark.parametrize("order,mixed,boundary", [(2, False, "natural"), (2, True, "reflect"), (3, True, "natural"),
                                                  (3, True, "reflect")])
def test_weighted_fits_match_dense(rng, D, order, mixed, boundary):
    """Grid, masked-grid and scattered fits with per-axis weights against dense solves."""
    coords, embs, S, phis = penalty_problem(rng, D)
    P = DifferencePenalty(order, mixed, boundary, weights=PENALTY_WEIGHTS[D])
    m = fit_grid(S, embs, coords, ridge=0.1, penalty=P)
    assert_close(m.weights, reference.grid_penalised_fit(S, phis, 0.1, order, mixed, boundary=boundary,
                                                   weights=PENALTY_WEIGHTS[D]), 1e-6)
    mask = rng.random(S.shape[:D]) < 0.6
    m = fit_grid(S, embs, coords, ridge=0.05, penalty=P, mask=mask)
    assert_close(m.weights, reference.grid_penalised_fit(S, phis, 0.05, order, mixed, mask, boundary,
                                                         PENALTY_WEIGHTS[D]), 1e-6)
    pts = rng.random((50 * D, D))
    vals = rng.standard_normal((50 * D, 2))
    m = fit_points(pts, vals, embs, grid=[e.K + 1 for e in embs], ridge=0.05, penalty=P, tol=1e-12)
    assert_close(m.weights, reference.points_penalised_fit(pts, vals, embs, list(m.grid_coords), 0.05, order, mixed,
                                                     boundary=boundary, weights=PENALTY_WEIGHTS[D]), 1e-6)


def test_masked_ridge_matches_closed_form(rng):
    """All samples observed, identity penalty: the CG path gives the closed-form ridge fit."""
    coords, embs, S, phis = penalty_problem(rng, 2)
    full = fit_grid(S, embs, coords, ridge=0.3)
    masked = fit_grid(S, embs, coords, ridge=0.3, mask=np.ones(S.shape[:2], bool))
    assert_close(masked.weights, full.weights, 1e-7)


def test_penalty_none_is_the_ridge(rng):
    coords, embs, S, _ = penalty_problem(rng, 2)
    np.testing.assert_array_equal(fit_grid(S, embs, coords, ridge=0.2, penalty=None).weights,
                                  fit_grid(S, embs, coords, ridge=0.2).weights)


def test_plan_with_penalty_and_batches(rng):
    coords, embs, S, phis = penalty_problem(rng, 2, channels=(2, 3))
    plan = GridPlan(coords, embs, ridge=0.1, penalty=DifferencePenalty(2))
    m = plan.fit(S, batch_axes=1)
    for b in range(3):
        ref = reference.grid_penalised_fit(S[..., b], phis, 0.1, 2)
        assert_close(m.weights[..., b], ref, 1e-6)


def test_grid_auto_ridge_with_penalty(rng):
    """ridge="gcv" with a penalty chooses lambda on held-out samples: a smooth signal with noise."""
    x = np.linspace(0, 1, 40, endpoint=False)
    S = np.sin(4 * x)[:, None] * np.cos(3 * x)[None, :] + 0.05 * rng.standard_normal((40, 40))
    m = fit_grid(S, Triangle(40), ridge="gcv", penalty=DifferencePenalty(2))
    assert m.ridge > 0 and len(m.info["ridge_candidates"]) >= 3
    truth = np.sin(4 * x)[:, None] * np.cos(3 * x)[None, :]
    assert np.sqrt(np.mean((m.predict_grid([x, x]) - truth) ** 2)) < 0.05 * 0.7


# ---- masks: named errors -----------------------------------------------------------------------------


@pytest.mark.parametrize("mask,exc,match", [
    (np.ones((9, 7), bool), ValueError, "mask must have shape"),
    (np.ones((9, 8)), TypeError, "mask must be a boolean array"),
    ("all", TypeError, "mask must be a boolean array"),
    (np.zeros((9, 8), bool), ValueError, "mask marks no observed value"),
])
def test_bad_masks(rng, mask, exc, match):
    coords, embs, S, _ = penalty_problem(rng, 2)
    with pytest.raises(exc, match=match):
        fit_grid(S, embs, coords, ridge=0.1, mask=mask)


def test_nan_where_observed_is_named(rng):
    coords, embs, S, _ = penalty_problem(rng, 2)
    mask = np.ones(S.shape[:2], bool)
    S[3, 4, 0] = np.nan
    with pytest.raises(ValueError, match="signal .*where mask is True.* finite"):
        fit_grid(S, embs, coords, ridge=0.1, mask=mask)


def test_penalty_boundary_arguments():
    with pytest.raises(ValueError, match="boundary must be one of"):
        DifferencePenalty(2, boundary="mirror")
    P = DifferencePenalty(2, mixed=True, boundary="reflect")
    assert repr(P) == "DifferencePenalty(2, mixed=True, boundary='reflect')" and P != DifferencePenalty(2, mixed=True)
    assert DifferencePenalty(1, boundary="reflect") == DifferencePenalty(1)  # first differences: the same
    D = P.matrix(5)  # mirrored second differences: rows [-1, 1], [1, -2, 1], ..., [1, -1]
    np.testing.assert_array_equal(D[0, :2], [-1, 1])
    np.testing.assert_array_equal(D[-1, -2:], [1, -1])
    np.testing.assert_allclose(D.sum(axis=1), 0)  # constants are free, slopes are not
    assert np.linalg.matrix_rank(P.gram(5)) == 4


def test_bad_penalty_type(rng):
    coords, embs, S, _ = penalty_problem(rng, 2)
    with pytest.raises(TypeError, match="penalty"):
        fit_grid(S, embs, coords, ridge=0.1, penalty=2)
    with pytest.raises(TypeError, match="penalty"):
        fit_points(rng.random((30, 2)), rng.random(30), embs, ridge=0.1, penalty="second")


# ---- scattered fits ----------------------------------------------------------------------------------


@pytest.mark.parametrize("D", [1, 2, 3])
@pytest.mark.parametrize("order,mixed,boundary", PENALTY_ORDERS)
def test_points_fit_matches_dense(rng, D, order, mixed, boundary, dtype):
    _, Ks = PENALTY_GRIDS[D]
    embs = [Gaussian(K, 1.0 / K, margin=1) for K in Ks]
    pts = rng.random((50 * D, D))
    vals = rng.standard_normal((50 * D, 2)).astype(dtype)
    m = fit_points(pts, vals, embs, grid=[K + 1 for K in Ks], ridge=0.05,
                   penalty=DifferencePenalty(order, mixed, boundary), tol=1e-12)
    ref = reference.points_penalised_fit(pts, vals.astype(np.float64), embs, list(m.grid_coords), 0.05, order,
                                         mixed, boundary=boundary)
    assert m.weights.dtype == dtype
    assert_close(m.weights, ref, 1e-6 if dtype == np.float64 else 1e-5)
    assert m.info["converged"] and m.info["iterations"] > 0


# ---- the defaults (kronpe.solvers.smooth) -------------------------------------------------------------


def _smooth_image(n=64):
    x = np.linspace(0, 1, n, endpoint=False)
    img = np.sin(5 * x)[:, None] * np.cos(4 * x)[None, :] + x[:, None] ** 2
    return np.stack([img, 1 - img], axis=-1).astype(np.float32)


def test_default_masked_grid_fills_holes(rng):
    img = _smooth_image()
    mask = rng.random(img.shape[:2]) < 0.3
    m = fit_grid(np.where(mask[..., None], img, np.nan), mask=mask)
    assert m.info["boundary"] in ("natural", "reflect") and m.ridge > 0
    assert m.info["penalty"] == repr(DifferencePenalty(2, mixed=True, boundary=m.info["boundary"]))
    assert m.weights.dtype == np.float32 and m.weights.shape == img.shape
    pred = m.predict_grid(kronpe.data.grid_coords(img.shape[:2]))
    err = np.sqrt(np.mean((pred[~mask] - img[~mask]) ** 2))
    blur = np.sqrt(np.mean((img[~mask] - img[mask].mean()) ** 2))
    assert err < 0.02 * blur  # a smooth signal is filled almost exactly


@pytest.mark.parametrize("channels", [1, 3])
def test_default_fill_from_the_sweep_matches_a_tight_solve(rng, channels):
    """The default fill's leading component starts from the held-out sweep's fit (a fit without
    the held-out nodes): its result is still the solution of the chosen system, to the solver's
    tolerance (against a tight solve of that system from full multigrid)."""
    from kronpe.solvers import smooth

    img = _smooth_image(80)[..., :1]
    img = np.concatenate([img, 0.8 * img + 0.1, 0.5 * img ** 2], -1)[..., :channels]
    img += 0.01 * rng.standard_normal(img.shape).astype(np.float32)  # a finite lambda, not the limit
    mask = rng.random(img.shape[:2]) < 0.4
    m = fit_grid(np.where(mask[..., None], img, np.nan), mask=mask)
    info = m.info
    assert info["iterations"] >= 1 and info["converged"]
    planes = [np.ascontiguousarray(np.where(mask, img[..., c], 0)) for c in range(channels)]
    lo, hi = smooth.sample_range(img[mask])
    lead = smooth.HigherPenalty(smooth.HIGHER) if "lead_penalty" in info else None
    penalty = DifferencePenalty(2, mixed=True, boundary=info["boundary"])
    W = smooth.solve(smooth.DataTerm(mask.shape, mask), planes, m.ridge, None, 1e-8, 2000, penalty,
                     value_range=(lo, hi), lead=lead)[0]
    rel = np.sqrt(np.mean((m.weights - W) ** 2) / np.mean(W ** 2))
    assert rel < 5 * info["tol"]


@pytest.mark.parametrize("seed", [0, 1])
def test_default_boundary_is_held_out(seed):
    """The defaults pick the penalty's boundary by the held-out error: mirrored for a signal with
    zero slope at every edge, natural for one that keeps sloping there."""
    rng = np.random.default_rng(seed)
    n = 96
    x = (np.arange(n) + 0.5) / n
    flat_edges = np.cos(2 * np.pi * x)[:, None] * np.cos(3 * np.pi * x)[None, :]
    sloped = np.sin(3 * x)[:, None] + np.cos(2 * x)[None, :] * x[None, :]
    mask = rng.random((n, n)) < 0.15
    for img, want in ((flat_edges, "reflect"), (sloped, "natural")):
        m = fit_grid(np.where(mask, img, np.nan), mask=mask)
        errs = m.info["boundary_holdout_errors"]
        assert m.info["boundary"] == want and len(errs) == 2 and errs[want == "natural"] > errs[want == "reflect"]
        assert m.info["penalty"] == repr(DifferencePenalty(2, mixed=True, boundary=want))


def test_default_fits_stay_in_the_samples_range(rng):
    """The defaults clip the grid values to each channel's sample range: a step edge, whose
    thin-plate fit overshoots on both sides, stays within [min, max] of the samples."""
    n = 48
    img = np.zeros((n, n, 2), np.float32)
    img[:, n // 2:, 0] = 1.0
    img[..., 1] = 2.0 - 3.0 * img[..., 0]  # another range per channel: [-1, 2]
    mask = rng.random((n, n)) < 0.3
    for m in (fit_grid(np.where(mask[..., None], img, np.nan), mask=mask, ridge=1e-4),
              fit_points(np.argwhere(mask) / n, img[mask])):
        assert 0 < m.info["clipped"] < 0.5
        w = m.weights.reshape(-1, 2)
        assert w[:, 0].min() >= 0 and w[:, 0].max() <= 1 and w[:, 1].min() >= -1 and w[:, 1].max() <= 2
        assert w[:, 0].max() == 1 and w[:, 1].min() == -1  # clipped, not rescaled


def test_default_points_on_a_lattice(rng):
    img = _smooth_image()
    mask = rng.random(img.shape[:2]) < 0.3
    ij = np.argwhere(mask)
    m = fit_points(ij / 64.0, img[mask])
    assert all(e is None for e in m.embedders) and m.weights.shape == (65, 65, 2)
    pred = m.predict(np.argwhere(~mask) / 64.0)
    assert np.sqrt(np.mean((pred - img[~mask]) ** 2)) < 0.01
    np.testing.assert_allclose(m.predict(ij / 64.0), img[mask], atol=0.02)  # close to the samples


def test_predict_on_the_nodes_is_a_gather(rng):
    """A default model's predictions at points exactly on its grid's nodes are gathered (points.
    _node_indices), to the bit what the blend gives; any other point, a NaN, a non-node float32
    coordinate or a point outside take the blend (and its errors)."""
    import warnings
    from kronpe import BlendingMatrix
    from kronpe.solvers import points as P

    img = _smooth_image()
    mask = rng.random(img.shape[:2]) < 0.3
    m = fit_points(np.argwhere(mask) / 64.0, img[mask])
    q = np.argwhere(~mask) / 64.0
    B = BlendingMatrix(q, list(m.grid_coords), list(m.embedders), normalize=m.normalize)
    want = B.matvec(m.grid_values.reshape(B.grid_size, -1)).reshape((-1,) + m.channels)
    flat = P._node_indices(q, m.grid_coords)
    assert flat is not None and flat.size == q.shape[0]
    got = m.predict(q)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(m.predict(q.astype(np.float32)), want)  # k / 64 is a float32 too
    np.testing.assert_array_equal(m.predict(np.asfortranarray(q)), want)
    with pytest.raises(ValueError, match="outside"):  # checked on the gather's way too
        m.predict(q, outside="bogus")
    off = q.copy()
    off[5, 1] += 1e-3  # one point between nodes: the blend for all
    assert P._node_indices(off, m.grid_coords) is None
    B_off = BlendingMatrix(off, list(m.grid_coords), list(m.embedders), normalize=m.normalize)
    np.testing.assert_array_equal(m.predict(off), B_off.matvec(m.grid_values.reshape(B.grid_size, -1)).reshape(
        (-1,) + m.channels))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no cast warnings on the way to the blend's error
        for bad in (np.nan, np.inf, 1.5):
            b = q.copy()
            b[3, 0] = bad
            assert P._node_indices(b, m.grid_coords) is None
            with pytest.raises(ValueError, match="points"):
                m.predict(b)
    assert P._node_indices(q[:0], m.grid_coords) is None and m.predict(q[:0]).shape == (0,) + m.channels


def test_lattice_detection():
    from kronpe.solvers.lattice import lattice_grid

    pts = np.array([[0.0, 0.25], [0.5, 0.75], [0.25, 0.5]])
    nodes = lattice_grid(pts)
    np.testing.assert_allclose(nodes[0], np.linspace(0, 1, 5))
    assert lattice_grid(np.array([[0.1], [0.33], [0.5]])) is None
    assert len(lattice_grid((np.arange(300) / 4096.0)[:, None])[0]) == 4097
    # a lattice finer than LATTICE_MAX_NODES per axis is no grid to fit on (the density grid instead)
    assert lattice_grid((np.arange(300) / float(1 << 25))[:, None]) is None


def test_lattice_detection_of_many_points(rng):
    """With many points h is read off a strided subset first: when that subset misses the
    smallest gap (only even multiples of 1/64 at the sampled positions) the whole set decides."""
    from kronpe.solvers.lattice import LATTICE_PROBE, lattice_grid

    P = 3 * LATTICE_PROBE
    k = 2 * rng.integers(0, 33, P)
    k[1::P // LATTICE_PROBE] += 1  # odd multiples only between the subset's points
    k = np.minimum(k, 64)
    x = k / 64.0
    nodes = lattice_grid(np.stack([x, rng.integers(0, 11, P) / 10.0], 1))
    assert [n.size for n in nodes] == [65, 11]
    np.testing.assert_allclose(nodes[0], np.arange(65) / 64)
    evens = lattice_grid((2 * rng.integers(0, 33, P) / 64.0)[:, None])  # no odd multiple anywhere: h = 1/32
    assert evens[0].size == 33
    off = x.copy()
    off[5] += 0.3 / 64  # one point off the lattice
    assert lattice_grid(off[:, None]) is None
    for i in (6, 7):  # a gap far below the lattice's: not a lattice (1 / gap is no integer),
        near = 2 * rng.integers(0, 33, P) / 64.0  # in the strided subset (6) or not (7)
        near[i] = near[i + 5] + 1e-9
        assert lattice_grid(near[:, None]) is None


def test_lambda_selection_signal_does_not_cancel_channels(rng):
    """lambda is held out on the channels' leading principal component of their second moments
    (the final solve's first component; without that basis, their sum), or on the leading
    component of their covariance where the sum cancels them (channels a and 1 - a: the sum is a
    constant that any lambda fits; so is the second moments' leading component, nearly)."""
    from kronpe.solvers.channels import principal_basis, selection_signal as _selection_signal

    a = rng.random((40, 30)).astype(np.float32)
    planes = [a, np.float32(1) - a]
    for basis in (None, principal_basis(planes)):
        y, lead = _selection_signal([p.copy() for p in planes], a.size, basis=basis)
        assert not lead
        assert np.std(y) > 0.5 * np.std(a)  # the component a - (1 - a), not the constant sum
    correlated = [a.copy(), (2 * a).copy(), (a + 1).copy()]
    same, lead = _selection_signal(correlated, a.size)
    assert not lead
    np.testing.assert_allclose(same, a + 2 * a + (a + 1), rtol=1e-6)  # correlated channels: their sum
    V = principal_basis(correlated)
    first, lead = _selection_signal(correlated, a.size, basis=V)
    assert lead
    np.testing.assert_allclose(first, V[0, 0] * a + V[1, 0] * 2 * a + V[2, 0] * (a + 1), rtol=1e-5, atol=1e-6)
    gray, lead = _selection_signal([a], a.size)
    assert lead and gray is a
    img = _smooth_image()
    mask = rng.random(img.shape[:2]) < 0.3
    m = fit_grid(np.where(mask[..., None], img, np.nan), mask=mask)
    errs = m.info["holdout_errors"]
    assert min(errs) > 1e-10 and max(errs) > 1.5 * min(errs)  # a real choice (the sum: ~1e-16, rounding noise)


def test_fill_predicted_at_its_own_nodes_is_its_weights(rng):
    """A fill's Triangle(N) embedders at the grid's own coordinates i / N are the identity up to
    rounding (N = 45, 30: not binary fractions); predict_grid skips them and returns the weights."""
    img = rng.random((45, 30, 3)).astype(np.float32)
    mask = rng.random((45, 30)) < 0.5
    m = fit_grid(np.where(mask[..., None], img, np.nan), mask=mask)
    from kronpe.data import grid_coords

    np.testing.assert_array_equal(m.predict_grid(grid_coords((45, 30))), m.weights)
    # known to be the identity without building the N x N matrices; any other coordinates build them
    from kronpe.solvers.grid_model import _hats_at_centres

    assert all(_hats_at_centres(e, c) for e, c in zip(m.embedders, grid_coords((45, 30))))
    assert not _hats_at_centres(m.embedders[0], np.arange(45) / 45 + 1e-9)
    assert not _hats_at_centres(m.embedders[0], np.arange(44) / 45)
    half = m.predict_grid([np.arange(45) / 45, (np.arange(29) + 0.5) / 30])  # between the nodes: a real chain
    np.testing.assert_allclose(half, 0.5 * (m.weights[:, :-1] + m.weights[:, 1:]), rtol=1e-5, atol=1e-6)


def test_boundary_ties_go_to_the_mirrored_boundary(monkeypatch):
    """The held-out choice of the boundary keeps the mirrored one (inpaint_biharmonic's) unless the
    natural one is better by more than BOUNDARY_MARGIN; a large margin forces it, none restores the
    plain comparison."""
    from kronpe.solvers import smooth

    rng = np.random.default_rng(3)
    img = _smooth_image()
    mask = rng.random(img.shape[:2]) < 0.3
    sig = np.where(mask[..., None], img, np.nan)
    monkeypatch.setattr(smooth, "BOUNDARY_MARGIN", 1e12)
    assert fit_grid(sig, mask=mask).info["boundary"] == "reflect"
    monkeypatch.setattr(smooth, "BOUNDARY_MARGIN", 0.0)
    m = fit_grid(sig, mask=mask)
    natural, mirrored = m.info["boundary_holdout_errors"]
    assert m.info["boundary"] == ("reflect" if mirrored < natural else "natural")


def test_higher_order_lead_penalty_is_held_out_and_solved_exactly(monkeypatch):
    """At the interpolation limit of a 2-D grid the defaults hold out the thin-plate penalty
    against thin-plate + HIGHER times the third power for the leading component: the errors are
    reported, the choice follows them (HIGHER_MARGIN), a chosen one is what the leading component
    is solved with (a dense solve of (M + lam (L^2 + h L^3)) w = M y, then clipped), and HIGHER = 0
    turns the test off."""
    from kronpe import reference
    from kronpe.solvers import smooth

    rng = np.random.default_rng(4)
    n1, n2 = 26, 31
    x1, x2 = (np.arange(n1) + 0.5) / n1, (np.arange(n2) + 0.5) / n2
    img = np.cos(3 * x1)[:, None] * np.sin(1.5 + 6 * x2)[None, :]  # smooth: interpolated
    mask = rng.random(img.shape) < 0.5
    sig = np.where(mask, img, np.nan)
    monkeypatch.setattr(smooth, "HIGHER_MARGIN", -1.0)  # any error: taken
    monkeypatch.setattr(smooth, "TOL_INTERPOLATING", 1e-8)  # the final solve converged
    m = fit_grid(sig, mask=mask)
    assert m.info["interpolating"] and m.info["boundary"] == "reflect"
    tp, hi = m.info["higher_holdout_errors"]
    assert np.isfinite(tp) and np.isfinite(hi) and tp > 0 and hi > 0
    assert m.info["lead_penalty"] == repr(smooth.HigherPenalty(smooth.HIGHER))
    y = np.where(mask, img, 0.0)

    def dense(order, top, tail):
        A = reference.thin_plate_matrix(img.shape, mask.astype(float), m.ridge, True, order, None, top, tail)
        return np.clip(np.linalg.solve(A, y.ravel()).reshape(img.shape), img[mask].min(), img[mask].max())

    want = dense(3, smooth.HIGHER, 1.0)
    got = m.predict_grid([np.arange(n1) / n1, np.arange(n2) / n2])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())
    assert np.abs(dense(2, 1.0, 0.0) - want).max() > 100 * 1e-5 * np.abs(want).max()  # not the thin-plate's
    monkeypatch.setattr(smooth, "HIGHER_MARGIN", 1.0)  # never taken: the thin-plate solve
    m2 = fit_grid(sig, mask=mask)
    assert "lead_penalty" not in m2.info and len(m2.info["higher_holdout_errors"]) == 2
    monkeypatch.setattr(smooth, "HIGHER_MARGIN", 0.0)
    m3 = fit_grid(sig, mask=mask)
    tp3, hi3 = m3.info["higher_holdout_errors"]
    assert ("lead_penalty" in m3.info) == (hi3 < tp3)
    monkeypatch.setattr(smooth, "HIGHER", 0.0)
    m4 = fit_grid(sig, mask=mask)
    assert "higher_holdout_errors" not in m4.info and "lead_penalty" not in m4.info


@pytest.mark.parametrize("shape", [(9,), (17, 12), (5, 6, 7)], ids=str)
def test_lattice_sums_are_the_blending_transpose(rng, shape):
    """The default fit's right-hand side for points on a lattice (a scatter-add) equals B^T 1 and
    B^T values of the blending matrix (rows: unit vectors at the nodes), repeated points included."""
    from kronpe import BlendingMatrix
    from kronpe.solvers.lattice import lattice_grid, lattice_sums

    idx = np.stack([rng.integers(0, n, 300) for n in shape], axis=1)
    idx[:len(shape)] = np.array(shape) - 1  # the last node on every axis (so the lattice covers [0, 1])
    idx[-len(shape):] = 0
    pts = idx / (np.array(shape, np.float64) - 1)
    values = rng.standard_normal((300, 3)).astype(np.float32)
    nodes = lattice_grid(pts)
    assert [n.size for n in nodes] == list(shape)
    counts, rhs = lattice_sums(pts, shape, values)
    B = BlendingMatrix(pts, nodes, None, outside="clamp")
    np.testing.assert_allclose(counts, B.rmatvec(np.ones(300)).reshape(shape), rtol=1e-6)
    assert len(rhs) == 3 and all(p.shape == tuple(shape) and p.dtype == np.float32 for p in rhs)
    np.testing.assert_allclose(np.stack(rhs, -1), B.rmatvec(values).reshape(shape + (3,)), rtol=1e-5, atol=1e-5)
    assert counts.sum() == 300


def _two_channel_fill(rng, first, second, noise, task):
    """A function filling the image (first, second) + noise from 40% of its pixels (fit_grid with
    a mask, or fit_points at those pixels): (weights, info)."""
    img = np.stack([first, second], -1).astype(np.float32)
    img += noise * rng.standard_normal(img.shape).astype(np.float32)
    mask = rng.random(first.shape) < 0.4

    def fill():
        if task == "masked":
            m = fit_grid(np.where(mask[..., None], img, np.nan), mask=mask)
        else:
            m = fit_points(np.argwhere(mask) / np.array(first.shape), img[mask])
        return m.weights, m.info

    return fill


@pytest.mark.parametrize("noise", [0.0, 0.05])
@pytest.mark.parametrize("task", ["masked", "points"])
def test_default_fill_same_bits_on_one_thread_or_two(monkeypatch, task, noise):
    """On a small grid the defaults solve the leading component at the interpolation limit
    (LeadSolve) beside the held-out sweep on two threads, or after it on one: the same fill, bit for
    bit, whether the sweep then wants it (interpolating, with or without the higher-order penalty)
    or not (a finite lambda); a grid over SPECULATE_MAX_NODES does without and matches too."""
    from kronpe.solvers import smooth

    x1, x2 = np.meshgrid(np.arange(48) / 48, np.arange(40) / 40, indexing="ij")
    base = np.sin(9 * x1) * np.cos(7 * x2 + 0.3) + 0.3 * np.sin(23 * x1 * x2)
    fill = _two_channel_fill(np.random.default_rng(5), base, 0.5 * base + 0.2 * x1, noise, task)

    kronpe.set_num_threads(2)
    try:
        calls = []
        monkeypatch.setattr(smooth, "_lead_solved", lambda *a, _f=smooth._lead_solved: calls.append(1) or _f(*a))
        two, info = fill()
        assert bool(calls) == bool(info["interpolating"] and info["boundary"] == "reflect")
        assert info["interpolating"] == (noise == 0.0)
        kronpe.set_num_threads(1)
        one, info1 = fill()
        np.testing.assert_array_equal(one, two)
        assert info1["iterations"] == info["iterations"] and info1["residual"] == info["residual"]
        monkeypatch.setattr(smooth, "SPECULATE_MAX_NODES", 0)
        calls.clear()
        plain = fill()[0]
        assert not calls
        np.testing.assert_allclose(plain, two, rtol=0, atol=20 * info["tol"] * np.abs(two).max())
    finally:
        kronpe.set_num_threads(None)


@pytest.mark.parametrize("noise", [0.0, 0.05])
@pytest.mark.parametrize("task", ["masked", "points"])
def test_large_grids_speculate_on_many_threads(monkeypatch, task, noise):
    """Over SPECULATE_MAX_NODES nodes the leading component's solve runs beside the sweep only
    with 2 SPECULATE_TEAM threads or more (a thread of its own, each side on half of them): used
    when the sweep wants the interpolation limit, cancelled otherwise; the same bits on every
    such run, and within the solver's tolerance of the fill that does without (fewer threads)."""
    from kronpe.solvers import smooth

    x1, x2 = np.meshgrid(np.arange(44) / 44, np.arange(50) / 50, indexing="ij")
    base = np.sin(8 * x1 + 0.2) * np.cos(6 * x2) + 0.3 * np.sin(21 * x1 * x2)
    fill = _two_channel_fill(np.random.default_rng(9), base, 0.4 * base - 0.3 * x2, noise, task)

    monkeypatch.setattr(smooth, "SPECULATE_MAX_NODES", 1000)  # this grid (2200 nodes) counts as large
    monkeypatch.setattr(smooth._core._tuning, "busy_cores", lambda: (False, 0))  # 8 threads on a small host
    made = []
    monkeypatch.setattr(smooth, "_lead_solve", lambda *a, _f=smooth._lead_solve: made.append(_f(*a)) or made[-1])
    try:
        kronpe.set_num_threads(2 * smooth.SPECULATE_TEAM - 1)
        plain, info = fill()
        assert made and all(spec is None for spec, _ in made)
        made.clear()
        kronpe.set_num_threads(2 * smooth.SPECULATE_TEAM)
        calls = []
        monkeypatch.setattr(smooth, "_lead_solved", lambda *a, _f=smooth._lead_solved: calls.append(1) or _f(*a))
        fast, info8 = fill()
        assert made and all(spec is not None and t == smooth.SPECULATE_TEAM for spec, t in made)
        assert bool(calls) == bool(info8["interpolating"] and info8["boundary"] == "reflect")
        assert info8["interpolating"] == info["interpolating"] == (noise == 0.0)
        again = fill()[0]
        np.testing.assert_array_equal(fast, again)
        np.testing.assert_allclose(fast, plain, rtol=0, atol=20 * info["tol"] * np.abs(plain).max())
    finally:
        kronpe.set_num_threads(None)


@pytest.mark.parametrize("noise", [0.0, 0.05])
@pytest.mark.parametrize("task", ["masked", "points"])
def test_compiled_sweep_is_the_python_sweep(monkeypatch, task, noise):
    """The held-out sweep of a diagonal data term in one compiled call (_core.held_out_sweep) tries the
    same lambdas, measures the same held-out errors and makes the same choices (boundary, higher-order
    penalty) as the Python loop (sweep_ridges and the tests after it): the same fill, bit for bit."""
    from kronpe.solvers import smooth

    rng = np.random.default_rng(6)
    n1, n2 = 40, 52
    x1, x2 = np.meshgrid(np.arange(n1) / n1, np.arange(n2) / n2, indexing="ij")
    img = (np.cos(8 * x1 + 1) * np.sin(6 * x2) + 0.2 * np.cos(19 * x1 * x2))[..., None].astype(np.float32)
    img += noise * rng.standard_normal(img.shape).astype(np.float32)
    mask = rng.random((n1, n2)) < 0.45

    def fill():
        if task == "masked":
            return fit_grid(np.where(mask[..., None], img, np.nan), mask=mask)
        return fit_points(np.argwhere(mask) / np.array([n1, n2]), img[mask])

    for margin in (smooth.HIGHER_MARGIN, -1.0):  # -1: the mirrored boundary and the higher-order penalty taken
        monkeypatch.setattr(smooth, "HIGHER_MARGIN", margin)
        monkeypatch.setattr(smooth, "BOUNDARY_MARGIN", 1e3 if margin < 0 else smooth.BOUNDARY_MARGIN)
        monkeypatch.setattr(smooth, "COMPILED_SWEEP", True)
        compiled = fill()
        monkeypatch.setattr(smooth, "COMPILED_SWEEP", False)
        loop = fill()
        np.testing.assert_array_equal(compiled.weights, loop.weights)
        for key in ("ridge_candidates", "holdout_errors", "interpolating", "boundary", "boundary_holdout_errors",
                    "higher_holdout_errors", "lead_penalty", "iterations"):
            assert compiled.info.get(key) == loop.info.get(key), key
        assert compiled.ridge == loop.ridge
        assert compiled.info["interpolating"] == (noise == 0.0)
        if margin < 0 and noise == 0.0:
            assert "lead_penalty" in compiled.info


def test_default_fill_of_strided_inputs_is_the_contiguous_fill():
    """A small fill (the speculative leading-component solve, the compiled sweep) of strided and
    transposed views gives the fill of their contiguous copies, bit for bit."""
    rng = np.random.default_rng(8)
    big = rng.random((60, 2 * 44, 2)).astype(np.float32)
    img = big[:, ::2, :1]  # strided, one channel
    mask = (rng.random((44, 60)) < 0.5).T  # transposed
    assert not img.flags.c_contiguous and not mask.flags.c_contiguous
    m1 = fit_grid(img, mask=mask)  # (the values where mask is False are ignored)
    m2 = fit_grid(np.ascontiguousarray(img), mask=np.ascontiguousarray(mask))
    np.testing.assert_array_equal(m1.weights, m2.weights)
    assert m1.info["holdout_errors"] == m2.info["holdout_errors"]


def test_data_term_density_from_its_total_is_the_mean():
    """DataTerm(..., total=) gives rho without a pass over the grid: the value np.mean gives, bit
    for bit (masks and lattice counts of many sizes)."""
    from kronpe.solvers import smooth

    rng = np.random.default_rng(9)
    for _ in range(200):
        shape = (int(rng.integers(1, 300)), int(rng.integers(1, 300)))
        d = rng.integers(0, 4, shape).astype(np.float32) * (rng.random(shape) < rng.random())
        quick = smooth.DataTerm(shape, d, total=int(d.sum(dtype=np.int64))).rho
        assert quick == smooth.DataTerm(shape, d).rho == float(np.mean(d))
