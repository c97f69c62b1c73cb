"""The spline fit of :mod:`kronpe.solvers.spline` on a torch device (a GPU).

The same held-out choice of level and lambda (``spline.choose``), with each level's normal
equations formed densely on the device: B^T B by scatter-adds of every point's 4^D x 4^D weight
products, the thin-plate penalty scattered from its stencil, and each (level, lambda) solved by a
Cholesky factorisation there. Dense levels cost N^2 memory and N^3 / 3 flops (N coefficients), so
the device takes levels up to MAX_COEFFICIENTS coefficients; when the held-out error still falls at
the last of them (a signal that wants finer levels, such as a photograph), ``fit`` returns None and
the caller fits on the host. Smooth fields stop well below it (Franke's function from 100 000
points: 35 x 35 coefficients); a system that is not positive definite in the device's arithmetic
also sends the fit to the host. The choices of lambda follow the host's rules (which levels count
as direct), so the two choose alike; scatter-adds on a GPU sum in no fixed order, so device fits
agree with the host's to rounding, not bit for bit.
"""
from __future__ import annotations

import math
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from . import spline as _spline

MAX_COEFFICIENTS = 4500  # the finest level the device solves densely (67 x 67: 0.16 GB, 30 GFLOP)
CHUNK_PRODUCTS = 1 << 24  # weight products formed at once by the assembly (0.27 GB of indices and values)


class NotDefinite(ArithmeticError):
    """A level's system was not positive definite in the device's precision: the host fits."""


def _corners(torch, g: "_spline.Grid", pts):
    """(flat indices (P, 4^D), weights (P, 4^D)) of the points' coefficients on grid g."""
    D = len(g.nint)
    strides = [math.prod(g.shape[a + 1:]) for a in range(D)]
    idx = None
    w = None
    four = torch.arange(4, device=pts.device)
    for a in range(D):
        u = pts[:, a] / g.h
        i = torch.clamp(torch.floor(u), 0, g.nint[a] - 1)
        t = u - i
        s = 1.0 - t
        wa = torch.stack([s**3 / 6, (3 * t**3 - 6 * t**2 + 4) / 6, (-3 * t**3 + 3 * t**2 + 3 * t + 1) / 6, t**3 / 6], 1)
        ia = (i.to(torch.int64)[:, None] + four[None, :]) * strides[a]
        if idx is None:
            idx, w = ia, wa
        else:
            idx = (idx[:, :, None] + ia[:, None, :]).reshape(pts.shape[0], -1)
            w = (w[:, :, None] * wa[:, None, :]).reshape(pts.shape[0], -1)
    return idx, w


class TorchLevels:
    """The candidate levels of one fit on a torch device (the interface of spline._HostLevels)."""

    def __init__(self, torch, grids: List["_spline.Grid"], points, values, hold: np.ndarray):
        self.torch = torch
        self.grids = [g for g in grids if math.prod(g.shape) <= MAX_COEFFICIENTS]
        self.count = len(self.grids)
        dev = points.device
        mask = torch.ones(points.shape[0], dtype=torch.bool, device=dev)
        if hold.size:
            mask[torch.as_tensor(hold, device=dev)] = False
        self.p_tr, self.v_tr = points[mask], values[mask]
        self.p_ho, self.v_ho = points[~mask], values[~mask]
        self.normal: Dict[int, Tuple[Any, Any]] = {}
        self.pen: Dict[int, Any] = {}
        self.ho: Dict[int, Tuple[Any, Any]] = {}
        self.cg_tol = 0.0

    def _assemble(self, g, pts, vals):
        torch = self.torch
        N = math.prod(g.shape)
        BtB = torch.zeros(N * N, dtype=torch.float64, device=pts.device)
        rhs = torch.zeros((N, vals.shape[1]), dtype=torch.float64, device=pts.device)
        K = 4 ** len(g.nint)
        step = max(1, CHUNK_PRODUCTS // (K * K))  # points per chunk: the K x K products stay bounded
        for a in range(0, pts.shape[0], step):
            idx, w = _corners(torch, g, pts[a:a + step])
            BtB.index_add_(0, (idx[:, :, None] * N + idx[:, None, :]).reshape(-1),
                           (w[:, :, None] * w[:, None, :]).reshape(-1))
            rhs.index_add_(0, idx.reshape(-1), (w[:, :, None] * vals[a:a + step, None, :]).reshape(-1, vals.shape[1]))
        return BtB.view(N, N), rhs

    def _level(self, l: int):
        if l not in self.normal:
            torch = self.torch
            g = self.grids[l]
            self.normal[l] = self._assemble(g, self.p_tr, self.v_tr)
            st = torch.as_tensor(_spline.penalty_stencil(g), device=self.p_tr.device)
            W, N = st.shape
            D = len(g.nint)
            strides = [math.prod(g.shape[a + 1:]) for a in range(D)]
            shifts = []
            for o in range(W):
                rest, shift = o, 0
                for a in range(D - 1, -1, -1):
                    shift += (rest % 7 - 3) * strides[a]
                    rest //= 7
                shifts.append(shift)
            # every offset at once (no boolean indexing: no host round trip); the entries whose
            # neighbour lies outside the grid are zero, so clamping their column adds nothing
            j = torch.arange(N, device=st.device)
            cols = torch.clamp(j[None, :] + torch.as_tensor(shifts, device=st.device)[:, None], 0, N - 1)
            R = torch.zeros(N * N, dtype=torch.float64, device=st.device)
            R.index_add_(0, (j[None, :] * N + cols).reshape(-1), st.reshape(-1))
            self.pen[l] = R.view(N, N)
        return self.normal[l], self.pen[l]

    def direct(self, l: int) -> bool:
        """As the host decides (the same choices of lambda follow), though every level here is dense."""
        return _spline._factorised(self.grids[l].shape)

    def start(self, l: int, x):
        return None

    def _solve(self, A, rhs):
        torch = self.torch
        diag = A.diagonal()
        diag.add_(1e-13 * diag.abs().max())  # (A is a fresh sum: changing it in place is safe)
        L, info = torch.linalg.cholesky_ex(A)
        if int(info) != 0:  # (one host round trip per solve; the held-out error needs one anyway)
            raise NotDefinite(f"Cholesky factorisation failed at column {int(info)}")
        return torch.cholesky_solve(rhs, L)

    def solve(self, l: int, lam: float, x0):
        (BtB, rhs), R = self._level(l)
        return self._solve(BtB + lam * R, rhs)

    def holdout_error(self, l: int, x, rms: float) -> float:
        if l not in self.ho:
            self.ho[l] = _corners(self.torch, self.grids[l], self.p_ho)
        idx, w = self.ho[l]
        pred = (x[idx] * w[:, :, None]).sum(1)
        return float(self.torch.sqrt(self.torch.mean((pred - self.v_ho) ** 2)))

    def final(self, l: int, lam: float, x0):
        (BtB, rhs), R = self._level(l)
        if self.p_ho.shape[0]:
            BtB_ho, rhs_ho = self._assemble(self.grids[l], self.p_ho, self.v_ho)
            BtB, rhs = BtB + BtB_ho, rhs + rhs_ho
        return self._solve(BtB + lam * R, rhs), 0, 0.0


def fit(torch, points, values, tol: float = _spline.DEFAULT_TOL, ridge: Optional[float] = None,
        box=None) -> Optional["_spline.SplineModel"]:
    """The spline fit of torch tensors points (P, D) and values (P, C) (float64, finite, checked by
    the caller) on their device; None when the data want finer levels than the device solves."""
    t0 = time.perf_counter()
    P, D = points.shape
    C = values.shape[1]
    lo_hi = (points.amin(0).cpu().numpy(), points.amax(0).cpu().numpy())
    lo, ext, grids, scale = _spline.prepare(lo_hi, P, D, box, None)
    unit = (points - torch.as_tensor(lo, device=points.device)) / torch.as_tensor(ext, device=points.device)
    vrange = float(values.max() - values.min()) if values.numel() else 0.0
    centred = values - values.mean(0) if values.numel() else values
    rms = float(torch.sqrt(torch.mean(centred * centred))) if values.numel() else 0.0
    info: Dict[str, Any] = {"preconditioner": "none (dense Cholesky on the device)", "device": str(points.device)}
    hold = _spline.holdout_of(P)
    levels = TorchLevels(torch, grids, unit, values, hold)
    if levels.count == 0:
        return None
    try:
        best, lam, sols = _spline.choose(levels, scale, vrange, rms, tol, ridge, hold.size > 0, info)
    except NotDefinite:
        return None
    # the data want finer levels than the device solves: the best is its last and the host has more
    wants_finer = levels.count < len(grids) and info["limited_by"] != "tolerance" and (
        best == levels.count - 1 or hold.size == 0)
    if wants_finer:
        return None
    try:
        x, it, rel = levels.final(best, lam, None)
    except NotDefinite:
        return None
    g = grids[best]
    coef = x.reshape(g.shape + (C,)).cpu().numpy()
    info.update(iterations=0, residual=0.0, converged=True, tol=tol, ridge_relative=float(lam / scale),
                grid=list(g.nint), h=g.h, seconds=time.perf_counter() - t0)
    return _spline.SplineModel(coef=coef, lo=tuple(float(v) for v in lo), scale=tuple(float(v) for v in ext),
                               h=g.h, ridge=float(lam), info=info)
