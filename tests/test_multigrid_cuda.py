"""The thin-plate multigrid on a CUDA device (kronpe/cuda.h DeviceThinPlate, smooth_fill) against
the host's: the operator, V-cycle, full multigrid, stationary cycles and PCG on grids of 1 to 3
axes and both boundaries, then the default fills of device arrays (fit_points on a lattice,
fit_grid(mask=)) against the same fills of host arrays. The device's sums run in another order,
so values agree to float32 rounding (relative 1e-5 for one operator pass, more after many); the
fills must make the host's choices and reach its held-out accuracy. Skipped without a GPU (the
``cuda_device`` fixture)."""
from __future__ import annotations

import numpy as np
import pytest

import kronpe
from kronpe import _core, reference
from kronpe.solvers import smooth
from kronpe.solvers.multigrid import COARSEST, ThinPlateMG, chebyshev_lmax, thin_plate_apply

SHAPES = [(37,), (33, 47), (2, 6), (3, 5), (64, 64), (9, 10, 11)]


def _problem(shape, seed=0):
    rng = np.random.default_rng(seed)
    m = (rng.random(shape) < 0.3).astype(np.float32) * rng.uniform(0.5, 2.0, shape).astype(np.float32)
    b = (m * rng.standard_normal(shape)).astype(np.float32)
    x = rng.standard_normal(shape).astype(np.float32)
    return m, b, x


def _hierarchies(shape, reflect, lam, seed=0):
    m, b, x = _problem(shape, seed)
    degree, alpha = smooth.DIAGONAL_SMOOTHER
    host = ThinPlateMG(m, lam, reflect=reflect, degree=degree, alpha=alpha)
    dev = _core.CudaThinPlate32(0, m, reflect, degree, chebyshev_lmax(m.ndim, 2), alpha, COARSEST)
    dev.set_lambda(lam)
    return m, b, x, host, dev


def _close(got, expected, rtol):
    scale = max(float(np.abs(expected).max()), 1e-30)
    np.testing.assert_allclose(got, expected, rtol=0, atol=rtol * scale)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("reflect", [False, True], ids=["natural", "mirrored"])
def test_device_operator_and_cycles_match_the_host(cuda_device, shape, reflect):
    lam = 0.37
    m, b, x, host, dev = _hierarchies(shape, reflect, lam)
    assert dev.levels == len(host.levels)
    out = np.empty_like(x)
    dev.apply(x, out)
    _close(out, thin_plate_apply(x, m, lam, reflect=reflect), 2e-6)
    if reflect:  # the sweep's higher-order system, R + h L^3
        dev.apply(x, out, 0.1)
        _close(out, thin_plate_apply(x, m, lam, reflect=True, order=3, top=0.1, tail=1.0), 2e-6)
    dev.vcycle(b, out)
    _close(out, host.vcycle(b), 1e-4)
    if x.size <= 2000:  # the NumPy references (dense matrices, float64)
        m64 = m.astype(np.float64)
        _close(out, reference.thin_plate_vcycle(b.astype(np.float64), m64, lam, degree=host.degree,
                                                alpha=host.alpha, reflect=reflect), 1e-4)
        dev.apply(x, out)
        _close(out, reference.thin_plate_apply(x.astype(np.float64), m64, lam, reflect=reflect), 2e-6)
    dev.fmg(b, out, 1)
    _close(out, host.fmg(b), 1e-4)
    start = host.fmg(b)
    got = start.copy()
    dev.cycles(b, got, True, 2, 1.3)
    _close(got, host.cycles(b, start, 2, 1.3), 1e-4)


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
    _close(got, want, 2e-4)
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
