"""The thin-plate operator's kernels and the multigrid transfers against kronpe.reference, the
multigrid-preconditioned CG of kronpe.solvers.multigrid against dense solves, over the cases of
tests/_samples.py (stencil_cases, stencil_layout_cases); and the hierarchy on a CUDA device
(kronpe/cuda.h DeviceThinPlate, smooth_fill) against the host's, then the default fills of device
arrays against the same fills of host arrays (the ``cuda_device`` fixture: skipped without a GPU)."""
from __future__ import annotations

import numpy as np
import pytest

import kronpe
from _samples import (DEVICE_STENCIL_SHAPES, HIERARCHY_SHAPES, PENALTIES, ROW_WIDTHS, STENCIL_SHAPES,
                      THREADED_SHAPES, assert_close, device_stencil_problem, ids, penalty_form, penalty_kwargs,
                      stencil_cases, stencil_inputs, stencil_layout_cases)
from kronpe import _core, reference
from kronpe.solvers import multigrid, smooth
from kronpe.solvers.multigrid import COARSEST, ThinPlateMG, chebyshev_lmax, thin_plate_apply

CASES = list(stencil_cases())
LAYOUT_CASES = list(stencil_layout_cases())


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_apply_residual_diag_match_reference(rng, case, dtype):
    x, m, b = case.inputs(rng, dtype)
    pen, lam, shape = case.form, case.lam, case.shape
    want = reference.thin_plate_apply(x, m, lam, *pen)
    assert_close(multigrid.thin_plate_apply(x, m, lam, **case.kwargs), want, dtype, "stencils")
    out = np.empty_like(x)
    _core.thin_plate(x, m, lam, out, "residual", b, **case.kwargs)
    assert_close(out, b - want, dtype, "stencils")
    _core.thin_plate_diag(m, lam, out, **case.kwargs)
    assert_close(out, np.diag(reference.thin_plate_matrix(shape, m, lam, *pen)).reshape(shape), dtype, "stencils")


@pytest.mark.parametrize("penalty", ["natural", "reflect", "poly3", "order3"])
@pytest.mark.parametrize("width", ROW_WIDTHS)
def test_apply_matches_reference_at_every_row_width(rng, width, dtype, penalty):
    for shape in ((6, width), (1, 5, width)):
        x, m, b = stencil_inputs(rng, shape, dtype)
        pen = penalty_form(penalty, len(shape))
        lam = 0.37 if pen[1] == 2 else 0.037
        want = reference.thin_plate_apply(x, m, lam, *pen)
        assert_close(multigrid.thin_plate_apply(x, m, lam, **penalty_kwargs(pen)), want, dtype, "stencils")
        # a row of x offset by one float in memory (unaligned rows) gives the same values
        buf = np.empty(x.size + 1, dtype)[1:].reshape(shape)
        buf[...] = x
        np.testing.assert_array_equal(multigrid.thin_plate_apply(buf, m, lam, **penalty_kwargs(pen)),
                                      multigrid.thin_plate_apply(x, m, lam, **penalty_kwargs(pen)))


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_chebyshev_kernels_match_reference(rng, case, dtype):
    x, m, b = case.inputs(rng, dtype)
    pen = case.form
    lam, theta, c1, c2 = 0.21 if pen[1] == 2 else 0.021, 2.25, 0.4, 0.7
    for x0 in (x, None):
        r, d = np.empty_like(x), np.empty_like(x)
        _core.thin_plate_cheb_start(x0, b, m, lam, theta, r, d, **penalty_kwargs(pen))
        r_ref, d_ref = reference.thin_plate_cheb_start(x0, b, m, lam, theta, *pen)
        assert_close(r, r_ref, dtype, "stencils")
        assert_close(d, d_ref, dtype, "stencils")
    d_out = np.empty_like(x)
    x2 = x.copy()
    _core.thin_plate_cheb_step(d, r, x2, m, lam, c1, c2, d_out, **penalty_kwargs(pen))
    r_ref, x_ref, d_ref = reference.thin_plate_cheb_step(d_ref, r_ref, x, m, lam, c1, c2, *pen)
    assert_close(r, r_ref, dtype, "stencils")
    assert_close(x2, x_ref, dtype, "stencils")
    assert_close(d_out, d_ref, dtype, "stencils")


@pytest.mark.parametrize("shape", [s for s in STENCIL_SHAPES if all(n > 0 for n in s)] + [(0, 5), (4, 0, 3)], ids=str)
def test_grid_transfers_match_reference(rng, shape, dtype):
    for axis in range(len(shape)):
        n = shape[axis]
        f = rng.standard_normal(shape).astype(dtype)
        cs = list(shape)
        cs[axis] = n // 2 + 1 if n else 1
        if n == 0:
            continue
        c = np.empty(cs, dtype)
        _core.grid_transfer(f, c, axis, True)
        assert_close(c, reference.grid_transfer(f, axis, True, n), dtype, "stencils")
        back = np.empty(shape, dtype)
        _core.grid_transfer(c, back, axis, False)
        assert_close(back, reference.grid_transfer(c, axis, False, n), dtype, "stencils")
        acc = f.copy()  # add=True: the correction added in place
        _core.grid_transfer(c, acc, axis, False, True)
        assert_close(acc, f + reference.grid_transfer(c, axis, False, n), dtype, "stencils")


@pytest.mark.parametrize("shape", [(513,), (130, 97), (20, 24, 18)], ids=str)
def test_full_multigrid_start_is_close_to_the_solution(rng, shape):
    """fmg (b restricted to the coarsest grid and corrected on the way up) lands within 20%
    of the exact solution (1-4% in 1-D and 2-D), well within one V-cycle from zero, and CG from it stops
    sooner than from zero."""
    m = (rng.random(shape) < 0.3).astype(np.float64)
    u = np.cumsum(np.cumsum(rng.standard_normal(shape), axis=0), axis=-1)  # a rough, smooth-ish field
    b = m * u
    lam = 1e-2
    mg = ThinPlateMG(m, lam, dtype=np.float64)
    assert len(mg.levels) > 2
    exact = mg.solve(b, np.zeros(shape), 1e-11, 500)[0]  # PCG = dense solve: test_pcg_matches_dense_solve
    err = lambda x: np.linalg.norm(x - exact) / np.linalg.norm(exact)  # noqa: E731
    x_fmg = mg.fmg(b).copy()
    assert err(x_fmg) < 0.2 and err(x_fmg) < 0.5 * err(mg.vcycle(b))
    out = np.empty(shape)
    assert mg.fmg(b, out) is out and np.array_equal(out, x_fmg)
    _, it_fmg, _ = mg.solve(b, None, 1e-6, 200)
    _, it_zero, _ = mg.solve(b, np.zeros(shape), 1e-6, 200)
    assert it_fmg < it_zero


@pytest.mark.parametrize("case", LAYOUT_CASES, ids=ids(LAYOUT_CASES))
def test_apply_takes_any_layout(rng, case, dtype):
    """The thin-plate form of x and m in any layout against the reference: on planes at row widths
    around the 16-lane vectors (the factored rows: L v of the next row and L (L v) of this one in
    one pass), and on a volume."""
    x, m, _ = case.inputs(rng, dtype)
    got = multigrid.thin_plate_apply(*case.views(x, m), case.lam, **case.kwargs)
    assert_close(got, reference.thin_plate_apply(x, m, case.lam, *case.form), dtype, "stencils")


def test_kernels_refuse_bad_arrays(rng):
    x = np.zeros((4, 5), np.float32)
    out = np.empty_like(x)
    with pytest.raises(ValueError, match="C-contiguous"):
        _core.thin_plate(x.T.copy().T, x, 1.0, out)
    with pytest.raises(ValueError, match="shape"):
        _core.thin_plate(x, np.zeros((5, 4), np.float32), 1.0, out)
    with pytest.raises(ValueError, match="dtype"):
        _core.thin_plate(x, x.astype(np.float64), 1.0, out)
    with pytest.raises(ValueError, match="1 to 3 axes"):
        _core.thin_plate(np.zeros((2,) * 4), np.zeros((2,) * 4), 1.0, np.zeros((2,) * 4))
    with pytest.raises(ValueError, match="residual needs b"):
        _core.thin_plate(x, x, 1.0, out, "residual")
    with pytest.raises(ValueError, match="d_out must not be d"):
        _core.thin_plate_cheb_step(x, out, out.copy(), x, 1.0, 0.5, 0.5, x)
    with pytest.raises(ValueError, match="n // 2 \\+ 1"):
        _core.grid_transfer(x, np.zeros((4, 4), np.float32), 1, True)


@pytest.mark.parametrize("penalty", list(PENALTIES))
@pytest.mark.parametrize("shape,lam", [((37,), 0.3), ((33, 40), 1e-3), ((31, 17), 1.0), ((12, 11, 10), 1e-2), ((2, 70), 0.1)],
                         ids=str)
def test_pcg_matches_dense_solve(rng, shape, lam, penalty):
    m = (rng.random(shape) < 0.3).astype(np.float64)
    b = m * rng.standard_normal(shape)
    pen = penalty_form(penalty, len(shape))
    want = np.linalg.solve(reference.thin_plate_matrix(shape, m, lam, *pen), b.ravel()).reshape(shape)
    mg = ThinPlateMG(m, lam, dtype=np.float64, **penalty_kwargs(pen))
    assert len(mg.levels) > 1 or np.prod(shape) <= multigrid.COARSEST
    x, its, rel = mg.solve(b, None, 1e-10, 200)
    assert rel <= 1e-10
    np.testing.assert_allclose(x, want, rtol=0, atol=1e-7 * np.abs(want).max())
    # the V-cycle makes CG converge in a few tens of iterations at most (order 3: its smoothing is weaker)
    assert its < (40 if pen[1] == 2 else 60)


def test_vcycle_is_a_symmetric_preconditioner(rng):
    shape = (29, 34)
    m = (rng.random(shape) < 0.25).astype(np.float64)
    mg = ThinPlateMG(m, 1e-2, dtype=np.float64)
    u, v = rng.standard_normal(shape), rng.standard_normal(shape)
    Mu = mg.vcycle(u).copy()
    Mv = mg.vcycle(v).copy()
    assert abs(np.vdot(Mu, v) - np.vdot(u, Mv)) < 1e-10 * np.linalg.norm(Mu) * np.linalg.norm(v)
    assert np.vdot(Mu, u) > 0


def test_iterations_do_not_grow_with_the_grid(rng):
    """The multigrid preconditioner's point: about as many iterations on 256^2 as on 64^2."""
    its = []
    for n in (64, 256):
        m = (np.random.default_rng(0).random((n, n)) < 0.25).astype(np.float32)
        y = np.sin(np.linspace(0, 6, n))[:, None] * np.cos(np.linspace(0, 4, n))[None, :]
        _, it, _ = ThinPlateMG(m, 1e-3).solve((m * y).astype(np.float32), None, 1e-4, 100)
        its.append(it)
    assert its[1] <= its[0] + 3, its


@pytest.mark.parametrize("D", [1, 3])
def test_smooth_defaults_fit_scattered_points_in_1d_and_3d(D):
    """fit_points' defaults off any lattice (sparse data term, multigrid on its lumped diagonal,
    lambda held out among the points) in 1-D and 3-D."""
    from kronpe import fit_points

    rng = np.random.default_rng(5)
    f = lambda p: np.cos(2.0 * p.sum(axis=1)) + 0.3 * p[:, 0]  # noqa: E731
    pts = rng.random((400 if D == 1 else 3000, D))
    test = rng.random((300, D)) * 0.8 + 0.1
    m = fit_points(pts, f(pts))
    assert m.info["grid"].startswith("NODES_PER_SPACING") and m.weights.ndim == D
    assert "holdout_errors" in m.info and m.info["converged"]
    err = np.sqrt(np.mean((m.predict(test) - f(test)) ** 2))
    assert err < (1e-3 if D == 1 else 0.02), err


def test_smooth_defaults_on_a_lattice_volume():
    """A 3-D grid with holes: fit_grid(mask=) through the multigrid path fills a smooth volume."""
    from kronpe import fit_grid

    n = (12, 14, 10)
    x = [np.arange(k) / k for k in n]
    vol = np.sin(3 * x[0])[:, None, None] + np.cos(2 * x[1])[None, :, None] * x[2][None, None, :]
    mask = np.random.default_rng(0).random(n) < 0.3
    m = fit_grid(np.where(mask, vol, np.nan), mask=mask)
    filled = m.predict_grid([np.arange(k) / k for k in n])
    assert np.sqrt(np.mean((filled[~mask] - vol[~mask]) ** 2)) < 0.02


@pytest.mark.parametrize("penalty", list(PENALTIES))
@pytest.mark.parametrize("shape", HIERARCHY_SHAPES, ids=str)
def test_compiled_vcycle_and_fmg_match_reference(rng, shape, dtype, penalty):
    """The compiled hierarchy (kronpe/multigrid.h) against reference.thin_plate_vcycle / _fmg:
    grids, coarse data terms (and weights), one V-cycle, full multigrid; m with zeros (nodes
    without data)."""
    m = (rng.random(shape) < 0.4) * rng.random(shape)
    b = rng.standard_normal(shape)
    lam = 0.05
    pen = penalty_form(penalty, len(shape))
    mg = ThinPlateMG(m, lam, dtype=dtype, **penalty_kwargs(pen))
    want_levels = reference.thin_plate_hierarchy(m, multigrid.COARSEST)
    assert mg.levels == [lv[0].shape for lv in want_levels]
    for lev, (mm, _) in enumerate(want_levels):
        assert_close(np.array(mg._h.data_term(lev)).reshape(mm.shape), mm, dtype, "stencils")
    kw = dict(degree=mg.degree, lmax=mg.lmax, alpha=mg.alpha, coarsest=multigrid.COARSEST, **penalty_kwargs(pen))
    v = reference.thin_plate_vcycle(b, m, lam, **kw)
    f = reference.thin_plate_fmg(b, m, lam, **kw)
    tol = 1e-9 if dtype == np.float64 else 2e-3
    for got, want in ((mg.vcycle(b.astype(dtype)), v), (mg.fmg(b.astype(dtype)), f)):
        assert got.dtype == dtype and got.shape == shape
        np.testing.assert_allclose(got, want, rtol=0, atol=tol * max(1.0, np.abs(want).max()))



@pytest.mark.parametrize("penalty", ["natural", "reflect", "order3w"])
@pytest.mark.parametrize("shape,degree", [((70,), None), ((300,), None), ((30, 17), None), ((2, 40), None),
                                          ((9, 10, 11), None), ((30, 17), 1), ((30, 17), 2), ((300,), 1)],
                         ids=str)
def test_cycles_are_relaxed_vcycles_from_x(rng, shape, degree, dtype, penalty):
    """ThinPlateMG.cycles (the lambda sweep's stationary steps): each step x + omega V (b - A x),
    against reference.thin_plate_vcycle and the reference operator; from fmg(b) without x0. The
    over-relaxation is fused into the finest smoothers (the last step's row kernel; degree 1: the
    start's stage of its own)."""
    m = (rng.random(shape) < 0.4) * rng.random(shape)
    b, x0 = rng.standard_normal(shape), rng.standard_normal(shape)
    lam = 0.05
    pen = penalty_form(penalty, len(shape))
    mg = ThinPlateMG(m, lam, dtype=dtype, degree=degree, **penalty_kwargs(pen))
    kw = dict(degree=mg.degree, lmax=mg.lmax, alpha=mg.alpha, coarsest=multigrid.COARSEST, **penalty_kwargs(pen))
    tol = 1e-9 if dtype == np.float64 else 2e-3
    for omega in (1.0, 1.3):
        want = x0.copy()
        for _ in range(2):
            r = b - reference.thin_plate_apply(want, m, lam, *pen)
            want = want + omega * reference.thin_plate_vcycle(r, m, lam, **kw)
        x0c = x0.astype(dtype)
        got = mg.cycles(b.astype(dtype), x0c, 2, omega)
        assert got.dtype == dtype and got.shape == shape
        np.testing.assert_array_equal(x0c, x0.astype(dtype))  # x0 is not written
        np.testing.assert_allclose(got, want, rtol=0, atol=tol * max(1.0, np.abs(want).max()))
    f = reference.thin_plate_fmg(b, m, lam, **kw)
    np.testing.assert_allclose(mg.cycles(b.astype(dtype), None, 0), f, rtol=0, atol=tol * max(1.0, np.abs(f).max()))
    # non-contiguous b and x0 (every other element of arrays twice as long along the last axis)
    wide = (slice(None),) * (len(shape) - 1) + (slice(None, None, 2),)
    bs = np.repeat(b.astype(dtype), 2, axis=-1)[wide]
    xs = np.repeat(x0.astype(dtype), 2, axis=-1)[wide]
    assert not bs.flags.c_contiguous
    np.testing.assert_array_equal(mg.cycles(bs, xs, 2, 1.3), mg.cycles(b.astype(dtype), x0.astype(dtype), 2, 1.3))


def test_cycles_converge_to_the_dense_solution(rng):
    shape = (33, 40)
    m = (rng.random(shape) < 0.3).astype(np.float64)
    b = m * rng.standard_normal(shape)
    want = np.linalg.solve(reference.thin_plate_matrix(shape, m, 1e-2), b.ravel()).reshape(shape)
    mg = ThinPlateMG(m, 1e-2, dtype=np.float64)
    err = [np.abs(mg.cycles(b, None, k, 1.3) - want).max() for k in (1, 10, 60)]
    assert err[2] < 1e-8 * np.abs(want).max() and err[2] < err[1] < err[0], err


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("degree", [1, 2, 3])
@pytest.mark.parametrize("shape", [(37,), (64, 60), (12, 11, 10), (300, 200)], ids=str)
def test_cycles_from_another_array_are_the_cycles_in_place(rng, shape, degree, threads, dtype):
    """cycles_from (the held-out sweep's steps: the smoother reads its start from the fit before,
    no copy of it first) gives the bits of copying the start and cycling in place, over-relaxed
    or not, one cycle or two, on 1 to 3 axes, one or two threads, float32 and float64; the start
    is left as it was; bad arguments (x aliasing b or the start, no cycle, a strided start or x,
    another dtype) are named errors."""
    m = (rng.random(shape) < 0.5).astype(dtype)
    b = (m * rng.random(shape)).astype(dtype)
    mg = ThinPlateMG(m, 1e-3, dtype=dtype, reflect=True, degree=degree, alpha=4.0, threads=threads)
    x0 = mg.fmg(b)
    keep = x0.copy()
    for omega in (1.0, 1.3):
        for count in (1, 2):
            want = x0.copy()
            mg._h.cycles(b, want, True, count, omega)
            got = np.full_like(x0, np.nan)
            mg._h.cycles_from(b, x0, got, count, omega)
            np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(x0, keep)
    with pytest.raises(ValueError, match="must not be b or start"):
        mg._h.cycles_from(b, x0, x0, 1, 1.3)
    with pytest.raises(ValueError, match="a cycle or more"):
        mg._h.cycles_from(b, x0, np.empty_like(x0), 0, 1.3)
    wide = np.zeros(shape[:-1] + (2 * shape[-1],), dtype)
    for start, x in ((wide[..., ::2], np.empty_like(x0)), (x0, wide[..., ::2])):
        with pytest.raises(ValueError):
            mg._h.cycles_from(b, start, x, 1, 1.3)
    other = np.float64 if dtype == np.float32 else np.float32
    with pytest.raises((ValueError, TypeError)):
        mg._h.cycles_from(b, x0.astype(other), np.empty_like(x0), 1, 1.3)


@pytest.mark.parametrize("shape", [(37,), (33, 40), (12, 11, 10)], ids=str)
def test_pcg_with_an_operator_function_follows_the_built_in_one(rng, shape):
    """The compiled PCG on the hierarchy's own matrix and on the same matrix given as a function
    (the path of data terms off the nodes): the same iterations, solutions and estimates; with
    tol <= 0 no estimate (NaN) after exactly maxiter iterations."""
    m = (rng.random(shape) < 0.3).astype(np.float64)
    b = m * rng.standard_normal(shape)
    mg = ThinPlateMG(m, 1e-3, dtype=np.float64, reflect=True)

    def op(v):
        return multigrid.thin_plate_apply(v, m, 1e-3, reflect=True)

    for tol, scale in ((1e-6, None), (1e-4, 3.0)):
        x, its, rel = mg.solve(b, None, tol, 100, scale=scale)
        x2, its2, rel2 = mg.solve(b, None, tol, 100, op, scale=scale)
        assert its == its2 and rel <= tol
        np.testing.assert_allclose(rel, rel2, rtol=1e-8)
        np.testing.assert_allclose(x, x2, rtol=0, atol=1e-10 * np.abs(x).max())
    for operator in (None, op):
        x, its, rel = mg.solve(b, None, 0.0, 3, operator)
        assert its == 3 and np.isnan(rel)
    # the operator sees a read-only view; a wrong result or an exception is a named error
    seen = []
    mg.solve(b, None, 1e-3, 2, lambda v: seen.append(v.flags.writeable) or op(v))
    assert seen and not any(seen)
    with pytest.raises(ValueError, match="operator must return A v"):
        mg.solve(b, None, 1e-3, 5, lambda v: np.zeros(3))
    with pytest.raises(ZeroDivisionError):
        mg.solve(b, None, 1e-3, 5, lambda v: 1 / 0)
    with pytest.raises(ValueError, match="operator must be callable"):
        mg._h.pcg(b, np.zeros_like(b), True, 1e-3, 5, 0.0, 3)

@pytest.mark.parametrize("shape, lam", [((200,), 1e-4), ((64, 60), 1e-5), ((64, 60), 1e-2), ((20, 18, 16), 1e-3)],
                         ids=str)
def test_pcg_predicted_stop_skips_only_the_measuring_vcycle(rng, shape, lam, dtype):
    """The predicted stop (multigrid.py): CG ends after the update the estimates' rate says reaches
    tol, without the V-cycle that would measure it (not on one axis). On these grids it ends after
    the same iterations as the measured stop, so with the same bits, and the estimate it reports
    (an expectation) is within a factor 2 of the one measured at its result."""
    axes = np.meshgrid(*[np.linspace(0, 1, n) for n in shape], indexing="ij")
    y = np.sin(5 * axes[0]) * np.cos(3 * axes[-1]) + 0.05 * rng.standard_normal(shape)
    m = (rng.random(shape) < 0.5).astype(dtype)
    b = (m * y).astype(dtype)
    mg = ThinPlateMG(m, lam, dtype=dtype, reflect=True, degree=2, alpha=4.0)
    predicted = 0
    for tol in (1e-2, 3e-3, 1e-3, 3e-4, 1e-4, 1e-5):
        mg._h.set_predicted_stop(False)
        x0, i0, e0 = mg.solve(b, None, tol, 100)
        mg._h.set_predicted_stop(True)
        x1, i1, e1 = mg.solve(b, None, tol, 100)
        mg._h.set_predicted_stop(False)
        measured = mg.solve(b, x1, 1e-30, 0)[2]  # the estimate at x1, measured
        assert i1 == i0 and e0 <= tol, (tol, i0, i1)
        np.testing.assert_array_equal(x1, x0)
        assert e1 <= tol and measured <= tol and 0.5 <= e1 / measured <= 2.0, (tol, e1, measured)
        predicted += e1 != e0
    # with two axes or more the reported estimate was an expectation (the measuring V-cycle
    # skipped) at most tolerances; on one axis it is always measured
    assert predicted >= 3 if len(shape) > 1 else predicted == 0


@pytest.mark.parametrize("penalty", list(PENALTIES))
@pytest.mark.parametrize("shape", THREADED_SHAPES, ids=str)
def test_smoother_wavefront_same_bits_for_any_thread_count(rng, shape, penalty):
    """The fused smoother (thin_plate_smooth: a wavefront over rows, the rows at each thread
    block's boundary finished afterwards) and CG (dot products summed block by block in order)
    give the same bits with 1, 2 and 3 threads (one thread: the reference on the smaller grids
    above)."""
    m = ((rng.random(shape) < 0.5) * rng.random(shape)).astype(np.float32)
    b = rng.standard_normal(shape).astype(np.float32)
    outs = []
    for threads in (1, 2, 3):
        pen = penalty_form(penalty, len(shape))
        h = _core.ThinPlateHierarchy32(m, multigrid.DEGREE, multigrid.chebyshev_lmax(len(shape), pen[1], pen[2]),
                                       multigrid.ALPHA, multigrid.COARSEST, pen[0], threads, pen[1], pen[2])
        h.set_lambda(0.01)
        v, f, x = np.empty_like(b), np.empty_like(b), np.empty_like(b)
        h.vcycle(b, v)
        h.fmg(b, f, 1)
        its = h.pcg(b, x, False, 1e-6, 5)  # CG's dot products and updates are split among threads too
        c = b * 0.5
        h.cycles(b, c, True, 2, 1.3)
        outs.append((v, f, x, its, c))
    for v, f, x, its, c in outs[1:]:
        np.testing.assert_array_equal(v, outs[0][0])
        np.testing.assert_array_equal(f, outs[0][1])
        np.testing.assert_array_equal(x, outs[0][2])
        np.testing.assert_array_equal(c, outs[0][4])
        assert its == outs[0][3]

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, -1e-30])
@pytest.mark.parametrize("at", [0, 63, 64, 200, 255, 256, 399])
def test_data_term_check_finds_one_bad_value(dtype, bad, at):
    """The data term's check (blocks of 256 values and a tail: 20 x 20 = 1 block + 144) names one
    NaN, Inf or negative value wherever it is, at construction and in set_data; -0 and the
    largest finite value pass."""
    m = np.ones((20, 20), dtype)
    mg = ThinPlateMG(m, 0.1, dtype=dtype)
    m.flat[at] = bad
    with pytest.raises(ValueError, match="m must be finite and >= 0"):
        ThinPlateMG(m, dtype=dtype)
    with pytest.raises(ValueError, match="m must be finite and >= 0"):
        mg.set_data(m)
    m.flat[at] = np.finfo(dtype).max  # the largest finite value passes
    mg.set_data(m)
    m.flat[at] = -0.0
    mg.set_data(m)


def test_hierarchy_refuses_bad_input():
    with pytest.raises(ValueError, match="at least one node"):
        ThinPlateMG(np.zeros((0, 4)))
    with pytest.raises(ValueError, match="m must be finite and >= 0"):
        ThinPlateMG(np.full((5, 5), -1.0))
    mg = ThinPlateMG(np.ones((9, 8)), 0.1)
    with pytest.raises(ValueError, match="finest grid's shape"):
        mg._h.vcycle(np.zeros((8, 9), np.float32), np.zeros((8, 9), np.float32))
    with pytest.raises(ValueError, match="float32"):
        mg._h.vcycle(np.zeros((9, 8)), np.zeros((9, 8)))
    b = np.zeros((9, 8), np.float32)
    with pytest.raises(ValueError, match="x must not be b"):
        mg._h.pcg(b, b, True, 1e-3, 10)
    with pytest.raises(ValueError, match="x must not be b"):
        mg._h.vcycle(b, b)
    with pytest.raises(ValueError, match="x must not be b"):
        mg._h.cycles(b, b, True, 1)
    with pytest.raises(ValueError, match="omega must be in"):
        mg._h.cycles(b, np.zeros_like(b), True, 1, 2.5)
    with pytest.raises(ValueError, match="omega must be in"):
        mg.cycles(b, None, 1, 0.0)
    with pytest.raises(ValueError, match="cycles must be >= 0"):
        mg._h.cycles(b, np.zeros_like(b), True, -1)
    with pytest.raises(ValueError, match="set_ridge"):
        ThinPlateMG(np.ones((9, 8))).solve(b)


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 1000, 4099, 32768, 32769, 200003])  # blocks of 32768
def test_dot_matches_reference(rng, n, dtype):
    a = rng.standard_normal(n).astype(dtype)
    b = rng.standard_normal(n).astype(dtype)
    want = reference.dot(a, b)
    assert abs(_core.dot(a, b) - want) <= 1e-12 * max(1.0, float(np.abs(a).dot(np.abs(b))))
    assert _core.dot(a.reshape(1, n), b.reshape(1, n)) == pytest.approx(want, abs=1e-9)


def test_dot_refuses_bad_arrays():
    a = np.zeros((4, 6), np.float32)
    with pytest.raises(ValueError, match="C-contiguous"):
        _core.dot(a[:, ::2], a[:, ::2])
    with pytest.raises(ValueError, match="shape"):
        _core.dot(a, a[:3])
    with pytest.raises(ValueError, match="dtype"):
        _core.dot(a, a.astype(np.float64))


# (70001, 3), (150001, 1): split among threads (64k values per thread)
MASKED_SHAPES = [(0, 3), (1, 1), (7, 3), (100, 1), (100, 2), (100, 4), (1000, 3), (33, 0), (70001, 3), (150001, 1)]


@pytest.mark.parametrize("planar", [False, True], ids=["interleaved", "planar"])
@pytest.mark.parametrize("shape", MASKED_SHAPES, ids=str)
def test_masked_fill_matches_reference(rng, shape, dtype, planar):
    """_core.masked_fill (one pass: zero the unobserved values, per-channel range of the observed
    ones, count of non-finite observed values; out (n, C) or planar (C, n)) against
    reference.masked_fill."""
    s = rng.standard_normal(shape).astype(dtype)
    mask = rng.random(shape[0]) < 0.5
    if shape[0] > 1:
        s[~mask] = np.nan  # unobserved values may be anything
    out = np.full(shape[::-1] if planar else shape, 7, dtype)
    lo, hi, bad = _core.masked_fill(s, mask.view(np.uint8), out, planar)
    want, wlo, whi, wbad = reference.masked_fill(s, mask, planar)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(np.asarray(lo, dtype), wlo)
    np.testing.assert_array_equal(np.asarray(hi, dtype), whi)
    assert bad == wbad == 0
    if mask.any() and shape[1]:
        for i in (int(np.flatnonzero(mask)[-1]), int(np.flatnonzero(mask)[0])):  # the last block's, the first's
            s[i, -1] = np.inf
        assert _core.masked_fill(s, mask.view(np.uint8), out, planar)[2] == reference.masked_fill(s, mask)[3] == \
            (1 if mask.sum() == 1 else 2)


def test_masked_signal_strided_and_bad_values(rng, dtype):
    """The fit's entry point: any memory layout of the signal, channel axes kept, non-finite observed
    values a named error, non-finite unobserved ones allowed."""
    from kronpe.solvers.grid import masked_signal

    base = rng.standard_normal((40, 3, 30)).astype(dtype)
    s = base.transpose(0, 2, 1)[:, ::2]  # (40, 15, 3), not contiguous
    mask = rng.random((40, 15)) < 0.3
    s[~mask] = np.nan
    out, lo, hi = masked_signal(s, mask)
    assert out.shape == s.shape and out.dtype == dtype
    np.testing.assert_array_equal(out, np.where(mask[..., None], s, 0))
    np.testing.assert_array_equal(lo, s[mask].min(axis=0))
    np.testing.assert_array_equal(hi, s[mask].max(axis=0))
    planes, plo, phi = masked_signal(s, mask, planar=True)
    assert planes.shape == (3, 40, 15) and planes.flags.c_contiguous
    np.testing.assert_array_equal(planes, np.moveaxis(np.where(mask[..., None], s, 0), -1, 0))
    np.testing.assert_array_equal(plo, lo)
    s[np.argwhere(mask)[0][0], np.argwhere(mask)[0][1], 1] = np.nan
    with pytest.raises(ValueError, match=r"signal \(where mask is True\) must be finite, found NaN"):
        masked_signal(s, mask)
    with pytest.raises(ValueError, match="out must have s's shape"):
        _core.masked_fill(np.zeros((4, 2), dtype), np.ones(4, np.uint8), np.zeros((4, 3), dtype))
    with pytest.raises(ValueError, match="out must not overlap s"):
        z = np.zeros((4, 2), dtype)
        _core.masked_fill(z, np.ones(4, np.uint8), z)
    with pytest.raises(ValueError, match=r"out must have shape \(C, n\)"):
        _core.masked_fill(np.zeros((4, 2), dtype), np.ones(4, np.uint8), np.zeros((4, 2), dtype), True)


@pytest.mark.parametrize("n", [0, 1, 7, 1000, 70001])
@pytest.mark.parametrize("cin,cout", [(1, 1), (3, 3), (3, 1), (2, 4), (5, 5)])
@pytest.mark.parametrize("interleaved", [False, True], ids=["planes", "interleaved"])
def test_mix_channels_and_dots_match_reference(rng, n, cin, cout, interleaved, dtype):
    """_core.mix_channels (the fill's change of channel basis, with the clip to a range) gives the
    bits of the NumPy multiply-adds in k order, planes or an interleaved output, any thread count;
    _core.dots every inner product as dot does."""
    ins = [rng.standard_normal(n).astype(dtype) for _ in range(cin)]
    v = rng.standard_normal((cin, cout)).astype(dtype)
    lo, hi = (-0.5 * np.ones(cout, dtype), 0.7 * np.ones(cout, dtype))
    for clip in (False, True):
        want, wout = reference.mix_channels(ins, v, *((lo, hi) if clip else (None, None)))
        if interleaved:
            out = np.full((n, cout), 9, dtype)
            outs = list(out.T)
        else:
            outs = [np.full(n, 9, dtype) for _ in range(cout)]
        got = _core.mix_channels(ins, v, outs, *((lo, hi) if clip else (None, None)))
        assert got == wout and (clip or got == 0)
        for c in range(cout):
            np.testing.assert_array_equal(outs[c], want[c])
    S = np.array(_core.dots(ins)).reshape(cin, cin)
    np.testing.assert_allclose(S, reference.dots(ins), rtol=1e-12, atol=1e-12 * max(1, n))
    for i in range(cin):
        for j in range(cin):
            assert S[i, j] == _core.dot(ins[i], ins[j])  # dot's sums, symmetric


def test_mix_channels_refuses_bad_arguments():
    a = np.zeros(10, np.float32)
    with pytest.raises(ValueError, match="v must be C-contiguous"):
        _core.mix_channels([a, a], np.zeros((3, 1), np.float32), [np.zeros(10, np.float32)])
    with pytest.raises(ValueError, match="outputs must not overlap inputs"):
        _core.mix_channels([a], np.ones((1, 1), np.float32), [a])
    with pytest.raises(ValueError, match="one size"):
        _core.mix_channels([a, np.zeros(11, np.float32)], np.ones((2, 1), np.float32), [np.zeros(10, np.float32)])
    with pytest.raises(ValueError, match="dtype"):
        _core.mix_channels([a], np.ones((1, 1), np.float32), [np.zeros(10)])
    with pytest.raises(ValueError, match="lo and hi go together"):
        _core.mix_channels([a], np.ones((1, 1), np.float32), [np.zeros(10, np.float32)], np.zeros(1, np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        _core.dots([np.zeros(20, np.float32)[::2]])


def test_work_cache_reuses_a_hierarchy_memory(rng):
    """The solver's work arrays go back to a bounded cache when a hierarchy dies and the next one
    of the same grid takes them (no fresh pages to fault in); results unchanged."""
    m = (rng.random((300, 260)) < 0.5).astype(np.float32)
    b = rng.standard_normal(m.shape).astype(np.float32)
    _core._tuning.work_cache(clear=True)
    assert _core._tuning.work_cache() == 0
    first = ThinPlateMG(m, 0.01).vcycle(b)  # the hierarchy is dropped at once
    kept = _core._tuning.work_cache()
    assert kept >= 9 * m.size * 4  # at least the finest level's arrays
    mg = ThinPlateMG(m, 0.01)
    assert _core._tuning.work_cache() < kept  # taken back
    np.testing.assert_array_equal(mg.vcycle(b), first)
    del mg
    assert _core._tuning.work_cache(clear=True) == 0
    assert _core._tuning.work_cache() <= 256 << 20


# ---- the Laplacian-power form (order 3, axis weights) ----------------------------------------------


@pytest.mark.parametrize("ndim,order,weights,top,tail", [
    (1, 3, None, 1.0, 0.0), (2, 3, (0.5, 2.0), 1.0, 0.0), (3, 3, (0.6, 1.0, 1.0), 1.0, 0.0),
    (3, 2, (1.0, 0.3, 1.0), 1.0, 0.0), (2, 2, (1.0, 1.0), 1.0, 0.0),
    (2, 3, None, 0.1, 1.0), (1, 3, None, 0.5, 2.0), (3, 2, (1.0, 0.3, 1.0), 1.0, 0.5)])
def test_chebyshev_bound_is_gershgorins(ndim, order, weights, top, tail):
    """chebyshev_lmax (separable, (top |L_w|^q + tail |L_w|^(q-1)) 1 over diag(R)) equals the dense
    Gershgorin bound of diag(R)^-1 R on a grid with interior rows, and bounds the largest
    eigenvalue of diag(A)^-1 A."""
    shape = (2 * order + 3,) * ndim
    R = reference.thin_plate_matrix(shape, np.zeros(shape), 1.0, True, order, weights, top, tail)
    d = np.diag(R)
    gershgorin = float(np.max(np.abs(R).sum(axis=1) / d))
    assert multigrid.chebyshev_lmax(ndim, order, weights, top, tail) == pytest.approx(gershgorin, rel=1e-12)
    big = (11, 13, 9)[:ndim]
    m = (np.random.default_rng(0).random(big) < 0.3).astype(float)
    A = reference.thin_plate_matrix(big, m, 0.05, True, order, weights, top, tail)
    largest = np.max(np.linalg.eigvals(A / np.diag(A)[:, None]).real)
    assert largest <= multigrid.chebyshev_lmax(ndim, order, weights, top, tail) * (1 + 1e-9)


def test_set_weights_is_a_new_hierarchy(rng):
    """set_weights on a hierarchy (coarse weights, diagonals, coarsest factorisation, Chebyshev
    bound) gives the bits of one built with those weights."""
    shape = (17, 20, 9)
    m = (rng.random(shape) < 0.4).astype(np.float32)
    b = rng.standard_normal(shape).astype(np.float32)
    a = ThinPlateMG(m, 1e-3, order=3, reflect=True).set_weights((0.4, 1.0, 2.5))
    fresh = ThinPlateMG(m, 1e-3, order=3, reflect=True, weights=(0.4, 1.0, 2.5))
    assert a.lmax == fresh.lmax
    np.testing.assert_array_equal(a.vcycle(b), fresh.vcycle(b))
    np.testing.assert_array_equal(a.solve(b, None, 1e-5, 50)[0], fresh.solve(b, None, 1e-5, 50)[0])


def test_power_form_refuses_bad_penalties():
    x = np.zeros((4, 5), np.float32)
    out = np.empty_like(x)
    with pytest.raises(ValueError, match="mirrored boundary"):
        _core.thin_plate(x, x, 1.0, out, order=3)
    with pytest.raises(ValueError, match="mirrored boundary"):
        _core.thin_plate(x, x, 1.0, out, weights=[1.0, 2.0])
    with pytest.raises(ValueError, match="order must be 2 or 3"):
        _core.thin_plate(x, x, 1.0, out, reflect=True, order=4)
    with pytest.raises(ValueError, match="one value per axis"):
        _core.thin_plate(x, x, 1.0, out, reflect=True, weights=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="finite and > 0"):
        _core.thin_plate(x, x, 1.0, out, reflect=True, weights=[1.0, -2.0])
    with pytest.raises(ValueError, match="finite and > 0"):
        ThinPlateMG(np.ones((5, 6)), 0.1, order=3, reflect=True).set_weights((1.0, float("nan")))
    with pytest.raises(ValueError, match="mirrored boundary"):
        ThinPlateMG(np.ones((5, 6)), 0.1, order=3, reflect=True).set_boundary(False)
    with pytest.raises(ValueError, match="Laplacian-power form"):
        ThinPlateMG(np.ones((5, 6)), 0.1).set_weights((1.0, 2.0))


def test_volume_defaults_choose_order_3_and_axis_weights():
    """A 3-D grid with holes whose signal varies three times as fast along axis 0: the default
    fill uses the order-3 penalty and holds out a smaller weight for axis 0 (less smoothing along
    it), which fits better than the unweighted penalty."""
    from kronpe import fit_grid

    n = (24, 20, 22)
    x = [np.arange(k) / k for k in n]
    vol = (np.sin(9 * x[0])[:, None, None] * np.cos(3 * x[1])[None, :, None]
           + np.sin(3 * x[2] + 1)[None, None, :] * np.cos(9 * x[0])[:, None, None])
    mask = np.random.default_rng(3).random(n) < 0.25
    m = fit_grid(np.where(mask, vol, np.nan), mask=mask)
    assert m.info["penalty"].startswith("DifferencePenalty(3, mixed=True, boundary='reflect', weights=(")
    w = m.info["weights"]
    assert w[0] < min(w[1], w[2]), w
    tried = dict(m.info["weights_holdout_errors"])
    assert len(tried) >= 7 and tried[w] < tried[(1.0, 1.0, 1.0)]
    filled = m.predict_grid(x)
    err = np.sqrt(np.mean((filled[~mask] - vol[~mask]) ** 2))
    flat = fit_grid(np.where(mask, vol, np.nan), mask=mask, ridge=m.ridge)  # explicit ridge: weights all 1
    assert flat.info["penalty"] == "DifferencePenalty(3, mixed=True, boundary='reflect')"
    assert err < np.sqrt(np.mean((flat.predict_grid(x)[~mask] - vol[~mask]) ** 2))


def test_data_term_add_to_is_btb_through_the_blending_matrix(rng):
    """smooth.DataTerm.add_to (CG's operator off the nodes: the blending matrix's unchecked products
    into kept buffers) adds B^T B v, B dense from the blending matrix, call after call."""
    from kronpe import BlendingMatrix
    from kronpe.solvers import smooth

    shape = (17, 23)
    nodes = [np.linspace(0, 1, n) for n in shape]
    B = BlendingMatrix(rng.random((300, 2)), nodes, None, normalize=False, outside="clamp").store()
    dense = np.zeros((300, int(np.prod(shape))))
    np.put_along_axis(dense, np.asarray(B.indices), np.asarray(B.weights, np.float64), axis=1)
    data = smooth.DataTerm(shape, blend=B)
    for _ in range(2):
        v = rng.standard_normal(shape).astype(np.float32)
        out0 = rng.standard_normal(shape).astype(np.float32)
        got = data.add_to(v, out0.copy())
        want = out0 + (dense.T @ (dense @ v.ravel().astype(np.float64))).reshape(shape)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(data.add_to(v, np.zeros(shape, np.float32)), data(v[..., None])[..., 0], rtol=1e-6, atol=1e-6)


def test_predicted_stop_only_for_a_diagonal_data_term(rng):
    """smooth.hierarchy: PCG's predicted stop on a hierarchy of a diagonal data term (a mask), off on
    one that lumps a blending matrix's B^T B (points off the nodes, whose estimates wander), where
    solve then stops as the measured stop does, bit for bit."""
    from kronpe import BlendingMatrix
    from kronpe.solvers import smooth_system as smooth

    shape = (33, 29)
    nodes = [np.linspace(0, 1, n) for n in shape]
    B = BlendingMatrix(rng.random((400, 2)), nodes, None, normalize=False, outside="clamp").store()
    off = smooth.DataTerm(shape, blend=B)
    mask = rng.random(shape) < 0.5
    assert smooth.hierarchy(smooth.DataTerm(shape, mask), 1e-4).predicted_stop
    mg = smooth.hierarchy(off, 1e-4)
    assert not mg.predicted_stop
    b = off(rng.standard_normal(shape + (1,)).astype(np.float32))[..., 0]
    op = smooth._operator(off, 1e-4, smooth.PENALTY)
    x1, i1, e1 = mg.solve(b, None, 1e-3, 200, op)
    measured = ThinPlateMG(off.lumped(), 1e-4, predicted_stop=False)
    x0, i0, e0 = measured.solve(b, None, 1e-3, 200, op)
    assert (i1, e1) == (i0, e0) and e0 <= 1e-3
    np.testing.assert_array_equal(x1, x0)


LATTICE_CASES = [(0, 2, (5, 4)), (1, 1, (1,)), (9, 1, (7,)), (300, 2, (17, 33)), (2000, 3, (9, 5, 12)), (40000, 2, (257, 129))]


@pytest.mark.parametrize("layout", ["contiguous", "fortran", "strided"])
@pytest.mark.parametrize("P, D, n", LATTICE_CASES, ids=str)
def test_lattice_index_matches_reference(rng, P, D, n, dtype, layout):
    """_core.lattice_index (the nearest node of every point, C-order flat index; with the nodes
    given, the first point off them) against reference.lattice_index, any layout of the points."""
    k = np.stack([rng.integers(0, m, P) for m in n], 1) if P else np.zeros((0, D), np.int64)
    span = np.array([2.0] * D)
    origin = np.array([-0.5] * D)
    nodes = [origin[a] + np.arange(n[a]) * (span[a] / max(n[a] - 1, 1)) for a in range(D)]
    exact = np.stack([nodes[a][k[:, a]] for a in range(D)], 1) if P else np.zeros((0, D))
    if P > 1:
        exact[0] = -3.0  # outside: clamped to the first node (then off it: with nodes, the first miss)
        exact[-1, 0] = np.nan  # NaN: node 0
    pts = exact.astype(dtype)
    if layout == "fortran":
        pts = np.asfortranarray(pts)
    elif layout == "strided":
        wide = np.zeros((P, 2 * D + 1), dtype)
        wide[:, 1::2] = pts
        pts = wide[:, 1::2]
    scale = [(m - 1) / span[a] for a, m in enumerate(n)]
    out = np.full(P, -7, np.int64)
    assert _core.lattice_index(pts, list(n), list(origin), scale, None, out) == P
    want, first = reference.lattice_index(pts, n, origin, scale)
    np.testing.assert_array_equal(out, want)
    g = [np.asarray(v, np.float64) for v in nodes]
    first_ref = reference.lattice_index(pts, n, origin, scale, g)[1]
    got = _core.lattice_index(pts, list(n), list(origin), scale, g, out)
    assert got == first_ref
    if dtype == np.float64 and P > 2:
        assert got == 0  # the clamped point is not on its node
        ok = pts[1:-1]
        out2 = np.empty(ok.shape[0], np.int64)
        assert _core.lattice_index(ok, list(n), list(origin), scale, g, out2) == ok.shape[0]
        np.testing.assert_array_equal(out2, reference.lattice_index(ok, n, origin, scale, g)[0])


def _lattice_count_cases(rng):
    """(name, coordinates) of lattices and near misses, for lattice_count's tests."""
    probe = 64
    P = 5 * probe
    k = rng.integers(0, 41, P)
    odd = 2 * rng.integers(0, 20, P)
    odd[1::P // probe] += 1  # odd multiples only between the subset's points: h from all of them
    jitter = (rng.integers(0, 17, P) / 16.0)
    jitter[7] += 1e-9  # two distinct coordinates on one multiple: not the subset's h
    return [("empty", np.zeros(0)), ("one", np.array([0.25])), ("small", rng.integers(0, 9, 20) / 8.0),
            ("large", k / 40.0), ("odd between", odd / 40.0), ("jittered", jitter),
            ("off", rng.random(P)), ("near", k / 40.0 + 1e-9), ("far", k / 40.0 + 1e-4),
            ("not 1/n", k * 0.0237), ("negative", k / 40.0 - 0.5), ("beyond", k / 40.0 * 1.5),
            ("nan", np.where(np.arange(P) == 3, np.nan, k / 40.0)), ("inf", np.where(np.arange(P) == 3, np.inf, k / 40.0)),
            ("constant", np.full(P, 0.5)), ("close pair", np.where(np.arange(P) == 5, k[0] / 40.0 + 1e-9, k / 40.0)),
            ("denormal gap", np.r_[0.0, 5e-324, k / 40.0]), ("fine", np.arange(P) / float(1 << 25))]


@pytest.mark.parametrize("layout", ["contiguous", "strided", "reversed"])
def test_lattice_count_matches_reference(rng, layout, dtype):
    """_core.lattice_count (an axis's lattice: 1 / h of the smallest gap, when every coordinate is a
    multiple of it) against reference.lattice_count, any stride, float32 and float64 coordinates,
    lattices and near misses."""
    found = {}
    for name, x in _lattice_count_cases(rng):
        x = x.astype(dtype)
        if layout == "strided":
            wide = np.zeros(3 * x.size, x.dtype)
            wide[1::3] = x
            x = wide[1::3]
        elif layout == "reversed":
            x = x[::-1]
        assert x.dtype == dtype
        got = _core.lattice_count(x, 64, 1e-6, 1e-6)
        assert got == reference.lattice_count(x, 64, 1e-6, 1e-6), name
        found[name] = got
    if dtype == np.float64:  # (float32 coordinates k / 40 are not multiples of one float64 h within 1e-6)
        assert found["large"] == 40 and found["odd between"] == 40 and found["small"] == 8 and found["near"] == 40
        assert found["fine"] == 1 << 25  # (lattice_grid takes no lattice that fine: LATTICE_MAX_NODES)
    assert found["small"] == 8  # (eighths are exact in float32)
    for name in ("empty", "one", "off", "far", "not 1/n", "negative", "beyond", "nan", "inf", "constant",
                 "denormal gap") + (("jittered",) if dtype == np.float64 else ()):  # (float32 loses the 1e-9)
        assert found[name] == 0, name


def test_lattice_count_refuses_bad_arguments():
    x = np.arange(5) / 4.0
    with pytest.raises(ValueError, match="float32 or float64"):
        _core.lattice_count(x.astype(np.int64), 64, 1e-6, 1e-6)
    with pytest.raises(ValueError, match="1-D|ndim|dimension"):
        _core.lattice_count(x[:, None], 64, 1e-6, 1e-6)
    with pytest.raises(ValueError, match="probe"):
        _core.lattice_count(x, 0, 1e-6, 1e-6)
    with pytest.raises(ValueError, match="tolerances"):
        _core.lattice_count(x, 64, -1.0, 1e-6)
    with pytest.raises(ValueError, match="tolerances"):
        _core.lattice_count(x, 64, 1e-6, np.nan)


@pytest.mark.parametrize("P, C, G", [(0, 3, 5), (1, 1, 1), (50, 0, 7), (500, 3, 40), (70000, 1, 4096)], ids=str)
@pytest.mark.parametrize("strided", [False, True], ids=["contiguous", "strided"])
def test_lattice_sums_matches_reference(rng, P, C, G, dtype, strided):
    """_core.lattice_sums (samples per node and their sums per channel, one pass in the values'
    dtype) against reference.lattice_sums (float64 bincounts); at most two samples per node: the
    same bits."""
    flat = rng.permutation(np.repeat(np.arange(G), 2))[:P] if P <= 2 * G else rng.integers(0, G, P)
    values = rng.standard_normal((P, C)).astype(dtype)
    if strided:
        values = np.asfortranarray(values) if C > 1 else np.repeat(values, 2, axis=0)[::2]
    counts, sums = np.full(G, 5, dtype), np.full((C, G), 5, dtype)
    _core.lattice_sums(flat.astype(np.int64), values, counts, sums)
    wc, ws = reference.lattice_sums(flat, values, G)
    np.testing.assert_array_equal(counts, wc)
    if P <= 2 * G:
        np.testing.assert_array_equal(sums, ws)
    else:
        np.testing.assert_allclose(sums, ws, rtol=1e-4 if dtype == np.float32 else 1e-12, atol=1e-3 if dtype == np.float32 else 1e-9)


def test_lattice_kernels_bad_inputs():
    pts = np.zeros((4, 2))
    out = np.empty(4, np.int64)
    with pytest.raises(ValueError, match="one value per coordinate"):
        _core.lattice_index(pts, [3], [0.0], [1.0], None, out)
    with pytest.raises(ValueError, match="out must be"):
        _core.lattice_index(pts, [3, 3], [0.0, 0.0], [1.0, 1.0], None, np.empty(3, np.int64))
    with pytest.raises(ValueError, match="got int32"):
        _core.lattice_index(pts, [3, 3], [0.0, 0.0], [1.0, 1.0], None, np.empty(4, np.int32))
    with pytest.raises(ValueError, match="out must be int64"):
        _core.lattice_index(pts, [3, 3], [0.0, 0.0], [1.0, 1.0], None, np.empty(4))
    with pytest.raises(ValueError, match=r"nodes\[1\]"):
        _core.lattice_index(pts, [3, 3], [0.0, 0.0], [1.0, 1.0], [np.zeros(3), np.zeros(2)], out)
    with pytest.raises(ValueError, match="at least one node"):
        _core.lattice_index(pts, [3, 0], [0.0, 0.0], [1.0, 1.0], None, out)
    with pytest.raises(ValueError, match="float32 or float64"):
        _core.lattice_index(pts.astype(np.int64), [3, 3], [0.0, 0.0], [1.0, 1.0], None, out)
    vals = np.ones((4, 2), np.float32)
    counts, sums = np.full(3, 9, np.float32), np.full((2, 3), 9, np.float32)
    with pytest.raises(ValueError, match=r"flat index 3 of point 2 outside \[0, 3\)"):
        _core.lattice_sums(np.array([0, 1, 3, 2]), vals, counts, sums)
    assert (counts == 9).all() and (sums == 9).all()  # nothing written: the check comes first
    with pytest.raises(ValueError, match=r"flat index -1 of point 0"):
        _core.lattice_sums(np.array([-1, 1, 2, 2]), vals, counts, sums)
    with pytest.raises(ValueError, match="sums must be"):
        _core.lattice_sums(np.array([0, 1, 2, 2]), vals, counts, np.empty((2, 4), np.float32))
    with pytest.raises(ValueError, match="counts must be"):
        _core.lattice_sums(np.array([0, 1, 2, 2]), vals, np.empty(3, np.float64), sums)
    with pytest.raises(ValueError, match="values must be"):
        _core.lattice_sums(np.array([0, 1, 2]), vals, counts, sums)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(70,), (33, 40)], ids=str)
def test_lead_solve_is_the_pcg_of_its_two_systems(rng, shape, dtype):
    """LeadSolve (kronpe.solvers.smooth's speculation): stage 1 is ThinPlateMG.solve of the mirrored
    thin-plate system from full multigrid, stage 2 the PCG of the system with the higher-order
    penalty (its operator the power form's) from stage 1's solution, preconditioned by the same
    hierarchy; the same bits run on the calling thread, beside a function, or on a thread of its
    own, and a stage not asked for is not run."""
    m = (rng.random(shape) < 0.5).astype(dtype)
    b = (m * rng.standard_normal(shape)).astype(dtype)
    lam, tol, maxiter, higher = 1e-5, 1e-6, 300, 0.1
    mg = ThinPlateMG(m, lam, reflect=True, degree=2, alpha=4.0, dtype=dtype)
    x1, it1, e1 = mg.solve(b, None, tol, maxiter)

    def op(v):
        return multigrid.thin_plate_apply(v, m, lam, reflect=True, order=3, top=higher, tail=1.0)

    x2, it2, e2 = mg.solve(b, x1, tol, maxiter, operator=op)
    assert it1 > 1 and it2 >= 1 and e1 <= tol and e2 <= tol

    kind = _core.LeadSolve32 if dtype == np.float32 else _core.LeadSolve64

    def make():
        return kind(m, b, lam, 2, mg.lmax, 4.0, multigrid.COARSEST, 1, tol, maxiter, higher)

    seq = make()
    seq.finish(2)
    beside = make()
    assert beside.beside(lambda: ("result", 2)) == "result"
    started = make()
    started.start()
    started.finish(2)
    for done in (seq, beside, started):
        assert done.stages_done == 2
        for (x, it, err), (want, it_want, err_want) in zip((done.solution(1), done.solution(2)),
                                                          ((x1, it1, e1), (x2, it2, e2))):
            np.testing.assert_array_equal(x.reshape(shape), want)
            assert (it, err) == (it_want, err_want)
        assert done.result(1) == (it1, e1) and done.result(2) == (it2, e2)
        h = done.hierarchy()
        assert tuple(h.shapes[0][3 - len(shape):]) == shape and h.lam == lam
    one = make()  # on the calling thread, a stage not asked for is not run
    one.finish(1)
    assert one.stages_done == 1
    np.testing.assert_array_equal(one.solution(1)[0].reshape(shape), x1)
    with pytest.raises(ValueError, match="stage"):
        one.solution(2)
    # beside a function that wants fewer stages, the speculation stops where it is when the function
    # returns (how far it got depends on the scheduler): every stage it finished is the right one
    for wanted in (1, 0):
        spec = make()
        assert spec.beside(lambda: (None, wanted)) is None
        assert wanted <= spec.stages_done <= 2
        for stage, want in zip(range(1, spec.stages_done + 1), (x1, x2)):
            np.testing.assert_array_equal(spec.solution(stage)[0].reshape(shape), want)


def test_lead_solve_errors(rng):
    """A function that raises beside a LeadSolve raises, the solve is cancelled; bad arguments are
    named."""
    m = (rng.random((20, 30)) < 0.5).astype(np.float32)
    b = m.copy()

    def make(**kw):
        args = dict(m=m, b=b, lam=1e-4, degree=2, lmax=4.0, alpha=4.0, coarsest=64, threads=1, tol=1e-3,
                    maxiter=50, higher=0.1)
        args.update(kw)
        return _core.LeadSolve32(**args)

    spec = make()
    with pytest.raises(ZeroDivisionError):
        spec.beside(lambda: (1 / 0, 1))
    with pytest.raises(ValueError, match="cancelled"):
        spec.finish(1)
    with pytest.raises(ValueError, match="return"):
        make().beside(lambda: "not a pair")
    started = make()
    started.start()
    with pytest.raises(ValueError, match="started"):
        started.start()
    started.cancel()
    with pytest.raises(ValueError, match="lam"):
        make(lam=0.0)
    with pytest.raises(ValueError, match="higher"):
        make(higher=-1.0)
    with pytest.raises(ValueError, match="shape"):
        make(b=np.zeros((20, 31), np.float32))
    with pytest.raises(ValueError, match="maxiter"):
        make(maxiter=-1)


def test_held_out_fill_sweep_refuses_bad_arrays(rng):
    """The compiled sweep's arguments: shapes, contiguity, held-out nodes in range and with data,
    an empty grid, each a named ValueError."""
    m = (rng.random((12, 14)) < 0.6).astype(np.float32)
    y = (m * rng.random((12, 14))).astype(np.float32)
    hold = np.flatnonzero(m)[::5].astype(np.int64)
    x = np.empty_like(m)

    def call(m=m, y=y, hold=hold, x=x):
        return _core.held_out_fill_sweep(m, y, hold, x, 2, 4.0, 4.0, 64, 1, [1.0, 0.1, 0.01], 10.0 ** 0.5, 1e-2,
                                         1, 1.3, 0.01, 0.1, 2e-3)

    h, out = call()
    assert len(out["tried"]) == len(out["errs"]) >= 3 and h.shapes[0] == [1, 12, 14]
    assert np.isfinite(x).all()
    with pytest.raises(ValueError, match="y must have m's shape"):
        call(y=y[:, :-1].copy())
    with pytest.raises(ValueError, match="x_best must have m's shape"):
        call(x=np.empty((12, 15), np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        call(y=np.asfortranarray(y))
    with pytest.raises(ValueError, match="hold"):
        call(hold=np.array([m.size], np.int64))
    with pytest.raises(ValueError, match="hold"):
        call(hold=np.flatnonzero(m == 0)[:3].astype(np.int64))
    with pytest.raises(ValueError, match="at least one node"):
        call(m=np.zeros((0, 3), np.float32), y=np.zeros((0, 3), np.float32), hold=np.zeros(0, np.int64),
             x=np.zeros((0, 3), np.float32))


# ---- the hierarchy on a CUDA device against the host's ------------------------------------------------
# The device's sums run in another order, so values agree to float32 rounding (relative 1e-5 for one
# operator pass, more after many); the fills must make the host's choices and reach its held-out
# accuracy.


def _hierarchies(shape, reflect, lam, seed=0):
    m, b, x = device_stencil_problem(shape, seed)
    degree, alpha = smooth.DIAGONAL_SMOOTHER
    host = ThinPlateMG(m, lam, reflect=reflect, degree=degree, alpha=alpha)
    dev = _core.CudaThinPlate32(0, m, reflect, degree, chebyshev_lmax(m.ndim, 2), alpha, COARSEST)
    dev.set_lambda(lam)
    return m, b, x, host, dev


@pytest.mark.parametrize("shape", DEVICE_STENCIL_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("reflect", [False, True], ids=["natural", "mirrored"])
def test_device_operator_and_cycles_match_the_host(cuda_device, shape, reflect):
    lam = 0.37
    m, b, x, host, dev = _hierarchies(shape, reflect, lam)
    assert dev.levels == len(host.levels)
    out = np.empty_like(x)
    dev.apply(x, out)
    assert_close(out, thin_plate_apply(x, m, lam, reflect=reflect), 2e-6, "max")
    if reflect:  # the sweep's higher-order system, R + h L^3
        dev.apply(x, out, 0.1)
        assert_close(out, thin_plate_apply(x, m, lam, reflect=True, order=3, top=0.1, tail=1.0), 2e-6, "max")
    dev.vcycle(b, out)
    assert_close(out, host.vcycle(b), 1e-4, "max")
    if x.size <= 2000:  # the NumPy references (dense matrices, float64)
        m64 = m.astype(np.float64)
        assert_close(out, reference.thin_plate_vcycle(b.astype(np.float64), m64, lam, degree=host.degree,
                                                      alpha=host.alpha, reflect=reflect), 1e-4, "max")
        dev.apply(x, out)
        assert_close(out, reference.thin_plate_apply(x.astype(np.float64), m64, lam, reflect=reflect), 2e-6, "max")
    dev.fmg(b, out, 1)
    assert_close(out, host.fmg(b), 1e-4, "max")
    start = host.fmg(b)
    got = start.copy()
    dev.cycles(b, got, True, 2, 1.3)
    assert_close(got, host.cycles(b, start, 2, 1.3), 1e-4, "max")


@pytest.mark.parametrize("shape", [(33, 47), (64, 64), (9, 10, 11)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("higher", [0.0, 0.1])
def test_device_pcg_matches_the_host(cuda_device, shape, higher):
    lam = 1e-3
    m, b, x, host, dev = _hierarchies(shape, True, lam)
    got = np.empty_like(b)
    its, err = dev.pcg(b, got, False, 1e-6, 200, 0.0, higher)
    op = None
    if higher:
        def op(v):
            return thin_plate_apply(v, m, lam, reflect=True, order=3, top=higher, tail=1.0)
    want, its_h, err_h = host.solve(b, None, 1e-6, 200, operator=op)
    assert err <= 1e-6 and err_h <= 1e-6
    assert abs(its - its_h) <= 2
    assert_close(got, want, 2e-4, "max")
    # the same bits run to run (fixed-order sums, no atomics)
    again = np.empty_like(b)
    assert dev.pcg(b, again, False, 1e-6, 200, 0.0, higher) == (its, err)
    np.testing.assert_array_equal(again, got)


def test_device_hierarchy_rejects_bad_input(cuda_device):
    m = np.ones((8, 8), np.float32)
    with pytest.raises(ValueError, match="m must be finite and >= 0"):
        _core.CudaThinPlate32(0, -m, False, 2, 4.0, 4.0, COARSEST)
    dev = _core.CudaThinPlate32(0, m, False, 2, 4.0, 4.0, COARSEST)
    with pytest.raises(ValueError, match="grid's shape"):
        dev.vcycle(np.ones((8, 9), np.float32), np.empty((8, 9), np.float32))
    with pytest.raises(ValueError, match="lam"):
        dev.set_lambda(float("nan"))
    with pytest.raises(ValueError, match="coarsest"):
        _core.CudaThinPlate32(0, m, False, 2, 4.0, 4.0, 4096)


def _photo(n, channels, seed=0):
    img = kronpe.data.load_sample("astronaut").astype(np.float32)
    img = img[100:100 + n, 150:150 + n]
    return img if channels == 3 else img.mean(-1)


def _held_out_psnr(pred, truth):
    return float(10 * np.log10(1.0 / np.mean((np.asarray(pred, np.float64) - truth) ** 2)))


@pytest.mark.parametrize("channels", [1, 3])
def test_fit_points_of_device_arrays_solves_on_the_device(cuda_device, channels):
    n = 96
    img = _photo(n, channels)
    rng = np.random.default_rng(1)
    keep = rng.random((n, n)) < 0.25
    ij = np.argwhere(keep)
    pts = ij / n
    vals = img[keep]
    host = kronpe.fit_points(pts, vals)
    dev = kronpe.fit_points(cuda_device.put(pts), cuda_device.put(vals))
    assert dev.info["device"] == "cuda:0" and "device" not in host.info
    for key in ("interpolating", "boundary"):
        assert dev.info[key] == host.info[key], key
    assert dev.ridge == pytest.approx(host.ridge, rel=1e-6)
    np.testing.assert_allclose(dev.info["holdout_errors"], host.info["holdout_errors"], rtol=1e-3)
    held = np.argwhere(~keep)
    truth = img[~keep].astype(np.float64)
    p_host = host.predict(held / n)
    p_dev = cuda_device.host(dev.predict(cuda_device.put(held / n)))
    # both solves stop at the same tolerance from iterates that differ by rounding: they land within
    # it of each other, not on the same values
    assert dev.info["converged"] and host.info["converged"]
    assert abs(_held_out_psnr(p_dev, truth) - _held_out_psnr(p_host, truth)) < 0.05
    diff = np.asarray(dev.grid_values, np.float64) - np.asarray(host.grid_values, np.float64)
    assert float(np.sqrt(np.mean(diff ** 2))) < 2e-3


def test_fit_grid_mask_of_a_device_signal_solves_on_the_device(cuda_device):
    n = 80
    img = _photo(n, 3)
    rng = np.random.default_rng(2)
    mask = rng.random((n, n)) < 0.5
    host = kronpe.fit_grid(img, mask=mask)
    dev = kronpe.fit_grid(cuda_device.put(img), mask=mask)
    assert dev.info["device"] == "cuda:0"
    assert dev.info["boundary"] == host.info["boundary"] and dev.ridge == pytest.approx(host.ridge, rel=1e-6)
    w = cuda_device.host(dev.weights)
    truth = img[~mask].astype(np.float64)
    assert dev.info["converged"] and host.info["converged"]
    assert abs(_held_out_psnr(w[~mask], truth) - _held_out_psnr(np.asarray(host.weights)[~mask], truth)) < 0.05
    diff = w.astype(np.float64) - np.asarray(host.weights, np.float64)
    assert float(np.sqrt(np.mean(diff ** 2))) < 2e-3


def test_graphs_give_the_bits_of_single_launches(cuda_device, monkeypatch):
    """The V-cycles and full multigrid replayed from CUDA graphs (updated when the arrays change)
    give the values of the same kernels launched one by one (KRONPE_CUDA_GRAPHS=0)."""
    shape = (65, 70)
    m, b, x, _, _ = _hierarchies(shape, False, 0.01)
    degree, alpha = smooth.DIAGONAL_SMOOTHER
    out = {}
    for graphs in ("1", "0"):
        monkeypatch.setenv("KRONPE_CUDA_GRAPHS", graphs)
        dev = _core.CudaThinPlate32(0, m, False, degree, chebyshev_lmax(2, 2), alpha, COARSEST)
        res = []
        for lam in (0.01, 1e-4):  # (a graph outlives set_lambda)
            dev.set_lambda(lam)
            for reflect in (False, True, False):  # (and is made again for the other boundary)
                dev.set_reflect(reflect)
                v = np.empty_like(b)
                dev.vcycle(b, v)
                f = np.empty_like(b)
                dev.fmg(b, f, 1)
                c = f.copy()
                dev.cycles(b, c, True, 3, 1.3)
                s = np.empty_like(b)
                its, err = dev.pcg(b, s, False, 1e-5, 50, 0.0, 0.0)
                res += [v, f, c, s, np.array([its, err])]
        out[graphs] = res
    for a, b_ in zip(out["1"], out["0"]):
        np.testing.assert_array_equal(a, b_)


def test_empty_cache_frees_the_fills_blocks(cuda_device):
    """The fills' device blocks are kept for the next fill of those sizes until empty_cache."""
    img = _photo(48, 1)
    mask = np.random.default_rng(3).random(img.shape) < 0.5
    kronpe.fit_grid(cuda_device.put(img), mask=mask)
    kept = _core.cuda_multigrid_cache()
    assert kept > 48 * 48 * 4
    assert kronpe.cuda.empty_cache() == kept
    assert _core.cuda_multigrid_cache() == 0


def test_device_bindings_check_arguments_before_the_device():
    """Shapes, layouts and dtypes are refused with ValueError naming the argument, before any
    device work (so also in a module built without CUDA, which then raises RuntimeError)."""
    m = np.ones((8, 8), np.float32)
    with pytest.raises(ValueError, match="m must be C-contiguous"):
        _core.CudaThinPlate32(0, np.ones((8, 16), np.float32)[:, ::2], False, 2, 4.0, 4.0, COARSEST)
    with pytest.raises(ValueError, match="m must have at least one node"):
        _core.CudaThinPlate32(0, np.ones((0, 4), np.float32), False, 2, 4.0, 4.0, COARSEST)
    with pytest.raises(ValueError, match="m"):
        _core.CudaThinPlate32(0, m.astype(np.float64), False, 2, 4.0, 4.0, COARSEST)
    with pytest.raises(ValueError, match="m must have 1 to 3 axes"):
        _core.CudaThinPlate32(0, np.ones((2, 2, 2, 2), np.float32), False, 2, 4.0, 4.0, COARSEST)
    args = dict(lams=[1.0], ratio=3.0, flat=0.01, count=1, omega=1.3, boundary_margin=0.01, higher=0.0,
                higher_margin=0.0, degree=2, lmax=4.0, alpha=4.0, coarsest=COARSEST, lam_interpolating=1e-6,
                tol=1e-3, tol_interpolating=3e-4, maxiter=10, lead=True)
    hold = np.arange(3, dtype=np.int64)
    with pytest.raises(ValueError, match="one array per channel"):
        _core.cuda_smooth_fill(0, m, [m, m], m, hold, [np.empty_like(m)], **args)
    with pytest.raises(ValueError, match="planes must have m's shape"):
        _core.cuda_smooth_fill(0, m, [np.ones((8, 9), np.float32)], m, hold, [np.empty_like(m)], **args)
    with pytest.raises(ValueError, match="out"):
        _core.cuda_smooth_fill(0, m, [m], m, hold, [np.empty((8, 8), np.float64)], **args)
