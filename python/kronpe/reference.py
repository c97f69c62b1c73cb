"""NumPy oracles: slow, obvious implementations that every compiled kernel is tested against.

Nothing here is on a hot path. Dense Kronecker products and dense blending matrices are
allowed here and in tests only (docs/design.rst, "The habits these follow").
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from . import _formulas

# ---- BLAS --------------------------------------------------------------------------------


def gemm(a: np.ndarray, b: np.ndarray, trans_a: bool = False, trans_b: bool = False) -> np.ndarray:
    """op(a) @ op(b) in float64."""
    a = a.T if trans_a else a
    b = b.T if trans_b else b
    return a.astype(np.float64) @ b.astype(np.float64)


def strided_copy(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """dst[...] = src[...] element by element (``_core.strided_copy``'s reference); returns dst."""
    if src.shape != dst.shape or src.dtype != dst.dtype:
        raise ValueError("strided_copy: src and dst differ in shape or dtype")
    for i in np.ndindex(*src.shape):
        dst[i] = src[i]
    return dst


# ---- embedders ---------------------------------------------------------------------------
# The obvious NumPy formulas of docs/math/embedders.rst, evaluated in float64 and rounded once to
# the input's dtype (as the compiled kernels do). Arguments mirror kronpe._core.embed_basis /
# embed_fourier; kronpe.embedders builds them from an embedder (``Embedder._kernel_args``).


def gemm_blocks(a: np.ndarray, b: np.ndarray, blocks, c: np.ndarray, trans_a: bool = False,
                trans_b: bool = False) -> np.ndarray:
    """c[r0:r1] = op(a)[r0:r1, c0:c1] @ op(b)[c0:c1] in float64 for each (r0, r1, c0, c1) of
    ``blocks`` (``_core.packed_gemm_blocks``' reference); rows of c outside every block are kept."""
    a = a.T if trans_a else a
    b = b.T if trans_b else b
    out = np.array(c, dtype=np.float64)
    for r0, r1, c0, c1 in np.asarray(blocks, dtype=np.int64).reshape(-1, 4):
        out[r0:r1] = a[r0:r1, c0:c1].astype(np.float64) @ b[c0:c1].astype(np.float64)
    return out


def inverse(a: np.ndarray) -> np.ndarray:
    """The inverse of a square matrix in float64 (``_core.invert_in_place``'s reference); a
    singular one raises numpy.linalg.LinAlgError."""
    return np.linalg.inv(np.asarray(a, np.float64))


def bspline_truncated_power(u: np.ndarray, degree: int) -> np.ndarray:
    """Centred cardinal B-spline of degree p by its definition as a sum of truncated powers
    (``kronpe._formulas.bspline_truncated_power``): the test oracle of the kernels' recursion."""
    return _formulas.bspline_truncated_power(np.asarray(u, dtype=np.float64), degree, np.where)


def _splitmix64(z: np.ndarray) -> np.ndarray:
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def random_noise(x: np.ndarray, K: int, seed: int) -> np.ndarray:
    """(N, K) uniform noise in [-1, 1) keyed by (seed, float64 bits of x, k), in float64."""
    bits = (np.asarray(x, dtype=np.float64) + 0.0).view(np.uint64)  # + 0.0: -0.0 -> +0.0
    seed_mix = _splitmix64(np.array([seed], dtype=np.uint64))
    row = _splitmix64(bits ^ seed_mix)
    h = _splitmix64(row[:, None] + np.arange(K, dtype=np.uint64)[None, :])
    return 2.0 * ((h >> np.uint64(11)).astype(np.float64) * 2.0**-53) - 1.0


def flush_subnormal(a: np.ndarray) -> np.ndarray:
    """a (a new array, floating point) with its subnormal entries set to 0: how the embedders
    store their values."""
    a[np.abs(a) < np.finfo(a.dtype).tiny] = 0
    return a


def embed_basis(
    x: np.ndarray,  # (N,)
    kind: str,
    K: int,
    first_index: int,
    K_base: float,
    param: float,
    degree: int = 3,
    seed: int = 0,
) -> np.ndarray:  # (N, K)
    """Shifted-basis, impulse and random embedders: column k has centre (k + first_index) / K_base."""
    dtype = x.dtype
    xd = np.asarray(x, dtype=np.float64)
    t = np.arange(first_index, first_index + K, dtype=np.float64) / K_base
    u = xd[:, None] - t[None, :]
    if kind == "gaussian":
        out = np.exp(-(u * u) / (2.0 * (param * param)))
    elif kind == "triangle":
        out = np.maximum(1.0 - np.abs(u) / param, 0.0)
    elif kind == "rectangle":
        out = (np.abs(u) < 0.5 * param).astype(np.float64)
    elif kind == "sine":
        out = np.sin(param * (t[None, :] - xd[:, None]))
    elif kind == "square":
        out = np.sign(np.sin(param * (t[None, :] - xd[:, None])))
    elif kind == "bspline":
        out = bspline_truncated_power(u / param, degree)
    elif kind == "impulse":
        col = np.clip(np.floor(xd * K_base + 0.5) - first_index, 0, K - 1).astype(np.int64)
        out = np.zeros((xd.size, K))
        out[np.arange(xd.size), col] = 1.0
    elif kind == "random":
        out = random_noise(xd, K, seed)
    else:
        raise ValueError(f"unknown basis kind {kind!r}")
    return flush_subnormal(out.astype(dtype))


def embed_fourier(
    x: np.ndarray,  # (N,)
    omega: np.ndarray,  # (F,) radians per unit of x
    layout: str = "blocks",
    include_input: bool = False,
    amplitude: float = 1.0,
) -> np.ndarray:  # (N, 2F [+1])
    """Fourier features: blocks [cos(w x), sin(w x)] or interleaved [sin, cos, sin, cos, ...]."""
    dtype = x.dtype
    xd = np.asarray(x, dtype=np.float64)
    a = xd[:, None] * np.asarray(omega, dtype=np.float64)[None, :]
    c, s = amplitude * np.cos(a), amplitude * np.sin(a)
    if layout == "blocks":
        feats = np.concatenate([c, s], axis=1)
    elif layout == "interleaved":
        feats = np.stack([s, c], axis=2).reshape(xd.size, 2 * a.shape[1])
    else:
        raise ValueError(f"unknown layout {layout!r}")
    feats = flush_subnormal(feats.astype(dtype))
    if include_input:
        feats = np.concatenate([xd[:, None].astype(dtype), feats], axis=1)
    return feats

# ---- mode-n products and grid fits ---------------------------------------------------------


_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def mode_product(T: np.ndarray, A: np.ndarray, mode: int) -> np.ndarray:
    """T x_mode A by numpy.einsum, in float64: A (m, n_mode) replaces axis ``mode`` by m."""
    return multi_mode_product(T, [A], [mode])


def multi_mode_product(T: np.ndarray, matrices, modes=None, optimize: bool = False) -> np.ndarray:
    """The chain T x_{modes[0]} matrices[0] ... by one numpy.einsum call, in float64.

    ``optimize=True`` lets einsum pick a pairwise contraction order (the baseline benchmarks
    compare against); the default sums the whole expression at once (the obvious oracle).
    """
    T = np.asarray(T, dtype=np.float64)
    modes = list(range(len(matrices))) if modes is None else [int(m) % T.ndim for m in modes]
    d = T.ndim
    t_idx = list(_LETTERS[:d])
    out_idx = list(t_idx)
    terms = []
    for j, k in enumerate(modes):
        new = _LETTERS[d + j]
        terms.append(new + t_idx[k])
        out_idx[k] = new
    spec = ",".join(terms + ["".join(t_idx)]) + "->" + "".join(out_idx)
    mats = [np.asarray(a, dtype=np.float64) for a in matrices]
    return np.einsum(spec, *mats, T, optimize=optimize)


def kron_matrix(phis) -> np.ndarray:
    """Phi_1 (x) ... (x) Phi_D: (prod N_i, prod K_i), rows and columns in C order (tests only)."""
    out = np.ones((1, 1))
    for phi in phis:
        out = np.kron(out, np.asarray(phi, dtype=np.float64))
    return out


def embed_padded(embedder, coords, pad: int = 0) -> np.ndarray:
    """Phi at coords mirrored by `pad` samples about each end (psi(x - t_k) beyond [0, 1]).

    The matching signal is np.pad(S, pad, mode="reflect", reflect_type="odd") on the grid axes.
    """
    c = np.asarray(coords, dtype=np.float64)
    if pad:
        c = np.concatenate([2 * c[0] - c[pad:0:-1], c, 2 * c[-1] - c[-2 : -2 - pad : -1]])
    return np.asarray(embedder.psi(c[:, None] - embedder.centres[None, :]), dtype=np.float64)


def grid_ridge_fit(signal, phis, ridge: float) -> np.ndarray:
    """W (K_1..K_D, *channels) minimising ||S - W x_i Phi_i||^2 + ridge ||W||^2, densely.

    ridge = 0 is the minimum-norm solution by scipy.linalg.pinv (default cutoff).
    """
    from scipy.linalg import pinv

    D = len(phis)
    S = np.asarray(signal, dtype=np.float64)
    A = kron_matrix(phis)
    rhs = S.reshape(A.shape[0], -1)
    if ridge > 0:
        w = np.linalg.solve(A.T @ A + ridge * np.eye(A.shape[1]), A.T @ rhs)
    else:
        w = pinv(A) @ rhs
    return w.reshape(tuple(p.shape[1] for p in phis) + S.shape[D:])


def gcv_scores(m, count, w, ridges, rss0: float, n: float) -> np.ndarray:
    """GCV at each ridge of a curve over products m of squared singular values (counts, squared
    projections w): f = lam / (m + lam), n (rss0 + sum f^2 w) / (n - sum (1 - f) count)^2
    (kronpe.solvers.gcv; the kernel _core.gcv_scores)."""
    m, count, w = (np.asarray(a, np.float64).ravel() for a in (m, count, w))
    lam = np.asarray(ridges, np.float64).ravel()[:, None]
    f = lam / (m[None, :] + lam)
    rss = rss0 + (f * f) @ w
    dof = n - (count.sum() - f @ count)
    return n * rss / np.maximum(dof, 1e-300) ** 2


def grid_gcv(signal, phis, ridge: float) -> float:
    """Explicit hat-matrix GCV: n ||(I - H) s||^2 / (n - tr H)^2, H = A (A^T A + ridge I)^-1 A^T,
    residuals summed over the channels (one shared ridge)."""
    D = len(phis)
    S = np.asarray(signal, dtype=np.float64)
    A = kron_matrix(phis)
    rhs = S.reshape(A.shape[0], -1)
    H = A @ np.linalg.solve(A.T @ A + ridge * np.eye(A.shape[1]), A.T)
    n = A.shape[0]
    r = rhs - H @ rhs
    return float(n * np.sum(r * r) / (n - np.trace(H)) ** 2)


# ---- blending matrix and scattered fits ----------------------------------------------------


def blend_axis_weights(q: np.ndarray,  # (P,) coordinates
                       nodes: np.ndarray,  # (M,) increasing grid nodes
                       distance=None, normalize: bool = True, rcond: float = 1e-8,
                       tiny: float = 1e-12):
    """The blending weights (docs/math/scattered.rst) along one axis: cell j (P,), weights (P, 2).

    One 2x2 solve per point.

    Between g0 = nodes[j] <= q <= g1 = nodes[j + 1] (j capped at M - 2, q clamped onto the
    nodes' range), h = g1 - g0, beta = (q - g0) / h:
    alpha = [[D(0), D(h)], [D(h), D(0)]]^-1 [D(beta h), D((1 - beta) h)].
    ``distance=None``, a system with det <= rcond D(0)^2, or (normalised) a pair summing to
    less than ``tiny`` give linear weights (1 - beta, beta).
    """
    q = np.clip(np.asarray(q, dtype=np.float64), nodes[0], nodes[-1])
    nodes = np.asarray(nodes, dtype=np.float64)
    j = np.array([min(max(int(np.sum(nodes <= x)) - 1, 0), nodes.size - 2) for x in q], dtype=np.int64)
    h = nodes[j + 1] - nodes[j]
    beta = (q - nodes[j]) / h
    linear = np.stack([1.0 - beta, beta], axis=1)
    if distance is None:
        return j, linear
    D = lambda d: np.asarray(distance(np.asarray(d, dtype=np.float64)), dtype=np.float64)  # noqa: E731
    d0 = D(np.zeros(1))[0]
    out = linear.copy()
    for p in range(q.size):
        dh = D(np.array([h[p]]))[0]
        A = np.array([[d0, dh], [dh, d0]])
        if not np.linalg.det(A) > rcond * d0 * d0:
            continue
        rhs = D(np.array([beta[p] * h[p], (1.0 - beta[p]) * h[p]]))
        alpha = np.linalg.solve(A, rhs)
        if normalize:
            s = alpha.sum()
            if not abs(s) > tiny:
                continue
            alpha = alpha / s
        out[p] = alpha
    return j, out


def blend_matrix(points: np.ndarray,  # (P, D)
                 nodes: list,  # D arrays of node coordinates
                 distances: list,  # D callables delta -> D(delta), or None (linear)
                 normalize: bool = True) -> np.ndarray:
    """The dense blending matrix (P, prod M_i), row-major over the grid (tests only)."""
    points = np.asarray(points, dtype=np.float64)
    shape = tuple(len(n) for n in nodes)
    B = np.zeros((points.shape[0], int(np.prod(shape))))
    per_axis = [blend_axis_weights(points[:, i], nodes[i], distances[i], normalize)
                for i in range(len(nodes))]
    for p in range(points.shape[0]):
        for corner in np.ndindex(*([2] * len(nodes))):
            idx = tuple(int(per_axis[i][0][p]) + c for i, c in enumerate(corner))
            w = np.prod([per_axis[i][1][p, c] for i, c in enumerate(corner)])
            B[p, np.ravel_multi_index(idx, shape)] += w
    return B


def blend_factors(points: np.ndarray,  # (P, D)
                  nodes: list,  # D arrays of node coordinates
                  distances: list,  # D callables delta -> D(delta), or None (linear)
                  normalize: bool = True):
    """The factored form of B: base (P, 1), the row-major flat index of each point's first
    corner, and pairs (P, 2D), its weight pair along axis i in columns 2i and 2i + 1; corner c
    of the point is base + sum_i bit_i(c) stride_i with weight prod_i pairs[2i + bit_i(c)]
    (bit_0 the most significant)."""
    points = np.asarray(points, dtype=np.float64)
    P, D = points.shape
    shape = tuple(len(n) for n in nodes)
    strides = [int(np.prod(shape[i + 1:])) for i in range(D)]
    base = np.zeros((P, 1), np.int64)
    pairs = np.empty((P, 2 * D))
    for i in range(D):
        j, w = blend_axis_weights(points[:, i], nodes[i], distances[i], normalize)
        base[:, 0] += j * strides[i]
        pairs[:, 2 * i: 2 * i + 2] = w
    return base, pairs


def blend(points, nodes, distances, grid_values, normalize: bool = True) -> np.ndarray:
    """B @ grid_values (grid_values (G,) or (G, C)) with the dense B, in float64."""
    return blend_matrix(points, nodes, distances, normalize) @ np.asarray(grid_values, np.float64)


def blend_transpose(points, nodes, distances, values, normalize: bool = True) -> np.ndarray:
    """B^T @ values (values (P,) or (P, C)) with the dense B, in float64."""
    return blend_matrix(points, nodes, distances, normalize).T @ np.asarray(values, np.float64)


def fit_points(points: np.ndarray,  # (P, D)
               values: np.ndarray,  # (P,) or (P, C)
               embedders: list, nodes: list, ridge: float, normalize: bool = True) -> np.ndarray:
    """Exact ridge fit at scattered points with a dense Kronecker product (small sizes only).

    Minimises ||B vec(W x_i Psi(g_i)) - s||^2 + ridge ||W||^2 by a least-squares solve of the
    stacked system [A; sqrt(ridge) I] w = [s; 0] with A = B (Psi(g_1) kron ... kron Psi(g_D)).
    Returns W of shape (K_1, ..., K_D) + values.shape[1:].
    """
    values = np.asarray(values, dtype=np.float64)
    B = blend_matrix(points, nodes, [e.distance for e in embedders], normalize)
    K = np.ones((1, 1))
    for e, n in zip(embedders, nodes):
        K = np.kron(K, np.asarray(e(np.asarray(n, np.float64)), np.float64))
    A = B @ K
    n = A.shape[1]
    s = values.reshape(values.shape[0], -1)
    A_aug = np.vstack([A, np.sqrt(ridge) * np.eye(n)])
    s_aug = np.vstack([s, np.zeros((n, s.shape[1]))])
    W, *_ = np.linalg.lstsq(A_aug, s_aug, rcond=None)
    return W.reshape(tuple(e.K for e in embedders) + values.shape[1:])


# ---- difference penalties ------------------------------------------------------------------


def difference_matrix(K: int, order: int) -> np.ndarray:
    """The (K - order, K) matrix of order-th differences, row by row from binomial coefficients."""
    from math import comb

    D = np.zeros((max(K - order, 0), K))
    for r in range(D.shape[0]):
        for j in range(order + 1):
            D[r, r + j] = (-1) ** (order - j) * comb(order, j)
    return D


def penalty_matrix(Ks, order: int, mixed: bool = False, boundary: str = "natural", weights=None) -> np.ndarray:
    """R = sum_i w_i^q I (x) .. D_i^T D_i .. (x) I, dense; with ``mixed``, the sum over every
    (a_1, .., a_D) >= 0 with sum q of q! / prod(a_i!) prod(w_i^a_i) (x)_i D_(a_i)^T D_(a_i)
    (D_0 = I); ``boundary="reflect"``: D_a^T D_a = L^a, L = -M the Laplacian of the grid mirrored at
    its ends (M the second differences with ghost nodes u[-1] = u[0], u[K] = u[K-1])."""
    D = len(Ks)
    w = [1.0] * D if weights is None else [float(v) for v in weights]

    def gram(K, a):
        if a == 0:
            return np.eye(K)
        if boundary == "reflect" and a >= 2:
            return np.linalg.matrix_power(-_mirrored_second_differences(K), a)
        d = difference_matrix(K, a)
        return d.T @ d

    def kron_all(factors):
        out = np.ones((1, 1))
        for f in factors:
            out = np.kron(out, f)
        return out

    if mixed:
        alphas = [a for a in itertools.product(range(order + 1), repeat=D) if sum(a) == order]
    else:
        alphas = [tuple(order if j == i else 0 for j in range(D)) for i in range(D)]
    R = np.zeros((int(np.prod(Ks)),) * 2)
    for a in alphas:
        coef = float(np.prod([w[i] ** a[i] for i in range(D)]))
        if mixed:
            coef *= math.factorial(order) / np.prod([math.factorial(ai) for ai in a])
        R += coef * kron_all([gram(K, ai) for K, ai in zip(Ks, a)])
    return R


def _mirrored_second_differences(K: int) -> np.ndarray:
    """(K, K): row k = u[k-1] - 2 u[k] + u[k+1] with u[-1] = u[0] and u[K] = u[K-1]."""
    D = np.zeros((K, K))
    for k in range(K):
        for j, c in ((k - 1, 1.0), (k, -2.0), (k + 1, 1.0)):
            D[k, min(max(j, 0), K - 1)] += c
    return D


def penalised_solve(A: np.ndarray, y: np.ndarray, ridge: float, R: np.ndarray) -> np.ndarray:
    """w solving (A^T A + ridge R) w = A^T y densely (y (n,) or (n, C)), least squares if singular."""
    A = np.asarray(A, np.float64)
    y = np.asarray(y, np.float64)
    w, *_ = np.linalg.lstsq(A.T @ A + ridge * R, A.T @ y, rcond=None)
    return w


def grid_penalised_fit(signal, phis, ridge: float, order: int, mixed: bool = False, mask=None,
                       boundary: str = "natural", weights=None) -> np.ndarray:
    """W (K_1..K_D, *channels) of the penalised grid fit, densely; ``mask`` (N..) True = observed."""
    D = len(phis)
    S = np.asarray(signal, dtype=np.float64)
    A = kron_matrix(phis)
    y = S.reshape(A.shape[0], -1)
    if mask is not None:
        keep = np.asarray(mask, bool).ravel()
        A, y = A[keep], y[keep]
    Ks = [p.shape[1] for p in phis]
    w = penalised_solve(A, y, ridge, penalty_matrix(Ks, order, mixed, boundary, weights))
    return w.reshape(tuple(Ks) + S.shape[D:])


def points_penalised_fit(points, values, embedders, nodes, ridge: float, order: int, mixed: bool = False,
                         normalize: bool = True, boundary: str = "natural", weights=None) -> np.ndarray:
    """W of the penalised scattered fit, densely; ``embedders=None``: W is the grid's values,
    blended multilinearly."""
    values = np.asarray(values, dtype=np.float64)
    D = len(nodes)
    dists = [None] * D if embedders is None else [e.distance for e in embedders]
    A = blend_matrix(points, nodes, dists, normalize)
    if embedders is not None:
        A = A @ kron_matrix([np.asarray(e(np.asarray(n, np.float64)), np.float64) for e, n in zip(embedders, nodes)])
    Ks = [len(n) for n in nodes] if embedders is None else [e.K for e in embedders]
    w = penalised_solve(A, values.reshape(values.shape[0], -1), ridge,
                        penalty_matrix(Ks, order, mixed, boundary, weights))
    return w.reshape(tuple(Ks) + values.shape[1:])


# ---- the thin-plate operator and the multigrid transfers (kronpe.solvers.multigrid) -----------------


def thin_plate_matrix(shape, mask, lam: float, reflect: bool = False, order: int = 2, weights=None,
                      top: float = 1.0, tail: float = 0.0) -> np.ndarray:
    """A = diag(mask) + lam R, R the thin-plate penalty (``penalty_matrix(shape, 2, mixed=True)``,
    ``boundary="reflect"`` with ``reflect``); with ``order`` 3, ``weights`` or a polynomial (``top``,
    ``tail``; mirrored only), the Laplacian-power form ``top penalty_matrix(shape, order, True,
    "reflect", weights) + tail penalty_matrix(shape, order - 1, True, "reflect", weights)`` = top
    (sum_i w_i L_i)^order + tail (sum_i w_i L_i)^(order - 1)."""
    shape = tuple(int(n) for n in shape)
    boundary = "reflect" if reflect else "natural"
    R = top * penalty_matrix(shape, order, mixed=True, boundary=boundary, weights=weights)
    if tail:
        R = R + tail * penalty_matrix(shape, order - 1, mixed=True, boundary=boundary, weights=weights)
    return np.diag(np.asarray(mask, np.float64).ravel()) + lam * R


def thin_plate_apply(x, mask, lam: float, reflect: bool = False, order: int = 2, weights=None, top: float = 1.0,
                     tail: float = 0.0) -> np.ndarray:
    """A x (the grid's shape)."""
    x = np.asarray(x, np.float64)
    return (thin_plate_matrix(x.shape, mask, lam, reflect, order, weights, top, tail) @ x.ravel()).reshape(x.shape)


def thin_plate_cheb_start(x, b, mask, lam: float, theta: float, reflect: bool = False, order: int = 2, weights=None,
                          top: float = 1.0, tail: float = 0.0):
    """(r, d): r = (b - A x) / diag(A), d = r / theta (x None: zero)."""
    b = np.asarray(b, np.float64)
    A = thin_plate_matrix(b.shape, mask, lam, reflect, order, weights, top, tail)
    ax = 0.0 if x is None else A @ np.asarray(x, np.float64).ravel()
    r = ((b.ravel() - ax) * _inverse_diag(A)).reshape(b.shape)
    return r, r / theta


def thin_plate_cheb_step(d, r, x, mask, lam: float, c1: float, c2: float, reflect: bool = False, order: int = 2,
                         weights=None, top: float = 1.0, tail: float = 0.0):
    """(r', x', d'): x' = x + d, r' = r - (A d) / diag(A), d' = c1 d + c2 r'."""
    d = np.asarray(d, np.float64)
    A = thin_plate_matrix(d.shape, mask, lam, reflect, order, weights, top, tail)
    r2 = np.asarray(r, np.float64) - ((A @ d.ravel()) * _inverse_diag(A)).reshape(d.shape)
    return r2, np.asarray(x, np.float64) + d, c1 * d + c2 * r2


def _inverse_diag(A: np.ndarray) -> np.ndarray:
    """1 / diag(A), 0 where the diagonal is 0 (a node with no data and no penalty)."""
    d = np.diag(A)
    return np.where(d > 0, 1.0 / np.where(d > 0, d, 1.0), 0.0)


def interpolation_matrix(n: int) -> np.ndarray:
    """P (n, n // 2 + 1): linear interpolation from coarse node j at fine node 2 j."""
    P = np.zeros((n, n // 2 + 1))
    for k in range(n):
        P[k, k // 2] += 1.0 if k % 2 == 0 else 0.5
        if k % 2:
            P[k, k // 2 + 1] += 0.5
    return P


def grid_transfer(src, axis: int, restrict: bool, n: int) -> np.ndarray:
    """P^T src (restrict; src has n nodes along axis) or P src (prolong to n nodes) along axis."""
    P = interpolation_matrix(n)
    M = P.T if restrict else P
    return np.moveaxis(np.tensordot(M, np.asarray(src, np.float64), axes=([1], [axis])), 0, axis)



def thin_plate_hierarchy(m, coarsest: int = 64):
    """The multigrid grids of diag(m) + lam R: [(m_l, halved axes_l)], finest first; each coarser
    grid halves every axis of >= 3 nodes (P^T along each in turn) until at most ``coarsest``
    nodes remain or none can be halved."""
    m = np.asarray(m, np.float64)
    out = []
    while True:
        axes = tuple(a for a, n in enumerate(m.shape) if n >= 3)
        if m.size <= coarsest or not axes:
            out.append((m, ()))
            return out
        out.append((m, axes))
        for a in axes:
            m = grid_transfer(m, a, True, m.shape[a])


def _chebyshev_smooth(x, b, m, lam, degree, lmax, alpha, pen):
    """``degree`` Chebyshev steps on diag(A)^-1 A over [lmax / alpha, lmax] from x (None: 0);
    pen: (reflect, order, weights, top, tail)."""
    lo, hi = lmax / alpha, lmax
    theta, delta = (hi + lo) / 2, (hi - lo) / 2
    sigma = theta / delta
    rho = 1 / sigma
    x = np.zeros_like(b) if x is None else x.copy()
    r, d = thin_plate_cheb_start(x, b, m, lam, theta, *pen)
    for _ in range(degree - 1):
        rho_n = 1 / (2 * sigma - rho)
        r, x, d = thin_plate_cheb_step(d, r, x, m, lam, rho_n * rho, 2 * rho_n / delta, *pen)
        rho = rho_n
    return x + d


def _coarse_penalty(lam, axes, pen):
    """lam and pen of the next coarser grid: lam 2^c / 16 (c the halved axes); in the
    Laplacian-power form (order 3, weights or a polynomial) lam 2^c and the halved axes' weights / 4
    (each power of L_w then rediscretised)."""
    reflect, order, weights, top, tail = pen
    if order == 2 and weights is None and top == 1.0 and tail == 0.0:
        return lam * 2.0 ** len(axes) / 16, pen
    w = [wi / 4 if a in axes else wi for a, wi in enumerate(weights if weights is not None else (1.0,) * 3)]
    return lam * 2.0 ** len(axes), (reflect, order, w, top, tail)


def thin_plate_vcycle(b, m, lam: float, degree: int = 3, lmax: float = 4.0, alpha: float = 8.0,
                      coarsest: int = 64, level: int = 0, levels=None, reflect: bool = False, order: int = 2,
                      weights=None, top: float = 1.0, tail: float = 0.0) -> np.ndarray:
    """One V-cycle from zero for diag(m) + lam R (kronpe/multigrid.h), with dense matrices: the
    same Chebyshev smoothing before and after the coarse correction, lam_c = lam 2^c / 16 (c the
    halved axes; the Laplacian-power form: ``_coarse_penalty``), the coarsest grid solved densely
    (+ 1e-10 max|A| on the diagonal)."""
    levels = thin_plate_hierarchy(m, coarsest) if levels is None else levels
    b = np.asarray(b, np.float64)
    mm, axes = levels[level]
    pen = (reflect, order, None if weights is None else [float(v) for v in weights], top, tail)
    if level == len(levels) - 1:
        A = thin_plate_matrix(mm.shape, mm, lam, *pen)
        A += 1e-10 * max(np.abs(A).max(), 1e-300) * np.eye(A.shape[0])
        return np.linalg.solve(A, b.ravel()).reshape(b.shape)
    x = _chebyshev_smooth(None, b, mm, lam, degree, lmax, alpha, pen)
    res = b - thin_plate_apply(x, mm, lam, *pen)
    for a in axes:
        res = grid_transfer(res, a, True, res.shape[a])
    lam_c, pen_c = _coarse_penalty(lam, axes, pen)
    e = thin_plate_vcycle(res, m, lam_c, degree, lmax, alpha, coarsest, level + 1, levels, *pen_c)
    for a in reversed(axes):
        e = grid_transfer(e, a, False, mm.shape[a])
    return _chebyshev_smooth(x + e, b, mm, lam, degree, lmax, alpha, pen)


def thin_plate_fmg(b, m, lam: float, cycles: int = 1, degree: int = 3, lmax: float = 4.0, alpha: float = 8.0,
                   coarsest: int = 64, reflect: bool = False, order: int = 2, weights=None, top: float = 1.0,
                   tail: float = 0.0) -> np.ndarray:
    """Full multigrid from zero: b restricted to every grid, the coarsest solved, then on each finer
    grid the prolonged solution corrected by ``cycles`` V-cycles (of that grid's hierarchy)."""
    levels = thin_plate_hierarchy(m, coarsest)
    bs, lams = [np.asarray(b, np.float64)], [lam]
    pens = [(reflect, order, None if weights is None else [float(v) for v in weights], top, tail)]
    for mm, axes in levels[:-1]:
        c = bs[-1]
        for a in axes:
            c = grid_transfer(c, a, True, c.shape[a])
        bs.append(c)
        lam_c, pen_c = _coarse_penalty(lams[-1], axes, pens[-1])
        lams.append(lam_c)
        pens.append(pen_c)
    x = thin_plate_vcycle(bs[-1], m, lams[-1], degree, lmax, alpha, coarsest, len(levels) - 1, levels, *pens[-1])
    for lev in range(len(levels) - 2, -1, -1):
        mm, axes = levels[lev]
        for a in reversed(axes):
            x = grid_transfer(x, a, False, mm.shape[a])
        for _ in range(cycles):
            x = x + thin_plate_vcycle(bs[lev] - thin_plate_apply(x, mm, lams[lev], *pens[lev]), m, lams[lev], degree,
                                      lmax, alpha, coarsest, lev, levels, *pens[lev])
    return x


def masked_fill(s, mask, planar: bool = False):
    """(s where mask else 0 ((C, n) with planar), per-channel min and max of the observed values
    (+inf/-inf when none), how many observed values are NaN or Inf): ``_core.masked_fill`` of s
    (n, C) and mask (n,)."""
    s = np.asarray(s)
    on = np.asarray(mask, bool)
    obs = s[on]
    with np.errstate(invalid="ignore"):
        lo = obs.min(axis=0) if obs.shape[0] else np.full(s.shape[1], np.inf)
        hi = obs.max(axis=0) if obs.shape[0] else np.full(s.shape[1], -np.inf)
    out = np.where(on[:, None], s, 0).astype(s.dtype)
    return (np.ascontiguousarray(out.T) if planar else out), lo, hi, int(np.count_nonzero(~np.isfinite(obs)))


def lattice_count(x, probe: int, rtol: float, tol: float) -> int:
    """n when every coordinate of x (P,) is a multiple k h of h = 1 / n, 0 <= k <= n, h the
    smallest gap between distinct coordinates; else 0 (``_core.lattice_count``): h from the sorted
    subset x[::P // probe] when P > 2 probe, kept when every coordinate is a multiple of it and no
    two distinct ones round to the same multiple, else from all of them; 1 / h within rtol (1 / h)
    of an integer, |x / h - rint(x / h)| <= tol. Any non-finite coordinate: 0."""
    x = np.asarray(x, np.float64)
    if not np.all(np.isfinite(x)):
        return 0

    def step(u):
        gaps = np.diff(np.sort(u))
        gaps = gaps[gaps > 0]
        if gaps.size == 0:
            return 0.0
        h = float(gaps.min())
        if not 1.0 / h <= 2.0 ** 52:  # no integer count beyond 2^52
            return 0.0
        return 0.0 if abs(1.0 / h - np.rint(1.0 / h)) > rtol * (1.0 / h) else h

    def multiples(h, unique):
        k = x / h
        r = np.rint(k)
        if x.size and (np.abs(k - r).max() > tol or r.min() < 0 or r.max() > np.rint(1.0 / h)):
            return False
        if unique:  # (a dict: the kernel's array or map of the first coordinate on each multiple)
            first = {}
            for ri, xi in zip(r.tolist(), x.tolist()):
                if first.setdefault(ri, xi) != xi:
                    return False
        return True

    P = x.size
    if P > 2 * probe:
        h = step(x[:: P // probe])
        if h > 0 and multiples(h, True):
            return int(np.rint(1.0 / h))
    h = step(x)
    return int(np.rint(1.0 / h)) if h > 0 and multiples(h, False) else 0


def lattice_index(points, n, origin, scale, nodes=None):
    """(flat C-order node indices (P,) int64, the first point off its nodes or P)
    (``_core.lattice_index``): k_a = rint((x_a - origin[a]) scale[a]) clamped to [0, n[a] - 1]
    (NaN: 0); with ``nodes`` (per axis, n[a] float64 values) a point passes only when every
    coordinate equals its node's value (the indices from that point on are left out)."""
    pts = np.asarray(points, np.float64)
    P, D = pts.shape
    flat = np.zeros(P, np.int64)
    ok = np.ones(P, bool)
    for a in range(D):
        k = np.rint((pts[:, a] - origin[a]) * scale[a])
        k = np.where(np.isnan(k), 0, np.clip(k, 0, n[a] - 1)).astype(np.int64)
        if nodes is not None:
            ok &= np.asarray(nodes[a], np.float64)[k] == pts[:, a]
        flat = flat * n[a] + k
    first = int(np.argmin(ok)) if not ok.all() else P
    return flat[:first], first


def lattice_sums(flat, values, G: int):
    """(counts (G,), sums (C, G)) in the values' dtype (``_core.lattice_sums``): how many points
    have each flat index and the sums of their values (P, C), in float64 then rounded (the kernel
    adds in the values' dtype in the points' order: the same for up to two points per node)."""
    values = np.asarray(values)
    counts = np.bincount(flat, minlength=G).astype(values.dtype)
    sums = np.stack([np.bincount(flat, weights=values[:, c], minlength=G) for c in range(values.shape[1])]) \
        if values.shape[1] else np.zeros((0, G))
    return counts, sums.astype(values.dtype).reshape(values.shape[1], G)


def mix_channels(inputs, v, lo=None, hi=None):
    """(outputs [sum_k v[k, c] inputs[k] for c], how many values fell outside [lo[c], hi[c]])
    (``_core.mix_channels``): the terms added in k order in the inputs' dtype, each output clipped
    to its range when lo and hi are given."""
    v = np.asarray(v)
    outs, outside = [], 0
    for c in range(v.shape[1]):
        acc = inputs[0] * inputs[0].dtype.type(v[0, c])
        for k in range(1, len(inputs)):
            acc = acc + inputs[k] * inputs[k].dtype.type(v[k, c])
        if lo is not None:
            outside += int(np.count_nonzero(acc < lo[c])) + int(np.count_nonzero(acc > hi[c]))
            acc = np.minimum(np.maximum(acc, acc.dtype.type(lo[c])), acc.dtype.type(hi[c]))
        outs.append(acc)
    return outs, outside


def dots(arrays) -> np.ndarray:
    """(c, c) inner products of the arrays, in float64 (``_core.dots``)."""
    a = [np.asarray(x, np.float64).ravel() for x in arrays]
    return np.array([[float(np.dot(x, y)) for y in a] for x in a])


# ---- resampling (kronpe.resampling) ----------------------------------------------------------------


def resample_area_1d(y: np.ndarray,  # (n, *rest) pixel means
                     N: int, order: int = 2, margin: int = 2, q: int = 256) -> np.ndarray:
    """The area-consistent spline resampling of ``kronpe.resample`` along axis 0, the obvious way:
    the B-spline basis (centres at the pixel centres, coefficients mirrored at the ends) sampled at
    q midpoints per input pixel and per output pixel, a dense solve for the coefficients whose
    pixel means are y, and the pixel means at the N output pixels. Midpoint-rule accurate
    (about 1e-6 at q = 256), independent of the kernel's closed forms."""
    y = np.asarray(y, dtype=np.float64)
    n = y.shape[0]
    pad_index = np.pad(np.arange(n), margin, mode="symmetric")
    centres = np.arange(-margin, n + margin) + 0.5  # in input-pixel units
    E = np.zeros((n + 2 * margin, n))
    E[np.arange(n + 2 * margin), pad_index] = 1.0  # coefficient k stands for c[pad_index[k]]

    def means(edges):  # (len(edges) - 1, n): pixel means of the (mirrored) basis
        lo, hi = edges[:-1], edges[1:]
        t = (np.arange(q) + 0.5) / q
        u = lo[:, None] + (hi - lo)[:, None] * t[None, :]  # (pixels, q)
        basis = _formulas.bspline(u[..., None] - centres, order)  # (pixels, q, K)
        return basis.mean(axis=1) @ E

    A = means(np.arange(n + 1, dtype=np.float64))
    F = means(np.arange(N + 1, dtype=np.float64) * (n / N))
    c = np.linalg.solve(A, y.reshape(n, -1))
    return (F @ c).reshape((N,) + y.shape[1:])


def dot(a, b) -> float:
    """sum(a * b) in float64."""
    return float(np.dot(np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()))


# ---- cubic B-spline fits of scattered samples (kronpe.solvers.spline) ---------------------------


def spline_design(points: np.ndarray, nint, lo, h) -> np.ndarray:
    """The dense (P, prod(nint + 3)) matrix of tensor-product cubic B-splines at the points: each
    basis function is the centred cubic B-spline N(u - (j - 1)), u = (x - lo) / h, evaluated by its
    closed form (no interval search), with N(s) = (2 - |s|)^3 / 6 - 4 (1 - |s|)_+^3 / 6 on |s| < 2.
    Points beyond the grid's last interval are clamped to it, as the kernels do."""
    P, D = points.shape
    mats = []
    for a in range(D):
        u = (points[:, a].astype(np.float64) - lo[a]) / h
        u = np.clip(u, -np.inf, np.inf)
        j = np.arange(nint[a] + 3)
        cell = np.clip(np.floor(u), 0, nint[a] - 1)
        s = np.abs(u[:, None] - (j[None, :] - 1))
        val = np.where(s < 2, (2 - s) ** 3 / 6, 0.0) - np.where(s < 1, 4 * (1 - s) ** 3 / 6, 0.0)
        # clamping: a point beyond the ends uses its clamped interval's cubic pieces (extrapolated)
        t = u - cell
        inside = (j[None, :] >= cell[:, None]) & (j[None, :] <= cell[:, None] + 3)
        pieces = np.stack([(1 - t) ** 3 / 6, (3 * t**3 - 6 * t**2 + 4) / 6,
                           (-3 * t**3 + 3 * t**2 + 3 * t + 1) / 6, t**3 / 6], -1)
        ext = np.zeros_like(val)
        rows = np.arange(P)
        for k in range(4):
            ext[rows, (cell + k).astype(np.int64)] = pieces[:, k]
        out_of_range = (u < 0) | (u > nint[a])
        mats.append(np.where(out_of_range[:, None], ext, np.where(inside, val, 0.0)))
    B = mats[0]
    for m in mats[1:]:
        B = (B[:, :, None] * m[:, None, :]).reshape(P, B.shape[1] * m.shape[1])
    return B


def stencil_from_dense(A: np.ndarray, shape) -> np.ndarray:
    """The offset-major (7^D, N) stencil of a dense (N, N) operator on a grid of ``shape``
    coefficients (kronpe/spline.h): row o, column j = A[j, j + offset o] (0 where outside)."""
    D = len(shape)
    N = int(np.prod(shape))
    idx = np.array(np.unravel_index(np.arange(N), shape)).T  # (N, D)
    out = np.zeros((7**D, N))
    for o in range(7**D):
        off = np.array(np.unravel_index(o, (7,) * D)) - 3
        nb = idx + off
        ok = np.all((nb >= 0) & (nb < np.array(shape)), axis=1)
        flat = np.ravel_multi_index(tuple(nb[ok].T), shape)
        out[o, ok] = A[np.arange(N)[ok], flat]
    return out


def spline_normal(points, values, nint, lo, h, weights=None):
    """(B^T W B as an offset-major stencil, B^T W values) from the dense design matrix."""
    B = spline_design(np.asarray(points, np.float64), nint, lo, h)
    w = np.ones(B.shape[0]) if weights is None else np.asarray(weights, np.float64)
    shape = tuple(n + 3 for n in nint)
    return stencil_from_dense(B.T @ (w[:, None] * B), shape), B.T @ (w[:, None] * np.asarray(values, np.float64))


def spline_values(points, coef, nint, lo, h) -> np.ndarray:
    """The spline with coefficients coef (N, C) at the points."""
    return spline_design(np.asarray(points, np.float64), nint, lo, h) @ np.asarray(coef, np.float64)


def stencil_apply(stencil, x, shape) -> np.ndarray:
    """y = A x for an offset-major (7^D, N) stencil on a grid of ``shape`` coefficients."""
    D = len(shape)
    N = int(np.prod(shape))
    x = np.asarray(x, np.float64).reshape(N, -1)
    idx = np.array(np.unravel_index(np.arange(N), shape)).T
    y = np.zeros_like(x)
    for o in range(7**D):
        off = np.array(np.unravel_index(o, (7,) * D)) - 3
        nb = idx + off
        ok = np.all((nb >= 0) & (nb < np.array(shape)), axis=1)
        flat = np.ravel_multi_index(tuple(nb[ok].T), shape)
        y[ok] += stencil[o, ok][:, None] * x[flat]
    return y


def thin_plate_spline_energy(nint, h, samples: int = 64) -> np.ndarray:
    """The dense thin-plate energy matrix of the tensor-product cubic B-splines over the grid's
    box, by a midpoint rule with ``samples`` points per interval of the pieces' derivatives from
    finite differences of the closed form (an independent check of the exact Gram matrices)."""
    D = len(nint)
    per_axis = []
    for a in range(D):
        n_pts = nint[a] * samples
        x = (np.arange(n_pts) + 0.5) * h / samples
        e = h * 1e-3

        def basis(z):
            return spline_design(z[:, None], [nint[a]], [0.0], h)

        f0, fp, fm = basis(x), basis(x + e), basis(x - e)
        d1 = (fp - fm) / (2 * e)
        d2 = (fp - 2 * f0 + fm) / e**2
        q = h / samples
        per_axis.append([q * f0.T @ f0, q * d1.T @ d1, q * d2.T @ d2])
    total = 0.0
    for a in range(D):
        m = per_axis[0][2 if a == 0 else 0]
        for i in range(1, D):
            m = np.kron(m, per_axis[i][2 if i == a else 0])
        total = total + m
    for a in range(D):
        for b in range(a + 1, D):
            m = per_axis[0][1 if 0 in (a, b) else 0]
            for i in range(1, D):
                m = np.kron(m, per_axis[i][1 if i in (a, b) else 0])
            total = total + 2 * m
    return total


_SPLINE_TAPS = np.array([1.0, 4.0, 6.0, 4.0, 1.0]) / 8.0  # coarse coefficient J -> fine 2J - 3 .. 2J + 1


def spline_subdivide(coarse, axis: int) -> np.ndarray:
    """The fine coefficients (2 n - 3 along ``axis``) of the same cubic B-spline as ``coarse`` (n)
    on twice the intervals: fine 2J - 3 + m += taps[m] coarse J, the taps 1 4 6 4 1 / 8 added in
    the order m = 0..4."""
    c = np.moveaxis(np.asarray(coarse, np.float64), axis, 0)
    n = c.shape[0]
    fine = np.zeros((2 * n - 3,) + c.shape[1:])
    for m, w in enumerate(_SPLINE_TAPS):
        for J in range(n):
            i = 2 * J + m - 3
            if 0 <= i < 2 * n - 3:
                fine[i] += w * c[J]
    return np.moveaxis(fine, 0, axis)


def spline_restrict(fine, axis: int) -> np.ndarray:
    """The transpose of ``spline_subdivide``: (2 n - 3 along ``axis``) -> n, coarse J = the sum over
    m = 0..4 (in that order) of taps[m] fine 2J - 3 + m."""
    f = np.moveaxis(np.asarray(fine, np.float64), axis, 0)
    n = (f.shape[0] + 3) // 2
    coarse = np.zeros((n,) + f.shape[1:])
    for J in range(n):
        for m, w in enumerate(_SPLINE_TAPS):
            i = 2 * J + m - 3
            if 0 <= i < f.shape[0]:
                coarse[J] += w * f[i]
    return np.moveaxis(coarse, 0, axis)


def spline_chebyshev(stencil, dinv, b, x, shape, degree: int, theta: float, delta: float, residual: bool = False):
    """``degree`` Chebyshev steps for A x = b on D^-1 A over [theta - delta, theta + delta] from x
    (None: zero), A an offset-major stencil (its float32 entries taken exactly): x, or (x, b - A x)
    with ``residual``. Written step by step in the kernel's order of operations."""
    A = np.asarray(stencil).astype(np.float64)
    b = np.asarray(b, np.float64)
    dinv = np.asarray(dinv, np.float64)[:, None]
    res = b.copy() if x is None else b - stencil_apply(A, x, shape)
    x = np.zeros_like(b) if x is None else np.array(x, np.float64)
    d = dinv * res / theta
    sigma = theta / delta
    rho = 1.0 / sigma
    for k in range(degree):
        x = x + d
        if k == degree - 1 and not residual:
            break
        res = res - stencil_apply(A, d, shape)
        if k == degree - 1:
            break
        rho_new = 1.0 / (2 * sigma - rho)
        d = (rho_new * rho) * d + (2 * rho_new / delta) * (dinv * res)
        rho = rho_new
    return (x, res) if residual else x
