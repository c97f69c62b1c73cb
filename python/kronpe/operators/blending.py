"""The blending matrix of scattered points on a virtual grid (docs/math/scattered.rst).

Row p of B holds, for point q_p, the 2^D products of per-axis interpolation weights at the
corners of the grid cell that contains it. Along one axis, between nodes g0 <= q <= g1 with
spacing h and q = g0 + beta h, the weights are

    alpha = [[D(0), D(h)], [D(h), D(0)]]^-1 [D(beta h), D((1 - beta) h)],

the orthogonal projection of the point's encoding Psi(q) onto span(Psi(g0), Psi(g1)) under the
embedder's distance function D. Decisions (documented once, here):

- **Normalisation** (``normalize=True`` by default): alpha is divided by its sum, as the official
  code does. Normalised rows sum to 1, so B reproduces constants exactly; raw projections
  overshoot between nodes (a Gaussian at half a spacing of its sigma gives sums near 1.1).
  ``normalize=False`` keeps the raw projection.
- **Degenerate cells**: a 2x2 system with det <= 1e-8 D(0)^2 (D nearly flat over the cell) and,
  with normalisation, a pair whose sum is below 1e-12 fall back to linear interpolation
  (1 - beta, beta), the limit of alpha when D is flat.
- **Distance functions**: Gaussian, Triangle (exact cubic B-spline form or the papers' one),
  Rectangle and random Fourier features have closed forms that the compiled kernels evaluate
  themselves (weights on the fly, nothing stored per point); the mapping is used only after
  checking it against ``embedder.distance``. Other embedders that define ``distance`` use it
  (vectorised); an embedder without one uses its sampled encodings, D(x, y) = <Psi(x), Psi(y)>
  (the same projection, not shift-invariant). Those two store (indices, weights).
  ``embedders=None`` gives plain multilinear interpolation.
- **Grid**: ``grid`` is a shape (nodes ``linspace(0, 1, M_i)``, covering [0, 1]: no point of
  [0, 1] is outside) or a list of per-axis node coordinates (strictly increasing, in [0, 1], at
  least 2 nodes); an int entry and an array entry can be mixed. A point exactly on a node gets
  weight exactly 1 there; on the last node it belongs to the last cell with beta = 1.
- **Outside points**: ``outside="error"`` (default) raises ValueError for a point outside the
  grid's range along some axis; ``"clamp"`` moves it onto the nearest boundary of that range.
- **Memory order**: the first product computes a plan, once per matrix: the points sorted
  (stably) by the flat index of their grid cell. ``matvec`` (a gather) and ``rmatvec`` (a
  scatter) visit the points in that order, so that they walk the grid's memory in order instead
  of jumping to a random cell per point; ``matvec`` gives the same bits in any order. Points that
  are sorted already (``fit_points`` sorts its matrix) cost one pass to check. ``take`` starts
  a new plan.
- **Kept per-axis weights** (``cache_weights``): with the plan, an on-the-fly matrix keeps, in
  the plan's order, each point's cell (the flat index of its first corner) and its D weight
  pairs, 8 + 16 D bytes per point (the stored form takes 16 * 2^D); its products then form the
  2^D corner weights from them in registers, the products the on-the-fly kernels form (the same
  bits), and move memory instead of computing exponentials (kronpe/blend.h: compute_factors).
  By default when they take at most 1 GiB and a quarter of the memory budget.
- **Determinism**: ``rmatvec`` (a scatter-add) cuts the grid into slabs, whose points are
  contiguous in the plan's order, and adds slabs that cannot overlap at the same time, with no
  atomics: the result is bitwise the same for any number of threads (kronpe/blend.h).
- **GPU**: points given as a CuPy array or a CUDA torch tensor are copied to the host once (for
  validation and the host-side structures) and kept on their device; ``matvec``/``rmatvec`` of
  device values run the CUDA kernels on the values' device and current stream and return the
  same kind there (the points, and stored weights, are uploaded to that device once and cached).
  ``rmatvec`` on the GPU is deterministic by default (a plan sorts the nonzeros by grid node
  once, then every node sums its contributions in a fixed order); with
  ``gpu_deterministic = False`` it scatters with atomicAdd (no plan, last bits vary run to run).
"""
from __future__ import annotations

import copy
import numbers
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np

from .. import _core
from .._adapters import arrays as _arrays, validate as _validate
from .._adapters.arrays import like

# Weight kinds of the compiled kernels (csrc/include/kronpe/blend.h, enum Kernel).
LINEAR, GAUSSIAN, BSPLINE3, TRI, TRI_SQ = 0, 1, 2, 3, 4
SINGULAR_RCOND = 1e-8  # kronpe::blend::kSingularRcond
TINY_SUM = 1e-12  # kronpe::blend::kTinySum
MAX_DIMS = 20  # kronpe::blend::kMaxDims
_SAMPLED_CHUNK = 1 << 14  # points per chunk when the weights come from sampled encodings

GridSpec = Union[int, Sequence[Union[int, Sequence[float], np.ndarray]]]


# ---- per-axis weight functions ---------------------------------------------------------------


#: names of Embedder.blend_kernel() -> the kernels' weight kinds
_KINDS = {"gaussian": GAUSSIAN, "bspline3": BSPLINE3, "tri": TRI, "tri_sq": TRI_SQ}


def _closed_form_candidate(emb) -> Optional[Tuple[int, float]]:
    """(kind, param) of the closed form the embedder declares (Embedder.blend_kernel), if any."""
    declare = getattr(emb, "blend_kernel", None)
    cand = declare() if callable(declare) else None
    if cand is None:
        return None
    name, param = cand
    if name not in _KINDS:
        raise ValueError(f"{type(emb).__name__}.blend_kernel() returned an unknown kind {name!r} "
                         f"(expected one of {sorted(_KINDS)})")
    return _KINDS[name], float(param)


def _kernel_distance(kind: int, param: float, delta: np.ndarray) -> np.ndarray:
    """The compiled kernels' D (up to scale), in NumPy: used to check the mapping."""
    d = np.abs(np.asarray(delta, dtype=np.float64))
    if kind == GAUSSIAN:
        return np.exp(-param * d * d)
    if kind == BSPLINE3:
        u = d * param
        return np.where(u <= 1, 2 / 3 - u * u + 0.5 * u**3, np.where(u <= 2, (2 - u) ** 3 / 6, 0.0))
    if kind == TRI:
        return np.maximum(1.0 - d * param, 0.0)
    if kind == TRI_SQ:
        return np.maximum(1.0 - d * param, 0.0) ** 2
    raise ValueError(f"unknown weight kind {kind}")


def _has_own_distance(emb) -> bool:
    from ..embedders import Embedder

    own = getattr(type(emb), "distance", None)
    return own is not None and own is not getattr(Embedder, "distance", None)


def axis_rule(emb, spacing: float) -> Tuple[str, Optional[Tuple[int, float]]]:
    """How the weights of one axis are computed: ("kernel", (kind, param)), ("distance", None),
    ("sampled", None) or ("linear", (LINEAR, 0.0)) for ``emb=None``.

    A closed form is used only if it matches ``emb.distance`` up to a constant factor on
    deltas from 0 to a few grid spacings (relative 1e-9).
    """
    if emb is None:
        return "linear", (LINEAR, 0.0)
    cand = _closed_form_candidate(emb)
    if cand is not None and _has_own_distance(emb):
        delta = np.linspace(0.0, 4.0 * spacing, 33)
        try:
            ref = np.asarray(emb.distance(delta), dtype=np.float64)
        except Exception:  # pragma: no cover - an embedder whose distance fails falls back
            ref = None
        if ref is not None and ref.shape == delta.shape and ref[0] > 0:
            mine = _kernel_distance(cand[0], cand[1], delta)
            if np.allclose(ref / ref[0], mine / mine[0], rtol=1e-9, atol=1e-12):
                return "kernel", cand
    if _has_own_distance(emb):
        return "distance", None
    return "sampled", None


def _cells(q: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """Largest j with nodes[j] <= q, in [0, M - 2] (the kernels' rule)."""
    return np.clip(np.searchsorted(nodes, q, side="right") - 1, 0, nodes.size - 2)


def _solve_pairs(g00, g11, g01, r0, r1, beta, normalize: bool):
    """alpha = [[g00, g01], [g01, g11]]^-1 [r0, r1] per point, with the degenerate rules."""
    det = g00 * g11 - g01 * g01
    singular = ~(det > SINGULAR_RCOND * g00 * g11)
    with np.errstate(divide="ignore", invalid="ignore"):
        w0 = (g11 * r0 - g01 * r1) / det
        w1 = (g00 * r1 - g01 * r0) / det
    w0 = np.where(singular, 1.0 - beta, w0)
    w1 = np.where(singular, beta, w1)
    if normalize:
        s = w0 + w1
        ok = np.abs(s) > TINY_SUM
        with np.errstate(divide="ignore", invalid="ignore"):
            w0 = np.where(ok, w0 / s, 1.0 - beta)
            w1 = np.where(ok, w1 / s, beta)
    return w0, w1


def python_axis_weights(q: np.ndarray, nodes: np.ndarray, emb, rule: str, normalize: bool):
    """Cells and weight pairs of coordinates q (float64, inside the nodes' range) along one axis
    for the rules the kernels do not know ("distance", "sampled")."""
    j = _cells(q, nodes)
    g0, g1 = nodes[j], nodes[j + 1]
    h = g1 - g0
    beta = (q - g0) / h
    if rule == "distance":
        dist = lambda d: np.asarray(emb.distance(d), dtype=np.float64)  # noqa: E731
        d0 = float(dist(np.zeros(1))[0])
        dh = dist(np.diff(nodes))[j]
        r0 = dist(beta * h)
        r1 = dist((1.0 - beta) * h)
        w0, w1 = _solve_pairs(np.full_like(q, d0), np.full_like(q, d0), dh, r0, r1, beta, normalize)
        return j, w0, w1
    # sampled: D(x, y) = <Psi(x), Psi(y)> of the embedder as it is
    psi_n = np.asarray(emb(nodes), dtype=np.float64)  # (M, K)
    norms = np.einsum("mk,mk->m", psi_n, psi_n)
    cross = np.einsum("mk,mk->m", psi_n[:-1], psi_n[1:])  # (M - 1,)
    r0 = np.empty_like(q)
    r1 = np.empty_like(q)
    for s in range(0, q.size, _SAMPLED_CHUNK):
        sl = slice(s, s + _SAMPLED_CHUNK)
        psi_q = np.asarray(emb(q[sl]), dtype=np.float64)
        r0[sl] = np.einsum("pk,pk->p", psi_q, psi_n[j[sl]])
        r1[sl] = np.einsum("pk,pk->p", psi_q, psi_n[j[sl] + 1])
    w0, w1 = _solve_pairs(norms[j], norms[j + 1], cross[j], r0, r1, beta, normalize)
    return j, w0, w1


def combine_axes(cells: List[np.ndarray], pairs: List[Tuple[np.ndarray, np.ndarray]],
                 strides: Sequence[int]) -> Tuple[np.ndarray, np.ndarray]:
    """(indices, weights) of shape (P, 2^D) from per-axis cells and weight pairs, in the kernels'
    corner order (axis 0 is the most significant bit) and rounding order."""
    P = cells[0].size if cells else 0
    base = np.zeros(P, dtype=np.int64)
    w = np.ones((P, 1))
    off = np.zeros(1, dtype=np.int64)
    for j, (a0, a1), st in zip(cells, pairs, strides):
        base += j.astype(np.int64) * st
        w = np.stack([w * a0[:, None], w * a1[:, None]], axis=2).reshape(P, -1)
        off = np.stack([off, off + st], axis=1).reshape(-1)
    return base[:, None] + off[None, :], w


# ---- argument handling -------------------------------------------------------------------------


def grid_nodes(grid: GridSpec, D: Optional[int]) -> List[np.ndarray]:
    """Per-axis node coordinates from a shape or from node arrays (validated): the ``grid``
    argument of a blending matrix, and of the fits and modules that build one."""
    if isinstance(grid, numbers.Integral) and not isinstance(grid, bool):
        if D is None:
            raise ValueError("grid must be a sequence (one entry per axis) when D is unknown")
        grid = [int(grid)] * D
    if isinstance(grid, np.ndarray) and grid.ndim == 1 and grid.dtype.kind in "iu":
        grid = [int(g) for g in grid]
    if not isinstance(grid, (list, tuple)):
        raise TypeError(
            f"grid must be a shape (nodes per axis) or a list of per-axis node coordinates, got {type(grid).__name__}"
        )
    if D is not None and len(grid) != D:
        raise ValueError(f"grid must have one entry per axis ({D}), got {len(grid)}")
    def is_count(g) -> bool:
        return isinstance(g, numbers.Number) or g is None or isinstance(g, (str, bytes))

    counts = {i: _validate.integer(f"grid[{i}]", g, low=2) for i, g in enumerate(grid) if is_count(g)}
    # every axis's node array, all of them, before the first is made, with room for one temporary
    # of each (their spacing, np.diff, when a blending matrix reads its axis rules)
    _validate.check_array_budget("grid", (sum(counts.values()), 2), 8, "use fewer grid nodes (by default a "
                                 "fit's grid has K + 1 nodes per axis: a smaller embedder K gives fewer)")
    nodes = []
    for i, g in enumerate(grid):
        if i in counts:
            nodes.append(np.linspace(0.0, 1.0, counts[i]))
            continue
        arr = _validate.coords_1d(f"grid[{i}]", g, dtype=np.float64)
        if arr.size < 2:
            raise ValueError(f"grid[{i}] must hold at least 2 node coordinates, got {arr.size}")
        if np.any(np.diff(arr) <= 0):
            raise ValueError(f"grid[{i}] must be strictly increasing")
        nodes.append(np.ascontiguousarray(arr))
    if not nodes or len(nodes) > MAX_DIMS:
        raise ValueError(f"grid must have between 1 and {MAX_DIMS} axes, got {len(nodes)}")
    _validate.size_product("grid", [n.size for n in nodes])
    return nodes


def _embedder(name: str, e):
    """An embedder (an object with ``K`` that embeds coordinates) or None."""
    if e is not None and (isinstance(e, type) or not callable(e) or not hasattr(e, "K")):
        raise TypeError(f"{name} must be a kronpe embedder (or None), got {_validate.describe(e)}")
    return e


def embedder_list(embedders, D: int) -> List[Any]:
    """The ``embedders`` argument as D embedders or Nones (None: D Nones; one embedder: D times)."""
    if embedders is None:
        return [None] * D
    if isinstance(embedders, (list, tuple)):
        if len(embedders) != D:
            raise ValueError(f"embedders must have one entry per axis ({D}), got {len(embedders)}")
        return [_embedder(f"embedders[{i}]", e) for i, e in enumerate(embedders)]
    return [_embedder("embedders", embedders)] * D  # one embedder for every axis


def default_grid(embedders: Sequence[Any]) -> List[int]:
    """The default virtual grid of embedders: K_base + 1 nodes per axis over [0, 1] (one node per
    centre spacing), the grid of ``fit_points`` and of ``kronpe.torch``'s blended modules."""
    return [int(getattr(e, "K_base", e.K)) + 1 for e in embedders]


def validate_points(points, outside: str, nodes: Optional[List[np.ndarray]] = None,
                    name: str = "points") -> np.ndarray:
    """A (P, D) float32/float64 array of finite coordinates; inside the grid's range unless
    ``outside="clamp"`` (then clamped, as a copy). Strides are kept when possible."""
    _validate.choice("outside", outside, ("error", "clamp"))
    pts = _validate.real_array(name, points)
    if pts.ndim != 2:
        raise ValueError(f"{name} must have shape (P, D), got {pts.shape}")
    dt = _validate.float_dtype(name, pts)
    pts = pts.astype(dt, copy=False)
    _validate.finite(name, pts)
    if nodes is None or pts.shape[0] == 0:
        return pts
    if pts.shape[1] != len(nodes):
        raise ValueError(f"{name} must have shape (P, {len(nodes)}) for a {len(nodes)}-D grid, got {pts.shape}")
    lo = np.array([n[0] for n in nodes])
    hi = np.array([n[-1] for n in nodes])
    small = _validate.compact(pts)
    pmin, pmax = (r.astype(np.float64) for r in _validate.column_range(small))
    # float32 points may round a boundary node outwards by an ulp: that much is tolerated (the
    # kernels clamp it), anything further is outside
    slack = 4 * float(np.finfo(np.float32).eps) * np.maximum(np.abs(lo), np.abs(hi)) if dt == np.float32 else 0.0
    out = (pmin < lo - slack) | (pmax > hi + slack)
    if outside == "error":
        if out.any():
            i = int(np.argmax(out))
            where = "[0, 1]" if (lo[i] == 0 and hi[i] == 1) else f"the grid range [{lo[i]:g}, {hi[i]:g}]"
            raise ValueError(
                f"{name} must lie in {where} along axis {i}, got values in [{pmin[i]:g}, {pmax[i]:g}]"
                ' (use outside="clamp" to clamp them onto the grid)'
            )
        return pts
    if out.any():
        _validate.check_array_budget(name, pts.shape, pts.itemsize, f"pass fewer {name}")
        pts = np.clip(pts, lo.astype(dt), hi.astype(dt))
    return pts


def _values_2d(name: str, x, rows: int, what: str) -> Tuple[np.ndarray, tuple]:
    """(rows, C) float32/float64 view of a vector/matrix argument, and the trailing shape."""
    arr = _validate.real_array(name, x)
    dt = _validate.float_dtype(name, arr)
    _validate.check_array_budget(name, arr.shape, dt.itemsize, f"pass a smaller {name}")
    arr = arr.astype(dt, copy=False)
    if arr.ndim == 0 or arr.shape[0] != rows:
        raise ValueError(f"{name} must have {rows} rows ({what}), got shape {arr.shape}")
    trailing = arr.shape[1:]
    arr2 = arr.reshape(rows, int(np.prod(trailing))) if arr.ndim != 2 else arr
    if any(s % arr2.itemsize for s in arr2.strides):  # pragma: no cover - odd strides
        arr2 = np.ascontiguousarray(arr2)
    return arr2, trailing


def _threads(threads: Optional[int]) -> int:
    return _validate.threads("threads", threads)


# ---- the matrix ------------------------------------------------------------------------------------


class BlendingMatrix:
    """The sparse P x prod(M_i) blending matrix of scattered points on a virtual grid.

    Parameters
    ----------
    points : array (P, D)
        Coordinates in [0, 1] (float32 or float64; other real types become float64).
    grid : shape or list of node arrays
        Nodes per axis (``linspace(0, 1, M_i)``) or the node coordinates of each axis.
    embedders : embedder, list of D embedders, or None
        Whose distance function gives the weights; one embedder is used on every axis; None
        gives multilinear interpolation.
    normalize : bool
        Divide each axis's weight pair by its sum (default True: rows sum to 1).
    outside : {"error", "clamp"}
        What to do with points outside the grid's range.
    threads : int, optional
        OpenMP threads of the kernels (default: OpenMP's default).
    cache_weights : bool, optional
        Whether an on-the-fly matrix keeps each point's per-axis weights once it has sorted its
        points by cell (from the second ``B @ v``, or the first ``B.T @ r``): 8 + 16 D bytes per
        point (the stored form, :meth:`store`, takes 16 * 2^D), which later products read
        instead of recomputing the weights, with the same bits. None (default): when they take
        at most 1 GiB and a quarter of the memory budget; False: never (the weights are then
        computed in every product: memory for the points only).

    Notes
    -----
    ``B @ v`` and ``matvec`` take grid values of shape (G,), (G, C), (M_1, ..., M_D) or
    (M_1, ..., M_D, C) and return (P,) or (P, C); ``rmatvec`` takes (P,) or (P, C) and returns
    (G,) or (G, C) (flat, row-major over the grid; ``.grid_shape`` reshapes it).
    """

    #: GPU rmatvec: deterministic (planned) when True, atomicAdd scatter when False
    gpu_deterministic: bool = True

    def __init__(self, points, grid: GridSpec, embedders=None, normalize: bool = True,
                 outside: str = "error", threads: Optional[int] = None,
                 cache_weights: Optional[bool] = None):
        on_device = _arrays.is_device(points)
        pts_in = _arrays.to_host(points, "points") if on_device else _validate.real_array("points", points)
        D = pts_in.shape[1] if pts_in.ndim == 2 else None
        if D == 0:
            raise ValueError("points must have shape (P, D) with D >= 1, got D = 0")
        self.grid_coords: Tuple[np.ndarray, ...] = tuple(grid_nodes(grid, D))
        pts = validate_points(pts_in, outside, list(self.grid_coords))
        unchanged = pts is pts_in
        # a private read-only copy: later edits of the caller's array change nothing here
        _validate.check_array_budget("points", pts.shape, pts.itemsize, "pass fewer points")
        self.points = np.array(pts, order="C", copy=True)
        self.points.flags.writeable = False
        self.normalize = bool(normalize)
        self.outside = outside
        self.threads = _threads(threads)
        if cache_weights is not None and not isinstance(cache_weights, (bool, np.bool_)):
            raise TypeError(f"cache_weights must be True, False or None, got {cache_weights!r}")
        self.cache_weights = None if cache_weights is None else bool(cache_weights)
        D = len(self.grid_coords)
        self.embedders = tuple(embedder_list(embedders, D))
        rules = [axis_rule(e, float(np.min(np.diff(n)))) for e, n in zip(self.embedders, self.grid_coords)]
        self.rules: Tuple[str, ...] = tuple(r for r, _ in rules)
        self._kinds = [k for _, k in rules]
        # the kernels' axis descriptions; Python-ruled axes get a linear placeholder
        self._axes = [
            (_arrays.describe(n, f"grid[{i}]"), *(k if k is not None else (LINEAR, 0.0)))
            for i, (n, k) in enumerate(zip(self.grid_coords, self._kinds))
        ]
        info = _core.blend_info(self._axes)
        self.grid_shape: Tuple[int, ...] = tuple(n.size for n in self.grid_coords)
        self.grid_size = int(info["grid_size"])
        self.strides: Tuple[int, ...] = tuple(int(s) for s in info["strides"])
        self.span = int(info["span"])
        self.on_the_fly = all(r in ("kernel", "linear") for r in self.rules)
        self._indices: Optional[np.ndarray] = None
        self._weights: Optional[np.ndarray] = None
        self._plan: Optional[Tuple[np.ndarray, np.ndarray, int, bool]] = None
        # in the plan's order: the points ("fly"), their per-axis weights ("factors": base (P, 1)
        # and pairs (P, 2D), see cache_weights) or the stored (indices, weights) ("stored")
        self._ordered: dict = {}
        self._matvecs = 0  # host products B v so far: the first one runs without the plan (matvec)
        # per (array kind, CUDA device): device copies of the points / stored weights, the plan
        self._device: dict = {}
        if on_device and unchanged:  # validated as they were: keep the device array
            self._device[(_arrays.kind(points), _arrays.device_index(points))] = {"points": points}
        if not self.on_the_fly:
            self._indices, self._weights = self._compute_stored()

    # -- shape and structure ------------------------------------------------------------
    @property
    def shape(self) -> Tuple[int, int]:
        return (self.points.shape[0], self.grid_size)

    @property
    def ndim(self) -> int:
        return 2

    @property
    def nnz_per_row(self) -> int:
        return 1 << len(self.grid_coords)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.float64)

    def _compute_stored(self) -> Tuple[np.ndarray, np.ndarray]:
        P, nc = self.points.shape[0], self.nnz_per_row
        idx = np.empty((P, nc), dtype=np.int64)
        w = np.empty((P, nc), dtype=np.float64)
        if P == 0:
            return idx, w
        if self.on_the_fly:
            _core.blend_weights(self._axes, self.normalize, self._points_array(), _arrays.describe(idx), _arrays.describe(w),
                                self.threads)
            return idx, w
        cells, pairs = [], []
        for i, (n, rule, kind) in enumerate(zip(self.grid_coords, self.rules, self._kinds)):
            q = np.clip(self.points[:, i].astype(np.float64), n[0], n[-1])  # as the kernels clamp
            if rule in ("kernel", "linear"):
                j = np.empty(P, dtype=np.int64)
                a0, a1 = np.empty(P), np.empty(P)
                _core.blend_axis_weights(self._axes, self.normalize, i, _arrays.describe(q), _arrays.describe(j), _arrays.describe(a0),
                                         _arrays.describe(a1))
            else:
                j, a0, a1 = python_axis_weights(q, n, self.embedders[i], rule, self.normalize)
            cells.append(j)
            pairs.append((a0, a1))
        return combine_axes(cells, pairs, self.strides)

    @property
    def indices(self) -> np.ndarray:
        """(P, 2^D) int64 flat grid indices of every row (row-major over the grid)."""
        if self._indices is None:
            self._indices, self._weights = self._compute_stored()
        return self._indices

    @property
    def weights(self) -> np.ndarray:
        """(P, 2^D) float64 weights of every row, in the order of ``indices``."""
        if self._weights is None:
            self._indices, self._weights = self._compute_stored()
        return self._weights

    def store(self) -> "BlendingMatrix":
        """Compute and keep (indices, weights): later products read them instead of recomputing
        the weights (faster when the matrix is applied many times). Returns self."""
        _ = self.indices
        self.on_the_fly = False
        self._ordered.pop("factors", None)
        self._ordered.pop("fly", None)
        return self

    def take(self, rows) -> "BlendingMatrix":
        """The stored matrix of the points ``points[rows]`` (a subset or a reordering), sharing
        the grid and reusing the computed weights."""
        rows = np.asarray(rows)
        if rows.dtype.kind not in "iub" or rows.ndim != 1:
            raise TypeError(f"rows must be a 1-D array of integer row indices (or a boolean mask), got "
                            f"{rows.dtype} of shape {rows.shape}")
        P = self.points.shape[0]
        if rows.dtype.kind == "b":
            if rows.size != P:
                raise ValueError(f"rows: a boolean mask needs one entry per point ({P}), got {rows.size}")
        elif rows.size and (rows.min() < -P or rows.max() >= P):
            raise ValueError(f"rows must lie in [-{P}, {P}) (the matrix has {P} rows), got [{rows.min()}, "
                             f"{rows.max()}]")
        new = copy.copy(self)
        new.points = self.points[rows]
        new._indices = np.ascontiguousarray(self.indices[rows])
        new._weights = np.ascontiguousarray(self.weights[rows])
        new._plan = None
        new._matvecs = 0
        new._ordered = {}
        new._device = {}
        new.on_the_fly = False
        return new

    # -- products -------------------------------------------------------------------------
    def _points_array(self) -> "_arrays.Array":
        """The host points' descriptor (the array is held by ``self.points``)."""
        return _arrays.describe(self.points, "points")

    def _order(self) -> Tuple[np.ndarray, np.ndarray, int, bool]:
        """The plan (module docstring, memory order): (perm, slab offsets, span, whether perm is
        the identity), computed once."""
        if self._plan is None:
            P, span = self.points.shape[0], self.span  # stored rows never span more (same strides)
            _, slabs = _core.blend_layout(self.grid_size, span)
            perm = np.empty(P, dtype=np.int64)
            ptr = np.empty(slabs + 1, dtype=np.int64)
            if self.on_the_fly:
                _core.blend_plan_fly(self._axes, self._points_array(), _arrays.describe(perm), _arrays.describe(ptr), self.threads)
            else:
                _core.blend_plan_stored(_arrays.describe(self.indices), self.grid_size, span, _arrays.describe(perm), _arrays.describe(ptr),
                                        self.threads)
            self._plan = (perm, ptr, span, bool(np.all(perm[1:] > perm[:-1])))
        return self._plan

    def _caches_weights(self) -> bool:
        """Whether the planned products of this on-the-fly matrix read kept per-axis weights
        (``cache_weights``; decided once, at the first planned product)."""
        if self.cache_weights is None:
            P, D = self.points.shape
            nbytes = P * (8 + 16 * D)
            self.cache_weights = nbytes <= min(1 << 30, _validate.memory_budget() // 4)
        return self.cache_weights

    def _ordered_operands(self) -> Tuple[str, tuple]:
        """The kernels' operands in the plan's order with their kind: ("fly", (points,)),
        ("factors", (base, pairs)) (when kept: ``cache_weights``) or ("stored", (indices,
        weights)); the matrix's own arrays when the points are in that order already."""
        perm, _, _, identity = self._order()
        if self.on_the_fly and self._caches_weights():
            if "factors" not in self._ordered:
                P, D = self.points.shape
                _validate.check_array_budget("points", (P, 1 + 2 * D), 8,
                                             "pass cache_weights=False to compute the weights in every product")
                base, pairs = np.empty((P, 1), np.int64), np.empty((P, 2 * D))
                _core.blend_factors(self._axes, self.normalize, self._points_array(), _arrays.describe(base),
                                    _arrays.describe(pairs), self.threads, None if identity else _arrays.describe(perm))
                self._ordered["factors"] = (base, pairs)
            return "factors", self._ordered["factors"]
        key = "fly" if self.on_the_fly else "stored"
        if key not in self._ordered:
            own = (self.points,) if self.on_the_fly else (self.indices, self.weights)
            self._ordered[key] = own if identity else tuple(np.ascontiguousarray(a[perm]) for a in own)
        return key, tuple(_arrays.describe(a) for a in self._ordered[key])

    def matvec(self, v, out: Optional[np.ndarray] = None) -> np.ndarray:
        """B v: values on the grid -> values at the points.

        Parameters
        ----------
        v : array (G,), (G, C), (M_1, ..., M_D) or (M_1, ..., M_D, C)
        out : array (P,) or (P, C), optional
            Written in place (same dtype as v).
        """
        if _arrays.is_device(v):
            return self._matvec_device(v, out)
        arr = _validate.real_array("v", v)
        if arr.shape[: len(self.grid_shape)] == self.grid_shape and arr.ndim in (len(self.grid_shape), len(self.grid_shape) + 1) and len(self.grid_shape) > 1:
            arr = arr.reshape((self.grid_size,) + arr.shape[len(self.grid_shape):])
        if arr.ndim > 2:
            raise ValueError(f"v must have shape (G,), (G, C) or the grid's shape {self.grid_shape} (+ channels), got {arr.shape}")
        v2, trailing = _values_2d("v", arr, self.grid_size, "one per grid node")
        P = self.points.shape[0]
        res = self._out("out", out, (P,) + trailing, v2.dtype, "points")
        v2 = _validate.separate(res, v2)
        self._gather(v2, res.reshape(P, v2.shape[1]))
        return like(res, v) if out is None else res

    def _gather(self, v2: np.ndarray, r2: np.ndarray) -> None:
        """r2 = B v2, unchecked: v2 (G, C) and r2 (P, C) host arrays of one float dtype, C-contiguous,
        not overlapping (matvec's kernel call; solvers' inner loops call it directly)."""
        P = r2.shape[0]
        if P and v2.shape[1]:
            # the plan (points sorted by cell) pays for itself only over several products: a first
            # product gathers in the points' own order (a one-off product of 1M random points on a
            # 2049^2 grid takes half the time without the plan's sort)
            planned = self._plan is not None or self._matvecs > 0
            self._matvecs += 1
            if planned:
                perm, _, _, identity = self._order()
                (kind, ops), rows = self._ordered_operands(), None if identity else _arrays.describe(perm)
            else:
                kind = "fly" if self.on_the_fly else "stored"
                own = (self.points,) if self.on_the_fly else (self.indices, self.weights)
                ops, rows = tuple(_arrays.describe(a) for a in own), None
            if kind == "factors":
                _core.blend_factored(self._axes, self.normalize, *ops, _arrays.describe(v2, "v"), _arrays.describe(r2, "out"),
                                     self.threads, rows)
            elif kind == "fly":
                _core.blend_fly(self._axes, self.normalize, *ops, _arrays.describe(v2, "v"), _arrays.describe(r2, "out"), self.threads, rows)
            else:
                _core.blend_stored(*ops, _arrays.describe(v2, "v"), _arrays.describe(r2, "out"), self.threads, rows)

    def rmatvec(self, r, out: Optional[np.ndarray] = None) -> np.ndarray:
        """B^T r: values at the points -> scatter-added onto the grid (flat, row-major).

        Parameters
        ----------
        r : array (P,) or (P, C)
        out : array (G,) or (G, C), optional
            Written in place (same dtype as r).
        """
        if _arrays.is_device(r):
            return self._rmatvec_device(r, out)
        P = self.points.shape[0]
        arr = _validate.real_array("r", r)
        if arr.ndim > 2:
            raise ValueError(f"r must have shape (P,) or (P, C), got {arr.shape}")
        r2, trailing = _values_2d("r", arr, P, "one per point")
        res = self._out("out", out, (self.grid_size,) + trailing, r2.dtype, "grid")
        r2 = _validate.separate(res, r2)
        self._scatter(r2, res.reshape(self.grid_size, r2.shape[1]))
        return like(res, r) if out is None else res

    def _scatter(self, r2: np.ndarray, g2: np.ndarray) -> None:
        """g2 = B^T r2, unchecked (as ``_gather``): r2 (P, C), g2 (G, C)."""
        if r2.shape[0] == 0 or r2.shape[1] == 0:
            g2[...] = 0
            return
        perm, ptr, span, _ = self._order()
        (kind, ops), plan = self._ordered_operands(), (_arrays.describe(perm), _arrays.describe(ptr), True)
        if kind == "factors":
            _core.blend_transpose_factored(self._axes, self.normalize, *ops, _arrays.describe(r2, "r"),
                                           _arrays.describe(g2, "out"), self.threads, *plan)
        elif kind == "fly":
            _core.blend_transpose_fly(self._axes, self.normalize, *ops, _arrays.describe(r2, "r"), _arrays.describe(g2, "out"),
                                      self.threads, *plan)
        else:
            _core.blend_transpose_stored(*ops, _arrays.describe(r2, "r"), _arrays.describe(g2, "out"), span, self.threads, *plan)

    def _normal_add(self, v: np.ndarray, out: np.ndarray, keep: Optional[np.ndarray] = None) -> bool:
        """out += B^T diag(keep) B v, unchecked: v and out (G,) host arrays of one float dtype,
        C-contiguous, keep (P,) of that dtype in the points' order or None (the identity). One
        compiled pass over the stored rows in the plan's order on one thread
        (``_core.blend_normal_add``: no grid-sized temporary, where gather and transpose would write
        one and add it); returns False, doing nothing, for a matrix on the fly or kernels on more
        threads (the caller then takes ``_gather`` and ``_scatter``)."""
        if self.on_the_fly or (self.threads or _core.get_num_threads()) != 1:
            return False
        perm, _, _, identity = self._order()
        kind, ops = self._ordered_operands()
        if keep is not None and not identity:  # keep in the plan's order, kept for the same array
            cached = self._ordered.get("keep")
            if cached is None or cached[0] is not keep:
                self._ordered["keep"] = cached = (keep, np.ascontiguousarray(keep[perm]))
            keep = cached[1]
        _core.blend_normal_add(*ops, _arrays.describe(v, "v"), _arrays.describe(out, "out"),
                               None if keep is None else _arrays.describe(keep, "keep"))
        return True

    # -- GPU products -------------------------------------------------------------------------
    def _device_state(self, like) -> dict:
        """Device copies for the device of ``like`` (uploaded once): points, or stored weights."""
        key = (_arrays.kind(like), _arrays.device_index(like))
        st = self._device.setdefault(key, {})
        if self.on_the_fly and "points" not in st:
            st["points"] = _arrays.device_from_host(self.points, like)
        if not self.on_the_fly and "indices" not in st:
            st["indices"] = _arrays.device_from_host(self.indices, like)
            st["weights"] = _arrays.device_from_host(self.weights, like)
        return st

    def _device_operands(self, st: dict) -> dict:
        if self.on_the_fly:
            return dict(axes=self._axes, normalize=self.normalize, points=st["points"])
        return dict(indices=st["indices"], weights=st["weights"])

    def _device_values(self, name: str, x, rows: int, what: str, grid_shaped: bool):
        """(rows, C) view of a device vector/matrix (grid-shaped input flattened), its trailing
        shape and dtype."""
        from .._adapters import cuda as _cuda

        gs = self.grid_shape
        if grid_shaped and len(gs) > 1 and tuple(x.shape[: len(gs)]) == gs and x.ndim in (len(gs), len(gs) + 1):
            x = x.reshape((self.grid_size,) + tuple(x.shape[len(gs):]))
        if x.ndim == 0 or x.ndim > 2 or x.shape[0] != rows:
            raise ValueError(f"{name} must have {rows} rows ({what}), got shape {tuple(x.shape)}")
        dt = _cuda.float_dtype(name, x)
        x = _arrays.cast(x, dt)
        trailing = tuple(int(n) for n in x.shape[1:])
        return x.reshape(rows, trailing[0] if trailing else 1), trailing, dt

    def _device_out(self, name: str, out, like, shape: tuple, dtype: str):
        from .._adapters import cuda as _cuda

        if out is None:
            return _arrays.device_empty(like, shape, dtype)
        _cuda.check_same_device(like, out, name)
        if tuple(out.shape) != shape or _arrays.dtype_name(out) != dtype:
            raise ValueError(f"{name} must have shape {shape} and dtype {dtype}, got "
                             f"{tuple(out.shape)} {_arrays.dtype_name(out)}")
        if _arrays.device_contiguous(out) is not out:
            raise ValueError(f"{name} must be C-contiguous")
        return out

    def _matvec_device(self, v, out):
        from .._adapters import cuda as _cuda

        v2, trailing, dt = self._device_values("v", v, self.grid_size, "one per grid node", True)
        P = self.points.shape[0]
        res = self._device_out("out", out, v2, (P,) + trailing, dt)
        r2 = res.reshape(P, v2.shape[1])
        if P and v2.shape[1]:
            _cuda.blend(v2, r2, **self._device_operands(self._device_state(v2)))
        return res

    def _rmatvec_device(self, r, out):
        from .._adapters import cuda as _cuda

        P = self.points.shape[0]
        r2, trailing, dt = self._device_values("r", r, P, "one per point", False)
        res = self._device_out("out", out, r2, (self.grid_size,) + trailing, dt)
        g2 = res.reshape(self.grid_size, r2.shape[1])
        if r2.shape[1] == 0:
            return res
        st = self._device_state(r2)
        ops = self._device_operands(st)
        plan = None
        if self.gpu_deterministic and P:
            if "plan" not in st:
                if self.on_the_fly:
                    st["plan"] = _cuda.blend_plan(r2, P, self.nnz_per_row, self.grid_size,
                                                  axes=self._axes, points=st["points"])
                else:
                    st["plan"] = _cuda.blend_plan(r2, P, self.nnz_per_row, self.grid_size,
                                                  indices=st["indices"])
            plan = st["plan"]
        _cuda.blend_transpose(r2, g2, plan=plan, **ops)
        return res

    @staticmethod
    def _out(name: str, out, shape: tuple, dtype, blame: str) -> np.ndarray:
        """``out`` checked, or a new result array (``blame``: the argument that sets its size)."""
        if out is None:
            _validate.check_array_budget(blame, shape, np.dtype(dtype).itemsize,
                                         f"the result has shape {shape}: use a smaller {blame}")
            return np.empty(shape, dtype=dtype)
        if not isinstance(out, np.ndarray):
            raise TypeError(f"{name} must be a NumPy array of shape {shape} and dtype {np.dtype(dtype)}, "
                            f"got {_validate.describe(out)}")
        if out.shape != shape or out.dtype != dtype:
            got = (getattr(out, "shape", None), getattr(out, "dtype", None))
            raise ValueError(f"{name} must be a NumPy array of shape {shape} and dtype {np.dtype(dtype)}, got {got}")
        if not (out.flags.writeable and out.flags.c_contiguous):
            raise ValueError(f"{name} must be a writeable C-contiguous array")
        return out

    def __matmul__(self, v):
        return self.matvec(v)

    @property
    def T(self) -> "_Transposed":
        """B^T as an object with ``@``, ``matvec`` (= B.rmatvec) and ``rmatvec`` (= B.matvec)."""
        return _Transposed(self)

    # -- views ------------------------------------------------------------------------------
    def to_scipy(self):
        """B as a scipy.sparse CSR matrix: exactly 2^D stored entries per row (zeros kept),
        column indices increasing within each row."""
        import scipy.sparse as sp

        P, nc = self.points.shape[0], self.nnz_per_row
        indptr = np.arange(0, (P + 1) * nc, nc, dtype=np.int64)
        return sp.csr_matrix(
            (self.weights.reshape(-1), self.indices.reshape(-1), indptr), shape=self.shape, copy=True
        )

    def aslinearoperator(self):
        """A scipy.sparse.linalg.LinearOperator view (matvec, rmatvec, matmat, rmatmat)."""
        from scipy.sparse.linalg import LinearOperator

        return LinearOperator(
            shape=self.shape, dtype=np.float64, matvec=self.matvec, rmatvec=self.rmatvec,
            matmat=self.matvec, rmatmat=self.rmatvec,
        )

    def __repr__(self) -> str:
        return (f"BlendingMatrix(P={self.shape[0]}, grid={self.grid_shape}, rules={self.rules}, "
                f"normalize={self.normalize}, on_the_fly={self.on_the_fly})")


class _Transposed:
    """B^T of a BlendingMatrix (a light view)."""

    def __init__(self, B: BlendingMatrix):
        self.B = B

    @property
    def shape(self) -> Tuple[int, int]:
        return (self.B.shape[1], self.B.shape[0])

    @property
    def T(self) -> BlendingMatrix:
        return self.B

    def matvec(self, r, out=None):
        return self.B.rmatvec(r, out=out)

    def rmatvec(self, v, out=None):
        return self.B.matvec(v, out=out)

    def __matmul__(self, r):
        return self.B.rmatvec(r)

    def to_scipy(self):
        return self.B.to_scipy().T.tocsr()
