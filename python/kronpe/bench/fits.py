"""Closed-form grid fits: kronpe against the papers' formulation, its own products and splines.

Two signals, the papers' protocol (:mod:`.protocol`): the 512 x 512 RGB astronaut photograph
trained on its 256 x 256 regular subsample (K = 256 Gaussians per axis, sigma = 0.0025), and the
128^3 RGB video of kronpe.data.load_video trained on its 64^3 subsample (K = 64 per axis,
sigma = 0.015: the setting behind Table 3, see kronpe.bench.protocol.PAPER_SETTINGS).

Group ``grid fit: <signal>`` (the weights; work = the flops of the fit's chain): the cutoff drops
no product of singular values here, so kronpe's pseudo-inverse is separable, one chain
``S x_i Phi_i^+`` (kronpe.solvers.grid_plan).

- kronpe fit_grid (cold): embeddings, per-axis pseudo-inverses and the products, with every
  kronpe cache cleared (``kronpe.clear_caches``) and new embedders before each call.
- kronpe GridPlan.fit (cached plan): the plan built once beforehand.
- papers' formulation (torch lstsq + products): per-axis pseudo-inverse by
  ``torch.linalg.lstsq(Phi, I)`` then the products with torch, as the official code does it.
- kronpe products alone: the fit's chain of mode-n products (``S x_i Phi_i^+``, factors
  precomputed): what the fit cannot go below.

Each is checked by what its weights predict on the full grid against a float64 NumPy
pseudo-inverse solution with the same (papers') cutoff, kronpe.bench.protocol.paper_rcond.

Group ``fit + predict: <signal>``: kronpe's own choice (``fit_grid(embedders=None)``, GCV) then
``predict_grid`` on the full grid, against SciPy's cubic spline (``ndimage.spline_filter`` +
``map_coordinates``, kronpe.bench.protocol.cubic_spline); held-out PSNR in the row.
"""
from __future__ import annotations

from typing import List

import numpy as np

from . import protocol
from .chains import cheapest_chain_flops, relative_error
from .harness import Case, Method

SIGNALS = {
    # name: (loader, D, rounds, quick)
    "image 512x512 RGB from 256x256": ("image", 2, 10, True),
    "video 128^3 RGB from 64^3": ("video", 3, 5, False),
}

_CACHE: dict = {}


def _load(kind):
    from kronpe import data

    return data.load_sample("astronaut", size=512) if kind == "image" else data.load_video()


def signal_setup(name: str) -> dict:
    """Signal, training subsample, coordinates, the papers' embedders and a float64 reference."""
    if name in _CACHE:
        return _CACHE[name]
    kind, D, _, _ = SIGNALS[name]
    case = protocol.Case(name, _load(kind), D)
    settings = protocol.paper_settings(D, case.K)
    emb = protocol.paper_embedder("Gau", int(settings["K"]), settings["Gau"])
    embs = [emb] * D
    rcond = protocol.paper_rcond(case.train.shape[:D], emb.K)
    phis = [e(c) for e, c in zip(embs, case.train_coords)]  # float64 (N_i, K)
    W_ref = case.train.astype(np.float64)
    for p in phis:  # W = S x_k pinv(Phi_k): contract the leading axis, append the new one
        W_ref = np.tensordot(W_ref, np.linalg.pinv(p, rcond=rcond), axes=([0], [1]))
    W_ref = np.moveaxis(W_ref, list(range(W_ref.ndim - D, W_ref.ndim)), list(range(D)))
    svds = [np.linalg.svd(p, full_matrices=False) for p in phis]
    evals = [e(c) for e, c in zip(embs, case.coords)]  # (N_full_i, K) to predict the full grid
    s = dict(case=case, D=D, embs=embs, rcond=rcond, evals=evals, svds=svds)
    s["pred_ref"] = predict(W_ref, evals)
    s["flops"] = fit_flops(s)
    _CACHE[name] = s
    return s


def predict(W, evals):
    """W x_k Phi_k on the full grid (float64; channels ride along)."""
    P = np.asarray(W, dtype=np.float64)
    for phi in evals:
        P = np.tensordot(P, phi, axes=([0], [1]))
    D = len(evals)
    return np.moveaxis(P, list(range(P.ndim - D, P.ndim)), list(range(D)))


def check_weights(s: dict, W) -> None:
    """The fit's predictions on the full grid against the float64 reference's. Weights of an
    ill-conditioned basis differ with the cutoff and rounding; what they predict must not."""
    err = relative_error(predict(W, s["evals"]), s["pred_ref"])
    assert err <= 5e-3, f"relative error of the predictions {err:.3g} > 5e-3"


def fit_flops(s) -> int:
    """Flops of the fit's chain: S (N.., C) -> W (K.., C)."""
    case = s["case"]
    shape = case.train.shape
    Ks = [e.K for e in s["embs"]]
    chans = int(np.prod(shape[s["D"]:]))
    return cheapest_chain_flops(shape[: s["D"]], Ks) * chans


def papers_fit(train, embs, coords):
    """The official closed form: ix_k = lstsq(Phi_k, I) per axis, W = S x_k ix_k, in torch."""
    import torch

    S = torch.from_numpy(train)
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


def pinv_factors(s: dict) -> List[np.ndarray]:
    """The per-axis pseudo-inverses Phi_i^+ = V_i diag(1/s_i) U_i^T of the fit's chain, float32
    (every product of singular values above the cutoff: checked)."""
    ratio = np.prod([si.min() / si.max() for _, si, _ in s["svds"]])
    assert ratio > s["rcond"], "the cutoff drops products: the fit is not one chain"
    return [np.ascontiguousarray((vt.T / si) @ u.T, dtype=np.float32) for u, si, vt in s["svds"]]


def products_alone(S, pinvs):
    """The fit's chain S x_i Phi_i^+ (``pinv_factors``): what the fit cannot go below."""
    import kronpe

    return kronpe.multi_mode_product(S, pinvs)


def _fit_methods() -> List[Method]:
    import kronpe

    def cold(s):
        """Nothing kept from before: every kronpe cache cleared and new embedders (as a new process
        would have them), then the whole fit."""
        import copy

        kronpe.clear_caches()
        c = s["case"]
        embs = [copy.deepcopy(e) for e in s["embs"]]
        return kronpe.fit_grid(c.train, embs, coords=c.train_coords, ridge=0.0, rcond=s["rcond"]).weights

    def plan(s):
        return s["plan"].fit(s["case"].train).weights

    def papers(s):
        c = s["case"]
        return papers_fit(c.train, s["embs"], c.train_coords)

    def products(s):
        return products_alone(s["case"].train, s["pinvs"])

    return [
        Method("kronpe fit_grid (cold)", cold, peer=False),
        Method("kronpe GridPlan.fit (cached plan)", plan, peer=False),
        Method("kronpe products alone", products, peer=False),
        Method("papers' formulation (torch lstsq + products)", papers, needs=("torch",)),
    ]


def _check_fit(s, method, W):
    check_weights(s, W)


def _fit_predict_methods() -> List[Method]:
    import kronpe

    def gcv(s):
        c = s["case"]
        model = kronpe.fit_grid(c.train, None, coords=c.train_coords)
        return np.asarray(model.predict_grid(c.coords)).reshape(c.full.shape)

    return [Method("kronpe fit_grid(embedders=None) + predict_grid", gcv, peer=False),
            Method("cubic spline (scipy.ndimage)", lambda s: protocol.cubic_spline(s["case"])[0])]


def _check_psnr(s, method, pred):
    _, held = s["case"].score(pred)
    assert held > 20.0, f"held-out PSNR {held:.2f} dB"
    return {"psnr": held}


def cases() -> List[Case]:
    out = []
    for name, (kind, D, rounds, quick) in SIGNALS.items():
        def setup(name=name):
            import kronpe

            s = dict(signal_setup(name))
            c = s["case"]
            s["plan"] = kronpe.GridPlan(c.train_coords, s["embs"], ridge=0.0, rcond=s["rcond"])
            s["pinvs"] = pinv_factors(s)
            return s

        size = float({"image": 256 * 256 * 3, "video": 64**3 * 3}[kind])  # training samples
        out.append(Case("fits", f"grid fit: {name}", setup, _fit_methods(), _check_fit, rounds=rounds,
                        quick=quick, size=size, params=dict(signal=name, D=D)))

        def setup_fp(name=name):
            s = signal_setup(name)
            return dict(case=s["case"])

        out.append(Case("fits", f"fit + predict: {name}", setup_fp, _fit_predict_methods(), _check_psnr,
                        rounds=max(3, rounds // 3), quick=False, size=size, params=dict(signal=name, D=D)))
    return out
