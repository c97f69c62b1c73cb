"""
Upsample and resample
=====================

:func:`kronpe.upsample` and :func:`kronpe.resample` fit a spline to the samples and evaluate it
at the new resolution. How the samples were taken decides which spline:

* ``sampling="area"`` (the default): every pixel is the *mean* of the signal over its area, as a
  camera pixel or a box-downsampled pixel is. The output pixels are means over their own areas,
  so box-averaging the result gives the input back.
* ``sampling="point"``: every sample is the signal's value at a node (every k-th node of a
  simulation, ``img[::2, ::2]``): the interpolating cubic spline, mirrored at the ends.

Both are checked here by going down 2x and back up against the original photograph.
"""
import matplotlib.pyplot as plt
import numpy as np
from scipy import ndimage

import kronpe

img = kronpe.data.load_sample("chelsea", size=256)  # (256, 256, 3) float32
box = img.reshape(128, 2, 128, 2, 3).mean(axis=(1, 3))  # 2x2 pixel means: (128, 128, 3)
point = img[::2, ::2]  # every second pixel

# %%
# Area samples: upsample the box means, and compare with a cubic spline through the pixel
# centres (``scipy.ndimage.zoom`` with ``grid_mode=True``: pixel edges aligned, each sample at
# its pixel's centre).
up_area = kronpe.upsample(box, 2)
zoom = np.stack([ndimage.zoom(box[..., c], 2, order=3, mode="grid-mirror", grid_mode=True)
                 for c in range(3)], -1)
back = up_area.reshape(128, 2, 128, 2, 3).mean(axis=(1, 3))
print(f"area:  kronpe {kronpe.data.psnr(up_area, img):.2f} dB, scipy zoom {kronpe.data.psnr(zoom, img):.2f} dB; "
      f"box mean of the result - input: {np.abs(back - box).max():.1e}")

# %%
# Point samples: each sample goes back where it was taken.
up_point = kronpe.upsample(point, 2, sampling="point")
print(f"point: kronpe {kronpe.data.psnr(up_point, img):.2f} dB; "
      f"samples kept: {np.abs(up_point[::2, ::2] - point).max():.1e}")

# %%
# :func:`kronpe.resample` takes any shape (and any number of leading axes; trailing axes of 1-4
# entries are colour channels).
small = kronpe.resample(img, shape=(100, 150))
print("resample:", img.shape, "->", small.shape)

# %%
crop = (slice(80, 160), slice(60, 140))
fig, axes = plt.subplots(1, 4, figsize=(12, 3.3))
panels = [(img[crop], "original"), (np.repeat(np.repeat(box, 2, 0), 2, 1)[crop], "2x2 means (input)"),
          (up_area[crop], f"kronpe.upsample, {kronpe.data.psnr(up_area, img):.2f} dB"),
          (zoom[crop], f"scipy zoom cubic, {kronpe.data.psnr(zoom, img):.2f} dB")]
for ax, (im, title) in zip(axes, panels):
    ax.imshow(np.clip(im, 0, 1), interpolation="nearest")
    ax.set_title(title, fontsize=9)
    ax.set_axis_off()
fig.tight_layout()
