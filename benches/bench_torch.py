"""One Adam training step of a complex-encoding linear model: kronpe.torch against the official
formulation and against the step's matrix products alone.

Signal: the astronaut photograph (skimage.data.astronaut, RGB, 512 x 512, values in [0, 1]).

- grid: the 256 x 256 regular subsample (seed 000 Table 1 protocol), K = 256 Gaussians per axis
  (sigma = 0.004, the papers' gradient-descent setting). The model is W x_1 Psi_1 x_2 Psi_2.
- points: 25% of the 512 x 512 pixels at random (seed 000 Table 2), K = 256 (sigma = 0.005, the
  official random-points script), blended from a virtual grid of 257 x 257 nodes.

Methods, one group per case (same device: CPU; float32; one process):

- kronpe: ``ComplexEncoding`` through torch.ops.kronpe (grid: one multi_mode_product; points:
  multi_mode_product on the virtual grid, then blend), backward through the ops' adjoints, Adam.
- official formulation: the model written as the official code writes it (our own code, not a
  copy): weights of shape (C, K, K), the grid with torch matmuls ``Psi_1 @ W @ Psi_2^T`` over the
  channels, flattened to (N^2, C); the points by evaluating the whole virtual grid that way, then
  indexing it with the corner indices and summing with the blending weights
  (``(V[idx] * w[..., None]).sum(1)``), autograd for the backward.
- matrix products alone: the four GEMMs of a step (two forward, two for dW), with torch.matmul
  and with kronpe's compiled chain (no autograd, no loss, no Adam, no blending).

Both formulations use the same basis matrices (entries below eps^2 of the largest pruned,
as ComplexEncoding does: kronpe.torch.modules.prune_basis) and
the same blending matrix, so they compute the same model; ``test_equal_loss_after_200_steps``
checks that 200 Adam steps give the same loss.

Run: python -m pytest benches/bench_torch.py --benchmark-only --benchmark-group-by=group
(interleaved, with the other suites: kronpe bench --suite torch)
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

_PY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python")
if _PY not in sys.path:  # benches run from the source tree when kronpe is not installed
    sys.path.insert(0, _PY)

torch = pytest.importorskip("torch")
kt = pytest.importorskip("kronpe.torch")

# the models, setups and the products alone are kronpe.bench.torch_steps' (``kronpe bench --suite torch``)
from kronpe.bench.torch_steps import (  # noqa: E402
    CASES,
    K,
    make_models,
    products_alone,
    setup_grid,
    setup_points,
    stepper,
)

ROUNDS = 40


# ---- benchmarks ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("method", ["kronpe", "official"])
def test_step(benchmark, case, method):
    benchmark.group = f"torch Adam step: {case}"
    benchmark.extra_info.update(method=f"{method} Adam step", peer=method != "kronpe")
    model, target = make_models(case)[method]
    step = stepper(model, target)
    loss0 = float(step().detach())
    benchmark.pedantic(step, rounds=ROUNDS, iterations=1, warmup_rounds=2)
    loss = float(step().detach())
    assert np.isfinite(loss) and loss < loss0  # it trains
    benchmark.extra_info["loss_after"] = loss


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("backend", ["torch.matmul", "kronpe chain"])
def test_products_alone(benchmark, case, backend):
    benchmark.group = f"torch Adam step: {case}"
    benchmark.extra_info.update(method=f"products alone, {backend}", peer=backend == "torch.matmul")
    run = products_alone(case, backend)
    V, dW = benchmark.pedantic(run, rounds=ROUNDS, iterations=1, warmup_rounds=2)
    s = setup_grid() if case == "grid" else setup_points()
    assert V.shape == (s["bases"][0].shape[0], s["bases"][1].shape[0], 3) and dW.shape == (K, K, 3)


STEPS_CHECKED = 200


@pytest.mark.parametrize("case", CASES)
def test_equal_loss_after_200_steps(benchmark, case):
    """Both formulations, 200 Adam steps from W = 0: the same loss (float32 rounding apart)."""
    benchmark.group = f"torch: {STEPS_CHECKED} Adam steps, both formulations: {case}"
    steps = {name: stepper(m, t) for name, (m, t) in make_models(case).items()}

    def both():
        return {name: [float(step().detach()) for _ in range(STEPS_CHECKED)] for name, step in steps.items()}

    losses = benchmark.pedantic(both, rounds=1, iterations=1)
    a, b = losses["kronpe"][-1], losses["official"][-1]
    benchmark.extra_info.update(loss_kronpe=a, loss_official=b, loss_first=losses["kronpe"][0])
    assert losses["kronpe"][-1] < 0.2 * losses["kronpe"][0]
    assert abs(a - b) <= 1e-3 * abs(b), f"loss after {STEPS_CHECKED} steps: kronpe {a}, official {b}"
