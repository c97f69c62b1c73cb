"""The default fill's system (:mod:`.smooth`): (M + lam R) W = B^T y on the grid, M = B^T B the
data term (``DataTerm``: a diagonal for a mask or points on a lattice, else the stored blending
matrix), R a default penalty (``default_penalty``: the thin-plate form, or the third-order form
with axis weights on 3 axes; ``HigherPenalty`` for the leading component at the interpolation
limit), solved by CG preconditioned by a multigrid V-cycle (``hierarchy``, :mod:`.multigrid`) on
grids of up to MG_MAX_AXES axes and by ``(rho I + lambda R)^-1`` in the orthonormal DCT-II basis
(Garcia's smoothn) beyond; ``start`` is the normalised convolution of the samples (CG's start
beyond MG_MAX_AXES axes).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..operators.penalty import DifferencePenalty
from .channels import as_planes, channel_planes, mix_planes, principal_basis, unmix
from .krylov import SeparablePreconditioner, pcg
from .multigrid import ThinPlateMG, dot, thin_plate_apply

Array = np.ndarray
PENALTY = DifferencePenalty(2, mixed=True)  # the thin-plate form, natural boundary
# default_penalty's thin-plate forms (natural, mirrored): made once, never changed
_THIN_PLATE = (PENALTY, DifferencePenalty(2, mixed=True, boundary="reflect"))
MG_MAX_AXES = 3  # multigrid on grids of up to this many axes, the DCT preconditioner beyond
ORDER = {1: 2, 2: 2, 3: 3}  # the default penalty's order by axes
DIAGONAL_SMOOTHER = (2, 4.0)  # Chebyshev (degree, alpha) of a diagonal data term with the thin-plate penalty
START_SIGMA = 1.0  # the normalised convolution's Gaussian, in nodes


class DataTerm:
    """B^T B on the grid (N..., C): a diagonal ``diag`` (N...) (a mask, points on the nodes), or
    the stored blending matrix ``blend`` itself (a kronpe BlendingMatrix B, (P, G)): B^T (B W),
    passes over the P x 2^D stored weights (one on one thread, two on more) instead of one over the
    3^D G entries of B^T B as a sparse matrix (half the time or less, for 65k points on a 1026^2
    grid)."""

    def __init__(self, shape: Sequence[int], diag: Optional[Array] = None, blend=None, total: Optional[int] = None,
                 keep: Optional[Array] = None):
        self.shape = tuple(shape)
        #: with ``blend``: per-point weights 0 or 1 (P,) float32, the rows of B that count (B^T K B,
        #: the held-out sweep's training term: the whole matrix's products and plan, no copy of its rows)
        self.keep = None if keep is None else np.ascontiguousarray(keep, np.float32).reshape(-1)
        #: the nodes with data as a boolean grid, when ``diag`` was given as one (a mask): their
        #: indices come from it without a comparison pass over the float diagonal
        self.observed = diag if isinstance(diag, np.ndarray) and diag.dtype == np.bool_ else None
        self.diag = None if diag is None else np.asarray(diag, np.float32)
        self.blend = blend
        self._rho: Optional[float] = None
        #: the diagonal's sum when the caller knows it (``total``) and float32 sums give it exactly
        self.total: Optional[float] = None
        if total is not None and self.diag is not None and 0 < self.diag.size < (1 << 24):
            # ``total``: the diagonal's sum, an integer the caller knows (the mask's count, the
            # points on a lattice): rho as np.mean's float32 sum of integers gives it, bit for bit,
            # without its pass over the grid (16 us of a 128^2 fill)
            self._rho = float(np.float32(total) / np.float32(self.diag.size))
            if total < (1 << 24):  # (then the float32 sum of the integers is exact)
                self.total = float(total)
        self._work: Optional[Tuple[Array, Array]] = None  # add_to's (points, grid) buffers

    @property
    def rho(self) -> float:
        """The mean of diag(B^T B) (the sampling density), computed when first asked for (the
        held-out sweep's training term never is)."""
        if self._rho is None:
            if self.blend is None:
                d = self.diag
            else:  # diag(B^T B): the squared weights scatter-added onto their nodes
                w = np.asarray(self.blend.weights, np.float64)
                d = np.bincount(np.asarray(self.blend.indices).reshape(-1), weights=(w * w).reshape(-1),
                                minlength=int(np.prod(self.shape)))
            self._rho = float(np.mean(d))
        return self._rho

    @property
    def is_diagonal(self) -> bool:
        return self.blend is None

    def __call__(self, W: Array) -> Array:
        if self.blend is None:
            return self.diag[(...,) + (None,) * (W.ndim - self.diag.ndim)] * W
        flat = W.reshape(int(np.prod(self.shape)), -1)
        at_points = self.blend.matvec(flat)
        if self.keep is not None:
            at_points = at_points * self.keep[:, None]
        return self.blend.rmatvec(at_points).astype(W.dtype, copy=False).reshape(W.shape)

    def add_to(self, v: Array, out: Array) -> Array:
        """out += (B^T B) v for one plane v (N...) float32, out float32 C-contiguous of its size;
        off the nodes through the blending matrix's unchecked products (CG's operator: the checks
        and fresh arrays of matvec / rmatvec would take a tenth of an off-grid fit): on one thread
        one compiled pass (``_normal_add``), else gather and transpose into buffers kept between
        calls. Returns out."""
        if self.blend is None:
            out += self.diag * v
            return out
        flat = np.ascontiguousarray(v, np.float32).reshape(-1)
        if self.blend._normal_add(flat, out.reshape(-1), self.keep):
            return out
        if self._work is None:
            self._work = (np.empty((self.blend.shape[0], 1), np.float32), np.empty((self.blend.grid_size, 1), np.float32))
        at_points, on_grid = self._work
        self.blend._gather(flat.reshape(-1, 1), at_points)
        if self.keep is not None:
            at_points *= self.keep[:, None]
        self.blend._scatter(at_points, on_grid)
        out.reshape(-1)[...] += on_grid.reshape(-1)
        return out

    def lumped(self) -> Array:
        """The row sums of B^T B (i.e. B^T 1; the diagonal itself when diagonal), float32 (N...):
        the multigrid hierarchy's diagonal."""
        if self.blend is None:
            return self.diag
        ones = np.ones(self.blend.shape[0], np.float32) if self.keep is None else self.keep
        return np.asarray(self.blend.rmatvec(ones), np.float32).reshape(self.shape)


def start(data: DataTerm, rhs: Array) -> Array:
    """The normalised convolution of the samples (module docstring)."""
    from scipy.ndimage import gaussian_filter

    D = len(data.shape)
    sig = (START_SIGMA,) * D + (0,) * (rhs.ndim - D)
    ones = data(np.ones(data.shape + (1,), np.float32))[..., 0]
    den = gaussian_filter(ones, START_SIGMA)
    num = gaussian_filter(rhs, sig)
    total = float(ones.sum())
    mean = rhs.reshape(-1, rhs.shape[-1]).sum(axis=0) / max(total, 1e-30)
    tiny = den < 1e-3 * max(float(den.max()), 1e-30)
    x0 = num / np.where(tiny, 1.0, den)[(...,) + (None,) * (rhs.ndim - D)]
    x0[tiny] = mean
    return x0.astype(np.float32)


def default_penalty(ndim: int, reflect: bool = False, weights: Optional[Sequence[float]] = None
                    ) -> DifferencePenalty:
    """The default penalty of a grid of ``ndim`` axes (:mod:`.smooth`): the thin-plate form with
    the natural or the mirrored boundary, or, where ORDER says 3, (sum_i w_i L_i)^3 mirrored."""
    if ORDER.get(ndim, 2) == 3:
        return DifferencePenalty(3, mixed=True, boundary="reflect", weights=weights)
    return _THIN_PLATE[int(bool(reflect))]


class HigherPenalty:
    """The leading component's penalty at the interpolation limit when it holds out better (module
    docstring): the mirrored thin-plate form plus ``higher`` times the third power of the
    Laplacian, R = L^2 + h L^3, L = sum_i L_i (DifferencePenalty(2, mixed=True, boundary="reflect")
    + h DifferencePenalty(3, mixed=True, boundary="reflect"); the multigrid kernels' polynomial
    power form: order 3, top h, tail 1)."""

    order = 2
    reflect = True
    boundary = "reflect"
    weights = None

    def __init__(self, higher: float):
        self.higher = float(higher)

    def __repr__(self) -> str:
        return (f"DifferencePenalty(2, mixed=True, boundary='reflect') + {self.higher:g} * "
                "DifferencePenalty(3, mixed=True, boundary='reflect')")

    def apply(self, W: Array, ndim: int) -> Array:
        return (DifferencePenalty(2, mixed=True, boundary="reflect").apply(W, ndim)
                + self.higher * DifferencePenalty(3, mixed=True, boundary="reflect").apply(W, ndim))


def mg_penalty(penalty) -> Dict[str, Any]:
    """The multigrid kernels' arguments of a default penalty (or a HigherPenalty)."""
    if isinstance(penalty, HigherPenalty):
        return dict(reflect=True, order=3, weights=None, top=penalty.higher, tail=1.0)
    return dict(reflect=penalty.reflect, order=penalty.order, weights=penalty.weights)


def solve(data: DataTerm, rhs, lam: float, x0: Optional[Array], tol: float, maxiter: int,
          penalty: DifferencePenalty = PENALTY, mg: Optional[ThinPlateMG] = None,
          value_range: Optional[Tuple[Array, Array]] = None, lead=None, moments: Optional[Array] = None,
          lead_start: Optional[Array] = None, basis: Optional[Array] = None,
          lead_solution: Optional[Tuple[Array, int, float]] = None, mixed: Optional[List[Array]] = None
          ) -> Tuple[Array, int, Array, float]:
    """(M + lam R) W = rhs for W (N..., C) float32 (rhs (N..., C) or C planes (N...)):
    multigrid-preconditioned CG on grids of 1 to 3
    axes (:mod:`.multigrid`; ``mg`` a hierarchy built for this lam and the penalty's boundary),
    DCT-preconditioned CG on more. ``value_range`` = per-channel (min, max): W clipped to it
    (channel by channel, before the channels are interleaved: the clip of the interleaved array and
    its count would take 7 ms at 512^2 RGB). Returns (W, iterations, per-channel stopping measure,
    the fraction of values clipped). ``lead``: the penalty (a ``HigherPenalty``) of the leading
    principal component's system, whose PCG ``mg`` (the thin-plate hierarchy) preconditions.
    ``moments``: the channels' ``second_moments`` when the caller has them (``rhs`` as planes).
    ``lead_start``: the leading principal component's start (on grids of 1 to 3 axes; instead of
    ``x0``'s or full multigrid). ``basis``: the channels' ``principal_basis`` when the caller has it;
    ``mixed``: the right-hand side in that basis (``mix_planes``) when the caller has it;
    ``lead_solution``: the leading component's (solution, iterations, error estimate), solved
    already (``LeadSolve``)."""
    D = len(data.shape)
    if D > MG_MAX_AXES:
        M = SeparablePreconditioner(None, data.rho, lam, penalty, data.shape)
        rhs = np.stack(rhs, -1) if isinstance(rhs, (list, tuple)) else rhs
        W, its, rels = pcg(lambda w: data(w) + np.float32(lam) * penalty.apply(w, D), M, rhs, x0, tol, maxiter)
        if value_range is None:
            return W, its, rels, 0.0
        return W, its, rels, unmix(channel_planes(W), np.eye(W.shape[-1], dtype=np.float32), W, value_range)
    operator = _operator(data, lam, penalty)
    # the leading component's own penalty: its operator, preconditioned by the same hierarchy
    lead_operator = operator if lead is None or lead_solution is not None else _operator(data, lam, lead, always=True)
    # channels in their principal basis (:mod:`.channels`), the strongest first: its norm sets
    # the error scale of the others
    planes = as_planes(rhs)
    C = len(planes)
    V = principal_basis(planes, moments) if basis is None else basis
    b = mix_planes(planes, V) if mixed is None else mixed
    start_ = None if x0 is None else mix_planes(channel_planes(x0), V)
    W = []
    its, rels, scale = 0, [], None
    for c in range(C):
        op = lead_operator if c == 0 else operator
        x_c = lead_start if c == 0 and lead_start is not None else (None if start_ is None else start_[c])
        if c == 0 and lead_solution is not None:
            w, it, rel = lead_solution
        else:
            # (mg: a hierarchy, None for a new one, or a function that makes it: only when wanted)
            mg = hierarchy(data, lam, penalty) if mg is None else (mg if isinstance(mg, ThinPlateMG) else mg())
            w, it, rel = mg.solve(b[c], x_c, tol, maxiter, op, scale)
        W.append(w)
        if scale is None and tol > 0 and C > 1:  # (the others' error scale)
            scale = max(float(np.sqrt(dot(w, w))), 1e-30)
        its = max(its, it)
        rels.append(rel)
    if C == 1 and value_range is None:  # (the sweep's fits) W itself, no copy
        return W[0][..., None], its, np.array(rels), 0.0
    out = np.empty(planes[0].shape + (C,), np.float32)
    return out, its, np.array(rels), unmix(W, V.T, out, value_range)


def _operator(data: DataTerm, lam: float, penalty, always: bool = False) -> Optional[Callable[[Array], Array]]:
    """CG's operator B^T B v + lam R v for a data term off the nodes (None for a diagonal one: the
    hierarchy's own matrix, unless ``always``)."""
    if data.is_diagonal and not always:
        return None
    buf = np.empty(data.shape, np.float32)
    pen = mg_penalty(penalty)
    if data.is_diagonal:
        m = np.ascontiguousarray(data.diag, np.float32)

        def diagonal(v: Array) -> Array:
            return thin_plate_apply(v, m, lam, out=buf, **pen)  # diag(m) v + lam R v, one pass

        return diagonal
    zeros = np.zeros(data.shape, np.float32)

    def operator(v: Array) -> Array:  # (the compiled CG copies the result out at once)
        thin_plate_apply(v, zeros, lam, out=buf, **pen)  # lam R v
        return data.add_to(v, buf)

    return operator


def hierarchy(data: DataTerm, lam: Optional[float], penalty: DifferencePenalty = PENALTY, threads: int = 0
              ) -> ThinPlateMG:
    """The multigrid hierarchy of M + lam R (M lumped when not diagonal), R a default penalty;
    with a diagonal data term and the thin-plate penalty, the smoother DIAGONAL_SMOOTHER (module
    docstring)."""
    degree, alpha = DIAGONAL_SMOOTHER if data.is_diagonal and penalty.order == 2 else (None, None)
    # (PCG's predicted stop only where the V-cycle's matrix is the data term's: multigrid.py)
    return ThinPlateMG(data.lumped(), lam, degree=degree, alpha=alpha, threads=threads,
                       predicted_stop=data.is_diagonal, **mg_penalty(penalty))
