"""
Grid scattered field data
=========================

Measurements of a smooth field at scattered positions, in their own units (here metres over a
2 km x 1 km survey), gridded by :func:`kronpe.grid`: a cubic B-spline with a thin-plate penalty
whose node spacing and penalty weight are held out on 10% of the points. The field is Franke's
test function; :func:`scipy.interpolate.griddata` (cubic) grids the same points onto the same
nodes. Both are scored against the exact field over the nodes inside the points' convex hull.
"""
import time

import matplotlib.pyplot as plt
import numpy as np
from scipy.interpolate import griddata
from scipy.spatial import Delaunay

import kronpe


def franke(x, y):
    """Franke's test function on the unit square (R. Franke, 1979)."""
    return (0.75 * np.exp(-((9 * x - 2) ** 2 + (9 * y - 2) ** 2) / 4)
            + 0.75 * np.exp(-((9 * x + 1) ** 2) / 49 - (9 * y + 1) / 10)
            + 0.5 * np.exp(-((9 * x - 7) ** 2 + (9 * y - 3) ** 2) / 4)
            - 0.2 * np.exp(-((9 * x - 4) ** 2) - (9 * y - 7) ** 2))


rng = np.random.default_rng(1)
extent = np.array([2000.0, 1000.0])  # metres
unit = rng.random((3000, 2))
points = unit * extent  # (P, 2) in metres
values = franke(unit[:, 0], unit[:, 1])

# %%
# Grid at 10 m spacing over the survey area; nodes farther than 60 m from every point are NaN.
t0 = time.perf_counter()
field, (gx, gy) = kronpe.grid(points, values, spacing=10.0, region=(0, 2000, 0, 1000), maxdist=60.0)
t_kronpe = time.perf_counter() - t0
print(f"kronpe.grid: {field.shape} nodes in {1e3 * t_kronpe:.0f} ms")

# %%
# The same nodes through griddata, and the exact field there.
X, Y = np.meshgrid(gx, gy, indexing="ij")
t0 = time.perf_counter()
field_gd = griddata(points, values, (X, Y), method="cubic")
t_griddata = time.perf_counter() - t0
exact = franke(X / extent[0], Y / extent[1])
inside = Delaunay(points).find_simplex(np.stack([X, Y], -1)) >= 0
peak = np.ptp(exact)
score = {name: kronpe.data.psnr(f[inside & np.isfinite(field)], exact[inside & np.isfinite(field)], peak)
         for name, f in [("kronpe.grid", field), ("griddata cubic", field_gd)]}
for name, t in [("kronpe.grid", t_kronpe), ("griddata cubic", t_griddata)]:
    print(f"{name:15s} PSNR {score[name]:6.2f} dB  {1e3 * t:6.0f} ms")

# %%
# The fit chose its own node grid and penalty weight; ``info`` says what bounded it.
model = kronpe.fit_spline(points, values)
print("levels tried:", model.info["levels"], "limited by:", model.info["limited_by"])

# %%
fig, axes = plt.subplots(1, 3, figsize=(14, 3.4))
box = (0, 2000, 0, 1000)
axes[0].imshow(field.T, origin="lower", extent=box, cmap="viridis")
axes[0].plot(points[:, 0], points[:, 1], ",", color="w")
axes[0].set_title("kronpe.grid (points in white)", fontsize=9)
for ax, f, name in [(axes[1], field, "kronpe.grid"), (axes[2], field_gd, "griddata cubic")]:
    err = np.log10(np.abs(np.where(inside, f - exact, np.nan)) + 1e-12)
    im = ax.imshow(err.T, origin="lower", extent=box, cmap="magma", vmin=-8, vmax=-2)
    ax.set_title(f"{name}: log10 |error|, {score[name]:.1f} dB", fontsize=9)
fig.colorbar(im, ax=axes[1:], shrink=0.8)
for ax in axes:
    ax.set_xlabel("x (m)")
axes[0].set_ylabel("y (m)")
