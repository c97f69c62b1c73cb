"""CPU implementations of the ops on torch CPU tensors.

Each function validates its arguments (the same checks as the fake implementations) and
allocates a contiguous output tensor.

- ``multi_mode_product``: kronpe's chain planner (mode order, layouts, no unfold copies) lowers
  the chain to a program of strided copies and (batched) GEMMs
  (``_core.mode_chain_program``, planned with the core's "library" cost model), and
  :func:`run_program` runs that program from Python on ``as_strided`` views: each single GEMM
  through :func:`gemm` (kronpe's packed GEMM where the CPU has AVX-512, or AVX2 and FMA, and the
  product is large, else ``torch.mm``), strided batches with ``torch.bmm``, the permuting copies with
  kronpe's cache-blocked ``strided_copy`` (single-threaded). Every GEMM runs on torch's thread
  count and on the OpenMP runtime torch loaded (the extension links the same one, and never
  libtorch). Two shapes skip the planner: chains on end axes (one ``torch.mm`` per mode,
  :func:`end_chain`) and leading-axis chains with a few carried channels (channels-first GEMMs
  and one copy that (de-)interleaves the channels, :func:`channel_rotation`); banded matrices
  multiply their bands only.
- ``blend`` / ``blend_transpose``: kronpe's compiled kernels, handed descriptors of the tensors
  (:func:`kronpe._adapters.arrays.describe`) and ``torch.get_num_threads()`` as their thread count.
"""
from __future__ import annotations

import math
import threading
import weakref
from typing import Dict, List

import torch

from .. import _core
from .._adapters.arrays import Array, cast, describe
from ._checks import blend_output, check_blend, check_blend_transpose, index_error, mmp_shape


#: (shape, strides, modes, rows, element size) -> the lowered program (ops, workspace)
_PROGRAMS: Dict[tuple, tuple] = {}
_MAX_PROGRAMS = 256


def program(T: torch.Tensor, matrices: List[torch.Tensor], modes: List[int]) -> tuple:
    """The chain's program (ops, workspace elements), planned by the core once per layout."""
    rows = tuple(int(A.shape[0]) for A in matrices)
    key = (tuple(T.shape), T.stride(), tuple(modes), rows, T.element_size())
    prog = _PROGRAMS.get(key)
    if prog is None:
        ops, workspace, _order, _in, _out = _core.mode_chain_program(
            list(T.shape), list(T.stride()), list(modes), list(rows), T.element_size(), False, "library")
        prog = (tuple(ops), int(workspace))
        if len(_PROGRAMS) >= _MAX_PROGRAMS:
            _PROGRAMS.clear()
        _PROGRAMS[key] = prog
    return prog


_LOCAL = threading.local()
_KEEP_WORKSPACE = 64 << 20  # bytes kept between calls (per thread and dtype)


def _workspace(T: torch.Tensor, n: int) -> torch.Tensor:
    """n elements of scratch in T's dtype, kept between calls on this thread (a fresh
    allocation of megabytes costs the kernel's page zeroing at every call)."""
    cache = getattr(_LOCAL, "work", None)
    if cache is None:
        cache = _LOCAL.work = {}
    buf = cache.get(T.dtype)
    if buf is None or buf.numel() < n:
        buf = torch.empty(n, dtype=T.dtype)
        if n * buf.element_size() <= _KEEP_WORKSPACE:
            cache[T.dtype] = buf
    return buf


def _operand(buf: torch.Tensor, base: int, rows: int, cols: int, ld: int, trans: bool, batch: int, stride: int):
    """A rows x cols operand stored row-major with row stride ``ld`` (its transpose when
    ``trans``) at ``buf``'s storage offset ``base``; batched along a leading axis."""
    strides = (1, ld) if trans else (ld, 1)
    if batch == 1:
        return buf.as_strided((rows, cols), strides, base)
    return buf.as_strided((batch, rows, cols), (stride,) + strides, base)


def run_program(ops, workspace: int, T: torch.Tensor, matrices: List[torch.Tensor], out: torch.Tensor) -> None:
    """Run a lowered chain (see ``kronpe::ChainOp``) with torch: buffers 0 (``T``), 1 and 2 (two
    work buffers of ``workspace`` elements), 3 (``out``); offsets are relative to each buffer."""
    work = _workspace(T, 2 * workspace) if workspace else None
    bufs = ((T, T.storage_offset()), (work, 0), (work, workspace), (out, out.storage_offset()))
    for op in ops:
        src, base_s = bufs[op[1]]
        dst, base_d = bufs[op[2]]
        if op[0] == "copy":  # kronpe's cache-blocked copy: twice torch's copy_ on these transposes
            _, _, _, shape, s_strides, d_strides = op
            _core.strided_copy(describe(src.as_strided(shape, s_strides, base_s)),
                               describe(dst.as_strided(shape, d_strides, base_d)))
            continue
        _, _, _, j, left, mtrans, btrans, M, N, K, ldb, ldc, batch, sb, sc = op
        A = matrices[j].mT if mtrans else matrices[j]
        if left:  # C_b = op(A) (M x K) @ X_b (K x N)
            X = _operand(src, base_s, K, N, ldb, btrans, batch, sb)
            L, R = (A if batch == 1 else A.expand(batch, M, K)), X
        else:  # C_b = X_b (M x K) @ op(A) (K x N)
            X = _operand(src, base_s, M, K, ldb, btrans, batch, sb)
            L, R = X, (A if batch == 1 else A.expand(batch, K, N))
        C = _operand(dst, base_d, M, N, ldc, False, batch, sc)
        if batch == 1:
            gemm(L, R, C)
        else:
            torch.bmm(L, R, out=C)


def chain_cost(T: torch.Tensor, matrices: List[torch.Tensor], modes: List[int], order: List[int]) -> int:
    """Multiply-adds of the chain in ``order``."""
    shape, cost = list(T.shape), 0
    for j in order:
        n = math.prod(shape)
        cost += n // max(shape[modes[j]], 1) * matrices[j].shape[0] * shape[modes[j]]
        shape[modes[j]] = matrices[j].shape[0]
    return cost


def end_mode_product(X: torch.Tensor, A: torch.Tensor, m: int):
    """X x_m A as one ``torch.mm`` when X is C-contiguous and ``m`` its first or last axis (the
    planner's program would be that one GEMM; this skips the planning and the views), else None.
    The caller has validated the shapes; the result is C-contiguous."""
    if X.numel() == 0 or A.numel() == 0 or not X.is_contiguous() or (m != 0 and m != X.dim() - 1):
        return None
    if _band(A) is not None:
        return None
    return _end_mm(X, A, m)


def _end_mm(X: torch.Tensor, A: torch.Tensor, m: int) -> torch.Tensor:
    """X x_m A for a C-contiguous, nonempty X and its first or last axis ``m``: one torch.mm on views."""
    if X.dim() == 2:  # a matrix: no views
        return torch.mm(A, X) if m == 0 else torch.mm(X, A.mT)
    if m == 0:
        return torch.mm(A, X.view(X.shape[0], -1)).view((A.shape[0],) + X.shape[1:])
    return torch.mm(X.view(-1, X.shape[-1]), A.mT).view(X.shape[:-1] + (A.shape[0],))


def end_chain(T: torch.Tensor, matrices: List[torch.Tensor], modes: List[int], order: List[int]):
    """The chain in ``order`` as one ``torch.mm`` per mode when each mode is the first or last
    axis of a C-contiguous, nonempty T (so at most two modes) and no matrix is banded, else None.
    The caller has validated the shapes. Made of torch ops only: under autograd, torch records
    the GEMMs (their saved operands are the forward intermediates the adjoint needs)."""
    last = T.dim() - 1
    if not matrices or T.numel() == 0 or not T.is_contiguous():
        return None
    if any(m != 0 and m != last for m in modes) or any(A.numel() == 0 or _band(A) is not None for A in matrices):
        return None
    Y = T
    for j in order:
        Y = _end_mm(Y, matrices[j], modes[j])
    return Y


def multi_mode_product(T: torch.Tensor, matrices: List[torch.Tensor], modes: List[int]) -> torch.Tensor:
    shape = mmp_shape(T, matrices, modes)
    last = T.dim() - 1
    if len(matrices) <= 2 and all(m == 0 or m == last for m in modes):  # one GEMM per mode on end
        order = list(range(len(matrices)))  # axes, in the cheaper order
        if len(order) == 2 and chain_cost(T, matrices, modes, [1, 0]) < chain_cost(T, matrices, modes, order):
            order = [1, 0]
        out = end_chain(T, matrices, modes, order)
        if out is not None:
            return out
    out = T.new_empty(shape)  # C-contiguous, as the fake implementation says
    if out.numel() == 0:
        return out
    if not matrices:
        return out.copy_(T)
    if any(A.shape[1] == 0 for A in matrices):  # an empty contraction: the sum of nothing
        return out.zero_()
    bands = _chain_bands(T, matrices, modes)
    if bands is not None:  # banded matrices (compact bases): only their bands are multiplied
        _banded_chain(T, matrices, modes, bands, out)
        return out
    rotation = channel_rotation(T, matrices, modes)
    if rotation is not None:  # a few carried channels: one (de-)interleaving copy, channels-first GEMMs
        _rotate_channels(T, matrices, *rotation, out)
        return out
    # kronpe plans (any input strides; the result in C order), run_program runs its GEMMs and copies
    ops, workspace = program(T, matrices, modes)
    run_program(ops, workspace, T, matrices, out)
    return out


# ---- GEMMs: kronpe's packed GEMM where it runs, else torch's ---------------------------------

#: multiply-adds from which a single GEMM runs on it: below, torch.mm's shorter call wins
_PACKED_MIN_MACS = 128 * 128 * 128


def gemm(L: torch.Tensor, R: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """out = L @ R for 2-D CPU tensors of one dtype, L and R each with a unit stride along one
    axis (a matrix or a transposed one, as views give them) and ``out`` with contiguous rows.

    Large products run on kronpe's packed GEMM where the chains' GEMM is the packed one
    (``_core.chain_gemm()``: the CPU has AVX-512, or AVX2 and FMA, and
    ``_tuning.set_chain_gemm`` did not say "blas"), on torch's thread count and on the OpenMP
    runtime torch loaded (kronpe's extension links the same one): on the chains' skinny products
    it outruns a BLAS that does not take the CPU's widest paths (MKL on AMD). Small products, contractions longer than both free
    extents (a matrix gradient, G Y^T over a whole tensor, where the BLAS's own blocking wins)
    and operands the packed GEMM cannot read run on ``torch.mm``."""
    M, K = L.shape
    N = R.shape[1]
    if M * N * K >= _PACKED_MIN_MACS and K <= max(M, N) and _core.chain_gemm() == "packed":
        a, b, c = _matrix(L), _matrix(R), _matrix(out)
        if a is not None and b is not None and c is not None and not c[1]:
            _core.packed_gemm(a[0], b[0], c[0], a[1], b[1], torch.get_num_threads())
            return out
    return torch.mm(L, R, out=out)


_KERNEL_DTYPES = {torch.float32: "float32", torch.float64: "float64"}


def _matrix(X: torch.Tensor):
    """(descriptor, transposed) of the row-major matrix that X (2-D, nonempty, CPU) is (unit
    column stride, rows apart by at least a row; transposed False) or whose transpose X is
    (transposed True), else None: the packed GEMM reads neither. Built directly (no views):
    the GEMM's Python is a few microseconds of each call."""
    (r, c), (sr, sc) = X.shape, X.stride()
    dt = _KERNEL_DTYPES.get(X.dtype)
    if dt is None:
        return None
    if sc == 1 and sr >= c:
        return Array(X.data_ptr(), (r, c), (sr, 1), dt, -1, 0), False
    if sr == 1 and sc >= r:
        return Array(X.data_ptr(), (c, r), (sc, 1), dt, -1, 0), True
    return None


# ---- a few carried channels: the chain by rotation ---------------------------------------------
#
# A tensor (n_0, ..., n_{D-1}, c) whose modes are its leading axes and whose carried axes hold a
# few channels (colours: c = 3) is channels-last: no GEMM reads or writes it interleaved (a
# channel is neither the row nor the column axis of any product), so some copy must permute it.
# The rotation makes that copy the cheapest one there is (c dense slabs to or from one
# interleaved array: kronpe's (de-)interleaving copy, at memory speed) and runs every GEMM on
# views, channels first, as a channels-first model's batched
# matmuls do. Two directions:
#
# - copy first (axes D-1, ..., 0): T is de-interleaved into (c, n_0, ..., n_{D-1}) in the
#   workspace (from and to memory in cache), then each step contracts the last axis and puts the
#   new one first (Y = A X^T, X viewed (rest, n)); after D steps the layout is
#   (m_0, ..., m_{D-1}, c), the C-ordered result, which the last GEMM writes in place. Preferred.
# - copy last (axes 0, ..., D-1): each step contracts the first axis of T and appends the new one
#   (Y = X^T A^T, X viewed (n, rest)); after D steps the layout is (c, m_0, ..., m_{D-1}), which
#   one copy interleaves into the result. For chains whose cheap order is that one.

_ROTATE_MAX_CHANNELS = 8  # more channels: the copy is a full transposition, the planner's program wins


def channel_rotation(T: torch.Tensor, matrices: List[torch.Tensor], modes: List[int]):
    """(matrix order, copy first) when a rotation applies (a C-contiguous, nonempty T whose modes
    are its leading axes, 2 to ``_ROTATE_MAX_CHANNELS`` carried elements, nonempty matrices, the
    direction's order as cheap as the planner's), else None."""
    D = len(modes)
    if D == 0 or T.dim() <= D or not T.is_contiguous() or T.numel() == 0:
        return None
    if not 1 < math.prod(T.shape[D:]) <= _ROTATE_MAX_CHANNELS or any(A.numel() == 0 for A in matrices):
        return None
    by_axis = sorted(range(D), key=modes.__getitem__)  # the matrix of each axis
    if [modes[j] for j in by_axis] != list(range(D)):
        return None
    best = sorted(range(D), key=lambda j: matrices[j].shape[0] / max(matrices[j].shape[1], 1))
    least = chain_cost(T, matrices, modes, best)
    for order, first in ((by_axis[::-1], True), (by_axis, False)):
        if order == best or chain_cost(T, matrices, modes, order) <= least:
            return order, first
    return None


def _rotate_channels(T: torch.Tensor, matrices: List[torch.Tensor], order: List[int], first: bool,
                     out: torch.Tensor) -> None:
    D = len(order)
    c = math.prod(T.shape[D:])
    half, n = T.numel() if first else 0, T.numel()
    for j in order[:-1] if first else order:  # the largest buffer in the workspace
        n = n // matrices[j].shape[1] * matrices[j].shape[0]
        half = max(half, n)
    work = _workspace(T, 2 * half)  # two halves, used in turn; storage offset 0
    # the copies are kronpe's (de-)interleaving kernels (vector permutes; torch's strided copy
    # moves one element at a time)
    if first:  # (N, c) -> (c, N)
        N = T.numel() // c
        X = work.as_strided((c, N), (N, 1), 0)
        _core.strided_copy(describe(T.view(N, c).mT), describe(X))
        base = half
    else:
        X, base = T, 0
    for step, j in enumerate(order):
        A = matrices[j]
        m, k = A.shape
        rows = X.numel() // k
        if first:  # Y = A X^T: the new axis first; the last step writes the result
            Y = out.view(m, rows) if step == D - 1 else work.as_strided((m, rows), (rows, 1), base)
            gemm(A, X.view(rows, k).mT, Y)
        else:  # Y = X^T A^T: the new axis last
            Y = work.as_strided((rows, m), (m, 1), base)
            gemm(X.view(k, rows).mT, A.mT, Y)
        X, base = Y, half - base
    if not first:  # (c, M) -> (M, c)
        M = out.numel() // c
        _core.strided_copy(describe(X.as_strided((c, M), (M, 1))), describe(out.view(M, c).mT))


# ---- banded matrices: the chain on their bands ------------------------------------------------
#
# Compactly supported (or pruned, kronpe.torch.modules.prune_basis) bases are banded: a 256 x 256
# Gaussian basis with sigma of one centre spacing holds ~17 nonzeros a row (93% zeros), and a
# dense GEMM multiplies every zero. A banded matrix is cut into blocks of rows; block b's
# nonzeros lie in a window of columns [s_b, e_b), and its product is one small GEMM,
# A[rows_b, s_b:e_b] @ X[s_b:e_b] (exact: what is skipped is a sum of exact zeros).
#
# The chain runs in "rotation" order so that no GEMM needs a strided operand: the carried axes
# (channels) are moved to the front once (one transposing copy; none without channels), then for
# i = D-1, ..., 0 the last axis (n_i) is contracted and the new one (m_i) put first:
# (c, n_0, ..., n_i) -> (m_i, ..., m_{D-1}, c, n_0, ..., n_{i-1}), i.e. Y = A_i @ X^T with X
# viewed (R, n_i). After D steps the layout is (m_0, ..., m_{D-1}, c): the C-ordered result.

_BAND_ROWS = 32  # rows per block: measured best for 256 x 256 Gaussian bases (1 and 2 threads)
_BAND_MIN_ELEMENTS = 128 * 128  # smaller matrices: the dense GEMM is as fast as the block calls
_BAND_MAX_FILL = 0.4  # use the bands when they hold at most this fraction of the matrix


class _Band:
    """A matrix's banded-block plan: blocks (row start, row end, column start, column end), or
    None when it is not worth it; cached per matrix (and version, view strides) while it lives."""

    __slots__ = ("key", "ref", "blocks", "__weakref__")


#: (id of the matrix's base tensor, its view's strides and offset) -> _Band
_BANDS: Dict[tuple, _Band] = {}


def _band_blocks(A: torch.Tensor):
    """[(r0, r1, c0, c1), ...] covering A's nonzeros by blocks of rows, or None (too full)."""
    m, n = A.shape
    if A[0, n - 1] != 0 and A[m - 1, 0] != 0:  # both far corners used: not banded (a quick no)
        return None
    rb = _BAND_ROWS
    nz = (A.detach() != 0).contiguous()
    full = m // rb * rb
    cols = [nz[:full].view(m // rb, rb, n).any(1)] if full else []  # (blocks, n): a column used
    if full < m:
        cols.append(nz[full:].any(0, keepdim=True))
    used = torch.cat(cols).to(torch.uint8) if len(cols) > 1 else cols[0].to(torch.uint8)
    first = used.argmax(1).tolist()  # the first column used by each block
    last = (n - 1 - used.flip(1).argmax(1)).tolist()
    empty = (used.amax(1) == 0).tolist()
    blocks, filled = [], 0
    for b, r0 in enumerate(range(0, m, rb)):
        r1 = min(r0 + rb, m)
        c0, c1 = (0, 0) if empty[b] else (first[b], last[b] + 1)  # rows of zeros: an empty window
        blocks.append((r0, r1, c0, c1))
        filled += (r1 - r0) * (c1 - c0)
    return tuple(blocks) if filled <= _BAND_MAX_FILL * m * n else None


def _band(A: torch.Tensor):
    """A's blocks (see :func:`_band_blocks`), or None; cached per matrix while it lives."""
    if A.shape[0] * A.shape[1] < _BAND_MIN_ELEMENTS:
        return None
    if A.is_inference():  # no version counter to key a cache on: planned at every call
        return _band_blocks(A)
    root = A._base if A._base is not None else A
    key = (A.data_ptr(), A._version, tuple(A.shape), A.stride(), A.dtype)
    slot = (id(root), A.stride(), A.storage_offset())
    cached = _BANDS.get(slot)
    if cached is not None and cached.ref() is root and cached.key == key:
        return cached.blocks
    band = _Band()
    band.key, band.blocks = key, _band_blocks(A)
    band.ref = weakref.ref(root, lambda _r, slot=slot: _BANDS.pop(slot, None))
    _BANDS[slot] = band
    return band.blocks


def _banded_gemm(A: torch.Tensor, blocks, X: torch.Tensor, out: torch.Tensor) -> None:
    """out = A @ X for a banded A (``blocks``: its row blocks and their column windows; A is zero
    outside them) and 2-D X and ``out``. Where the packed GEMM runs, one call: a team of
    single-threaded GEMMs, one per block and run of columns (a team per block, as torch.mm's on
    blocks of 32 rows, costs its start each time, several times a block's work at two threads);
    else one torch.mm per block."""
    a, x, c = _matrix(A), _matrix(X), _matrix(out)
    if _core._tuning.packed_gemm_supported() and a is not None and x is not None and c is not None and not c[1]:
        table = torch.tensor(blocks, dtype=torch.int64).reshape(-1, 4)
        _core.packed_gemm_blocks(a[0], x[0], c[0], describe(table), a[1], x[1], torch.get_num_threads())
        return
    for r0, r1, c0, c1 in blocks:
        if c1 > c0:
            torch.mm(A[r0:r1, c0:c1], X[c0:c1], out=out[r0:r1])
        else:
            out[r0:r1].zero_()


def _chain_bands(T: torch.Tensor, matrices: List[torch.Tensor], modes: List[int]):
    """The blocks of every matrix by axis (axis i -> (matrix index, blocks)) when the banded
    chain applies: the modes are the leading axes, T is C-contiguous and every matrix banded."""
    D = len(modes)
    if D == 0 or sorted(modes) != list(range(D)) or not T.is_contiguous():
        return None
    by_axis = [None] * D
    for j, (A, m) in enumerate(zip(matrices, modes)):
        blocks = _band(A)
        if blocks is None:
            return None
        by_axis[m] = (j, blocks)
    return by_axis


def _banded_chain(T: torch.Tensor, matrices: List[torch.Tensor], modes: List[int], by_axis, out: torch.Tensor):
    D = len(modes)
    lead = list(T.shape[:D])
    c = T.numel() // max(math.prod(lead), 1)
    sizes, n_all = [], math.prod(lead)  # elements after each step
    dims = list(lead)
    for i in range(D - 1, 0, -1):
        dims[i] = matrices[by_axis[i][0]].shape[0]
        sizes.append(math.prod(dims) * c)
    half = max(sizes + [n_all * c if c > 1 else 0], default=0)
    work = _workspace(T, 2 * half) if half else None
    X, slot = T, 0
    if c > 1:  # (n_0 ... n_{D-1}, c) -> (c, n_0 ... n_{D-1})
        X = work[:n_all * c].view(c, n_all)
        _core.strided_copy(describe(T.view(n_all, c).mT), describe(X))
        slot = 1
    for i in range(D - 1, -1, -1):
        j, blocks = by_axis[i]
        A = matrices[j]
        n = A.shape[1]
        R = X.numel() // n
        Xt = X.reshape(R, n).mT  # (n, R), a view
        if i == 0:
            Y = out.view(A.shape[0], R)
        else:
            Y = work[slot * half: slot * half + A.shape[0] * R].view(A.shape[0], R)
            slot ^= 1
        _banded_gemm(A, blocks, Xt, Y)
        X = Y


def _threads() -> int:
    """The thread count handed to kronpe's kernels: at most torch's (a negative count is a cap;
    small products still run on fewer threads), on the OpenMP runtime torch shares."""
    return -torch.get_num_threads()


class _Schedule:
    """What blend_transpose needs of an indices tensor besides its values: the largest row span,
    the index range (checked once) and the bucketing of the rows by output slab."""

    __slots__ = ("key", "ref", "span", "lo", "hi", "perm", "ptr", "__weakref__")


#: id(indices) -> _Schedule, while that tensor lives (training reuses one plan every step)
_SCHEDULES: Dict[int, _Schedule] = {}


def _row_range(indices: torch.Tensor):
    """(smallest, largest) index of every row, by columns (reductions over a short inner axis
    of an int64 tensor are slow in torch)."""
    lo = hi = indices[:, 0]
    for k in range(1, indices.shape[1]):
        col = indices[:, k]
        lo, hi = torch.minimum(lo, col), torch.maximum(hi, col)
    return lo, hi


def _schedule(indices: torch.Tensor, num_nodes: int) -> _Schedule:
    inference = indices.is_inference()  # no version counter: not cached
    version = None if inference else indices._version
    key = (indices.data_ptr(), version, tuple(indices.shape), indices.stride(), num_nodes)
    cached = _SCHEDULES.get(id(indices))
    if cached is not None and cached.ref() is indices and cached.key == key and not inference:
        return cached
    row_lo, row_hi = _row_range(indices)
    sc = _Schedule()
    sc.key, sc.lo, sc.hi = key, int(row_lo.min()), int(row_hi.max())
    sc.span = int((row_hi - row_lo).max())
    if 0 <= sc.lo and sc.hi < num_nodes:
        _, slabs = _core.blend_layout(num_nodes, sc.span)
        sc.perm = torch.empty(indices.shape[0], dtype=torch.int64)
        sc.ptr = torch.empty(slabs + 1, dtype=torch.int64)
        _core.blend_plan_stored(describe(indices, "indices"), num_nodes, sc.span, describe(sc.perm),
                                describe(sc.ptr), _threads())
    if inference:
        return sc
    i = id(indices)
    sc.ref = weakref.ref(indices, lambda _r, i=i: _SCHEDULES.pop(i, None))
    _SCHEDULES[i] = sc
    return sc


def blend(values: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    check_blend(values, indices, weights, "values")
    out, done = blend_output(values, indices)
    if done:
        return out
    w64 = cast(weights, "float64")  # a local: it must outlive the call
    # the kernel checks every index against the grid (ValueError) before writing; its error
    # is reworded here with the range found
    try:
        _core.blend_stored(describe(indices, "indices"), describe(w64, "weights"), describe(values, "values"),
                           describe(out), _threads())
    except ValueError:
        lo, hi = _row_range(indices)
        lo, hi = int(lo.min()), int(hi.max())
        if lo < 0 or hi >= values.shape[0]:
            raise index_error(values.shape[0], lo, hi) from None
        raise
    return out


def blend_transpose(
    rows: torch.Tensor, indices: torch.Tensor, weights: torch.Tensor, num_nodes: int
) -> torch.Tensor:
    check_blend_transpose(rows, indices, weights, num_nodes)
    P, S, C = indices.shape[0], indices.shape[1], rows.shape[1]
    out = rows.new_zeros((num_nodes, C))
    if P == 0 or C == 0 or S == 0:
        return out
    # the transpose buckets the rows by slabs of the grid at least as long as every row's span;
    # that schedule is computed once per indices tensor (and version)
    sc = _schedule(indices, num_nodes)
    if sc.lo < 0 or sc.hi >= num_nodes:
        raise index_error(num_nodes, sc.lo, sc.hi)
    w64 = cast(weights, "float64")  # a local: it must outlive the call
    _core.blend_transpose_stored(describe(indices, "indices"), describe(w64, "weights"), describe(rows, "rows"),
                                 describe(out), sc.span, _threads(), describe(sc.perm), describe(sc.ptr))
    return out
