"""Blending-matrix products (``B @ v``, gather; ``B.T @ r``, scatter) against the copy bandwidth.

Random points (float64) in a grid, Gaussian weights with sigma one grid spacing, float32 values.
kronpe's ``BlendingMatrix.matvec`` / ``rmatvec`` with weights computed on the fly and stored
(indices, weights), against SciPy's CSR product and NumPy (fancy indexing and ``np.bincount``).
Work: the bytes a product must touch (:func:`blend_bytes`), so every row reads as a fraction of
the machine's copy bandwidth.
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
    """(on the fly, stored) BlendingMatrix of random points covering ``frac`` of the nodes."""
    import kronpe

    P = int(round(frac * np.prod(grid)))
    pts = np.random.default_rng(seed).random((P, len(grid)))
    emb = [kronpe.Gaussian(m, 1.0 / m) for m in grid]
    return kronpe.BlendingMatrix(pts, grid, emb), kronpe.BlendingMatrix(pts, grid, emb).store()


def blend_bytes(B, channels: int, itemsize: int, stored: bool) -> int:
    """Bytes a blend (or its transpose) must touch: the points, or the stored int64 indices and
    float64 weights; the 2^D grid values of every point; the P values at the points (the result of
    ``B @ v``, the input of ``B.T @ r``)."""
    P = B.shape[0]
    src = (B.indices.nbytes + B.weights.nbytes) if stored else B.points.nbytes
    return src + P * B.nnz_per_row * channels * itemsize + P * channels * itemsize


def fancy_blend(idx, w, v):
    """B @ v with NumPy: gather the corners by fancy indexing, weight and sum."""
    return np.einsum("pk,pkc->pc", w, v[idx])


def bincount_transpose(idx, w, r, grid_size):
    """B.T @ r with NumPy: one ``np.bincount`` per channel."""
    flat = idx.ravel()
    return np.stack([np.bincount(flat, weights=(w * r[:, ch, None]).ravel(), minlength=grid_size)
                     for ch in range(r.shape[1])], axis=1)


def _setup(grid, frac, op):
    fly, stored = matrices(grid, frac)
    P, G = fly.shape
    rng = np.random.default_rng(3)
    x = rng.standard_normal((G if op == "blend" else P, CHANNELS)).astype(np.float32)
    csr64 = stored.to_scipy()
    csr = csr64.astype(np.float32)
    s = dict(fly=fly, stored=stored, x=x, idx=stored.indices, w32=stored.weights.astype(np.float32),
             csr=csr if op == "blend" else csr.T.tocsr(), G=G,
             want=(csr64 if op == "blend" else csr64.T) @ x.astype(np.float64))
    if op == "transpose":  # the plans are built once per matrix (cached), as in a solver
        fly.rmatvec(x)
        stored.rmatvec(x)
    peer_bytes = blend_bytes(stored, CHANNELS, 4, True)
    s["work"] = {"kronpe on the fly": {"bytes": blend_bytes(fly, CHANNELS, 4, False)},
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
                ms = [Method("kronpe on the fly", lambda s: s["fly"].matvec(s["x"]), peer=False),
                      Method("kronpe stored", lambda s: s["stored"].matvec(s["x"]), peer=False),
                      Method("numpy fancy indexing", lambda s: fancy_blend(s["idx"], s["w32"], s["x"])),
                      Method("scipy CSR", lambda s: s["csr"] @ s["x"])]
            else:
                ms = [Method("kronpe on the fly", lambda s: s["fly"].rmatvec(s["x"]), peer=False),
                      Method("kronpe stored", lambda s: s["stored"].rmatvec(s["x"]), peer=False),
                      Method("numpy bincount", lambda s: bincount_transpose(s["idx"], s["w32"], s["x"], s["G"])),
                      Method("scipy CSR (B^T r)", lambda s: s["csr"] @ s["x"])]
            out.append(Case("blend", f"{op}: {name}, C={CHANNELS}, float32",
                            (lambda grid=grid, frac=frac, op=op: _setup(grid, frac, op)), ms, _check,
                            rounds=rounds, quick=quick,
                            size=float(round(frac * np.prod(grid))),
                            params=dict(case=name, op=op, channels=CHANNELS, dtype="float32")))
    return out
