"""NumPy oracles: slow, obvious implementations that every compiled kernel is tested against.

Nothing here is on a hot path. Dense Kronecker products and dense blending matrices are
allowed here and in tests only (DESIGN.md).
"""
from __future__ import annotations

import numpy as np

# ---- BLAS --------------------------------------------------------------------------------


def gemm(a: np.ndarray, b: np.ndarray, trans_a: bool = False, trans_b: bool = False) -> np.ndarray:
    """op(a) @ op(b) in float64."""
    a = a.T if trans_a else a
    b = b.T if trans_b else b
    return a.astype(np.float64) @ b.astype(np.float64)


# ---- embedders ---------------------------------------------------------------------------


# ---- mode-n products and grid fits ---------------------------------------------------------


# ---- blending matrix and scattered fits ----------------------------------------------------


def blend_axis_weights(q: np.ndarray,  # (P,) coordinates
                       nodes: np.ndarray,  # (M,) increasing grid nodes
                       distance=None, normalize: bool = True, rcond: float = 1e-8,
                       tiny: float = 1e-12):
    """MATH.md 3.3 along one axis, one 2x2 solve per point: cell j (P,), weights (P, 2).

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
