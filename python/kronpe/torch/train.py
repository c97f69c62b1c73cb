"""Fit a signal with Adam: the papers' gradient-descent rows (Tables 1-4 of "Trading Positional
Complexity vs. Deepness in Coordinate Networks", Zheng et al., ECCV 2022).

:func:`train` runs full-batch Adam on the mean squared error of any model (one step = forward,
backward, Adam) with a tqdm progress bar and PSNR reporting; :func:`fit_grid_adam` and
:func:`fit_points_adam` build a :class:`~kronpe.torch.ComplexEncoding` and train it on a grid
(the mode-product path, no blending) or at scattered points (the blending path).
``kronpe demo --adam`` runs them as rows of its table (:mod:`kronpe.app.demo`).

The papers' settings (docs/math/encodings.rst, "The papers' settings and numbers"): 2000 epochs
(500 for video) of full-batch Adam, lr 0.1, betas (0.9, 0.999), weight decay 1e-8; gradient
descent on a grid uses Gau sigma = 0.004 and Tri d = 2/256 with K = 256; the official
random-points script uses Gau sigma = 0.005 and Tri d = 2.5/256.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
import torch

from .._adapters import validate as _validate
from ..data import grid_coords, psnr, psnr_of_mse
from . import _checks
from .modules import ComplexEncoding, sort_plan

__all__ = [
    "History",
    "adam_step",
    "fit_grid_adam",
    "fit_points_adam",
    "psnr",
    "train",
]

#: the official scripts' Adam settings (lr, weight decay) for complex encodings
PAPER_LR = 0.1
PAPER_WEIGHT_DECAY = 1e-8


@dataclass
class History:
    """What :func:`train` recorded, every ``log_every`` steps and at the last step."""

    step: List[int] = field(default_factory=list)
    loss: List[float] = field(default_factory=list)  # mean squared error on the training data
    psnr: List[float] = field(default_factory=list)  # training PSNR (dB)
    seconds: List[float] = field(default_factory=list)  # time since the start of training
    eval_psnr: List[float] = field(default_factory=list)  # from ``evaluate``, when given

    @property
    def total_seconds(self) -> float:
        return self.seconds[-1] if self.seconds else 0.0


def train(
    model: torch.nn.Module,
    forward: Callable[[], torch.Tensor],
    target: torch.Tensor,
    steps: int = 2000,
    lr: float = PAPER_LR,
    weight_decay: float = PAPER_WEIGHT_DECAY,
    peak: float = 1.0,
    log_every: int = 50,
    evaluate: Optional[Callable[[], float]] = None,
    progress: bool = True,
    desc: str = "adam",
    cuda_graph: Optional[bool] = None,
) -> History:
    """Full-batch Adam on mean((forward() - target)^2) over ``model.parameters()``.

    Parameters
    ----------
    model : nn.Module
        Whose parameters are trained.
    forward : callable
        Returns the prediction to compare with ``target`` (same shape).
    target : Tensor
    steps, lr, weight_decay
        Adam's settings (betas (0.9, 0.999)); defaults: the official scripts'.
    peak : float
        Peak value for PSNR.
    log_every : int
        Record loss/PSNR (and call ``evaluate``) every this many steps; reading the loss waits
        for the device, so it is not done every step.
    evaluate : callable, optional
        Returns a PSNR (e.g. on held-out samples), called under ``torch.no_grad()``.
    progress : bool
        Show a tqdm progress bar (on stderr).
    cuda_graph : bool, optional
        Capture one step (forward, backward, Adam) in a CUDA graph after three warm-up steps and
        replay it for the others: one launch per step instead of one per operation, so the step
        costs the GPU's time, not Python's. Default (None): on when the parameters are on a CUDA
        device, off otherwise. Needs a ``forward`` that reads the same
        tensors at every step (every kronpe model here does) and ``evaluate`` free of in-place
        changes to them; Adam then keeps its step count on the device (``capturable=True``),
        with the same arithmetic.
    """
    from .._progress import bar as _bar

    steps = _validate.nonnegative_int("steps", steps)
    log_every = _validate.positive_int("log_every", log_every)
    if not (isinstance(lr, (int, float)) and lr > 0 and math.isfinite(lr)):
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module (whose parameters are trained), got {_validate.describe(model)}")
    for name, fn, optional in (("forward", forward, False), ("evaluate", evaluate, True)):
        if not callable(fn) and not (optional and fn is None):
            raise TypeError(f"{name} must be a function of no arguments, got {_validate.describe(fn)}")
    _checks.real_tensor("target", target)
    _validate.nonnegative_float("weight_decay", weight_decay)
    _validate.positive_float("peak", peak)
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("model has no trainable parameters")
    step_fn = adam_step(params, forward, target, lr, weight_decay, cuda_graph, steps)
    hist = History()
    t0 = time.perf_counter()
    with _bar(steps, progress, desc) as bar:
        for step in range(1, steps + 1):
            loss = step_fn()
            if step % log_every == 0 or step == steps:
                mse = float(loss.detach())  # the loss before this step's update
                hist.step.append(step)
                hist.loss.append(mse)
                hist.psnr.append(psnr_of_mse(mse, peak))
                if evaluate is not None:
                    with torch.no_grad():
                        hist.eval_psnr.append(float(evaluate()))
                hist.seconds.append(time.perf_counter() - t0)
                post = {"loss": f"{mse:.3g}", "psnr": f"{hist.psnr[-1]:.2f}"}
                if hist.eval_psnr:
                    post["eval"] = f"{hist.eval_psnr[-1]:.2f}"
                bar.set_postfix(post, refresh=False)
            bar.update(1)
    if not hist.seconds:
        hist.seconds.append(time.perf_counter() - t0)
    return hist


_WARMUP = 3  # eager steps before a CUDA graph capture
# Whether cuda_graph=None captures on CUDA: on, since captured steps of both kronpe paths equal
# the eager ones (tests/test_torch_modules.py, on a GPU) and a replay saves every kernel's launch.
_GRAPH_DEFAULT = True


def adam_step(params, forward: Callable[[], torch.Tensor], target: torch.Tensor, lr: float = PAPER_LR,
              weight_decay: float = PAPER_WEIGHT_DECAY, cuda_graph: Optional[bool] = None,
              steps: Optional[int] = None) -> Callable[[], torch.Tensor]:
    """A function that runs one full-batch Adam step on mean((forward() - target)^2) over
    ``params`` (betas (0.9, 0.999)) and returns that step's loss (a tensor; reading it waits for
    the device). With ``cuda_graph`` (see :func:`train` for the default), its first three calls
    run eagerly on a side stream, the fourth captures one step in a CUDA graph and every later
    call replays it (see :func:`train`). ``steps``, when known, skips a capture that would be
    replayed once only. The returned function's ``cuda_graph`` attribute says whether it captures."""
    params = list(params)
    on_cuda = all(p.is_cuda for p in params)
    graph = _GRAPH_DEFAULT and on_cuda if cuda_graph is None else bool(cuda_graph)
    if graph and not on_cuda:
        raise ValueError("cuda_graph=True needs every trainable parameter on a CUDA device")
    opt = torch.optim.Adam(params, lr=lr, betas=(0.9, 0.999), weight_decay=weight_decay, capturable=graph)

    def eager():
        opt.zero_grad(set_to_none=not graph)  # a captured step keeps its gradient buffers
        pred = forward()
        if not isinstance(pred, torch.Tensor) or pred.shape != target.shape:
            got = f"shape {tuple(pred.shape)}" if isinstance(pred, torch.Tensor) else _validate.describe(pred)
            raise ValueError(f"forward() must return a tensor of target's shape {tuple(target.shape)}, got {got}")
        if not pred.requires_grad:
            raise ValueError("forward() must depend on the trainable parameters (its result has no gradient)")
        loss = torch.mean((pred - target) ** 2)
        loss.backward()
        opt.step()
        return loss.detach()  # holding the step's autograd graph would pin its streams

    if not graph:
        eager.cuda_graph = False
        return eager
    dev = params[0].device
    state = {"calls": 0, "graph": None, "loss": None}

    def step():
        state["calls"] += 1
        if state["graph"] is None and (state["calls"] <= _WARMUP or state["calls"] == steps):
            side = torch.cuda.Stream(device=dev)  # warm-up on a side stream, as torch.cuda.graph asks
            side.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(side):
                loss = eager()
            torch.cuda.current_stream(dev).wait_stream(side)
            return loss
        if state["graph"] is None:  # capture records the step without running it
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                state["loss"] = eager()
            state["graph"] = g
        state["graph"].replay()
        return state["loss"]

    step.cuda_graph = True
    return step


def _tensor(name: str, x, dtype, device) -> torch.Tensor:
    """x (a tensor or an array of real numbers) as a tensor of ``dtype`` on ``device``; finite."""
    if isinstance(x, torch.Tensor):
        t = _checks.has_data(name, _checks.real_tensor(name, x))
    else:
        t = torch.as_tensor(_validate.real_array(name, x))
    t = t.to(device=device, dtype=dtype)
    if t.numel() and not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} must be finite, found NaN or Inf")
    return t


def _options(embedders, init, dtype, device) -> list:
    """The embedders as a list, after checking the options shared by the two trainers."""
    embedders = _validate.sequence("embedders", embedders, "kronpe embedders (one per axis)")
    if init is not None and not isinstance(init, ComplexEncoding):
        raise TypeError(f"init must be a ComplexEncoding (e.g. ComplexEncoding.from_fit(model)), got "
                        f"{_validate.describe(init)}")
    if dtype not in (torch.float32, torch.float64):
        raise TypeError(f"dtype must be torch.float32 or torch.float64, got {_validate.describe(dtype)}")
    if device is not None:
        try:
            torch.device(device)
        except (RuntimeError, TypeError):
            raise ValueError(f"device must be a torch device (e.g. 'cpu' or 'cuda'), got {_validate.describe(device)}") from None
    return embedders


def fit_grid_adam(
    signal,  # (N_1, ..., N_D, *channels)
    embedders: Sequence,
    coords: Optional[Sequence] = None,
    steps: int = 2000,
    lr: float = PAPER_LR,
    weight_decay: float = PAPER_WEIGHT_DECAY,
    init: Optional[ComplexEncoding] = None,
    dtype: torch.dtype = torch.float32,
    device=None,
    progress: bool = True,
    **train_kwargs,
) -> Tuple[ComplexEncoding, History]:
    """Train a ComplexEncoding on a grid signal with Adam (the grid path: no blending).

    ``coords`` are the D per-axis coordinate arrays in [0, 1] (default linspace(0, 1, N_i + 1)[:-1],
    the papers'). ``init`` continues from a given model (e.g. ``ComplexEncoding.from_fit``).
    Returns (model, history).
    """
    embedders = _options(embedders, init, dtype, device)
    D = len(embedders)
    sig = _tensor("signal", signal, dtype, device)
    if sig.dim() < D:
        raise ValueError(f"signal must have at least {D} axes (one per embedder), got shape {tuple(sig.shape)}")
    if coords is None:
        coords = grid_coords(sig.shape[:D])
    coords = _validate.sequence("coords", coords, f"{D} 1-D coordinate arrays")
    coords = [_tensor(f"coords[{i}]", c, torch.float64, sig.device) for i, c in enumerate(coords)]
    for i, c in enumerate(coords):
        if c.dim() != 1 or c.shape[0] != sig.shape[i]:
            raise ValueError(f"coords[{i}] must have shape ({sig.shape[i]},), got {tuple(c.shape)}")
    model = init if init is not None else ComplexEncoding(embedders, tuple(sig.shape[D:]) or None, dtype=dtype)
    model = model.to(sig.device)
    bases = model.bases(coords)  # fixed: computed once
    from ._ops import multi_mode_product

    hist = train(model, lambda: multi_mode_product(model.weight, bases), sig, steps=steps, lr=lr,
                 weight_decay=weight_decay, progress=progress, desc="adam (grid)", **train_kwargs)
    return model, hist


def fit_points_adam(
    points,  # (P, D) in [0, 1]
    values,  # (P, *channels)
    embedders: Sequence,
    grid=None,
    steps: int = 2000,
    lr: float = PAPER_LR,
    weight_decay: float = PAPER_WEIGHT_DECAY,
    init: Optional[ComplexEncoding] = None,
    normalize: bool = True,
    dtype: torch.dtype = torch.float32,
    device=None,
    progress: bool = True,
    **train_kwargs,
) -> Tuple[ComplexEncoding, History]:
    """Train a ComplexEncoding at scattered points with Adam (the blending path).

    The blending matrix of the points is computed once; each step evaluates the model on the
    virtual grid (``grid``, default K_i nodes per axis) and blends it at the points.
    Returns (model, history).
    """
    embedders = _options(embedders, init, dtype, device)
    pts = _tensor("points", points, torch.float64, device)
    vals = _tensor("values", values, dtype, pts.device)
    if pts.dim() != 2 or pts.shape[1] != len(embedders):
        raise ValueError(f"points must have shape (P, {len(embedders)}), got {tuple(pts.shape)}")
    if vals.dim() < 1 or vals.shape[0] != pts.shape[0]:
        raise ValueError(f"values must have shape ({pts.shape[0]}, *channels), got {tuple(vals.shape)}")
    model = init if init is not None else ComplexEncoding(
        embedders, tuple(vals.shape[1:]) or None, grid=grid, normalize=normalize, dtype=dtype
    )
    model = model.to(vals.device)
    # the blending matrix once, its rows in grid order (faster transposes), targets alike
    plan, order = sort_plan(model.plan(pts))
    vals = vals[order.to(vals.device)]
    hist = train(model, lambda: model.forward_plan(plan), vals, steps=steps, lr=lr,
                 weight_decay=weight_decay, progress=progress, desc="adam (points)", **train_kwargs)
    return model, hist


# ---- rows of ``kronpe demo`` ----------------------------------------------------------------------
