"""kronpe.torch.fit_grid / GridFit: the differentiable closed-form grid fit against kronpe.fit_grid
(NumPy), gradients by gradcheck (float64) to the signal, to embedder widths and to coordinates,
shared factorisations over channels, bad input."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import kronpe  # noqa: E402
import kronpe.torch as kt  # noqa: E402
from _samples import assert_close  # noqa: E402
class Gauss(torch.nn.Module):
    """A Gaussian basis with a learnable width: (N,) -> (N, K)."""

    def __init__(self, K: int, sigma: float, dtype=torch.float64):
        super().__init__()
        self.register_buffer("centres", torch.arange(K, dtype=torch.float64) / K)
        self.sigma = torch.nn.Parameter(torch.tensor(sigma, dtype=dtype))

    def forward(self, x):
        u = x[:, None] - self.centres.to(x.device)[None, :]
        return torch.exp(-(u * u) / (2 * self.sigma * self.sigma))


# (signal shape, K per axis, ridge): square, thin (K > N, the complement of the row space), 3-D,
# one channel axis more, the pseudo-inverse
CASES = [
    ((12, 10, 3), (8, 6), 1e-3),
    ((7, 6), (9, 8), 1e-2),
    ((6, 5, 4), (4, 5, 3), 1e-4),
    ((8, 7, 2, 3), (5, 6), 1e-3),
    ((12, 10), (8, 6), 0.0),
]


@pytest.mark.parametrize("shape, K, ridge", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_equals_numpy_fit_grid(torch_device, shape, K, ridge, dtype):
    rng = np.random.default_rng(1)
    S = rng.standard_normal(shape)
    embs = [kronpe.Gaussian(k, 1.2 / k) for k in K]
    expected = kronpe.fit_grid(S, embs, ridge=ridge).weights
    W = kt.fit_grid(torch.tensor(S, dtype=dtype, device=torch_device.torch), embs, ridge=ridge)
    assert W.shape == expected.shape and W.dtype == dtype and W.device.type == torch_device.torch
    assert_close(W.detach().cpu().double().numpy(), expected, 1e-5 if dtype == torch.float32 else 1e-10)


def test_coords_and_strided_signal():
    rng = np.random.default_rng(2)
    base = rng.standard_normal((20, 9, 3))
    S = base[::2]  # (10, 9, 3), strided
    x = [np.sort(rng.random(10)), np.sort(rng.random(9))]
    embs = [kronpe.Gaussian(7, 0.15), kronpe.Triangle(6)]
    expected = kronpe.fit_grid(S, embs, coords=x, ridge=1e-4).weights
    W = kt.fit_grid(torch.from_numpy(base)[::2], embs, coords=[torch.from_numpy(c) for c in x], ridge=1e-4)
    np.testing.assert_allclose(W.numpy(), expected, rtol=1e-10, atol=1e-12)


def test_channels_share_one_factorisation():
    """A fit of (N1, N2, C) equals the C fits of its channels."""
    S = torch.randn(9, 8, 4, dtype=torch.float64)
    embs = [Gauss(6, 0.2), Gauss(5, 0.25)]
    W = kt.fit_grid(S, embs, ridge=1e-3)
    for c in range(4):
        torch.testing.assert_close(W[..., c], kt.fit_grid(S[..., c], embs, ridge=1e-3))


def _gauss(K: int, sigma: torch.Tensor):
    """A Gaussian basis whose width is the tensor ``sigma``: (N,) -> (N, K)."""
    centres = torch.arange(K, dtype=torch.float64) / K
    return lambda x: torch.exp(-((x[:, None] - centres[None, :]) ** 2) / (2 * sigma * sigma))


# small enough for gradcheck's one backward per output element
GRAD_CASES = [((6, 5, 2), (4, 3), 1e-3), ((5, 4), (6, 5), 1e-2), ((4, 3, 3), (3, 2, 2), 1e-4),
              ((4, 3, 2, 2), (3, 3), 1e-3), ((7, 6), (5, 4), 0.0)]


@pytest.mark.parametrize("shape, K, ridge", GRAD_CASES)
def test_gradcheck_signal_widths_coords(shape, K, ridge):
    """Gradients to the signal, to each axis's width and to the coordinates, float64."""
    torch.manual_seed(0)
    D = len(K)
    S = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    sigmas = [torch.tensor(1.5 / k, dtype=torch.float64, requires_grad=True) for k in K]
    xs = [(torch.arange(n, dtype=torch.float64) / n + 0.01).requires_grad_() for n in shape[:D]]

    def f(S, *params):
        embs = [_gauss(k, s) for k, s in zip(K, params[:D])]
        return kt.fit_grid(S, embs, coords=list(params[D:]), ridge=ridge)

    assert torch.autograd.gradcheck(f, (S, *sigmas, *xs), eps=1e-6, atol=1e-6, rtol=1e-5)


def test_gradient_is_implicit_not_unrolled():
    """The weights' graph is one node (the fit), whatever the sizes: no SVD or solve is unrolled
    into autograd."""
    emb = Gauss(6, 0.2)
    W = kt.fit_grid(torch.randn(9, 8, dtype=torch.float64), [emb, emb], ridge=1e-3)
    assert type(W.grad_fn).__name__ == "_GridFitFunctionBackward"


def test_gridfit_module_learns_a_width():
    """GridFit inside a model: the width of its embedder trains (held-out error falls) and its
    state_dict holds it."""
    torch.manual_seed(0)
    n = 32
    x = torch.arange(2 * n, dtype=torch.float64) / (2 * n)
    img = torch.sin(6 * x)[:, None] * torch.cos(4 * x)[None, :] + 0.3 * torch.sin(13 * x)[:, None]
    train, held = img[::2, ::2], img[1::2, 1::2]
    emb = Gauss(16, 0.01)  # far too narrow: it interpolates badly between the samples
    layer = kt.GridFit([emb, emb], ridge=1e-6, coords=[x[::2], x[::2]])
    opt = torch.optim.Adam(layer.parameters(), lr=2e-3)
    losses = []
    for _ in range(40):
        opt.zero_grad()
        W = layer(train)
        loss = torch.mean((layer.predict(W, [x[1::2], x[1::2]]) - held) ** 2)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0]
    assert "embedders.0.sigma" in layer.state_dict()


@pytest.mark.parametrize("call, match, error", [
    (lambda S, e: kt.fit_grid(S, e, ridge="gcv"), "ridge must be a non-negative number", ValueError),
    (lambda S, e: kt.fit_grid(S, e, ridge=-1.0), "ridge", ValueError),
    (lambda S, e: kt.fit_grid(S, e, penalty=kronpe.DifferencePenalty(2)), "penalty must be None", ValueError),
    (lambda S, e: kt.fit_grid(S.numpy(), e), "signal must be a torch tensor", TypeError),
    (lambda S, e: kt.fit_grid(S.long(), e), "signal must hold float32 or float64", TypeError),
    (lambda S, e: kt.fit_grid(S, e + e[:1]), "signal must have at least 3 axes", ValueError),
    (lambda S, e: kt.fit_grid(S, [e[0], "x"]), r"embedders\[1\] must be a kronpe Embedder or a callable", TypeError),
    (lambda S, e: kt.fit_grid(S, [e[0], lambda x: x]), r"embedders\[1\] must map the 8 coordinates", ValueError),
    (lambda S, e: kt.fit_grid(S, e, coords=[torch.zeros(9)]), "coords must hold 2 arrays", ValueError),
    (lambda S, e: kt.fit_grid(S, e, coords=[torch.zeros(9), torch.zeros(7)]), r"coords\[1\] must be 1-D with 8", ValueError),
    (lambda S, e: kt.fit_grid(S[:0], e), "signal is empty", ValueError),
    (lambda S, e: kt.fit_grid(S * float("nan"), e), "signal must be finite", ValueError),
])
def test_bad_input(call, match, error):
    with pytest.raises(error, match=match):
        call(torch.randn(9, 8, dtype=torch.float64), [kronpe.Gaussian(5, 0.1), kronpe.Gaussian(4, 0.1)])


def test_pseudo_inverse_gradient_needs_full_rank():
    S = torch.randn(5, 4, dtype=torch.float64)
    emb = Gauss(7, 0.2)  # K > N: rank-deficient A^T A
    W = kt.fit_grid(S, [emb, emb], ridge=0.0)
    with pytest.raises(ValueError, match="ridge must be > 0 for gradients wrt the embeddings"):
        W.sum().backward()
    # the signal's gradient (a linear map) is fine at ridge 0, also when values are cut off
    S.requires_grad_()
    embs = [kronpe.Gaussian(7, 0.2)] * 2
    (g,) = torch.autograd.grad((kt.fit_grid(S, embs, ridge=0.0) ** 2).sum(), S)
    assert torch.isfinite(g).all() and g.abs().max() > 0
