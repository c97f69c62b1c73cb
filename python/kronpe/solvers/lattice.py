"""The grid of the default scattered fit (:mod:`.smooth`): the points' own lattice when every
axis's coordinates are multiples of one spacing h with 1 / h an integer (pixels, voxels: every
point on a node, a diagonal data term), else NODES_PER_SPACING nodes per mean sample spacing
along each axis (grid values blended multilinearly to the points: the finer the grid, the smaller
that representation's error; on 2 axes 3, where 4 filled photographs' off-grid samples 0.05-0.1 dB
better with 1.8 times the nodes, and every V-cycle and operator pass of the fill scales with them).
``lattice_sums`` adds the samples of a lattice onto its nodes.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from .. import _core
from .._adapters import validate as _validate

Array = np.ndarray
LATTICE_RTOL = 1e-6  # relative tolerance of a coordinate's multiple of h (``_core.lattice_count``)
LATTICE_TOL = 1e-6  # absolute tolerance of the same test
LATTICE_MAX_NODES = 1 << 24  # per axis: a finer "lattice" (coordinates 1e-7 apart) takes the density grid
LATTICE_PROBE = 512  # points of the strided subset h is read off first
NODES_PER_SPACING = {1: 4.0, 2: 3.0, 3: 2.0}  # density grid's nodes per mean sample spacing, by axes


def lattice_grid(points: Array) -> Optional[List[Array]]:
    """Per-axis nodes k h over [0, 1] when every axis's coordinates are multiples of one h with
    1 / h an integer (module docstring), else None. h is the smallest gap between an axis's
    distinct coordinates; it is first read off an evenly strided subset of LATTICE_PROBE points
    and kept when every coordinate is a multiple of it and no two distinct coordinates round to
    the same multiple (then no gap of the whole set is smaller: the same h as from all of them),
    else found from all of them (sorting 65k coordinates costs 2.6 ms per axis). One compiled call
    per axis (``_core.lattice_count``, one pass where NumPy would make a dozen; its NumPy reference
    ``kronpe.reference.lattice_count``)."""
    nodes = []
    for x in np.asarray(points, np.float64).T:
        n = _core.lattice_count(x, LATTICE_PROBE, LATTICE_RTOL, LATTICE_TOL)
        if n == 0 or n > LATTICE_MAX_NODES:  # (a gap that small is no grid to fit on)
            return None
        nodes.append(np.arange(n + 1) / n)
    return nodes


def lattice_sums(points: Array, shape: Sequence[int], values: Array) -> Tuple[Array, List[Array]]:
    """(samples per node (N...), their sums per channel as C planes (N...)) float32 for points (P, D) on the
    lattice of ``shape`` nodes over [0, 1] (``lattice_grid``; positions rounded to the nearest
    node, outside ones clamped), values (P, C): B^T 1 and B^T values of the blending matrix,
    whose rows are then unit vectors, as one compiled scatter-add in float32 (building B would
    take 5 ms for 65k points, NumPy's bincounts in float64 eight times as long as this pass; the
    same sums for up to two samples per node)."""
    P = points.shape[0]
    flat = np.empty(P, np.int64)
    _core.lattice_index(points, [int(n) for n in shape], [0.0] * len(shape), [float(n - 1) for n in shape], None, flat)
    G = int(np.prod(shape))
    v = np.asarray(values, np.float32).reshape(P, -1)
    counts = np.empty(G, np.float32)
    sums = np.empty((v.shape[1], G), np.float32)
    _core.lattice_sums(flat, v, counts, sums)
    return counts.reshape(tuple(shape)), [s.reshape(tuple(shape)) for s in sums]


def density_grid(points: Array) -> List[int]:
    """Nodes per axis at 1 / NODES_PER_SPACING[D] of the mean sample spacing (module docstring)."""
    P, D = points.shape
    lo, hi = _validate.column_range(points)
    ext = np.maximum(hi - lo, 1.0 / max(P, 2))
    h = (float(np.prod(ext)) / P) ** (1.0 / D)
    f = NODES_PER_SPACING.get(D, 2.0)
    return [int(min(max(np.ceil(f / h) + 1, 3), 1 << 14)) for _ in range(D)]
