"""kronpe.torch modules: embedder modules, ComplexEncoding (grid and points, compile, training),
SimpleEncoding, LearnableFourierFeatures (Algorithm 1 of "Learnable Fourier Features for
Multi-Dimensional Spatial Positional Encoding", Li, Si, Li, Hsieh, Bengio; NeurIPS 2021) and
SinusoidalEmbedding (the sinusoidal-embedding tutorial's transformer and NeRF styles); on a GPU,
inductor, CUDA graphs and training (``torch_device`` on "cuda-torch" alone)."""
import math
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
kt = pytest.importorskip("kronpe.torch")

import kronpe  # noqa: E402
from kronpe import embedders as E  # noqa: E402
from kronpe import reference  # noqa: E402
from kronpe.app import demo as kdemo  # noqa: E402
from kronpe.torch import train as ktrain  # noqa: E402
from _samples import TORCH_CUDA_ONLY  # noqa: E402

ALL_EMBEDDERS = [
    E.Gaussian(16, 0.05),
    E.Gaussian(12, 0.04, margin=2),
    E.Triangle(16),
    E.Triangle(10, 0.15, margin=1, paper_distance=True),
    E.Rectangle(16, 0.1),
    E.Impulse(16),
    E.Impulse(8, margin=1),
    E.Sine(16, 7.0),
    E.Square(16, 7.0),
    E.BSpline(16),
    E.BSpline(12, order=1, width=0.1),
    E.BSpline(12, order=5, width=0.2, margin=2),
    E.LinearFourier(16, 3.0),
    E.LogFourier(16, 3.0, amplitude_mod=0.5),
    E.RandomFourier(16, 5.0, seed=3, frequency_mod=1.5),
    E.NeRF(4, include_input=True),
    E.Transformer(5, 100, amplitude_mod=2.0),
    E.Random(8, seed=1),
]
SMOOTH = [e for e in ALL_EMBEDDERS if type(e).__name__ in
          ("Gaussian", "Sine", "LinearFourier", "LogFourier", "RandomFourier", "NeRF", "Transformer")]


def _np(t):
    return t.detach().cpu().numpy()


# ---- EmbedderModule ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("emb", ALL_EMBEDDERS, ids=repr)
def test_embedder_module_matches_numpy(emb, dtype):
    x = torch.rand(50, generator=torch.Generator().manual_seed(1), dtype=dtype)
    x[0], x[-1] = 0.0, 1.0
    m = kt.EmbedderModule(emb)
    out = m(x)
    ref = emb(x.numpy())
    assert out.dtype == dtype and tuple(out.shape) == (50, emb.K) == ref.shape
    assert m.differentiable == (type(emb).__name__ != "Random")
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(_np(out), ref, **tol)


@pytest.mark.parametrize("emb", SMOOTH, ids=repr)
def test_embedder_module_gradient_wrt_x(emb):
    x = (0.05 + 0.9 * torch.rand(6, generator=torch.Generator().manual_seed(2), dtype=torch.float64))
    x.requires_grad_(True)
    m = kt.EmbedderModule(emb)
    assert torch.autograd.gradcheck(m, (x,), eps=1e-7, atol=1e-6)
    # and against a finite difference of the NumPy embedder itself
    h = 1e-6
    xn = x.detach().numpy()
    fd = (emb(xn + h) - emb(xn - h)) / (2 * h)
    (g,) = torch.autograd.grad(m(x).sum(), x)
    np.testing.assert_allclose(g.numpy(), fd.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_embedder_module_moves_and_keeps_state_dict_empty():
    m = kt.EmbedderModule(E.Gaussian(8, 0.1))
    assert dict(m.state_dict()) == {}  # derived from the embedder: non-persistent buffers
    assert m.to(torch.float32).centres.dtype == torch.float32


def test_embedder_module_checks_coordinates():
    m = kt.EmbedderModule(E.Gaussian(8, 0.1))
    with pytest.raises(ValueError, match=r"x must lie in \[0, 1\]"):
        m(torch.tensor([0.5, 1.5]))
    with pytest.raises(ValueError, match="x must be finite"):
        m(torch.tensor([0.5, float("nan")]))
    with pytest.raises(ValueError, match="x must be a 1-D tensor"):
        m(torch.rand(3, 2))
    with pytest.raises(ValueError, match="not differentiable"):
        kt.EmbedderModule(E.Random(4))(torch.rand(3, requires_grad=True))


# ---- ComplexEncoding ----------------------------------------------------------------------------


def _encoding(out_features=3, dtype=torch.float64, seed=0, **kw):
    enc = kt.ComplexEncoding([E.Gaussian(10, 0.06), E.Triangle(8, 0.2)], out_features, dtype=dtype, **kw)
    with torch.no_grad():
        enc.weight.copy_(torch.randn(enc.weight.shape, generator=torch.Generator().manual_seed(seed), dtype=dtype))
    return enc


def test_complex_encoding_grid_path_is_the_kronecker_model():
    enc = _encoding()
    cx, cy = torch.rand(7, dtype=torch.float64), torch.rand(5, dtype=torch.float64)
    out = enc.forward_grid([cx, cy])
    Px, Py = enc.embedders[0](cx.numpy()), enc.embedders[1](cy.numpy())
    W = _np(enc.weight)
    np.testing.assert_allclose(_np(out), np.einsum("abc,ia,jb->ijc", W, Px, Py), rtol=1e-12)
    # the same model through the dense Kronecker product of the encodings, point by point
    kron = np.einsum("ia,jb->ijab", Px, Py).reshape(35, -1)
    np.testing.assert_allclose(_np(out).reshape(35, 3), kron @ W.reshape(-1, 3), rtol=1e-12)


@pytest.mark.parametrize("normalize", [True, False])
def test_complex_encoding_points_blend_the_virtual_grid(normalize):
    enc = _encoding(normalize=normalize, grid=[9, 6])
    pts = torch.rand(40, 2, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    out = enc(pts)
    V = _np(enc.grid_values())
    nodes = [np.linspace(0, 1, 9), np.linspace(0, 1, 6)]
    np.testing.assert_allclose(V, np.einsum("abc,ia,jb->ijc", _np(enc.weight),
                                            enc.embedders[0](nodes[0]), enc.embedders[1](nodes[1])), rtol=1e-12)
    ref = reference.blend(pts.numpy(), nodes, [e.distance for e in enc.embedders], V.reshape(-1, 3), normalize)
    np.testing.assert_allclose(_np(out), ref, rtol=1e-10, atol=1e-12)


def test_complex_encoding_gradients_wrt_weights():
    enc = _encoding(out_features=2)
    plan = enc.plan(torch.rand(12, 2, dtype=torch.float64))
    W = enc.weight.detach().clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda W: _fwd(enc, W, plan), (W,), fast_mode=True)
    assert torch.autograd.gradgradcheck(lambda W: _fwd(enc, W, plan), (W,), fast_mode=True)
    # the module's own backward gives the gradient of this function
    G = torch.randn(12, 2, dtype=torch.float64)
    (g,) = torch.autograd.grad(enc.forward_plan(plan), enc.weight, G)
    (g_ref,) = torch.autograd.grad(_fwd(enc, W, plan), W, G)
    np.testing.assert_allclose(_np(g), _np(g_ref), rtol=1e-12)


def _fwd(enc, W, plan):
    """ComplexEncoding's point path as a function of W (the module's own building blocks)."""
    bases = [getattr(enc, f"node_basis_{i}") for i in range(enc.ndim)]
    V = kt.multi_mode_product(W, bases)
    return kt.blend(V.reshape(-1, W.shape[-1]), plan.indices, plan.weights)


def test_complex_encoding_plan_is_cached_for_the_same_points():
    enc = _encoding()
    pts = torch.rand(10, 2, dtype=torch.float64)
    enc(pts)
    first = enc._plan_cache[2]
    enc(pts)
    assert enc._plan_cache[2] is first
    pts[0, 0] = 0.5  # in-place change: the plan is recomputed
    enc(pts)
    assert enc._plan_cache[2] is not first


def test_complex_encoding_bad_input():
    enc = _encoding()
    with pytest.raises(ValueError, match=r"points must have shape \(P, 2\)"):
        enc(torch.rand(5, 3))
    with pytest.raises(ValueError, match="points must lie in"):
        enc(torch.tensor([[0.5, 1.2]]))
    with pytest.raises(ValueError, match="coords must hold 2"):
        enc.forward_grid([torch.rand(3)])
    with pytest.raises(ValueError, match="embedders must name at least one"):
        kt.ComplexEncoding([])
    with pytest.raises(ValueError, match="out_features must be a positive int"):
        kt.ComplexEncoding([E.Gaussian(4, 0.1)], out_features=0)


def test_complex_encoding_scalar_output_and_float32():
    enc = kt.ComplexEncoding([E.Gaussian(6, 0.1)] * 3)
    assert enc.weight.shape == (6, 6, 6) and enc.weight.dtype == torch.float32
    assert enc(torch.rand(4, 3)).shape == (4,)
    assert enc.forward_grid([torch.rand(2), torch.rand(3), torch.rand(4)]).shape == (2, 3, 4)


def test_from_fit_point_model_predicts_the_same_and_fine_tunes():
    rng = np.random.default_rng(0)
    pts = rng.random((300, 2))
    vals = np.stack([np.sin(3 * pts[:, 0]) * pts[:, 1], np.cos(2 * pts[:, 1])], 1)
    emb = E.Gaussian(8, 0.08)
    pm = kronpe.fit_points(pts, vals, [emb, emb], ridge=1e-4)
    enc = kt.ComplexEncoding.from_fit(pm)
    assert enc.weight.dtype == torch.float64 and enc.out_shape == (2,)
    q = rng.random((50, 2))
    np.testing.assert_allclose(_np(enc(torch.from_numpy(q))), pm.predict(q), rtol=1e-9, atol=1e-12)
    # fine-tuning from the exact ridge solution: Adam with a small step keeps the fit
    _, hist = ktrain.fit_points_adam(pts, vals, [emb, emb], init=enc, steps=20, lr=1e-4, weight_decay=0.0,
                                     progress=False, log_every=10, dtype=torch.float64)
    start = float(np.mean((pm.predict(pts) - vals) ** 2))
    assert hist.loss[-1] <= start * 1.01


@pytest.mark.skipif(not hasattr(kronpe, "fit_grid"), reason="kronpe.fit_grid is not in this build yet")
def test_from_fit_grid_model():
    img = _smooth_image(16)
    emb = E.Gaussian(8, 0.08, margin=1)
    gm = kronpe.fit_grid(img, [emb, emb], ridge=1e-6)
    enc = kt.ComplexEncoding.from_fit(gm)
    c = [torch.rand(9, dtype=torch.float64), torch.rand(5, dtype=torch.float64)]
    np.testing.assert_allclose(_np(enc.forward_grid(c)), gm.predict_grid([x.numpy() for x in c]), rtol=1e-5, atol=1e-6)


def test_from_fit_rejects_other_objects():
    with pytest.raises(ValueError, match="model must be a kronpe GridModel or PointModel"):
        kt.ComplexEncoding.from_fit(object())


def test_prune_basis():
    # float32: entries below eps^2 * max = 1.42e-14 * 2 go
    t = torch.tensor([1e-40, -2e-14, 3e-14, 0.0, 2.0], dtype=torch.float32)
    np.testing.assert_array_equal(_np(kt.modules.prune_basis(t)), np.array([0, 0, 3e-14, 0, 2], np.float32))
    t64 = torch.tensor([1e-33, 1e-30, 1.0], dtype=torch.float64)  # float64: eps^2 = 4.9e-32
    np.testing.assert_array_equal(_np(kt.modules.prune_basis(t64)), [0, 1e-30, 1.0])


class _Small(torch.nn.Module):
    """A small model around ComplexEncoding (``enc``, by default ``_encoding``'s): both paths, a
    grid (forward_grid) and points (a plan), a head and a non-linearity."""

    def __init__(self, enc=None):
        super().__init__()
        self.enc = _encoding(out_features=4, dtype=torch.float32) if enc is None else enc
        self.head = torch.nn.Linear(4, 2)

    def forward(self, cx, cy, indices, weights):
        g = torch.tanh(self.head(self.enc.forward_grid([cx, cy])))
        p = self.head(self.enc.forward_plan(kt.BlendPlan(indices, weights)))
        return g.sum() + (p**2).sum()


def _compile_check(backend):
    torch.manual_seed(0)
    model = _Small()
    cx, cy = torch.rand(5, dtype=torch.float64), torch.rand(7, dtype=torch.float64)
    plan = model.enc.plan(torch.rand(9, 2))
    eager = model(cx, cy, *plan)
    eager.backward()
    g_eager = model.enc.weight.grad.clone()
    model.zero_grad()
    compiled = torch.compile(model, fullgraph=True, backend=backend)  # a graph break would raise
    out = compiled(cx, cy, *plan)
    out.backward()
    np.testing.assert_allclose(float(out.detach()), float(eager.detach()), rtol=1e-5)
    np.testing.assert_allclose(_np(model.enc.weight.grad), _np(g_eager), rtol=1e-4, atol=1e-5)


def test_compile_fullgraph_aot_eager():
    _compile_check("aot_eager")


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("KRONPE_SLOW_TESTS"), reason="inductor compiles C++ (~45 s here): set KRONPE_SLOW_TESTS=1")
def test_compile_fullgraph_inductor():
    _compile_check("inductor")


# ---- training ----------------------------------------------------------------------------------


def _smooth_image(n=32):
    x = np.arange(n) / n
    return (0.5 + 0.4 * np.sin(2 * np.pi * x)[:, None] * np.cos(3 * np.pi * x)[None, :]).astype(np.float32)


def test_fit_grid_adam_learns_and_reports():
    img = _smooth_image()
    emb = E.Gaussian(16, 0.05)
    model, hist = ktrain.fit_grid_adam(img[::2, ::2], [emb, emb], steps=150, lr=0.05, log_every=50, progress=False)
    assert hist.step == [50, 100, 150]
    assert hist.psnr[-1] > hist.psnr[0] and hist.psnr[-1] > 30
    assert np.isclose(hist.psnr[-1], 10 * np.log10(1 / hist.loss[-1]))
    full = model.forward_grid([torch.arange(32, dtype=torch.float64) / 32] * 2)
    assert ktrain.psnr(full, torch.from_numpy(img)) > 28


def test_fit_points_adam_learns():
    img = _smooth_image()
    rng = np.random.default_rng(0)
    mesh = np.stack(np.meshgrid(np.arange(32) / 32, np.arange(32) / 32, indexing="ij"), -1).reshape(-1, 2)
    pick = rng.choice(1024, 256, replace=False)
    emb = E.Triangle(16, 2 / 16)
    model, hist = ktrain.fit_points_adam(mesh[pick], img.reshape(-1)[pick], [emb, emb], steps=200, lr=0.05,
                                         progress=False, log_every=100)
    assert hist.psnr[-1] > hist.psnr[0] and hist.psnr[-1] > 25
    pred = model(torch.from_numpy(mesh))
    assert ktrain.psnr(pred, torch.from_numpy(img.reshape(-1))) > 23


def test_adam_step_captures_cuda_parameters_by_default(torch_device):
    """adam_step captures the step in a CUDA graph by default when every parameter is on a GPU, and
    runs eagerly on the CPU (where a graph asked for is a named error)."""
    dev = torch_device.torch
    w = torch.nn.Parameter(torch.zeros(3, device=dev))
    target = torch.arange(3.0, device=dev)
    step = ktrain.adam_step([w], lambda: w * 1.0, target, lr=0.1)
    assert step.cuda_graph is torch_device.is_cuda
    losses = [float(step()) for _ in range(6)]  # on a GPU: three eager, one capture, two replays
    assert losses[-1] < losses[0]
    if not torch_device.is_cuda:
        with pytest.raises(ValueError, match="cuda_graph=True needs every trainable parameter on a CUDA device"):
            ktrain.adam_step([w], lambda: w, target, cuda_graph=True)
        return
    assert ktrain.adam_step([w], lambda: w * 1.0, target, cuda_graph=False).cuda_graph is False
    c = torch.nn.Parameter(torch.zeros(3))
    assert ktrain.adam_step([w, c], lambda: w * c, target).cuda_graph is False  # not all on the GPU: eager


class _Case:
    """The parts of kronpe.bench.protocol.Case the demo rows read (2-D, stride 2)."""

    def __init__(self, full):
        self.full, self.ndim, self.stride, self.peak = full, 2, 2, 1.0
        self.train = full[::2, ::2]
        self.coords = [np.arange(n) / n for n in full.shape[:2]]
        self.train_coords = [c[::2] for c in self.coords]
        self.K = self.train.shape[0]


def test_demo_row_functions():
    case = _Case(np.stack([_smooth_image(32)] * 2, -1))  # two channels
    for run in (kdemo.adam_grid_run, kdemo.adam_random_run):
        res = run(case, "Gau", steps=100)
        assert res["pred"].shape == case.full.shape and res["pred"].dtype == np.float32
        assert 0 < res["fit_s"] <= res["total_s"]
        assert ktrain.psnr(torch.from_numpy(res["pred"]), torch.from_numpy(case.full)) > 22
    assert "unseen samples" in res["note"]


def test_sort_plan_orders_rows_and_keeps_the_model():
    enc = _encoding()
    pts = torch.rand(30, 2, dtype=torch.float64)
    plan = enc.plan(pts)
    splan, order = kt.modules.sort_plan(plan)
    lo = splan.indices.min(1).values
    assert bool((lo[1:] >= lo[:-1]).all())
    np.testing.assert_allclose(_np(enc.forward_plan(splan)), _np(enc.forward_plan(plan)[order]), rtol=1e-14)


def test_train_checks_arguments():
    m = torch.nn.Linear(2, 1)
    with pytest.raises(ValueError, match="steps must be a non-negative integer"):
        ktrain.train(m, lambda: m(torch.zeros(1, 2)), torch.zeros(1, 1), steps=-1)
    with pytest.raises(ValueError, match="lr must be a positive number"):
        ktrain.train(m, lambda: m(torch.zeros(1, 2)), torch.zeros(1, 1), lr=0)


# ---- SimpleEncoding --------------------------------------------------------------------------------


def test_simple_encoding_concatenates_axes():
    ex, ey = E.Gaussian(8, 0.1), E.Triangle(6)
    enc = kt.SimpleEncoding([ex, ey])
    pts = torch.rand(10, 2, dtype=torch.float64)
    out = enc(pts)
    np.testing.assert_allclose(_np(out), np.concatenate([ex(pts[:, 0].numpy()), ey(pts[:, 1].numpy())], 1), rtol=1e-12)


def test_simple_encoding_four_directions():
    e = E.Gaussian(8, 0.1)
    enc = kt.SimpleEncoding(e, directions="four", out_features=3)
    pts = torch.rand(10, 2, dtype=torch.float64)
    x, y = pts[:, 0].numpy(), pts[:, 1].numpy()
    feats = np.concatenate([e(x), e(y), e((x + y) / 2), e((x - y + 1) / 2)], 1)
    assert enc.encoding_size == 32
    out = enc(pts.float())
    np.testing.assert_allclose(_np(out), feats @ _np(enc.head.weight).T + _np(enc.head.bias), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="directions='four' samples 2-D"):
        kt.SimpleEncoding(e, ndim=3, directions="four")
    with pytest.raises(ValueError, match="ndim is needed"):
        kt.SimpleEncoding(e)


# ---- learnable Fourier features ----------------------------------------------------------------------


def test_lff_shapes_and_groups():
    torch.manual_seed(0)
    lff = kt.LearnableFourierFeatures(pos_dim=2, f_dim=64, h_dim=16, d_dim=24, groups=2)
    x = torch.rand(5, 2, 2)
    out = lff(x)
    assert out.shape == (5, 24)
    # each group's slice of the output depends on that group only (one shared encoder)
    x2 = x.clone()
    x2[:, 1] += 0.3
    out2 = lff(x2)
    np.testing.assert_allclose(_np(out2[:, :12]), _np(out[:, :12]), rtol=1e-6)
    assert not torch.allclose(out2[:, 12:], out[:, 12:])
    # the same encoder on each group: group 1's output is the encoder applied to group 1 alone
    single = lff(x[:, 1:2].expand(5, 2, 2).contiguous())[:, :12]
    np.testing.assert_allclose(_np(out[:, 12:]), _np(single), rtol=1e-6)
    with pytest.raises(ValueError, match=r"x must have shape \(N, 2, 2\)"):
        lff(torch.rand(5, 4))


def test_lff_algorithm_1_formula():
    torch.manual_seed(0)
    lff = kt.LearnableFourierFeatures(3, 8, 5, 4, activation="relu")
    x = torch.rand(7, 1, 3)
    Wr = lff.Wr.weight  # (F/2, M)
    F = torch.cat([torch.cos(x @ Wr.T), torch.sin(x @ Wr.T)], -1) / math.sqrt(8)
    W1, B1, W2, B2 = lff.mlp[0].weight.T, lff.mlp[0].bias, lff.mlp[2].weight.T, lff.mlp[2].bias
    Y = torch.clamp(F @ W1 + B1, min=0) @ W2 + B2
    np.testing.assert_allclose(_np(lff(x)), _np(Y.reshape(7, 4)), rtol=1e-6)
    assert isinstance(kt.LearnableFourierFeatures(3, 8, 5, 4, activation="gelu").mlp[1], torch.nn.GELU)


@pytest.mark.parametrize("gamma", [1.0, 10.0])
def test_lff_initial_statistics(gamma):
    torch.manual_seed(1)
    lff = kt.LearnableFourierFeatures(pos_dim=2, f_dim=8192, h_dim=4, d_dim=4, gamma=gamma)
    w = lff.Wr.weight.detach()
    assert w.shape == (4096, 2)
    assert abs(float(w.std()) * gamma - 1.0) < 0.03  # Normal(0, gamma^-2): std 1/gamma
    assert abs(float(w.mean()) * gamma) < 0.03
    # r_x . r_y = (1/F) sum_j cos((x - y) w_j): 1/2 at x = y and, for w ~ N(0, gamma^-2 I),
    # close to exp(-|x - y|^2 / (2 gamma^2)) / 2 (the paper's eq. 4 writes the kernel without the
    # factors 2)
    x = torch.zeros(1, 1, 2)
    d = torch.tensor([[[0.3, -0.4]]]) * gamma  # |d| = 0.5 gamma
    with torch.no_grad():
        rx, ry = lff.fourier_features(x)[0, 0], lff.fourier_features(x + d)[0, 0]
    assert abs(float(rx @ rx) - 0.5) < 1e-6
    assert abs(float(rx @ ry) - 0.5 * math.exp(-0.25 / 2)) < 0.02


def test_lff_bad_arguments():
    with pytest.raises(ValueError, match="f_dim must be even"):
        kt.LearnableFourierFeatures(2, 7, 4, 4)
    with pytest.raises(ValueError, match="d_dim must be a multiple of groups"):
        kt.LearnableFourierFeatures(2, 8, 4, 5, groups=2)
    with pytest.raises(ValueError, match="gamma must be a positive"):
        kt.LearnableFourierFeatures(2, 8, 4, 4, gamma=0)
    with pytest.raises(ValueError, match="activation must be one of"):
        kt.LearnableFourierFeatures(2, 8, 4, 4, activation="tanh")


# ---- sinusoidal embeddings (the tutorial's formulas) ------------------------------------------------


def _tutorial_x():
    """The tutorial's domain: 1000 points of [0, 2 pi], shape (N, 1)."""
    return torch.linspace(0, 2 * torch.pi, 1000, dtype=torch.float64).reshape(-1, 1)


def test_tutorial_transformer_values():
    x = _tutorial_x()
    L, P = 3, 1000
    out = kt.SinusoidalEmbedding(1, L, "transformer", max_positions=P)(x)
    xn = x.numpy()[:, 0]
    for k in range(L):  # g_{2k} = sin(x / P^(k/L)), g_{2k+1} = cos(x / P^(k/L))
        np.testing.assert_allclose(_np(out[:, 2 * k]), np.sin(xn / P ** (k / L)), atol=1e-14)
        np.testing.assert_allclose(_np(out[:, 2 * k + 1]), np.cos(xn / P ** (k / L)), atol=1e-14)
    # values by hand: k = 1 at x = pi gives sin(pi / 10), k = 0 at x = pi gives cos(pi) = -1
    one = kt.SinusoidalEmbedding(1, 3, "transformer", 1000)(torch.tensor([[math.pi]], dtype=torch.float64))
    np.testing.assert_allclose(_np(one)[0], [0.0, -1.0, math.sin(math.pi / 10), math.cos(math.pi / 10),
                                              math.sin(math.pi / 100), math.cos(math.pi / 100)], atol=1e-15)
    # and kronpe's Transformer embedder (x' = 2 pi x, interleaved) is the same function
    u = np.linspace(0, 1, 50)
    np.testing.assert_allclose(_np(kt.SinusoidalEmbedding(1, 5, "transformer", 100)(torch.from_numpy(2 * np.pi * u)[:, None])),
                               E.Transformer(5, 100)(u), atol=1e-12)


def _neuralop_sinusoidal(x, L, embedding_type="transformer", max_positions=10000):
    """neuraloperator 2.0's SinusoidalEmbedding.forward written out from its algorithm (the
    package is not a dependency): frequencies (1 / P) ** (arange(L) / L * 2) (NeRF: 2 ** arange(L)
    * pi), an outer product with x, sin and cos stacked last, flattened per point."""
    batched = x.dim() == 3
    xb = x if batched else x.unsqueeze(0)
    k = torch.arange(0, L)
    freqs = 2**k * torch.pi if embedding_type == "nerf" else (1 / max_positions) ** (k / L * 2)
    ang = torch.einsum("bij,k->bijk", xb, freqs.to(xb.dtype))
    out = torch.stack((ang.sin(), ang.cos()), dim=-1).reshape(xb.shape[0], xb.shape[1], -1)
    return out if batched else out.squeeze(0)


@pytest.mark.parametrize("embedding_type", ["transformer", "nerf"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_neuralop_convention(embedding_type, dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(2, 40, 3, generator=g, dtype=torch.float64).to(dtype) * 6
    L, P = 4, 1000
    emb = kt.SinusoidalEmbedding(3, L, embedding_type, max_positions=P, convention="neuralop")
    out = emb(x)
    assert out.shape == (2, 40, 2 * L * 3) and out.dtype == dtype
    # the formula: w_k = (1 / P)^(2k / L) (NeRF: 2^k pi); channel c at columns 2Lc.., sin/cos interleaved
    w = np.array([(1 / P) ** (2 * k / L) if embedding_type == "transformer" else 2.0**k * np.pi for k in range(L)])
    xn = x.double().numpy()
    for c in range(3):
        for k in range(L):
            # neuraloperator rounds its frequencies to float32 (also for float64 inputs): the
            # angle w_k x is off by about 2 ulp of float32 of its size
            tol = 1e-6 + 3e-7 * w[k] * 6
            np.testing.assert_allclose(_np(out[..., 2 * L * c + 2 * k]), np.sin(w[k] * xn[..., c]), atol=tol)
            np.testing.assert_allclose(_np(out[..., 2 * L * c + 2 * k + 1]), np.cos(w[k] * xn[..., c]), atol=tol)
    # neuraloperator's computation, batched and not: the same numbers bit for bit
    torch.testing.assert_close(out, _neuralop_sinusoidal(x, L, embedding_type, P), rtol=0, atol=0)
    torch.testing.assert_close(emb(x[0]), _neuralop_sinusoidal(x[0], L, embedding_type, P), rtol=0, atol=0)


def test_neuralop_and_tutorial_conventions_differ_for_two_or_more_frequencies():
    x = torch.linspace(0, 6, 30, dtype=torch.float64).reshape(-1, 1)
    tut = kt.SinusoidalEmbedding(1, 1, "transformer", 100)
    nop = kt.SinusoidalEmbedding(1, 1, "transformer", 100, convention="neuralop")
    torch.testing.assert_close(tut(x), nop(x))  # L = 1: only w_0 = 1
    tut3 = kt.SinusoidalEmbedding(1, 3, "transformer", 100)
    nop3 = kt.SinusoidalEmbedding(1, 3, "transformer", 100, convention="neuralop")
    np.testing.assert_allclose(_np(tut3.freqs), [1, 100 ** (-1 / 3), 100 ** (-2 / 3)], rtol=1e-15)
    np.testing.assert_allclose(_np(nop3.freqs), [1, 100 ** (-2 / 3), 100 ** (-4 / 3)], rtol=1e-6)
    assert not torch.allclose(tut3(x), nop3(x))
    with pytest.raises(ValueError, match="convention must be one of"):
        kt.SinusoidalEmbedding(1, 3, convention="neuraloperator")


def test_neuralop_package_agrees_when_installed():
    nop = pytest.importorskip("neuralop.layers.embeddings")
    x = torch.rand(2, 25, 2) * 6
    for kind in ("transformer", "nerf"):
        theirs = nop.SinusoidalEmbedding(2, 5, kind, max_positions=500)(x)
        ours = kt.SinusoidalEmbedding(2, 5, kind, max_positions=500, convention="neuralop")(x)
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)


def test_tutorial_nerf_values_and_modulation():
    x = _tutorial_x()
    L, m = 3, 2.5
    emb = kt.SinusoidalEmbedding(1, L, "nerf")
    out = emb(x)
    xn = x.numpy()[:, 0]
    for k in range(L):
        np.testing.assert_allclose(_np(out[:, 2 * k]), np.sin(2**k * np.pi * xn), atol=1e-12)
        np.testing.assert_allclose(_np(out[:, 2 * k + 1]), np.cos(2**k * np.pi * xn), atol=1e-12)
    # frequency modulation g(m x) and amplitude modulation m g(x) (the tutorial's m = 2.5)
    np.testing.assert_allclose(_np(emb(x, frequency=m)), _np(emb(x * m)), atol=1e-15)
    np.testing.assert_allclose(_np(emb(x, amplitude=m)), m * _np(out), atol=1e-15)
    np.testing.assert_allclose(_np(emb(torch.tensor([[0.25]], dtype=torch.float64)))[0, 2], 1.0, atol=1e-15)  # sin(2 pi / 4)
    # one m per sample of a batch
    xb = x[:10].reshape(1, 10, 1).expand(2, 10, 1)
    mb = torch.tensor([1.0, m], dtype=torch.float64).reshape(2, 1, 1)
    ob = emb(xb, amplitude=mb)
    np.testing.assert_allclose(_np(ob[1]), m * _np(ob[0]), atol=1e-15)


def test_tutorial_nyquist():
    # the tutorial: L = 3 with N = 1000 is fine; NeRF needs 2^(L-1) m < N / 2
    assert kt.SinusoidalEmbedding(1, 3, "nerf").satisfies_nyquist(1000)
    assert kt.SinusoidalEmbedding(1, 9, "nerf").satisfies_nyquist(1000)  # 256 < 500
    assert not kt.SinusoidalEmbedding(1, 10, "nerf").satisfies_nyquist(1000)  # 512 >= 500
    assert not kt.SinusoidalEmbedding(1, 9, "nerf").satisfies_nyquist(1000, modulation=2.5)  # 640
    assert kt.SinusoidalEmbedding(1, 3, "transformer", 1000).satisfies_nyquist(1000, modulation=2.5)


def test_tutorial_multichannel_layout():
    x = torch.rand(4, 7, 3, dtype=torch.float64)
    emb = kt.SinusoidalEmbedding(3, 2, "nerf", include_input=True)
    out = emb(x)
    assert out.shape == (4, 7, 3 + 12) and emb.out_channels == 15
    np.testing.assert_allclose(_np(out[..., :3]), _np(x))
    single = kt.SinusoidalEmbedding(1, 2, "nerf")
    for c in range(3):  # h(X) = concat(g(x_1), g(x_2), g(x_3))
        np.testing.assert_allclose(_np(out[..., 3 + 4 * c: 3 + 4 * (c + 1)]), _np(single(x[..., c:c + 1])), atol=1e-15)
    assert kt.SinusoidalEmbedding(3, 2)(x[0]).shape == (7, 12)  # (N, C) input
    with pytest.raises(ValueError, match=r"x must have shape \(batch, N, 3\)"):
        emb(torch.rand(5, 2))
    with pytest.raises(ValueError, match="embedding_type must be"):
        kt.SinusoidalEmbedding(1, 2, "rope")


def test_complex_encoding_points_in_inference_mode():
    """Points made under torch.inference_mode (no version counter) are planned at every call."""
    enc = kt.ComplexEncoding([E.Gaussian(10, 0.06), E.Triangle(8, 0.2)], 2, dtype=torch.float64)
    with torch.no_grad():
        enc.weight.copy_(torch.randn(enc.weight.shape, dtype=torch.float64))
    pts = torch.rand(50, 2, dtype=torch.float64)
    want = enc(pts).detach()
    with torch.inference_mode():
        got = enc(pts.clone())
        again = enc(pts.clone())
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
    np.testing.assert_allclose(again.numpy(), want.numpy(), rtol=1e-12)


# ---- on a GPU: what only CUDA can show ------------------------------------------------------------
# The values, gradcheck and opcheck of every op on CUDA are test_torch_ops.py's own cases; here
# torch.compile with inductor (the backend that generates GPU code), capture in a CUDA graph, and
# training of the benchmark's models on CUDA.


def _both_inputs(model, dev, seed=0):
    """Grid coordinates and a plan of points for _Small on a GPU."""
    gen = torch.Generator(device=dev).manual_seed(seed)
    cx = torch.rand(40, device=dev, dtype=torch.float64, generator=gen)
    cy = torch.rand(24, device=dev, dtype=torch.float64, generator=gen)
    plan = model.enc.plan(torch.rand(300, 2, device=dev, dtype=torch.float64, generator=gen))
    assert plan.indices.is_cuda and plan.weights.is_cuda
    return cx, cy, plan.indices, plan.weights


def _both_model(dev):
    """_Small with Gaussians of width 0.04, weights of standard deviation 0.1, on a device."""
    g = kronpe.Gaussian(16, 0.04)
    enc = kt.ComplexEncoding([g, g], out_features=4)
    torch.nn.init.normal_(enc.weight, std=0.1)
    return _Small(enc).to(dev)


def _grads(model):
    return [p.grad.detach().clone() for p in model.parameters()]


@TORCH_CUDA_ONLY
def test_compile_fullgraph_inductor_on_cuda(torch_device):
    dev = torch_device.torch
    torch.manual_seed(0)
    torch._dynamo.reset()
    model = _both_model(dev)
    args = _both_inputs(model, dev)
    eager = model(*args)
    eager.backward()
    g_eager = _grads(model)
    model.zero_grad(set_to_none=True)
    compiled = torch.compile(model, fullgraph=True, backend="inductor")  # a graph break would raise
    out = compiled(*args)
    out.backward()
    assert out.is_cuda
    torch.testing.assert_close(out.detach(), eager.detach(), rtol=1e-5, atol=1e-5)
    for g, h in zip(_grads(model), g_eager):
        torch.testing.assert_close(g, h, rtol=1e-4, atol=1e-5)


@TORCH_CUDA_ONLY
def test_cuda_graph_capture_and_replay(torch_device):
    """Forward + backward captured once, replayed on new inputs: the eager results each time."""
    dev = torch_device.torch
    torch.manual_seed(0)
    model = _both_model(dev)
    static = [a.clone() for a in _both_inputs(model, dev, seed=1)]
    grads = [torch.zeros_like(p) for p in model.parameters()]

    def step():
        for p in model.parameters():
            p.grad = None
        loss = model(*static)
        loss.backward()
        for g, p in zip(grads, model.parameters()):
            g.copy_(p.grad)
        return loss

    side = torch.cuda.Stream()  # warm-up on a side stream, as torch.cuda.graph asks
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = step()
    for seed in (2, 3):
        new = _both_inputs(model, dev, seed=seed)
        for s, n in zip(static, new):
            s.copy_(n)
        graph.replay()
        torch.cuda.synchronize()
        for p in model.parameters():
            p.grad = None
        ref = model(*new)
        ref.backward()
        torch.testing.assert_close(static_loss, ref.detach(), rtol=1e-5, atol=1e-5)
        for g, p in zip(grads, model.parameters()):
            torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-5)


@TORCH_CUDA_ONLY
@pytest.mark.parametrize("case", ["grid", "points"])
def test_equal_loss_after_200_adam_steps_on_cuda(torch_device, case):
    """200 Adam steps of the benchmark's models (kronpe.bench.torch_steps): kronpe's and the
    official formulation end at the same loss."""
    pytest.importorskip("skimage")
    from kronpe.bench import torch_steps as ts

    losses = {}
    for name, (model, target) in ts.make_models(case, device=torch_device.torch).items():
        assert target.is_cuda and all(p.is_cuda for p in model.parameters())
        step = ts.stepper(model, target)
        losses[name] = [step().detach() for _ in range(200)]
    a, b = float(losses["kronpe"][-1]), float(losses["official"][-1])
    assert a < 0.2 * float(losses["kronpe"][0])
    assert abs(a - b) <= 1e-3 * abs(b), f"loss after 200 steps: kronpe {a}, official {b}"
    np.testing.assert_allclose(float(losses["kronpe"][0]), float(losses["official"][0]), rtol=1e-5)


@TORCH_CUDA_ONLY
@pytest.mark.parametrize("path", ["grid", "points"])
def test_training_in_a_cuda_graph_matches_eager(torch_device, path):
    """kronpe.torch.train captures the step in a CUDA graph by default on CUDA: same losses."""
    n = 32
    x = np.arange(n) / n
    img = _smooth_image(n)
    emb = kronpe.Gaussian(16, 0.05)
    hists = {}
    for graph in (False, True):
        torch.manual_seed(0)
        if path == "grid":
            _, hists[graph] = ktrain.fit_grid_adam(img[::2, ::2], [emb, emb], steps=60, lr=0.05, log_every=20,
                                                   progress=False, device=torch_device.torch, cuda_graph=graph)
        else:
            mesh = np.stack(np.meshgrid(x, x, indexing="ij"), -1).reshape(-1, 2)
            pick = np.random.default_rng(0).choice(n * n, 300, replace=False)
            _, hists[graph] = ktrain.fit_points_adam(mesh[pick], img.reshape(-1)[pick], [emb, emb], steps=60,
                                                     lr=0.05, log_every=20, progress=False,
                                                     device=torch_device.torch, cuda_graph=graph)
    assert hists[True].step == hists[False].step == [20, 40, 60]
    assert hists[True].loss[-1] < 0.5 * hists[True].loss[0]
    np.testing.assert_allclose(hists[True].loss, hists[False].loss, rtol=1e-4)
