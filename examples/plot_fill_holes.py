"""
Fill missing pixels
===================

Two ways to hand kronpe an image with holes, both solved by the same default fit (the model's
values at the pixels, a thin-plate smoothness penalty, its weight held out on 10% of the known
pixels, multigrid-preconditioned conjugate gradients):

* :func:`kronpe.fit_grid` with ``mask=`` (True where a pixel is known);
* :func:`kronpe.fit_points` with the known pixels as scattered points: they lie on a lattice,
  and kronpe notices (``info["solver"] == "lattice"``).

scikit-image's ``inpaint_biharmonic`` solves the limit of the same thin-plate problem with the
mirrored boundary; it is shown for comparison.
"""
import time

import matplotlib.pyplot as plt
import numpy as np
from skimage.restoration import inpaint_biharmonic

import kronpe

img = kronpe.data.load_sample("camera", size=256)  # (256, 256) float32, grayscale
rng = np.random.default_rng(0)
observed = rng.random(img.shape) > 0.6  # keep 40% of the pixels ...
observed[100:120, 40:220] = False  # ... and lose a whole band
holes = ~observed

# %%
# A grid with a mask. The values under the mask are never read (NaN is fine there).
t0 = time.perf_counter()
model = kronpe.fit_grid(np.where(observed, img, np.nan), mask=observed)
filled = model.predict_grid(kronpe.data.grid_coords(img.shape))
t_grid = time.perf_counter() - t0
print(f"fit_grid(mask=): {kronpe.data.psnr(filled[holes], img[holes]):.2f} dB on the holes, "
      f"{1e3 * t_grid:.0f} ms")

# %%
# The same pixels as points (P, 2) with values (P,): pixel (i, j) of an N x N image sits at
# (i / N, j / N).
ii, jj = np.nonzero(observed)
points = np.stack([ii / 256, jj / 256], axis=1)
pm = kronpe.fit_points(points, img[observed])
filled_pts = pm.predict_grid(kronpe.data.grid_coords(img.shape))
print(f"fit_points: solver {pm.info['solver']!r}, "
      f"{kronpe.data.psnr(filled_pts[holes], img[holes]):.2f} dB on the holes")

# %%
# scikit-image's biharmonic inpainting of the same holes.
t0 = time.perf_counter()
biharmonic = inpaint_biharmonic(img, holes)
t_bh = time.perf_counter() - t0
print(f"inpaint_biharmonic: {kronpe.data.psnr(biharmonic[holes], img[holes]):.2f} dB, {1e3 * t_bh:.0f} ms")

# %%
fig, axes = plt.subplots(1, 3, figsize=(10, 3.6))
for ax, im, title in zip(axes, [np.where(observed, img, 0), filled, biharmonic],
                         ["known pixels (40%, and a band lost)",
                          f"kronpe, {kronpe.data.psnr(filled[holes], img[holes]):.2f} dB",
                          f"inpaint_biharmonic, {kronpe.data.psnr(biharmonic[holes], img[holes]):.2f} dB"]):
    ax.imshow(np.clip(im, 0, 1), cmap="gray", interpolation="nearest")
    ax.set_title(title, fontsize=9)
    ax.set_axis_off()
fig.tight_layout()
