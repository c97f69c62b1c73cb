"""Scattered measurements of smooth fields: ``kronpe.grid`` against the gridders people use.

Each case samples a field at scattered points, and every method grids those samples onto the same
regular grid (256 x 256 over the unit square; 48^3 in 3-D). PSNR (peak = the field's range on the
grid) is measured against the noise-free field at the grid nodes inside the points' convex hull,
so no method is judged where it extrapolates. Fields:

- Franke's function (R. Franke, "Scattered data interpolation: tests of some methods", 1982), the
  standard test of scattered-data interpolation, at uniform random, Halton and clustered points
  (points along 12 random tracks, a ship's or a flight's sampling), with and without
  N(0, 0.02) noise;
- a smooth 3-D function, exp(-|x - c|^2 / 0.18) + cos(3x) sin(2y) z / 2;
- synthetic terrain: a fractal surface (spectral synthesis, power spectrum k^-3.2) on 256^2 nodes,
  sampled off the lattice at 25% of the nodes' count (values of its cubic spline there).

Peers, in the same run on the same inputs: ``scipy.interpolate.griddata`` (cubic in 2-D, linear in
3-D; Qhull has no cubic there), ``RBFInterpolator`` (thin-plate spline, 30 neighbours) and
``verde.Spline`` (up to 2 000 points, a dense solve) where verde imports. Time is the
whole job: fit + evaluation on the grid. Where torch sees a CUDA device, a second kronpe row fits
the points as CUDA tensors on the GPU (``kronpe.solvers.spline_torch``).

Groups ``point-sampled kx: <image>``: lattice fields given as point samples (``img[::k, ::k]``
of the 512^2 photographs, float64, and of the 512^2 synthetic terrain) brought back to full size:
``kronpe.upsample(low, k, sampling="point")`` against ``scipy.ndimage.map_coordinates(order=3,
mode="mirror")`` per channel at the samples' positions (output pixel j at j / k input pixels);
PSNR (peak = the image's range) over every pixel.
"""
from __future__ import annotations

from typing import Any, Dict, List

import numpy as np

from .harness import Case, Method

GRID_2D = 256
GRID_3D = 48
NOISE = 0.02


def franke(x, y):
    return (0.75 * np.exp(-((9 * x - 2) ** 2 + (9 * y - 2) ** 2) / 4)
            + 0.75 * np.exp(-(9 * x + 1) ** 2 / 49 - (9 * y + 1) / 10)
            + 0.5 * np.exp(-((9 * x - 7) ** 2 + (9 * y - 3) ** 2) / 4)
            - 0.2 * np.exp(-(9 * x - 4) ** 2 - (9 * y - 7) ** 2))


def smooth3(x, y, z):
    return np.exp(-((x - 0.4) ** 2 + (y - 0.6) ** 2 + (z - 0.5) ** 2) / 0.18) + 0.5 * np.cos(3 * x) * np.sin(2 * y) * z


def halton(n: int, d: int, seed: int = 0) -> np.ndarray:
    from scipy.stats import qmc

    return qmc.Halton(d=d, seed=seed).random(n)


def tracks(n: int, rng) -> np.ndarray:
    """Points along 12 straight tracks across the square, with small jitter."""
    k = rng.integers(0, 12, n)
    start, direction = rng.random((12, 2)), rng.standard_normal((12, 2))
    direction /= np.linalg.norm(direction, axis=1)[:, None]
    t = rng.random(n) - 0.5
    pts = start[k] + 1.5 * t[:, None] * direction[k] + 0.002 * rng.standard_normal((n, 2))
    return np.clip(pts, 0.0, 1.0)


def terrain(n: int = GRID_2D, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    k = np.sqrt(np.fft.fftfreq(n)[:, None] ** 2 + np.fft.fftfreq(n)[None, :] ** 2)
    k[0, 0] = 1.0
    spec = (rng.standard_normal((n, n)) + 1j * rng.standard_normal((n, n))) * k ** (-3.2 / 2)
    spec[0, 0] = 0.0
    z = np.real(np.fft.ifft2(spec))
    return (z - z.min()) / np.ptp(z)


def _inside(pts: np.ndarray, query: np.ndarray) -> np.ndarray:
    from scipy.spatial import Delaunay

    return Delaunay(pts).find_simplex(query) >= 0


def inputs(field: str, P: int, layout: str = "uniform", noise: float = 0.0, seed: int = 0) -> Dict[str, Any]:
    rng = np.random.default_rng(seed)
    if field == "smooth3d":
        pts = rng.random((P, 3))
        vals = smooth3(*pts.T)
        axes = [np.linspace(0.0, 1.0, GRID_3D)] * 3
        mesh = np.meshgrid(*axes, indexing="ij")
        truth = smooth3(*mesh)
    elif field == "terrain":
        z = terrain()
        from scipy.ndimage import map_coordinates

        pts = rng.random((P, 2))
        vals = map_coordinates(z, (pts * (GRID_2D - 1)).T, order=3, mode="mirror")
        axes = [np.linspace(0.0, 1.0, GRID_2D)] * 2
        truth = z
    else:
        pts = {"uniform": lambda: rng.random((P, 2)), "halton": lambda: halton(P, 2, seed),
               "tracks": lambda: tracks(P, rng)}[layout]()
        vals = franke(pts[:, 0], pts[:, 1])
        axes = [np.linspace(0.0, 1.0, GRID_2D)] * 2
        truth = franke(*np.meshgrid(*axes, indexing="ij"))
    if noise:
        vals = vals + noise * rng.standard_normal(vals.shape)
    query = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, len(axes))
    return dict(pts=pts, vals=vals, axes=axes, query=query, truth=truth, inside=_inside(pts, query).reshape(truth.shape))


# ---- the methods: each returns the field on the grid ------------------------------------------------


def kronpe_grid(s):
    import kronpe

    D = len(s["axes"])
    region = [v for _ in range(D) for v in (0.0, 1.0)]
    return kronpe.grid(s["pts"], s["vals"], shape=[a.size for a in s["axes"]], region=region)[0]


def kronpe_grid_gpu(s):
    """The fit of the points as CUDA tensors (on the GPU: kronpe.solvers.spline_torch), the grid
    evaluated on the host."""
    import torch

    import kronpe

    if "pts_cuda" not in s:
        s["pts_cuda"] = torch.tensor(s["pts"], device="cuda")
        s["vals_cuda"] = torch.tensor(s["vals"], device="cuda")
    D = len(s["axes"])
    m = kronpe.fit_spline(s["pts_cuda"], s["vals_cuda"], _box=(np.zeros(D), np.ones(D)))
    return m.predict_grid(s["axes"])


def _cuda_torch() -> bool:
    """Whether torch imports and sees a CUDA device (the GPU row)."""
    from .harness import missing_module

    if missing_module(["torch"]):
        return False
    import torch

    return bool(torch.cuda.is_available())


def griddata_cubic(s):
    from scipy.interpolate import griddata

    return griddata(s["pts"], s["vals"], s["query"], method="cubic").reshape(s["truth"].shape)


def griddata_linear(s):
    from scipy.interpolate import griddata

    return griddata(s["pts"], s["vals"], s["query"], method="linear").reshape(s["truth"].shape)


def rbf_thin_plate(s):
    from scipy.interpolate import RBFInterpolator

    return RBFInterpolator(s["pts"], s["vals"], kernel="thin_plate_spline", neighbors=30)(s["query"]).reshape(
        s["truth"].shape)


def verde_spline(s):
    import verde

    coords = tuple(s["pts"].T)
    sp = verde.Spline().fit(coords, s["vals"])
    return sp.predict(tuple(s["query"].T)).reshape(s["truth"].shape)


def point_inputs(name: str, k: int) -> Dict[str, Any]:
    if name == "terrain":
        img = terrain(512)
    else:
        from kronpe import data

        img = data.load_sample(name, size=512).astype(np.float64)
    low = np.ascontiguousarray(img[::k, ::k])
    return dict(img=img, low=low, k=k)


def kronpe_point_upsample(s):
    import kronpe

    return kronpe.upsample(s["low"], s["k"], sampling="point")


def scipy_point_spline(s):
    from scipy.ndimage import map_coordinates

    low, k = s["low"], s["k"]
    g = [np.arange(n * k) / k for n in low.shape[:2]]
    X, Y = np.meshgrid(*g, indexing="ij")
    if low.ndim == 2:
        return map_coordinates(low, [X, Y], order=3, mode="mirror")
    return np.stack([map_coordinates(low[..., c], [X, Y], order=3, mode="mirror") for c in range(low.shape[2])], -1)


def _check_point(state, method, pred):
    img = state["img"]
    err = np.asarray(pred, np.float64) - img
    assert np.isfinite(err).all(), "NaN in the upsampled image"
    return {"psnr": float(20 * np.log10(np.ptp(img) / np.sqrt(np.mean(err**2))))}


def _check(state, method, pred):
    truth, inside = state["truth"], state["inside"]
    err = np.asarray(pred, np.float64)[inside] - truth[inside]
    rmse = float(np.sqrt(np.mean(err**2)))
    peak = float(np.ptp(truth))
    value = float(20 * np.log10(peak / rmse)) if rmse > 0 else float("inf")
    assert np.isfinite(err).all(), "NaN inside the points' convex hull"
    return {"psnr": value, "rmse": rmse}


def cases() -> List[Case]:
    plan = [  # (field, points, layout, noise, quick)
        ("franke", 2000, "uniform", 0.0, True),
        ("franke", 20000, "uniform", 0.0, False),
        ("franke", 100000, "uniform", 0.0, False),
        ("franke", 10000, "halton", 0.0, False),
        ("franke", 10000, "tracks", 0.0, False),
        ("franke", 20000, "uniform", NOISE, False),
        ("franke", 2000, "uniform", NOISE, False),
        ("terrain", GRID_2D * GRID_2D // 4, "uniform", 0.0, False),
        ("smooth3d", 20000, "uniform", 0.0, False),
    ]
    out = []
    gpu = _cuda_torch()
    for field, P, layout, noise, quick in plan:
        three = field == "smooth3d"
        methods = [Method("kronpe grid", kronpe_grid, peer=False),
                   Method("griddata linear" if three else "griddata cubic", griddata_linear if three else griddata_cubic),
                   Method("RBF thin-plate (30)", rbf_thin_plate)]
        if P <= 2000 and not three:
            methods.append(Method("verde Spline", verde_spline, needs=["verde"]))
        if gpu:
            methods.insert(1, Method("kronpe grid (GPU fit)", kronpe_grid_gpu, peer=False))
        label = f"{field} {layout} {P}" + (f" noise {noise:g}" if noise else "")
        out.append(Case("field", label, (lambda f=field, p=P, lay=layout, n=noise: inputs(f, p, lay, n)), methods,
                        _check, rounds=3, quick=quick, size=float(P),
                        params=dict(field=field, points=P, layout=layout, noise=noise),
                        variant=lambda seed, f=field, p=P, lay=layout, n=noise: inputs(f, p, lay, n, seed)))
    for k in (2, 4):
        for name in ("astronaut", "camera", "coffee", "terrain"):
            methods = [Method("kronpe upsample(sampling='point')", kronpe_point_upsample, peer=False),
                       Method("scipy map_coordinates(order=3)", scipy_point_spline)]
            out.append(Case("field", f"point-sampled {k}x: {name}", (lambda n=name, kk=k: point_inputs(n, kk)),
                            methods, _check_point, rounds=5, quick=False, size=float(512 * 512),
                            params=dict(field=name, points=(512 // k) ** 2, layout="lattice", noise=0.0)))
    return out
