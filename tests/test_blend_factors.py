"""The factored form of the blending matrix (kronpe/blend.h compute_factors, blend_factored,
blend_transpose_factored; ``BlendingMatrix(cache_weights=)``): each point's first corner and its
per-axis weight pairs, against kronpe.reference and, bit for bit, against the on-the-fly kernels,
over the cases of tests/_samples.py (blend_factor_cases) and memory layouts of points, factors and
values."""
import numpy as np
import pytest

from kronpe import BlendingMatrix, _core, embedders, reference
from _samples import CPU, blend_factor_cases, ids

CASES = list(blend_factor_cases())
NORMALIZED = [c for c in CASES if c.normalize]
BY_DIM = {c.D: c for c in NORMALIZED}
#: every layout but broadcast (inputs and outputs alike)
LAYOUTS = ("contiguous", "fortran", "stepped", "padded", "reversed")


def factors(B, pts, rows=None, base_layout="contiguous", pairs_layout="contiguous"):
    P, D = pts.shape
    base = CPU.view(np.zeros((P, 1), np.int64), base_layout)
    pairs = CPU.view(np.zeros((P, 2 * D)), pairs_layout)
    _core.blend_factors(B._axes, B.normalize, pts, base, pairs, 0, rows)
    return base, pairs


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
@pytest.mark.parametrize("points_layout", LAYOUTS)
def test_factors_match_the_reference(rng, case, points_layout, dtype):
    D, normalize = case.D, case.normalize
    for P in (301, 1, 0):
        B, pts, nodes, dist = case.matrix(rng, P, dtype)
        base_ref, pairs_ref = reference.blend_factors(pts, nodes, dist, normalize)
        p = CPU.view(pts, points_layout)
        for out_layout in ("contiguous", "stepped"):
            base, pairs = factors(B, p, None, out_layout, out_layout)
            np.testing.assert_array_equal(base, base_ref)
            np.testing.assert_allclose(pairs, pairs_ref, rtol=1e-12, atol=1e-13)
        # in a given order (a plan's): row e is point rows[e]
        rows = rng.permutation(P).astype(np.int64)
        base_r, pairs_r = factors(B, p, rows)
        np.testing.assert_array_equal(base_r, base[rows])
        np.testing.assert_array_equal(pairs_r, pairs[rows])
        # the stored corner weights are the pairs' products, axis 0 first: the same bits
        S = BlendingMatrix(pts, nodes, case.embedder, normalize=normalize).store()
        for c in range(2**D):
            bits = [(c >> (D - 1 - i)) & 1 for i in range(D)]
            w = pairs[:, bits[0]].copy()
            for i in range(1, D):
                w *= pairs[:, 2 * i + bits[i]]
            np.testing.assert_array_equal(S.weights[:, c], w)
            np.testing.assert_array_equal(S.indices[:, c], base[:, 0] + S.indices[:1, c] - S.indices[:1, 0] if P else
                                          S.indices[:, c])


@pytest.mark.parametrize("case", NORMALIZED, ids=ids(NORMALIZED))
@pytest.mark.parametrize("values_layout", LAYOUTS)
@pytest.mark.parametrize("pairs_layout", ["contiguous", "stepped"])
def test_factored_products_give_the_bits_of_the_on_the_fly_ones(rng, case, dtype, values_layout, pairs_layout):
    # gathers and transposes from factors against blend_fly / blend_transpose_fly (the same
    # bits: the corners formed with the same products in the same order) and the dense reference;
    # packed factors and values take the fused kernels (D <= 3), strided ones the block loops
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    for P in (257, 3, 0):
        B, pts, nodes, dist = case.matrix(rng, P)
        dense = reference.blend_matrix(pts, nodes, dist) if P else np.zeros((0, B.grid_size))
        perm, ptr, _, _ = B._order()
        sorted_pts = np.ascontiguousarray(pts[perm])
        base, pairs = factors(B, pts, perm, "contiguous", pairs_layout)
        for C in (1, 3, 5):
            v = CPU.view(rng.standard_normal((B.grid_size, C)).astype(dtype), values_layout)
            r = CPU.view(rng.standard_normal((P, C)).astype(dtype), values_layout)
            got, want = CPU.view(np.empty((P, C), dtype), values_layout), np.empty((P, C), dtype)
            _core.blend_factored(B._axes, True, base, pairs, v, got, 0, perm)
            _core.blend_fly(B._axes, True, sorted_pts, v, want, 0, perm)
            np.testing.assert_array_equal(got, want)
            np.testing.assert_allclose(got, dense @ v.astype(np.float64), **tol)
            gt, wt = CPU.view(np.empty((B.grid_size, C), dtype), values_layout), np.empty((B.grid_size, C), dtype)
            _core.blend_transpose_factored(B._axes, True, base, pairs, r, gt, 0, perm, ptr, True)
            _core.blend_transpose_fly(B._axes, True, sorted_pts, r, wt, 0, perm, ptr, True)
            np.testing.assert_array_equal(gt, wt)
            np.testing.assert_allclose(gt, dense.T @ r.astype(np.float64), **tol)
            # factors in the points' own order, the transpose planning from their cells itself
            own_base, own_pairs = factors(B, pts)
            gt2 = np.empty((B.grid_size, C), dtype)
            _core.blend_transpose_factored(B._axes, True, own_base, own_pairs, r, gt2)
            np.testing.assert_array_equal(gt2, wt)
            got[...] = np.nan  # every row must be written
            _core.blend_factored(B._axes, True, own_base, own_pairs, v, got)
            np.testing.assert_array_equal(got, want)


def test_factored_transpose_is_the_same_for_any_thread_count(rng):
    B, pts, _, _ = BY_DIM[3].matrix(rng, 5000)
    perm, ptr, _, _ = B._order()
    base, pairs = factors(B, pts, perm)
    r = rng.standard_normal((5000, 3))
    outs = []
    for threads in (1, 2, 5):
        g = np.empty((B.grid_size, 3))
        _core.blend_transpose_factored(B._axes, True, base, pairs, r, g, threads, perm, ptr, True)
        outs.append(g)
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_array_equal(outs[0], outs[2])


@pytest.mark.parametrize("packed", ["packed", "strided pairs", "strided values"])
def test_factors_outside_the_grid_are_refused(rng, packed):
    # the fused kernels (FactorRows::outside), the block loops with packed values (outside_row)
    # and with strided values (bases_outside); the transposes with their own plan and, sorted,
    # with the matrix's (each slab's range: [s L, (s + 2) L))
    B, pts, _, _ = BY_DIM[2].matrix(rng, 200)
    perm, ptr, _, _ = B._order()
    base, pairs = factors(B, pts)
    sbase, spairs = factors(B, pts, perm)
    lay = "stepped" if packed == "strided values" else "contiguous"
    if packed == "strided pairs":
        pairs, spairs = CPU.view(pairs, "stepped"), CPU.view(spairs, "stepped")
    v, r = CPU.view(rng.standard_normal((B.grid_size, 3)), lay), CPU.view(rng.standard_normal((200, 3)), lay)
    out, g = CPU.view(np.empty((200, 3)), lay), CPU.view(np.empty((B.grid_size, 3)), lay)
    last_cell = B.grid_size - 1 - B.span  # the largest base whose corners are all in the grid
    for bad in (-1, last_cell + 1, B.grid_size, -2**63, 2**63 - 1):
        b, sb = base.copy(), sbase.copy()
        b[77, 0] = sb[77, 0] = bad
        with pytest.raises(ValueError, match="outside the grid"):
            _core.blend_factored(B._axes, True, b, pairs, v, out)
        with pytest.raises(ValueError, match="outside the grid"):
            _core.blend_transpose_factored(B._axes, True, b, pairs, r, g)
        with pytest.raises(ValueError, match="outside the grid"):
            _core.blend_transpose_factored(B._axes, True, sb, spairs, r, g, 0, perm, ptr, True)
    # in the grid but outside its slab's range (the point moved to another slab): refused too
    sb = sbase.copy()
    sb[0, 0] = sbase[-1, 0]
    with pytest.raises(ValueError, match="or its slab"):
        _core.blend_transpose_factored(B._axes, True, sb, spairs, r, g, 0, perm, ptr, True)
    b = base.copy()
    b[77, 0] = last_cell
    _core.blend_factored(B._axes, True, b, pairs, v, out)  # in the grid: accepted
    with pytest.raises(ValueError, match=r"factors: expected shape \(200, 4\), got \(200, 3\)"):
        _core.blend_factored(B._axes, True, base, pairs[:, :3], v, out)
    with pytest.raises(ValueError, match=r"factors: expected shape \(200, 1\), got \(199, 1\)"):
        _core.blend_transpose_factored(B._axes, True, base[:199], pairs, r, g)
    with pytest.raises(ValueError, match="rows must have one entry per row of base"):
        _core.blend_factored(B._axes, True, base, pairs, v, out, 0, np.arange(199))
    with pytest.raises(ValueError, match=r"factor pairs: expected shape \(200, 4\)"):
        _core.blend_factors(B._axes, True, pts, base, np.empty((200, 5)))
    with pytest.raises(ValueError, match="rows must have one entry per row of points"):
        _core.blend_factors(B._axes, True, pts, base, pairs, 0, np.arange(3))


def test_bad_plans_are_refused(rng):
    # the CPU transposes' plans (perm, slab offsets) and the gathers' rows: lengths, layouts and
    # offsets that do not cut [0, P) in order give named errors (the kernels would read beyond them)
    B, pts, _, _ = BY_DIM[2].matrix(rng, 200)
    S = BlendingMatrix(pts, B.grid_coords, embedders.Gaussian(8, 0.09)).store()
    perm, ptr, _, _ = B._order()
    base, pairs = factors(B, pts, perm)
    r, g = rng.standard_normal((200, 3)), np.empty((B.grid_size, 3))
    sorted_pts = np.ascontiguousarray(pts[perm])
    calls = {
        "factored": lambda p, q: _core.blend_transpose_factored(B._axes, True, base, pairs, r, g, 0, p, q, True),
        "fly": lambda p, q: _core.blend_transpose_fly(B._axes, True, sorted_pts, r, g, 0, p, q, True),
        "stored": lambda p, q: _core.blend_transpose_stored(S.indices[perm], S.weights[perm], r, g, S.span, 0, p, q,
                                                            True),
    }
    for name, call in calls.items():
        call(perm, ptr)  # the plan itself: accepted
        with pytest.raises(ValueError, match="perm must have one entry per point"):
            call(perm[:-1], ptr)
        with pytest.raises(ValueError, match="slab_ptr must have one entry per slab"):
            call(perm, ptr[:-1])
        with pytest.raises(ValueError, match="perm must be contiguous"):
            call(np.repeat(perm, 2)[::2], ptr)
        for bad in (lambda q: q + 1, lambda q: q[::-1].copy(), lambda q: np.r_[q[:-1], q[-1] + 5]):
            with pytest.raises(ValueError, match="slab offsets must rise from 0 to the point count"):
                call(perm, bad(ptr))
    with pytest.raises(ValueError, match="rows must be contiguous"):
        _core.blend_factored(B._axes, True, base, pairs, np.empty((B.grid_size, 1)), np.empty((200, 1)), 0,
                             np.repeat(perm, 2)[::2])


def test_the_matrix_keeps_its_weights_by_default(rng):
    pts = rng.random((3000, 2))
    grid = (33, 17)
    emb = embedders.Gaussian(8, 0.07)
    B = BlendingMatrix(pts, grid, emb)
    F = BlendingMatrix(pts, grid, emb, cache_weights=False)
    assert B.cache_weights is None and F.cache_weights is False
    v = rng.standard_normal((B.grid_size, 3)).astype(np.float32)
    r = rng.standard_normal((3000, 3)).astype(np.float32)
    first = B @ v  # in the points' own order: no plan, nothing kept
    assert B._plan is None and not B._ordered
    second = B @ v
    assert set(B._ordered) == {"factors"} and B.cache_weights is True
    base, pairs = B._ordered["factors"]
    assert base.shape == (3000, 1) and pairs.shape == (3000, 4)
    np.testing.assert_array_equal(first, second)
    unplanned = F @ v  # F: its first product in the points' order, then its sorted points
    assert "fly" not in F._ordered
    np.testing.assert_array_equal(second, unplanned)
    np.testing.assert_array_equal(second, F @ v)
    np.testing.assert_array_equal(B.T @ r, F.T @ r)
    assert "factors" not in F._ordered and "fly" in F._ordered
    # the stored form drops them (its products read (indices, weights))
    B.store()
    assert "factors" not in B._ordered
    np.testing.assert_array_equal(B @ v, second)
    with pytest.raises(TypeError, match="cache_weights must be True, False or None"):
        BlendingMatrix(pts, grid, emb, cache_weights="yes")


def test_no_weights_kept_beyond_the_budget(rng, monkeypatch):
    from kronpe._adapters import validate

    pts = rng.random((2000, 3))
    monkeypatch.setattr(validate, "MEMORY_BUDGET", 4 * 2000 * (8 + 16 * 3) - 1)  # a quarter too small
    B = BlendingMatrix(pts, (9, 8, 7), embedders.Gaussian(8, 0.1))
    v = rng.standard_normal(B.grid_size)
    B @ v
    B @ v
    assert B.cache_weights is False and "factors" not in B._ordered
    # asked for, they must fit the budget: a named error
    K = BlendingMatrix(pts, (9, 8, 7), embedders.Gaussian(8, 0.1), cache_weights=True)
    out = np.empty(2000)
    K.matvec(v, out=out)
    monkeypatch.setattr(validate, "MEMORY_BUDGET", 50_000)  # v fits, the 112 KB of factors do not
    monkeypatch.setattr(validate, "NEVER_REFUSED", 0)
    with pytest.raises(MemoryError, match="points: this needs .* cache_weights=False"):
        K.matvec(v, out=out)
