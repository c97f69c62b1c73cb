"""Type stubs of kronpe's compiled core (csrc/bindings). Internal: the public API wraps it.

Every array crosses as one descriptor (:data:`kronpe._adapters.arrays.Descriptor`): an
:class:`~kronpe._adapters.arrays.Array` tuple (address, shape, strides in elements, dtype,
device -1 or the CUDA ordinal, stream), or a host NumPy array, whose buffer the binding reads. A value of the wrong Python
type raises TypeError; a wrong value (dtype, rank, shape, device, a bad parameter) raises
ValueError; a backend failure (BLAS, CUDA, a module built without CUDA) raises RuntimeError.
"""
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from kronpe._adapters.arrays import Descriptor

#: a grid axis of the blending kernels: (nodes, kind, param), nodes 1-D float64 host memory
Axis = Tuple[Descriptor, int, float]

def blend_axis_weights(axes: Sequence[Axis], normalize: bool, axis: int, q: Descriptor, cell: Descriptor, w0: Descriptor, w1: Descriptor) -> None:
    """Per-axis cells and weight pairs of contiguous float64 coordinates (internal)."""

def blend_factored(axes: Sequence[Axis], normalize: bool, base: Descriptor, pairs: Descriptor, grid: Descriptor, out: Descriptor, threads: int = 0, rows: Optional[Descriptor] = None) -> None:
    """out (P, C) = B grid (G, C) from factors (blend_factors): the bits of blend_fly; factor row p gives row rows[p] of out when rows is given (internal)."""

def blend_factors(axes: Sequence[Axis], normalize: bool, points: Descriptor, base: Descriptor, pairs: Descriptor, threads: int = 0, rows: Optional[Descriptor] = None) -> None:
    """Factors of the points: base (P, 1) flat index of each cell's first corner, pairs (P, 2D) the per-axis weight pairs; row e is point rows[e] when rows is given (internal)."""

def blend_fly(axes: Sequence[Axis], normalize: bool, points: Descriptor, grid: Descriptor, out: Descriptor, threads: int = 0, rows: Optional[Descriptor] = None) -> None:
    """out (P, C) = B grid (G, C), weights on the fly; point p gives row rows[p] of out when rows is given (points in a plan's order, rows its perm) (internal)."""

def blend_info(axes: Sequence[Axis]) -> Dict[str, Any]:
    """Grid size, strides, row span and transpose layout of a virtual grid (internal)."""

def blend_layout(grid_size: int, span: int) -> Tuple[int, int]:
    """(nodes per slab, slabs) of the deterministic transpose (internal)."""

def blend_normal_add(indices: Descriptor, weights: Descriptor, v: Descriptor, out: Descriptor, keep: Optional[Descriptor] = None) -> None:
    """out (G,) += B^T diag(keep) B v (G,) from stored (indices, weights) in any row order, one pass on one thread (internal)."""

def blend_plan_fly(axes: Sequence[Axis], points: Descriptor, perm: Descriptor, slab_ptr: Descriptor, threads: int = 0) -> None:
    """The plan: the points sorted by grid cell (perm) and the transpose's slab offsets (internal)."""

def blend_plan_stored(indices: Descriptor, grid_size: int, span: int, perm: Descriptor, slab_ptr: Descriptor, threads: int = 0) -> None:
    """The plan of stored rows: sorted by their smallest index (perm) and the transpose's slab offsets (internal)."""

def blend_stored(indices: Descriptor, weights: Descriptor, grid: Descriptor, out: Descriptor, threads: int = 0, rows: Optional[Descriptor] = None) -> None:
    """out (P, C) = B grid (G, C) from stored (indices, weights); row p gives row rows[p] of out when rows is given (internal)."""

def blend_transpose_factored(axes: Sequence[Axis], normalize: bool, base: Descriptor, pairs: Descriptor, values: Descriptor, out: Descriptor, threads: int = 0, perm: Optional[Descriptor] = None, slab_ptr: Optional[Descriptor] = None, sorted: bool = False) -> None:
    """out (G, C) = B^T values (P, C) from factors, deterministic: the bits of blend_transpose_fly; sorted: the factors are in the plan's order (internal)."""

def blend_transpose_fly(axes: Sequence[Axis], normalize: bool, points: Descriptor, values: Descriptor, out: Descriptor, threads: int = 0, perm: Optional[Descriptor] = None, slab_ptr: Optional[Descriptor] = None, sorted: bool = False) -> None:
    """out (G, C) = B^T values (P, C), weights on the fly, deterministic; sorted: the points are in the plan's order (internal)."""

def blend_transpose_stored(indices: Descriptor, weights: Descriptor, values: Descriptor, out: Descriptor, span: int, threads: int = 0, perm: Optional[Descriptor] = None, slab_ptr: Optional[Descriptor] = None, sorted: bool = False) -> None:
    """out (G, C) = B^T values (P, C) from stored (indices, weights), deterministic; sorted: the rows are in the plan's order (internal)."""

def blend_weights(axes: Sequence[Axis], normalize: bool, points: Descriptor, indices: Descriptor, weights: Descriptor, threads: int = 0) -> None:
    """Stored (indices, weights) of the points (internal)."""

def build_info() -> Dict[str, Any]: ...

def cuda_allow_tf32() -> bool: ...

def cuda_blend_fly(axes: Sequence[Axis], normalize: bool, points: Descriptor, grid: Descriptor, out: Descriptor, workspace: Optional[Descriptor] = None) -> None:
    """out (P, C) = B grid (G, C) on the device, weights on the fly (internal)."""

def cuda_blend_fly_workspace(axes: Sequence[Axis]) -> int:
    """Bytes of device workspace of an on-the-fly CUDA kernel (internal)."""

def cuda_blend_plan_fly(axes: Sequence[Axis], points: Descriptor, perm: Descriptor, offsets: Descriptor, workspace: Optional[Descriptor] = None) -> None:
    """Plan of the deterministic transpose from device points (internal)."""

def cuda_blend_plan_stored(indices: Descriptor, grid_size: int, perm: Descriptor, offsets: Descriptor, workspace: Optional[Descriptor] = None) -> None:
    """Plan of the deterministic transpose from stored device indices (internal)."""

def cuda_blend_plan_workspace(points: int, nnz: int, grid_size: int) -> int:
    """Bytes of device workspace of a CUDA transpose plan (internal)."""

def cuda_blend_stored(indices: Descriptor, weights: Descriptor, grid: Descriptor, out: Descriptor, workspace: Optional[Descriptor] = None) -> None:
    """out (P, C) = B grid (G, C) from stored (indices, weights) on the device (internal)."""

def cuda_blend_transpose_fly(axes: Sequence[Axis], normalize: bool, points: Descriptor, values: Descriptor, out: Descriptor, perm: Optional[Descriptor] = None, offsets: Optional[Descriptor] = None, workspace: Optional[Descriptor] = None) -> None:
    """out (G, C) = B^T values (P, C) on the device; with a plan (perm, offsets) deterministic, else atomic (internal)."""

def cuda_blend_transpose_stored(indices: Descriptor, weights: Descriptor, values: Descriptor, out: Descriptor, perm: Optional[Descriptor] = None, offsets: Optional[Descriptor] = None, workspace: Optional[Descriptor] = None) -> None:
    """out (G, C) = B^T values (P, C) from stored (indices, weights) on the device (internal)."""

def cuda_blend_weights(axes: Sequence[Axis], normalize: bool, points: Descriptor, indices: Descriptor, weights: Descriptor, workspace: Optional[Descriptor] = None) -> None:
    """Stored (indices, weights) of device points (internal)."""

def cuda_built() -> bool:
    """True when the CUDA kernels were compiled in."""

def cuda_device_count() -> int: ...

def set_num_threads(n: int) -> None:
    """Threads of kronpe's CPU kernels when a call gives none; 0: OpenMP's default (internal)."""

def get_num_threads() -> int:
    """Threads of kronpe's CPU kernels when a call gives none (internal)."""

def spline_normal(grid: Tuple[List[int], List[float], List[float]], points: Descriptor, values: Descriptor,
                  weights: Optional[Descriptor], stencil: Descriptor, rhs: Descriptor) -> None:
    """stencil (7^D, coefs) += B^T W B and rhs (coefs, C) += B^T W values of the points on the cubic B-spline grid
    (nint, lo, h) (internal; kronpe/spline.h)."""

def spline_values(grid: Tuple[List[int], List[float], List[float]], points: Descriptor, coef: Descriptor,
                  out: Descriptor) -> None:
    """out (P, C) = the spline with coefficients coef (coefs, C) at the points (internal)."""

def stencil_apply(shape: List[int], stencil: Descriptor, x: Descriptor, y: Descriptor,
                  b: Optional[Descriptor] = None) -> None:
    """y (N, C) = A x, or b - A x where b is given (b may be y), for the 7^D-point stencil A (7^D, N; float64 or
    float32) on a grid of `shape` (internal)."""

def spline_chebyshev(shape: List[int], stencil: Descriptor, dinv: Descriptor, b: Descriptor, degree: int,
                     theta: float, delta: float, zero_start: bool, residual: bool, x: Descriptor, res: Descriptor,
                     work: Descriptor) -> None:
    """x (N, C) after `degree` Chebyshev steps for A x = b on D^-1 A over [theta - delta, theta + delta] (A a
    float32 stencil, dinv (N,)), from x or zero; res = b - A x where residual; work (2, N, C) scratch (internal)."""

def spline_subdivide(coarse: Descriptor, fine: Descriptor) -> None:
    """fine (outer, 2 n - 3, inner) = the cubic B-spline coarse (outer, n, inner) on twice the intervals along the
    middle axis (internal)."""

def spline_restrict(fine: Descriptor, coarse: Descriptor) -> None:
    """coarse (outer, n, inner) = the transpose of spline_subdivide of fine (outer, 2 n - 3, inner) (internal)."""

def clear_caches() -> None:
    """Frees the solvers' kept work memory and forgets the calling thread's planned mode-n chains (internal:
    kronpe.clear_caches)."""

def cuda_embed_basis(x: Descriptor, out: Descriptor, kind: str, first_index: int, K_base: float, param: float, degree: int, seed: int) -> None:
    """The same on the device, on x's stream (internal)."""

def cuda_embed_fourier(x: Descriptor, out: Descriptor, omega: Descriptor, layout: str, include_input: bool, amplitude: float, workspace: Optional[Descriptor] = None) -> None:
    """The same on the device; omega stays a HOST array (uploaded on x's stream) (internal)."""

def cuda_embed_fourier_workspace(F: int) -> int:
    """Bytes of device workspace cuda_embed_fourier needs (internal)."""

def cuda_info(load_cublas: bool = False) -> Dict[str, Any]:
    """CUDA runtime, driver and cuBLAS versions (internal)."""

def cuda_multi_mode_product(src: Descriptor, matrices: Sequence[Descriptor], modes: Sequence[int], out: Descriptor, any_layout: bool = False, workspace: Optional[Descriptor] = None) -> List[int]:
    """out = src x_modes[0] matrices[0] ... on the device, enqueued on src's stream; returns the axis order written (internal)."""

def cuda_multi_mode_workspace(src: Descriptor, matrices: Sequence[Descriptor], modes: Sequence[int], any_layout: bool = False) -> int:
    """Bytes of device workspace cuda_multi_mode_product needs (internal)."""

def cuda_set_allow_tf32(allow: bool) -> None: ...

def cuda_set_cublas_paths(paths: Sequence[str]) -> None:
    """Candidate libcublas files, tried before the soname (internal)."""

def cuda_strided_copy(src: Descriptor, dst: Descriptor) -> None:
    """dst[...] = src[...] over a strided box on the device, on src's stream (internal)."""

def embed_basis(x: Descriptor, out: Descriptor, kind: str, first_index: int, K_base: float, param: float, degree: int, seed: int) -> None:
    """out (n, K) = Psi(x) of a shifted-basis / impulse / random embedder (internal)."""

def embed_fourier(x: Descriptor, out: Descriptor, omega: Descriptor, layout: str, include_input: bool, amplitude: float) -> None:
    """out (n, 2F [+1]) = Fourier features of x; omega: F float64 host values (internal)."""

def gemm(a: Descriptor, b: Descriptor, c: Descriptor, trans_a: bool = False, trans_b: bool = False, alpha: float = 1.0, beta: float = 0.0) -> None:
    """c = alpha op(a) op(b) + beta c, row-major host matrices (internal)."""

def packed_gemm(a: Descriptor, b: Descriptor, c: Descriptor, trans_a: bool = False, trans_b: bool = False, threads: int = 0) -> None:
    """c = op(a) op(b) with kronpe's packed AVX-512 or AVX2 GEMM, row-major host matrices (internal)."""

def packed_gemm_blocks(a: Descriptor, b: Descriptor, c: Descriptor, blocks: Descriptor, trans_a: bool = False,
                       trans_b: bool = False, threads: int = 0) -> None:
    """c[r0:r1] = op(a)[r0:r1, c0:c1] op(b)[c0:c1] for each row (r0, r1, c0, c1) of blocks (an
    (nblocks, 4) int64 table, row ranges in order): one team of single-threaded packed GEMMs
    (internal)."""

def invert_in_place(a: Descriptor) -> bool:
    """a (square, row-major host matrix) replaced by its inverse: blocked Gauss-Jordan with row
    pivoting; False when a pivot is exactly zero (internal)."""

def chain_gemm() -> str:
    """The GEMM the CPU chains run now: "packed" or "blas" (internal)."""

def mode_chain_program(shape: Sequence[int], strides: Sequence[int], modes: Sequence[int], out_rows: Sequence[int], elem_size: int = 4, any_layout: bool = False, model: str = "cpu") -> Tuple[List[tuple], int, List[int], int, int]:
    """The lowered program of a chain for an executor outside the core: (ops, workspace,
    out_order, in_size, out_size); model "cpu", "packed" or "library" (internal)."""

def multi_mode_product(src: Descriptor, matrices: Sequence[Descriptor], modes: Sequence[int], out: Descriptor, any_layout: bool = False) -> List[int]:
    """out = src x_modes[0] matrices[0] ... on the CPU. Returns the axis order in which out was written (C order unless any_layout) (internal, see kronpe.ops.multi_mode_product)."""

def set_blas(sgemm: int, dgemm: int) -> None:
    """Hand over the addresses of the Fortran BLAS sgemm and dgemm (internal)."""

def set_blas64(sgemm: int, dgemm: int) -> None:
    """Hand over the addresses of an ILP64 Fortran BLAS sgemm and dgemm (64-bit integers; internal)."""

def strided_copy(src: Descriptor, dst: Descriptor) -> None:
    """dst[...] = src[...] over a strided box (internal)."""

def thin_plate(x: Descriptor, mask: Descriptor, lam: float, out: Descriptor, mode: str = "apply", b: Optional[Descriptor] = None, reflect: bool = False, threads: int = 0, order: int = 2, weights: Optional[List[float]] = None, top: float = 1.0, tail: float = 0.0) -> None:
    """out = mask x + lam R x (apply) or b - (mask x + lam R x) (residual); R the thin-plate penalty, mirrored with
    reflect, or (sum_i w_i L_i)^order (order 3 or weights; mirrored only) (internal)."""

def thin_plate_diag(mask: Descriptor, lam: float, out: Descriptor, reflect: bool = False, threads: int = 0, order: int = 2, weights: Optional[List[float]] = None, top: float = 1.0, tail: float = 0.0) -> None:
    """out = diag(mask + lam R) (internal)."""

def thin_plate_cheb_start(x: Optional[Descriptor], b: Descriptor, mask: Descriptor, lam: float, theta: float, r: Descriptor, d: Descriptor, reflect: bool = False, threads: int = 0, order: int = 2, weights: Optional[List[float]] = None, top: float = 1.0, tail: float = 0.0) -> None:
    """r = (b - A x) / diag(A), d = r / theta: a Chebyshev smoother's start; x None: x = 0 (internal)."""

def thin_plate_cheb_step(d: Descriptor, r: Descriptor, x: Descriptor, mask: Descriptor, lam: float, c1: float, c2: float, d_out: Descriptor, reflect: bool = False, threads: int = 0, order: int = 2, weights: Optional[List[float]] = None, top: float = 1.0, tail: float = 0.0) -> None:
    """x += d, r -= (A d) / diag(A), d_out = c1 d + c2 r: a Chebyshev smoother's step (internal)."""

def grid_transfer(src: Descriptor, dst: Descriptor, axis: int, restrict: bool, add: bool = False, threads: int = 0) -> None:
    """dst = P^T src (restrict) or P src (dst += P src with add) along one axis, linear interpolation, coarse node j at fine node 2 j (internal)."""

def dot(a: Descriptor, b: Descriptor) -> float:
    """sum(a * b) over C-contiguous arrays of one shape and dtype, accumulated in double (internal)."""

def dots(arrays: List[Descriptor]) -> List[float]:
    """Every inner product of C-contiguous arrays of one size and dtype, [a_i . a_j] flat (c, c), as dot computes each (internal)."""

def gcv_scores(m: Descriptor, count: Descriptor, w: Descriptor, ridges: Descriptor, rss0: float, n: float, total: float) -> List[float]:
    """GCV scores at the ridges of a curve given by C-contiguous float64 m, count and w of one size (internal, kronpe.solvers.gcv; kronpe.reference.gcv_scores)."""

def mix_channels(inputs: List[Descriptor], v: Descriptor, outputs: List[Descriptor], lo: Optional[Descriptor] = None, hi: Optional[Descriptor] = None) -> int:
    """outputs[c] = sum_k v[k, c] inputs[k] (each optionally clipped to [lo[c], hi[c]]); returns how many values were outside (internal)."""

def masked_fill(s: Descriptor, mask: Descriptor, out: Descriptor, planar: bool = False) -> Tuple[List[float], List[float], int]:
    """out = s where mask (uint8 (n,)) else 0, s (n, C), out (n, C) or (C, n) with planar; returns (per-channel min, max over the observed
    values, how many of them are NaN or Inf) (internal)."""

def lattice_count(x: Descriptor, probe: int, rtol: float, tol: float) -> int:
    """n when every coordinate of x (float32 or float64 (P,), any stride) is a multiple k h of h = 1 / n, the smallest gap
    between distinct ones, 0 <= k <= n; else 0 (kronpe/masked.h; kronpe.reference.lattice_count) (internal)."""

def lattice_index(points: Descriptor, n: List[int], origin: List[float], scale: List[float],
                  nodes: Optional[List[Descriptor]], out: Descriptor) -> int:
    """out[p] = the C-order flat index of point p's nearest lattice node (kronpe/masked.h: node k of axis a at origin[a] + k / scale[a],
    n[a] nodes, clamped); with nodes, the first p whose coordinates are not exactly its nodes' values is returned (else P) (internal)."""

def lattice_sums(flat: Descriptor, values: Descriptor, counts: Descriptor, sums: Descriptor) -> None:
    """counts[g] = how many points have flat index g, sums[c, g] = the sum of their values[:, c] (kronpe/masked.h) (internal)."""


class ThinPlateHierarchy32:
    """The multigrid hierarchy of diag(m) + lam R on a float32 grid of 1 to 3 axes (kronpe/multigrid.h; internal:
    kronpe.solvers.multigrid.ThinPlateMG wraps it)."""

    def __init__(self, m: Descriptor, degree: int, lmax: float, alpha: float, coarsest: int, reflect: bool = False, threads: int = 0, order: int = 2, weights: Optional[List[float]] = None, top: float = 1.0, tail: float = 0.0) -> None: ...
    def set_lambda(self, lam: float) -> None: ...
    def set_reflect(self, reflect: bool) -> None:
        """The penalty's boundary on every level: mirrored (True) or natural (lam kept)."""
    def set_weights(self, weights: List[float]) -> None:
        """The Laplacian-power form's axis weights (lam kept)."""
    def set_chebyshev(self, lmax: float, alpha: float) -> None:
        """The smoother's interval [lmax / alpha, lmax]."""
    def set_predicted_stop(self, on: bool) -> None:
        """pcg's predicted stop on (the default) or off (kronpe/multigrid.h)."""
    def set_data_term(self, m: Descriptor) -> None:
        """A new data term on the same grid (lam kept)."""
    @property
    def lam(self) -> float: ...
    @property
    def shapes(self) -> List[List[int]]:
        """Every level's grid, padded to three axes, finest first."""
    def data_term(self, level: int) -> List[float]: ...
    def vcycle(self, b: Descriptor, x: Descriptor) -> None:
        """x = V b, one V-cycle from zero."""
    def fmg(self, b: Descriptor, x: Descriptor, cycles: int = 1) -> None:
        """x = the full multigrid approximation of A^-1 b."""
    def cycles(self, b: Descriptor, x: Descriptor, from_x: bool, count: int, omega: float = 1.0) -> None:
        """count V-cycles from x (from_x) or from fmg(b), in place, each over-relaxed by omega."""
    def cycles_from(self, b: Descriptor, start: Descriptor, x: Descriptor, count: int, omega: float = 1.0) -> None:
        """cycles from start into x (count >= 1), without copying start into x first."""
    def pcg(self, b: Descriptor, x: Descriptor, from_x: bool, tol: float, maxiter: int, scale: float = 0.0) -> Tuple[int, float]:
        """Multigrid-preconditioned CG from x (from_x) or from fmg(b): (iterations, ||z|| / scale)."""


class ThinPlateHierarchy64(ThinPlateHierarchy32):
    """The same on a float64 grid."""


def held_out_fill_sweep(m: Descriptor, y: Descriptor, hold: Descriptor, x_best: Descriptor, degree: int, lmax: float,
                        alpha: float, coarsest: int, threads: int, lams: List[float], ratio: float, flat: float, count: int,
                        omega: float, boundary_margin: float, higher: float, higher_margin: float
                        ) -> Tuple[ThinPlateHierarchy32, Dict[str, Any]]:
    """The held-out sweep over lambda with a diagonal data term m, the nodes hold left out (kronpe/multigrid.h; internal:
    kronpe.solvers.smooth): (the training term's hierarchy, a dict of the lambdas tried, their errors and the choices);
    the best fit written to x_best."""


class LeadSolve32:
    """The leading component of a fill at the interpolation limit, solved ahead of the sweep (kronpe/multigrid.h; internal:
    kronpe.solvers.smooth): stage 1 the mirrored thin-plate system from full multigrid, stage 2 the higher-order one from it."""

    def __init__(self, m: Descriptor, b: Descriptor, lam: float, degree: int, lmax: float, alpha: float, coarsest: int,
                 threads: int, tol: float, maxiter: int, higher: float) -> None: ...
    def start(self) -> None:
        """Both stages on a thread of its own."""
    def beside(self, fn: Callable[[], Tuple[Any, int]]) -> Any:
        """fn() on this thread (returning (result, stages wanted)) beside both stages on a second OpenMP thread: fn's result."""
    def finish(self, stages: int) -> None:
        """Waits for the started solve, or runs the first `stages` stages now."""
    def cancel(self) -> None: ...
    @property
    def stages_done(self) -> int: ...
    def hierarchy(self) -> ThinPlateHierarchy32: ...
    def solution(self, stage: int) -> Tuple[Any, int, float]:
        """(x padded to three axes, iterations, error estimate) of a stage."""
    def result(self, stage: int) -> Tuple[int, float]:
        """(iterations, error estimate) of a stage, without its solution."""


class LeadSolve64(LeadSolve32):
    """The same on a float64 grid."""


class CudaThinPlate32:
    """The thin-plate multigrid hierarchy of diag(m) + lam R on a CUDA device, float32, host arrays in and out
    (kronpe/cuda.h DeviceThinPlate; internal: tests and measurements). Raises RuntimeError in a module built
    without CUDA."""

    def __init__(self, device: int, m: Descriptor, reflect: bool, degree: int, lmax: float, alpha: float,
                 coarsest: int) -> None: ...
    @property
    def levels(self) -> int: ...
    def set_lambda(self, lam: float) -> None: ...
    def set_reflect(self, reflect: bool) -> None: ...
    def set_data_term(self, m: Descriptor) -> None: ...
    def apply(self, x: Descriptor, out: Descriptor, higher: float = 0.0) -> None:
        """out = A x (higher > 0: diag(m) + lam (R + higher L^3), mirrored)."""
    def vcycle(self, b: Descriptor, x: Descriptor) -> None: ...
    def fmg(self, b: Descriptor, x: Descriptor, cycles: int = 1) -> None: ...
    def cycles(self, b: Descriptor, x: Descriptor, from_x: bool, count: int, omega: float = 1.0) -> None: ...
    def pcg(self, b: Descriptor, x: Descriptor, from_x: bool, tol: float, maxiter: int, scale: float = 0.0,
            higher: float = 0.0) -> Tuple[int, float]:
        """PCG preconditioned by one V-cycle: (iterations, error estimate); x in/out."""


def cuda_multigrid_cache(release: bool = False) -> int:
    """Bytes of device memory the fills' multigrid keeps for the next fills; release: freed first (internal:
    kronpe.cuda.empty_cache)."""


def cuda_smooth_fill(device: int, m: Descriptor, planes: List[Descriptor], y: Descriptor, hold: Descriptor,
                     out: List[Descriptor], lams: List[float], ratio: float, flat: float, count: int, omega: float,
                     boundary_margin: float, higher: float, higher_margin: float, degree: int, lmax: float,
                     alpha: float, coarsest: int, lam_interpolating: float, tol: float, tol_interpolating: float,
                     maxiter: int, lead: bool) -> Dict[str, Any]:
    """The default fill of a diagonal data term on a CUDA device (kronpe/cuda.h smooth_fill; internal:
    kronpe.solvers.smooth): the held-out sweep, then every channel's PCG; host arrays, the solutions written into out.
    The sweep's dict with lam, iterations and errors."""


class _tuning:
    """kronpe._core._tuning, a submodule: the kernels' tuning hooks (team rules, vector paths, GEMM and planner
    choices, caches and counters; internal: for kronpe's solvers, tests, benches and tools; not part of kronpe's API)."""

    @staticmethod
    def kernel_threads() -> int:
        """Threads a kernel's team takes now when its call gives none: get_num_threads(), fewer while the cores are
        marked busy (internal; kronpe/threads.h)."""

    @staticmethod
    def busy_cores() -> Tuple[bool, int]:
        """(whether the cores are marked busy now, how many times they were marked): kronpe/threads.h's back-off
        (the default teams halved by every late team) while another library's threads hold the cores (internal)."""

    @staticmethod
    def team_is_judged(cold: bool, late: bool, oversubscribed: int) -> bool:
        """Whether a team's lateness counts toward marking the cores busy: every warm team; a cold one
        (launched after its threads went to sleep) only when late with more tasks runnable than CPUs
        (internal; kronpe/threads.h)."""

    @staticmethod
    def set_nodes_per_extra_thread(nodes: int) -> int:
        """The smoothing kernels' team rule beyond two threads, one thread per `nodes` (default 2^16, at least
        2^13); returns the previous value (internal: for measuring team sizes)."""

    @staticmethod
    def work_cache(clear: bool = False) -> int:
        """The bytes of solver work memory kept for the next fit; clear=True frees them first (internal)."""

    @staticmethod
    def blend_set_simd(level: int) -> int:
        """The blend kernels' vector paths: 2 AVX-512 (uniform axes' cell search, gathers of 2-4 channels), 1 AVX2
        (the cell search), 0 portable, at most what the CPU has (the default); returns the previous level (internal:
        tests compare every level's bits)."""

    @staticmethod
    def blas_ready() -> bool:
        """Whether set_blas or set_blas64 was called."""

    @staticmethod
    def blas_int_bits() -> int:
        """64 (ILP64 BLAS), 32 (LP64) or 0 (none set): the integers of the BLAS in use."""

    @staticmethod
    def packed_gemm_supported() -> bool:
        """Whether this build and CPU run kronpe's packed GEMM (AVX-512, or AVX2 and FMA)."""

    @staticmethod
    def set_chain_gemm(which: str) -> None:
        """The GEMM of the CPU chains: "auto", "blas" or "packed" (internal)."""

    @staticmethod
    def set_in_place_panels(n: int) -> None:
        """Up to how many B panels the packed GEMM reads a column-contiguous A in place (n >= 0),
        or -1: each kernel's own limit (internal: measurements)."""

    @staticmethod
    def in_place_panels() -> int:
        """The in-place panels setting (-1: the kernels' own)."""

    @staticmethod
    def mode_cost_model() -> Dict[str, Any]:
        """The CPU planner's cost model in force, for the GEMM the chains run ("gemm": "packed" or
        "blas"; internal)."""

    @staticmethod
    def set_mode_cost_model(rate_f32: float, half: float, call: float, copy_f32: float) -> None:
        """Replace the planner's cost model (internal, for tuning)."""

    @staticmethod
    def set_mode_layout_penalty(penalty: Sequence[float]) -> None:
        """Replace the CPU planner's layout penalties (internal; kronpe.ops measures them)."""

    @staticmethod
    def set_mode_layout_measured(on: bool) -> None:
        """Measure the CPU planner's GEMM layouts per shape class (on) or use fixed penalties (internal; kronpe.ops turns it on)."""

    @staticmethod
    def mode_layout_table() -> List[List[float]]:
        """The layout measurements: (m, k, rest, elem_size, FrontKeep, FrontRotate, BackKeep, BackRotate time / fastest) per shape class (internal)."""

    @staticmethod
    def clear_mode_layout_table() -> None:
        """Forget the layout measurements (internal)."""

    @staticmethod
    def mode_chain_plan(shape: Sequence[int], strides: Sequence[int], modes: Sequence[int], out_rows: Sequence[int], elem_size: int = 4, any_layout: bool = False) -> str:
        """The planned steps of a mode-product chain, as text (internal)."""
