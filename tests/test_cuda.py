"""The CUDA backend.

Two parts:
- tests that run everywhere: the build reports CUDA consistently, and without CUDA (or without a
  device) the CUDA entry points raise a clear RuntimeError;
- tests of what only a GPU has (the ``cuda_device`` fixture: skipped without kronpe's CUDA
  kernels, a device, and CuPy or CUDA torch): the strided-copy kernel, a non-default stream, and
  sizes past 2^31 elements where the device memory allows (``slow``).

Every kernel family's GPU tests live in its own file: test_mode_product.py, test_embedders.py,
test_blending.py and test_torch_ops.py run their cases (tests/_samples.py) on the ``device`` (or
``torch_device``) fixture's "cpu", "cuda-cupy" and "cuda-torch"; test_fit_grid.py,
test_multigrid.py, test_spline.py and test_torch_modules.py hold their device-only checks (a GPU
result against the host's) on the ``cuda_device`` fixture or ``torch_device`` on the GPU alone.
"""
from __future__ import annotations

import numpy as np
import pytest

import kronpe
from kronpe import _core
from kronpe._adapters import arrays as _arrays, cuda as _cuda

# ---- everywhere ---------------------------------------------------------------------------------------


def test_build_info_reports_cuda_consistently():
    info = kronpe.build_info()
    assert info["cuda"] == kronpe.cuda.is_built() == bool(_core.cuda_built())
    assert info["cuda_devices"] == kronpe.cuda.device_count() >= 0
    if not info["cuda"]:
        assert info["cuda_devices"] == 0 and info["cublas"] is None
        assert not kronpe.cuda.is_available()
        assert kronpe.cuda.empty_cache() == 0 and _core.cuda_multigrid_cache() == 0
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


def test_torch_chain_fast_path_only_for_cuda_tensors_of_one_float_dtype():
    """The CUDA chain's short path (no checks, uploads or casts) is for CUDA torch tensors of one
    float dtype on one device only; here (CPU tensors, NumPy) always the general path."""
    torch = pytest.importorskip("torch")
    T, A = torch.ones(3, 4), torch.ones(2, 3)
    assert _cuda._one_torch_float(T, [A]) is None
    assert _cuda._one_torch_float(np.ones((3, 4)), [np.ones((2, 3))]) is None
    if torch.cuda.is_available():
        Tc, Ac = T.cuda(), A.cuda()
        assert _cuda._one_torch_float(Tc, [Ac]) == "float32"
        assert _cuda._one_torch_float(Tc.double(), [Ac.double()]) == "float64"
        assert _cuda._one_torch_float(Tc, [Ac.double()]) is None
        assert _cuda._one_torch_float(Tc, [A]) is None
        assert _cuda._one_torch_float(Tc.half(), [Ac.half()]) is None


def test_tf32_policy_defaults_off():
    assert kronpe.cuda.allow_tf32() is False
    if kronpe.cuda.is_built():
        kronpe.cuda.set_allow_tf32(True)
        try:
            assert kronpe.cuda.allow_tf32() is True
        finally:
            kronpe.cuda.set_allow_tf32(False)
        assert kronpe.cuda.allow_tf32() is False


# ---- GPU only ------------------------------------------------------------------------------------


def test_strided_copy_matches_numpy(cuda_device, dtype, rng):
    a = rng.standard_normal((33, 70, 5)).astype(dtype)
    src = cuda_device.permute(cuda_device.put(a), (1, 2, 0))  # a transposed view
    dst = _arrays.device_empty(src, tuple(src.shape), np.dtype(dtype).name)
    _cuda.strided_copy(src, dst)
    np.testing.assert_array_equal(cuda_device.host(dst), a.transpose(1, 2, 0))


# ---- GPU: streams -----------------------------------------------------------------------------------------


def test_kernels_on_a_non_default_stream(cuda_device, rng):
    T = rng.standard_normal((64, 48, 3))
    A = rng.standard_normal((20, 64))
    pts = rng.random((2000, 2))
    emb = kronpe.Gaussian(32, 0.03)
    B = kronpe.BlendingMatrix(pts, (33, 33), emb)
    v = rng.standard_normal(33 * 33)
    x = rng.random(1000)
    with cuda_device.stream():
        Td, Ad, vd, xd = (cuda_device.put(a) for a in (T, A, v, x))
        Bd = kronpe.BlendingMatrix(cuda_device.put(pts), (33, 33), emb)
        chain = kronpe.mode_product(Td, Ad, 0)
        blended = Bd.matvec(vd)
        back = Bd.rmatvec(blended)
        embedded = emb(xd)
    np.testing.assert_allclose(cuda_device.host(chain), kronpe.mode_product(T, A, 0), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(cuda_device.host(blended), B.matvec(v), rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(cuda_device.host(back), B.rmatvec(B.matvec(v)), rtol=1e-10, atol=1e-11)
    np.testing.assert_allclose(cuda_device.host(embedded), emb(x), rtol=1e-12, atol=1e-14)


# ---- GPU: past 2^31 elements (needs about 20 GB of free device memory) --------------------------------

BIG = (1 << 31) + (1 << 20)


@pytest.mark.slow
def test_mode_product_past_2_31_elements(cuda_device):
    if cuda_device.free_bytes() < 3 * 4 * BIG:
        pytest.skip("not enough free device memory")
    n1 = 1 << 16
    n2 = BIG // n1
    if cuda_device.lib == "cupy":
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
    out = cuda_device.host(kronpe.mode_product(T, A, 1, order="C"))  # (n1, 3) = T A^T
    a1 = np.arange(n2, dtype=np.float64) % 7
    assert out.shape == (n1, 3)
    np.testing.assert_allclose(out[:-1, 0], n2, rtol=1e-6)
    np.testing.assert_allclose(out[-1, 0], n2 + 1, rtol=1e-6)
    np.testing.assert_allclose(out[:, 1], a1.sum() + np.r_[np.zeros(n1 - 1), a1[-1]], rtol=1e-5)
    # mode 0 of the transposed view (read in place): column sums
    Tt = cuda_device.permute(T, (1, 0))  # (n2, n1), strides (1, n2)
    ones = _arrays.device_from_host(np.ones((1, n2), np.float32), T)
    out2 = cuda_device.host(kronpe.mode_product(Tt, ones, 0, order="C"))
    np.testing.assert_allclose(out2[0, :-1], n2, rtol=1e-6)
    np.testing.assert_allclose(out2[0, -1], n2 + 1, rtol=1e-6)
    del out2, ones
    # a permuting copy of more than 2^31 elements (the tiled transpose kernel)
    dst = _arrays.device_empty(T, (n2, n1), "float32")
    _cuda.strided_copy(Tt, dst)
    assert float(dst[-1, -1]) == 2.0 and float(dst[0, 0]) == 1.0 and float(dst[n2 // 2, 7]) == 1.0
    assert float(dst.sum()) == pytest.approx(float(BIG // n1 * n1) + 1.0, rel=1e-4)


@pytest.mark.slow
def test_embedder_past_2_31_elements(cuda_device):
    emb = kronpe.Gaussian(2048, 0.001)
    n = BIG // emb.K + 1
    if cuda_device.free_bytes() < 2 * 4 * n * emb.K:
        pytest.skip("not enough free device memory")
    x = np.linspace(0, 1, n).astype(np.float32)
    out = emb(cuda_device.put(x))
    rows = np.array([0, 1, n // 2, n - 2, n - 1])
    np.testing.assert_allclose(cuda_device.host(out[rows.tolist()]), emb(x[rows]), rtol=2e-6, atol=1e-7)


