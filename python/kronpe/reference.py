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
