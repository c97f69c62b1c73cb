"""The blending matrix (each point a weighted sum of the 2^D corners of its grid cell, the weights
from the embedders' distance): weights, kernels (on the fly and stored), BlendingMatrix."""
import math

import numpy as np
import pytest
import scipy.sparse as sp

import kronpe
from kronpe import BlendingMatrix, _core, embedders, reference
from kronpe._adapters import arrays as _arrays
from kronpe.operators import blending
from _samples import blend_cases, ids

CASES = list(blend_cases())


# ---- the embedders' distance in closed form, written out independently of the package -------


def gauss_D(sigma):
    return lambda d: math.sqrt(math.pi) * sigma * np.exp(-np.asarray(d) ** 2 / (4 * sigma**2))


def b3(u):
    u = np.abs(u)
    return np.where(u <= 1, 2 / 3 - u**2 + u**3 / 2, np.where(u <= 2, (2 - u) ** 3 / 6, 0.0))


def tri_exact_D(h):
    return lambda d: h * b3(np.asarray(d) / h)


def tri_paper_D(h):
    s = 2 * h
    return lambda d: s**2 / 4 * np.maximum(1 - np.abs(d) / s, 0) ** 2


def rect_D(w):
    return lambda d: w * np.maximum(1 - np.abs(d) / w, 0)


# (kind, param) of the compiled kernels and the matching closed-form distance
KINDS = {
    "linear": ((blending.LINEAR, 0.0), None),
    "gaussian": ((blending.GAUSSIAN, 1 / (4 * 0.07**2)), gauss_D(0.07)),
    "gaussian_narrow": ((blending.GAUSSIAN, 1 / (4 * 0.0025**2)), gauss_D(0.0025)),  # exp far below 0
    "bspline3": ((blending.BSPLINE3, 1 / 0.1), tri_exact_D(0.1)),
    "tri_sq": ((blending.TRI_SQ, 1 / 0.2), tri_paper_D(0.1)),
    "tri": ((blending.TRI, 1 / 0.15), rect_D(0.15)),
}


def kernel_weights(points, nodes, kinds, normalize=True):
    axes = [(_arrays.describe(n), *k) for n, k in zip(nodes, kinds)]
    P, nc = points.shape[0], 1 << len(nodes)
    idx = np.empty((P, nc), np.int64)
    w = np.empty((P, nc))
    _core.blend_weights(axes, normalize, _arrays.describe(points), _arrays.describe(idx), _arrays.describe(w), 0)
    return idx, w


def nonuniform(M, rng):
    g = np.sort(rng.random(M - 2))
    return np.concatenate([[0.0], g, [1.0]])


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("uniform", [True, False])
def test_axis_weights_match_formula(rng, kind, normalize, uniform):
    nodes = np.linspace(0, 1, 9) if uniform else nonuniform(9, rng)
    q = np.concatenate([rng.random(200), nodes, [0.0, 1.0]])
    (k, param), dist = KINDS[kind]
    idx, w = kernel_weights(q[:, None], [nodes], [(k, param)], normalize)
    j, ref = reference.blend_axis_weights(q, nodes, dist, normalize)
    np.testing.assert_array_equal(idx[:, 0], j)
    np.testing.assert_array_equal(idx[:, 1], j + 1)
    np.testing.assert_allclose(w, ref, rtol=1e-12, atol=1e-13)
    if normalize:
        np.testing.assert_allclose(w.sum(1), 1.0, rtol=1e-14)


def test_unnormalised_gaussian_overshoots_between_nodes():
    # the raw projection of a wide Gaussian does not sum to 1 between nodes: the reason for the
    # default normalisation
    nodes = np.linspace(0, 1, 5)
    q = np.array([[0.125]])
    _, w = kernel_weights(q, [nodes], [KINDS["gaussian"][0]], normalize=False)
    assert abs(w.sum() - 1) > 1e-3


# ---- products on every device against the dense reference (tests/_samples.py: blend_cases) ----


def check_values(device, got, expected, dtype, rtol, atol):
    """A product computed on the device: its kind, dtype, shape and values."""
    assert device.kind_of(got) == device.lib and device.dtype_of(got) == dtype
    assert tuple(got.shape) == expected.shape
    np.testing.assert_allclose(device.host(got), expected, rtol=rtol, atol=atol)


def assert_same(device, a, b, tol):
    """Bitwise on the CPU; within tol on a GPU (its kernels may sum in other orders)."""
    if device.is_cuda:
        np.testing.assert_allclose(device.host(a), device.host(b), **tol(10))
    else:
        np.testing.assert_array_equal(device.host(a), device.host(b))


_DENSE = {}


def dense_matrix(case):
    """The case's dense P x G matrix (kronpe.reference), computed once for every case that shares it."""
    if case.matrix_key not in _DENSE:
        nodes = BlendingMatrix(case.points()[:0], case.nodes(), case.embedders).grid_coords
        _DENSE[case.matrix_key] = reference.blend_matrix(case.points().astype(np.float64), list(nodes),
                                                         case.distances(), case.normalize)
    return _DENSE[case.matrix_key]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_products_match_dense_reference(case, device, dtype, tol, rng):
    pts = case.points()
    B = BlendingMatrix(device.view(pts, case.points_layout), case.nodes(), case.embedders, normalize=case.normalize)
    assert B.rules == case.rules() and B.on_the_fly == ("distance" not in case.rules())
    assert B.shape == (case.P, B.grid_size) and B.indices.shape == (case.P, 2**case.D)
    dense = dense_matrix(case)
    np.testing.assert_allclose(B.to_scipy().toarray(), dense, rtol=1e-12, atol=1e-14)
    v, r = case.values(rng, dtype, B.grid_size)
    v64 = v.reshape((B.grid_size,) + case.channels).astype(np.float64)
    vd, rd = device.view(v, case.values_layout), device.view(r, case.values_layout)
    got = B @ vd
    check_values(device, got, dense @ v64, dtype, tol.rtol, 10 * tol.rtol)
    ref_t = dense.T @ r.astype(np.float64)
    for deterministic in (False, True):  # a GPU's atomic and planned transposes
        B.gpu_deterministic = deterministic
        got_t = B.T @ rd
        check_values(device, got_t, ref_t, dtype, tol.rtol, 50 * tol.rtol)
    np.testing.assert_array_equal(device.host(B.T @ rd), device.host(got_t))  # the planned transpose: bitwise
    # the adjoint identity <B v, r> = <v, B^T r>
    lhs = np.sum(device.host(got).astype(np.float64) * r)
    rhs = np.sum(v64 * device.host(got_t).reshape(v64.shape))
    assert abs(lhs - rhs) <= 50 * tol.rtol * (np.abs(v).sum() + np.abs(r).sum())
    # stored weights, and contiguous inputs, give the same products
    if B.on_the_fly:
        S = BlendingMatrix(device.view(pts, case.points_layout), case.nodes(), case.embedders,
                           normalize=case.normalize).store()
        assert not S.on_the_fly
        assert_same(device, S @ vd, got, tol)
        assert_same(device, S.T @ rd, got_t, tol)
    if (case.points_layout, case.values_layout) != ("contiguous", "contiguous"):
        C = BlendingMatrix(device.put(pts), case.nodes(), case.embedders, normalize=case.normalize)
        assert_same(device, C @ device.put(v), got, tol)
        assert_same(device, C.T @ device.put(r), got_t, tol)


def test_embedder_mapping_matches_distance():
    # the kernels' closed form is used only when it matches embedder.distance; every family
    # present in kronpe.embedders with a closed form must map onto a kernel
    families = {
        "Gaussian": lambda: embedders.Gaussian(16, 0.03),
        "Triangle": lambda: embedders.Triangle(16, width=0.1),
        "Rectangle": lambda: embedders.Rectangle(16, width=0.1),
        "RandomFourier": lambda: embedders.RandomFourier(16, sigma=3.0),
    }
    seen = 0
    for name, make in families.items():
        if not hasattr(embedders, name):
            continue
        emb = make()
        if not blending._has_own_distance(emb):
            continue
        seen += 1
        rule, kind = blending.axis_rule(emb, 1 / 16)
        assert rule == "kernel", name
        d = np.linspace(0, 0.3, 50)
        ref = emb.distance(d)
        mine = blending._kernel_distance(*kind, d)
        np.testing.assert_allclose(ref / ref[0], mine / mine[0], rtol=1e-10, atol=1e-14)
    assert seen >= 1


def test_points_on_nodes_and_last_node_are_exact(rng):
    nodes = [np.linspace(0, 1, 7), nonuniform(6, rng)]
    grid_pts = np.stack(np.meshgrid(*nodes, indexing="ij"), -1).reshape(-1, 2)
    B = BlendingMatrix(grid_pts, nodes, embedders.Gaussian(8, 0.1))
    dense = B.to_scipy().toarray()
    np.testing.assert_array_equal(dense, np.eye(42))  # one-hot, exactly
    # on the upper boundary: last cell, beta = 1
    B1 = BlendingMatrix(np.array([[1.0, 1.0]]), nodes, embedders.Gaussian(8, 0.1))
    assert B1.indices[0, 0] == (5 * 6 + 4)
    np.testing.assert_array_equal(B1.weights[0], [0, 0, 0, 1])


def test_repeated_points_give_identical_rows(rng):
    p = rng.random((1, 2))
    pts = np.repeat(p, 5, axis=0)
    B = BlendingMatrix(pts, (6, 6), embedders.Gaussian(8, 0.1))
    assert np.all(B.weights == B.weights[0]) and np.all(B.indices == B.indices[0])
    r = np.ones(5)
    np.testing.assert_allclose(B.rmatvec(r), 5 * B.to_scipy().toarray()[0], rtol=1e-14)


def test_singular_cells_fall_back_to_linear():
    # sigma much wider than the spacing: D is flat over a cell, det ~ 0 -> linear weights
    nodes = np.linspace(0, 1, 1001)
    q = np.array([[0.00025]])  # beta = 0.25
    _, w = kernel_weights(q, [nodes], [(blending.GAUSSIAN, 1 / (4 * 1e4))])
    np.testing.assert_allclose(w[0], [0.75, 0.25], rtol=1e-12)
    # a Rectangle narrower than half a spacing: both projections vanish mid-cell -> linear
    _, w = kernel_weights(np.array([[0.5]]), [np.array([0.0, 1.0])], [(blending.TRI, 1 / 0.2)])
    np.testing.assert_allclose(w[0], [0.5, 0.5])


@pytest.mark.parametrize("D", [1, 2, 3])
def test_to_scipy_structure_and_products(rng, D):
    pts = rng.random((100, D))
    B = BlendingMatrix(pts, [7, 6, 5][:D], embedders.Gaussian(8, 0.08))
    S = B.to_scipy()
    assert sp.isspmatrix_csr(S) and S.shape == B.shape
    assert np.all(np.diff(S.indptr) == 2**D)
    for p in range(5):
        cols = S.indices[S.indptr[p]:S.indptr[p + 1]]
        assert np.all(np.diff(cols) > 0)
    v = rng.standard_normal(B.grid_size)
    np.testing.assert_allclose(S @ v, B.matvec(v), rtol=1e-13, atol=1e-14)
    r = rng.standard_normal(100)
    np.testing.assert_allclose(S.T @ r, B.rmatvec(r), rtol=1e-13, atol=1e-14)
    op = B.aslinearoperator()
    np.testing.assert_allclose(op.matvec(v), B @ v)
    np.testing.assert_allclose(op.rmatvec(r), B.T @ r)
    np.testing.assert_allclose(op.matmat(v[:, None])[:, 0], B @ v)


@pytest.mark.parametrize("store", [False, True])
def test_transpose_is_deterministic_across_thread_counts(rng, store):
    pts = rng.random((20000, 2))
    r = rng.standard_normal((20000, 2))
    outs = []
    for t in (1, 2, 3, 8):
        B = BlendingMatrix(pts, (64, 48), embedders.Gaussian(32, 0.02), threads=t)
        if store:
            B.store()
        outs.append(B.T @ r)
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


# ---- the plan: points in grid-cell order (memory order of gathers and scatters) --------------


@pytest.mark.parametrize("store", [False, True])
def test_plan_sorts_points_by_cell(rng, store):
    pts = rng.random((3000, 2))
    B = BlendingMatrix(pts, (40, 30), embedders.Gaussian(32, 0.03), threads=2)
    if store:
        B.store()
    perm, ptr, span, identity = B._order()
    np.testing.assert_array_equal(np.sort(perm), np.arange(len(pts)))
    keys = B.indices[perm, 0]  # the cell's first corner: the row's smallest index
    assert np.all(np.diff(keys) >= 0) and not identity
    assert np.all(np.diff(perm)[np.diff(keys) == 0] > 0)  # stable: ties keep the point order
    L, slabs = _core.blend_layout(B.grid_size, span)
    np.testing.assert_array_equal(ptr, np.searchsorted(keys, np.arange(slabs + 1) * L))
    # points in that order already: the identity, and the kernels read the matrix's own arrays
    # (weights computed in every product: the points are the operands; tests/test_blend_factors.py
    # has the kept weights)
    S = BlendingMatrix(pts[perm], (40, 30), embedders.Gaussian(32, 0.03), cache_weights=False)
    if store:
        S.store()
    assert S._order()[3]
    own = (S.points,) if not store else (S.indices, S.weights)
    S @ np.ones(S.grid_size)
    assert all(a is b for a, b in zip(S._ordered["stored" if store else "fly"], own))


@pytest.mark.parametrize("store", [False, True])
def test_products_do_not_depend_on_point_order(rng, store):
    # the gather gives the same bits in plan order as in point order (one point at a time); the
    # transpose sums in another order when the points come in another order
    P, grid, emb = 5000, (20, 16, 12), embedders.Gaussian(16, 0.05)
    pts = rng.random((P, 3))
    order = rng.permutation(P)
    A, B = BlendingMatrix(pts, grid, emb), BlendingMatrix(pts[order], grid, emb)
    if store:
        A.store(), B.store()
    for dtype in (np.float32, np.float64):
        v = rng.standard_normal((A.grid_size, 2)).astype(dtype)
        r = rng.standard_normal((P, 2)).astype(dtype)
        got = A @ v
        np.testing.assert_array_equal(B @ v, got[order])
        plain = np.empty_like(got)  # the kernels without a plan: points in their own order
        if store:
            _core.blend_stored(A.indices, A.weights, v, plain)
        else:
            _core.blend_fly(A._axes, True, pts, v, plain)
        np.testing.assert_array_equal(got, plain)
        np.testing.assert_allclose(B.T @ r[order], A.T @ r, rtol=1e-5 if dtype == np.float32 else 1e-12,
                                   atol=1e-5 if dtype == np.float32 else 1e-12)


@pytest.fixture
def simd_levels():
    """The blend kernels' vector levels this CPU has (2 AVX-512, 1 AVX2, 0 portable; skips where it
    has none but the portable one), and a setter; restores the level."""
    before = _core._tuning.blend_set_simd(2)
    top = _core._tuning.blend_set_simd(2)
    if top == 0:
        _core._tuning.blend_set_simd(before)
        pytest.skip("this CPU has neither AVX2 nor AVX-512")
    yield list(range(top, -1, -1)), _core._tuning.blend_set_simd
    _core._tuning.blend_set_simd(before)


@pytest.mark.parametrize("D", [1, 2, 3])
@pytest.mark.parametrize("nodes_kind", ["linspace", "jittered", "nonuniform"])
def test_simd_paths_give_the_bits_of_the_portable_ones(rng, simd_levels, D, nodes_kind):
    # the vectorised cell searches (uniform axes: a guess per 8 (AVX-512) or 4 (AVX2) points, the
    # wrong ones searched after it) and the AVX-512 gathers of 2-4 channels against the portable
    # loops, every level this CPU has: the same
    # cells, weights and products, bit for bit, for every kernel; points on nodes, within an ulp
    # of them, at and beyond both ends, NaN, and counts that leave partial vectors
    levels, set_level = simd_levels
    M = (9, 7, 6)[:D]
    if nodes_kind == "linspace":
        nodes = [np.linspace(0.0, 1.0, m) for m in M]
    elif nodes_kind == "jittered":  # off the even spacing by less than a cell: guesses go wrong
        nodes = [np.sort(np.linspace(0.0, 1.0, m) + np.r_[0, rng.uniform(-0.4, 0.4, m - 2), 0] / (m - 1)) for m in M]
    else:
        nodes = [nonuniform(m, rng) for m in M]
    cols = []
    for g in nodes:
        near = np.concatenate([g, np.nextafter(g, -np.inf), np.nextafter(g, np.inf)])
        q = np.concatenate([rng.uniform(g[0], g[-1], 150), near, [g[0] - 1, g[-1] + 1, np.nan]])
        cols.append(rng.permutation(q))
    n = min(len(c) for c in cols)
    pts = np.stack([c[:n] for c in cols], 1)
    for P in (n, 13, 1, 0):
        for kind, ((k, param), _) in KINDS.items():
            for normalize in (True, False):
                got = {}
                for level in levels:
                    set_level(level)
                    got[level] = kernel_weights(pts[:P], nodes, [(k, param)] * D, normalize)
                for level in levels[:-1]:
                    for a, b in zip(got[level], got[0]):
                        np.testing.assert_array_equal(a, b)
    inside = pts[np.all(np.isfinite(pts), 1)]
    inside = np.clip(inside, [g[0] for g in nodes], [g[-1] for g in nodes])
    for C in (1, 2, 3, 4, 5):
        for dtype in (np.float32, np.float64):
            v = rng.standard_normal((int(np.prod(M)), C)).astype(dtype)
            got = {}
            for level in levels:
                set_level(level)
                B = BlendingMatrix(inside, nodes, embedders.Gaussian(8, 0.1))
                S = BlendingMatrix(inside, nodes, embedders.Gaussian(8, 0.1)).store()
                got[level] = (B @ v, B @ v, S @ v, S @ v)  # the first product skips the plan
            for level in levels[:-1]:
                for a, b in zip(got[level], got[0]):
                    np.testing.assert_array_equal(a, b)


def strided(a):
    """The values of ``a`` in a view with a column stride of 2 (the kernels' generic loops)."""
    wide = np.empty((a.shape[0], 2 * a.shape[1]), a.dtype)
    wide[:, ::2] = a
    return wide[:, ::2]


@pytest.mark.parametrize("D", [1, 2, 3, 4])
@pytest.mark.parametrize("store", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_packed_kernels_give_the_bits_of_the_strided_ones(rng, D, store, dtype):
    # dense rows take the compiled path (2, 4 or 8 corners; 1 to 4 channels, or any): the same
    # sums in the same order as the generic loops, for every thread count; D = 4 (16 corners)
    # runs the generic loops on both sides
    P, grid = 700, (7, 6, 5, 4)[:D]
    pts = rng.random((P, D))
    order = rng.permutation(P)
    for C in (1, 2, 3, 4, 5):
        v = rng.standard_normal((int(np.prod(grid)), C)).astype(dtype)
        r = rng.standard_normal((P, C)).astype(dtype)
        got = {}
        for threads in (1, 3):
            B = BlendingMatrix(pts, grid, embedders.Gaussian(8, 0.1), threads=threads)
            if store:
                B.store()
            got[threads] = (B @ v, B.T @ r)
            np.testing.assert_array_equal(B @ strided(v), got[threads][0])
            np.testing.assert_array_equal(B.T @ strided(r), got[threads][1])
        for a, b in zip(got[1], got[3]):
            np.testing.assert_array_equal(a, b)
        S = B.to_scipy()
        tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got[1][0], S @ v.astype(np.float64), **tol)
        np.testing.assert_allclose(got[1][1], S.T @ r.astype(np.float64), **tol)
        # the points in another order: gathers give the same bits, row by row
        A = BlendingMatrix(pts[order], grid, embedders.Gaussian(8, 0.1))
        if store:
            A.store()
        np.testing.assert_array_equal(A @ v, got[1][0][order])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_stored_kernels_without_a_plan(rng, dtype):
    # the core API's stored products with rows in no order and no plan (the transpose sorts
    # them itself), and indices outside the grid: the packed path refuses them like the generic one
    pts = rng.random((300, 2))
    B = BlendingMatrix(pts, (9, 8), embedders.Gaussian(8, 0.1)).store()
    v = rng.standard_normal((B.grid_size, 3)).astype(dtype)
    r = rng.standard_normal((300, 3)).astype(dtype)
    out = np.empty((300, 3), dtype)
    _core.blend_stored(B.indices, B.weights, v, out)
    np.testing.assert_array_equal(out, B @ v)
    g = np.empty((B.grid_size, 3), dtype)
    _core.blend_transpose_stored(B.indices, B.weights, r, g, B.span)
    np.testing.assert_array_equal(g, B.T @ r)
    bad = B.indices.copy()
    bad[150, 3] = B.grid_size
    with pytest.raises(ValueError, match="outside the grid"):
        _core.blend_stored(bad, B.weights, v, out)
    with pytest.raises(ValueError, match="outside the grid"):
        _core.blend_transpose_stored(bad, B.weights, r, g, B.span)
    bad[150, 3] = -1
    with pytest.raises(ValueError, match="outside the grid"):
        _core.blend_stored(bad, B.weights, v, out)
    with pytest.raises(ValueError, match="outside the grid"):
        _core.blend_transpose_stored(bad, B.weights, r, g, B.span)


def test_gather_rows_must_match_the_points(rng):
    pts = rng.random((10, 2))
    B = BlendingMatrix(pts, (5, 5), None)
    v, out = np.ones((25, 1)), np.empty((10, 1))
    with pytest.raises(ValueError, match="rows must have one entry per row of points"):
        _core.blend_fly(B._axes, True, pts, v, out, 0, np.arange(9))
    with pytest.raises(ValueError, match="rows must have one entry per row of indices"):
        _core.blend_stored(B.indices, B.weights, v, out, 0, np.arange(11))


def test_linear_when_no_embedder(rng):
    pts = rng.random((50, 2))
    B = BlendingMatrix(pts, (5, 5), None)
    assert B.rules == ("linear", "linear")
    v = np.add.outer(np.linspace(0, 1, 5) * 2, np.linspace(0, 1, 5) * 3)  # bilinear field
    np.testing.assert_allclose(B @ v, 2 * pts[:, 0] + 3 * pts[:, 1], rtol=1e-12)


class _OwnDistance(embedders.Gaussian):
    """A Gaussian that declares no closed form to the kernels: the "distance" rule."""

    def blend_kernel(self):
        return None

    def replace(self, **changes):  # pragma: no cover - unused
        return self


class _NoDistance(embedders.Embedder):
    """An embedder with no distance of its own: the "sampled" rule."""

    def __init__(self, K=12, sigma=0.08):
        object.__setattr__(self, "_K", K)
        object.__setattr__(self, "_sigma", sigma)

    @property
    def K(self):
        return self._K

    def _embed(self, x, out=None):
        t = np.arange(self._K) / (self._K - 1)
        return np.exp(-((x[:, None] - t) ** 2) / (2 * self._sigma**2)).astype(x.dtype)


@pytest.mark.parametrize("normalize", [True, False])
def test_python_rules(rng, normalize):
    pts = rng.random((60, 2))
    own = _OwnDistance(8, 0.09)
    B = BlendingMatrix(pts, (6, 5), own, normalize=normalize)
    assert B.rules == ("distance", "distance") and not B.on_the_fly
    dense = reference.blend_matrix(pts, list(B.grid_coords), [own.distance] * 2, normalize)
    np.testing.assert_allclose(B.to_scipy().toarray(), dense, rtol=1e-12, atol=1e-14)

    emb = _NoDistance()
    B = BlendingMatrix(pts, (6, 5), emb, normalize=normalize)
    assert B.rules == ("sampled", "sampled")
    # sampled rule: the projection of Psi(q) onto span(Psi(g0), Psi(g1)), per axis
    for p in range(5):
        row = np.zeros(30)
        w_axes = []
        for i, n in enumerate(B.grid_coords):
            j = min(max(int(np.sum(n <= pts[p, i])) - 1, 0), n.size - 2)
            A = emb(n[[j, j + 1]]).T
            a = np.linalg.lstsq(A, emb(pts[p, i:i + 1])[0], rcond=None)[0]
            if normalize:
                a = a / a.sum()
            w_axes.append((j, a))
        for c0 in range(2):
            for c1 in range(2):
                row[(w_axes[0][0] + c0) * 5 + w_axes[1][0] + c1] = w_axes[0][1][c0] * w_axes[1][1][c1]
        np.testing.assert_allclose(B.to_scipy().toarray()[p], row, rtol=1e-9, atol=1e-12)
    # the products of a stored matrix still match its CSR form, and are deterministic
    v = rng.standard_normal(30)
    np.testing.assert_allclose(B @ v, B.to_scipy() @ v, rtol=1e-13)


def test_mixed_axes(rng):
    pts = rng.random((80, 2))
    B = BlendingMatrix(pts, [5, np.array([0.0, 0.3, 0.35, 1.0])], [embedders.Gaussian(8, 0.1), None])
    dense = reference.blend_matrix(pts, list(B.grid_coords), [embedders.Gaussian(8, 0.1).distance, None])
    np.testing.assert_allclose(B.to_scipy().toarray(), dense, rtol=1e-12, atol=1e-14)


def test_sixty_four_bit_indices():
    big = 1 << 17  # a 2^17 x 2^17 virtual grid: flat indices past 2^31
    pts = np.array([[1.0, 1.0], [0.75, 0.5]])
    B = BlendingMatrix(pts, (big, big), None)
    assert B.grid_size == big * big
    assert B.indices[0, 3] == big * big - 1
    i0 = int(0.75 * (big - 1))
    assert B.indices[1, 0] == i0 * big + int(0.5 * (big - 1))


def test_outside_rules(rng):
    nodes = [np.linspace(0.2, 0.8, 5), np.linspace(0, 1, 4)]
    pts = np.array([[0.1, 0.5], [0.9, 1.0], [0.5, 0.5]])
    with pytest.raises(ValueError, match="points must lie in the grid range"):
        BlendingMatrix(pts, nodes, None)
    B = BlendingMatrix(pts, nodes, None, outside="clamp")
    Bc = BlendingMatrix(np.array([[0.2, 0.5], [0.8, 1.0], [0.5, 0.5]]), nodes, None)
    np.testing.assert_array_equal(B.weights, Bc.weights)
    np.testing.assert_array_equal(B.indices, Bc.indices)


@pytest.mark.parametrize("layout", ["C", "F", "strided", "broadcast"])
def test_outside_check_in_any_layout(rng, layout):
    """The range check reads every column of the points in any memory layout (column_range: one
    1-D reduction per column) and names the axis that is out of range."""
    from kronpe._adapters import validate

    base = rng.random((301, 3))
    pts = {"C": base, "F": np.asfortranarray(base), "strided": np.repeat(base, 2, axis=0)[::2],
           "broadcast": np.broadcast_to(base[:1], (301, 3))}[layout]
    lo, hi = validate.column_range(pts)
    np.testing.assert_array_equal(lo, np.min(np.asarray(pts), axis=0))
    np.testing.assert_array_equal(hi, np.max(np.asarray(pts), axis=0))
    bad = np.array(pts, order="F" if layout == "F" else "C")
    bad[150, 2] = 1.25
    with pytest.raises(ValueError, match=r"along axis 2, got values in \[.*, 1.25\]"):
        BlendingMatrix(bad, (4, 4, 4), None)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(points=np.array([[0.5, np.nan]])), "points must be finite"),
        (dict(points=np.array([[0.5, 1.5]])), r"points must lie in \[0, 1\]"),
        (dict(points=np.array([[-0.1, 0.5]])), r"points must lie in \[0, 1\]"),
        (dict(points=np.zeros(5)), r"points must have shape \(P, D\)"),
        (dict(points=np.zeros((3, 3))), r"grid must have one entry per axis"),
        (dict(points=np.array([["a", "b"]])), "points must hold real numbers"),
        (dict(grid=(1, 4)), r"grid\[0\] must be an integer >= 2"),
        (dict(grid=[np.array([0.0, 0.5, 0.4, 1.0]), 4]), r"grid\[0\] must be strictly increasing"),
        (dict(grid=[np.array([0.0, 1.5]), 4]), r"grid\[0\] must lie in \[0, 1\]"),
        (dict(grid="abc"), "grid must be a shape"),
        (dict(outside="wrap"), "outside must be"),
        (dict(threads=0), r"threads must be an integer in \[1, 1024\]"),
        (dict(embedders=[None]), "embedders must have one entry per axis"),
    ],
)
def test_bad_arguments(kwargs, match):
    args = dict(points=np.array([[0.2, 0.3]]), grid=(4, 4), embedders=None)
    args.update(kwargs)
    # a wrong type (strings here) is a TypeError, a wrong value a ValueError
    kind = TypeError if "real numbers" in match or "grid must be a shape" in match else ValueError
    with pytest.raises(kind, match=match):
        BlendingMatrix(**args)


def test_wrong_row_counts(device, rng):
    B = BlendingMatrix(device.put(rng.random((10, 2))), (4, 4), None)
    with pytest.raises(ValueError, match="v must have 16 rows"):
        B @ device.put(np.ones(15))
    with pytest.raises(ValueError, match="r must have 10 rows"):
        B.T @ device.put(np.ones(11))


def test_bad_products(rng):
    B = BlendingMatrix(rng.random((10, 2)), (4, 4), None)
    with pytest.raises(TypeError, match="v must hold real numbers"):  # a wrong type
        B @ np.array(["x"] * 16)
    with pytest.raises(ValueError, match="out must be"):
        B.matvec(np.ones(16), out=np.empty(10, np.float32))


def test_exported_at_top_level():
    assert kronpe.BlendingMatrix is BlendingMatrix


def test_float32_points_on_a_custom_boundary():
    # float32(0.8) > 0.8: an ulp outside the grid is tolerated and clamped, on every rule
    nodes = [np.array([0.2, 0.5, 0.8])]
    pts = np.array([[0.8], [0.2]], np.float32)
    for emb in (embedders.Gaussian(8, 0.1), _OwnDistance(8, 0.1), None):
        B = BlendingMatrix(pts, nodes, emb)
        np.testing.assert_allclose(B.weights, [[0, 1], [1, 0]], atol=1e-6)
        assert np.all(B.indices == [[0, 1], [0, 1]]) or np.all(B.indices == [[1, 2], [0, 1]])
    with pytest.raises(ValueError, match="grid range"):
        BlendingMatrix(np.array([[0.81]], np.float32), nodes, None)


def test_torch_in_torch_out(rng):
    torch = pytest.importorskip("torch")
    pts = rng.random((30, 2))
    B = BlendingMatrix(torch.from_numpy(pts), (4, 4), embedders.Gaussian(8, 0.1))
    v = torch.from_numpy(rng.standard_normal(16))
    out = B @ v
    assert isinstance(out, torch.Tensor)
    np.testing.assert_allclose(out.numpy(), B.to_scipy() @ v.numpy(), rtol=1e-13)
    assert isinstance(B.T @ out, torch.Tensor)


def test_threads_beyond_the_cap_are_refused(rng):
    # threads beyond the cap (1024) would overrun the OpenMP runtime: Python and the kernels refuse them.
    pts = rng.random((50, 2))
    with pytest.raises(ValueError, match="threads must be"):
        BlendingMatrix(pts, (8, 8), embedders.Gaussian(8, 0.1), threads=100000)
    B = BlendingMatrix(pts, (8, 8), embedders.Gaussian(8, 0.1))
    with pytest.raises(ValueError, match="threads must be between 1 and 1024"):
        _core.blend_fly(B._axes, True, _arrays.describe(B.points), _arrays.describe(np.ones((64, 1))),
                        _arrays.describe(np.empty((50, 1))), 100000)


def test_subclass_declares_its_kernel(rng):
    # a user's subclass is recognised by what it declares (Embedder.blend_kernel), not
    # by its class name; a declaration that disagrees with its distance is not used.
    class MyGaussian(embedders.Gaussian):
        pass

    class Wrong(embedders.Gaussian):
        def blend_kernel(self):
            return "tri", 1.0

    pts = rng.random((40, 2))
    assert BlendingMatrix(pts, (6, 5), MyGaussian(8, 0.09)).rules == ("kernel", "kernel")
    assert BlendingMatrix(pts, (6, 5), Wrong(8, 0.09)).rules == ("distance", "distance")


@pytest.mark.parametrize("stored", [False, True], ids=["on-the-fly", "stored"])
def test_first_product_skips_the_plan_with_the_same_bits(stored):
    """The first B v gathers in the points' own order (no sort); the second builds the plan (points
    by cell) and gives the same bits; B^T r always uses the plan."""
    rng = np.random.default_rng(3)
    pts = rng.random((5000, 2))
    B = BlendingMatrix(pts, [np.linspace(0, 1, 65), np.linspace(0, 1, 33)], None)
    if stored:
        B.store()
    v = rng.standard_normal((B.shape[1], 3)).astype(np.float32)
    first = B.matvec(v)
    assert B._plan is None
    second = B.matvec(v)
    assert B._plan is not None
    np.testing.assert_array_equal(first, second)
    np.testing.assert_allclose(first, reference.blend_matrix(pts, list(B.grid_coords), [None, None]) @ v,
                               rtol=1e-5, atol=1e-5)
    fresh = BlendingMatrix(pts, [np.linspace(0, 1, 65), np.linspace(0, 1, 33)], None)
    fresh.rmatvec(first)
    assert fresh._plan is not None


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("D", [1, 2, 3])
def test_normal_add_is_the_weighted_normal_product(D, dtype):
    """_normal_add: out += B^T diag(keep) B v in one compiled pass over the stored rows (the
    default fill's data term off the nodes), on one thread; on the fly or on more threads it
    declines and leaves out as it was."""
    rng = np.random.default_rng(D)
    pts = rng.random((3000, D))
    B = BlendingMatrix(pts, [np.linspace(0, 1, 17)] * D, None, threads=1).store()
    v = rng.standard_normal(B.grid_size).astype(dtype)
    keep = (rng.random(3000) < 0.8).astype(dtype)
    start = rng.standard_normal(B.grid_size).astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for k in (None, keep):
        out = start.copy()
        assert B._normal_add(v, out, k)
        ref = start + B.rmatvec((1.0 if k is None else k) * B.matvec(v))
        np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)
    fly = BlendingMatrix(pts, [np.linspace(0, 1, 17)] * D, None, threads=1)
    out = start.copy()
    assert not fly._normal_add(v, out, keep) and np.array_equal(out, start)
    with pytest.raises(ValueError, match="outside the grid"):
        _core.blend_normal_add(B.indices, B.weights, v[: B.grid_size // 2].copy(), np.zeros(B.grid_size // 2, dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_blend_normal_add_kernel_against_the_dense_reference(dtype):
    """_core.blend_normal_add against reference.blend_matrix: out += B^T diag(keep) B v for rows in
    any order; no rows leaves out as it was; strided, mixed-dtype or aliased vectors are refused by
    name."""
    rng = np.random.default_rng(7)
    pts = rng.random((500, 2))
    coords = [np.linspace(0, 1, 9), np.linspace(0, 1, 13)]
    B = BlendingMatrix(pts, coords, None, threads=1).store()
    dense = reference.blend_matrix(pts, coords, [None, None])
    v = rng.standard_normal(B.grid_size).astype(dtype)
    keep = rng.random(500).astype(dtype)
    start = rng.standard_normal(B.grid_size).astype(dtype)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    rows = rng.permutation(500)  # any row order
    out = start.copy()
    _core.blend_normal_add(B.indices[rows], B.weights[rows], v, out, keep[rows])
    np.testing.assert_allclose(out, start + dense.T @ (keep * (dense @ v)), rtol=tol, atol=tol)
    out = start.copy()  # no rows: nothing added
    _core.blend_normal_add(B.indices[:0], B.weights[:0], v, out)
    np.testing.assert_array_equal(out, start)
    empty = np.zeros(0, dtype)  # an empty grid and no rows
    _core.blend_normal_add(B.indices[:0], B.weights[:0], empty, empty.copy())
    wide = np.zeros(2 * B.grid_size, dtype)
    with pytest.raises(ValueError, match="contiguous 1-D"):
        _core.blend_normal_add(B.indices, B.weights, wide[::2], out)
    with pytest.raises(ValueError, match="one dtype"):
        _core.blend_normal_add(B.indices, B.weights, v.astype(np.float64 if dtype == np.float32 else np.float32), out)
    with pytest.raises(ValueError, match="out must not be v"):
        _core.blend_normal_add(B.indices, B.weights, out, out)
    with pytest.raises(ValueError, match="keep must be"):
        _core.blend_normal_add(B.indices, B.weights, v, out, keep[:-1])
