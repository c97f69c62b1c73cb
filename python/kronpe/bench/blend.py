"""Blending-matrix products (``B @ v``, gather; ``B.T @ r``, scatter) against the copy bandwidth.

Random points (float64) in a grid, Gaussian weights with sigma one grid spacing, float32 values.
kronpe's ``BlendingMatrix.matvec`` / ``rmatvec`` in its three forms: the default (the per-axis
weights kept after the plan, ``cache_weights``), weights computed in every product
(``cache_weights=False``) and stored (indices, weights) (``.store()``), against SciPy's CSR
product and NumPy (fancy indexing and ``np.bincount``). Work: the bytes a product must touch
(:func:`blend_bytes`), so every row reads as a fraction of the machine's copy bandwidth.
"""
from __future__ import annotations

from typing import List

import numpy as np

from .harness import Case, Method

#: (id, grid, fraction of the grid's node count given as random points, rounds, quick)
CASES = [("2d-512-25pct", (512, 512), 0.25, 10, True), ("2d-512-100pct", (512, 512), 1.0, 7, False),
         ("3d-128-12pct", (128, 128, 128), 0.125, 5, False)]
CHANNELS = 3


def matrices(grid, frac, seed: int = 11):
    """(default, weights in every product, stored) BlendingMatrix of random points covering
    ``frac`` of the nodes."""
    import kronpe

    P = int(round(frac * np.prod(grid)))
    pts = np.random.default_rng(seed).random((P, len(grid)))
    emb = [kronpe.Gaussian(m, 1.0 / m) for m in grid]
    return (kronpe.BlendingMatrix(pts, grid, emb), kronpe.BlendingMatrix(pts, grid, emb, cache_weights=False),
            kronpe.BlendingMatrix(pts, grid, emb).store())


def blend_bytes(B, channels: int, itemsize: int, form: str, op: str = "blend") -> int:
    """Bytes a blend (``op="blend"``) or its transpose (``"transpose"``) must touch, counted as
    the copy bandwidth counts its bytes (every read and every write): what describes the rows
    (``form``: "points", the float64 points of weights computed on the fly; "factors", the kept
    per-axis weights, an int64 cell and D float64 pairs per point; "stored", the int64 indices and
    float64 weights); the 2^D grid values of every point, read by a blend, read and written back
    by a transpose (a scatter-add); the P values at the points (written by ``B @ v``, read by
    ``B.T @ r``)."""
    P, D = B.shape[0], len(B.grid_shape)
    src = {"points": B.points.nbytes, "factors": P * (8 + 16 * D),
           "stored": P * B.nnz_per_row * 16}[form]
    grid_passes = {"blend": 1, "transpose": 2}[op]
    return src + grid_passes * P * B.nnz_per_row * channels * itemsize + P * channels * itemsize


def fancy_blend(idx, w, v):
    """B @ v with NumPy: gather the corners by fancy indexing, weight and sum."""
    return np.einsum("pk,pkc->pc", w, v[idx])


def bincount_transpose(idx, w, r, grid_size):
    """B.T @ r with NumPy: one ``np.bincount`` per channel."""
    flat = idx.ravel()
    return np.stack([np.bincount(flat, weights=(w * r[:, ch, None]).ravel(), minlength=grid_size)
                     for ch in range(r.shape[1])], axis=1)


def _setup(grid, frac, op):
    kept, fly, stored = matrices(grid, frac)
    P, G = fly.shape
    rng = np.random.default_rng(3)
    x = rng.standard_normal((G if op == "blend" else P, CHANNELS)).astype(np.float32)
    csr64 = stored.to_scipy()
    csr = csr64.astype(np.float32)
    s = dict(kept=kept, fly=fly, stored=stored, x=x, idx=stored.indices, w32=stored.weights.astype(np.float32),
             csr=csr if op == "blend" else csr.T.tocsr(), G=G,
             want=(csr64 if op == "blend" else csr64.T) @ x.astype(np.float64))
    for B in (kept, fly, stored):  # the plans (and kept weights) are built once per matrix, as in a solver
        B.matvec(x) if op == "blend" else B.rmatvec(x)
    peer_bytes = blend_bytes(stored, CHANNELS, 4, "stored", op)
    s["work"] = {"kronpe default (kept weights)": {"bytes": blend_bytes(kept, CHANNELS, 4, "factors", op)},
                 "kronpe on the fly": {"bytes": blend_bytes(fly, CHANNELS, 4, "points", op)},
                 "kronpe stored": {"bytes": peer_bytes}}
    s["bytes"] = peer_bytes
    return s


def _check(s, method, got):
    err = float(np.max(np.abs(np.asarray(got, np.float64) - s["want"])) / np.max(np.abs(s["want"])))
    assert err <= 1e-4, f"relative error {err:.3g} > 1e-4"


def cases() -> List[Case]:
    out = []
    for name, grid, frac, rounds, quick in CASES:
        for op in ("blend", "transpose"):
            if op == "blend":
                ms = [Method("kronpe default (kept weights)", lambda s: s["kept"].matvec(s["x"]), peer=False),
                      Method("kronpe on the fly", lambda s: s["fly"].matvec(s["x"]), peer=False),
                      Method("kronpe stored", lambda s: s["stored"].matvec(s["x"]), peer=False),
                      Method("numpy fancy indexing", lambda s: fancy_blend(s["idx"], s["w32"], s["x"])),
                      Method("scipy CSR", lambda s: s["csr"] @ s["x"])]
            else:
                ms = [Method("kronpe default (kept weights)", lambda s: s["kept"].rmatvec(s["x"]), peer=False),
                      Method("kronpe on the fly", lambda s: s["fly"].rmatvec(s["x"]), peer=False),
                      Method("kronpe stored", lambda s: s["stored"].rmatvec(s["x"]), peer=False),
                      Method("numpy bincount", lambda s: bincount_transpose(s["idx"], s["w32"], s["x"], s["G"])),
                      Method("scipy CSR (B^T r)", lambda s: s["csr"] @ s["x"])]
            out.append(Case("blend", f"{op}: {name}, C={CHANNELS}, float32",
                            (lambda grid=grid, frac=frac, op=op: _setup(grid, frac, op)), ms, _check,
                            rounds=rounds, quick=quick,
                            size=float(round(frac * np.prod(grid))),
                            params=dict(case=name, op=op, channels=CHANNELS, dtype="float32")))
    return out
