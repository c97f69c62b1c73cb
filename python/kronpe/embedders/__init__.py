"""One-dimensional embedders (docs/math/embedders.rst).

Every embedder maps a 1-D array of N coordinates in [0, 1] to an (N, K) array. float32 input
gives float32 output; float64 (and integer) input gives float64; a torch CPU tensor gives a
torch tensor. Values are computed by the compiled kernel (kronpe._core.embed_basis /
embed_fourier) in double precision and rounded once; kronpe.reference holds the NumPy formulas.
Values are unscaled (the official code divides by the largest row norm; kronpe does not, so a
ridge weight always refers to the raw basis).

Shifted-basis embedders (Gaussian, Triangle, Rectangle, Impulse, Sine, Square, BSpline) place
centres t_k = k / K (k = 0..K-1, the papers' placement). With ``margin=m`` they add m centres at
the same spacing beyond each end, k = -m .. K-1+m, so the basis covers [0, 1] (docs/math/
encodings.rst, "Borders: margins and padding"); ``.K`` is then the number of output features,
K + 2m.

Fourier-type embedders (LinearFourier, LogFourier, RandomFourier, NeRF, Transformer) follow the
coordinate convention of the sinusoidal-embeddings tutorial of the neuraloperator library: x in
[0, 1] is mapped to x' = 2 pi x in [0, 2 pi] and the features are sin/cos(f m x'), so a frequency
f is a number of cycles over [0, 1]:

- LinearFourier / LogFourier / RandomFourier: cos(2 pi b x) = cos(b x') ("Trading Positional
  Complexity vs. Deepness in Coordinate Networks", Zheng et al., appendix D.1);
- NeRF: sin(2^k pi u), u = 2 x in [0, 2] (NeRF's own domain [-1, 1] has length 2), that is
  sin(2^k x'): frequency 2^k, the highest 2^(L-1), as the tutorial's Nyquist bound assumes;
- Transformer: sin(x' / P^(k/L)), P = max_positions (the tutorial applies it to x' = 2 pi x).

Each has ``amplitude_mod`` (m * g(x)) and ``frequency_mod`` (g(m x)) as in the tutorial, and
``check_nyquist(N)`` for N samples of [0, 1): the highest frequency times m must stay below N/2.
"""
from ._base import Embedder, NyquistWarning
from ._fourier import FourierFeatures, LinearFourier, LogFourier, NeRF, RandomFourier, Transformer
from ._shifted import BSpline, Gaussian, Impulse, Random, Rectangle, ShiftedBasis, Sine, Square, Triangle

__all__ = [
    "Embedder",
    "ShiftedBasis",
    "FourierFeatures",
    "NyquistWarning",
    "Gaussian",
    "Triangle",
    "Rectangle",
    "Impulse",
    "Sine",
    "Square",
    "Random",
    "BSpline",
    "LinearFourier",
    "LogFourier",
    "RandomFourier",
    "NeRF",
    "Transformer",
]
