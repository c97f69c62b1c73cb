"""kronpe for PyTorch: custom ops with autograd and ``nn.Module`` encoders.

Importing this subpackage registers ``torch.ops.kronpe.multi_mode_product``, ``blend`` and
``blend_transpose`` (CPU kernels from kronpe's compiled core; they work under ``torch.compile``).
``import kronpe`` itself never imports torch.

Modules: :class:`ComplexEncoding` (the Kronecker encoding with a trainable linear head, on points or
grids), :class:`SimpleEncoding`, :class:`LearnableFourierFeatures` (Algorithm 1 of "Learnable
Fourier Features for Multi-Dimensional Spatial Positional Encoding", Li et al.),
:class:`SinusoidalEmbedding` (the sinusoidal-embeddings tutorial of the neuraloperator library) and
:class:`EmbedderModule` (any kronpe embedder, differentiable in torch). A differentiable closed-form
fit layer: :func:`fit_grid` and :class:`GridFit` (:mod:`kronpe.torch.fit`). Training:
:mod:`kronpe.torch.train`.
"""
from __future__ import annotations

try:
    import torch  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without torch
    raise ImportError("kronpe.torch needs PyTorch (pip install torch)") from exc

from .fit import GridFit, fit_grid
from ._ops import KERNELS, blend, blend_transpose, multi_mode_product, register_kernels
from .modules import (
    BlendPlan,
    ComplexEncoding,
    EmbedderModule,
    LearnableFourierFeatures,
    SimpleEncoding,
    SinusoidalEmbedding,
)

__all__ = [
    "BlendPlan",
    "ComplexEncoding",
    "EmbedderModule",
    "GridFit",
    "KERNELS",
    "LearnableFourierFeatures",
    "SimpleEncoding",
    "SinusoidalEmbedding",
    "blend",
    "blend_transpose",
    "fit_grid",
    "multi_mode_product",
    "register_kernels",
]
