"""Conjugate gradients for the fits' normal equations, and their separable preconditioners.

Decisions (documented once, here):

- **Channels** are solved together, each with its own CG scalars (a (..., C) array is C
  independent right-hand sides); iterations stop when every channel's relative residual
  ||b - M x|| / ||b|| is at most ``tol``; a zero right-hand side gives a zero solution.
- **Separable preconditioners** (``SeparablePreconditioner``) approximate a sum of Kronecker
  products ``sum_t c_t (x)_i M_{t,i}`` (the data term rho (x)_i G_i and the terms of a difference
  penalty) in a per-axis basis Q_i by the diagonal of its transform, ``d = sum_t c_t (x)_i
  diag(Q_i^T M_{t,i} Q_i)``, and apply ``(x)_i Q_i diag(1/d) (x)_i Q_i^T`` with two mode-product
  chains. Q_i is the orthonormal eigenbasis of the sandwich smoother's per-axis matrix
  G_i / g_i + t D_i^T D_i (g_i = trace(G_i) / K_i, t = lambda / (rho prod_j g_j): the penalty's
  weight against the data term), so the preconditioner is symmetric positive definite even where
  G_i is singular (K_i > N_i), and exact for the sum form when every G_i = g_i I (no mixed
  term); with G_i = I (identity embeddings) the basis is
  the orthonormal DCT-II instead (applied by FFTs in O(K log K) per fibre), which diagonalises
  first differences with reflective ends exactly and second/third differences up to their two
  end rows (Garcia's smoothn): there diag(Q^T D_q^T D_q Q) is taken as (2 - 2 cos(pi k / K))^q.
  The product form of the sandwich smoother, (x)_i (G_i + c_i P_i), is diagonal in the same
  basis; the sum form here has no spurious lambda^2 cross terms, which matters at the large
  lambdas of interpolation with holes.
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np

from .._shared import outer
from ..ops import multi_mode_product

Array = np.ndarray


class ConvergenceWarning(UserWarning):
    """An iterative kronpe solver stopped at ``maxiter`` before reaching ``tol``."""


def cdot(a: Array, b: Array) -> Array:
    """Per-channel inner products of two (..., C) arrays: (C,)."""
    C = a.shape[-1]
    return np.einsum("ic,ic->c", a.reshape(-1, C), b.reshape(-1, C))


def pcg(apply: Callable[[Array], Array], precond: Callable[[Array], Array], rhs: Array, x0: Optional[Array],
        tol: float, maxiter: int, step_tol: float = 0.0) -> Tuple[Array, int, Array]:
    """Preconditioned CG on M x = rhs for every channel of rhs (..., C), vectorised.

    ``step_tol > 0`` also stops once every channel's preconditioned residual ||P^-1 r_k|| (the
    preconditioner's estimate of the error) is at most ``step_tol * ||x_k||``: for systems whose
    residual says little about the error (interpolation with small lambda).
    Returns (x, iterations, relative residual per channel)."""
    bnorm = np.sqrt(cdot(rhs, rhs))
    safe = np.where(bnorm > 0, bnorm, 1.0)
    if x0 is None:
        x = np.zeros_like(rhs)
        r = rhs.copy()
    else:
        x = x0.copy()
        r = rhs - apply(x)
    rel = np.sqrt(cdot(r, r)) / safe
    z = precond(r)
    p = z.copy()
    rz = cdot(r, z)
    it = 0
    while it < maxiter and np.any((rel > tol) & (bnorm > 0)):
        Ap = apply(p)
        pAp = cdot(p, Ap)
        alpha = np.where(pAp > 0, rz / np.where(pAp > 0, pAp, 1.0), 0.0)
        x += alpha * p
        r -= alpha * Ap
        it += 1
        rel = np.sqrt(cdot(r, r)) / safe
        if it >= maxiter or not np.any((rel > tol) & (bnorm > 0)):
            break  # converged (or out of iterations): no preconditioner call that would go unused
        z = precond(r)
        if step_tol > 0 and np.all(cdot(z, z) <= step_tol**2 * cdot(x, x)):
            break
        rz_new = cdot(r, z)
        beta = np.where(rz > 0, rz_new / np.where(rz > 0, rz, 1.0), 0.0)
        p = z + beta * p
        rz = rz_new
    x[..., bnorm == 0] = 0.0
    return x, it, np.where(bnorm > 0, rel, 0.0)


def sweep_ridges(solve: Callable[[float, Optional[Array]], Array], error: Callable[[Array], float],
                 lams: Sequence[float], ratio: float, flat: Optional[float] = None, with_start: bool = False
                 ) -> Tuple[Any, ...]:
    """The held-out choice of lambda over ``lams`` (largest first, ``ratio`` between neighbours).

    Each solve is warm-started from the previous one; the sweep stops once the held-out error
    has risen twice in a row, or (``flat`` given) has fallen by less than the fraction ``flat``
    twice in a row (the curve is flat: smaller lambdas change the fit's error no more); the best value is refined by one parabolic step in log lambda
    through it and its neighbours (at most half a step of the sweep either way), kept if it
    measures better. Returns (best, lambdas tried, their errors, the best's fit), and with
    ``with_start`` the fit the best's solve started from (None for the first) last.
    """
    tried, errs = [], []
    x = x_best = x_from = None  # only the best fit is kept (and where it started from)
    for lam in lams:
        x_prev, x = (x if with_start else None), solve(lam, x)
        tried.append(lam)
        errs.append(error(x))
        if len(errs) == 1 or errs[-1] < min(errs[:-1]):  # the first of equal errors, as argmin below
            x_best, x_from = x, x_prev
        if len(errs) >= 3 and errs[-1] > errs[-2] > errs[-3]:
            break  # the held-out error has risen twice: the minimum is behind
        if flat is not None and len(errs) >= 3 and all(
                e_prev - e < flat * e_prev for e_prev, e in ((errs[-3], errs[-2]), (errs[-2], errs[-1]))):
            break  # flat twice: smaller lambdas would not change the error
    k = int(np.argmin(errs))
    best = tried[k]
    if 0 < k < len(tried) - 1:  # one parabolic step in log lambda through the three best
        y0, y1, y2 = errs[k - 1], errs[k], errs[k + 1]
        denom = y0 - 2 * y1 + y2
        if denom > 0:
            step = float(np.clip(0.5 * (y0 - y2) / denom, -0.5, 0.5))
            cand = tried[k] * ratio ** (-step)  # steps towards smaller lambda
            x2 = solve(cand, x_best)
            tried.append(cand)
            errs.append(error(x2))
            if errs[-1] < errs[k]:
                best, x_best, x_from = cand, x2, x_best
    return (best, tried, errs, x_best, x_from) if with_start else (best, tried, errs, x_best)


def diag_in(Q: Array, M: Array) -> Array:
    """diag(Q^T M Q)."""
    return np.einsum("ki,kl,li->i", Q, M, Q)


def dct_penalty_spectrum(K: int, q: int) -> Array:
    """(2 - 2 cos(pi k / K))^q, k = 0..K-1: the DCT-II spectrum of q-th differences."""
    return (2.0 - 2.0 * np.cos(np.pi * np.arange(K) / K)) ** q


class SeparablePreconditioner:
    """``(x)_i Q_i diag(1/d) (x)_i Q_i^T`` for the system rho (x)_i G_i + lam * R (module docstring).

    Parameters
    ----------
    grams : list of D (K_i, K_i) float64 matrices, or None for identities (the DCT basis)
    rho : float, the data term's weight (mean sampling density)
    lam : float
    penalty : DifferencePenalty
    Ks : the weight shape (K_1, ..., K_D)
    """

    def __init__(self, grams: Optional[List[Array]], rho: float, lam: float, penalty, Ks: Sequence[int]):
        from scipy.linalg import eigh

        D = len(Ks)
        self.D = D
        self.dct = grams is None
        terms = penalty.axis_terms(D)
        if self.dct:
            self.Q = None
            data = [np.ones(K) for K in Ks]
            ident = data

            def diag(i: int, q: int) -> Array:
                return dct_penalty_spectrum(Ks[i], q)
        else:
            self.Q = []
            gbar = [max(float(np.trace(G)) / G.shape[0], 1e-300) for G in grams]
            t = lam / max(rho * float(np.prod(gbar)), 1e-300)  # the penalty's weight against the data's
            for i, G in enumerate(grams):
                _, Q = eigh(G / gbar[i] + t * penalty.gram(Ks[i]))
                self.Q.append(Q)
            ident = [np.ones(K) for K in Ks]
            data = [diag_in(Q, G) for Q, G in zip(self.Q, grams)]

            def diag(i: int, q: int) -> Array:
                return diag_in(self.Q[i], penalty.gram(Ks[i], q))

        d = rho * outer(data)
        if lam > 0:
            for coef, mats in terms:
                d = d + (lam * coef) * outer([diag(i, mats[i]) if i in mats else ident[i] for i in range(D)])
        dmax = float(d.max()) if d.size else 0.0
        self.inv_d = (1.0 / np.maximum(d, 1e-12 * dmax if dmax > 0 else 1.0))[..., None]
        if self.Q is not None:
            self._Qt = [np.ascontiguousarray(Q.T) for Q in self.Q]

    def _inverse(self, dtype) -> Array:
        if self.inv_d.dtype != dtype:
            self.inv_d = self.inv_d.astype(dtype)
        return self.inv_d

    def __call__(self, r: Array) -> Array:
        if self.dct:
            from scipy.fft import dctn, idctn

            axes = list(range(self.D))
            t = dctn(r, type=2, axes=axes, norm="ortho", workers=-1)
            t *= self._inverse(t.dtype)
            return idctn(t, type=2, axes=axes, norm="ortho", workers=-1)
        t = multi_mode_product(r, self._Qt) * self._inverse(r.dtype)
        return multi_mode_product(t, self.Q)
