"""Scattered samples and grids with holes: kronpe's defaults against the interpolators people use.

Photographs of scikit-image (kronpe.data.load_sample), float32 in [0, 1]:

- ``scattered`` (25% random pixels, seed 0): the kept pixels as scattered points (pixel (i, j) at
  (i / N, j / N)), PSNR on the other 75%. kronpe: ``fit_points(points, values)`` then ``predict``
  of the held-out points; ``scipy.interpolate.griddata(method="cubic")`` (NaN outside the hull
  replaced by the nearest sample); ``RBFInterpolator(kernel="thin_plate_spline", neighbors=30)``;
  ``skimage.restoration.inpaint_biharmonic`` of the missing pixels (channel_axis).
- ``masked`` (50% missing pixels): ``fit_grid(image, mask=mask)`` then ``predict_grid`` against
  ``inpaint_biharmonic``.

Time = fit + predict; the held-out PSNR is in every row. Only the public API is called.
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from .harness import Case, Method

IMAGES = ("astronaut", "camera", "coffee", "chelsea", "rocket")
KEEP = 0.25
MISSING = 0.5


def psnr(a, b) -> float:
    return float(10 * np.log10(1.0 / np.mean((np.asarray(a, np.float64) - b) ** 2)))


def image(name: str, size: Optional[int] = None) -> np.ndarray:
    from kronpe import data

    img = data.load_sample(name, size=size).astype(np.float32)
    return img if img.ndim == 3 else img[..., None]


def points(img, keep):
    """(mask of the kept pixels, their coordinates (P, 2), the others' coordinates)."""
    mask = np.random.default_rng(0).random(img.shape[:2]) < keep
    n = np.array(img.shape[:2], np.float64)
    return mask, np.argwhere(mask) / n, np.argwhere(~mask) / n


# ---- the methods: each returns the predictions at the held-out pixels ------------------------------


def kronpe_points(img, mask, pts, query):
    import kronpe

    return kronpe.fit_points(pts, img[mask]).predict(query)


def kronpe_mask(img, mask, pts, query):
    import kronpe

    m = kronpe.fit_grid(np.where(mask[..., None], img, np.nan), mask=mask)
    return m.predict_grid(kronpe.data.grid_coords(mask.shape))[~mask]


def griddata_cubic(img, mask, pts, query):
    from scipy.interpolate import griddata

    out = griddata(pts, img[mask], query, method="cubic")
    near = griddata(pts, img[mask], query, method="nearest")
    return np.where(np.isnan(out), near, out)


def rbf_thin_plate(img, mask, pts, query):
    from scipy.interpolate import RBFInterpolator

    return RBFInterpolator(pts, img[mask], kernel="thin_plate_spline", neighbors=30)(query)


def biharmonic(img, mask, pts, query):
    from skimage.restoration import inpaint_biharmonic

    return inpaint_biharmonic(img, ~mask, channel_axis=-1)[~mask]


SCATTERED = {"kronpe fit_points": kronpe_points, "griddata cubic": griddata_cubic,
             "RBF thin-plate (30)": rbf_thin_plate, "inpaint_biharmonic": biharmonic}
MASKED = {"kronpe fit_grid(mask=)": kronpe_mask, "inpaint_biharmonic": biharmonic}


def task_inputs(name: str, task: str, size: Optional[int] = None) -> dict:
    img = image(name, size)
    mask, pts, query = points(img, KEEP if task == "scattered" else 1 - MISSING)
    return dict(img=img, mask=mask, pts=pts, query=query, truth=img[~mask])


def _check(state, method, pred):
    value = psnr(pred, state["truth"])
    assert value > 15.0, f"held-out PSNR {value:.2f} dB"
    return {"psnr": value}


def cases() -> List[Case]:
    out = []
    # (image, size, rounds, quick): a 128 x 128 crop for the quick run
    plan = [("camera", 128, 3, True)] + [(n, None, 3, False) for n in IMAGES]
    for task, methods in (("scattered", SCATTERED), ("masked", MASKED)):
        for name, size, rounds, quick in plan:
            if task == "masked" and name not in ("camera", "astronaut"):
                continue
            label = name if size is None else f"{name} {size}x{size}"

            def setup(name=name, task=task, size=size):
                return task_inputs(name, task, size)

            ms = [Method(m, (lambda s, f=fn: f(s["img"], s["mask"], s["pts"], s["query"])),
                         peer=not m.startswith("kronpe")) for m, fn in methods.items()]
            out.append(Case("scattered", f"{task}: {label}", setup, ms, _check, rounds=rounds, quick=quick,
                            size=float((size or 512) ** 2), params=dict(task=task, image=name, size=size)))
    return out
