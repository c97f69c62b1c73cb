"""torch.ops.kronpe.*: values against NumPy, gradients (gradcheck, gradgradcheck), opcheck.

One generator, ``torch_op_samples(device, requires_grad, dtype)`` (tests/_samples.py), feeds the
correctness, gradient and opcheck tests on the CPU and on a GPU: shapes with carried axes, modes
out of order, non-contiguous, broadcast and empty inputs.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")
kt = pytest.importorskip("kronpe.torch")

from _samples import ids, torch_dtype, torch_op_sample, torch_op_samples  # noqa: E402

OPS = {
    "multi_mode_product": torch.ops.kronpe.multi_mode_product.default,
    "blend": torch.ops.kronpe.blend.default,
    "blend_transpose": torch.ops.kronpe.blend_transpose.default,
}
SAMPLES = list(torch_op_samples("cpu", False))
SAMPLE_IDS = ids(SAMPLES)
GRAD_IDS = [s.id for s in SAMPLES if not s.overlapping]  # gradcheck perturbs inputs in place


@pytest.fixture
def device(torch_device):
    """The torch ops run on torch tensors, on the CPU and on a GPU (conftest's ``torch_device``;
    the ``tol`` fixtures follow this device)."""
    return torch_device


# ---- NumPy references --------------------------------------------------------------------------


def _np(t):
    return t.detach().cpu().double().numpy()


def ref_mmp(T, matrices, modes):
    out = _np(T)
    for A, m in zip(matrices, modes):
        out = np.moveaxis(np.tensordot(_np(A), out, axes=([1], [m])), 0, m)
    return out


def dense_blend(indices, weights, G):
    """The dense P x G matrix of (indices, weights)."""
    idx, w = indices.cpu().numpy(), _np(weights)
    B = np.zeros((idx.shape[0], G))
    np.add.at(B, (np.repeat(np.arange(idx.shape[0]), idx.shape[1]), idx.reshape(-1)), w.reshape(-1))
    return B


def reference_of(name, args):
    if name == "multi_mode_product":
        return ref_mmp(*args)
    if name == "blend":
        V, idx, w = args
        return dense_blend(idx, w, V.shape[0]) @ _np(V)
    R, idx, w, G = args
    return dense_blend(idx, w, G).T @ _np(R)


# ---- tests ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("sample_id", SAMPLE_IDS)
def test_values_match_numpy(sample_id, device, dtype, sum_tol):
    _, name, args, _ = torch_op_sample(device.torch, sample_id, dtype=torch_dtype(dtype))
    out = OPS[name](*args)
    ref = reference_of(name, args)
    assert out.dtype == torch_dtype(dtype) and out.device.type == device.torch
    assert tuple(out.shape) == ref.shape
    assert out.is_contiguous()
    np.testing.assert_allclose(_np(out), ref, rtol=sum_tol.rtol, atol=sum_tol.rtol / 2)


def _flat(name, args):
    """(function of a flat tuple of tensors, that tuple): gradcheck does not look into lists."""
    if name != "multi_mode_product":
        return (lambda *a: OPS[name](*a)), args
    T, mats, modes = args
    return (lambda T, *m: OPS[name](T, list(m), modes)), (T, *mats)


def _nondet_tol(device) -> float:
    """gradcheck's tolerance for a backward that differs between runs: blend_transpose on CUDA
    sums with atomics in an order that changes between runs (float64 rounding; the deterministic
    plan is used only under torch.use_deterministic_algorithms), seen on an H100 at 88 nonzeros
    onto 9 nodes; the CPU kernels are deterministic (0)."""
    return 1e-12 if device.torch == "cuda" else 0.0


@pytest.fixture(params=[True, False], ids=["direct", "adjoint"])
def direct_gemms(request, monkeypatch):
    """Both eager CPU autograd paths of multi_mode_product: chains of end-axis GEMMs recorded by
    torch's autograd (``DIRECT_GEMMS``), and every chain through the op's own adjoint."""
    from kronpe.torch import _ops

    monkeypatch.setattr(_ops, "DIRECT_GEMMS", request.param)
    return request.param


@pytest.mark.parametrize("sample_id", GRAD_IDS)
def test_gradcheck(sample_id, device, direct_gemms):
    fn, inputs = _flat(*torch_op_sample(device.torch, sample_id, requires_grad=True)[1:3])
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-8, fast_mode=True,
                                    nondet_tol=_nondet_tol(device))


@pytest.mark.parametrize("sample_id", GRAD_IDS)
def test_gradgradcheck(sample_id, device, direct_gemms):
    fn, inputs = _flat(*torch_op_sample(device.torch, sample_id, requires_grad=True)[1:3])
    assert torch.autograd.gradgradcheck(fn, inputs, eps=1e-6, atol=1e-8, fast_mode=True,
                                        nondet_tol=_nondet_tol(device))


@pytest.mark.parametrize("requires_grad", [False, True], ids=["nograd", "grad"])
@pytest.mark.parametrize("sample_id", SAMPLE_IDS)
def test_opcheck(sample_id, requires_grad, device):
    _, name, args, _ = torch_op_sample(device.torch, sample_id, requires_grad=requires_grad)
    torch.library.opcheck(OPS[name], args)


@pytest.mark.parametrize("sample_id", ["mmp-noncontiguous", "blend-basic", "blendT-basic"])
def test_opcheck_float32(sample_id, device):
    _, name, args, _ = torch_op_sample(device.torch, sample_id, requires_grad=True, dtype=torch.float32)
    torch.library.opcheck(OPS[name], args)


def test_indices_out_of_range(device):
    V = torch.randn(30, 3, dtype=torch.float64, device=device.torch)
    idx = torch.randint(0, 30, (50, 4), device=device.torch)
    w = torch.rand(50, 4, dtype=torch.float64, device=device.torch)
    R = torch.randn(50, 3, dtype=torch.float64, device=device.torch)
    # the CPU kernel and the CUDA check word this differently
    with pytest.raises(ValueError, match="outside the grid|indices must lie in"):
        kt.blend(V, idx + 100, w)
    with pytest.raises(ValueError, match=r"indices must lie in \[0, 30\)"):
        kt.blend_transpose(R, idx + 100, w, 30)


def test_backward_is_made_of_kronpe_ops(monkeypatch):
    """The mode-product adjoint wrt T is the chain with transposed matrices (a kronpe op)."""
    from kronpe.torch import _ops

    monkeypatch.setattr(_ops, "DIRECT_GEMMS", False)  # a single end-axis GEMM would be torch's mm
    T = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    A = torch.randn(3, 4, dtype=torch.float64)
    y = kt.multi_mode_product(T, [A])
    G = torch.ones_like(y, requires_grad=True)
    (g,) = torch.autograd.grad(y, T, G, create_graph=True)
    assert "kronpe" in g.grad_fn.name().lower() or "multi_mode_product" in g.grad_fn.name().lower()
    np.testing.assert_allclose(_np(g), _np(A.T @ torch.ones(3, 5, dtype=torch.float64)), rtol=1e-12)


@pytest.mark.parametrize("modes", [[0, 1], [1, 0], [0, 2], [0]])
def test_direct_gemms_under_autograd(modes):
    """Eager CPU chains of end-axis GEMMs under autograd are torch.mm calls that autograd records:
    values, gradients and second derivatives of the einsum, in the cheaper mode order."""
    T = torch.randn(5, 3, 4, dtype=torch.float64) if 2 in modes else torch.randn(5, 4, dtype=torch.float64)
    mats = [torch.randn(r, T.shape[m], dtype=torch.float64, requires_grad=True) for r, m in zip((6, 2), modes)]
    T.requires_grad_()
    out = kt.multi_mode_product(T, mats, modes)
    assert out.grad_fn.name().startswith(("MmBackward", "ViewBackward"))
    np.testing.assert_allclose(_np(out), ref_mmp(T, mats, modes), rtol=1e-12)
    G = torch.randn_like(out)
    letters = "ijk"[: T.dim()]
    outl = list(letters)
    for j, m in enumerate(modes):
        outl[m] = "ab"[j]
    spec = f"{letters}," + ",".join("ab"[j] + letters[m] for j, m in enumerate(modes)) + "->" + "".join(outl)
    got = torch.autograd.grad(out, (T, *mats), G)
    want = torch.autograd.grad(torch.einsum(spec, T, *mats), (T, *mats), G)
    for a, b in zip(got, want):
        np.testing.assert_allclose(_np(a), _np(b), rtol=1e-10, atol=1e-12)
    assert torch.autograd.gradgradcheck(lambda t, *ms: kt.multi_mode_product(t, list(ms), modes), (T, *mats))


def test_direct_gemms_only_for_end_axes_and_kronpe_kernel(monkeypatch):
    """A middle mode, a strided T or another registered CPU kernel keep the op's
    autograd.Function."""
    from kronpe.torch import _ops

    def name(T, mats, modes):
        return kt.multi_mode_product(T, mats, modes).grad_fn.name()

    T = torch.randn(4, 3, 2, dtype=torch.float64, requires_grad=True)
    A, B = (torch.randn(4, n, dtype=torch.float64, requires_grad=True) for n in (4, 3))
    assert "Kronpe" in name(T, [A, B], [0, 1])  # mode 1 is a middle axis
    assert "Kronpe" in name(T.detach().mT.requires_grad_(), [A, torch.randn(4, 2, dtype=torch.float64)], [0, 1])
    assert "Kronpe" not in name(T, [A], [0])
    kernel = _ops.KERNELS["cpu"]["multi_mode_product"]
    monkeypatch.setitem(_ops.KERNELS["cpu"], "multi_mode_product", lambda *a: kernel(*a))
    assert "Kronpe" in name(T, [A], [0])


def test_matrix_gradient_paths_agree():
    """dA_j is computed through U = T x_{i!=j} A_i or H = G x_{i!=j} A_i^T, whichever is
    smaller: both shapes of problem give the einsum gradient."""
    for shapes in [((6, 7, 2), (30, 6), (2, 7)), ((6, 7, 2), (2, 6), (30, 7))]:
        T = torch.randn(*shapes[0], dtype=torch.float64)
        A = torch.randn(*shapes[1], dtype=torch.float64, requires_grad=True)
        B = torch.randn(*shapes[2], dtype=torch.float64, requires_grad=True)
        Gr = torch.randn(shapes[1][0], shapes[2][0], 2, dtype=torch.float64)
        gA, gB = torch.autograd.grad(kt.multi_mode_product(T, [A, B]), (A, B), Gr)
        eA, eB = torch.autograd.grad(torch.einsum("ijc,ai,bj->abc", T, A, B), (A, B), Gr)
        np.testing.assert_allclose(_np(gA), _np(eA), rtol=1e-10)
        np.testing.assert_allclose(_np(gB), _np(eB), rtol=1e-10)


def test_negative_and_default_modes():
    T = torch.randn(3, 4, 5)
    A, B = torch.randn(2, 3), torch.randn(6, 5)
    np.testing.assert_allclose(_np(kt.multi_mode_product(T, [A, B], [0, -1])), ref_mmp(T, [A, B], [0, 2]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(_np(kt.multi_mode_product(T, [A])), ref_mmp(T, [A], [0]), rtol=1e-5, atol=1e-5)


def test_blend_weights_may_be_float64_for_float32_values():
    V = torch.randn(10, 2)
    idx = torch.randint(0, 10, (6, 4))
    w = torch.rand(6, 4, dtype=torch.float64, requires_grad=True)
    out = kt.blend(V, idx, w)
    assert out.dtype == torch.float32
    np.testing.assert_allclose(_np(out), dense_blend(idx, w, 10) @ _np(V), rtol=1e-5, atol=1e-6)
    out.sum().backward()
    assert w.grad.dtype == torch.float64


def test_blend_is_adjoint_of_transpose():
    g = torch.Generator().manual_seed(3)
    V = torch.randn(20, 3, generator=g, dtype=torch.float64)
    R = torch.randn(9, 3, generator=g, dtype=torch.float64)
    idx = torch.randint(0, 20, (9, 4), generator=g)
    w = torch.rand(9, 4, generator=g, dtype=torch.float64)
    lhs = (kt.blend(V, idx, w) * R).sum()
    rhs = (V * kt.blend_transpose(R, idx, w, 20)).sum()
    assert abs(float(lhs - rhs)) < 1e-12 * float(abs(lhs))


def test_transpose_schedule_follows_in_place_changes():
    """blend_transpose caches a schedule per indices tensor; an in-place change must refresh it."""
    R = torch.ones(3, 1, dtype=torch.float64)
    idx = torch.tensor([[0, 1], [1, 2], [2, 3]])
    w = torch.ones(3, 2, dtype=torch.float64)
    np.testing.assert_allclose(_np(kt.blend_transpose(R, idx, w, 40)).ravel()[:4], [1, 2, 2, 1])
    idx[2] = torch.tensor([30, 39])  # a wider span and other nodes
    out = _np(kt.blend_transpose(R, idx, w, 40)).ravel()
    np.testing.assert_allclose(out, dense_blend(idx, w, 40).T @ np.ones(3), rtol=1e-12)
    idx[0, 0] = 40
    with pytest.raises(ValueError, match=r"indices must lie in \[0, 40\)"):
        kt.blend_transpose(R, idx, w, 40)


def test_plain_api_gives_torch_back():
    import kronpe

    T = torch.randn(4, 5, 3, dtype=torch.float64, requires_grad=True)
    A, B = torch.randn(2, 4, dtype=torch.float64), torch.randn(6, 5, dtype=torch.float64)
    out = kronpe.multi_mode_product(T, [A, B])
    assert isinstance(out, torch.Tensor) and out.shape == (2, 6, 3) and not out.requires_grad
    np.testing.assert_allclose(_np(out), _np(kt.multi_mode_product(T, [A, B])), rtol=1e-12)
    e = kronpe.Gaussian(8, 0.1)
    assert isinstance(e(torch.rand(5)), torch.Tensor)


def test_plain_fit_grid_gives_torch_back():
    import kronpe

    sig = torch.rand(16, 12, 2, dtype=torch.float64)
    model = kronpe.fit_grid(sig, [kronpe.Gaussian(8, 0.1)] * 2, ridge=1e-6)
    ref = kronpe.fit_grid(sig.numpy(), [kronpe.Gaussian(8, 0.1)] * 2, ridge=1e-6)
    coords = [torch.arange(16, dtype=torch.float64) / 16, torch.arange(12, dtype=torch.float64) / 12]
    pred = model.predict_grid(coords)
    assert isinstance(pred, torch.Tensor) and pred.shape == (16, 12, 2)
    np.testing.assert_allclose(_np(pred), ref.predict_grid([c.numpy() for c in coords]), rtol=1e-12)
    pts = torch.rand(5, 2, dtype=torch.float64)
    assert isinstance(model.predict(pts), torch.Tensor)
    assert isinstance(model.predict_grid([c.numpy() for c in coords]), np.ndarray)  # NumPy in, NumPy out


def test_one_d_wrappers():
    V = torch.randn(5, dtype=torch.float64)
    idx = torch.tensor([[0, 1], [3, 4]])
    w = torch.tensor([[0.25, 0.75], [1.0, 0.0]], dtype=torch.float64)
    np.testing.assert_allclose(_np(kt.blend(V, idx, w)), [0.25 * V[0] + 0.75 * V[1], V[3]], rtol=1e-12)
    R = torch.tensor([1.0, 2.0], dtype=torch.float64)
    np.testing.assert_allclose(_np(kt.blend_transpose(R, idx, w, 5)), [0.25, 0.75, 0, 2.0, 0], rtol=1e-12)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: kt.multi_mode_product(torch.randn(3, 4), [torch.randn(2, 5)]), r"matrices\[0\] must have shape \(m, 3\)"),
        (lambda: kt.multi_mode_product(torch.randn(3, 4), [torch.randn(2, 3)], [5]), r"modes\[0\] = 5 is out of range"),
        (lambda: kt.multi_mode_product(torch.randn(3, 4), [torch.randn(2, 3), torch.randn(2, 3)], [0, 0]), "modes must be distinct"),
        (lambda: kt.multi_mode_product(torch.randn(3, 4), [torch.randn(2, 3)], [0, 1]), "one mode per matrix"),
        (lambda: kt.multi_mode_product(torch.randn(3, 4), [torch.randn(2, 3, dtype=torch.float64)]), r"matrices\[0\] has dtype"),
        (lambda: kt.multi_mode_product(torch.randn(3, 4).int(), [torch.randn(2, 3)]), "T must be float32 or float64"),
        (lambda: kt.multi_mode_product(torch.randn(3, 4), [torch.randn(3)]), r"matrices\[0\] must be 2-D"),
        (lambda: kt.blend(torch.randn(5, 2), torch.tensor([[0, 5]]), torch.ones(1, 2)), "outside the grid"),
        (lambda: kt.blend(torch.randn(5, 2), torch.tensor([[0, -1]]), torch.ones(1, 2)), "outside the grid"),
        (lambda: kt.blend(torch.randn(5, 2), torch.tensor([[0, 1]]).int(), torch.ones(1, 2)), "indices must be int64"),
        (lambda: kt.blend(torch.randn(5, 2), torch.tensor([[0, 1]]), torch.ones(1, 3)), "weights must have the shape of indices"),
        (lambda: kt.blend(torch.randn(5, 2, 2), torch.tensor([[0, 1]]), torch.ones(1, 2)), "values must be 2-D"),
        (lambda: kt.blend_transpose(torch.randn(2, 2), torch.tensor([[0, 1]]), torch.ones(1, 2), 5), "one row per point"),
        (lambda: kt.blend_transpose(torch.randn(1, 2), torch.tensor([[0, 7]]), torch.ones(1, 2), 5), r"indices must lie in \[0, 5\)"),
        (lambda: kt.blend_transpose(torch.randn(1, 2), torch.tensor([[0, 1]]), torch.ones(1, 2), -1), "num_nodes must be >= 0"),
    ],
)
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_fake_shapes_under_compile():
    """The fake implementations give the real shapes (no graph break with fullgraph=True)."""

    def f(T, A, B, V, idx, w):
        y = kt.multi_mode_product(T, [A, B], [0, 1])
        z = kt.blend(y.reshape(-1, 2), idx, w)
        return kt.blend_transpose(z, idx, w, 12)

    args = (torch.randn(3, 4, 2), torch.randn(3, 3), torch.randn(4, 4), None,
            torch.randint(0, 12, (5, 4)), torch.rand(5, 4))
    eager = f(*args)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")(*args)
    np.testing.assert_allclose(_np(compiled), _np(eager), rtol=1e-6)



@pytest.mark.parametrize("path", ["eager", "custom op"])
def test_backward_reuses_forward_intermediates(monkeypatch, path):
    """With gradients to T and every matrix, a D = 2 chain costs 4 single-mode products (2 forward,
    2 for the gradient chain) and 2 contractions, as autograd through two tensordots: the
    forward's intermediate is saved, not recomputed. Both the eager path and the custom ops."""
    from kronpe.torch import _ops

    calls = []
    kernel = _ops.KERNELS["cpu"]["multi_mode_product"]

    inside = []

    def counting(T, mats, modes):
        calls.append(len(mats))
        inside.append(1)
        try:
            return kernel(T, mats, modes)
        finally:
            inside.pop()

    monkeypatch.setitem(_ops.KERNELS["cpu"], "multi_mode_product", counting)
    # single-mode products on a first or last axis skip the kernel (one torch.mm): count them too
    end = _ops._cpu.end_mode_product

    def counting_end(X, A, m):
        Y = end(X, A, m)
        if Y is not None and not inside:
            calls.append(1)
        return Y

    monkeypatch.setattr(_ops._cpu, "end_mode_product", counting_end)
    T = torch.randn(6, 5, 2, dtype=torch.float64, requires_grad=True)
    A = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    B = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    if path == "eager":
        out = torch.ops.kronpe.multi_mode_product(T, [A, B], [0, 1])
    else:
        out = torch.ops.kronpe.multi_mode_product_steps(T, [A, B], [0, 1])[-1]
    G = torch.randn_like(out)
    gT, gA, gB = torch.autograd.grad(out, (T, A, B), G)
    assert calls == [1, 1, 1, 1]
    eT, eA, eB = torch.autograd.grad(torch.einsum("ijc,ai,bj->abc", T, A, B), (T, A, B), G)
    for g, e in ((gT, eT), (gA, eA), (gB, eB)):
        np.testing.assert_allclose(_np(g), _np(e), rtol=1e-10)


# ---- banded matrices and single GEMMs (CPU fast paths) -------------------------------------------


def _banded(m, n, half_width, dtype=torch.float64, seed=0):
    """An (m, n) matrix whose row i is nonzero only within half_width of column i * n / m."""
    g = torch.Generator().manual_seed(seed)
    A = torch.randn(m, n, generator=g, dtype=dtype)
    rows = torch.arange(m, dtype=torch.float64)[:, None] * n / m
    cols = torch.arange(n, dtype=torch.float64)[None, :]
    return torch.where((cols - rows).abs() <= half_width, A, torch.zeros((), dtype=dtype))


@pytest.mark.parametrize("channels", [(), (3,), (2, 3)], ids=["no channels", "3 channels", "2x3 channels"])
@pytest.mark.parametrize("modes", [[0, 1], [1, 0]])
@pytest.mark.parametrize("transposed", [False, True], ids=["A", "A.mT"])
def test_banded_chain_matches_numpy(channels, modes, transposed):
    """Banded matrices (compact bases) take the banded chain: the same values as dense products."""
    from kronpe.torch import _cpu

    T = torch.randn(150, 140, *channels, dtype=torch.float64)
    sizes = {0: 150, 1: 140}
    outs = {0: 170, 1: 130}
    mats = []
    for m in modes:
        A = _banded(sizes[m], outs[m], 6).mT if transposed else _banded(outs[m], sizes[m], 6)
        assert _cpu._band(A) is not None
        mats.append(A)
    out = kt.multi_mode_product(T, mats, modes)
    assert out.is_contiguous() and out.shape == (170, 130, *channels)
    np.testing.assert_allclose(_np(out), ref_mmp(T, mats, modes), rtol=1e-12, atol=1e-12)


def test_banded_chain_three_modes_float32():
    from kronpe.torch import _cpu

    T = torch.randn(130, 140, 150, 2)
    mats = [_banded(140, 130, 5, torch.float32, 1), _banded(135, 140, 5, torch.float32, 2),
            _banded(160, 150, 5, torch.float32, 3)]
    assert all(_cpu._band(A) is not None for A in mats)
    out = _cpu.multi_mode_product(T, mats, [0, 1, 2])
    ref = ref_mmp(T, mats, [0, 1, 2])
    np.testing.assert_allclose(_np(out), ref, rtol=1e-4, atol=1e-5 * np.abs(ref).max())


def test_dense_matrices_skip_the_banded_chain():
    from kronpe.torch import _cpu

    A = torch.randn(200, 200, dtype=torch.float64)
    assert _cpu._band(A) is None  # its far corners are used: rejected at once
    A[0, -1] = A[-1, 0] = 0
    assert _cpu._band(A) is None  # the blocks' windows span it all
    W = _banded(200, 200, 5)
    W[0, -1] = 1.0  # one far corner: still mostly banded, multiplied correctly
    T = torch.randn(200, 200, dtype=torch.float64)
    np.testing.assert_allclose(_np(kt.multi_mode_product(T, [W, W])), ref_mmp(T, [W, W], [0, 1]),
                               rtol=1e-10, atol=1e-10)
    assert _cpu._band(torch.zeros(8, 8)) is None  # small: dense GEMMs


def test_banded_chain_zero_rows_and_in_place_changes():
    """Rows of zeros give zeros; a matrix changed in place (fewer zeros) gets a new band plan."""
    from kronpe.torch import _cpu

    A = _banded(160, 150, 4)
    A[:40] = 0  # the first blocks of rows are empty windows
    T = torch.randn(150, 140, 3, dtype=torch.float64)
    B = _banded(130, 140, 4)
    out = _cpu.multi_mode_product(T, [A, B], [0, 1])
    assert _cpu._band(A) is not None
    assert not out[:40].any()
    np.testing.assert_allclose(_np(out), ref_mmp(T, [A, B], [0, 1]), rtol=1e-12, atol=1e-12)
    with torch.no_grad():
        A.add_(1.0)  # dense now: the cached band must not be used
    assert _cpu._band(A) is None
    out = _cpu.multi_mode_product(T, [A, B], [0, 1])
    np.testing.assert_allclose(_np(out), ref_mmp(T, [A, B], [0, 1]), rtol=1e-10, atol=1e-10)


def test_banded_chain_gradients(monkeypatch):
    """gradcheck through the banded chain (small matrices, forced onto it): forward, the
    adjoint's transposed bands and the single-mode steps."""
    from kronpe.torch import _cpu

    monkeypatch.setattr(_cpu, "_BAND_MIN_ELEMENTS", 1)
    monkeypatch.setattr(_cpu, "_BAND_ROWS", 3)
    _cpu._BANDS.clear()
    A = _banded(16, 14, 1)
    B = _banded(13, 15, 1, seed=1)
    assert all(_cpu._band(M) is not None for M in (A, B, A.mT, B.mT))
    T = torch.randn(14, 15, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: kt.multi_mode_product(t, [A, B]), (T,), fast_mode=True)
    # gradients to the matrices too (dense: every entry, the zeros outside the band included),
    # against autograd through einsum (gradcheck perturbs entries through ``.data``, which the
    # band cache, keyed like every torch cache by the tensor's version counter, does not see)
    Ag, Bg = A.clone().requires_grad_(), B.clone().requires_grad_()
    out = kt.multi_mode_product(T, [Ag, Bg])
    G = torch.randn_like(out)
    got = torch.autograd.grad(out, (T, Ag, Bg), G)
    want = torch.autograd.grad(torch.einsum("ijc,ai,bj->abc", T, Ag, Bg), (T, Ag, Bg), G)
    for g, e in zip(got, want):
        np.testing.assert_allclose(_np(g), _np(e), rtol=1e-10, atol=1e-12)
    _cpu._BANDS.clear()


@pytest.mark.parametrize("shape, mode", [((5, 4), 0), ((5, 4), 1), ((5, 4, 3), 0), ((5, 4, 3), 2)])
def test_end_mode_product(shape, mode):
    from kronpe.torch import _cpu
    from kronpe.torch._ops import _contract_all_but

    X = torch.randn(*shape, dtype=torch.float64)
    A = torch.randn(6, shape[mode], dtype=torch.float64)
    Y = _cpu.end_mode_product(X, A, mode)
    assert Y.is_contiguous()
    np.testing.assert_allclose(_np(Y), ref_mmp(X, [A], [mode]), rtol=1e-12)
    axes = [a for a in range(len(shape)) if a != mode]
    G = torch.randn_like(Y)
    np.testing.assert_allclose(_np(_contract_all_but(G, X, mode)),
                               _np(torch.tensordot(G, X, dims=(axes, axes))), rtol=1e-12)


def test_end_mode_product_declines_middle_and_strided():
    from kronpe.torch import _cpu

    X = torch.randn(5, 4, 3, dtype=torch.float64)
    assert _cpu.end_mode_product(X, torch.randn(2, 4, dtype=torch.float64), 1) is None
    assert _cpu.end_mode_product(X.mT, torch.randn(2, 3, dtype=torch.float64), 1 - 1) is None
    assert _cpu.end_mode_product(X[:0], torch.randn(2, 0, dtype=torch.float64), 0) is None


def test_inference_mode_tensors():
    """Inference tensors have no version counter: the band and transpose plans are made per call."""
    from kronpe.torch import _cpu

    with torch.inference_mode():
        A = _banded(160, 150, 4)
        T = torch.randn(150, 150, 2, dtype=torch.float64)
        assert _cpu._band(A) is not None
        B = _banded(150, 160, 4).mT[:130]  # (130, 150), a view
        out = kt.multi_mode_product(T, [A, B], [0, 1])
        np.testing.assert_allclose(_np(out), ref_mmp(T, [A, B], [0, 1]), rtol=1e-10, atol=1e-10)
        idx = torch.tensor([[0, 3], [2, 1]])
        w = torch.tensor([[0.5, 0.5], [1.0, 2.0]], dtype=torch.float64)
        rows = torch.tensor([[1.0], [2.0]], dtype=torch.float64)
        got = kt.blend_transpose(rows, idx, w, 4)
        np.testing.assert_allclose(_np(got), dense_blend(idx, w, 4).T @ _np(rows))


@pytest.mark.parametrize("modes", [[0, 1, 2], [2, 0, 1]])
@pytest.mark.parametrize("needs", ["all", "T", "matrices", "first matrix"])
def test_rotation_chain_values_and_gradients(modes, needs):
    """Eager chains over every axis (D = 3, no carried axes) run in rotated layouts: the same
    values and gradients as autograd through einsum, whatever needs a gradient."""
    from kronpe.torch import _ops

    g = torch.Generator().manual_seed(3)
    shape = (5, 6, 4)
    T = torch.randn(*shape, generator=g, dtype=torch.float64)
    mats = [torch.randn(shape[m], shape[m], generator=g, dtype=torch.float64) for m in modes]  # equal costs
    T.requires_grad_(needs in ("all", "T"))
    for j, A in enumerate(mats):
        A.requires_grad_(needs in ("all", "matrices") or (needs == "first matrix" and j == 0))
    assert _ops._rotates(T, mats, modes, _ops._chain_order(mats))
    out = kt.multi_mode_product(T, mats, modes)
    np.testing.assert_allclose(_np(out), ref_mmp(T, mats, modes), rtol=1e-12)
    inputs = [t for t in (T, *mats) if t.requires_grad]
    G = torch.randn_like(out)
    got = torch.autograd.grad(out, inputs, G)
    letters = "ijk"
    outl = list(letters)
    for j, m in enumerate(modes):
        outl[m] = "abc"[j]
    spec = f"{letters}," + ",".join("abc"[j] + letters[m] for j, m in enumerate(modes)) + "->" + "".join(outl)
    want = torch.autograd.grad(torch.einsum(spec, T, *mats), inputs, G)
    for a, b in zip(got, want):
        np.testing.assert_allclose(_np(a), _np(b), rtol=1e-10, atol=1e-12)


def test_rotation_chain_double_backward():
    T = torch.randn(4, 3, 5, dtype=torch.float64, requires_grad=True)
    mats = [torch.randn(n, n, dtype=torch.float64, requires_grad=True) for n in (4, 3, 5)]
    from kronpe.torch import _ops

    assert _ops._rotates(T, mats, [0, 1, 2], _ops._chain_order(mats))
    assert torch.autograd.gradgradcheck(lambda t, *ms: kt.multi_mode_product(t, list(ms)), (T, *mats))


def test_rotation_skips_two_axes_and_costlier_orders():
    from kronpe.torch import _ops

    T = torch.randn(8, 8, dtype=torch.float64)
    mats = [torch.randn(8, 8, dtype=torch.float64)] * 2
    assert not _ops._rotates(T, mats, [0, 1], _ops._chain_order(mats))
    T3 = torch.randn(40, 40, 40, dtype=torch.float64)
    shrink_last = [torch.randn(40, 40), torch.randn(40, 40), torch.randn(2, 40)]
    shrink_last = [A.double() for A in shrink_last]
    order = _ops._chain_order(shrink_last)
    assert order[0] == 2 and not _ops._rotates(T3, shrink_last, [0, 1, 2], order)
    assert not _ops._rotates(T3.mT, [torch.randn(4, 40, dtype=torch.float64)] * 3, [0, 1, 2], [0, 1, 2])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(
    "shape, modes, rows",
    [((6, 5, 3), [0, 1], [4, 7]), ((6, 5, 3), [1, 0], [7, 4]), ((6, 5, 3), [0, 1], [7, 4]), ((7, 2), [0], [3]),
     ((4, 3, 5, 2, 2), [2, 0, 1], [6, 3, 3]), ((4, 3, 5, 2), [0, 1, 2], [4, 3, 5]),
     ((140, 150, 3), [0, 1], [130, 160]), ((140, 150, 3), [0, 1], [140, 150])],
    ids=["D=2 c=3", "modes reversed", "D=2 copy first", "D=1 c=2", "D=3 c=2x2", "D=3 copy first",
         "large (packed GEMM)", "large, copy first"])
def test_channel_rotation_matches_numpy(shape, modes, rows, dtype):
    """Leading-axis chains with a few carried channels run channels-first (the rotation) and
    interleave once: the values of the NumPy reference, C-contiguous; forward and adjoint under
    autograd agree with einsum."""
    from kronpe.torch import _cpu

    g = torch.Generator().manual_seed(5)
    T = torch.randn(*shape, generator=g, dtype=dtype)
    mats = [torch.randn(m, shape[ax], generator=g, dtype=dtype) / shape[ax] ** 0.5 for m, ax in zip(rows, modes)]
    assert _cpu.channel_rotation(T, mats, modes) is not None
    out = _cpu.multi_mode_product(T, mats, modes)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-11, atol=1e-12)
    assert out.is_contiguous()
    np.testing.assert_allclose(_np(out), ref_mmp(T, mats, modes), **tol)
    W = T.clone().requires_grad_()
    y = kt.multi_mode_product(W, mats, modes)
    G = torch.randn(y.shape, generator=g, dtype=dtype)
    (dW,) = torch.autograd.grad(y, W, G)
    np.testing.assert_allclose(_np(dW), ref_mmp(G, [A.mT for A in mats], modes), **tol)


def test_channel_rotation_declines():
    """The planner's program keeps what the rotation does not suit: many channels, middle or
    trailing modes, a non-contiguous T, an order costlier than the planner's."""
    from kronpe.torch import _cpu

    A = torch.randn(4, 6, dtype=torch.float64)
    assert _cpu.channel_rotation(torch.randn(6, 6, 16, dtype=torch.float64), [A, A], [0, 1]) is None  # 16 channels
    assert _cpu.channel_rotation(torch.randn(3, 6, 6, dtype=torch.float64), [A, A], [1, 2]) is None  # channels first
    assert _cpu.channel_rotation(torch.randn(6, 3, 6, dtype=torch.float64), [A, A], [0, 2]) is None  # middle axis
    assert _cpu.channel_rotation(torch.randn(3, 6, 6, dtype=torch.float64).permute(1, 2, 0), [A, A], [0, 1]) is None
    assert _cpu.channel_rotation(torch.randn(6, 6, 1, dtype=torch.float64), [A, A], [0, 1]) is None  # no channels
    grow, shrink = torch.randn(40, 6, dtype=torch.float64), torch.randn(1, 6, dtype=torch.float64)
    T = torch.randn(6, 6, 3, dtype=torch.float64)
    assert _cpu.channel_rotation(T, [shrink, grow], [0, 1]) == ([0, 1], False)  # axis 0 first: copy last
    assert _cpu.channel_rotation(T, [grow, shrink], [0, 1]) == ([1, 0], True)  # axis 1 first: copy first
    mid = torch.randn(40, 6, dtype=torch.float64)
    T3 = torch.randn(6, 6, 6, 2, dtype=torch.float64)
    assert _cpu.channel_rotation(T3, [grow, shrink, mid], [0, 1, 2]) is None  # shrinking axis 1 first is cheapest


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("ta, tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("size", [(5, 4, 3), (150, 140, 130), (130, 120, 900)],
                         ids=["torch.mm", "packed", "long contraction"])
@pytest.mark.parametrize("chain_gemm", ["auto", "blas"])
def test_gemm_layouts(size, ta, tb, dtype, chain_gemm):
    """_cpu.gemm: L @ R for plain and transposed views, small (torch.mm) and large (kronpe's
    packed GEMM where the CPU runs it, unless the chains' GEMM is set to the BLAS), into a
    row-major view with a row stride."""
    from kronpe import _core

    _core._tuning.set_chain_gemm(chain_gemm)
    try:
        _check_gemm(size, ta, tb, dtype)
    finally:
        _core._tuning.set_chain_gemm("auto")


def _check_gemm(size, ta, tb, dtype):
    from kronpe.torch import _cpu

    M, N, K = size
    g = torch.Generator().manual_seed(1)
    L = torch.randn(K, M, generator=g, dtype=dtype).mT if ta else torch.randn(M, K, generator=g, dtype=dtype)
    R = torch.randn(N, K, generator=g, dtype=dtype).mT if tb else torch.randn(K, N, generator=g, dtype=dtype)
    buf = torch.full((M, N + 3), float("nan"), dtype=dtype)
    out = _cpu.gemm(L, R, buf[:, :N])
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_np(out), _np(L) @ _np(R), **tol)
    assert torch.isnan(buf[:, N:]).all()  # nothing written beyond the view


def test_gemm_strided_operands_fall_back():
    """Operands the packed GEMM cannot read (no unit stride, broadcast rows) go to torch.mm."""
    from kronpe.torch import _cpu

    g = torch.Generator().manual_seed(2)
    L = torch.randn(300, 260, generator=g, dtype=torch.float64)[::2, ::2]  # (150, 130), strides (520, 2)
    R = torch.randn(130, generator=g, dtype=torch.float64).unsqueeze(1).expand(130, 140)  # strides (1, 0)
    out = _cpu.gemm(L, R, torch.empty(150, 140, dtype=torch.float64))
    np.testing.assert_allclose(_np(out), _np(L) @ _np(R), rtol=1e-12)
    Rw = torch.randn(140, 130, generator=g, dtype=torch.float64).mT  # a transposed view: packed
    out = _cpu.gemm(L.contiguous(), Rw, torch.empty(150, 140, dtype=torch.float64))
    np.testing.assert_allclose(_np(out), _np(L) @ _np(Rw), rtol=1e-12)
