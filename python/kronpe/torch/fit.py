"""A differentiable closed-form grid fit: :func:`fit_grid` and the :class:`GridFit` module.

The fit is kronpe's ridge fit (docs/math/encodings.rst, "The grid fit in closed form"): for a signal
S (N_1, ..., N_D, *channels) and per-axis embeddings Phi_i = psi_i(x_i) (N_i, K_i),

    W = argmin ||S - W x_1 Phi_1 ... x_D Phi_D||^2 + ridge ||W||^2,

solved through thin SVDs Phi_i = U_i diag(s_i) V_i^T (float64):
W = (S x_i U_i^T) * s / (s^2 + ridge) x_i V_i, with s the outer product of the s_i (ridge 0: the
pseudo-inverse with kronpe.fit_grid's cutoff). Trailing channel axes share the factorisations.

Gradients (no unrolling of any iteration; the same factorisations serve the backward):

- wrt S, the fit is linear: dS = (dW x_i V_i^T) * s / (s^2 + ridge) x_i U_i.
- wrt Phi_i, by the implicit-function theorem on the normal equations M w = A^T s with
  A = Phi_1 (x) ... (x) Phi_D and M = A^T A + ridge I: with Y = M^{-1} dW (a solve with the same
  SVDs: Y = (dW x_i V_i^T) / (s^2 + ridge) x_i V_i, plus (dW - dW x_i V_i V_i^T) / ridge when
  some K_i exceeds the rank of Phi_i) and the residual R = S - A w,

      dPhi_i = <R x_{j != i} Phi_j^T, Y>_{not i} - <(Y x_j Phi_j) x_{j != i} Phi_j^T, W>_{not i},

  where <X, Z>_{not i} contracts every axis but i (channels included). Autograd then carries
  dPhi_i to whatever produced Phi_i: the embedders' tensor parameters (widths, frequencies) and
  the coordinates.

The products run through :func:`kronpe.torch.multi_mode_product` (kronpe's chain planner; torch's
BLAS on the CPU, kronpe's CUDA kernels on a GPU), the SVDs through ``torch.linalg.svd``, so the
fit runs wherever the signal lives.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np
import torch
from torch import nn

from .._adapters import validate as _validate
from ..embedders import Embedder
from .._shared import guess_ndim
from . import _checks
from ._checks import real_tensor
from ._ops import multi_mode_product

__all__ = ["fit_grid", "GridFit"]

_F64 = torch.float64


def _chain(T: torch.Tensor, mats: Sequence[torch.Tensor], skip: int = -1) -> torch.Tensor:
    """T x_i mats[i] over the grid axes i (all but ``skip``)."""
    modes = [i for i in range(len(mats)) if i != skip]
    return multi_mode_product(T, [mats[i] for i in modes], modes)


def _contract_but(X: torch.Tensor, Z: torch.Tensor, i: int) -> torch.Tensor:
    """<X, Z> over every axis but i: (X.shape[i], Z.shape[i])."""
    axes = [a for a in range(X.dim()) if a != i]
    return torch.tensordot(X, Z, dims=(axes, axes))


def _expand(f: torch.Tensor, ndim: int) -> torch.Tensor:
    """A grid-shaped filter broadcast over trailing channel axes of a tensor of ``ndim`` axes."""
    return f.reshape(f.shape + (1,) * (ndim - f.dim()))


class _Factors:
    """Thin SVDs of the per-axis embeddings and the filters of one ridge (float64)."""

    def __init__(self, phis: Sequence[torch.Tensor], ridge: float, rcond: Optional[float], eps: float):
        self.phis = phis
        svds = [torch.linalg.svd(p, full_matrices=False) for p in phis]
        self.U = [u for u, _, _ in svds]
        self.V = [vh.mT for _, _, vh in svds]
        s = svds[0][1]
        for _, si, _ in svds[1:]:
            s = torch.multiply(s.reshape(s.shape + (1,)), si)  # outer product over the axes
        self.ridge = ridge
        self.full_rank = all(v.shape[0] == v.shape[1] for v in self.V)
        if ridge > 0:
            self.fit_filter = s / (s * s + ridge)
            self.solve_filter = 1.0 / (s * s + ridge)
            self.cut = False
        else:  # the pseudo-inverse, with kronpe.fit_grid's cutoff (GridPlan._filter)
            if rcond is None:
                rows = int(np.prod([p.shape[0] for p in phis]))
                rcond = max(rows, int(np.prod([p.shape[1] for p in phis]))) * eps
            smax = float(s.max()) if s.numel() else 0.0
            keep = s > rcond * smax
            self.cut = not bool(keep.all())
            self.fit_filter = torch.where(keep, 1.0 / torch.where(keep, s, 1.0), 0.0)
            self.solve_filter = self.fit_filter * self.fit_filter

    def fit(self, S: torch.Tensor) -> torch.Tensor:
        Z = _chain(S, [u.mT for u in self.U]) * _expand(self.fit_filter, S.dim())
        return _chain(Z, self.V)

    def fit_adjoint(self, G: torch.Tensor) -> torch.Tensor:
        Z = _chain(G, [v.mT for v in self.V]) * _expand(self.fit_filter, G.dim())
        return _chain(Z, self.U)

    def solve(self, G: torch.Tensor) -> torch.Tensor:
        """Y = (A^T A + ridge I)^{-1} G (G of the weights' shape)."""
        Gv = _chain(G, [v.mT for v in self.V])
        if self.full_rank:
            return _chain(Gv * _expand(self.solve_filter, G.dim()), self.V)
        if self.ridge == 0:
            raise ValueError(
                "ridge must be > 0 for gradients wrt the embeddings when some K_i exceeds the rank of "
                "its embedding (the pseudo-inverse is not differentiable there)")
        # the part outside the row space of A is scaled by 1 / ridge
        return _chain(Gv * _expand(self.solve_filter - 1.0 / self.ridge, G.dim()), self.V) + G / self.ridge


class _GridFitFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, ridge: float, rcond: Optional[float], S: torch.Tensor, *phis: torch.Tensor):
        eps = float(torch.finfo(S.dtype).eps)
        f = _Factors([p.detach().to(_F64) for p in phis], ridge, rcond, eps)
        S64 = S.detach().to(_F64)
        W = f.fit(S64)
        ctx.factors = f
        ctx.save_for_backward(S64, W)
        ctx.dtypes = (S.dtype, [p.dtype for p in phis])
        return W.to(S.dtype)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: torch.Tensor):
        S, W = ctx.saved_tensors
        f: _Factors = ctx.factors
        s_dtype, phi_dtypes = ctx.dtypes
        G = grad.to(_F64)
        gS = f.fit_adjoint(G).to(s_dtype) if ctx.needs_input_grad[2] else None
        needs_phi = ctx.needs_input_grad[3:]
        gphis: List[Optional[torch.Tensor]] = [None] * len(needs_phi)
        if any(needs_phi):
            if f.ridge == 0 and f.cut:
                raise ValueError("ridge must be > 0 for gradients wrt the embeddings when the pseudo-inverse "
                                 "drops singular values (ridge=0 with a rank-deficient embedding)")
            phis = f.phis
            Y = f.solve(G)
            R = S - _chain(W, phis)  # the residual on the grid
            AY = _chain(Y, phis)
            for i, need in enumerate(needs_phi):
                if not need:
                    continue
                pT = [p.mT for p in phis]
                g = _contract_but(_chain(R, pT, skip=i), Y, i) - _contract_but(_chain(AY, pT, skip=i), W, i)
                gphis[i] = g.to(phi_dtypes[i])
        return (None, None, gS, *gphis)


def _as_embedder(e, i: int):
    """A callable (N,) float64 coordinates -> (N, K): kronpe embedders through EmbedderModule."""
    _checks.embedder(f"embedders[{i}]", e, callables=True)
    if isinstance(e, Embedder):
        from .modules import EmbedderModule

        return EmbedderModule(e, check=False)
    return e


def _embedder_list(embedders, shape) -> list:
    if isinstance(embedders, (list, tuple, nn.ModuleList)):
        embs = list(embedders)
        if not embs:
            raise ValueError("embedders must hold one embedder per grid axis, got none")
        return embs
    if embedders is None:
        raise TypeError("embedders must be a kronpe Embedder, a callable, or a list of one per grid axis, got None")
    return [embedders] * guess_ndim(tuple(shape))


def _coords(coords, shape, device) -> List[torch.Tensor]:
    D = len(shape)
    if coords is None:
        return [torch.arange(int(n), dtype=_F64, device=device) / int(n) for n in shape]
    if isinstance(coords, (torch.Tensor, np.ndarray)) and np.ndim(coords) == 1:
        coords = [coords]
    coords = _validate.sequence("coords", coords, "D 1-D coordinate tensors")
    if len(coords) != D:
        raise ValueError(f"coords must hold {D} arrays (one per grid axis), got {len(coords)}")
    out = []
    for i, (c, n) in enumerate(zip(coords, shape)):
        if not isinstance(c, torch.Tensor):
            c = torch.as_tensor(_validate.coords_1d(f"coords[{i}]", c, np.float64), device=device)
        real_tensor(f"coords[{i}]", c)
        if n is not None and (c.dim() != 1 or c.shape[0] != n):
            raise ValueError(f"coords[{i}] must be 1-D with {n} coordinates (signal axis {i}), got shape {tuple(c.shape)}")
        _checks.coords(f"coords[{i}]", c)  # as kronpe.fit_grid's: finite, in [0, 1]
        out.append(c.to(device=device, dtype=_F64))
    return out


def _embeddings(embs, xs, weights_shape=None) -> List[torch.Tensor]:
    """The per-axis embeddings Phi_i (N_i, K_i) of the coordinates ``xs``; kronpe embedders'
    sizes are checked against the memory budget first. With ``weights_shape`` each K_i must be
    that of the weights."""
    for i, (e, x) in enumerate(zip(embs, xs)):
        if isinstance(e, Embedder):  # the embedding, its SVD's factors
            _checks.budget(f"embedders[{i}] (K = {e.K}) at the {x.shape[0]} coordinates of axis {i}",
                           (x.shape[0], int(e.K), 3), _F64, x.device, "use fewer features or coordinates")
    phis = []
    for i, (e, x) in enumerate(zip(embs, xs)):
        p = _as_embedder(e, i)(x)
        n = x.shape[0]
        if not isinstance(p, torch.Tensor) or p.dim() != 2 or p.shape[0] != n:
            got = f"shape {tuple(p.shape)}" if isinstance(p, torch.Tensor) else type(p).__name__
            raise ValueError(f"embedders[{i}] must map the {n} coordinates of axis {i} to a ({n}, K) tensor, "
                             f"got {got}")
        real_tensor(f"embedders[{i}]'s embedding", p)
        if weights_shape is not None and p.shape[1] != weights_shape[i]:
            raise ValueError(f"weights must have shape (K_1, ..., K_D, *channels) with K_{i + 1} = {p.shape[1]} "
                             f"(embedders[{i}]'s K), got shape {tuple(weights_shape)}")
        if not torch.isfinite(p).all():
            raise ValueError(f"embedders[{i}] gave non-finite values at the coordinates")
        phis.append(p)
    return phis


def fit_grid(
    signal: torch.Tensor,  # (N_1, ..., N_D, *channels)
    embedders,
    coords=None,
    ridge: float = 1e-6,
    penalty=None,
    rcond: Optional[float] = None,
) -> torch.Tensor:  # (K_1, ..., K_D, *channels)
    """The ridge fit of ``signal`` on a grid, differentiable wrt the signal and the embeddings.

    Parameters
    ----------
    signal : tensor, shape (N_1, ..., N_D, *channels)
        float32 or float64 (the weights come back in its dtype; the fit runs in float64).
    embedders : kronpe Embedder, callable, or a list of D of them
        Each maps the (N_i,) float64 coordinates of its axis to the (N_i, K_i) embedding. kronpe
        embedders are evaluated in torch (:class:`EmbedderModule`); any other callable (an
        ``nn.Module`` with learnable widths, say) carries the gradients to its tensors.
    coords : list of D 1-D tensors or arrays, optional
        Default i / N_i per axis (as kronpe.fit_grid). Tensors that require grad get gradients.
    ridge : float >= 0
        The ridge weight; 0 is the pseudo-inverse (gradients wrt the embeddings then need
        embeddings of full column rank). ``"gcv"`` is not differentiable and not accepted.
    penalty : None
        Only the ridge's identity has this closed form; a ``DifferencePenalty`` fit has none
        (use ``kronpe.fit_grid``).
    rcond : float, optional
        The pseudo-inverse cutoff for ridge 0 (as kronpe.fit_grid).

    Returns
    -------
    tensor, shape (K_1, ..., K_D, *channels)
        The weights: ``kronpe.fit_grid(signal, embedders, coords, ridge).weights`` for the same
        numbers, with autograd.
    """
    real_tensor("signal", signal, floating=True)
    _checks.has_data("signal", signal)
    if isinstance(ridge, str):
        raise ValueError(f"ridge must be a non-negative number for a differentiable fit, got {ridge!r} "
                         "(choose it with kronpe.fit_grid(..., ridge='gcv').ridge)")
    ridge = _validate.nonnegative_float("ridge", ridge)
    rcond = None if rcond is None else _validate.nonnegative_float("rcond", rcond)
    if penalty is not None:
        raise ValueError(f"penalty must be None in kronpe.torch.fit_grid (the closed form is the ridge's), got "
                         f"{_validate.describe(penalty)}; kronpe.fit_grid solves penalised fits")
    embs = _embedder_list(embedders, signal.shape)
    D = len(embs)
    if signal.dim() < D:
        raise ValueError(f"signal must have at least {D} axes (N_1..N_{D}, *channels), got shape {tuple(signal.shape)}")
    shape = tuple(signal.shape[:D])
    if 0 in shape or signal.numel() == 0:
        raise ValueError(f"signal is empty (shape {tuple(signal.shape)}): every axis needs at least one value")
    xs = _coords(coords, shape, signal.device)
    phis = _embeddings(embs, xs)
    _checks.budget("embedders", [p.shape[1] for p in phis] + list(signal.shape[D:]) + [3], _F64, signal.device,
                   "the weights (K_1, ..., K_D, *channels) are too large: use fewer features")
    if not torch.isfinite(signal).all():
        raise ValueError("signal must be finite")
    return _GridFitFunction.apply(ridge, rcond, signal, *phis)


class GridFit(nn.Module):
    """:func:`fit_grid` as a module: ``GridFit(embedders, ridge=...)(signal)`` gives the weights.

    Embedders that are modules (with learnable tensors) are registered as submodules, so their
    parameters train with the rest of a model; kronpe embedders are wrapped in
    :class:`EmbedderModule`. ``predict(weights, coords)`` evaluates W x_i psi_i(coords_i).
    """

    def __init__(self, embedders, ridge: float = 1e-6, coords=None, rcond: Optional[float] = None):
        super().__init__()
        if isinstance(ridge, str):
            raise ValueError(f"ridge must be a non-negative number for a differentiable fit, got {ridge!r}")
        self.ridge = _validate.nonnegative_float("ridge", ridge)
        self.rcond = None if rcond is None else _validate.nonnegative_float("rcond", rcond)
        self.coords = coords
        items = list(embedders) if isinstance(embedders, (list, tuple, nn.ModuleList)) else [embedders]
        if not items:
            raise ValueError("embedders must hold one embedder per grid axis, got none")
        self._single = not isinstance(embedders, (list, tuple, nn.ModuleList))
        mods = [_as_embedder(e, i) for i, e in enumerate(items)]
        self.embedders = nn.ModuleList([m if isinstance(m, nn.Module) else _Callable(m) for m in mods])

    def _list(self, ndim_from) -> list:
        embs = list(self.embedders)
        return embs * guess_ndim(tuple(ndim_from)) if self._single else embs

    def forward(self, signal: torch.Tensor) -> torch.Tensor:
        real_tensor("signal", signal, floating=True)
        return fit_grid(signal, self._list(signal.shape), self.coords, self.ridge, None, self.rcond)

    def predict(self, weights: torch.Tensor, coords: Sequence[torch.Tensor]) -> torch.Tensor:
        """W x_i psi_i(coords[i]): the fitted signal at any grid of coordinates."""
        real_tensor("weights", weights, floating=True)
        if isinstance(coords, (torch.Tensor, np.ndarray)) and np.ndim(coords) == 1:
            coords = [coords]
        coords = _validate.sequence("coords", coords, "1-D coordinate tensors (one per grid axis)")
        D = len(coords) if self._single else len(self.embedders)
        if len(coords) != D or D > weights.dim():
            raise ValueError(f"coords must hold one 1-D tensor per grid axis of the weights ({D if not self._single else 'D'}"
                             f" for weights of shape {tuple(weights.shape)}), got {len(coords)}")
        xs = _coords(coords, [None] * D, weights.device)
        embs = list(self.embedders) * (D if self._single else 1)
        phis = [p.to(weights.dtype) for p in _embeddings(embs, xs, weights.shape)]
        _checks.budget("coords", [x.shape[0] for x in xs] + list(weights.shape[D:]), weights.dtype, weights.device,
                       "the fitted signal on the grid of coords is too large: evaluate fewer coordinates at once")
        return multi_mode_product(weights, phis)


class _Callable(nn.Module):
    """A plain callable embedder as a module (no parameters of its own)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)
