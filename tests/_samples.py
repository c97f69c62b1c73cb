"""Inputs shared by the CPU and the CUDA tests.

A :class:`Device` turns host (NumPy) values into arrays of one library on one device, in a named
memory layout (:data:`LAYOUTS`), and back. Each kernel family draws its cases from here:
:func:`mode_product_cases` (and the chain lists), :func:`embed_cases`, :func:`blend_cases` and
:func:`blend_factor_cases`, :func:`gemm_cases`, :func:`stencil_cases` and
:func:`stencil_layout_cases` (the thin-plate kernels and the multigrid), :func:`spline_cases`,
:func:`grid_fit_cases` and :func:`grid_problem`, :func:`point_fit_cases`, :func:`resample_cases` and, for the torch ops,
:func:`torch_op_samples`. A case is a frozen dataclass with an ``id`` (the pytest id) that only
describes its inputs; the tests build them on the ``device`` fixture's device with the ``dtype``
fixture's dtype, so a GPU run tests exactly the inputs the CPU run tests.

Tolerances: :func:`tolerance` (the ``tol`` and ``sum_tol`` fixtures of conftest.py) for kernels
against their references, :func:`assert_close` for solvers' results (:data:`CLOSE`).
"""
from __future__ import annotations

import functools
import math
import os
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pytest

import kronpe

# ---- devices --------------------------------------------------------------------------------------

#: Memory layouts a test input can have (all hold the same values):
#: contiguous (C order), fortran (axes reversed in memory), permuted (axis 0 last in memory),
#: stepped (every second element of a larger array along each axis), padded (rows of a wider
#: array), reversed (negative strides: axis 0 reversed, the last axis reversed with step 2),
#: broadcast (stride 0 along axis 0: the values must be constant along it).
LAYOUTS = ("contiguous", "fortran", "permuted", "stepped", "padded", "reversed", "broadcast")


@dataclass(frozen=True)
class Device:
    """Where a test runs and which arrays it hands to kronpe.

    name : the pytest id ("cpu", "cuda-cupy", "cuda-torch")
    lib : "numpy", "cupy" or "torch" (the array kind kronpe must give back)
    """

    name: str
    lib: str

    def __str__(self) -> str:
        return self.name

    @property
    def is_cuda(self) -> bool:
        return self.name != "cpu"

    @property
    def torch(self) -> str:
        """The torch device string ("cpu" or "cuda")."""
        return "cuda" if self.is_cuda else "cpu"

    def unavailable(self) -> str | None:
        """Why tests cannot run here, or None."""
        if not self.is_cuda:
            return None
        if not kronpe.cuda.is_available():
            return "needs kronpe's CUDA kernels and a CUDA device"
        if self.lib == "cupy" and _cupy() is None:
            return "needs CuPy with a CUDA device"
        if self.lib == "torch" and _torch_cuda() is None:
            return "needs CUDA torch"
        return None

    def supports(self, layout: str) -> bool:
        """torch has no negative strides."""
        return not (layout == "reversed" and self.lib == "torch")

    # -- host <-> device --

    def put(self, a) -> Any:
        """A C-contiguous copy of host values as this device's array (keeps dtype and shape)."""
        a = np.array(a, order="C", copy=True)
        if self.lib == "numpy":
            return a
        if self.lib == "cupy":
            return _cupy().asarray(a)
        import torch

        return torch.from_numpy(a).to(self.torch)

    def host(self, x) -> np.ndarray:
        """A NumPy copy of this device's array."""
        if isinstance(x, np.ndarray):
            return x.copy()
        if self.lib == "cupy":
            return x.get()
        return x.detach().cpu().numpy()

    def permute(self, x, axes):
        return x.permute(*axes) if self.lib == "torch" else x.transpose(axes)

    def view(self, a, layout: str = "contiguous"):
        """Host values ``a`` as this device's array with the given memory layout."""
        a = np.asarray(a)
        if layout == "contiguous" or (a.ndim == 0 and layout != "broadcast"):
            return self.put(a)
        if layout in ("fortran", "permuted"):
            order = list(range(a.ndim))[::-1] if layout == "fortran" else list(range(1, a.ndim)) + [0]
            return self.permute(self.put(a.transpose(order)), [int(i) for i in np.argsort(order)])
        if layout == "broadcast":
            assert (a == a[:1]).all(), "broadcast values must be constant along axis 0"
            one = self.put(a[:1])
            if self.lib == "torch":
                return one.expand(*a.shape)
            return (np if self.lib == "numpy" else _cupy()).broadcast_to(one, a.shape)
        if not self.supports(layout):
            pytest.skip(f"{self.lib} arrays have no {layout} layout")
        big_shape, index = _embedding(a.shape, layout)
        big = np.full(big_shape, np.nan if a.dtype.kind == "f" else -1, dtype=a.dtype)
        big[index] = a
        return self.put(big)[index]

    def free_bytes(self) -> int:
        if self.lib == "cupy":
            return int(_cupy().cuda.Device().mem_info[0])
        return int(_torch_cuda().cuda.mem_get_info()[0])

    def stream(self):
        """A context manager making a new non-default stream current (CUDA devices)."""
        return _SideStream(self)

    def kind_of(self, x) -> str:
        """"numpy", "cupy" or "torch": the library of an array."""
        if isinstance(x, np.ndarray):
            return "numpy"
        return "cupy" if type(x).__module__.startswith("cupy") else "torch"

    def dtype_of(self, x) -> np.dtype:
        return np_dtype(x.dtype)

    def strides(self, x) -> tuple[int, ...]:
        """An array's strides in elements."""
        if self.kind_of(x) == "torch":
            return tuple(x.stride())
        return tuple(s // x.itemsize for s in x.strides)

    def is_dense(self, x, order: str = "C") -> bool:
        """Whether x is C-contiguous (order "C") or one dense block in some axis order ("K")."""
        shape, strides = tuple(x.shape), self.strides(x)
        if 0 in shape:
            return True
        axes = [i for i in range(len(shape)) if shape[i] > 1]
        if order != "C":
            axes.sort(key=lambda i: -abs(strides[i]))
        step = 1
        for i in reversed(axes):
            if strides[i] != step:
                return False
            step *= shape[i]
        return True


def np_dtype(dtype) -> np.dtype:
    """The NumPy dtype of a NumPy, CuPy or torch dtype."""
    name = str(dtype)
    return np.dtype(name[len("torch."):] if name.startswith("torch.") else dtype)


def _embedding(shape, layout: str):
    """(shape of a larger array, index of the view in it) for the strided layouts."""
    if layout == "stepped":
        return tuple(2 * s + 1 for s in shape), tuple(slice(1, 2 * s + 1, 2) for s in shape)
    if layout == "padded":
        return tuple(shape[:-1]) + (shape[-1] + 3,), (Ellipsis, slice(1, 1 + shape[-1]))
    if layout == "reversed":
        big = list(shape)
        index = [slice(None, None, -1)] + [slice(None)] * (len(shape) - 1)
        big[-1] = 2 * shape[-1] + 1
        index[-1] = slice(2 * shape[-1], 0, -2)
        return tuple(big), tuple(index)
    raise ValueError(f"unknown layout {layout!r}; expected one of {LAYOUTS}")


@functools.cache
def _cupy():
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() <= 0:
            return None
    except Exception:
        return None
    if os.environ.get("KRONPE_TEST_NO_POOL"):  # tools/sanitize.sh
        cupy.cuda.set_allocator(None)
    return cupy


@functools.cache
def _torch_cuda():
    try:
        import torch

        return torch if torch.cuda.is_available() else None
    except Exception:
        return None


class _SideStream:
    def __init__(self, device: Device):
        self.device = device

    def __enter__(self):
        if self.device.lib == "cupy":
            self.s = _cupy().cuda.Stream(non_blocking=True)
            self.ctx = self.s
        else:
            torch = _torch_cuda()
            self.s = torch.cuda.Stream()
            self.ctx = torch.cuda.stream(self.s)
        self.ctx.__enter__()
        return self.s

    def __exit__(self, *exc):
        self.ctx.__exit__(*exc)
        self.s.synchronize()
        return False


def device_params(devices) -> list:
    """pytest params of devices, the CUDA ones marked ``gpu``."""
    return [pytest.param(d, id=d.name, marks=[pytest.mark.gpu] if d.is_cuda else []) for d in devices]


def use_device(device: Device) -> Device:
    """The device, or a pytest skip saying why it cannot be used here."""
    reason = device.unavailable()
    if reason:
        pytest.skip(reason)
    return device


CPU = Device("cpu", "numpy")
#: The public API's devices: NumPy on the host, CuPy and torch on a GPU (the ``device`` fixture).
DEVICES = [CPU, Device("cuda-cupy", "cupy"), Device("cuda-torch", "torch")]
#: The GPU ones (the ``cuda_device`` fixture: checks only a GPU can make, such as a device result
#: against the host's).
CUDA_DEVICES = [d for d in DEVICES if d.is_cuda]
#: torch tensors on the CPU and on a GPU (the ``torch_device`` fixture).
TORCH_DEVICES = [Device("cpu", "torch"), Device("cuda-torch", "torch")]
#: The torch tests that need a GPU (CUDA graphs, inductor's GPU code, CUDA tensors) take
#: ``torch_device`` on the GPU alone.
TORCH_CUDA_ONLY = pytest.mark.parametrize("torch_device", device_params(TORCH_DEVICES[1:]), indirect=True)

# ---- tolerances -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tol:
    """rtol and atol of one comparison; ``tol(k)`` scales both (k terms summed, say)."""

    rtol: float
    atol: float

    def __call__(self, factor: float = 1.0) -> dict:
        return dict(rtol=self.rtol * factor, atol=self.atol * factor)


# (rtol, atol) of a kernel result against a float64 reference, by device, by kind of result:
# "values" are computed point by point (embedders, blending weights), "sums" are reductions
# (mode products, the torch ops). The CUDA figures allow for the device's transcendental
# functions and summation orders.
_TOLERANCES = {
    ("cpu", "values"): {np.float32: (2e-6, 1e-7), np.float64: (1e-12, 1e-13)},
    ("cpu", "sums"): {np.float32: (2e-5, 2e-6), np.float64: (1e-12, 1e-13)},
    ("cuda", "values"): {np.float32: (2e-5, 2e-6), np.float64: (1e-11, 1e-13)},
    ("cuda", "sums"): {np.float32: (2e-5, 2e-6), np.float64: (1e-11, 1e-13)},
}


def tolerance(device: Device, dtype, kind: str = "values") -> Tol:
    """The Tol of a ``kind`` ("values" or "sums") result of ``dtype`` computed on ``device``."""
    dt = np_dtype(dtype).type
    return Tol(*_TOLERANCES[("cuda" if device.is_cuda else "cpu", kind)][dt])


@dataclass(frozen=True)
class Close:
    """How a solver's result is held to its reference (:func:`assert_close`): every element within
    ``rtol * max(max |want|, floor)`` of it, plus ``rtol * |want|`` of its own when ``pointwise``.
    ``rtols``: the rtol by dtype when a test gives a dtype instead of a number."""

    rtols: dict
    floor: float = 0.0
    pointwise: bool = True


#: "solves": direct solves (the grid fits' closed form, on the host or a GPU, against a float64
#: reference or the host's fit); "stencils": the thin-plate operator's kernels, transfers and
#: smoothers (float32 sums of up to 25 terms; values relative to at least 1); "max": relative to the
#: largest value alone (a GPU's multigrid against the host's, whose sums run in other orders).
CLOSE = {
    "solves": Close({np.float32: 1e-4, np.float64: 1e-10}),
    "stencils": Close({np.float32: 2e-4, np.float64: 1e-11}, floor=1.0, pointwise=False),
    "max": Close({}, pointwise=False),
}


def assert_close(got, want, rtol, kind: str = "solves", factor: float = 1.0, *, floor: float | None = None,
                 pointwise: bool | None = None) -> None:
    """Assert ``got`` equals ``want`` as the ``kind`` of :data:`CLOSE` holds results: ``rtol`` is a
    number or a dtype (the kind's rtol for it), scaled by ``factor``; ``floor`` and ``pointwise``
    override the kind's."""
    how = CLOSE[kind]
    if not isinstance(rtol, (int, float)):
        rtol = how.rtols[np_dtype(rtol).type]
    rtol = rtol * factor
    want = np.asarray(want)
    scale = max(float(np.abs(want).max()) if want.size else 0.0, how.floor if floor is None else floor)
    pointwise = how.pointwise if pointwise is None else pointwise
    np.testing.assert_allclose(got, want, rtol=rtol if pointwise else 0.0, atol=rtol * scale)


def random_values(rng, shape, dtype, layout: str = "contiguous") -> np.ndarray:
    """Standard normal values of a shape, constant along axis 0 for the broadcast layout."""
    a = rng.standard_normal(shape).astype(dtype)
    if layout == "broadcast" and a.size:
        a = np.ascontiguousarray(np.broadcast_to(a[:1], a.shape))
    return a


# ---- mode-n products ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChainCase:
    """``multi_mode_product(T, matrices, modes)``: T of ``shape``, matrix j of shape
    (rows[j], shape[modes[j]]); modes None means the default (0, 1, ...)."""

    id: str
    shape: tuple[int, ...]
    modes: tuple[int, ...] | None
    rows: tuple[int, ...]
    layout: str = "contiguous"  # of T
    mat_layouts: tuple[str, ...] = ()  # of each matrix (default contiguous)

    @property
    def chain_modes(self) -> tuple[int, ...]:
        return tuple(range(len(self.rows))) if self.modes is None else self.modes

    def host_inputs(self, rng, dtype):
        """(T, matrices) as host arrays."""
        T = random_values(rng, self.shape, dtype, self.layout)
        mats = [rng.standard_normal((m, self.shape[k])).astype(dtype) for k, m in zip(self.chain_modes, self.rows)]
        return T, mats

    def device_inputs(self, device: Device, T, mats):
        """(T, matrices) on the device, in the case's layouts."""
        layouts = self.mat_layouts or ("contiguous",) * len(mats)
        return device.view(T, self.layout), [device.view(a, lay) for a, lay in zip(mats, layouts)]


# The chains the CPU planner must handle (each step kind at least once, test_mode_product.py).
PLANNER_CHAINS = [
    ("channels-last", (70, 90, 3), (0, 1), (40, 120)),  # rotations + output copy
    ("channels-first", (3, 70, 90), (1, 2), (80, 50)),  # GEMMs straight into the output
    ("middle", (40, 33, 65), (1,), (20,)),  # strided batch of GEMMs
    ("middle-short", (64, 4, 64), (1,), (64,)),  # permuting copy first
    ("expanding", (256, 128, 3), (0, 1), (512, 256)),  # channels last: input copy
    ("cube-reversed-modes", (64, 64, 64), (2, 1, 0), (32, 64, 64)),
    ("4d", (24, 20, 22, 2), (0, 1, 2), (30, 10, 25)),
    ("5d-chosen-order", (9, 10, 11, 12, 2), (4, 0, 2), (3, 8, 13)),
    ("6-modes-fixed-order", (5, 6, 4, 3, 2, 3), (0, 1, 2, 3, 4, 5), (2, 3, 4, 5, 6, 7)),
    ("matrix-both", (128, 64), (1, 0), (100, 200)),
    ("shrinking", (30, 30, 30, 2), (0, 1, 2), (4, 5, 6)),  # intermediates larger than the result
    ("vector", (300,), (0,), (7,)),
    ("greedy-planner", (2, 2, 2, 2, 2, 2, 2, 2, 2, 3), tuple(range(9)), (3,) * 9),
]


#: Chains big enough for several blocks per GEMM step (and a contraction longer than a k block; the
#: last: steps over 16 MiB, read with prefetches and written with streaming stores by the packed
#: GEMM): (shape of T, rows of the matrices of modes 0, 1, ...).
LARGE_CHAINS = [((40, 30, 20), (33, 31, 29)), ((9, 600, 7), (5, 400, 6)), ((70, 70, 70, 2), (64, 64, 64)),
                ((66, 64, 64, 64), (64, 64, 64, 64))]
#: Chains of at least 4 MFLOP whose steps are each too small for a team of their own: (shape of T,
#: rows, modes or None for 0, 1, ...); the test gives the (24, 50, 50) chain Fortran-ordered operands
#: and takes every second slab of the (64, 32, 32) tensor (a strided T).
TEAM_CHAINS = [
    ((32, 32, 32), (32, 32, 32), None),  # the bench's D = 3 32 -> 32: three 2.1 MFLOP steps
    ((40, 36, 44), (38, 30, 41), None),
    ((24, 50, 50), (20, 48, 49), (2, 0, 1)),
    ((16, 20, 24, 20), (13, 17), (0, 1)),  # order C: a step split by columns (13 x 9600), one by batches (13)
    ((300, 40, 8), (30, 8), (1, 2)),
    ((64, 32, 32), (32, 32, 32), None),
]


def mode_product_cases() -> Iterator[ChainCase]:
    """Chains over shapes, layouts of T and of the matrices, extent-1 and empty axes."""
    for name, shape, modes, rows in PLANNER_CHAINS:
        for layout in ("contiguous", "fortran", "reversed"):
            yield ChainCase(f"{name}-{layout}", shape, modes, rows, layout)
    yield ChainCase("all-modes-default", (7, 5, 6), None, (4, 3, 2))
    yield ChainCase("carried-channels", (7, 5, 6, 3), (1, 2), (9, 2))
    yield ChainCase("carried-two-axes-default", (5, 6, 3, 2), None, (4, 7))
    yield ChainCase("back", (2, 50, 40), (2,), (30,))
    yield ChainCase("front", (50, 40, 2), (0,), (30,))
    yield ChainCase("extent-1-axis", (9, 1, 8), None, (3, 4, 5))
    yield ChainCase("matrix-default", (6, 5), None, (3, 2))
    yield ChainCase("permuted-T-transposed-and-stepped-matrices", (8, 12, 10), (2, 0), (7, 6), "permuted",
                    ("fortran", "stepped"))
    yield ChainCase("stepped-T-and-matrices", (24, 20, 22, 2), (0, 1, 2), (30, 10, 25), "stepped",
                    ("stepped", "fortran", "padded"))
    yield ChainCase("padded-T", (40, 33, 65), (1, 2), (20, 9), "padded", ("padded", "contiguous"))
    yield ChainCase("broadcast-T", (64, 4, 64), (1, 2), (64, 5), "broadcast")
    yield ChainCase("reversed-matrices", (9, 8, 7), (1, 0), (5, 3), "reversed", ("reversed", "reversed"))
    yield ChainCase("no-matrices-stepped", (5, 6), (), (), "stepped")
    yield ChainCase("empty-carried-axis", (6, 0, 4), (0,), (3,))
    yield ChainCase("zero-row-matrix", (6, 5, 4), (0, 1), (3, 0))
    yield ChainCase("empty-contraction", (3, 0, 4), (0, 1), (2, 5))  # sums over an empty axis: zeros
    yield ChainCase("zero-row-only", (3, 4), (0,), (0,))
    yield ChainCase("empty-first-axis", (0, 2), (1,), (3,))
    yield ChainCase("empty-stepped", (0, 3, 4), (2,), (2,), "stepped", ("stepped",))


# ---- embedders ------------------------------------------------------------------------------------

EMBEDDERS = [
    kronpe.Gaussian(32, 0.03),
    kronpe.Gaussian(64, 0.01),
    kronpe.Gaussian(32, 0.02, margin=3),
    kronpe.Gaussian(256, 0.0025, margin=2),  # narrow: the kernel evaluates a window of columns only
    kronpe.Triangle(32),
    kronpe.Triangle(48),
    kronpe.Triangle(40, 0.07, margin=3),
    kronpe.Rectangle(32, 0.05),
    kronpe.Rectangle(40, 0.05),
    kronpe.Rectangle(64, 1 / 64, margin=1),
    kronpe.Impulse(16),
    kronpe.Impulse(33),
    kronpe.Impulse(16, margin=2),
    kronpe.Sine(24, 2 * math.pi),
    kronpe.Sine(16, 3.0),
    kronpe.Square(16, 5.0),
    kronpe.Square(24, 5.0, margin=1),
    kronpe.Random(20, seed=7),
    kronpe.Random(20, seed=3),
    kronpe.BSpline(32),
    kronpe.BSpline(24, order=3),
    kronpe.BSpline(32, order=0, width=0.05),
    kronpe.BSpline(32, order=2, width=0.04, margin=2),
    kronpe.BSpline(200, order=3, margin=2),
    kronpe.LinearFourier(16, 4.0),
    kronpe.LinearFourier(32, 4.0),
    kronpe.LogFourier(16, 5.0, amplitude_mod=2.0),
    kronpe.LogFourier(32, 5.0),
    kronpe.RandomFourier(32, 10.0, seed=3, frequency_mod=1.5),
    kronpe.RandomFourier(32, 3.0, seed=2),
    kronpe.NeRF(5),
    kronpe.NeRF(6, include_input=True),
    kronpe.NeRF(4, include_input=True, amplitude_mod=0.5, frequency_mod=2.5),
    kronpe.Transformer(6, max_positions=1000),
    kronpe.Transformer(8),
]


@dataclass(frozen=True)
class EmbedCase:
    """``embedder(x)`` for n coordinates (0, 1 and 0.5 first) in an x layout, written into a
    caller's ``out`` of the given layout (None: the embedder allocates it)."""

    id: str
    embedder: Any
    n: int
    x_layout: str = "contiguous"
    out_layout: str | None = None

    def coords(self, rng, dtype) -> np.ndarray:
        if self.x_layout == "broadcast":
            return np.full(self.n, rng.random(), dtype=dtype)
        return np.concatenate([[0.0, 1.0, 0.5], rng.random(self.n)])[: self.n].astype(dtype)


# (id, n, x layout, out layout): each embedder meets every layout once, and an empty input
_EMBED_VARIANTS = [
    ("contiguous", 301, "contiguous", None),
    ("x-stepped-out-transposed", 63, "stepped", "fortran"),
    ("x-padded-out-padded", 63, "padded", "padded"),
    ("x-reversed", 63, "reversed", None),
    ("x-broadcast", 5, "broadcast", None),
    ("empty", 0, "contiguous", None),
]


def embed_cases() -> Iterator[EmbedCase]:
    """Every embedder family (and the variants that change the kernel's arguments) in every
    layout of x and out, and empty."""
    for emb in EMBEDDERS:
        for vid, n, x_layout, out_layout in _EMBED_VARIANTS:
            yield EmbedCase(f"{emb!r}-{vid}", emb, n, x_layout, out_layout)


def out_view(device: Device, shape, dtype, layout: str):
    """(out, outside): an output array of ``shape`` in a layout, and a function giving the host
    values around it in the array it is a view of (filled with -7, so that stray writes show)."""
    if layout == "padded":
        full = device.put(np.full(tuple(shape[:-1]) + (shape[-1] + 3,), -7, dtype=dtype))
        return full[..., 1 : 1 + shape[-1]], lambda: device.host(full)[..., [0, -2, -1]]
    return device.view(np.full(shape, -7, dtype=dtype), layout), lambda: np.full(0, -7)


# ---- resampling -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ResampleCase:
    """``kronpe.resample(y, [N])`` of n samples of 3 channels, in a dtype and a memory layout."""

    n: int
    N: int
    dtype: Any
    layout: str

    @property
    def id(self) -> str:
        return f"{self.n}->{self.N}-{np.dtype(self.dtype).name}-{self.layout}"


#: (input samples, output samples): single samples, shrinking, growing, equal, odd ratios
RESAMPLE_SIZES = [(1, 3), (2, 1), (5, 11), (7, 15), (20, 9), (16, 32), (9, 9), (3, 40)]
RESAMPLE_LAYOUTS = ("contiguous", "fortran", "stepped", "reversed")


def resample_cases() -> Iterator[ResampleCase]:
    for n, N in RESAMPLE_SIZES:
        for dtype in (np.float32, np.float64):
            for layout in RESAMPLE_LAYOUTS if n > 1 else ("contiguous",):
                yield ResampleCase(n, N, dtype, layout)


# ---- blending matrix ------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlendCase:
    """``BlendingMatrix(points, grid, embedders, normalize)`` with P random points in [0, 1]^D
    (some on the boundary), products with values of ``channels`` trailing axes."""

    id: str
    grid: tuple[int, ...]  # nodes per axis
    embedders: Any  # one embedder for every axis, a list per axis, or None (linear)
    P: int = 300
    channels: tuple[int, ...] = (3,)
    normalize: bool = True
    nonuniform: tuple[int, ...] = ()  # axes with non-uniform node coordinates
    points_dtype: Any = np.float64
    points_layout: str = "contiguous"
    values_layout: str = "contiguous"  # of v and r
    grid_shaped: bool = False  # v of shape (M_1, ..., M_D, *channels)
    presorted: bool = False  # points in grid-cell order already (BlendingMatrix's plan: identity)

    @property
    def D(self) -> int:
        return len(self.grid)

    def nodes(self):
        """The grid argument: node counts, or node coordinates on the non-uniform axes."""
        out = []
        for i, m in enumerate(self.grid):
            if i in self.nonuniform:
                inner = np.sort(np.random.default_rng(100 + i).random(m - 2))
                out.append(np.concatenate([[0.0], inner, [1.0]]))
            else:
                out.append(m)
        return out

    def axis_embedders(self) -> list:
        return list(self.embedders) if isinstance(self.embedders, (list, tuple)) else [self.embedders] * self.D

    def distances(self):
        """Per axis, the distance a dense reference uses (None: linear)."""
        return [None if e is None else e.distance for e in self.axis_embedders()]

    def rules(self) -> tuple[str, ...]:
        """The weight rule of each axis: the kernels' closed forms, or the embedder's distance
        (B-splines: stored weights)."""
        return tuple("linear" if e is None else "distance" if isinstance(e, kronpe.BSpline) else "kernel"
                     for e in self.axis_embedders())

    @property
    def matrix_key(self) -> tuple:
        """What the matrix depends on (cases that differ only in their values share it)."""
        return (self.grid, repr(self.embedders), self.P, self.normalize, self.nonuniform, np.dtype(self.points_dtype).name) + (
            ("presorted",) if self.presorted else ())

    def points(self) -> np.ndarray:
        """(P, D) points of the case (the same for every device and dtype)."""
        pts = np.random.default_rng(zlib.crc32(repr(self.matrix_key[2:]).encode())).random((self.P, self.D))
        pts[:4] = 0.0
        pts[4:8] = 1.0
        if self.presorted:  # stably by cell, row-major (axis 0 slowest), as the plan orders them
            nodes = [np.linspace(0, 1, n) if np.isscalar(n) else n for n in self.nodes()]
            cells = [np.clip(np.searchsorted(n, q, side="right") - 1, 0, n.size - 2) for n, q in zip(nodes, pts.T)]
            pts = pts[np.lexsort(cells[::-1])]
        return pts.astype(self.points_dtype)

    def values(self, rng, dtype, G: int):
        """(v, r): grid values and point values as host arrays."""
        shape_v = (tuple(self.grid) if self.grid_shaped else (G,)) + self.channels
        return (random_values(rng, shape_v, dtype, self.values_layout),
                random_values(rng, (self.P,) + self.channels, dtype, self.values_layout))


def blend_cases() -> Iterator[BlendCase]:
    """Dimensions 1 to 3, every kernel rule, (non-)normalised, uniform and non-uniform nodes,
    float32 points, channel counts, strided values and points, and empty inputs."""
    kernels = [
        ("gauss2", (17, 13), kronpe.Gaussian(16, 0.05)),
        ("tri3", (6, 7, 5), kronpe.Triangle(6)),
        ("linear2", (9, 9), None),
        ("rect1", (40,), kronpe.Rectangle(39, 0.05)),
        ("bspline2", (12, 10), kronpe.BSpline(11, order=3)),  # weights from the embedder's distance: stored
    ]
    for name, grid, emb in kernels:
        for channels in [(), (3,), (11,)]:
            yield BlendCase(f"{name}-c{'x'.join(map(str, channels))}", grid, emb, 500, channels)
    for D in (1, 2, 3):
        embs = tuple(kronpe.Gaussian(8, 0.08 + 0.02 * i) for i in range(D))
        for normalize in (True, False):
            yield BlendCase(f"nonuniform{D}-{'normalized' if normalize else 'raw'}", (5, 4, 3)[:D], embs, 40, (2,),
                            normalize, nonuniform=(1,))
        yield BlendCase(f"gauss{D}-many-points", (9, 7, 5)[:D], kronpe.Gaussian(8, 0.06), 1000, (2,))
    # four axes: the CUDA kernels' generic version (their compiled versions stop at three axes)
    yield BlendCase("gauss4", (5, 4, 3, 4), kronpe.Gaussian(6, 0.1), 300, (2,))
    yield BlendCase("float32-points", (8, 8), kronpe.Gaussian(8, 0.08), 200, points_dtype=np.float32)
    yield BlendCase("float32-points-grid-shaped", (9, 11), kronpe.Gaussian(8, 0.1), 300, (2,),
                    points_dtype=np.float32, grid_shaped=True)
    yield BlendCase("grid-shaped-no-channels", (6, 7), kronpe.Gaussian(8, 0.08), 100, (), grid_shaped=True)
    for layout in ("stepped", "fortran", "padded", "reversed"):
        yield BlendCase(f"{layout}-points-and-values", (6, 7), kronpe.Gaussian(8, 0.08), 200, (3,),
                        points_layout=layout, values_layout=layout)
    yield BlendCase("grid-shaped-fortran", (6, 7), kronpe.Gaussian(8, 0.08), 200, (), values_layout="fortran",
                    grid_shaped=True)
    yield BlendCase("broadcast-values", (6, 7), kronpe.Gaussian(8, 0.08), 200, (3,), values_layout="broadcast")
    # points in cell order already (the plan is the identity: no reordered copies), and a wide
    # grid with few points per slab (the plan sorts them by comparison, not by counting)
    yield BlendCase("presorted-gauss2", (17, 13), kronpe.Gaussian(16, 0.05), 500, (3,), presorted=True)
    yield BlendCase("presorted-tri3", (6, 7, 5), kronpe.Triangle(6), 300, (2,), presorted=True)
    yield BlendCase("presorted-bspline2", (12, 10), kronpe.BSpline(11, order=3), 300, (2,), presorted=True)
    yield BlendCase("wide-grid-few-points", (3, 400), kronpe.Gaussian(64, 0.01), 40, (2,))
    yield BlendCase("no-points", (4, 5), kronpe.Gaussian(8, 0.1), 0, (3,))
    yield BlendCase("no-points-no-channels", (4, 5), kronpe.Gaussian(8, 0.1), 0, ())
    yield BlendCase("no-channel", (4, 4), None, 12, (0,))


#: Grids of the factored blending matrix, by number of axes (four: the kernels' generic version).
BLEND_FACTOR_GRIDS = {1: (23,), 2: (9, 7), 3: (6, 5, 7), 4: (4, 5, 3, 4)}


@dataclass(frozen=True)
class BlendFactorCase:
    """The factored form of a blending matrix: Gaussian weights (the kernels' closed form) on a grid
    of D axes (BLEND_FACTOR_GRIDS) whose axis 0 has nodes off the even spacing, (non-)normalised."""

    id: str
    D: int
    normalize: bool = True

    @property
    def embedder(self):
        return kronpe.Gaussian(8, 0.09)

    def matrix(self, rng, P: int, dtype=np.float64):
        """(matrix, points, nodes, distances): the matrix of P random points of ``dtype`` (weights on
        the fly), its points, per-axis node coordinates and the distances of the dense references."""
        grid = list(BLEND_FACTOR_GRIDS[self.D])
        nodes0 = np.sort(np.r_[0.0, rng.uniform(0.05, 0.95, grid[0] - 2), 1.0])
        B = kronpe.BlendingMatrix(rng.random((P, self.D)).astype(dtype), [nodes0] + grid[1:], self.embedder,
                                  normalize=self.normalize, cache_weights=False)
        return B, B.points, list(B.grid_coords), [self.embedder.distance] * self.D


def blend_factor_cases(normalize=(True, False)) -> Iterator[BlendFactorCase]:
    """Every BLEND_FACTOR_GRIDS dimension, normalised and not."""
    for D in BLEND_FACTOR_GRIDS:
        for norm in normalize:
            yield BlendFactorCase(f"{D}d-{'normalized' if norm else 'raw'}", D, norm)


# ---- BLAS --------------------------------------------------------------------------------------------

#: (m, k, n) of C = op(A) op(B) through the BLAS: a single element, odd sizes, empty products.
GEMM_SHAPES = [(1, 1, 1), (7, 5, 3), (64, 33, 17), (0, 4, 3), (5, 0, 2), (3, 4, 0)]
#: ... through kronpe's packed GEMM (AVX-512 or AVX2 kernels): odd sizes (partial register tiles), a
#: contraction longer than one k block, empty products; with m >= n and a transposed B the small
#: operand's panels are packed by 16 x 16 transposes (AVX2: 8 x 8), k in whole blocks of 16 and with a
#: remainder, full and partial 32-column panels (AVX2: 16); a transposed A (columns contiguous) is read
#: in place for B up to 64 columns, and packed by AVX2 beyond (200 x 48 x 100).
PACKED_GEMM_SHAPES = [(1, 1, 1), (7, 5, 3), (13, 33, 47), (64, 33, 17), (25, 400, 37), (0, 4, 3), (5, 0, 2),
                      (3, 4, 0), (1, 300, 1), (2, 9, 50), (70, 37, 64), (70, 50, 40), (64, 500, 48), (33, 16, 32),
                      (200, 48, 100)]
#: Layouts the GEMMs take: rows contiguous in memory, packed or padded (rows of a wider array).
GEMM_LAYOUTS = ("contiguous", "padded")


@dataclass(frozen=True)
class GemmCase:
    """C (m x n) = op(A) op(B), op a transpose where ``ta`` / ``tb``; A, B and C in a layout."""

    id: str
    m: int
    k: int
    n: int
    ta: bool
    tb: bool
    layout: str = "contiguous"

    def operands(self, rng, dtype):
        """(A, B) as host arrays."""
        a = rng.standard_normal((self.k, self.m) if self.ta else (self.m, self.k)).astype(dtype)
        b = rng.standard_normal((self.n, self.k) if self.tb else (self.k, self.n)).astype(dtype)
        return a, b


def gemm_cases(shapes=GEMM_SHAPES, layouts=GEMM_LAYOUTS) -> Iterator[GemmCase]:
    """Every shape with each transpose of A and B, operands and result in each layout."""
    for m, k, n in shapes:
        for ta in (False, True):
            for tb in (False, True):
                for layout in layouts:
                    ops = ("AT" if ta else "A") + ("BT" if tb else "B")
                    yield GemmCase(f"{m}x{k}x{n}-{ops}-{layout}", m, k, n, ta, tb, layout)


# ---- thin-plate stencils and the multigrid ---------------------------------------------------------

#: Grids of the stencil kernels: one to three axes, empty ones, extents 1 and 2 (every boundary row).
STENCIL_SHAPES = [(0,), (1,), (2,), (3,), (7,), (0, 4), (1, 6), (2, 3), (5, 6), (9, 4), (2, 9), (3, 8), (4, 5),
                  (5, 5), (3, 0, 2), (1, 1, 5), (4, 5, 6), (2, 7, 3)]
#: The penalty forms: (reflect, order, weights of 3 axes or None, top, tail); the Laplacian-power
#: forms (order 3, weighted, polynomials top L_w^order + tail L_w^(order - 1)) are mirrored only.
PENALTIES = {"natural": (False, 2, None, 1.0, 0.0), "reflect": (True, 2, None, 1.0, 0.0),
             "weighted2": (True, 2, (0.6, 1.7, 1.2), 1.0, 0.0), "order3": (True, 3, None, 1.0, 0.0),
             "order3w": (True, 3, (0.6, 1.0, 1.4), 1.0, 0.0),
             # the squared Laplacian plus a tenth of the third power (DifferencePenalty(2, ..., higher=0.1)),
             # and a weighted squared Laplacian with tension
             "poly3": (True, 3, None, 0.1, 1.0), "poly2w": (True, 2, (0.6, 1.7, 1.2), 1.0, 0.5)}
#: Rows of every width around the 16 floats of an AVX-512 vector (the planes' Laplacian passes take
#: their neighbours from the vectors loaded and mask the last partial vector).
ROW_WIDTHS = [2, 3, 5, 15, 16, 17, 18, 31, 32, 33, 47, 48, 49, 63, 64, 65]
#: Grids of the compiled hierarchy (levels down to the coarsest grid).
HIERARCHY_SHAPES = [(1,), (2,), (5,), (70,), (300,), (3, 70), (30, 17), (2, 40), (1, 1, 90), (9, 10, 11), (4, 3, 30)]
#: Grids large enough that the smoother splits its rows among 3 threads (32k nodes per thread and
#: blocks at least as long as the boundary gaps, 2 lag (stages - 1) rows: 2-D lag 2 rows, 3-D lag
#: two planes; (24, 2731) and (36, 2731) are the shortest blocks allowed for 2 and 3 threads).
THREADED_SHAPES = [(400, 260), (140, 5, 200), (256, 16, 24), (24, 2731), (36, 2731), (32, 64, 64)]
#: Grids of the device hierarchy against the host's.
DEVICE_STENCIL_SHAPES = [(37,), (33, 47), (2, 6), (3, 5), (64, 64), (9, 10, 11)]


def penalty_form(name: str, ndim: int) -> tuple:
    """(reflect, order, weights of ndim axes, top, tail) of a PENALTIES entry."""
    reflect, order, w, top, tail = PENALTIES[name]
    return reflect, order, None if w is None else list(w[3 - ndim:]), top, tail


def penalty_kwargs(pen: tuple) -> dict:
    """A penalty_form as the kernels' and ThinPlateMG's keyword arguments."""
    return dict(reflect=pen[0], order=pen[1], weights=pen[2], top=pen[3], tail=pen[4])


def stencil_inputs(rng, shape, dtype):
    """(x, m, b) of a thin-plate system: x and b standard normal, m a data term that is zero at
    about 60% of the nodes."""
    x = rng.standard_normal(shape).astype(dtype)
    m = (rng.random(shape) < 0.4).astype(dtype) * rng.random(shape).astype(dtype)
    b = rng.standard_normal(shape).astype(dtype)
    return x, m, b


def device_stencil_problem(shape, seed: int = 0):
    """(m, b, x) in float32 for the device hierarchy: data at about 30% of the nodes, weights in
    [0.5, 2), b zero off the data."""
    rng = np.random.default_rng(seed)
    m = (rng.random(shape) < 0.3).astype(np.float32) * rng.uniform(0.5, 2.0, shape).astype(np.float32)
    b = (m * rng.standard_normal(shape)).astype(np.float32)
    x = rng.standard_normal(shape).astype(np.float32)
    return m, b, x


@dataclass(frozen=True)
class StencilCase:
    """The thin-plate operator of a penalty (PENALTIES) on a grid with weight ``lam``, x and m in
    memory layouts (m contiguous when x is broadcast)."""

    id: str
    shape: tuple[int, ...]
    penalty: str
    lam: float
    layout: str = "contiguous"

    @property
    def form(self) -> tuple:
        return penalty_form(self.penalty, len(self.shape))

    @property
    def kwargs(self) -> dict:
        return penalty_kwargs(self.form)

    def inputs(self, rng, dtype):
        """(x, m, b) as host arrays (x constant along axis 0 for the broadcast layout)."""
        x, m, b = stencil_inputs(rng, self.shape, dtype)
        if self.layout == "broadcast":
            x = np.ascontiguousarray(np.broadcast_to(x[:1], self.shape))
        return x, m, b

    def views(self, x, m):
        """x and m in the case's layouts (CPU arrays)."""
        return CPU.view(x, self.layout), CPU.view(m, "contiguous" if self.layout == "broadcast" else self.layout)


def stencil_cases() -> Iterator[StencilCase]:
    """Every penalty form on every STENCIL_SHAPES grid (contiguous), lambda 0.37 (second order) or
    0.037 (third)."""
    for penalty, form in PENALTIES.items():
        for shape in STENCIL_SHAPES:
            yield StencilCase(f"{penalty}-{'x'.join(map(str, shape))}", shape, penalty, 0.37 if form[1] == 2 else 0.037)


def stencil_layout_cases() -> Iterator[StencilCase]:
    """The operator on planes at row widths around the 16-lane vectors (the factored rows: L v of the
    next row and L (L v) of this one in one pass) in strided layouts, and on a volume in every
    layout."""
    for layout in ("contiguous", "fortran", "stepped", "reversed"):
        for penalty in ("natural", "reflect"):
            for width in (15, 16, 17, 31, 32, 33, 48):
                yield StencilCase(f"rows-{width}-{penalty}-{layout}", (7, width), penalty, 0.37, layout)
    for layout in LAYOUTS:
        for penalty in ("natural", "order3w", "poly3"):
            yield StencilCase(f"volume-{penalty}-{layout}", (6, 7, 5), penalty, 0.5, layout)


# ---- difference penalties and the penalised fits ---------------------------------------------------

#: The difference penalties' (order, mixed, boundary) forms.
PENALTY_ORDERS = [(1, False, "natural"), (2, False, "natural"), (2, True, "natural"), (3, False, "natural"),
                  (3, True, "natural"), (1, False, "reflect"), (2, False, "reflect"), (2, True, "reflect"),
                  (3, False, "reflect"), (3, True, "reflect")]
#: (grid shape, K per axis) of the penalised grid fits, by number of axes.
PENALTY_GRIDS = {1: ((12,), (8,)), 2: ((9, 8), (6, 5)), 3: ((6, 5, 5), (4, 4, 3))}
#: Per-axis weights of the penalty, by number of axes.
PENALTY_WEIGHTS = {1: (2.5,), 2: (0.6, 1.7), 3: (0.5, 1.0, 2.0)}
#: Layouts of the penalties' inputs (weights of a grid).
PENALTY_LAYOUTS = ("contiguous", "fortran", "stepped", "reversed")


def penalty_problem(rng, D: int, dtype=np.float64, channels=(2,)) -> GridProblem:
    """A penalised grid fit on PENALTY_GRIDS[D] with Gaussians of width 1 / K (grid_problem)."""
    shape, Ks = PENALTY_GRIDS[D]
    return grid_problem(rng, shape, Ks, channels, dtype=dtype,
                        family=lambda K, m: kronpe.Gaussian(K, 1.0 / K, margin=m))


# ---- cubic B-spline kernels ------------------------------------------------------------------------

#: (intervals per axis, lower corner, node spacing) of the spline kernels' grids: one to three axes,
#: an axis of one interval.
SPLINE_GRIDS = [((5,), (0.25,), 0.3), ((3, 4), (0.1, -1.0), 0.3), ((2, 3, 2), (0.0, 2.0, -1.0), 0.5),
                ((1, 6), (0.0, 0.0), 1.0)]


def spline_points(rng, nint, lo, h, P: int) -> np.ndarray:
    """P uniform points in the box of a spline grid (C-contiguous float64, as the kernels take)."""
    return np.asarray(lo) + rng.random((P, len(nint))) * np.asarray(nint) * h


@dataclass(frozen=True)
class SplineCase:
    """A spline grid (SPLINE_GRIDS) with P points in its box and C value channels."""

    id: str
    nint: tuple[int, ...]
    lo: tuple[float, ...]
    h: float
    P: int
    C: int

    def points(self, rng) -> np.ndarray:
        return spline_points(rng, self.nint, self.lo, self.h, self.P)


def spline_cases(sizes=((0, 1), (1, 1), (37, 1), (200, 3))) -> Iterator[SplineCase]:
    """Every SPLINE_GRIDS grid with each (P, C) of ``sizes`` (by default: no point, one, several and
    many points with channels)."""
    for nint, lo, h in SPLINE_GRIDS:
        for P, C in sizes:
            yield SplineCase(f"{'x'.join(map(str, nint))}-P{P}-C{C}", nint, lo, h, P, C)


# ---- grid fits ----------------------------------------------------------------------------------


#: The embedder families of the grid fits' problems (by index; width about one centre spacing).
GRID_FAMILIES = [
    lambda K, m: kronpe.Gaussian(K, 0.8 / K, margin=m),
    lambda K, m: kronpe.Triangle(K, 1.5 / K, margin=m),
    lambda K, m: kronpe.BSpline(K, 3, margin=m),
]


class GridProblem(NamedTuple):
    """A grid fit's inputs: per-axis coordinates, embedders and the signal, and the per-axis bases
    (float64) of the dense references."""

    coords: list
    embedders: list
    signal: np.ndarray
    bases: list


def grid_problem(rng, shape, Ks, channels=(), *, batch=(), dtype=np.float64, family=None, margin: int = 1,
                 smooth: bool = False) -> GridProblem:
    """Coordinates on each axis of ``shape``, an embedder of K_i centres per axis and a signal of
    ``shape + channels + batch``.

    family: None (the GRID_FAMILIES in turn, axis by axis), an index into GRID_FAMILIES, or a
    function (K, margin) -> embedder. smooth: coordinates jittered about the grid (i + U[0, 0.5)) / n
    and a smooth signal plus noise whose channel and batch entries differ in scale (a clear GCV
    minimum, well conditioned fits); otherwise sorted uniform coordinates and standard normal
    values."""
    if family is None or isinstance(family, int):
        families = [GRID_FAMILIES[(i if family is None else family) % len(GRID_FAMILIES)] for i in range(len(Ks))]
    else:
        families = [family] * len(Ks)
    extra = tuple(channels) + tuple(batch)
    if smooth:
        coords = [(np.arange(n) + rng.uniform(0, 0.5, n)) / n for n in shape]
    else:
        coords = [np.sort(rng.uniform(0, 1, n)) for n in shape]
    embs = [f(K, margin) for f, K in zip(families, Ks)]
    if smooth:
        wave = np.ones(())
        for i, c in enumerate(coords):
            wave = np.multiply.outer(wave, np.sin(3.0 * c + i))
        scale = 1.0 + np.arange(int(np.prod(extra, dtype=np.int64))).reshape(extra)
        S = np.multiply.outer(wave, scale) + 0.1 * rng.standard_normal(tuple(shape) + extra)
    else:
        S = rng.standard_normal(tuple(shape) + extra)
    return GridProblem(coords, embs, S.astype(dtype), [np.asarray(e(c), np.float64) for e, c in zip(embs, coords)])


@dataclass(frozen=True)
class GridFitCase:
    """``fit_grid`` of a signal of ``shape + channels`` (in a memory layout) with K_i embedders."""

    id: str
    shape: tuple[int, ...]
    Ks: tuple[int, ...]
    channels: tuple[int, ...] = ()
    layout: str = "contiguous"

    def problem(self, rng, dtype=np.float64) -> GridProblem:
        """The problem; its signal constant along axis 0 for the broadcast layout (the test views
        it in the case's layout)."""
        p = grid_problem(rng, self.shape, self.Ks, self.channels, dtype=dtype)
        if self.layout == "broadcast":
            p = p._replace(signal=np.ascontiguousarray(np.broadcast_to(p.signal[:1], p.signal.shape)))
        return p


def grid_fit_cases() -> Iterator[GridFitCase]:
    """One to three axes, more or fewer centres than samples, channels; the signal in every layout."""
    base = [("1d", (7,), (5,), (2,)), ("2d", (6, 5), (4, 8), (2,)), ("3d", (4, 5, 3), (6, 3, 4), (2,))]
    for name, shape, Ks, channels in base:
        yield GridFitCase(name, shape, Ks, channels)
    for layout in LAYOUTS[1:]:
        yield GridFitCase(f"2d-{layout}", (6, 5), (4, 8), (2,), layout)
    yield GridFitCase("3d-no-channels-stepped", (4, 5, 3), (6, 3, 4), (), "stepped")


#: (grid shape, K per axis, channels) of the device fits: Gaussians of width 0.6 / K at jittered
#: grid coordinates (``grid_problem(smooth=True)``) are well conditioned (the singular values of
#: each axis within a factor 5), so that float32 fits of different summation orders agree to about
#: 1e-6, the pseudo-inverse included.
DEVICE_GRID_FITS = [((24, 20), (16, 14), (2,)), ((10, 9, 8), (8, 7, 6), ())]


def device_grid_problem(shape, Ks, channels=(), batch=(), dtype=np.float64, seed: int = 0, margin: int = 0):
    """The device fits' problems (DEVICE_GRID_FITS): smooth, Gaussians of width 0.6 / K."""
    return grid_problem(np.random.default_rng(seed), shape, Ks, channels, batch=batch, dtype=dtype,
                        family=lambda K, m: kronpe.Gaussian(K, 0.6 / K, margin=m), margin=margin, smooth=True)


# ---- point fits -----------------------------------------------------------------------------------

#: Node counts per axis of the point fits' grids, by number of axes.
POINT_FIT_GRIDS = {1: (9,), 2: (6, 5), 3: (4, 4, 3)}


def point_fit_embedders(D: int, K: int = 4) -> list:
    """Gaussians of K centres per axis, widths 0.18 + 0.03 i, one centre of margin."""
    return [kronpe.Gaussian(K, 0.18 + 0.03 * i, margin=1) for i in range(D)]


@dataclass(frozen=True)
class PointFitCase:
    """``fit_points`` of P random points in [0, 1]^D with values of ``channels`` trailing axes, both
    in a memory layout, on a POINT_FIT_GRIDS grid with point_fit_embedders."""

    id: str
    D: int
    channels: tuple[int, ...] = ()
    layout: str = "contiguous"
    P: int = 80

    def problem(self, rng, dtype=np.float64):
        """(points, values) as host arrays (points float64, values of ``dtype``)."""
        return rng.random((self.P, self.D)), rng.standard_normal((self.P,) + self.channels).astype(dtype)


def point_fit_cases() -> Iterator[PointFitCase]:
    """One to three axes, with and without channels, and points and values in every layout but
    broadcast (points all in one place)."""
    for D in (1, 2, 3):
        for channels in ((), (2,)):
            yield PointFitCase(f"{D}d-c{'x'.join(map(str, channels))}", D, channels)
    for layout in LAYOUTS[1:-1]:
        yield PointFitCase(f"2d-c2-{layout}", 2, (2,), layout)
    yield PointFitCase("3d-stepped", 3, (), "stepped")


# ---- torch ops ------------------------------------------------------------------------------------


class OpSample(NamedTuple):
    """One call of a torch op: ``torch.ops.kronpe.<op>(*args)``. ``overlapping``: some input
    has stride 0 (gradcheck cannot perturb it element by element)."""

    id: str
    op: str
    args: tuple
    overlapping: bool = False


def torch_op_samples(device: str, requires_grad: bool, dtype=None) -> Iterator[OpSample]:
    """Every op over shapes with carried axes, modes out of order, non-contiguous, broadcast and
    empty inputs, on a torch device ("cpu" or "cuda"); float tensors are leaves of
    ``requires_grad`` (non-contiguous ones stay non-contiguous)."""
    import torch

    dtype = dtype or torch.float64
    g = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=g, dtype=dtype).to(device)

    def leaf(t):
        return t.detach().requires_grad_(requires_grad)

    # -- multi_mode_product(T, matrices, modes) --
    mmp = "multi_mode_product"
    yield OpSample("mmp-3d-two-modes", mmp, (leaf(rand(4, 5, 6)), [leaf(rand(3, 4)), leaf(rand(2, 6))], [0, 2]))
    yield OpSample("mmp-carried-channels-out-of-order", mmp, (
        leaf(rand(4, 5, 3)), [leaf(rand(6, 5)), leaf(rand(7, 4))], [1, 0]))
    yield OpSample("mmp-all-modes-growing", mmp, (
        leaf(rand(3, 2, 4)), [leaf(rand(5, 3)), leaf(rand(6, 2)), leaf(rand(2, 4))], [0, 1, 2]))
    yield OpSample("mmp-noncontiguous", mmp, (
        leaf(rand(6, 4, 5).permute(2, 0, 1)), [leaf(rand(5, 3).mT), leaf(rand(4, 8)[:, ::2])], [0, 2]))
    yield OpSample("mmp-strided-slice", mmp, (leaf(rand(8, 6)[::2, 1:]), [leaf(rand(3, 10)[:, ::2])], [1]))
    yield OpSample("mmp-matrix", mmp, (leaf(rand(4, 5)), [leaf(rand(3, 4))], [0]))
    yield OpSample("mmp-broadcast", mmp, (leaf(rand(1, 5).expand(4, 5)), [leaf(rand(3, 1).expand(3, 4))], [0]), True)
    yield OpSample("mmp-no-matrices", mmp, (leaf(rand(2, 3)), [], []))
    yield OpSample("mmp-empty-contraction", mmp, (leaf(rand(0, 5)), [leaf(rand(3, 0))], [0]))
    yield OpSample("mmp-empty-output-rows", mmp, (leaf(rand(4, 5)), [leaf(rand(0, 4))], [0]))
    yield OpSample("mmp-empty-carried", mmp, (leaf(rand(4, 0, 2)), [leaf(rand(3, 4)), leaf(rand(5, 2))], [0, 2]))

    # -- blend(values (G, C), indices (P, S), weights (P, S)) --
    def plan(P, S, G):
        idx = torch.randint(0, max(G, 1), (P, S), generator=g).to(device)
        return idx, leaf(torch.rand(P, S, generator=g, dtype=dtype).to(device))

    idx, w = plan(7, 4, 10)
    yield OpSample("blend-basic", "blend", (leaf(rand(10, 3)), idx, w))
    idx, w = plan(9, 8, 12)
    yield OpSample("blend-noncontiguous-values", "blend", (leaf(rand(2, 12).mT), idx, w))
    idx, w = plan(9, 2, 5)
    yield OpSample("blend-noncontiguous-plan", "blend", (
        leaf(rand(5, 1)), idx.mT.contiguous().mT, leaf(w.detach().mT.contiguous().mT)))
    idx, w = plan(5, 4, 10)
    yield OpSample("blend-broadcast-values", "blend", (leaf(rand(10, 1).expand(10, 3)), idx, w), True)
    idx, w = plan(0, 4, 6)
    yield OpSample("blend-no-points", "blend", (leaf(rand(6, 2)), idx, w))
    idx, w = plan(5, 4, 6)
    yield OpSample("blend-no-channels", "blend", (leaf(rand(6, 0)), idx, w))

    # -- blend_transpose(rows (P, C), indices, weights, num_nodes) --
    bt = "blend_transpose"
    idx, w = plan(7, 4, 10)
    yield OpSample("blendT-basic", bt, (leaf(rand(7, 3)), idx, w, 10))
    idx, w = plan(11, 8, 9)
    yield OpSample("blendT-noncontiguous-rows", bt, (leaf(rand(2, 11).mT), idx, w, 9))
    idx, w = plan(5, 4, 10)
    yield OpSample("blendT-broadcast-rows", bt, (leaf(rand(5, 1).expand(5, 3)), idx, w, 10), True)
    idx, w = plan(0, 4, 6)
    yield OpSample("blendT-no-points", bt, (leaf(rand(0, 2)), idx, w, 6))
    idx, w = plan(0, 4, 0)
    yield OpSample("blendT-empty-grid", bt, (leaf(rand(0, 2)), idx, w, 0))


def torch_op_sample(device: str, sample_id: str, requires_grad: bool = False, dtype=None) -> OpSample:
    """The sample of torch_op_samples with this id."""
    for s in torch_op_samples(device, requires_grad, dtype):
        if s.id == sample_id:
            return s
    raise KeyError(sample_id)


def torch_dtype(dtype):
    """The torch dtype of a NumPy float dtype."""
    import torch

    return {np.float32: torch.float32, np.float64: torch.float64}[np.dtype(dtype).type]


def ids(cases: Sequence) -> list:
    """The pytest ids of a list of cases."""
    return [c.id for c in cases]
