"""No subnormal number reaches kronpe's products from what kronpe builds: embedder values and
cached factors below the dtype's smallest normal are stored as 0 (a decaying basis has many; each
costs a microcode assist per GEMM instruction on many x86 cores)."""
import numpy as np
import pytest

import kronpe
from kronpe import reference
from kronpe._shared import gemm_operand


def _subnormals(a) -> int:
    a = np.asarray(a)
    return int(np.count_nonzero((a != 0) & (np.abs(a) < np.finfo(a.dtype).tiny)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gaussian_values_below_the_smallest_normal_are_zero(dtype):
    x = np.linspace(0.0, 1.0, 300).astype(dtype)
    emb = kronpe.Gaussian(256, 0.004 if dtype == np.float32 else 0.0015)
    phi = emb(x)
    wide = np.exp(-((x.astype(np.float64)[:, None] - np.arange(256) / 256) ** 2) / (2 * emb.sigma**2))
    tiny = np.finfo(dtype).tiny
    band = (wide > 0) & (wide < tiny)  # where a plain cast would give subnormals
    assert band.sum() > 100, "the case must reach the subnormal band"
    assert _subnormals(phi) == 0
    assert np.all(phi[band] == 0)
    np.testing.assert_allclose(phi[~band], wide[~band].astype(dtype), rtol=1e-6 if dtype == np.float32 else 1e-12, atol=0)


def test_reference_embedder_flushes_alike():
    x = np.linspace(0.0, 1.0, 300).astype(np.float32)
    ref = reference.embed_basis(x, "gaussian", 256, 0, 256.0, 0.004)
    assert _subnormals(ref) == 0
    np.testing.assert_array_equal(kronpe.Gaussian(256, 0.004)(x), ref)


def test_fourier_values_flushed_but_not_the_raw_input():
    x = np.array([1e-39, 0.25], dtype=np.float32)  # the first: a subnormal coordinate
    out = reference.embed_fourier(x, np.array([1.0, 3.0]), include_input=True)
    assert out[0, 0] == x[0]  # the raw input column stays as given
    assert _subnormals(out[:, 1:]) == 0


def test_gemm_operand_copies_and_flushes():
    X = np.array([[1.0, 1e-40], [-1e-42, 0.5]])
    out = gemm_operand(X.T, np.float32)
    assert out.flags.c_contiguous and out.dtype == np.float32
    np.testing.assert_array_equal(out, [[1.0, 0.0], [0.0, 0.5]])
    assert X[0, 1] == 1e-40  # the input is not touched
    assert gemm_operand(X, np.float64)[0, 1] == 1e-40  # a normal float64


@pytest.mark.parametrize("ridge", [0.0, 1e-3])
def test_grid_plan_factors_hold_no_subnormals(ridge):
    x = np.arange(256) / 256
    plan = kronpe.GridPlan([x, x], kronpe.Gaussian(256, 0.0025), ridge=ridge)
    S = np.random.default_rng(0).random((256, 256), dtype=np.float32)
    plan.fit(S)
    mats = [m for v in plan._cast.values() if v is not None for m in v if isinstance(m, np.ndarray) and m.ndim == 2]
    assert mats, "the fit must have cached its factors"
    assert all(_subnormals(m) == 0 for m in mats)
