"""kronpe's 1-D embedders written in torch, so that embeddings are differentiable wrt x.

Every kronpe embedder describes itself to the compiled kernels by ``_kernel_args()``: a shifted
basis ("basis": a kind of psi, centres (k + first_index) / K_base, one parameter) or Fourier
features ("fourier": angular frequencies, a layout, an amplitude, the raw input or not). This
module evaluates the same formulas (kronpe.reference.embed_basis / embed_fourier) in torch, in
float64 rounded once to the dtype of x, as the kernels do.

``build(embedder)`` returns (buffers, forward); ``forward(x, buffers)`` maps (N,) to (N, K).
Piecewise-constant kinds (rectangle, square, impulse) have zero derivative wrt x. The "random"
kind (a hash of the bits of x) has none and is not built here: callers fall back on the NumPy
embedder for it.
"""
from __future__ import annotations

from typing import Callable, Dict, Tuple

import numpy as np
import torch

from .. import _formulas
from .._adapters import validate as _validate

Buffers = Dict[str, np.ndarray]
Forward = Callable[[torch.Tensor, Dict[str, torch.Tensor]], torch.Tensor]

_F64 = torch.float64


def _bspline(u: torch.Tensor, degree: int) -> torch.Tensor:
    """Centred cardinal B-spline of degree p as a sum of truncated powers (float64; p <= 7)."""
    return _formulas.bspline_truncated_power(u, degree, torch.where)


def _basis_forward(kind: str, K: int, first_index: int, K_base: float, param: float, degree: int) -> Forward:
    def forward(x: torch.Tensor, buf: Dict[str, torch.Tensor]) -> torch.Tensor:
        xd = x.to(_F64)
        t = buf["centres"].to(device=x.device, dtype=_F64)
        u = xd[:, None] - t[None, :]
        if kind == "gaussian":
            out = torch.exp(-(u * u) / (2.0 * param * param))
        elif kind == "triangle":
            out = torch.clamp(1.0 - u.abs() / param, min=0.0)
        elif kind == "rectangle":
            out = (u.abs() < 0.5 * param).to(_F64) + 0.0 * u  # 0 * u: a zero derivative wrt x
        elif kind == "sine":
            out = torch.sin(param * (-u))
        elif kind == "square":
            out = torch.sign(torch.sin(param * (-u)))
        elif kind == "bspline":
            out = _bspline(u / param, degree)
        elif kind == "impulse":
            col = torch.clamp(torch.floor(xd * K_base + 0.5) - first_index, 0, K - 1).to(torch.int64)
            out = torch.nn.functional.one_hot(col, K).to(_F64) + 0.0 * u
        else:  # pragma: no cover - build() refuses other kinds
            raise ValueError(f"unknown basis kind {kind!r}")
        return out.to(x.dtype)

    return forward


def _fourier_forward(layout: str, include_input: bool, amplitude: float) -> Forward:
    def forward(x: torch.Tensor, buf: Dict[str, torch.Tensor]) -> torch.Tensor:
        xd = x.to(_F64)
        a = xd[:, None] * buf["omega"].to(device=x.device, dtype=_F64)[None, :]
        c, s = amplitude * torch.cos(a), amplitude * torch.sin(a)
        if layout == "blocks":
            feats = torch.cat([c, s], dim=1)
        else:  # interleaved: sin, cos, sin, cos, ...
            feats = torch.stack([s, c], dim=2).reshape(xd.shape[0], -1)
        if include_input:
            feats = torch.cat([xd[:, None], feats], dim=1)
        return feats.to(x.dtype)

    return forward


def has_torch_version(embedder) -> bool:
    """Whether ``build`` knows the embedder (its formula is written in torch here)."""
    args = getattr(embedder, "_kernel_args", None)
    if args is None:
        return False
    kind, kw = args()
    return kind == "fourier" or (kind == "basis" and kw["kind"] != "random")


def build(embedder) -> Tuple[Buffers, Forward]:
    """(buffers, forward) of ``embedder`` in torch (see the module docstring)."""
    if not has_torch_version(embedder):
        raise KeyError(f"{type(embedder).__name__} has no torch version")
    kind, kw = embedder._kernel_args()
    if kind == "fourier":
        omega = np.asarray(kw["omega"], dtype=np.float64)
        return {"omega": omega}, _fourier_forward(kw["layout"], bool(kw["include_input"]), float(kw["amplitude"]))
    K = int(embedder.K)
    _validate.check_array_budget(f"embedder (K = {K})", (K, 2), 8, "use fewer features")  # its centres
    first, K_base = int(kw["first_index"]), float(kw["K_base"])
    centres = np.arange(first, first + K, dtype=np.float64) / K_base
    forward = _basis_forward(kw["kind"], K, first, K_base, float(kw["param"]), int(kw["degree"]))
    return {"centres": centres}, forward
