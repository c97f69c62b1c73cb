"""``nn.Module`` encoders: kronpe's complex encoding and the papers' encoders, in torch.

- :class:`EmbedderModule`: any kronpe 1-D embedder as a module (fixed buffers), differentiable
  wrt the coordinates, with the NumPy embedder's values.
- :class:`ComplexEncoding`: the Kronecker (complex) encoding of D-dimensional coordinates with a
  trainable linear head W of shape (K_1, ..., K_D, *out) (section 5 of "Trading Positional
  Complexity vs. Deepness in Coordinate Networks", Zheng et al., ECCV 2022: "the complex-encoding
  paper" below; docs/math/encodings.rst). On a grid it is W x_1 Psi(x_1) ... x_D Psi(x_D); at
  scattered points it blends the model's values on a virtual grid (docs/math/scattered.rst). Can
  start from a closed-form fit (:meth:`ComplexEncoding.from_fit`).
- :class:`SimpleEncoding`: the concatenation of the per-axis embeddings (the complex-encoding
  paper, section 5), with the extra sampling directions of "Rethinking Positional Encoding"
  (Zheng et al., 2021) as an option.
- :class:`LearnableFourierFeatures`: Algorithm 1 of "Learnable Fourier Features for
  Multi-Dimensional Spatial Positional Encoding" (Li et al., NeurIPS 2021).
- :class:`SinusoidalEmbedding`: the sinusoidal-embeddings tutorial of the neuraloperator library
  (transformer and NeRF styles, amplitude and frequency modulation).
"""
from __future__ import annotations

import math
from typing import NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import nn

from .._adapters import validate as _validate
from . import _checks, _embed
from ._checks import real_tensor
from ._ops import blend, multi_mode_product

__all__ = [
    "BlendPlan",
    "ComplexEncoding",
    "EmbedderModule",
    "LearnableFourierFeatures",
    "prune_basis",
    "sort_plan",
    "SimpleEncoding",
    "SinusoidalEmbedding",
]

OutShape = Union[None, int, Sequence[int]]

#: SinusoidalEmbedding's largest NeRF num_frequencies (kronpe.NeRF's): the frequencies 2^k pi
#: of larger k are beyond any float resolution of [0, 1] (and overflow int64 in the neuralop
#: convention's integer powers)
_MAX_NERF_FREQUENCIES = 60


def _out_shape(out_features: OutShape) -> Tuple[int, ...]:
    if out_features is None:
        return ()
    scalar = not hasattr(out_features, "__iter__") or isinstance(out_features, str)
    shape = (out_features,) if scalar else tuple(out_features)
    for s in shape:
        _validate.positive_int("out_features", s)
    return tuple(int(s) for s in shape)


def prune_basis(t: torch.Tensor) -> torch.Tensor:
    """``t`` with the entries below eps^2 * max|t| set to 0 (eps of t's dtype).

    Gaussian bases hold entries that decay to 1e-38 and below far from a centre. Their products
    with ordinary values are subnormal floats, on which the CPU runs many times slower (one
    forward + backward of a 256 x 256 float32 model 6-10x slower, for torch.matmul
    and for kronpe alike). An entry below eps^2 of the largest one changes every product by
    less than eps^2 of its size, far below rounding. Every basis matrix that ComplexEncoding
    multiplies goes through this.
    """
    if t.numel() == 0:
        return t
    eps = torch.finfo(t.dtype).eps
    cut = t.detach().abs().amax() * (eps * eps)
    return torch.where(t.abs() < cut, torch.zeros((), dtype=t.dtype, device=t.device), t)


# ---- kronpe embedders as modules ------------------------------------------------------------


class EmbedderModule(nn.Module):
    """A kronpe 1-D embedder as a module: (N,) coordinates in [0, 1] -> (N, K).

    The embedder's constants (centres, frequencies) are non-persistent buffers, so the module
    moves with ``.to(device)``; the embedding is computed in torch with the formulas of the
    compiled kernels (float64, rounded once to x's dtype), differentiable wrt x, for every family
    but ``Random`` (a hash of the bits of x: it falls back on the NumPy embedder, with no
    gradient wrt x and a CPU round trip).

    Parameters
    ----------
    embedder : kronpe.embedders.Embedder
        The embedder (its parameters are copied at construction).
    check : bool
        Validate coordinates (1-D, finite, in [0, 1]) outside ``torch.compile``.
    """

    def __init__(self, embedder, check: bool = True):
        super().__init__()
        self.embedder = _checks.embedder("embedder", embedder)
        self.K = int(embedder.K)
        self.check = bool(check)
        self._names: Tuple[str, ...] = ()
        self._forward = None
        if _embed.has_torch_version(embedder):
            buffers, self._forward = _embed.build(embedder)
            self._names = tuple(buffers)
            for n, b in buffers.items():
                self.register_buffer(n, torch.as_tensor(np.asarray(b)), persistent=False)

    @property
    def differentiable(self) -> bool:
        """True when the embedding is computed in torch (gradients wrt x flow)."""
        return self._forward is not None

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (N,) -> (N, K)
        return self._embed(x, "x")

    def _embed(self, x: torch.Tensor, name: str) -> torch.Tensor:
        """forward(x), its errors naming x ``name``."""
        if self.check:
            _checks.coords(name, x)
        if not x.is_floating_point():
            x = x.to(torch.float64)
        if self._forward is not None:
            # the torch formulas hold about three (N, K) float64 temporaries
            _checks.budget(f"{name} (N = {x.shape[0]}) x K (= {self.K})", (x.shape[0], self.K, 3), torch.float64, x.device,
                           "embed fewer coordinates at once, or use fewer features")
            return self._forward(x, {n: getattr(self, n) for n in self._names})
        if x.requires_grad:
            raise ValueError(
                f"{type(self.embedder).__name__} has no torch version: its embedding is not "
                "differentiable wrt x (detach x, or add the family to kronpe.torch._embed)"
            )
        out = self.embedder(x.detach().cpu().numpy())
        return torch.from_numpy(np.ascontiguousarray(out)).to(device=x.device, dtype=x.dtype)

    def extra_repr(self) -> str:
        return repr(self.embedder)


def _as_module(e) -> nn.Module:
    return e if isinstance(e, nn.Module) else EmbedderModule(e)


def _call(module: nn.Module, x: torch.Tensor, name: str) -> torch.Tensor:
    """module(x), a kronpe EmbedderModule's errors naming x ``name``."""
    return module._embed(x, name) if isinstance(module, EmbedderModule) else module(x)


# ---- the complex (Kronecker) encoding ---------------------------------------------------------


class BlendPlan(NamedTuple):
    """The blending matrix of a set of points: row p has weights[p] at flat nodes indices[p]."""

    indices: torch.Tensor  # (P, 2^D) int64, row-major flat indices into the virtual grid
    weights: torch.Tensor  # (P, 2^D)


def sort_plan(plan: BlendPlan) -> Tuple[BlendPlan, torch.Tensor]:
    """The plan's rows ordered by their smallest grid index, and that order (a permutation).

    The loss of a fit does not depend on the order of the points; in grid order, the transpose
    (the backward of the blend) reads and writes memory nearly in sequence: several times faster
    for random points (3.5x on 65536 points of a 257^2 grid). Reorder the targets
    with the returned order: ``targets[order]``.
    """
    from ._cpu import _row_range

    lo, _ = _row_range(plan.indices)
    order = torch.argsort(lo, stable=True)
    return BlendPlan(plan.indices[order].contiguous(), plan.weights[order].contiguous()), order


class ComplexEncoding(nn.Module):
    """Kronecker encoding of D-dimensional coordinates with a trainable linear head.

    The model is f(q) = W x_1 Psi_1(q_1) ... x_D Psi_D(q_D), W of shape (K_1, ..., K_D, *out).
    On separable coordinates (a grid) :meth:`forward_grid` evaluates it with one mode-product
    chain and never blends. At scattered points (:meth:`forward`) it computes the model's values
    on a virtual grid, V = W x_i Psi_i(g_i) (the mode-product op), then blends V at the points
    (docs/math/scattered.rst): f(q_p) ~ sum of the 2^D corner values of q_p's cell, weighted as
    :class:`kronpe.BlendingMatrix` weights them.

    Parameters
    ----------
    embedders : sequence of D kronpe embedders
        One per axis (Psi_i).
    out_features : int, tuple of ints or None
        Trailing shape of the output (channels); None gives a scalar per point.
    grid : shape or list of per-axis node coordinates, optional
        The virtual grid of the point path, as :class:`kronpe.BlendingMatrix` takes it (an int
        M_i gives ``linspace(0, 1, M_i)``). Default: as :func:`kronpe.fit_points`, K_base + 1 nodes
        per axis (one per centre spacing of a shifted basis).
    normalize : bool
        Normalise the blending weights to sum to 1 (the official code's choice).
    dtype : torch.dtype
        dtype of W.
    """

    def __init__(
        self,
        embedders: Sequence,
        out_features: OutShape = None,
        grid=None,
        normalize: bool = True,
        dtype: torch.dtype = torch.float32,
    ):
        super().__init__()
        embedders = _validate.sequence("embedders", embedders, "kronpe embedders (one per axis)")
        if not embedders:
            raise ValueError("embedders must name at least one embedder (one per axis)")
        for i, e in enumerate(embedders):
            _checks.embedder(f"embedders[{i}]", e)
        if dtype not in (torch.float32, torch.float64):
            raise TypeError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        self.embedders = embedders
        self.ndim = len(embedders)
        self.out_shape = _out_shape(out_features)
        K = tuple(int(e.K) for e in embedders)
        _checks.budget("embedders and out_features", K + self.out_shape, dtype, torch.device("cpu"),
                       "W (K_1, ..., K_D, *out_features) is too large: use fewer features")
        self.embed = nn.ModuleList(EmbedderModule(e) for e in embedders)
        self.weight = nn.Parameter(torch.zeros(K + self.out_shape, dtype=dtype))
        self.normalize = bool(normalize)
        from ..operators.blending import default_grid, grid_nodes

        #: the virtual grid's node coordinates per axis (default: fit_points' grid, K_base + 1
        #: nodes per axis over [0, 1], i.e. one node per centre spacing)
        if grid is None:
            grid = default_grid(embedders)
        elif isinstance(grid, tuple):
            grid = list(grid)
        self.grid_coords: Tuple[np.ndarray, ...] = tuple(grid_nodes(grid, self.ndim))
        for i, (e, g) in enumerate(zip(embedders, self.grid_coords)):
            # Psi_i(g_i) (M_i, K_i) in W's dtype, pruned once (not at every step)
            _checks.budget("grid", (g.size, int(e.K), 3), torch.float64, torch.device("cpu"),
                           f"axis {i}'s nodes x K: use a coarser grid")
            basis = torch.as_tensor(np.asarray(e(g), dtype=np.float64)).to(dtype)
            self.register_buffer(f"node_basis_{i}", prune_basis(basis), persistent=False)
        self._plan_cache: Optional[tuple] = None

    @property
    def K(self) -> Tuple[int, ...]:
        return tuple(self.weight.shape[: self.ndim])

    # -- grid path --

    def forward_grid(self, coords: Sequence[torch.Tensor]) -> torch.Tensor:
        """The model on the grid coords[0] x ... x coords[D-1]: (N_1, ..., N_D, *out).

        ``coords`` are D 1-D tensors in [0, 1]; gradients flow to W (and to the coordinates for
        embedders with a torch version).
        """
        W = self.weight
        bases = self.bases(coords)
        _checks.budget("coords", [b.shape[0] for b in bases] + list(self.out_shape), W.dtype, W.device,
                       "the model on the grid of coords is too large: evaluate fewer coordinates at once")
        return multi_mode_product(W, bases)

    def bases(self, coords: Sequence[torch.Tensor]) -> list:
        """The per-axis basis matrices Psi_i(coords[i]) (N_i, K_i) in W's dtype, tiny entries pruned (prune_basis)."""
        if isinstance(coords, torch.Tensor):
            raise TypeError(f"coords must be a sequence of {self.ndim} 1-D tensors (one per axis), got one tensor")
        coords = _validate.sequence("coords", coords, f"{self.ndim} 1-D tensors")
        for i, c in enumerate(coords):
            real_tensor(f"coords[{i}]", c)
        if len(coords) != self.ndim:
            raise ValueError(f"coords must hold {self.ndim} 1-D tensors (one per axis), got {len(coords)}")
        W = self.weight
        return [prune_basis(emb._embed(c.to(W.device), f"coords[{i}]").to(W.dtype))
                for i, (emb, c) in enumerate(zip(self.embed, coords))]

    # -- point path --

    def grid_values(self) -> torch.Tensor:
        """The model's values on the virtual grid, V = W x_i Psi_i(g_i): (M_1, ..., M_D, *out)."""
        W = self.weight
        _checks.budget("grid", [g.size for g in self.grid_coords] + list(self.out_shape), W.dtype, W.device,
                       "the model's values on the virtual grid are too large: use a coarser grid")
        bases = [getattr(self, f"node_basis_{i}") for i in range(self.ndim)]
        bases = [b if b.dtype == W.dtype else prune_basis(b.to(W.dtype)) for b in bases]
        return multi_mode_product(W, bases)

    def plan(self, points: torch.Tensor) -> BlendPlan:
        """The blending matrix of ``points`` (P, D) in [0, 1] (computed by kronpe, in NumPy)."""
        from ..operators.blending import BlendingMatrix

        B = BlendingMatrix(_points_numpy(points, self.ndim), list(self.grid_coords), self.embedders,
                           normalize=self.normalize)
        dev = self.weight.device
        # weights stay float64: the kernels read them so, whatever the dtype of W
        return BlendPlan(torch.from_numpy(B.indices).to(dev), torch.from_numpy(B.weights).to(dev))

    def forward_plan(self, plan: BlendPlan) -> torch.Tensor:
        """The model at the points of ``plan``: (P, *out). Pure torch + kronpe ops (compilable)."""
        if not isinstance(plan, tuple) or len(plan) != 2:
            raise TypeError(f"plan must be a BlendPlan (indices, weights), as ComplexEncoding.plan gives, got "
                            f"{_validate.describe(plan)}")
        plan = BlendPlan(*plan)
        corners = getattr(plan.indices, "shape", (0, 0))[1:]
        if tuple(corners) != (2**self.ndim,):
            raise ValueError(f"plan.indices must have shape (P, {2**self.ndim}) (the 2^D corners of a point's cell "
                             f"in this {self.ndim}-D encoding's grid), got {tuple(getattr(plan.indices, 'shape', ()))}")
        V = self.grid_values()
        G = math.prod(V.shape[: self.ndim])
        C = math.prod(self.out_shape)
        out = blend(V.reshape(G, C), plan.indices, plan.weights)
        return out.reshape((plan.indices.shape[0],) + self.out_shape)

    def forward(self, points: torch.Tensor) -> torch.Tensor:
        """The model at scattered points (P, D) in [0, 1]: (P, *out).

        The blending plan of the last ``points`` tensor is cached (training on fixed points
        computes it once). Gradients flow to W, not to the points.
        """
        real_tensor("points", points)
        if points.is_inference():  # no version counter to key the cache on: planned every call
            return self.forward_plan(self.plan(points))
        cache = self._plan_cache
        key = (id(points), points._version, points.device, self.weight.device, self.weight.dtype)
        if cache is None or cache[0] is not points or cache[1] != key:
            self._plan_cache = (points, key, self.plan(points))
        return self.forward_plan(self._plan_cache[2])

    # -- from a closed-form fit --

    @classmethod
    def from_fit(cls, model, dtype: Optional[torch.dtype] = None) -> "ComplexEncoding":
        """A ComplexEncoding that starts from a closed-form fit (to fine-tune it, e.g. with Adam).

        ``model`` is a kronpe GridModel (``fit_grid``) or PointModel (``fit_points``): its
        weights (K_1, ..., K_D, *channels) and embedders are copied. For a GridModel,
        ``forward_grid(coords)`` equals ``model.predict_grid(coords)``. For a PointModel the
        virtual grid and the blending normalisation are the model's, so ``forward(points)``
        equals ``model.predict(points)`` (``forward_grid`` evaluates the encoding exactly at the
        coordinates, where the PointModel's own ``predict_grid`` blends).
        """
        W = getattr(model, "weights", None)
        embs = getattr(model, "embedders", None)
        if W is None or embs is None:
            raise ValueError(
                f"model must be a kronpe GridModel or PointModel (with weights and embedders), "
                f"got {type(model).__name__}"
            )
        W = np.asarray(W)
        D = len(embs)
        if dtype is None:
            dtype = torch.float32 if W.dtype == np.float32 else torch.float64
        enc = cls(list(embs), W.shape[D:] or None, grid=getattr(model, "grid_coords", None),
                  normalize=bool(getattr(model, "normalize", True)), dtype=dtype)
        if tuple(W.shape) != tuple(enc.weight.shape):
            raise ValueError(f"model.weights has shape {W.shape}, its embedders give {tuple(enc.weight.shape)}")
        with torch.no_grad():
            enc.weight.copy_(torch.from_numpy(np.ascontiguousarray(W)))
        return enc

    def extra_repr(self) -> str:
        return f"K={self.K}, out_shape={self.out_shape}, normalize={self.normalize}"


def _points_numpy(points, ndim: int) -> np.ndarray:
    real_tensor("points", points)
    if points.dim() != 2 or points.shape[1] != ndim:
        raise ValueError(f"points must have shape (P, {ndim}), got {tuple(points.shape)}")
    _checks.has_data("points", points)
    pts = points.detach().cpu().numpy()
    if not pts.dtype.kind == "f":
        pts = pts.astype(np.float64)
    return pts


# ---- the simple encoding -------------------------------------------------------------------


class SimpleEncoding(nn.Module):
    """Concatenation of 1-D embeddings of the coordinates (the "simple" encoding).

    As in section 5 of the complex-encoding paper (Zheng et al., ECCV 2022).

    With ``directions="axes"`` each of the D coordinates is embedded by its own embedder (length
    K_1 + ... + K_D). With ``directions="four"`` (2-D only, as in "Rethinking Positional
    Encoding", Zheng et al., 2021) the embedder is also sampled along the diagonals: x, y,
    (x + y) / 2 and (x - y + 1) / 2 (all in [0, 1]).

    Parameters
    ----------
    embedders : a kronpe embedder (or module), or a sequence of them
        One per direction; a single one is used for every direction.
    ndim : int, optional
        D, needed when a single embedder is given with ``directions="axes"``.
    directions : {"axes", "four"}
    out_features : int, optional
        Adds a linear head (``nn.Linear``) on the concatenated encoding.
    """

    def __init__(self, embedders, ndim: Optional[int] = None, directions: str = "axes",
                 out_features: Optional[int] = None):
        super().__init__()
        _validate.choice("directions", directions, ("axes", "four"))
        single = not isinstance(embedders, (list, tuple))
        if single:
            _checks.embedder("embedders", embedders, modules=True)
        else:
            for i, e in enumerate(embedders):
                _checks.embedder(f"embedders[{i}]", e, modules=True)
        if ndim is not None:
            ndim = _validate.positive_int("ndim", ndim)
        if directions == "four":
            if ndim not in (None, 2):
                raise ValueError(f"directions='four' samples 2-D coordinates, got ndim={ndim}")
            ndim, n_dir = 2, 4
        else:
            if single and ndim is None:
                raise ValueError("ndim is needed when a single embedder is given")
            ndim = len(embedders) if not single else ndim
            n_dir = ndim
        embs = [embedders] * n_dir if single else list(embedders)
        if len(embs) != n_dir:
            raise ValueError(f"embedders must hold {n_dir} embedders (one per direction), got {len(embs)}")
        if out_features is not None:
            out_features = _validate.positive_int("out_features", out_features)
        self.ndim = ndim
        self.directions = directions
        self.embed = nn.ModuleList(_as_module(e) for e in embs)
        self.encoding_size = sum(int(m.K) for m in self.embed)
        self.head = None if out_features is None else nn.Linear(self.encoding_size, out_features)

    def directional_coords(self, points: torch.Tensor) -> list:
        """The 1-D coordinates embedded: the D axes, or x, y, (x+y)/2, (x-y+1)/2."""
        real_tensor("points", points)
        if points.dim() != 2 or points.shape[1] != self.ndim:
            raise ValueError(f"points must have shape (P, {self.ndim}), got {tuple(points.shape)}")
        cols = list(points.unbind(1))
        if self.directions == "four":
            x, y = cols
            cols = [x, y, (x + y) / 2, (x - y + 1) / 2]
        return cols

    def forward(self, points: torch.Tensor) -> torch.Tensor:  # (P, D) -> (P, sum K) or (P, out)
        names = [f"points[:, {i}]" for i in range(self.ndim)]
        if self.directions == "four":
            names += ["(points[:, 0] + points[:, 1]) / 2", "(points[:, 0] - points[:, 1] + 1) / 2"]
        cols = self.directional_coords(points)
        enc = torch.cat([_call(m, c, n) for m, c, n in zip(self.embed, cols, names)], dim=1)
        return enc if self.head is None else self.head(enc.to(self.head.weight.dtype))


# ---- learnable Fourier features -------------------------------------------------------------


class LearnableFourierFeatures(nn.Module):
    """Learnable Fourier features + MLP: [N, G, M] -> [N, D].

    Algorithm 1 of "Learnable Fourier Features for Multi-Dimensional Spatial Positional Encoding"
    (Li et al., NeurIPS 2021).

    r_x = [cos(x W_r^T) || sin(x W_r^T)] / sqrt(F), W_r in R^{F/2 x M} drawn from
    Normal(0, gamma^-2) (std 1/gamma, eq. 3), then Y = act(r W_1 + B_1) W_2 + B_2 with W_1 of
    shape F x H and W_2 of shape H x D/G, shared by the G groups; Y is reshaped to [N, D].

    At initialisation r_x . r_y = (1/F) sum_j cos((x - y) . w_j) has expectation
    exp(-|x - y|^2 / (2 gamma^2)) / 2 (and r_x . r_x = 1/2 exactly); the paper's eq. 4 writes
    the kernel as exp(-|x - y|^2 / gamma^2), without the two factors of 2.

    Parameters
    ----------
    pos_dim : int
        M, the coordinates per group.
    f_dim : int
        |F|, the Fourier feature dimension (even).
    h_dim : int
        |H|, the hidden layer of the MLP.
    d_dim : int
        D, the output dimension (a multiple of ``groups``).
    groups : int
        G, the positional groups.
    gamma : float
        W_r ~ Normal(0, gamma^-2).
    activation : {"relu", "gelu"}
        The MLP's non-linearity (Algorithm 1 writes ReLU, Maximum(0, .)).
    dropout : float
        Dropout after the activation (the paper's Reformer/UI runs used 0.1/0.2; default 0).
    """

    def __init__(self, pos_dim: int, f_dim: int, h_dim: int, d_dim: int, groups: int = 1,
                 gamma: float = 1.0, activation: str = "relu", dropout: float = 0.0):
        super().__init__()
        for n, v in (("pos_dim", pos_dim), ("f_dim", f_dim), ("h_dim", h_dim), ("d_dim", d_dim), ("groups", groups)):
            _validate.positive_int(n, v)
        _validate.check_budget("f_dim and h_dim", 4 * (pos_dim * f_dim + f_dim * h_dim + h_dim * d_dim),
                               "use smaller layers")
        if f_dim % 2:
            raise ValueError(f"f_dim must be even (cos and sin halves), got {f_dim}")
        if d_dim % groups:
            raise ValueError(f"d_dim must be a multiple of groups ({groups}), got {d_dim}")
        gamma = _validate.positive_float("gamma", gamma)
        acts = {"relu": nn.ReLU, "gelu": nn.GELU}
        if activation not in acts:
            raise ValueError(f"activation must be one of {sorted(acts)}, got {activation!r}")
        dropout = _validate.nonnegative_float("dropout", dropout)
        if dropout > 1:
            raise ValueError(f"dropout must be a probability in [0, 1], got {dropout!r}")
        self.pos_dim, self.f_dim, self.h_dim, self.d_dim, self.groups = pos_dim, f_dim, h_dim, d_dim, groups
        self.gamma = float(gamma)
        self.Wr = nn.Linear(pos_dim, f_dim // 2, bias=False)
        layers = [nn.Linear(f_dim, h_dim), acts[activation]()]
        if dropout:
            layers.append(nn.Dropout(dropout))
        layers.append(nn.Linear(h_dim, d_dim // groups))
        self.mlp = nn.Sequential(*layers)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.Wr.weight, mean=0.0, std=1.0 / self.gamma)

    def _input(self, x) -> torch.Tensor:
        """x as the layers take it: a real tensor on the parameters' device, in their dtype
        (integers and bools converted; another float dtype is an error, not a silent cast)."""
        real_tensor("x", x)
        w = self.Wr.weight
        _checks.same_device("x", x, w.device, "the module's parameters")
        if not x.is_floating_point():
            x = x.to(w.dtype)
        elif x.dtype != w.dtype:
            raise TypeError(f"x has dtype {x.dtype}, the module's parameters {w.dtype}: convert one "
                            f"(x.to({w.dtype}) or module.to({x.dtype}))")
        # the widest layer's activations, twice (the features and what the next layer makes of them)
        _checks.budget("x", tuple(x.shape[:-1]) + (max(self.f_dim, self.h_dim), 2), x.dtype, x.device,
                       "encode fewer positions at once")
        return x

    def fourier_features(self, x: torch.Tensor) -> torch.Tensor:  # (..., G, M) -> (..., G, F)
        proj = self.Wr(self._input(x))
        return torch.cat([torch.cos(proj), torch.sin(proj)], dim=-1) / math.sqrt(self.f_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (N, G, M) -> (N, D)
        real_tensor("x", x)
        if x.dim() < 2 or tuple(x.shape[-2:]) != (self.groups, self.pos_dim):
            raise ValueError(
                f"x must have shape (N, {self.groups}, {self.pos_dim}) (positions, groups, "
                f"coordinates per group), got {tuple(x.shape)}"
            )
        y = self.mlp(self.fourier_features(x))
        return y.reshape(*x.shape[:-2], self.d_dim)


# ---- sinusoidal embeddings -----------------------------------------------------------------


class SinusoidalEmbedding(nn.Module):
    """Sinusoidal embedding of each input channel: (..., N, C) -> (..., N, 2 L C).

    As in the sinusoidal-embeddings tutorial of the neuraloperator library (the default
    convention) or as neuraloperator's own class (``convention="neuralop"``).

    For 0 <= k < L each channel value p gives g(p)_{2k} = sin(w_k p), g(p)_{2k+1} = cos(w_k p):

    - ``"transformer"``: w_k = max_positions^(-k / L) (``convention="seed"``, the default: the
      tutorial's formula, as kronpe.Transformer: ``SinusoidalEmbedding(1, L, "transformer", P)``
      on 2 pi x equals ``kronpe.Transformer(L, P)`` on x), or w_k = (1 / max_positions)^(2k / L)
      (``convention="neuralop"``);
    - ``"nerf"``: w_k = 2^k pi (both conventions).

    The two transformer conventions differ for L >= 2: neuraloperator 2.0's
    ``neuralop.layers.embeddings.SinusoidalEmbedding`` computes its frequencies as
    ``(1 / max_positions) ** (arange(L) / L * 2)``, i.e. the exponent 2k / L, not the k / L its
    docstring (and the tutorial) write. ``convention="neuralop"`` reproduces that class exactly:
    the same frequencies, computed as it computes them (in float32, then cast to x's dtype), and
    the same channel order (channel c occupies columns 2Lc .. 2L(c+1)-1, sin and cos
    interleaved), so a model trained with one loads into the other.

    Inputs are (batch, N, C) or (N, C); the output stacks the channels' embeddings one after the
    other (channel c occupies columns 2Lc .. 2L(c+1)-1, sin and cos interleaved), the layout of
    the tutorial's h(X) = concat(g(x_1), ..., g(x_C)). ``include_input`` puts the C raw inputs
    first (the tutorial's concat(x, g(x))).

    Modulation by a constant m (the tutorial's "encoding constant parameters"):
    ``forward(x, amplitude=m)`` gives m g(x); ``forward(x, frequency=m)`` gives g(m x). m is a
    number or a tensor broadcastable to x's shape (e.g. (batch, 1, 1): one m per sample).
    """

    def __init__(self, in_channels: int, num_frequencies: Optional[int] = None,
                 embedding_type: str = "transformer", max_positions: float = 10000,
                 include_input: bool = False, convention: str = "seed"):
        super().__init__()
        self.convention = _validate.choice("convention", convention, ("seed", "neuralop"))
        in_channels = _validate.positive_int("in_channels", in_channels)
        L = in_channels if num_frequencies is None else _validate.positive_int("num_frequencies", num_frequencies)
        _validate.check_budget("num_frequencies", 16 * L, "use fewer frequencies")
        _validate.choice("embedding_type", embedding_type, ("transformer", "nerf"))
        if embedding_type == "transformer":
            max_positions = _validate.positive_float("max_positions", max_positions)
        elif L > _MAX_NERF_FREQUENCIES:
            raise ValueError(f"num_frequencies must be at most {_MAX_NERF_FREQUENCIES} with embedding_type='nerf' "
                             f"(frequencies 2^k pi, as kronpe.NeRF), got {L}")
        self.in_channels, self.num_frequencies = int(in_channels), int(L)
        self.embedding_type = embedding_type
        self.max_positions = max_positions
        self.include_input = bool(include_input)
        if self.convention == "neuralop":  # as neuraloperator computes them: float32 arithmetic
            k = torch.arange(0, L)
            if embedding_type == "nerf":
                freqs = 2**k * torch.pi
            else:
                freqs = (1 / max_positions) ** (k / L * 2)
        else:
            k = torch.arange(L, dtype=torch.float64)
            if embedding_type == "nerf":
                freqs = 2.0**k * math.pi
            else:
                freqs = float(max_positions) ** (-k / L)
        self.register_buffer("freqs", freqs, persistent=False)

    @property
    def out_channels(self) -> int:
        return 2 * self.num_frequencies * self.in_channels + (self.in_channels if self.include_input else 0)

    def highest_frequency(self, modulation: float = 1.0) -> float:
        """The largest frequency as the tutorial counts it: NeRF 2^(L-1), transformer 1, times m."""
        top = 2.0 ** (self.num_frequencies - 1) if self.embedding_type == "nerf" else 1.0
        return top * _validate.positive_float("modulation", modulation)

    def satisfies_nyquist(self, n_points: int, modulation: float = 1.0) -> bool:
        """The tutorial's criterion: highest frequency < N / 2 (N samples of [0, 2 pi))."""
        n_points = _validate.positive_int("n_points", n_points)
        return self.highest_frequency(modulation) < n_points / 2

    def forward(self, x: torch.Tensor, amplitude=None, frequency=None) -> torch.Tensor:
        real_tensor("x", x)
        if x.dim() not in (2, 3) or x.shape[-1] != self.in_channels:
            raise ValueError(
                f"x must have shape (batch, N, {self.in_channels}) or (N, {self.in_channels}), "
                f"got {tuple(x.shape)}"
            )
        _checks.same_device("x", x, self.freqs.device, "the module's frequencies")
        amplitude = _checks.modulation("amplitude", amplitude, x)
        frequency = _checks.modulation("frequency", frequency, x)
        if not x.is_floating_point():
            x = x.to(torch.get_default_dtype())
        # the angles (..., C, L), their sines and cosines (..., C, L, 2) and the output
        _checks.budget(f"x (shape {tuple(x.shape)}) x 2 num_frequencies (= {2 * self.num_frequencies})",
                       tuple(x.shape) + (self.num_frequencies, 4), x.dtype, x.device,
                       "embed fewer points at once, or use fewer frequencies")
        arg = x if frequency is None else x * frequency
        ang = arg.unsqueeze(-1) * self.freqs.to(x.dtype)  # (..., N, C, L)
        g = torch.stack((torch.sin(ang), torch.cos(ang)), dim=-1)  # (..., N, C, L, 2)
        if amplitude is not None:
            amp = torch.as_tensor(amplitude, dtype=g.dtype, device=g.device)
            g = g * torch.broadcast_to(amp, x.shape)[..., None, None]
        out = g.flatten(-3)
        return torch.cat([x, out], dim=-1) if self.include_input else out

    def extra_repr(self) -> str:
        return (f"in_channels={self.in_channels}, num_frequencies={self.num_frequencies}, "
                f"embedding_type={self.embedding_type!r}, max_positions={self.max_positions}, "
                f"convention={self.convention!r}")
