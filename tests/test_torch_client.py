"""kronpe.torch inside a model someone else would write: a plain MLP coordinate network (the
SIREN/NeRF-style "coordinates in, colour out" model) whose first layer is a kronpe encoding.

For each of ComplexEncoding (grid path and point path), LearnableFourierFeatures and
SinusoidalEmbedding: the network trains for a few hundred Adam steps on a real photograph and
its loss falls; ``torch.compile(fullgraph=True)`` traces it with no graph break (forward and
backward, aot_eager; inductor with KRONPE_SLOW_TESTS=1); ``state_dict`` saves and loads into a
fresh model with the same outputs; ``torch.export`` exports it and the exported program gives
the same outputs.
"""
from __future__ import annotations

import io
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

import kronpe  # noqa: E402
import kronpe.torch as kt  # noqa: E402
from kronpe.torch.modules import sort_plan  # noqa: E402

N = 32  # the photograph's side
STEPS = 300
KINDS = ["complex-grid", "complex-points", "lff", "sinusoidal"]


def _image() -> torch.Tensor:
    return torch.from_numpy(kronpe.data.load_sample("astronaut", size=N))  # (N, N, 3) in [0, 1]


class CoordMLP(nn.Module):
    """encoding -> Linear -> ReLU -> Linear -> ReLU -> Linear(3): the usual coordinate network."""

    def __init__(self, kind: str, width: int = 64):
        super().__init__()
        self.kind = kind
        if kind.startswith("complex"):
            g = kronpe.Gaussian(16, 0.04)
            self.enc = kt.ComplexEncoding([g, g], out_features=32)
            nn.init.normal_(self.enc.weight, std=0.1)
            features = 32
        elif kind == "lff":
            self.enc = kt.LearnableFourierFeatures(pos_dim=2, f_dim=64, h_dim=64, d_dim=32, gamma=0.1)
            features = 32
        else:
            self.enc = kt.SinusoidalEmbedding(2, 6, "nerf")
            features = 24
        self.mlp = nn.Sequential(nn.Linear(features, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                                 nn.Linear(width, 3))

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:  # -> (P, 3)
        if self.kind == "complex-grid":
            cx, cy = inputs
            feats = self.enc.forward_grid([cx, cy]).reshape(-1, 32)
        elif self.kind == "complex-points":
            idx, w = inputs
            feats = self.enc.forward_plan(kt.BlendPlan(idx, w))
        elif self.kind == "lff":
            (pts,) = inputs
            feats = self.enc(pts.unsqueeze(1))  # (P, G=1, M=2) -> (P, 32)
        else:
            (pts,) = inputs
            feats = self.enc(pts)
        return self.mlp(feats)


def _data(kind: str, model: CoordMLP):
    """(inputs, target (P, 3)) for the model: the whole photograph, or 60% of its pixels."""
    img = _image()
    x = torch.arange(N, dtype=torch.float32) / N
    if kind == "complex-grid":
        return (x, x), img.reshape(-1, 3)
    pts = torch.stack(torch.meshgrid(x, x, indexing="ij"), -1).reshape(-1, 2)
    target = img.reshape(-1, 3)
    if kind == "complex-points":
        pick = torch.from_numpy(np.random.default_rng(0).permutation(N * N)[: int(0.6 * N * N)])
        plan, order = sort_plan(model.enc.plan(pts[pick]))
        return (plan.indices, plan.weights), target[pick][order]
    return (pts,), target


@pytest.fixture(autouse=True)
def one_thread():
    """These models are tiny (1024 pixels): one thread trains them fastest, and on a shared
    machine several threads mostly wait for each other."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _train(kind: str, steps: int = STEPS):
    torch.manual_seed(0)
    model = CoordMLP(kind)
    inputs, target = _data(kind, model)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = torch.mean((model(*inputs) - target) ** 2)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model, inputs, losses


@pytest.mark.parametrize("kind", KINDS)
def test_trains_and_round_trips_state_dict(kind):
    model, inputs, losses = _train(kind)
    assert np.isfinite(losses).all()
    assert losses[-1] < 0.35 * losses[0], (losses[0], losses[-1])
    # save and load into a fresh model (other random initialisation): the same outputs
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    torch.manual_seed(123)
    fresh = CoordMLP(kind)
    fresh.load_state_dict(torch.load(io.BytesIO(buf.getvalue())))
    with torch.no_grad():
        torch.testing.assert_close(fresh(*inputs), model(*inputs), rtol=0, atol=0)


def _compiled_step(kind: str, backend: str):
    torch.manual_seed(0)
    model = CoordMLP(kind)
    inputs, target = _data(kind, model)
    ref = CoordMLP(kind)
    ref.load_state_dict(model.state_dict())
    compiled = torch.compile(model, fullgraph=True, backend=backend)  # a graph break would raise
    out = compiled(*inputs)
    torch.mean((out - target) ** 2).backward()
    expected = ref(*inputs)
    torch.mean((expected - target) ** 2).backward()
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("kind", KINDS)
def test_compile_fullgraph_forward_and_backward(kind):
    torch._dynamo.reset()
    _compiled_step(kind, "aot_eager")


@pytest.mark.skipif(not os.environ.get("KRONPE_SLOW_TESTS"), reason="inductor compiles C++ (~45 s each here): set KRONPE_SLOW_TESTS=1")
@pytest.mark.parametrize("kind", KINDS)
def test_compile_fullgraph_inductor(kind):
    torch._dynamo.reset()
    _compiled_step(kind, "inductor")


@pytest.mark.parametrize("kind", KINDS)
def test_export(kind):
    torch.manual_seed(0)
    model = CoordMLP(kind).eval()
    inputs, _ = _data(kind, model)
    ep = torch.export.export(model, tuple(inputs))
    with torch.no_grad():
        torch.testing.assert_close(ep.module()(*inputs), model(*inputs), rtol=1e-6, atol=1e-6)
