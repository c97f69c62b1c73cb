"""The cubic B-spline kernels (kronpe._core.spline_normal and stencil_apply) where their vector paths
run: grids whose lines along the last axis are 8 coefficients or longer, cells with more points
than a batch, any channel count, several blocks of rows. Stencil products against kronpe.reference
bit for bit (both add the offsets one by one in their order), normal equations to rounding; the
same bits for any thread count and on every vector path (KRONPE_SIMD)."""
import hashlib
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import kronpe
from kronpe import _core, reference as R
from kronpe.solvers import spline as S

# (shape of the coefficient grid, channel counts): one block of rows and several (kernels walk
# 16384 / C rows at a time), lines shorter and longer than the 8 rows of a vector
APPLY_CASES = [((40,), (1, 2, 3, 4, 5)), ((9, 13), (1, 2, 3, 4, 5)), ((4, 5, 6), (1, 3, 4, 6)),
               ((140, 140), (1, 3, 5)), ((26, 26, 26), (1, 3))]


def _neighbours(shape):
    """For each offset o of the stencil: which coefficients have their neighbour at o on the grid
    (N,), and those neighbours' flat indices."""
    D, N = len(shape), math.prod(shape)
    idx = np.array(np.unravel_index(np.arange(N), shape)).T
    for o in range(7 ** D):
        nb = idx + np.array(np.unravel_index(o, (7,) * D)) - 3
        ok = np.all((nb >= 0) & (nb < np.array(shape)), axis=1)
        yield o, ok, np.ravel_multi_index(tuple(nb[ok].T), shape)


def _on_grid(shape):
    """(7^D, N): 1 where the coupling's neighbour lies on the grid, 0 where a stencil must be 0."""
    mask = np.zeros((7 ** len(shape), math.prod(shape)))
    for o, ok, _ in _neighbours(shape):
        mask[o, ok] = 1.0
    return mask


@pytest.mark.parametrize("shape,channels", APPLY_CASES, ids=lambda v: "x".join(map(str, v)))
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_stencil_products_are_the_references_bit_for_bit(shape, channels, dtype):
    """A x, and b - A x (b given, also b itself as the output)."""
    rng = np.random.default_rng(7)
    N, W = math.prod(shape), 7 ** len(shape)
    st = (rng.standard_normal((W, N)) * _on_grid(shape)).astype(dtype)
    for C in channels:
        x = rng.standard_normal((N, C))
        y = np.full_like(x, np.nan)
        _core.stencil_apply(list(shape), st, x, y)
        want = R.stencil_apply(st.astype(np.float64), x, shape)
        np.testing.assert_array_equal(y, want)
        b = rng.standard_normal((N, C))  # the residual b - A x: b minus the product, to the bit
        _core.stencil_apply(list(shape), st, x, y, b)
        np.testing.assert_array_equal(y, b - want)
        _core.stencil_apply(list(shape), st, x, b, b)  # in place
        np.testing.assert_array_equal(b, y)


def test_stencil_products_refuse_an_output_overlapping_the_input():
    buf = np.zeros((162, 1))
    st = np.zeros((49, 81))
    with pytest.raises(ValueError, match="y must not be x, nor overlap it"):
        _core.stencil_apply([9, 9], st, buf[:81], buf[1:82])
    _core.stencil_apply([9, 9], st, buf[:81], buf[81:])  # side by side in one buffer: fine



def test_stencil_residuals_refuse_a_partly_overlapping_b():
    buf = np.zeros((100, 1))
    st, x = np.zeros((49, 81)), np.zeros((81, 1))
    with pytest.raises(ValueError, match="b must be y or lie apart from it"):
        _core.stencil_apply([9, 9], st, x, buf[:81], buf[1:82])
    _core.stencil_apply([0, 9], np.zeros((49, 0)), np.zeros((0, 1)), np.zeros((0, 1)), np.zeros((0, 1)))  # empty


CHEB_CASES = [((40,), 1), ((9, 13), 1), ((9, 13), 3), ((140, 140), 2), ((4, 5, 6), 1), ((12, 11, 10), 4)]


def _smoother_problem(rng, shape, C):
    """An SPD-ish stencil (a diagonal that dominates), its inverse diagonal, b and a start."""
    N, W = math.prod(shape), 7 ** len(shape)
    st = rng.standard_normal((W, N)) * 0.1 * _on_grid(shape)
    st[(W - 1) // 2] = W * 0.2 + rng.random(N)
    st = st.astype(np.float32)
    return st, 1.0 / st[(W - 1) // 2].astype(np.float64), rng.standard_normal((N, C)), rng.standard_normal((N, C))


@pytest.mark.parametrize("shape,C", CHEB_CASES, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
@pytest.mark.parametrize("degree", [1, 3])
def test_chebyshev_smoother_is_the_reference_bit_for_bit(shape, C, degree):
    """From zero and from x, with and without the residual: reference.spline_chebyshev's bits."""
    rng = np.random.default_rng(9)
    st, dinv, b, x0 = _smoother_problem(rng, shape, C)
    theta, delta = 1.1, 0.9
    for start in (None, x0):
        for residual in (False, True):
            want = R.spline_chebyshev(st, dinv, b, start, shape, degree, theta, delta, residual)
            x = np.full_like(b, np.nan) if start is None else start.copy()
            res, work = np.full_like(b, np.nan), np.empty((2,) + b.shape)
            _core.spline_chebyshev(list(shape), st, dinv, b, degree, theta, delta, start is None, residual, x, res,
                                   work)
            if residual:
                np.testing.assert_array_equal(x, want[0])
                np.testing.assert_array_equal(res, want[1])
            else:
                np.testing.assert_array_equal(x, want)


def test_chebyshev_smoother_reduces_the_error_and_refuses_bad_arrays():
    """Its residual is b - A x and smaller than b's; the same bits on any thread count; bad arrays named."""
    rng = np.random.default_rng(10)
    shape, C = (20, 20), 1
    st, dinv, b, _ = _smoother_problem(rng, shape, C)
    A = st.astype(np.float64)
    x, res, work = np.zeros_like(b), np.empty_like(b), np.empty((2,) + b.shape)
    _core.spline_chebyshev(list(shape), st, dinv, b, 3, 1.0, 0.9, True, True, x, res, work)
    np.testing.assert_allclose(res, b - R.stencil_apply(A, x, shape), atol=1e-12)
    assert np.linalg.norm(res) < np.linalg.norm(b)
    N = math.prod(shape)
    args = dict(shape=list(shape), stencil=st, dinv=dinv, b=b, degree=3, theta=1.0, delta=0.9, zero_start=True,
                residual=False, x=x, res=res, work=work)
    for change, match in [(dict(stencil=st.astype(np.float64)), "float32"), (dict(degree=0), "degree"),
                          (dict(theta=0.5), "theta > delta"), (dict(delta=np.nan), "theta > delta"),
                          (dict(dinv=dinv[:-1]), "dinv"), (dict(res=x), "separate"), (dict(x=work[1]), "separate"),
                          (dict(work=work[:1]), "work"),
                          (dict(x=np.zeros((N, 2))[:, :1]), "C-contiguous"), (dict(shape=[20, 20, 1, 1]), "1 to 3")]:
        with pytest.raises(ValueError, match=match):
            _core.spline_chebyshev(**{**args, **change})
    big = (140, 140)  # several blocks of rows, on a team of threads or one
    st, dinv, b, _ = _smoother_problem(rng, big, 2)
    before = kronpe.get_num_threads()
    out = []
    try:
        for t in (1, 3):
            kronpe.set_num_threads(t)
            x, res, work = np.empty_like(b), np.empty_like(b), np.empty((2,) + b.shape)
            _core.spline_chebyshev(list(big), st, dinv, b, 3, 1.0, 0.9, True, True, x, res, work)
            out.append((x, res))
    finally:
        kronpe.set_num_threads(before)
    np.testing.assert_array_equal(out[0][0], out[1][0])
    np.testing.assert_array_equal(out[0][1], out[1][1])
    e = np.zeros((0, 1))  # an empty grid: nothing to do
    _core.spline_chebyshev([0, 3], np.zeros((49, 0), np.float32), np.zeros(0), e, 3, 1.0, 0.9, True, True, e.copy(),
                           e.copy(), np.zeros((2, 0, 1)))


@pytest.mark.parametrize("shape", [(2,), (5,), (4, 7), (3, 2, 6), (9, 8)], ids=lambda v: "x".join(map(str, v)))
def test_subdivision_and_restriction_are_the_references_bit_for_bit(shape):
    """Along every axis, with channels: reference.spline_subdivide / spline_restrict's bits; strided
    inputs through the solver's wrappers."""
    rng = np.random.default_rng(4)
    for C in (1, 3):
        c = rng.standard_normal(shape + (C,))
        for axis in range(len(shape)):
            np.testing.assert_array_equal(S.subdivide(c, axis), R.spline_subdivide(c, axis))
            f = rng.standard_normal(c.shape[:axis] + (2 * shape[axis] - 3,) + c.shape[axis + 1:])
            np.testing.assert_array_equal(S.restrict(f, axis), R.spline_restrict(f, axis))
            wide = np.zeros(c.shape[:-1] + (2 * C,))
            wide[..., ::2] = c  # a strided view
            np.testing.assert_array_equal(S.subdivide(wide[..., ::2], axis), R.spline_subdivide(c, axis))


def test_subdivision_bindings_refuse_bad_arrays():
    c, f = np.zeros((2, 5, 3)), np.zeros((2, 7, 3))
    _core.spline_subdivide(np.zeros((0, 5, 3)), np.zeros((0, 7, 3)))  # empty: nothing to do
    _core.spline_restrict(np.zeros((2, 7, 0)), np.zeros((2, 5, 0)))
    with pytest.raises(ValueError, match="axis 1 must have 7"):
        _core.spline_subdivide(c, np.zeros((2, 8, 3)))
    with pytest.raises(ValueError, match="at least 2"):
        _core.spline_subdivide(np.zeros((2, 1, 3)), np.zeros((2, 0, 3)))
    with pytest.raises(ValueError, match="C-contiguous"):
        _core.spline_subdivide(np.zeros((2, 5, 6))[:, :, ::2], f)
    with pytest.raises(ValueError, match="float64"):
        _core.spline_restrict(f.astype(np.float32), c)
    with pytest.raises(ValueError, match="\\(outer, n, inner\\)"):
        _core.spline_subdivide(np.zeros((5, 3)), np.zeros((7, 3)))
    buf = np.zeros(2 * 5 * 3 + 2 * 7 * 3)
    with pytest.raises(ValueError, match="must not overlap"):
        _core.spline_subdivide(buf[:30].reshape(2, 5, 3), buf[20:62].reshape(2, 7, 3))
    _core.spline_subdivide(buf[:30].reshape(2, 5, 3), buf[30:].reshape(2, 7, 3))  # side by side: fine

def _points(rng, nint, P):
    """P points in the box of a grid of unit intervals from 0: most uniform, a tenth in one cell
    (more than a batch of them), some on the box's faces and a few beyond it (clamped intervals)."""
    D = len(nint)
    box = np.asarray(nint, np.float64)
    pts = rng.random((P, D)) * box
    k = P // 10
    pts[:k] = (box // 2 + rng.random((k, D)) * 0.999)
    pts[k:k + 5] = 0.0
    pts[k + 5:k + 10] = box
    pts[k + 10:k + 14] = box * rng.choice([-0.01, 1.01], (4, D))
    return np.ascontiguousarray(pts)


NORMAL_CASES = [((23,), 400, 2), ((6, 9), 3000, 1), ((2, 7), 60, 3), ((3, 4, 11), 2500, 3), ((5, 5, 5), 700, 1),
                ((4, 4, 4), 4000, 2)]  # (the last: a cell of 400 points, more than a batch in 3-D)


@pytest.mark.parametrize("nint,P,C", NORMAL_CASES, ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_normal_equations_on_long_lines_and_full_cells(nint, P, C, weighted):
    """Against the dense reference; the stencil exactly symmetric (entry o of j is entry -o of its
    neighbour, to the bit)."""
    rng = np.random.default_rng(3)
    D = len(nint)
    g = S.Grid(nint, (0.0,) * D, 1.0)
    pts = _points(rng, nint, P)
    vals = rng.standard_normal((P, C))
    w = rng.random(P) + 0.5 if weighted else None
    st = np.zeros((7 ** D, math.prod(g.shape)))
    rhs = np.zeros((st.shape[1], C))
    _core.spline_normal(g.args(), pts, vals, w, st, rhs)
    st_ref, rhs_ref = R.spline_normal(pts, vals, nint, (0.0,) * D, 1.0, weights=w)
    np.testing.assert_allclose(st, st_ref, rtol=0, atol=1e-13 * np.abs(st_ref).max())
    np.testing.assert_allclose(rhs, rhs_ref, rtol=0, atol=1e-13 * np.abs(rhs_ref).max())
    for o, ok, nb in _neighbours(g.shape):  # symmetry: st[o, j] is st[W - 1 - o, j + shift(o)]
        np.testing.assert_array_equal(st[o, ok], st[7 ** D - 1 - o, nb])
        assert not st[o, ~ok].any()  # couplings beyond the grid: 0


@pytest.mark.parametrize("nint", [(97,), (40, 33), (9, 8, 10)], ids=lambda v: "x".join(map(str, v)))
def test_normal_equations_do_not_depend_on_the_thread_count(nint):
    rng = np.random.default_rng(11)
    D = len(nint)
    g = S.Grid(nint, (0.0,) * D, 1.0)
    pts = _points(rng, nint, 6000)
    vals, w = rng.standard_normal((6000, 2)), rng.random(6000)
    before = kronpe.get_num_threads()
    out = []
    try:
        for t in (1, 2, 3):
            kronpe.set_num_threads(t)
            st = np.zeros((7 ** D, math.prod(g.shape)))
            rhs = np.zeros((st.shape[1], 2))
            _core.spline_normal(g.args(), pts, vals, w, st, rhs)
            out.append((st, rhs))
    finally:
        kronpe.set_num_threads(before)
    for st, rhs in out[1:]:
        np.testing.assert_array_equal(st, out[0][0])
        np.testing.assert_array_equal(rhs, out[0][1])


# The digest of a set of kernel results, run here and in processes with lower vector paths.
_DIGEST = """
import hashlib, math, numpy as np
from kronpe import _core
from kronpe.solvers import spline as S
rng = np.random.default_rng(5)
h = hashlib.sha1()
for nint, P, C in [((37,), 500, 2), ((3, 2), 200, 1), ((61, 20), 5000, 3), ((9, 7, 12), 4000, 1), ((4, 3, 2), 300, 4)]:
    D = len(nint)
    g = S.Grid(nint, (0.0,) * D, 1.0)
    pts = rng.random((P, D)) * np.asarray(nint); vals = rng.standard_normal((P, C)); w = rng.random(P)
    st = np.zeros((7 ** D, math.prod(g.shape))); rhs = np.zeros((st.shape[1], C))
    _core.spline_normal(g.args(), pts, vals, w, st, rhs)
    h.update(st.tobytes()); h.update(rhs.tobytes())
for shape in [(50,), (19, 23), (7, 9, 11)]:
    N = math.prod(shape)
    for dt in (np.float32, np.float64):
        A = rng.standard_normal((7 ** len(shape), N)).astype(dt)
        for C in (1, 2, 3, 4, 5):
            x = rng.standard_normal((N, C)); y = np.empty_like(x)
            _core.stencil_apply(list(shape), A, x, y); h.update(y.tobytes())
            _core.stencil_apply(list(shape), A, x, y, x + 1.0); h.update(y.tobytes())
    A = rng.standard_normal((7 ** len(shape), N)).astype(np.float32); A[(A.shape[0] - 1) // 2] += 60
    b = rng.standard_normal((N, 2)); x = np.empty_like(b); res = np.empty_like(b); w = np.empty((2,) + b.shape)
    _core.spline_chebyshev(list(shape), A, 1.0 / A[(A.shape[0] - 1) // 2].astype(float), b, 3, 1.1, 0.9, True, True,
                           x, res, w)
    h.update(x.tobytes()); h.update(res.tobytes())
digest = h.hexdigest()
"""


@pytest.mark.parametrize("simd", ["avx2", "generic"])
def test_vector_paths_give_the_same_bits(simd):
    here = {}
    exec(_DIGEST, here)
    env = dict(os.environ, KRONPE_SIMD=simd)
    out = subprocess.run([sys.executable, "-c", _DIGEST + "\nprint(digest)"], capture_output=True, text=True,
                         env=env, timeout=300, check=True)
    assert out.stdout.strip().splitlines()[-1] == here["digest"]


@pytest.mark.parametrize("nint", [(5,), (4, 3), (3, 2, 4)], ids=lambda v: "x".join(map(str, v)))
def test_normal_equations_of_no_points_are_zero(nint):
    D = len(nint)
    g = S.Grid(nint, (0.0,) * D, 1.0)
    st = np.full((7 ** D, math.prod(g.shape)), 0.0)
    rhs = np.zeros((st.shape[1], 2))
    _core.spline_normal(g.args(), np.zeros((0, D)), np.zeros((0, 2)), None, st, rhs)
    assert not st.any() and not rhs.any()
