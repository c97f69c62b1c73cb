"""
What governs an embedder: stable rank and distance
==================================================

Two numbers predict how well a positional encoding fits and generalises ("Rethinking Positional
Encoding", Zheng, Ramasinghe and Lucey; "Trading Positional Complexity vs. Deepness in Coordinate
Networks", Zheng, Ramasinghe, Li and Lucey):

* the **stable rank** of the embedding matrix of N coordinates, ``||A||_F^2 / ||A||_2^2``: how
  many independent directions the encoding really has (it must be near N to memorise N
  samples);
* the **embedded distance** ``D(x1, x2) = <Psi(x1), Psi(x2)>``: how fast the inner product of two
  encodings decays with their distance (it must decay slowly enough that a sample between two
  training samples is still "seen" by both).

kronpe computes both for any embedder and knows the closed forms of the shifted-basis families
and random Fourier features (dashed lines below).
"""
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import NullFormatter

import kronpe

# %%
# Stable rank of a Gaussian basis (K = 256 centres) against its width, for several N.
fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
kronpe.plot_stable_rank_vs_sigma(axes[0], Ns=(32, 64, 128, 256), sigmas=np.geomspace(1e-3, 0.1, 15), K=256)

# %%
# Stable rank against N for a few families of equal K, and their distance functions.
embedders = {
    "Gaussian sigma=0.005": kronpe.Gaussian(256, sigma=0.005),
    "Triangle d=2/256": kronpe.Triangle(256, width=2 / 256),
    "RFF sigma=20": kronpe.RandomFourier(256, sigma=20.0),
    "LogFourier sigma=6": kronpe.LogFourier(256, sigma=6.0),
}
kronpe.plot_stable_rank_vs_n(embedders, Ns=[16, 32, 64, 128, 256, 512], ax=axes[1])
kronpe.plot_distance(embedders, np.linspace(-0.05, 0.05, 201), ax=axes[2])
axes[1].xaxis.set_minor_formatter(NullFormatter())
for ax in axes:
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7)
fig.tight_layout()

# %%
# The numbers behind the curves: the measured stable rank against its bound, and the width
# that preserves the distance over half a sample spacing (``sigma_for_spacing``).
A = kronpe.Gaussian(256, sigma=0.005)(kronpe.data.grid_coords([256])[0])
print(f"Gaussian sigma=0.005, N=K=256: stable rank {kronpe.stable_rank(A):.1f}, "
      f"bound {kronpe.Gaussian(256, 0.005).stable_rank_bound(256):.1f}")
print(f"sigma preserving the distance over half of 1/256: {kronpe.sigma_for_spacing(1 / 256):.5f}")
print(f"RFF width with a Gaussian's stable rank at sigma=0.01: {kronpe.rff_sigma_for_gaussian(0.01):.2f}")
