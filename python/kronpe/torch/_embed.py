"""kronpe's 1-D embedders written in torch, so that embeddings are differentiable wrt x.

Each family registers a builder ``embedder -> (buffers, forward)`` in ``TORCH_FAMILIES``;
``forward(x, buffers)`` maps a 1-D tensor of coordinates to (N, K) with the very formula of the
NumPy embedder (kronpe.embedders), computed in the dtype of x. Families without a builder fall
back on the NumPy embedder (exact values, no gradient wrt x).
"""
from __future__ import annotations

from typing import Callable, Dict, Tuple

import numpy as np
import torch

Buffers = Dict[str, np.ndarray]
Forward = Callable[[torch.Tensor, Dict[str, torch.Tensor]], torch.Tensor]
Builder = Callable[[object], Tuple[Buffers, Forward]]

#: class name of a kronpe embedder -> builder of its torch version
TORCH_FAMILIES: Dict[str, Builder] = {}


def family(*names: str):
    def deco(builder: Builder) -> Builder:
        for n in names:
            TORCH_FAMILIES[n] = builder
        return builder

    return deco


def _shifted(psi: Callable[[torch.Tensor], torch.Tensor]):
    """Forward of a shifted basis: psi(x - t_k) over the embedder's centres."""

    def forward(x, buf):
        return psi(x[:, None] - buf["centres"].to(x.dtype)[None, :])

    return forward


@family("Gaussian")
def _gaussian(e):
    two_s2 = 2.0 * float(e.sigma) ** 2
    return {"centres": e.centres}, _shifted(lambda u: torch.exp(-(u * u) / two_s2))


@family("Triangle")
def _triangle(e):
    d = float(e.width)
    return {"centres": e.centres}, _shifted(lambda u: torch.clamp(1.0 - u.abs() / d, min=0.0))


def has_torch_version(embedder) -> bool:
    return type(embedder).__name__ in TORCH_FAMILIES


def build(embedder) -> Tuple[Buffers, Forward]:
    """(buffers, forward) of ``embedder`` in torch; raises KeyError for unknown families."""
    return TORCH_FAMILIES[type(embedder).__name__](embedder)

