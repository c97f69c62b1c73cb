"""Prototype (issue 11, the volume target): which smoothness penalty would beat RBF thin-plate on the
benchmark's 3-D volume; the library's 3-D default now is its answer (kronpe.solvers.smooth: order 3,
axis weights held out; 28.2029 dB in the benchmark). Not the library's solver: plain NumPy PCG with the exact DCT-II
preconditioner for the mirrored-boundary penalty (sum_i w_i L_i)^q (L_i the Neumann Laplacian along
axis i, diagonal in the DCT-II basis, so any real q and per-axis weights w_i are one line), on the
32 x 64 x 64 video of ``kronpe bench --suite scattered`` with 25% of its voxels (seed 0). Prints the
held-out PSNR (raw and clipped to the samples' range, as the defaults clip) for each setting.

    PYTHONPATH=python python benches/volume_order3_prototype.py [q:w0 ...]   (default: 2:1 3:1 3:0.6)

Measured 2026-11-23 (lambda 1e-4): q=2 w0=1 27.44 dB (the library's default model), q=3 w0=1 27.94,
q=3 w0=0.6 28.19; RBF thin-plate (30) 27.95. ~1 s per setting.
"""
import sys

import numpy as np
from scipy.fft import dctn, idctn

from kronpe.bench.scattered import psnr, volume_inputs


def fit(mask, y, mu, q, lam, tol=1e-7, maxiter=500):
    m = mask.astype(np.float64)
    spec = mu ** q
    rho = m.mean()

    def A(x):
        return m * x + lam * idctn(dctn(x, norm="ortho") * spec, norm="ortho")

    def M(r):
        return idctn(dctn(r, norm="ortho") / (rho + lam * spec), norm="ortho")

    x = np.zeros_like(y)
    r = y - A(x)
    z = M(r)
    p = z.copy()
    rz = float((r * z).sum())
    yn = float(np.linalg.norm(y))
    for it in range(maxiter):
        Ap = A(p)
        a = rz / float((p * Ap).sum())
        x += a * p
        r -= a * Ap
        if np.linalg.norm(r) < tol * yn:
            break
        z = M(r)
        rz_new = float((r * z).sum())
        p = z + rz_new / rz * p
        rz = rz_new
    return x, it + 1


def main(settings):
    d = volume_inputs()
    vol, mask = d["img"].astype(np.float64), d["mask"]
    y = np.where(mask, vol, 0.0)
    eig = [2 - 2 * np.cos(np.pi * np.arange(n) / n) for n in vol.shape]  # the Neumann Laplacian's, per axis
    lo, hi = vol[mask].min(), vol[mask].max()
    for s in settings:
        q, w0 = (float(v) for v in s.split(":"))
        mu = sum(np.meshgrid(eig[0] * w0, eig[1], eig[2], indexing="ij"))
        x, its = fit(mask, y, mu, q, 1e-4)
        print(f"q={q:g} w0={w0:g}: {psnr(x[~mask], vol[~mask]):.3f} dB, clipped "
              f"{psnr(np.clip(x, lo, hi)[~mask], vol[~mask]):.3f} dB ({its} iterations)", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or ["2:1", "3:1", "3:0.6"])
