"""What governs an embedder: stable rank and distance preservation (docs/math/analysis.rst).

Numbers: ``stable_rank``, ``embedded_distance``, the theoretical bounds (Props. 2-5) of "Trading
Positional Complexity vs. Deepness in Coordinate Networks" (Zheng et al., ECCV 2022; "the
complex-encoding paper" below), ``sigma_for_spacing`` (the rule of "Rethinking Positional Encoding",
Zheng et al., 2021) and the Gaussian/RFF equivalence. Plots: helpers that take ``ax=`` and return
it, redrawing the complex-encoding paper's figures 2 (stable rank against sigma), 3 (stable rank
against N and distance preservation of several embedders) and 4 (the same for Gaussian and RFF
across widths) from computed data. ``run_analyze`` (the ``kronpe analyze`` command) writes them as
PNG files and prints the numbers behind them.

Coordinates are the papers' grid x = linspace(0, 1, N + 1)[:-1] unless given.
"""
from __future__ import annotations

import math
from typing import Dict, Mapping, Optional, Sequence, Union

import numpy as np

from ._adapters import validate as _validate
from .data import grid_coords
from ._formulas import (
    bspline_distance,
    bspline_stable_rank,
    gaussian_distance,
    gaussian_sigma_for_rff,
    gaussian_stable_rank,
    rectangle_distance,
    rectangle_stable_rank,
    rff_distance,
    rff_sigma_for_gaussian,
    rff_stable_rank,
    sigma_for_interval,
    sigma_for_spacing,
    triangle_distance,
    triangle_distance_paper,
    triangle_stable_rank,
)
from .embedders import (
    BSpline,
    Embedder,
    Gaussian,
    LinearFourier,
    LogFourier,
    NeRF,
    RandomFourier,
    Rectangle,
    Sine,
    Square,
    Transformer,
    Triangle,
)

__all__ = [
    "stable_rank",
    "embedded_distance",
    "grid",
    "stable_rank_bound",
    "gaussian_stable_rank",
    "rff_stable_rank",
    "rectangle_stable_rank",
    "triangle_stable_rank",
    "bspline_stable_rank",
    "gaussian_distance",
    "rff_distance",
    "rectangle_distance",
    "triangle_distance",
    "triangle_distance_paper",
    "bspline_distance",
    "sigma_for_spacing",
    "sigma_for_interval",
    "rff_sigma_for_gaussian",
    "gaussian_sigma_for_rff",
    "stable_rank_vs_sigma",
    "stable_rank_vs_n",
    "distance_curves",
    "plot_stable_rank_vs_sigma",
    "plot_stable_rank_vs_n",
    "plot_distance",
    "label",
]

EmbedderSet = Union[Mapping[str, Embedder], Sequence[Embedder]]


# ---- numbers ----------------------------------------------------------------------------------


def grid(N: int) -> np.ndarray:
    """The papers' N coordinates linspace(0, 1, N + 1)[:-1] (float64)."""
    N = _validate.positive_int("N", N)
    return grid_coords([N])[0]


def _largest_gram_eigenvalue(A: np.ndarray, steps: int = 8) -> float:
    """||A||_2^2 from the smaller Gram matrix, applied as an operator and never formed.

    One Lanczos pass with full reorthogonalisation first: it is exact when the Krylov space
    closes early (one-hot and rank-2 embeddings, where ARPACK gives up) and often converged.
    Otherwise ARPACK (implicitly restarted Lanczos) takes over; the dense eigensolver is the
    last resort.
    """
    from scipy.sparse.linalg import ArpackError, ArpackNoConvergence, LinearOperator, eigsh

    tall = A.shape[0] >= A.shape[1]
    n = A.shape[1] if tall else A.shape[0]
    gram = (lambda v: A.T @ (A @ v)) if tall else (lambda v: A @ (A.T @ v))
    m = min(steps, n)
    Q = np.empty((n, m))
    GQ = np.empty((n, m))
    # near the Perron vector of a non-negative basis, yet not orthogonal to any eigenvector;
    # fixed, so results are reproducible
    start = 1.0 + 0.01 * np.random.default_rng(0).standard_normal(n)
    q = start / np.linalg.norm(start)
    k = 0
    while k < m:
        Q[:, k] = q
        w = gram(q)
        GQ[:, k] = w
        basis = Q[:, :k + 1]
        w = w - basis @ (basis.T @ w)
        w = w - basis @ (basis.T @ w)
        k += 1
        norm = np.linalg.norm(w)
        if norm <= 1e-12 * max(np.linalg.norm(GQ[:, k - 1]), 1e-300):
            break  # invariant subspace: the Ritz values are exact
        q = w / norm
    T = Q[:, :k].T @ GQ[:, :k]
    vals, vecs = np.linalg.eigh(0.5 * (T + T.T))
    theta = float(vals[-1])
    v = Q[:, :k] @ vecs[:, -1]
    residual = np.linalg.norm(GQ[:, :k] @ vecs[:, -1] - theta * v)
    if k < m or residual <= 1e-10 * theta:
        return theta
    op = LinearOperator((n, n), matvec=gram, dtype=np.float64)
    try:
        return float(eigsh(op, k=1, which="LA", v0=start, tol=1e-9, ncv=min(n, 40),
                           return_eigenvectors=False)[0])
    except (ArpackError, ArpackNoConvergence):  # pragma: no cover - not met on embeddings
        G = A.T @ A if tall else A @ A.T
        return float(np.linalg.eigvalsh(G)[-1])


def stable_rank(A) -> float:
    """Stable rank ||A||_F^2 / ||A||_2^2 of a 2-D array.

    As in section 4 of the complex-encoding paper (Zheng et al., ECCV 2022), the spectral norm
    squared in the denominator (docs/math/analysis.rst, "Stable rank").

    Parameters
    ----------
    A : array of shape (N, K)
        Finite, not all zero.

    Returns
    -------
    float, between 1 and min(N, K).
    """
    A = _validate.real_array("A", A)
    if A.ndim != 2:
        raise ValueError(f"A must be a 2-D array, got shape {A.shape}")
    _validate.check_array_budget("A", A.shape, 16, "pass a smaller A")
    A = np.asarray(A, dtype=np.float64)
    _validate.finite("A", A)
    fro = float(np.sum(A * A))
    if fro == 0.0:
        raise ValueError(f"A must have a non-zero entry (shape {A.shape})")
    if min(A.shape) <= 128:  # the small Gram matrix, formed and solved directly
        G = A.T @ A if A.shape[0] >= A.shape[1] else A @ A.T
        top = float(np.linalg.eigvalsh(G)[-1])
    else:
        top = _largest_gram_eigenvalue(A)
    return fro / top


def embedded_distance(embedder: Embedder, x1, x2) -> np.ndarray:
    """<Psi(x1), Psi(x2)>: the inner product of the sampled embeddings (what a fit sees).

    ``x1`` and ``x2`` are coordinates in [0, 1] of broadcastable shapes (scalars or 1-D).
    """
    if not isinstance(embedder, Embedder):
        raise TypeError(f"embedder must be a kronpe Embedder, got {_validate.describe(embedder)}")
    a = _validate.real_array("x1", x1).astype(np.float64, copy=False)
    b = _validate.real_array("x2", x2).astype(np.float64, copy=False)
    if a.ndim > 1 or b.ndim > 1:
        raise ValueError(f"x1 and x2 must be scalars or 1-D arrays, got shapes {a.shape} and {b.shape}")
    try:
        a, b = np.broadcast_arrays(a, b)
    except ValueError:
        raise ValueError(f"x1 and x2 must have broadcastable shapes, got {a.shape} and {b.shape}") from None
    shape = a.shape
    e1 = embedder(_validate.coords_1d("x1", np.ascontiguousarray(a).reshape(-1)))
    e2 = embedder(_validate.coords_1d("x2", np.ascontiguousarray(b).reshape(-1)))
    return np.einsum("nk,nk->n", e1, e2).reshape(shape)


def stable_rank_bound(embedder: Embedder, N: int) -> Optional[float]:
    """The embedder's theoretical stable rank for N coordinates, or None where theory gives none."""
    try:
        return float(embedder.stable_rank_bound(N))
    except NotImplementedError:
        return None


def _progress(total: int, progress: bool, desc: str):
    from ._progress import bar

    return bar(total, progress, desc)


def stable_rank_vs_sigma(Ns: Sequence[int], sigmas: Sequence[float], K: int, progress: bool = False) -> np.ndarray:
    """Stable rank of Gaussian(K, sigma) on N grid points: an array (len(Ns), len(sigmas))."""
    out = np.empty((len(Ns), len(sigmas)))
    with _progress(out.size, progress, "stable rank vs sigma") as bar:
        for i, N in enumerate(Ns):
            x = grid(N)
            for j, s in enumerate(sigmas):
                out[i, j] = stable_rank(Gaussian(K, float(s))(x))
                bar.update()
    return out


def _as_dict(embedders: EmbedderSet) -> Dict[str, Embedder]:
    if isinstance(embedders, Mapping):
        return dict(embedders)
    return {label(e): e for e in embedders}


def stable_rank_vs_n(embedders: EmbedderSet, Ns: Sequence[int], progress: bool = False) -> Dict[str, np.ndarray]:
    """Stable rank of each embedder on N grid points, for each N: {label: array (len(Ns),)}."""
    embedders = _as_dict(embedders)
    out = {}
    with _progress(len(embedders) * len(Ns), progress, "stable rank vs N") as bar:
        for name, emb in embedders.items():
            values = np.empty(len(Ns))
            for i, N in enumerate(Ns):
                values[i] = stable_rank(emb(grid(N)))
                bar.update()
            out[name] = values
    return out


def distance_curves(
    embedders: EmbedderSet, deltas, normalize: bool = True, sampled: bool = True, samples: int = 16
) -> Dict[str, np.ndarray]:
    """D(delta) of each embedder, divided by D(0) when ``normalize``.

    ``sampled=True`` uses the sampled embedder (``sampled_distance`` averaged over ``samples``
    positions, what a fit sees), ``False`` the closed form (``distance``).
    """
    deltas = np.asarray(deltas, dtype=np.float64)
    out = {}
    for name, emb in _as_dict(embedders).items():
        if sampled:
            d = emb.sampled_distance(np.concatenate([[0.0], deltas.ravel()]), samples=samples)
        else:
            d = emb.distance(np.concatenate([[0.0], deltas.ravel()]))
        curve = d[1:].reshape(deltas.shape)
        out[name] = curve / d[0] if normalize else curve
    return out


def has_closed_form_distance(emb: Embedder) -> bool:
    """Whether ``emb.distance`` is a closed form (docs/math/analysis.rst), not a sampled one."""
    return type(emb).distance is not Embedder.distance


def closed_form_only(embedders: EmbedderSet) -> Dict[str, Embedder]:
    """The embedders of the set whose distance has a closed form, by label."""
    return {k: e for k, e in _as_dict(embedders).items() if has_closed_form_distance(e)}


def label(emb: Embedder) -> str:
    """A short legend label: family and width parameter."""
    name = type(emb).__name__
    short = {"Gaussian": "Gau", "Triangle": "Tri", "Rectangle": "Rect", "RandomFourier": "RFF",
             "LinearFourier": "LinF", "LogFourier": "LogF", "BSpline": "B-spline"}.get(name, name)
    if isinstance(emb, (Gaussian, RandomFourier, LinearFourier, LogFourier)):
        return f"{short} σ={emb.sigma:.3g}"
    if isinstance(emb, Triangle):
        return f"{short} σ={2 * emb.width:.3g}"  # the full width, as in the papers' theory
    if isinstance(emb, Rectangle):
        return f"{short} d={emb.width:.3g}"
    if isinstance(emb, BSpline):
        return f"{short} p={emb.order} w={emb.width:.3g}"
    if isinstance(emb, (Sine, Square)):
        return f"{short} f={emb.freq:.3g}"
    if isinstance(emb, (NeRF, Transformer)):
        return f"{short} L={emb.L}"
    return short


# ---- plots ------------------------------------------------------------------------------------


def _axes(ax):
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    _, ax = plt.subplots()
    return ax


def plot_stable_rank_vs_sigma(
    ax=None,
    *,
    Ns: Sequence[int] = (16, 32, 64, 128, 256),
    sigmas: Optional[Sequence[float]] = None,
    K: int = 256,
    data: Optional[np.ndarray] = None,
    progress: bool = False,
):
    """Gaussian stable rank against sigma for several N, theory dashed.

    Figure 2 of the complex-encoding paper (Zheng et al., ECCV 2022).

    ``data`` is ``stable_rank_vs_sigma(Ns, sigmas, K)`` when already computed. Returns ``ax``.
    """
    sigmas = np.logspace(-4, -1, 13) if sigmas is None else np.asarray(sigmas, dtype=np.float64)
    ranks = stable_rank_vs_sigma(Ns, sigmas, K, progress) if data is None else np.asarray(data)
    ax = _axes(ax)
    for N, r in zip(Ns, ranks):
        ax.loglog(sigmas, r, "o-", ms=3, label=f"N={N}")
    ax.loglog(sigmas, 1.0 / (2.0 * math.sqrt(math.pi) * sigmas), "k--", label=r"$1/(2\sqrt{\pi}\sigma)$")
    ax.set_xlabel("σ (Gaussian standard deviation)")
    ax.set_ylabel("stable rank")
    ax.set_title(f"Gaussian embedder, K={K}")
    ax.legend(fontsize="small", loc="upper right")
    return ax


def plot_stable_rank_vs_n(
    embedders: EmbedderSet,
    Ns: Sequence[int],
    ax=None,
    *,
    data: Optional[Mapping[str, np.ndarray]] = None,
    theory: bool = True,
    progress: bool = False,
):
    """Stable rank against the number of coordinates N.

    Figures 3a and 4 (left) of the complex-encoding paper (Zheng et al., ECCV 2022).

    Theory (where the embedder has one) is drawn dashed in the same colour. Returns ``ax``.
    """
    embedders = _as_dict(embedders)
    ranks = stable_rank_vs_n(embedders, Ns, progress) if data is None else data
    ax = _axes(ax)
    Ns = np.asarray(Ns)
    for name, emb in embedders.items():
        (line,) = ax.loglog(Ns, ranks[name], "o-", ms=3, label=name)
        bound = [stable_rank_bound(emb, int(N)) for N in Ns]
        if theory and bound[0] is not None:
            ax.loglog(Ns, bound, "--", color=line.get_color(), lw=1)
    ax.set_xlabel("N (sampled coordinates)")
    ax.set_ylabel("stable rank")
    ax.legend(fontsize="small", loc="upper left")
    return ax


def plot_distance(
    embedders: EmbedderSet,
    deltas=None,
    ax=None,
    *,
    data: Optional[Mapping[str, np.ndarray]] = None,
    theory: bool = True,
):
    """Normalised embedded distance D(delta) / D(0).

    Figures 3b and 4 (right) of the complex-encoding paper (Zheng et al., ECCV 2022).

    Solid: the sampled embedder; dashed: the closed form where there is one. Returns ``ax``.
    """
    embedders = _as_dict(embedders)
    deltas = np.linspace(-0.5, 0.5, 401) if deltas is None else np.asarray(deltas, dtype=np.float64)
    curves = distance_curves(embedders, deltas) if data is None else data
    closed = distance_curves(closed_form_only(embedders), deltas, sampled=False) if theory else {}
    ax = _axes(ax)
    for name, emb in embedders.items():
        (line,) = ax.plot(deltas, curves[name], label=name)
        if name in closed:
            ax.plot(deltas, closed[name], "--", color=line.get_color(), lw=1)
    ax.set_xlabel("δ = x1 − x2")
    ax.set_ylabel("D(δ) / D(0)")
    ax.legend(fontsize="small", loc="upper right")
    return ax
