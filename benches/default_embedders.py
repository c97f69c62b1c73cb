"""Held-out PSNR behind kronpe's default embedders (kronpe.solvers.fit.default_embedders).

Each photograph (scikit-image astronaut, camera, coffee; cropped square) is subsampled with
[::2, ::2]; the fit sees the subsample at its coordinates linspace(0, 1, N + 1)[:-1][::2] and
predicts the full image at linspace(0, 1, N + 1)[:-1]. PSNR in dB over all pixels (peak 1).

    PYTHONPATH=python python benches/default_embedders.py [--more]
"""
from __future__ import annotations

import sys

import numpy as np
import scipy.ndimage as ndi
import skimage.data

from kronpe import BSpline, Gaussian, GridPlan, Triangle, fit_grid
from kronpe.data import grid_coords
from kronpe.data import psnr as _psnr


def psnr(pred: np.ndarray, truth: np.ndarray) -> float:
    """PSNR of the prediction clipped to the images' range [0, 1]."""
    return _psnr(np.clip(pred, 0, 1), truth)


def spline(train: np.ndarray, n: int, mode: str) -> np.ndarray:
    """Cubic-spline interpolation evaluated where the full image's pixels lie (j / 2)."""
    j = np.arange(n) / 2.0
    grid = np.meshgrid(j, j, indexing="ij")
    chans = train[..., None] if train.ndim == 2 else train
    out = [ndi.map_coordinates(chans[..., c], grid, order=3, mode=mode) for c in range(chans.shape[-1])]
    return np.stack(out, -1).reshape((n, n) + train.shape[2:])


def main() -> None:
    rows = {}
    for name in ["astronaut", "camera", "coffee"]:
        img = getattr(skimage.data, name)() / 255.0
        n = min(img.shape[:2])
        img = img[:n, :n]
        full = grid_coords([n])[0]
        tc = [full[::2]] * 2
        train = img[::2, ::2]
        k = n // 2
        fits = {
            "kronpe default (BSpline 3, margin 2, pad 2, GCV ridge)": lambda: fit_grid(
                train.astype(np.float32), None, coords=tc),
            "paper Gaussian sigma=0.64/K, ridge 0": lambda: fit_grid(
                train, [Gaussian(k, 0.64 / k)] * 2, coords=tc, ridge=0.0),
            "paper Triangle d=1/K, ridge 0": lambda: fit_grid(train, [Triangle(k)] * 2, coords=tc, ridge=0.0),
        }
        if "--more" in sys.argv:
            fits.update({
                "BSpline 3 width 0.9/K, margin 2, pad 2, GCV": lambda: GridPlan(
                    tc, [BSpline(k, 3, width=0.9 / k, margin=2)] * 2, pad=2).fit(train),
                "Gaussian 0.6/K, margin 2, pad 2, GCV": lambda: GridPlan(
                    tc, [Gaussian(k, 0.6 / k, margin=2)] * 2, pad=2).fit(train),
                "BSpline 3, margin 2, no pad, GCV": lambda: GridPlan(
                    tc, [BSpline(k, 3, margin=2)] * 2).fit(train),
                "default embedders + width by GCV": lambda: fit_grid(train, None, coords=tc, width="gcv"),
            })
        for label, fit in fits.items():
            rows.setdefault(label, []).append(psnr(fit().predict_grid([full, full]), img))
        zoom = ndi.zoom(train, (2, 2) + (1,) * (train.ndim - 2), order=3)
        rows.setdefault("scipy.ndimage.zoom(order=3)", []).append(psnr(zoom, img))
        rows.setdefault("cubic spline at j/2 (map_coordinates, nearest)", []).append(
            psnr(spline(train, n, "nearest"), img))
    print(f"{'method':58s} astronaut  camera  coffee   mean")
    for label, values in rows.items():
        print(f"{label:58s} " + "  ".join(f"{v:7.2f}" for v in values) + f"  {np.mean(values):6.2f}")


if __name__ == "__main__":
    main()
