"""Dask arrays in, dask arrays out: kronpe's plans and kernels mapped over chunks.

Install with ``pip install kronpe[dask]`` (dask, distributed, zarr). The public functions hand a
dask array here themselves (``kronpe.multi_mode_product``, ``fit_grid``, ``GridPlan.fit``,
``fit_points``, and ``GridModel.predict_grid`` / ``predict`` of a model with dask weights); this
module builds dask graphs and never schedules work itself: they run on whatever scheduler is
active (a ``dask.distributed.Client`` on one machine or many, or dask's threads). Decisions,
documented once, here:

- **Many signals per plan** (``GridPlan.fit`` / ``fit_grid`` of a signal whose grid axes are each
  one chunk, its trailing channel or batch axes chunked): the plan is one key of the graph, sent
  once to each worker that fits a chunk; every chunk is fitted by ``GridPlan.fit`` there (any
  ridge, GCV, penalty or mask). With ``ridge="gcv"`` the channels of one signal share their ridge,
  so the axes between the grid and the batch axes are made one chunk first. ``weights``, and
  ``ridge`` / ``gcv`` when chosen per batch entry, are dask arrays.
- **One signal larger than memory** (a grid axis in several chunks): the closed form
  W = (S x_i U_i^T * s / (s^2 + ridge)) x_i V_i is run as chains of mode-n products. Each
  product is a blocked contraction: the array is rechunked so that the contracted axes are one
  chunk (dask concatenates their chunks) and the other axes are cut to blocks of at most
  ``BLOCK_BYTES``; then every block is one compiled chain (``kronpe.ops.host_chain``). Modes
  whose axes are already one chunk are applied without rechunking; otherwise as many pending
  modes as keep a block within budget are grouped. No partial products are summed, so the flops
  are those of the in-memory chain and no worker holds more than a few blocks. The filter
  s / (s^2 + ridge) is applied per block from the per-axis singular values. The ridge must be a
  number here (GCV needs every projection at once); padding (``pad``) is the same
  point-reflection as in memory. ``predict_grid`` returns a dask array: write it with
  ``.to_zarr(path)``.
- **multi_mode_product** of a dask ``T`` (matrices in memory) is the same blocked chain.
- **fit_points** with dask ``points`` (P, D) and ``values`` (P, *channels), partitioned along
  their first axis: each partition's blending matrix (rows sorted by grid cell) is built and kept
  on a worker; every Krylov iteration sends the grid values (small) to the partitions, maps
  blend and blend-transpose over them and sums the partial grid products (a tree reduction), the
  rest of conjugate gradients running here on arrays of the weights' size. It is the in-memory
  solver (``kronpe.solvers.points``) with a partitioned blending operator: the same answer up to
  the order of floating-point sums. Needs explicit embedders and a numeric ridge (the held-out
  choice of lambda, the default lattice fit and penalties are in-memory only).
"""
from __future__ import annotations

import math
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

try:
    import dask
    import dask.array as da
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("kronpe.dask needs dask: pip install 'kronpe[dask]'") from exc

from ._adapters import validate as _validate
from ._shared import outer, ridge_or_auto
from .operators.blending import default_grid, embedder_list, grid_nodes, validate_points
from .ops import check_chain, host_chain, matrix_list
from .solvers import points as _points
from .solvers.grid import signal_arg
from .solvers.grid_model import GridModel

__all__ = ["multi_mode_product", "fit_plan", "predict_grid", "predict_points", "fit_points", "BLOCK_BYTES"]

#: Largest block (bytes of the bigger of a step's input and output) the blocked chains cut.
BLOCK_BYTES = 64 << 20


# ---- argument checks ----------------------------------------------------------------------------


def _float_dask(name: str, x, dtype=None) -> "da.Array":
    """A dask array of float32/float64 (float32 stays, other reals become float64), its chunk
    sizes known."""
    dt = _validate.real_dtype(name, x.dtype)
    if any(math.isnan(c) for cs in x.chunks for c in cs):
        raise ValueError(f"{name} has chunks of unknown size: call {name}.compute_chunk_sizes() first")
    if dtype is None:
        dtype = dt if dt in (np.float32, np.float64) else np.float64
    return x.astype(dtype) if x.dtype != dtype else x


def _host_matrix(name: str, a) -> np.ndarray:
    a = np.asarray(a.compute()) if hasattr(a, "dask") else a  # small dask matrices are gathered
    return _validate.real_array(name, a)


# ---- blocked chains of mode-n products ---------------------------------------------------------


def _chain_block(block: np.ndarray, mats: Sequence[np.ndarray], modes: Tuple[int, ...]) -> np.ndarray:
    return host_chain(block, mats, modes)


def _stage_chunks(x: "da.Array", whole: Sequence[int], out_sizes: Dict[int, int], budget: int):
    """Chunks of ``x`` with the axes ``whole`` in one chunk and the others cut so that a block of
    the input or of the output (axes k resized to out_sizes[k]) stays within ``budget`` bytes."""
    grow = math.prod(max(1.0, out_sizes.get(k, x.shape[k]) / max(x.shape[k], 1)) for k in whole)
    spec = {k: (-1 if k in whole else "auto") for k in range(x.ndim)}
    limit = max(int(budget / grow), x.dtype.itemsize)
    return da.core.normalize_chunks(tuple(spec[k] for k in range(x.ndim)), x.shape, limit=limit,
                                    dtype=x.dtype, previous_chunks=x.chunks)


def _group(x: "da.Array", pending: List[Tuple[int, np.ndarray]], budget: int) -> List[int]:
    """Pending modes to contract in one stage: the first, then each next one that keeps a block
    with all of them whole within budget (at least 8 elements left for the other axes)."""
    group: List[int] = []
    size = x.dtype.itemsize * 8
    for k, M in pending:
        s = max(x.shape[k], M.shape[0])
        if not group or size * s <= budget:
            group.append(k)
            size *= s
    return group


def chain(x: "da.Array", mats: Sequence[np.ndarray], modes: Sequence[int], budget: Optional[int] = None) -> "da.Array":
    """x x_{modes[0]} mats[0] ... as a dask array (module docstring: blocked contractions).
    ``x`` and ``mats`` share one float dtype; ``modes`` are checked distinct axes; ``budget``
    defaults to ``BLOCK_BYTES``."""
    budget = BLOCK_BYTES if budget is None else budget
    pending = list(zip(modes, mats))
    while pending:
        ready = [(k, M) for k, M in pending if len(x.chunks[k]) == 1]
        if not ready:
            group = _group(x, pending, budget)
            x = x.rechunk(_stage_chunks(x, group, {k: M.shape[0] for k, M in pending}, budget))
            ready = [(k, M) for k, M in pending if k in group]
        ks = tuple(k for k, _ in ready)
        ms = [M for _, M in ready]
        chunks = tuple((dict(zip(ks, ms))[k].shape[0],) if k in ks else c for k, c in enumerate(x.chunks))
        mk = dask.delayed(tuple(ms), pure=True, traverse=False)  # one key: each worker gets the matrices once
        x = x.map_blocks(_chain_block, mk, ks, chunks=chunks, dtype=x.dtype)
        pending = [(k, M) for k, M in pending if k not in ks]
    return x


def multi_mode_product(T, matrices, modes=None, order: str = "K") -> "da.Array":
    """``kronpe.multi_mode_product`` of a dask ``T``: a dask array (matrices in memory; dask
    matrices are gathered). ``order`` is accepted for the same signature: each block is dense."""
    _validate.choice("order", order, ("K", "C"))
    mats = [_host_matrix(f"matrices[{j}]", a) for j, a in enumerate(matrix_list(matrices))]
    t = _float_dask("T", T)
    mode_tuple = check_chain(t.shape, [a.shape for a in mats], modes)
    dt = t.dtype
    if dt != np.float32 or any(a.dtype != np.float32 for a in mats):
        dt = np.dtype(np.float64)
    if t.size == 0 or any(a.size == 0 for a in mats):
        shape = list(t.shape)
        for a, k in zip(mats, mode_tuple):
            shape[k] = a.shape[0]
        return da.zeros(shape, dtype=dt)
    return chain(t.astype(dt), [np.ascontiguousarray(a, dtype=dt) for a in mats], mode_tuple)


# ---- grid fits ----------------------------------------------------------------------------------


def _signal(plan, signal, nb: int) -> "da.Array":
    S = _float_dask("signal", signal)
    D = plan.ndim
    if S.ndim < D or tuple(S.shape[:D]) != tuple(plan.shape):
        raise ValueError(f"signal must have shape {tuple(plan.shape)} + channels to match the coordinates/embedders, "
                         f"got {S.shape}")
    if S.size == 0:
        raise ValueError(f"signal is empty (shape {S.shape}): every axis needs at least one value")
    if nb > S.ndim - D:
        raise ValueError(f"batch_axes={nb} but the signal has only {S.ndim - D} axes after the grid axes")
    return S


def _fit_block(plan, block: np.ndarray, ridge, nb: int, mask):
    """One chunk's fit on a worker: (weights, ridges over the chunk's batch, GCV scores)."""
    S = signal_arg(block, plan.shape, mask)
    model = plan._fit(S, ridge, nb, mask)
    batch = S.shape[S.ndim - nb:]
    lam = np.broadcast_to(np.asarray(model.ridge, np.float64), batch)
    gcv = np.broadcast_to(np.asarray(np.nan if model.gcv is None else model.gcv, np.float64), batch)
    return model.weights, np.array(lam), np.array(gcv)


def _fit_blocks(plan, S: "da.Array", ridge, nb: int, mask):
    """The fit of a signal whose grid axes are one chunk each: one task per trailing chunk."""
    D = plan.ndim
    if ridge == "gcv" or plan.penalty is not None or mask is not None:
        S = S.rechunk({k: -1 for k in range(D, S.ndim - nb)})  # channels of one signal together
    plan_key = dask.delayed(plan, pure=True)  # one key: each worker receives the plan once
    mask_key = None if mask is None else dask.delayed(mask, pure=True)
    dt = S.dtype
    blocks = S.to_delayed()
    grid_idx = (0,) * D
    trailing = blocks.shape[D:]
    W = np.empty(trailing, object)
    L = np.empty(trailing, object)
    G = np.empty(trailing, object)
    for idx in np.ndindex(*trailing):
        shape = tuple(S.chunks[D + j][i] for j, i in enumerate(idx))
        part = dask.delayed(_fit_block, nout=3, pure=True)(plan_key, blocks[grid_idx + idx], ridge, nb, mask_key)
        W[idx] = da.from_delayed(part[0], plan.K + shape, dtype=dt)
        bshape = shape[len(shape) - nb:]
        L[idx] = da.from_delayed(part[1], bshape, dtype=np.float64)
        G[idx] = da.from_delayed(part[2], bshape, dtype=np.float64)
    weights = da.block(W.tolist()) if trailing else W[()]
    if ridge != "gcv" and plan.penalty is None and mask is None:
        return GridModel(weights, plan.embedders, ridge)
    # per batch entry: blocks along the batch axes (channel chunks share one value: take the first)
    first = (0,) * (len(trailing) - nb)
    pick = lambda A: A[first] if nb == 0 else da.block(A[first].tolist())  # noqa: E731
    lam, gcv = pick(L), pick(G)
    if nb == 0:
        lam, gcv = lam.reshape(()), gcv.reshape(())
    return GridModel(weights, plan.embedders, lam, None if ridge != "gcv" else gcv)


def _pad_odd(x: "da.Array", pads: Sequence[int]) -> "da.Array":
    """numpy.pad(mode="reflect", reflect_type="odd") along the leading axes (dask's pad has no
    odd reflection): 2 x[0] - x[p..1] before, 2 x[-1] - x[-2..-p-1] after."""
    for k, p in enumerate(pads):
        if p == 0:
            continue
        n = x.shape[k]
        lead = (slice(None),) * k
        first, last = x[lead + (slice(0, 1),)], x[lead + (slice(n - 1, n),)]
        before = 2 * first - x[lead + (slice(p, 0, -1),)]
        after = 2 * last - x[lead + (slice(n - 2, n - 2 - p if n - 2 - p >= 0 else None, -1),)]
        x = da.concatenate([before, x, after], axis=k)
    return x


def _filter_block(z: np.ndarray, plan, ridge: float, block_info=None) -> np.ndarray:
    """z * s / (s^2 + ridge) on one block of Z0, s the products of the block's singular values."""
    loc = block_info[0]["array-location"]
    D = plan.ndim
    s = outer([a.s[lo:hi] for a, (lo, hi) in zip(plan._axes, loc[:D])])
    f = plan._filter(ridge, z.dtype, s)
    return z * f.reshape(f.shape + (1,) * (z.ndim - D))


def _fit_chained(plan, S: "da.Array", ridge, nb: int, mask):
    """The closed-form fit of a signal chunked along its grid axes (module docstring)."""
    if ridge == "gcv":
        raise ValueError("ridge='gcv' needs the signal's grid axes in one chunk each (GCV uses every projection "
                         "at once): give a number for the ridge, or rechunk the signal")
    if plan.penalty is not None or mask is not None:
        raise ValueError("penalty and mask need the signal's grid axes in one chunk each: rechunk the signal")
    D = plan.ndim
    modes = tuple(range(D))
    Z0 = chain(_pad_odd(S, plan.pads), plan._factors(S.dtype, "Ut"), modes)
    Z = Z0.map_blocks(_filter_block, dask.delayed(plan, pure=True), float(ridge), dtype=Z0.dtype)
    return GridModel(chain(Z, plan._factors(S.dtype, "V"), modes), plan.embedders, ridge)


def fit_plan(plan, signal, ridge, nb: int, mask):
    """``GridPlan.fit`` of a dask signal (arguments checked by it): a GridModel of dask weights."""
    S = _signal(plan, signal, nb)
    if all(len(S.chunks[k]) == 1 for k in range(plan.ndim)):
        return _fit_blocks(plan, S, ridge, nb, mask)
    return _fit_chained(plan, S, ridge, nb, mask)


def _embedding(model, coords: Sequence[np.ndarray], dt) -> List[np.ndarray]:
    coords = [_validate.coords_1d(f"coords[{i}]", c, np.float64) for i, c in enumerate(coords)]
    return [np.ascontiguousarray(np.asarray(e(c), np.float64), dtype=dt) for c, e in zip(coords, model.embedders)]


def predict_grid(model, coords) -> "da.Array":
    """``GridModel.predict_grid`` of dask weights: a dask array (write it with ``.to_zarr``)."""
    W = model.weights
    phis = _embedding(model, coords, W.dtype)
    return chain(W, phis, tuple(range(model.ndim)))


def _predict_block(weights: np.ndarray, embedders, points: np.ndarray, chunk: int) -> np.ndarray:
    return GridModel(weights, embedders, 0.0).predict(points, chunk)


def predict_points(model, points, chunk: int) -> "da.Array":
    """``GridModel.predict`` of dask weights: (P, *channels) as a dask array, one task per
    channel chunk (the grid axes of the weights gathered into one chunk, points in memory)."""
    D = model.ndim
    pts = validate_points(points, "error", [np.array([0.0, 1.0])] * D)
    W = model.weights.rechunk({k: -1 for k in range(D)})
    chunks = ((pts.shape[0],),) + W.chunks[D:]
    return W.map_blocks(_predict_block, model.embedders, dask.delayed(pts, pure=True), chunk, chunks=chunks,
                        drop_axis=list(range(1, D)), dtype=W.dtype)


# ---- scattered points: CG as map-reduce over partitions -------------------------------------------


def _make_part(points: np.ndarray, values: np.ndarray, nodes, embs, normalize: bool, outside: str):
    """One partition on a worker: its blending matrix (rows sorted by grid cell) and its values
    in that order, (rows, C) float64."""
    pts = validate_points(points, outside, nodes)
    B, order = _points.sorted_matrix(pts, nodes, embs, normalize, None)
    return B, np.ascontiguousarray(values.reshape(pts.shape[0], -1).astype(np.float64)[order])


def _part_values(part) -> np.ndarray:
    return part[1]


def _part_blend(part, V: np.ndarray) -> np.ndarray:
    return part[0].matvec(V)


def _part_blend_t(part, r: np.ndarray) -> np.ndarray:
    return part[0].rmatvec(np.ascontiguousarray(r))


def _tree_sum(items: list):
    while len(items) > 1:
        items = [dask.delayed(np.add, pure=True)(a, b) if b is not None else a
                 for a, b in zip(items[::2], items[1::2] + [None])]
    return items[0]


class _PartitionedBlend:
    """A blending operator whose rows lie in partitions on the workers: ``matvec`` maps the blend
    over them (a dask array of the partitions' rows), ``rmatvec`` maps the transposed blend over
    such an array and sums the partial grid products (NumPy, computed)."""

    def __init__(self, parts: list, rows: Sequence[int], nodes: Sequence[np.ndarray]):
        self.parts, self.rows = parts, list(rows)
        self.grid_coords = list(nodes)
        self.grid_shape = tuple(n.size for n in nodes)
        self.grid_size = math.prod(self.grid_shape)
        self.shape = (sum(self.rows), self.grid_size)

    def values(self, channels: int) -> "da.Array":
        """The partitions' values in their sorted order: (P, C) float64."""
        return da.concatenate([da.from_delayed(dask.delayed(_part_values, pure=True)(p), (n, channels), np.float64)
                               for p, n in zip(self.parts, self.rows)])

    def matvec(self, V: np.ndarray) -> "da.Array":
        one = V.ndim == 1
        V2 = V.reshape(self.grid_size, -1)
        Vk = dask.delayed(V2, pure=True)  # one key: sent once to each worker
        out = da.concatenate([da.from_delayed(dask.delayed(_part_blend, pure=True)(p, Vk), (n, V2.shape[1]), V2.dtype)
                              for p, n in zip(self.parts, self.rows)])
        return out[:, 0] if one else out

    def rmatvec(self, r: "da.Array") -> np.ndarray:
        r = r.rechunk((tuple(self.rows),) + tuple((c,) for c in r.shape[1:]))
        blocks = r.to_delayed().reshape(-1)
        partial = [dask.delayed(_part_blend_t, pure=True)(p, b) for p, b in zip(self.parts, blocks)]
        return np.asarray(_tree_sum(partial).compute())


def fit_points(points, values, embedders, grid, ridge, tol, maxiter, normalize, outside, penalty):
    """``kronpe.fit_points`` of dask points (P, D) and values (P, *channels) partitioned along
    their first axis (module docstring): a PointModel, the same as the in-memory fit."""
    t0 = time.perf_counter()
    pts = points if hasattr(points, "dask") else da.from_array(_validate.real_array("points", points))
    pts = _float_dask("points", pts)
    if pts.ndim != 2 or pts.shape[1] == 0:
        raise ValueError(f"points must have shape (P, D) with D >= 1, got {pts.shape}")
    if pts.shape[0] == 0:
        raise ValueError("points must hold at least one point, got P = 0")
    P, D = pts.shape
    vals = values if hasattr(values, "dask") else da.from_array(_validate.real_array("values", values))
    vals = _float_dask("values", vals)
    if vals.ndim == 0 or vals.shape[0] != P:
        raise ValueError(f"values must have one row per point ({P}), got shape {vals.shape}")
    _validate.choice("outside", outside, ("error", "clamp"))
    if embedders is None:
        raise ValueError("embedders must be given for dask points (kronpe's own choice needs every point at once)")
    if penalty is not None:
        raise ValueError("penalty is not available for dask points: only the ridge (identity) penalty")
    lam = ridge_or_auto(ridge)
    if lam is None:
        raise ValueError("ridge must be a number for dask points (the held-out choice needs every point at once)")
    tol = _validate.positive_float("tol", tol)
    if maxiter is not None:
        maxiter = _validate.positive_int("maxiter", maxiter)
    embs = embedder_list(embedders, D)
    channels = tuple(vals.shape[1:])
    if grid is None:
        _points.check_fit_budget(default_grid(embs), embs, channels)
    nodes = grid_nodes(default_grid(embs) if grid is None else grid, D)
    _points.check_fit_budget([n.size for n in nodes], embs, channels)
    # the range (and finiteness) of every point, from one pass: its extremes checked as points
    lo, hi = dask.compute(pts.min(axis=0), pts.max(axis=0))
    validate_points(np.stack([lo, hi]), outside, nodes)

    pts = pts.rechunk({1: -1})
    vals = vals.rechunk((pts.chunks[0],) + tuple((c,) for c in vals.shape[1:]))
    parts = [dask.delayed(_make_part, pure=True)(p, v, nodes, embs, normalize, outside)
             for p, v in zip(pts.to_delayed().reshape(-1), vals.to_delayed().reshape(-1))]
    parts = list(dask.persist(*parts))  # kept on the workers for every iteration
    B = _PartitionedBlend(parts, pts.chunks[0], nodes)
    C = max(1, math.prod(channels))
    prob = _points.ridge_problem(B, embs, np.float32 if tol >= _points.MIXED_PRECISION_TOL else np.float64)
    if maxiter is None:
        maxiter = max(500, 10 * sum(u.shape[1] for u in prob.US))
    info: Dict[str, Any] = {"partitions": len(parts)}
    z = _points.ridge_solve(prob, B.values(C), lam, tol, maxiter, info)
    return _points.finished_model(_points.leading_chain(z, [vt.T for vt in prob.Vt]), lam, info, embs, nodes, normalize,
                           vals.dtype, channels, t0, info["preconditioner"])
