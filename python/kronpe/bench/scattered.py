"""Scattered samples and grids with holes: kronpe's defaults against the interpolators people use.

Photographs of scikit-image (kronpe.data.load_sample), float32 in [0, 1]:

- ``scattered`` (25% random pixels, seed 0): the kept pixels as scattered points (pixel (i, j) at
  (i / N, j / N)), PSNR on the other 75%. kronpe: ``fit_points(points, values)`` then ``predict``
  of the held-out points; ``scipy.interpolate.griddata(method="cubic")`` (NaN outside the hull
  replaced by the nearest sample); ``RBFInterpolator(kernel="thin_plate_spline", neighbors=30)``;
  ``skimage.restoration.inpaint_biharmonic`` of the missing pixels (channel_axis).
- ``masked`` (50% missing pixels): ``fit_grid(image, mask=mask)`` then ``predict_grid`` against
  ``inpaint_biharmonic``.
- ``off-grid`` (as many points as 25% of the pixels, uniformly random positions, seed 0; values
  the photograph's cubic spline there, pixel centres at ((i + 1/2) / H, (j + 1/2) / W)): PSNR at
  every pixel centre; kronpe against griddata cubic and RBF thin-plate (30).
- ``volume`` (a 32 x 64 x 64 grayscale video, ``kronpe.data.load_video``, 25% random voxels as
  points): kronpe against griddata linear (Qhull has no cubic in 3-D) and RBF thin-plate (30);
  inpaint_biharmonic is left out here (its 3-D sparse LU takes 727 s on this volume).

Time = fit + predict; the held-out PSNR is in every row. Only the public API is called. Every
method gets the same prepared inputs (``task_inputs``: the samples' coordinates and values, the
held-out pixels' coordinates and flat indices), made once outside the timing; a method that fills
the whole grid takes its held-out pixels with ``held_out`` (np.take of the flat indices: a boolean
index ``image[~mask]`` would add a third of the fill's own time at 451 x 300 RGB).
"""
from __future__ import annotations

from typing import List, Optional

import numpy as np

from .harness import Case, Method

IMAGES = ("astronaut", "camera", "coffee", "chelsea", "rocket")
KEEP = 0.25
MISSING = 0.5
#: rounds of the 128 x 128 crop's scattered and masked cases (the others: 3)
CROP_ROUNDS = 7


def psnr(a, b) -> float:
    return float(10 * np.log10(1.0 / np.mean((np.asarray(a, np.float64) - b) ** 2)))


def image(name: str, size: Optional[int] = None) -> np.ndarray:
    from kronpe import data

    img = data.load_sample(name, size=size).astype(np.float32)
    return img if img.ndim == 3 else img[..., None]


def kept(img, keep, seed: int = 0):
    """The mask of the kept pixels: a fraction ``keep`` of them at random (the suite's seed 0)."""
    return np.random.default_rng(seed).random(img.shape[:2]) < keep


# ---- the methods: each returns the predictions at the held-out pixels ------------------------------


def held_out(full, s) -> np.ndarray:
    """The values of a filled grid (N..., C) at the held-out pixels (their flat indices s["held"])."""
    full = np.asarray(full)
    return np.take(full.reshape(s["mask"].size, -1), s["held"], axis=0)


def kronpe_points(s):
    import kronpe

    return kronpe.fit_points(s["pts"], s["vals"]).predict(s["query"])


def kronpe_mask(s):
    import kronpe

    m = kronpe.fit_grid(s["img"], mask=s["mask"])  # the values where mask is False are ignored (as inpaint_biharmonic does)
    return held_out(m.predict_grid(kronpe.data.grid_coords(s["mask"].shape)), s)


def griddata_cubic(s):
    from scipy.interpolate import griddata

    out = griddata(s["pts"], s["vals"], s["query"], method="cubic")
    near = griddata(s["pts"], s["vals"], s["query"], method="nearest")
    return np.where(np.isnan(out), near, out)


def rbf_thin_plate(s):
    from scipy.interpolate import RBFInterpolator

    return RBFInterpolator(s["pts"], s["vals"], kernel="thin_plate_spline", neighbors=30)(s["query"])


def biharmonic(s):
    from skimage.restoration import inpaint_biharmonic

    return held_out(inpaint_biharmonic(s["img"], ~s["mask"], channel_axis=-1), s)


SCATTERED = {"kronpe fit_points": kronpe_points, "griddata cubic": griddata_cubic,
             "RBF thin-plate (30)": rbf_thin_plate, "inpaint_biharmonic": biharmonic}
MASKED = {"kronpe fit_grid(mask=)": kronpe_mask, "inpaint_biharmonic": biharmonic}


def griddata_linear(s):
    from scipy.interpolate import griddata

    out = griddata(s["pts"], s["vals"], s["query"], method="linear")
    near = griddata(s["pts"], s["vals"], s["query"], method="nearest")
    return np.where(np.isnan(out), near, out)


VOLUME = {"kronpe fit_points": kronpe_points, "griddata linear": griddata_linear,
          "RBF thin-plate (30)": rbf_thin_plate}
VOLUME_SHAPE = (32, 64, 64)


def volume_inputs(seed: int = 0) -> dict:
    from kronpe import data

    vol = data.load_video(frames=VOLUME_SHAPE[0], size=VOLUME_SHAPE[1], color=False).astype(np.float32)
    mask = np.random.default_rng(seed).random(vol.shape) < KEEP
    return prepared(vol, mask)


def offgrid_inputs(name: str, size: Optional[int] = None, seed: int = 0) -> dict:
    """Values of the photograph's cubic spline at random positions (module docstring)."""
    from scipy.ndimage import map_coordinates

    img = image(name, size)
    H, W = img.shape[:2]
    pts = np.random.default_rng(seed).random((int(KEEP * H * W), 2))
    at = [pts[:, 0] * H - 0.5, pts[:, 1] * W - 0.5]
    vals = np.stack([map_coordinates(img[..., c], at, order=3, mode="reflect") for c in range(img.shape[2])], -1)
    centres = np.stack(np.meshgrid((np.arange(H) + 0.5) / H, (np.arange(W) + 0.5) / W, indexing="ij"), -1)
    return dict(pts=pts, vals=vals.astype(np.float32), query=centres.reshape(-1, 2), truth=img.reshape(-1, img.shape[2]))


OFFGRID = {"kronpe fit_points": kronpe_points, "griddata cubic": griddata_cubic,
           "RBF thin-plate (30)": rbf_thin_plate}


def task_inputs(name: str, task: str, size: Optional[int] = None, seed: int = 0) -> dict:
    img = image(name, size)
    mask = kept(img, KEEP if task == "scattered" else 1 - MISSING, seed)
    return prepared(img, mask)


def prepared(img: np.ndarray, mask: np.ndarray) -> dict:
    """Every method's inputs (module docstring): the grid and its mask, the samples' coordinates
    (pixel (i, j) at (i / N, j / N)) and values, the held-out pixels' coordinates and flat indices,
    and their true values."""
    n = np.array(mask.shape, np.float64)
    return dict(img=img, mask=mask, pts=np.argwhere(mask) / n, vals=np.ascontiguousarray(img[mask]),
                query=np.argwhere(~mask) / n, held=np.flatnonzero(~mask), truth=img[~mask])


def _check(state, method, pred):
    value = psnr(pred, state["truth"])
    assert value > 15.0, f"held-out PSNR {value:.2f} dB"
    return {"psnr": value}


def cases() -> List[Case]:
    out = []
    # (image, size, rounds, quick): a 128 x 128 crop for the quick run; its fills and predictions
    # take 1-2 ms, within the host's noise (one slow round of three moved the median: CROP_ROUNDS)
    plan = [("camera", 128, 3, True)] + [(n, None, 3, False) for n in IMAGES]
    for task, methods in (("scattered", SCATTERED), ("masked", MASKED)):
        for name, size, rounds, quick in plan:
            rounds = CROP_ROUNDS if size is not None else rounds
            label = name if size is None else f"{name} {size}x{size}"

            def variant(seed, name=name, task=task, size=size):
                return task_inputs(name, task, size, seed)

            ms = [Method(m, fn, peer=not m.startswith("kronpe")) for m, fn in methods.items()]
            out.append(Case("scattered", f"{task}: {label}", lambda v=variant: v(0), ms, _check, rounds=rounds,
                            quick=quick, size=float((size or 512) ** 2), params=dict(task=task, image=name, size=size),
                            variant=variant))
    for name, size, rounds, quick in plan:
        ms = [Method(m, fn, peer=not m.startswith("kronpe")) for m, fn in OFFGRID.items()]
        label = name if size is None else f"{name} {size}x{size}"
        out.append(Case("scattered", f"off-grid: {label}", (lambda n=name, z=size: offgrid_inputs(n, z)), ms, _check,
                        rounds=rounds, quick=quick, size=float((size or 512) ** 2),
                        params=dict(task="off-grid", image=name, size=size),
                        variant=lambda seed, n=name, z=size: offgrid_inputs(n, z, seed)))
    ms = [Method(m, fn, peer=not m.startswith("kronpe")) for m, fn in VOLUME.items()]
    out.append(Case("scattered", "volume: video 32x64x64", volume_inputs, ms, _check, rounds=1,
                    size=float(np.prod(VOLUME_SHAPE)), params=dict(task="volume", image="video", size=VOLUME_SHAPE[1]),
                    variant=volume_inputs))
    return out
