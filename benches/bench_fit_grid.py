"""Closed-form grid fits: kronpe against the papers' formulation and against its own products.

Two signals, the papers' protocol (seed 000 sec. 6): the 512 x 512 RGB astronaut photograph
trained on its 256 x 256 regular subsample (K = 256 Gaussians per axis, sigma = 0.0025), and the
128^3 RGB video of kronpe.data.load_video trained on its 64^3 subsample (K = 64 per axis,
sigma = 0.015: the setting behind Table 3, see kronpe.app.protocol.PAPER_SETTINGS). Methods, one group
per signal:

- kronpe cold: ``kronpe.fit_grid`` (embeddings, per-axis SVDs and the products).
- kronpe cached plan: ``GridPlan(...).fit`` with the plan built once beforehand.
- the papers' formulation in torch: per-axis pseudo-inverse by ``torch.linalg.lstsq(Phi, I)``
  then the products with torch (as the official closed-form code does it).
- the fit's matrix products alone: the two mode-n chains of the plan's fit
  (S x_i U_i^T, then x_i V_i) with the factors precomputed, through kronpe.multi_mode_product.
- kronpe's own choice (embedders=None: width and ridge by GCV), cold, for reference.

Each benchmark asserts its fit: what its weights predict on the full grid against a float64 NumPy
pseudo-inverse solution with the same (papers') cutoff, kronpe.app.protocol.paper_rcond.
"""
from __future__ import annotations

import numpy as np
import pytest

from conftest import assert_close, cheapest_chain_flops, run_timed

SIGNALS = {
    # name: (loader, D, rounds)
    "image 512x512 RGB from 256x256": ("image", 2, 10),
    "video 128^3 RGB from 64^3": ("video", 3, 5),
}


def _load(kind):
    from kronpe import data

    return data.load_sample("astronaut", size=512) if kind == "image" else data.load_video()


_CACHE: dict = {}


def _setup(name):
    """Signal, training subsample, coordinates, the papers' embedders and a float64 reference."""
    if name in _CACHE:
        return _CACHE[name]
    from kronpe.app import protocol as app

    kind, D, _ = SIGNALS[name]
    case = app.Case(name, _load(kind), D)
    settings = app.paper_settings(D, case.K)
    emb = app.paper_embedder("Gau", int(settings["K"]), settings["Gau"])
    embs = [emb] * D
    rcond = app.paper_rcond(case.train.shape[:D], emb.K)
    phis = [e(c) for e, c in zip(embs, case.train_coords)]  # float64 (N_i, K)
    W_ref = case.train.astype(np.float64)
    for p in phis:  # W = S x_k pinv(Phi_k): contract the leading axis, append the new one
        W_ref = np.tensordot(W_ref, np.linalg.pinv(p, rcond=rcond), axes=([0], [1]))
    W_ref = np.moveaxis(W_ref, list(range(W_ref.ndim - D, W_ref.ndim)), list(range(D)))
    svds = [np.linalg.svd(p, full_matrices=False) for p in phis]
    evals = [e(c) for e, c in zip(embs, case.coords)]  # (N_full_i, K) to predict the full grid
    _CACHE[name] = dict(case=case, D=D, embs=embs, rcond=rcond, evals=evals,
                        pred_ref=_predict(W_ref, evals), svds=svds)
    return _CACHE[name]


def _predict(W, evals):
    """W x_k Phi_k on the full grid (float64; channels ride along)."""
    P = np.asarray(W, dtype=np.float64)
    for phi in evals:
        P = np.tensordot(P, phi, axes=([0], [1]))
    D = len(evals)
    return np.moveaxis(P, list(range(P.ndim - D, P.ndim)), list(range(D)))


def _check(W, s, what):
    """The fit's predictions on the full grid against the float64 reference's. Weights of an
    ill-conditioned basis differ with the cutoff and rounding; what they predict must not."""
    assert_close(_predict(W, s["evals"]), s["pred_ref"], 5e-3, what)


def _fit_flops(s) -> int:
    """Flops of the fit's two chains: S (N.., C) -> Z (K.., C) -> W (K.., C)."""
    case = s["case"]
    shape = case.train.shape
    Ks = [e.K for e in s["embs"]]
    chans = int(np.prod(shape[s["D"]:]))
    f1 = cheapest_chain_flops(shape[: s["D"]], Ks) * chans
    f2 = cheapest_chain_flops(Ks, Ks) * chans
    return f1 + f2


def _group(benchmark, name, method, s):
    benchmark.group = f"grid fit: {name}"
    benchmark.extra_info.update(method=method, flops=_fit_flops(s), dtype="float32")


NAMES = list(SIGNALS)


@pytest.mark.parametrize("name", NAMES)
def test_kronpe_cold(benchmark, name):
    import kronpe

    s = _setup(name)
    case = s["case"]
    _group(benchmark, name, "kronpe fit_grid (cold)", s)
    model = run_timed(
        benchmark,
        lambda: kronpe.fit_grid(case.train, s["embs"], coords=case.train_coords, ridge=0.0, rcond=s["rcond"]),
        SIGNALS[name][2],
    )
    _check(model.weights, s, f"kronpe cold, {name}")


@pytest.mark.parametrize("name", NAMES)
def test_kronpe_plan(benchmark, name):
    import kronpe

    s = _setup(name)
    case = s["case"]
    plan = kronpe.GridPlan(case.train_coords, s["embs"], ridge=0.0, rcond=s["rcond"])
    _group(benchmark, name, "kronpe GridPlan.fit (cached plan)", s)
    model = run_timed(benchmark, plan.fit, SIGNALS[name][2], case.train)
    _check(model.weights, s, f"kronpe plan, {name}")


def papers_fit(train, embs, coords):
    """The official closed form: ix_k = lstsq(Phi_k, I) per axis, W = S x_k ix_k, in torch."""
    import torch

    S = torch.from_numpy(train)
    D = len(embs)
    ixs = []
    for k, (e, c) in enumerate(zip(embs, coords)):
        same = [j for j in range(k) if embs[j] == e and np.array_equal(coords[j], c)]
        if same:  # the official code embeds once when every axis has the same coordinates
            ixs.append(ixs[same[0]])
            continue
        phi = torch.from_numpy(e(c.astype(np.float32)))  # (N, K) float32
        eye = torch.eye(phi.shape[0], dtype=phi.dtype)
        ixs.append(torch.linalg.lstsq(phi, eye).solution)  # (K, N)
    W = S
    for k, ix in enumerate(ixs):  # mode-k product with torch matmuls (channels ride along)
        W = torch.movedim(torch.tensordot(ix, W, dims=([1], [k])), 0, k)
    return W.contiguous().numpy()


@pytest.mark.parametrize("name", NAMES)
def test_papers_torch(benchmark, name):
    s = _setup(name)
    case = s["case"]
    _group(benchmark, name, "papers' formulation (torch lstsq + products)", s)
    W = run_timed(benchmark, papers_fit, SIGNALS[name][2], case.train, s["embs"], case.train_coords)
    _check(W, s, f"papers' formulation, {name}")


@pytest.mark.parametrize("name", NAMES)
def test_products_alone(benchmark, name):
    import kronpe

    s = _setup(name)
    case = s["case"]
    D = s["D"]
    Ut = [np.ascontiguousarray(u.T, dtype=np.float32) for u, _, _ in s["svds"]]  # (r, N)
    V = [np.ascontiguousarray(vt.T, dtype=np.float32) for _, _, vt in s["svds"]]  # (K, r)
    sv = np.ones(())
    for _, si, _ in s["svds"]:
        sv = np.multiply.outer(sv, si)
    inv_s = np.where(sv > s["rcond"] * sv.max(), 1.0 / sv, 0.0)  # the same cutoff as the fits
    inv_s = inv_s.astype(np.float32).reshape(inv_s.shape + (1,) * (case.train.ndim - D))

    def products(S):
        Z = kronpe.multi_mode_product(S, Ut)
        return kronpe.multi_mode_product(Z, V)

    _group(benchmark, name, "the fit's matrix products alone (kronpe.multi_mode_product)", s)
    run_timed(benchmark, products, SIGNALS[name][2], case.train)
    # the same chains with the scaling in between give the pseudo-inverse solution
    W = kronpe.multi_mode_product(kronpe.multi_mode_product(case.train, Ut) * inv_s, V)
    _check(W, s, f"products alone, {name}")


@pytest.mark.parametrize("name", NAMES)
def test_kronpe_gcv(benchmark, name):
    import kronpe

    s = _setup(name)
    case = s["case"]
    _group(benchmark, name, "kronpe fit_grid(embedders=None), GCV (cold)", s)
    model = run_timed(benchmark, lambda: kronpe.fit_grid(case.train, None, coords=case.train_coords), 3)
    pred = np.asarray(model.predict_grid(case.coords)).reshape(case.full.shape)
    train_psnr, held = case.score(pred)
    benchmark.extra_info.update(heldout_psnr=held, train_psnr=train_psnr)
    assert held > 20.0, f"GCV fit of {name}: held-out PSNR {held:.2f} dB"
