"""The CUDA backend.

Two parts:
- tests that run everywhere: the build reports CUDA consistently, and without CUDA (or without a
  device) the CUDA entry points raise a clear RuntimeError;
- GPU tests (marked ``gpu``, skipped without kronpe's CUDA kernels, a device, or CuPy / CUDA
  torch): every CUDA kernel against the CPU kernels on the same inputs (float32 and float64,
  strided views, empty inputs), a non-default stream, and sizes past 2^31 elements where the
  device memory allows (``slow``).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import kronpe
from kronpe import _core
from kronpe._adapters import arrays as _arrays, cuda as _cuda

# ---- backends -------------------------------------------------------------------------------------


def _cupy():
    try:
        import cupy

        return cupy if cupy.cuda.runtime.getDeviceCount() > 0 else None
    except Exception:
        return None


def _torch_cuda():
    try:
        import torch

        return torch if torch.cuda.is_available() else None
    except Exception:
        return None


GPU = kronpe.cuda.is_available()
BACKENDS = [b for b, mod in (("cupy", _cupy), ("torch", _torch_cuda)) if GPU and mod() is not None]
if "cupy" in BACKENDS and os.environ.get("KRONPE_TEST_NO_POOL"):  # tools/sanitize.sh
    _cupy().cuda.set_allocator(None)

gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not BACKENDS, reason="needs kronpe's CUDA kernels, a CUDA device and CuPy or CUDA torch")


@pytest.fixture(params=BACKENDS or ["none"])
def backend(request):
    if request.param == "none":
        pytest.skip("needs kronpe's CUDA kernels, a CUDA device and CuPy or CUDA torch")
    return request.param


def dev(backend, a):
    """A host array on the GPU as the backend's kind (keeps dtype and shape, C order)."""
    a = np.ascontiguousarray(a)
    if backend == "cupy":
        import cupy

        return cupy.asarray(a)
    import torch

    return torch.from_numpy(a).cuda()


def host(x):
    return _arrays.to_host(x)


def sync(backend):
    if backend == "cupy":
        import cupy

        cupy.cuda.get_current_stream().synchronize()
    else:
        import torch

        torch.cuda.synchronize()


def transpose(backend, x, axes):
    return x.transpose(axes) if backend == "cupy" else x.permute(axes)


def free_bytes(backend) -> int:
    if backend == "cupy":
        import cupy

        return int(cupy.cuda.Device().mem_info[0])
    import torch

    return int(torch.cuda.mem_get_info()[0])


class side_stream:
    """Context manager making a new non-default stream current for the backend."""

    def __init__(self, backend):
        self.backend = backend

    def __enter__(self):
        if self.backend == "cupy":
            import cupy

            self.s = cupy.cuda.Stream(non_blocking=True)
            self.ctx = self.s
        else:
            import torch

            self.s = torch.cuda.Stream()
            self.ctx = torch.cuda.stream(self.s)
        self.ctx.__enter__()
        return self.s

    def __exit__(self, *exc):
        self.ctx.__exit__(*exc)
        self.s.synchronize()
        return False


TOL = {np.float32: dict(rtol=2e-5, atol=2e-6), np.float64: dict(rtol=1e-11, atol=1e-13)}


# ---- everywhere ---------------------------------------------------------------------------------------


def test_build_info_reports_cuda_consistently():
    info = kronpe.build_info()
    assert info["cuda"] == kronpe.cuda.is_built() == bool(_core.cuda_built())
    assert info["cuda_devices"] == kronpe.cuda.device_count() >= 0
    if not info["cuda"]:
        assert info["cuda_devices"] == 0 and info["cublas"] is None
        assert not kronpe.cuda.is_available()
        return
    assert info["cuda_compiler"].startswith("NVIDIA")
    archs = info["cuda_architectures"].split(",")
    assert any(a.startswith("80") for a in archs) and any(a.startswith("90") for a in archs), archs
    c = kronpe.cuda.info()
    assert c["cublas_header_version"] >= 120000
    if _cuda.cublas_candidates():  # a cuBLAS wheel is installed: it must be the one loaded
        assert info["cublas"] is not None, info["cublas_path"]
        assert info["cublas"].split(".")[0] == str(c["cublas_header_version"] // 10000)
    if info["cublas"] is None:
        assert c["cublas_error"]  # says why


def _dev(shape, dtype="float32"):
    """A descriptor of device memory at a bogus address (never dereferenced by these tests)."""
    strides = tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape)))
    return _arrays.Array(8, tuple(shape), strides, dtype, 0, 0)


def test_cuda_entry_points_without_cuda_raise_clearly():
    if kronpe.cuda.is_built():
        pytest.skip("this module has the CUDA kernels")
    with pytest.raises(RuntimeError, match="built without CUDA"):
        _core.cuda_embed_basis(_dev((8,)), _dev((8, 4)), "gaussian", 0, 4.0, 0.1, 3, 0)
    with pytest.raises(RuntimeError, match="built without CUDA"):
        _core.cuda_multi_mode_product(_dev((2, 2)), [_dev((2, 2))], [0], _dev((2, 2)), False)
    with pytest.raises(RuntimeError, match="built without CUDA"):
        _core.cuda_blend_stored(_dev((1, 1), "int64"), _dev((1, 1), "float64"), _dev((1, 1)), _dev((1, 1)))
    with pytest.raises(RuntimeError, match="built without CUDA"):
        _cuda.require("multi_mode_product")
    assert kronpe.cuda.info()["built"] is False
    assert kronpe.cuda.allow_tf32() is False


def test_cuda_entry_points_without_a_device_raise_cuda_errors():
    """A CUDA build on a machine without a usable device: CUDA's own error, as RuntimeError."""
    if not kronpe.cuda.is_built() or kronpe.cuda.device_count() > 0:
        pytest.skip("needs a CUDA build on a machine without a CUDA device")
    with pytest.raises(RuntimeError, match="kronpe CUDA: .*failed"):
        _core.cuda_embed_basis(_dev((8,)), _dev((8, 4)), "gaussian", 0, 4.0, 0.1, 3, 0)
    # argument errors are still ValueError, raised before touching the device
    with pytest.raises(ValueError, match="K must be positive"):
        _core.cuda_embed_basis(_dev((8,)), _dev((8, 0)), "gaussian", 0, 4.0, 0.1, 3, 0)
    with pytest.raises(ValueError, match="host memory"):
        _core.cuda_embed_basis(_dev((8,))._replace(device=-1), _dev((8, 4)), "gaussian", 0, 4.0, 0.1, 3, 0)


def test_cublas_loads_without_a_device():
    """cuBLAS is dlopen'd lazily; loading needs no GPU or driver (reported, never raised)."""
    if not kronpe.cuda.is_built():
        pytest.skip("needs the CUDA kernels")
    c = kronpe.cuda.info(load_cublas=True)
    assert c["cublas_loaded"] or c["cublas_error"]
    if c["cublas_loaded"]:
        assert c["cublas_version"] // 10000 == c["cublas_header_version"] // 10000


def test_tf32_policy_defaults_off():
    assert kronpe.cuda.allow_tf32() is False
    if kronpe.cuda.is_built():
        kronpe.cuda.set_allow_tf32(True)
        try:
            assert kronpe.cuda.allow_tf32() is True
        finally:
            kronpe.cuda.set_allow_tf32(False)
        assert kronpe.cuda.allow_tf32() is False


# ---- GPU: embedders -------------------------------------------------------------------------------------

EMBEDDERS = [
    kronpe.Gaussian(64, 0.01),
    kronpe.Gaussian(32, 0.02, margin=3),
    kronpe.Triangle(48),
    kronpe.Rectangle(40, 0.05),
    kronpe.Impulse(33),
    kronpe.Sine(16, 3.0),
    kronpe.Square(16, 5.0),
    kronpe.BSpline(24, order=3),
    kronpe.Random(20, seed=3),
    kronpe.LinearFourier(32, 4.0),
    kronpe.LogFourier(32, 5.0),
    kronpe.RandomFourier(32, 3.0, seed=2),
    kronpe.NeRF(6, include_input=True),
    kronpe.Transformer(8),
]


@gpu
@needs_gpu
@pytest.mark.parametrize("emb", EMBEDDERS, ids=lambda e: type(e).__name__)
def test_embedders_match_cpu(backend, emb, dtype, rng):
    x = rng.random(301).astype(dtype)
    x[:3] = [0.0, 1.0, 0.5]
    ref = emb(x)
    got = emb(dev(backend, x))
    assert _arrays.kind(got) == backend and _arrays.dtype_name(got) == np.dtype(dtype).name
    np.testing.assert_allclose(host(got), ref, **TOL[dtype])
    # strided input and a strided output view
    xs = dev(backend, np.repeat(x, 2))[::2]
    out_full = dev(backend, np.zeros((x.size, emb.K + 3), dtype))
    out = out_full[:, 1 : 1 + emb.K]
    emb(xs, out=out)
    np.testing.assert_allclose(host(out_full)[:, 1 : 1 + emb.K], ref, **TOL[dtype])
    assert not host(out_full)[:, 0].any()
    # empty input
    assert tuple(emb(dev(backend, np.zeros(0, dtype))).shape) == (0, emb.K)


@gpu
@needs_gpu
def test_embedder_rejects_bad_device_coordinates(backend):
    emb = kronpe.Gaussian(16, 0.05)
    with pytest.raises(ValueError, match=r"x must lie in \[0, 1\]"):
        emb(dev(backend, np.array([0.1, 1.5])))
    with pytest.raises(ValueError, match="x must be finite"):
        emb(dev(backend, np.array([0.1, np.nan])))
    with pytest.raises(ValueError, match="1-D"):
        emb(dev(backend, np.zeros((2, 2))))


# ---- GPU: mode-n products -----------------------------------------------------------------------------

CHAINS = [
    ((7, 5, 6), [(4, 7), (3, 5), (2, 6)], None),
    ((7, 5, 6, 3), [(9, 5), (2, 6)], (1, 2)),       # carried channels
    ((2, 50, 40), [(30, 40)], (2,)),                  # back
    ((50, 40, 2), [(30, 50)], (0,)),                  # front
    ((9, 1, 8), [(3, 9), (4, 1), (5, 8)], None),      # an extent-1 axis
    ((6, 0, 4), [(3, 6)], (0,)),                      # empty carried axis
    ((6, 5, 4), [(3, 6), (0, 5)], (0, 1)),           # a zero-row matrix
    ((6, 5), [(3, 6), (2, 5)], None),
]


@gpu
@needs_gpu
@pytest.mark.parametrize("shape,mshapes,modes", CHAINS)
@pytest.mark.parametrize("order", ["K", "C"])
def test_multi_mode_product_matches_cpu(backend, shape, mshapes, modes, order, dtype, rng):
    T = rng.standard_normal(shape).astype(dtype)
    mats = [rng.standard_normal(s).astype(dtype) for s in mshapes]
    ref = kronpe.multi_mode_product(T, mats, modes, order="C")
    got = kronpe.multi_mode_product(dev(backend, T), [dev(backend, a) for a in mats], modes, order=order)
    assert _arrays.kind(got) == backend and tuple(got.shape) == ref.shape
    np.testing.assert_allclose(host(got), ref, **TOL[dtype])
    if order == "C":
        assert _arrays.device_contiguous(got) is got


@gpu
@needs_gpu
def test_multi_mode_product_strided_and_mixed_operands(backend, dtype, rng):
    T = rng.standard_normal((12, 10, 8)).astype(dtype)
    A = rng.standard_normal((10, 7)).astype(dtype)  # used transposed: (7, 10) with strides (1, 7)
    Bfull = rng.standard_normal((6, 16)).astype(dtype)
    B = Bfull[:, ::2]  # non-unit column stride: copied before the GEMM
    ref = kronpe.multi_mode_product(T.transpose(2, 0, 1), [A.T, B], (2, 0))
    Td = transpose(backend, dev(backend, T), (2, 0, 1))
    got = kronpe.multi_mode_product(Td, [transpose(backend, dev(backend, A), (1, 0)), dev(backend, Bfull)[:, ::2]], (2, 0))
    np.testing.assert_allclose(host(got), ref, **TOL[dtype])
    # host matrices are uploaded to the tensor's device; the result stays there
    got2 = kronpe.multi_mode_product(Td, [A.T, B], (2, 0))
    assert _arrays.kind(got2) == backend
    np.testing.assert_allclose(host(got2), ref, **TOL[dtype])
    # mixed float32/float64 computes in float64, as on the CPU
    got3 = kronpe.mode_product(dev(backend, T.astype(np.float32)), dev(backend, A.T.astype(np.float64)), 1)
    assert _arrays.dtype_name(got3) == "float64"


@gpu
@needs_gpu
def test_multi_mode_product_negative_strides_cupy(rng):
    cupy = _cupy()
    if cupy is None or "cupy" not in BACKENDS:
        pytest.skip("needs CuPy")
    T = rng.standard_normal((9, 8, 7))
    A = rng.standard_normal((5, 8))
    ref = kronpe.mode_product(T[::-1, :, ::-2], A, 1)
    got = kronpe.mode_product(cupy.asarray(T)[::-1, :, ::-2], cupy.asarray(A), 1)
    np.testing.assert_allclose(got.get(), ref, rtol=1e-12, atol=1e-13)


@gpu
@needs_gpu
def test_multi_mode_product_errors(backend):
    T = dev(backend, np.zeros((4, 5)))
    with pytest.raises(ValueError, match=r"matrices\[0\] must have shape \(m, 4\)"):
        kronpe.mode_product(T, dev(backend, np.zeros((3, 5))), 0)
    with pytest.raises(ValueError, match="modes must be distinct"):
        kronpe.multi_mode_product(T, [np.zeros((2, 4)), np.zeros((2, 4))], (0, 0))


@gpu
@needs_gpu
def test_strided_copy_matches_numpy(backend, dtype, rng):
    a = rng.standard_normal((33, 70, 5)).astype(dtype)
    src = transpose(backend, dev(backend, a), (1, 2, 0))  # a transposed view
    dst = _arrays.device_empty(src, tuple(src.shape), np.dtype(dtype).name)
    _cuda.strided_copy(src, dst)
    np.testing.assert_array_equal(host(dst), a.transpose(1, 2, 0))


# ---- GPU: blending matrix ------------------------------------------------------------------------------

BLEND_CASES = [
    (2, (17, 13), kronpe.Gaussian(16, 0.05)),
    (3, (6, 7, 5), kronpe.Triangle(6)),
    (2, (9, 9), None),
    (1, (40,), kronpe.Rectangle(39, 0.05)),
    (2, (12, 10), kronpe.BSpline(11, order=3)),  # weights from the embedder's distance: stored
]


@gpu
@needs_gpu
@pytest.mark.parametrize("D,grid,emb", BLEND_CASES, ids=["gauss2", "tri3", "linear2", "rect1", "bspline2"])
@pytest.mark.parametrize("channels", [(), (3,), (11,)])
def test_blending_matrix_matches_cpu(backend, D, grid, emb, channels, dtype, rng):
    P = 500
    pts = rng.random((P, D))
    pts[:4] = 0.0
    pts[4:8] = 1.0
    B = kronpe.BlendingMatrix(pts, grid, emb)
    Bd = kronpe.BlendingMatrix(dev(backend, pts), grid, emb)
    G = B.grid_size
    v = rng.standard_normal((G,) + channels).astype(dtype)
    r = rng.standard_normal((P,) + channels).astype(dtype)
    got = Bd.matvec(dev(backend, v))
    assert _arrays.kind(got) == backend and _arrays.dtype_name(got) == np.dtype(dtype).name
    np.testing.assert_allclose(host(got), B.matvec(v), **TOL[dtype])
    ref_t = B.rmatvec(r)
    for deterministic in (True, False):
        Bd.gpu_deterministic = deterministic
        got_t = Bd.rmatvec(dev(backend, r))
        np.testing.assert_allclose(host(got_t), ref_t, rtol=TOL[dtype]["rtol"] * 10, atol=TOL[dtype]["atol"] * 10)
    # the planned transpose is bitwise reproducible
    Bd.gpu_deterministic = True
    a1, a2 = host(Bd.rmatvec(dev(backend, r))), host(Bd.rmatvec(dev(backend, r)))
    np.testing.assert_array_equal(a1, a2)
    # stored weights on the device give the same products
    Bs = kronpe.BlendingMatrix(dev(backend, pts), grid, emb).store()
    np.testing.assert_allclose(host(Bs.matvec(dev(backend, v))), B.matvec(v), **TOL[dtype])
    np.testing.assert_allclose(host(Bs.rmatvec(dev(backend, r))), ref_t, rtol=TOL[dtype]["rtol"] * 10,
                               atol=TOL[dtype]["atol"] * 10)


@gpu
@needs_gpu
def test_blending_matrix_float32_points_and_grid_shaped_values(backend, rng):
    pts = rng.random((300, 2)).astype(np.float32)
    emb = kronpe.Gaussian(8, 0.1)
    B = kronpe.BlendingMatrix(pts, (9, 11), emb)
    Bd = kronpe.BlendingMatrix(dev(backend, pts), (9, 11), emb)
    v = rng.standard_normal((9, 11, 2))
    np.testing.assert_allclose(host(Bd @ dev(backend, v)), B @ v, rtol=1e-11, atol=1e-13)
    with pytest.raises(ValueError, match="v must have 99 rows"):
        Bd.matvec(dev(backend, np.zeros(98)))


@gpu
@needs_gpu
def test_blend_kernels_large_channel_count_and_empty(backend, rng):
    pts = rng.random((0, 2))
    Bd = kronpe.BlendingMatrix(dev(backend, rng.random((5, 2))), (4, 4), None)
    B0 = kronpe.BlendingMatrix(pts, (4, 4), None)
    assert tuple(B0.matvec(np.zeros(16)).shape) == (0,)
    out = Bd.rmatvec(dev(backend, np.zeros((5, 0))))
    assert tuple(out.shape) == (16, 0)


# ---- GPU: streams -----------------------------------------------------------------------------------------


@gpu
@needs_gpu
def test_kernels_on_a_non_default_stream(backend, rng):
    T = rng.standard_normal((64, 48, 3))
    A = rng.standard_normal((20, 64))
    pts = rng.random((2000, 2))
    emb = kronpe.Gaussian(32, 0.03)
    B = kronpe.BlendingMatrix(pts, (33, 33), emb)
    v = rng.standard_normal(33 * 33)
    x = rng.random(1000)
    with side_stream(backend):
        Td, Ad, vd, xd = (dev(backend, a) for a in (T, A, v, x))
        Bd = kronpe.BlendingMatrix(dev(backend, pts), (33, 33), emb)
        chain = kronpe.mode_product(Td, Ad, 0)
        blended = Bd.matvec(vd)
        back = Bd.rmatvec(blended)
        embedded = emb(xd)
    np.testing.assert_allclose(host(chain), kronpe.mode_product(T, A, 0), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(host(blended), B.matvec(v), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(host(back), B.rmatvec(B.matvec(v)), rtol=1e-10, atol=1e-11)
    np.testing.assert_allclose(host(embedded), emb(x), rtol=1e-12, atol=1e-14)


# ---- GPU: past 2^31 elements (needs about 20 GB of free device memory) --------------------------------

BIG = (1 << 31) + (1 << 20)


@gpu
@needs_gpu
@pytest.mark.slow
def test_mode_product_past_2_31_elements(backend):
    if free_bytes(backend) < 3 * 4 * BIG:
        pytest.skip("not enough free device memory")
    n1 = 1 << 16
    n2 = BIG // n1
    if backend == "cupy":
        import cupy

        T = cupy.ones((n1, n2), dtype=cupy.float32)
        T[-1, -1] = 2.0
        A = cupy.ones((3, n2), dtype=cupy.float32)
        A[1] = cupy.arange(n2, dtype=cupy.float32) % 7
    else:
        import torch

        T = torch.ones((n1, n2), dtype=torch.float32, device="cuda")
        T[-1, -1] = 2.0
        A = torch.ones((3, n2), dtype=torch.float32, device="cuda")
        A[1] = torch.arange(n2, dtype=torch.float32, device="cuda") % 7
    out = host(kronpe.mode_product(T, A, 1, order="C"))  # (n1, 3) = T A^T
    a1 = np.arange(n2, dtype=np.float64) % 7
    assert out.shape == (n1, 3)
    np.testing.assert_allclose(out[:-1, 0], n2, rtol=1e-6)
    np.testing.assert_allclose(out[-1, 0], n2 + 1, rtol=1e-6)
    np.testing.assert_allclose(out[:, 1], a1.sum() + np.r_[np.zeros(n1 - 1), a1[-1]], rtol=1e-5)
    # mode 0 of the transposed view (read in place): column sums
    Tt = transpose(backend, T, (1, 0))  # (n2, n1), strides (1, n2)
    ones = _arrays.device_from_host(np.ones((1, n2), np.float32), T)
    out2 = host(kronpe.mode_product(Tt, ones, 0, order="C"))
    np.testing.assert_allclose(out2[0, :-1], n2, rtol=1e-6)
    np.testing.assert_allclose(out2[0, -1], n2 + 1, rtol=1e-6)
    del out2, ones
    # a permuting copy of more than 2^31 elements (the tiled transpose kernel)
    dst = _arrays.device_empty(T, (n2, n1), "float32")
    _cuda.strided_copy(Tt, dst)
    assert float(dst[-1, -1]) == 2.0 and float(dst[0, 0]) == 1.0 and float(dst[n2 // 2, 7]) == 1.0
    assert float(dst.sum()) == pytest.approx(float(BIG // n1 * n1) + 1.0, rel=1e-4)


@gpu
@needs_gpu
@pytest.mark.slow
def test_embedder_past_2_31_elements(backend):
    emb = kronpe.Gaussian(2048, 0.001)
    n = BIG // emb.K + 1
    if free_bytes(backend) < 2 * 4 * n * emb.K:
        pytest.skip("not enough free device memory")
    x = np.linspace(0, 1, n).astype(np.float32)
    out = emb(dev(backend, x))
    rows = np.array([0, 1, n // 2, n - 2, n - 1])
    np.testing.assert_allclose(host(out[rows.tolist()]), emb(x[rows]), rtol=2e-6, atol=1e-7)


# ---- GPU: torch ops ------------------------------------------------------------------------------------------


@gpu
@pytest.mark.skipif("torch" not in BACKENDS, reason="needs kronpe's CUDA kernels and CUDA torch")
def test_torch_ops_on_cuda_match_cpu(rng):
    torch = _torch_cuda()
    kt = pytest.importorskip("kronpe.torch")
    T = torch.from_numpy(rng.standard_normal((6, 5, 4)))
    mats = [torch.from_numpy(rng.standard_normal((3, 6))), torch.from_numpy(rng.standard_normal((2, 4)))]
    ref = kt.multi_mode_product(T, mats, [0, 2])
    got = kt.multi_mode_product(T.cuda(), [m.cuda() for m in mats], [0, 2])
    assert got.device.type == "cuda"
    np.testing.assert_allclose(got.cpu().numpy(), ref.numpy(), rtol=1e-12, atol=1e-13)
    idx = torch.from_numpy(rng.integers(0, 30, size=(50, 4)))
    w = torch.from_numpy(rng.random((50, 4)))
    vals = torch.from_numpy(rng.standard_normal((30, 3)))
    rows = torch.from_numpy(rng.standard_normal((50, 3)))
    np.testing.assert_allclose(kt.blend(vals.cuda(), idx.cuda(), w.cuda()).cpu().numpy(),
                               kt.blend(vals, idx, w).numpy(), rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(kt.blend_transpose(rows.cuda(), idx.cuda(), w.cuda(), 30).cpu().numpy(),
                               kt.blend_transpose(rows, idx, w, 30).numpy(), rtol=1e-11, atol=1e-12)
    with pytest.raises(ValueError, match="indices must lie in"):
        kt.blend(vals.cuda(), (idx + 100).cuda(), w.cuda())
    # gradients through the CUDA kernels
    Tg = T[:3, :3, :2].clone().cuda().requires_grad_()
    Ag = torch.from_numpy(rng.standard_normal((2, 3))).cuda().requires_grad_()
    assert torch.autograd.gradcheck(lambda t, a: kt.multi_mode_product(t, [a], [1]), (Tg, Ag))
    vg = vals[:10].clone().cuda().requires_grad_()
    idx10 = torch.from_numpy(rng.integers(0, 10, size=(7, 4))).cuda()
    w10 = torch.from_numpy(rng.random((7, 4))).cuda()
    assert torch.autograd.gradcheck(lambda v: kt.blend(v, idx10, w10), (vg,))
    rg = rows[:7].clone().cuda().requires_grad_()
    assert torch.autograd.gradcheck(lambda r: kt.blend_transpose(r, idx10, w10, 10), (rg,))
