"""One Adam training step of a complex-encoding linear model: kronpe.torch against the official
formulation and against the step's matrix products alone.

Signal: the astronaut photograph (skimage.data.astronaut, RGB, 512 x 512, values in [0, 1]).

- grid: the 256 x 256 regular subsample (the protocol of Table 1 of "Trading Positional Complexity
  vs. Deepness in Coordinate Networks"), K = 256 Gaussians per axis (sigma = 0.004, the papers'
  gradient-descent setting). The model is W x_1 Psi_1 x_2 Psi_2.
- grid, dense basis: the same with sigma = 0.2 (no entry of the bases pruned).
- points: 25% of the 512 x 512 pixels at random (its Table 2), K = 256 (sigma = 0.005, the
  official random-points script), blended from a virtual grid of 257 x 257 nodes.

Methods, in two groups per case, each comparing like with like (the whole steps; the products
alone) (same device: CPU; float32; one process):

- kronpe: ``ComplexEncoding`` through torch.ops.kronpe (grid: one multi_mode_product; points:
  multi_mode_product on the virtual grid, then blend), backward through the ops' adjoints, Adam.
- official formulation: the model written as the official code writes it (our own code, not a
  copy): weights of shape (C, K, K), the grid with torch matmuls ``Psi_1 @ W @ Psi_2^T`` over the
  channels, flattened to (N^2, C); the points by evaluating the whole virtual grid that way, then
  indexing it with the corner indices and summing with the blending weights
  (``(V[idx] * w[..., None]).sum(1)``), autograd for the backward.
- matrix products alone: the four GEMMs of a step (two forward, two for dW), with torch.matmul
  and with kronpe's chain (kronpe's plan run on torch's GEMMs; no autograd, no loss, no Adam,
  no blending).
- the op alone: ``torch.ops.kronpe.multi_mode_product`` forward + backward (gradients to T and
  every matrix) against the same chain as D ``torch.tensordot`` calls, D = 2, 3, K = 64, 256.

Both formulations use the same basis matrices (entries below eps^2 of the largest pruned,
as ComplexEncoding does: kronpe.torch.modules.prune_basis) and
the same blending matrix, so they compute the same model; ``test_equal_loss_after_200_steps``
checks that 200 Adam steps give the same loss.

Run: python -m pytest benches/bench_torch.py --benchmark-only --benchmark-group-by=group, or
``python benches/bench_torch.py [rounds] [--load] [--parts steps,mmp]`` for the interleaved
tables of benches/README_torch.md (the steps are the cases of ``kronpe bench --suite torch``, the
op alone is added; both timed by kronpe.bench's harness); ``--profile``: the steps' ops by self
time under torch.profiler instead.
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
    CASE_LR,
    CASES,
    LR,
    K,
    setup_case,
    make_models,
    products_alone,
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
    step = stepper(model, target, CASE_LR.get(case, LR))
    loss0 = float(step().detach())
    benchmark.pedantic(step, rounds=ROUNDS, iterations=1, warmup_rounds=2)
    loss = float(step().detach())
    assert np.isfinite(loss) and loss < loss0  # it trains
    benchmark.extra_info["loss_after"] = loss


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("backend", ["torch.matmul", "kronpe chain"])
def test_products_alone(benchmark, case, backend):
    benchmark.group = f"torch step products: {case}"
    benchmark.extra_info.update(method=f"products alone, {backend}", peer=backend == "torch.matmul")
    run = products_alone(case, backend)
    V, dW = benchmark.pedantic(run, rounds=ROUNDS, iterations=1, warmup_rounds=2)
    s = setup_case(case)
    assert V.shape == (s["bases"][0].shape[0], s["bases"][1].shape[0], 3) and dW.shape == (K, K, 3)


STEPS_CHECKED = 200


@pytest.mark.parametrize("case", CASES)
def test_equal_loss_after_200_steps(benchmark, case):
    """Both formulations, 200 Adam steps from W = 0: the same loss (float32 rounding apart)."""
    benchmark.group = f"torch: {STEPS_CHECKED} Adam steps, both formulations: {case}"
    steps = {name: stepper(m, t, CASE_LR.get(case, LR)) for name, (m, t) in make_models(case).items()}

    def both():
        return {name: [float(step().detach()) for _ in range(STEPS_CHECKED)] for name, step in steps.items()}

    losses = benchmark.pedantic(both, rounds=1, iterations=1)
    a, b = losses["kronpe"][-1], losses["official"][-1]
    benchmark.extra_info.update(loss_kronpe=a, loss_official=b, loss_first=losses["kronpe"][0])
    assert losses["kronpe"][-1] < 0.25 * losses["kronpe"][0]
    assert abs(a - b) <= 1e-3 * abs(b), f"loss after {STEPS_CHECKED} steps: kronpe {a}, official {b}"


# ---- the op alone: multi_mode_product forward + backward against torch.tensordot ------------------

MMP_CASES = [(2, 64), (2, 256), (3, 64), (3, 256)]
MMP_WARM_CALLS = 200  # untimed forward + backward calls of both methods before the first case


def mmp_fwd_bwd(D: int, K: int, method: str):
    """One forward and backward of the chain T x_1 A_1 ... x_D A_D, T of shape (K,)*D and A_i
    (K, K), float32, gradients to T and every A_i: ``torch.ops.kronpe.multi_mode_product`` or
    the chain as D ``torch.tensordot`` calls (each contracts axis 0 and appends the new one at
    the end, so D of them give the result in order), autograd for the backward."""
    g = torch.Generator().manual_seed(0)
    T = torch.randn((K,) * D, generator=g).requires_grad_()
    mats = [torch.randn(K, K, generator=g).div_(K**0.5).requires_grad_() for _ in range(D)]
    G = torch.randn((K,) * D, generator=g)
    modes = list(range(D))

    def run():
        for t in (T, *mats):
            t.grad = None
        if method == "kronpe op":
            out = torch.ops.kronpe.multi_mode_product(T, mats, modes)
        else:
            out = T
            for A in mats:
                out = torch.tensordot(out, A, dims=([0], [1]))
        out.backward(G)
        return out

    return run


@pytest.mark.parametrize("D, K", MMP_CASES, ids=[f"D={d} K={k}" for d, k in MMP_CASES])
@pytest.mark.parametrize("method", ["kronpe op", "torch.tensordot"])
def test_mmp_forward_backward(benchmark, D, K, method):
    benchmark.group = f"torch multi_mode_product fwd+bwd: D={D} K={K}"
    run = mmp_fwd_bwd(D, K, method)
    out = benchmark.pedantic(run, rounds=3 if K**D > 10**6 else ROUNDS, iterations=1, warmup_rounds=1)
    assert out.shape == (K,) * D and torch.isfinite(out).all()


# ---- interleaved timing (python benches/bench_torch.py) --------------------------------------------


def mmp_cases(rounds: int):
    """The op alone as kronpe.bench cases: ``kronpe op`` against ``torch.tensordot``, per (D, K)."""
    from kronpe.bench.harness import Case, Method

    out = []
    for D, K in MMP_CASES:
        def setup(D=D, K=K):
            fns = {m: mmp_fwd_bwd(D, K, m) for m in ("kronpe op", "torch.tensordot")}
            if (D, K) == MMP_CASES[0]:  # the process's first backwards fault in fresh pages (about
                for _ in range(MMP_WARM_CALLS):  # a hundred per call for the whole first case,
                    for fn in fns.values():  # whichever method runs one first): both, untimed
                        fn()
            return fns

        ms = [Method("kronpe op", lambda s: s["kronpe op"](), peer=False),
              Method("torch.tensordot", lambda s: s["torch.tensordot"]())]
        out.append(Case("torch", f"mmp fwd+bwd D={D} K={K}", setup, ms,
                        rounds=max(3, rounds // 8) if K**D > 10**6 else rounds))
    return out


RATIOS = [("kronpe step / official step", "kronpe Adam step", "official Adam step"),
          ("official step / kronpe step", "official Adam step", "kronpe Adam step"),
          ("kronpe chain / torch.matmul (products alone)", "products alone, kronpe chain",
           "products alone, torch.matmul"),
          ("kronpe op / tensordot chain", "kronpe op", "torch.tensordot")]


def interleaved(rounds: int = 40, parts=("steps", "mmp")) -> str:
    """Markdown tables of min and median times and the ratios of the steps (the cases of
    ``kronpe bench --suite torch``) and of the op alone, timed by kronpe.bench's harness (every
    method once per round, in rotating order, after the harness's settle and warm-up call)."""
    from kronpe.bench import torch_steps
    from kronpe.bench.harness import measure

    cases = ([(c, rounds) for c in torch_steps.cases()] if "steps" in parts else []) + \
        ([(c, None) for c in mmp_cases(rounds)] if "mmp" in parts else [])  # (case, its rounds)
    lines = ["| case | method | min (ms) | median (ms) |", "|---|---|---:|---:|"]
    ratios = []
    for case, case_rounds in cases:
        stat = {}
        for rec in measure(case, case_rounds):
            if "stats" not in rec:
                lines.append(f"| {case.group} | {rec['name']} | {rec.get('skipped', '')} | |")
                continue
            stat[rec["name"]] = (rec["stats"]["min"] * 1e3, rec["stats"]["median"] * 1e3)
            lines.append(f"| {case.group} | {rec['name']} | {stat[rec['name']][0]:.2f} | {stat[rec['name']][1]:.2f} |")
        for label, a, b in RATIOS:
            if a in stat and b in stat:
                ratios.append(f"| {case.group} | {label} | {stat[a][0] / stat[b][0]:.2f} | {stat[a][1] / stat[b][1]:.2f} |")
    return "\n".join(lines + ["", "| case | ratio | of min | of median |", "|---|---|---:|---:|"] + ratios)


def profile_steps(steps: int = 20, rows: int = 12) -> str:
    """Where each step's time goes: ``steps`` Adam steps of every case and formulation under
    torch.profiler (CPU), the ops with the most self time first, at torch's thread count."""
    from torch.profiler import ProfilerActivity, profile

    out = []
    for case in CASES:
        for name, (model, target) in make_models(case).items():
            step = stepper(model, target, CASE_LR.get(case, LR))
            for _ in range(3):
                step()
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(steps):
                    step()
            out += [f"## {case}: {name} Adam step, {steps} steps, {torch.get_num_threads()} threads", "",
                    prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows), ""]
    return "\n".join(out)


def _busy_core():
    """Another process busy on one core (``python -c "while 1: pass"``), for the loaded runs."""
    import subprocess

    return subprocess.Popen([sys.executable, "-c", "while 1: pass"])


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="interleaved timing of kronpe.torch against plain torch")
    ap.add_argument("rounds", nargs="?", type=int, default=40)
    ap.add_argument("--parts", default="steps,mmp", help="steps, mmp or both (comma-separated)")
    ap.add_argument("--load", action="store_true", help="run with another process busy on one core")
    ap.add_argument("--profile", action="store_true",
                    help="instead of timing: ROUNDS steps of each case under torch.profiler, the ops by self time")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))
    busy = _busy_core() if args.load else None
    try:
        print(f"torch threads: {torch.get_num_threads()}, load: {'one busy core' if busy else 'none'}")
        print(profile_steps(args.rounds) if args.profile else interleaved(args.rounds, tuple(args.parts.split(","))))
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()
