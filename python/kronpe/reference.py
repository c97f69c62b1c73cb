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


# ---- blending matrix and scattered fits ----------------------------------------------------
