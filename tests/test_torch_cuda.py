"""kronpe.torch on CUDA tensors: what only a GPU can show.

Skipped without kronpe's CUDA kernels, a CUDA device and CUDA torch (the ``gpu`` marker). The
values, gradcheck and opcheck of every op on CUDA are test_torch_ops.py's own cases (its
``device`` fixture runs "cuda-torch"); here:

- ``torch.compile(fullgraph=True)`` with inductor (the backend that generates GPU code) through
  a model that uses both paths of ``ComplexEncoding``, forward and backward, against eager;
- capture in a CUDA graph (``torch.cuda.graph``) of a forward and backward step, replayed on new
  inputs copied into the captured ones, against eager;
- 200 Adam steps of the benchmark's models (kronpe.bench.torch_steps) on CUDA: kronpe's and the
  official formulation end at the same loss.
"""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import kronpe  # noqa: E402
import kronpe.torch as kt  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not (kronpe.cuda.is_available() and torch.cuda.is_available()),
                       reason="needs kronpe's CUDA kernels, a CUDA device and CUDA torch"),
]

DEV = "cuda"


class _Both(torch.nn.Module):
    """A scalar from both paths of a ComplexEncoding: a grid (forward_grid) and points (a plan)."""

    def __init__(self):
        super().__init__()
        g = kronpe.Gaussian(16, 0.04)
        self.enc = kt.ComplexEncoding([g, g], out_features=4)
        torch.nn.init.normal_(self.enc.weight, std=0.1)
        self.head = torch.nn.Linear(4, 2)

    def forward(self, cx, cy, indices, weights):
        g = torch.tanh(self.head(self.enc.forward_grid([cx, cy])))
        p = self.head(self.enc.forward_plan(kt.BlendPlan(indices, weights)))
        return g.sum() + (p**2).sum()


def _inputs(model, seed=0):
    gen = torch.Generator(device=DEV).manual_seed(seed)
    cx = torch.rand(40, device=DEV, dtype=torch.float64, generator=gen)
    cy = torch.rand(24, device=DEV, dtype=torch.float64, generator=gen)
    plan = model.enc.plan(torch.rand(300, 2, device=DEV, dtype=torch.float64, generator=gen))
    assert plan.indices.is_cuda and plan.weights.is_cuda
    return cx, cy, plan.indices, plan.weights


def _grads(model):
    return [p.grad.detach().clone() for p in model.parameters()]


def test_compile_fullgraph_inductor_on_cuda():
    torch.manual_seed(0)
    torch._dynamo.reset()
    model = _Both().to(DEV)
    args = _inputs(model)
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


def test_cuda_graph_capture_and_replay():
    """Forward + backward captured once, replayed on new inputs: the eager results each time."""
    torch.manual_seed(0)
    model = _Both().to(DEV)
    static = [a.clone() for a in _inputs(model, seed=1)]
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
        new = _inputs(model, seed=seed)
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


@pytest.mark.parametrize("case", ["grid", "points"])
def test_equal_loss_after_200_adam_steps_on_cuda(case):
    pytest.importorskip("skimage")
    from kronpe.bench import torch_steps as ts

    losses = {}
    for name, (model, target) in ts.make_models(case, device=DEV).items():
        assert target.is_cuda and all(p.is_cuda for p in model.parameters())
        step = ts.stepper(model, target)
        losses[name] = [step().detach() for _ in range(200)]
    a, b = float(losses["kronpe"][-1]), float(losses["official"][-1])
    assert a < 0.2 * float(losses["kronpe"][0])
    assert abs(a - b) <= 1e-3 * abs(b), f"loss after 200 steps: kronpe {a}, official {b}"
    np.testing.assert_allclose(float(losses["kronpe"][0]), float(losses["official"][0]), rtol=1e-5)


@pytest.mark.parametrize("path", ["grid", "points"])
def test_training_in_a_cuda_graph_matches_eager(path):
    """kronpe.torch.train captures the step in a CUDA graph by default on CUDA: same losses."""
    from kronpe.torch import train as ktrain

    n = 32
    x = np.arange(n) / n
    img = (0.5 + 0.4 * np.sin(2 * np.pi * x)[:, None] * np.cos(3 * np.pi * x)[None, :]).astype(np.float32)
    emb = kronpe.Gaussian(16, 0.05)
    hists = {}
    for graph in (False, True):
        torch.manual_seed(0)
        if path == "grid":
            _, hists[graph] = ktrain.fit_grid_adam(img[::2, ::2], [emb, emb], steps=60, lr=0.05, log_every=20,
                                                   progress=False, device=DEV, cuda_graph=graph)
        else:
            mesh = np.stack(np.meshgrid(x, x, indexing="ij"), -1).reshape(-1, 2)
            pick = np.random.default_rng(0).choice(n * n, 300, replace=False)
            _, hists[graph] = ktrain.fit_points_adam(mesh[pick], img.reshape(-1)[pick], [emb, emb], steps=60,
                                                     lr=0.05, log_every=20, progress=False, device=DEV,
                                                     cuda_graph=graph)
    assert hists[True].step == hists[False].step == [20, 40, 60]
    assert hists[True].loss[-1] < 0.5 * hists[True].loss[0]
    np.testing.assert_allclose(hists[True].loss, hists[False].loss, rtol=1e-4)


def test_adam_step_captures_cuda_parameters_by_default():
    from kronpe.torch.train import adam_step

    w = torch.nn.Parameter(torch.zeros(3, device=DEV))
    target = torch.arange(3.0, device=DEV)
    step = adam_step([w], lambda: w * 1.0, target, lr=0.1)
    assert step.cuda_graph is True
    losses = [float(step()) for _ in range(6)]  # three eager, one capture, two replays
    assert losses[-1] < losses[0]
    assert adam_step([w], lambda: w * 1.0, target, cuda_graph=False).cuda_graph is False
    c = torch.nn.Parameter(torch.zeros(3))
    assert adam_step([w, c], lambda: w * c, target).cuda_graph is False  # not all on the GPU: eager


def test_adam_step_rejects_a_graph_of_cpu_parameters():
    from kronpe.torch.train import adam_step

    w = torch.nn.Parameter(torch.zeros(3))
    with pytest.raises(ValueError, match="cuda_graph=True needs every trainable parameter on a CUDA device"):
        adam_step([w], lambda: w, torch.ones(3), cuda_graph=True)
