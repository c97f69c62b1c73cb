"""Closed-form grid fits: kronpe against the papers' formulation and against its own products.

The signals, methods and checks are kronpe.bench.fits' (``kronpe bench --suite fits`` runs the
same ones interleaved, with the fit + predict rows against SciPy's cubic spline): the 512 x 512 RGB
astronaut from its 256 x 256 subsample (K = 256 Gaussians, sigma = 0.0025) and the 128^3 RGB video
from its 64^3 subsample (K = 64, sigma = 0.015); kronpe cold, the cached plan, the papers'
formulation in torch, the fit's matrix products alone, and kronpe's own choice (GCV). Each asserts
its fit: what its weights predict on the full grid against a float64 pseudo-inverse solution with
the papers' cutoff.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import run_timed
from kronpe.bench.fits import (
    SIGNALS,
    check_weights,
    papers_fit,
    pinv_factors,
    products_alone,
    signal_setup,
)

NAMES = list(SIGNALS)


def _rounds(name):
    return SIGNALS[name][2]


def _group(benchmark, name, method, s, peer=False):
    benchmark.group = f"grid fit: {name}"
    benchmark.extra_info.update(method=method, peer=peer, flops=s["flops"], dtype="float32")


@pytest.mark.parametrize("name", NAMES)
def test_kronpe_cold(benchmark, name):
    import kronpe

    s = signal_setup(name)
    case = s["case"]
    _group(benchmark, name, "kronpe fit_grid (cold)", s)
    model = run_timed(
        benchmark,
        lambda: kronpe.fit_grid(case.train, s["embs"], coords=case.train_coords, ridge=0.0, rcond=s["rcond"]),
        _rounds(name),
    )
    check_weights(s, model.weights)


@pytest.mark.parametrize("name", NAMES)
def test_kronpe_plan(benchmark, name):
    import kronpe

    s = signal_setup(name)
    case = s["case"]
    plan = kronpe.GridPlan(case.train_coords, s["embs"], ridge=0.0, rcond=s["rcond"])
    _group(benchmark, name, "kronpe GridPlan.fit (cached plan)", s)
    model = run_timed(benchmark, plan.fit, _rounds(name), case.train)
    check_weights(s, model.weights)


@pytest.mark.parametrize("name", NAMES)
def test_papers_torch(benchmark, name):
    pytest.importorskip("torch")
    s = signal_setup(name)
    case = s["case"]
    _group(benchmark, name, "papers' formulation (torch lstsq + products)", s, peer=True)
    W = run_timed(benchmark, papers_fit, _rounds(name), case.train, s["embs"], case.train_coords)
    check_weights(s, W)


@pytest.mark.parametrize("name", NAMES)
def test_products_alone(benchmark, name):
    s = signal_setup(name)
    pinvs = pinv_factors(s)
    _group(benchmark, name, "kronpe products alone", s)
    W = run_timed(benchmark, products_alone, _rounds(name), s["case"].train, pinvs)
    check_weights(s, W)  # the chain through the per-axis pseudo-inverses is the fit


@pytest.mark.parametrize("name", NAMES)
def test_kronpe_gcv(benchmark, name):
    import kronpe

    s = signal_setup(name)
    case = s["case"]
    _group(benchmark, name, "kronpe fit_grid(embedders=None), GCV (cold)", s)
    model = run_timed(benchmark, lambda: kronpe.fit_grid(case.train, None, coords=case.train_coords), 3)
    pred = np.asarray(model.predict_grid(case.coords)).reshape(case.full.shape)
    train_psnr, held = case.score(pred)
    benchmark.extra_info.update(heldout_psnr=held, train_psnr=train_psnr, psnr=held)
    assert held > 20.0, f"GCV fit of {name}: held-out PSNR {held:.2f} dB"
