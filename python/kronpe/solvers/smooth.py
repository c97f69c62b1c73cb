"""The default fits of grids with holes and of scattered samples (MATH.md 3.6): a smoothness
penalty on the model's values at grid resolution, solved by multigrid-preconditioned CG.

Used by ``fit_grid(signal, mask=)`` and ``fit_points(points, values)`` when neither embedders
nor a penalty is given. Decisions (documented once, here):

- **Model.** The unknowns are the model's values on a grid (the identity embedding: on a grid
  with holes, ``Triangle(N_i)`` at the default coordinates, whose matrix at the samples is the
  identity; at scattered points, the virtual grid's values blended multilinearly). The data term
  is then ``w^T (B^T B) w``, a diagonal (the mask, or points on the nodes) or, off the nodes,
  B^T (B w) through the stored blending matrix (``DataTerm``).
- **Penalty**: on 1 and 2 axes the thin-plate form ``DifferencePenalty(2, mixed=True)``; on 3
  axes (ORDER) the third-order form mirrored at the ends with per-axis weights,
  ``DifferencePenalty(3, mixed=True, boundary="reflect", weights=w)`` = (sum_i w_i L_i)^3.
  Measured on astronaut 512^2 RGB with 25% random pixels (PSNR on the other 75%, best lambda of
  each): second differences along the axes 26.53 dB, thin-plate 26.91 dB; order 3 loses on
  photographs (best lambda of each, 25% / 50% kept: camera 26.91 / 28.34 dB at order 2 against
  26.74 / 28.20 at order 3, coffee 25.78 / 27.01 against 25.58 / 26.88, astronaut 26.94 / 29.305
  against 26.76 / 29.312) and wins on the benchmark's 32 x 64 x 64 video (25% of its voxels,
  clipped: order 2 27.44 dB, order 3 27.94, order 3 with the time axis weighted 0.6 28.19; RBF
  thin-plate 27.95).
- **Axis weights** (order 3), held out after lambda: from all 1, each axis's weight times
  WEIGHT_STEP = 0.6 and 1 / 0.6 (six candidates), WEIGHT_ITERATIONS = 4 CG iterations each from
  the sweep's best fit; when the best beats all 1 by more than WEIGHT_MARGIN = 1%, one more step
  the same way (``info["weights"]``, ``info["weights_holdout_errors"]``). On the video the
  held-out errors ranked the candidates as the held-out PSNR does (0.6 on the time axis; 2
  iterations each picked 0.36, 0.17 dB worse). Only weight ratios matter at the interpolation
  limit, where the video is. With an explicit ridge the weights are all 1.
- **Boundary** (order 2: natural or mirrored, ``DifferencePenalty(..., boundary=)``; order 3:
  mirrored, the only one its multigrid kernels have), held out with lambda: the sweep's best
  fit (natural boundary) against its own step mirrored, from the fit that step started from and
  at its lambda (one V-cycle or PCG iteration; the mirrored fit goes on as the best when it
  wins). Until the twelfth session the test was one more step from the best fit with each
  boundary (two): the same choices on the twelve photograph rows and the six off-grid ones,
  PSNR within 0.0002 dB, fills 2-7% faster (interleaved in one process). The natural one wins
  only when its held-out error is lower by more than BOUNDARY_MARGIN = 1% (``info["boundary"]``;
  closer than that the two are a coin toss of the held-out noise, and the mirrored boundary is
  inpaint_biharmonic's: a 128^2 crop of camera, 50% missing, chose natural by 0.008% and lost
  0.005 dB to it; mirrored it wins by 0.004). Neither wins everywhere: with 50% missing pixels the natural
  boundary lost 0.3 dB in the outermost pixel row to inpaint_biharmonic (rocket; 0.002-0.008 dB
  over whole photographs), while the mirrored boundary's zero slope at the ends cost a smooth
  synthetic volume 3.6x its RMS error (0.0248 vs 0.0069). Mirrored, the lambda -> 0 limit is
  inpaint_biharmonic's solution (28.2264 dB both on rocket, 29.3063 both on astronaut); with an
  explicit ridge there is no held-out choice and the natural boundary is used.
- **Higher order for the leading component** (``HigherPenalty``): at the interpolation limit of a
  2-D grid with the mirrored boundary chosen, the leading principal component may take R = L^2 +
  HIGHER L^3 (HIGHER = 0.1; L the Neumann Laplacian: the thin-plate form plus a tenth of the
  third-order one), held out like the boundary: one step of that system from the fit x the
  boundary test stepped from, x + SWEEP_OMEGA V (b - A_h x), V a V-cycle of the thin-plate hierarchy (mirrored, at the best
  lambda: no hierarchy of its own is built for the test), taken when its held-out error is lower
  by more than HIGHER_MARGIN = 0.2% (``info["higher_holdout_errors"]``, ``info["lead_penalty"]``).
  When it is taken, the final solve of that component is PCG on diag(m) + lam R_h preconditioned
  by the thin-plate hierarchy's V-cycle, as in the test (R_h's own hierarchy, built for it until
  the eleventh session, cost a build of 0.45 ms at 512^2 and V-cycles 2-2.5x the thin-plate's;
  with the thin-plate V-cycle the leading component takes one PCG iteration more, 5 -> 6 on
  masked astronaut and the crop, and the fill's time on one thread fell 9-10%: astronaut 54.5 ->
  49.6 ms, crop 3.45 -> 3.11, interleaved in one process; PSNR -0.0021 dB on the masked crop,
  +0.0001 / +0.0006 on astronaut masked / scattered, the same elsewhere); the other
  components keep the thin-plate form (solving them with it too changed the PSNR by -0.002 dB on
  astronaut). At the limit the thin-plate fit is inpaint_biharmonic's solution, so a tie is the
  best it can do; exact sparse solves at the limit (PSNR with clipping, thin-plate -> with L^3 / 10)
  measured astronaut 29.3063 -> 29.3617 dB with 50% missing and 26.9444 -> 26.9514 with 25% kept,
  camera 128^2 crop 27.6650 -> 27.6952, and losses on every other photograph (camera, coffee,
  chelsea, rocket: -0.008 to -0.12 dB; L^3 / 3.3 gained more on astronaut with 50% missing but
  lost 0.02 dB with 25% kept; tension, + tau L, lost on astronaut). The held-out test (error
  ratio, with L^3 / thin-plate) took it on astronaut (0.990, 0.995) and the crop's 50% task
  (0.986) and left it on chelsea (1.0005, 1.0011) and the crop's 25% task (1.005): every one as
  the exact solves rank them (that test ran one over-relaxed V-cycle of R_h's own hierarchy; the
  thin-plate V-cycle on R_h's residual separates them further, 0.987, 0.992, 0.982 / 1.0028,
  1.0023, 1.0053, with the same choices and PSNR on all twelve photograph rows, and saves the
  hierarchy's build: wall time, two threads, chelsea masked 11.2 -> 10.7 ms, astronaut 24.2 ->
  23.6, the 128^2 crop 2.23 -> 2.15). Defaults end to end: masked astronaut 29.3035 -> 29.3593 dB,
  scattered 26.9414 -> 26.9509, masked crop 27.6677 -> 27.7029; wall time (two threads)
  astronaut masked 18.6 -> 23.2 ms, scattered 25.3 -> 31.3, chelsea masked (the test alone)
  9.7 -> 10.6 ms. Its kernels: the power form as a polynomial, top L_w^q + tail L_w^(q - 1)
  (kronpe/smooth.h), one V-cycle 1.6x the thin-plate's at 512^2 with the same smoother. Off the
  nodes (finite lambda on every photograph) it is not tried: forced on the leading component
  there it moved the off-grid PSNR by +0.036 dB (astronaut) to -0.042 (rocket), and the held-out
  error of one CG iteration ranked it against that on four of six photographs.
- **Grid for scattered points** (``lattice_grid``): when every axis's coordinates are multiples of
  one spacing h (pixels, voxels), the nodes are that lattice over [0, 1] (every point on a node:
  B^T B is diagonal); otherwise NODES_PER_SPACING nodes per mean sample spacing along each axis
  (the values are blended multilinearly to the points: the finer grid, the smaller that
  representation's error). Measured with as many random off-grid points as 25% of the pixels
  (PSNR at every pixel centre): 2 / 3 / 4 nodes per spacing gave camera 128^2 25.38 / 25.72 /
  25.75 dB (RBF thin-plate 25.62) and chelsea 31.51 / 31.58 / 31.65 dB (RBF 31.60) at 0.16 /
  0.43 / 1.08 s: 4 in 1-D and 2-D; 2 in 3-D (8 nodes per sample already).
- **Solver**: conjugate gradients preconditioned by a multigrid V-cycle (:mod:`.multigrid`:
  rediscretised coarse grids, Chebyshev smoothing, compiled thin-plate kernels) on grids of 1
  to 3 axes; on more axes, ``(rho I + lambda R)^-1`` in the orthonormal DCT-II basis (Garcia's
  smoothn). Stopping: the preconditioned residual, an estimate of the error, below TOL = 1e-3
  of the solution's norm (on the photographs the held-out PSNR then lies within 0.01 dB of the
  converged one; the normal equations' residual is no guide for small lambda); 3e-4
  (TOL_INTERPOLATING) at the interpolation limit, which converges slowest and whose PSNR
  follows the solve most closely (astronaut with 50% missing: 29.282 dB at 1e-3, 29.303 at 3e-4,
  29.305 at 1e-4 for 1.8x the time). Known weakness: with points off the nodes the V-cycle sees
  only the lumped data term, so the estimate is optimistic where lambda is tiny and nodes
  outnumber points (a smooth 3-D test function: RMS 0.02 at tol 1e-3 against 0.0003 converged,
  65 iterations to 1e-4, 200 to 1e-5). With a diagonal data term PCG stops on a predicted
  estimate (multigrid.py, "Predicted stop": the V-cycle that would only measure the last update
  is skipped; the same iterations and bits on every component of the twelve photograph fills,
  fills 3-9% faster); off the nodes, where the estimates wander, it measures every one.
- **Smoother** (multigrid.py's Chebyshev): with a diagonal data term (grids with holes, points on
  a lattice) and the thin-plate penalty, degree 2 over [LMAX / 4, LMAX] (DIAGONAL_SMOOTHER), not
  the hierarchy's default degree 3 over [LMAX / 8, LMAX]: the same iteration counts mostly, a
  quarter less work per V-cycle. Measured on five photographs, one thread (CPU ms, degree 3 -> 2):
  masked astronaut 63 -> 47, coffee 44 -> 36, rocket 55 -> 49, camera 32 -> 30, chelsea 28 ->
  25, scattered astronaut 71 -> 64; held-out PSNR within -0.02 / +0.02 dB (rocket scattered
  -0.064, still 0.12 over the best peer; chelsea masked 32.6248 -> 32.6304, over
  inpaint_biharmonic's 32.6265). Off the nodes (the lumped V-cycle) degree 2 moved PSNR by up to
  -1.0 dB (astronaut off-grid): those keep degree 3.
- **Start**: full multigrid (:meth:`.multigrid.ThinPlateMG.fmg`) on grids of 1 to 3 axes with a
  diagonal data term; otherwise the normalised convolution, Gaussian blur (sigma = 1 node) of
  B^T y divided by the blur of B^T 1 (where that is tiny, the data's mean). With a diagonal
  data term and lambda held out, the leading principal component (the only channel of a
  grayscale image) starts from the sweep's best fit instead, which fitted that very component
  without its held-out nodes, at the chosen lambda or the smallest tried: no full-multigrid pass
  and one PCG iteration fewer on the grayscale rows. Interleaved in one process against full
  multigrid: masked camera 128^2 2.89 -> 2.59 ms, camera 512^2 18.9 -> 15.9, the 32 x 64 x 64
  volume 148 -> 135, masked astronaut 31.0 -> 27.9, chelsea 22.0 -> 21.1, rocket 21.7 -> 20.9,
  scattered rocket 29.9 -> 28.2 (0.90-0.99 of the time on the other rows). Held-out PSNR
  -0.017 to +0.013 dB: the truncated solves end nearer the converged fit (masked coffee 27.0157
  -> 26.9990 against 26.991 converged, still 0.10 dB over inpaint_biharmonic; chelsea masked
  32.6304 -> 32.6343, scattered 30.7491 -> 30.7620).
- **Speculation** (``LeadSolve``, kronpe/multigrid.h): on grids of 1 or 2 axes of at most
  SPECULATE_MAX_NODES nodes with a diagonal data term, the leading component's final solve at the
  interpolation limit (lambda = rho 10^-INTERPOLATION_EXPONENT, the mirrored thin-plate penalty:
  PCG from full multigrid to TOL_INTERPOLATING; on 2 axes then the higher-order system from that
  solution) runs beside the held-out sweep, each on one thread (libgomp's second thread: a thread
  of our own had to share its core with that one, spinning after the last parallel region: 2.3 ->
  2.9 ms), and is used when the sweep chooses that limit with the mirrored boundary (the crops and
  most photographs of the benchmark); on one thread (``kronpe.set_num_threads(1)``, busy cores) it
  runs after the sweep, only when wanted: the same bits either way. On a 128^2 grid two threads
  split a V-cycle no better than one (above), two tasks side by side do not slow each other
  (V-cycles of two hierarchies at once: 75 us each, alone 75 us). Starting the component from full
  multigrid instead of the sweep's fit costs an iteration or two, on the other thread; on one
  thread it is that much slower (camera 128^2, one thread: 2.57 -> 2.77 ms masked, 2.52 -> 2.60
  as points), the price of one result for any thread count. The held-out sweep itself
  (``_core.held_out_fill_sweep``, COMPILED_SWEEP) is one compiled call for such a data term (the
  training term, its hierarchy, the steps): the same steps and bits as the Python loop of
  ``sweep_ridges`` and the tests after it, whose per-step calls and set-up took a fifth of a
  128^2 fill. Interleaved in one process (camera 128^2, fill and predict; old / compiled sweep /
  speculation / both): 50% missing 2.31 / 2.15 / 1.78 / 1.58 ms (1.42-1.47 with the set-up
  compiled too and the later trims; 1.3-1.4 with the smoother's eight-row steps on one thread,
  kronpe/smooth.h), 25% as points 2.39 / 2.25 / 1.83 / 1.71 ms (1.65). Both branches then take about
  a millisecond (the sweep 1.15-1.2, the two stages 0.95-1.0): a faster sweep alone gains little
  (its post-smoothing cut to degree 1 left the crops' times as they were, and changed camera's
  choices at 512^2). Held-out PSNR: masked crop 27.7029 -> 27.7003 dB,
  scattered crop 24.9089 -> 24.9024 (the truncated solves land elsewhere: converged, tol 1e-6,
  27.6952 and 24.8923 dB against inpaint_biharmonic's 27.6650 and 24.8974: at the limit the fit is
  that solution, a tie); larger grids do not speculate (their kernels use two threads: masked,
  interleaved, speculating against not, camera 256^2 5.10 / 5.22 ms and -0.0017 dB, chelsea 451 x
  300 17.5 / 15.3 ms and -0.0039 dB, camera 512^2, which does not choose the limit, 21.5 / 11.6 ms:
  its sweep on one thread). In the host's slow two-thread state (threads.h) the crops' fills on
  two threads took 3.6 ms without speculating, 1.9 with it. Larger grids speculate with
  2 SPECULATE_TEAM threads or more (many-core hosts) and the cores not busy: the solve on a thread
  of its own (``LeadSolve.start``), each side's kernels on half of the threads. On a 16-core H200
  machine (Xeon, Firecracker; ``tools/gpu_host_diag.py lead``, 25% of the 512^2 astronaut as
  points, medians, ms) beside / without: 49.4 / 64.8 at 8 threads, 58.1 / 68.0 at 16 (the sweep
  14.3 and the two stages 13.9 alone at teams of 4, 15.0 both at once: ``spec``). Such fills start
  the leading component from full multigrid, not from the sweep's fit, so they differ from the
  fills on fewer threads within the solver's tolerance (held-out PSNR, here with 8 threads forced:
  astronaut points 26.9572 -> 26.9569 dB, masked 29.3622 -> 29.3603, chelsea points 30.7625 ->
  30.7491, masked 32.6345 -> 32.6304); on fewer than 2 SPECULATE_TEAM threads nothing changes.
- **Channels** are solved one after the other (contiguous grids: the kernels' rows are
  streams), all with the one lambda and one multigrid hierarchy, in the orthonormal basis of
  their second moments (``principal_basis``; the solution is the same, the basis is orthonormal
  and every channel sees the same operator), strongest first; the others stop when their error
  estimate falls below TOL times the strongest one's norm (an absolute accuracy, as the PSNR
  of the sum measures it): on RGB photographs the weak components need one or two iterations.
- **On a GPU** (``fit(..., device=)``: ``fit_points`` of CUDA arrays on a lattice, ``fit_grid(mask=)``
  of a CUDA signal): with lambda held out on a diagonal data term of 1 or 2 axes, the sweep and
  every component's PCG run on that device (``kronpe.cuda``'s DeviceThinPlate: the same hierarchy,
  smoother, V-cycles, full multigrid and PCG, kernels of one thread per node with the penalty from
  per-axis band tables; the sweep's decisions are the host's own code, kronpe/sweep.h). The steps
  are those of the host's fill without speculation (the first component's final solve from the
  sweep's fit, with the higher-order penalty where the sweep took it); the held-out set, the
  principal basis, the mixing and the clip stay on the host (a few passes over the grid). The
  device's sums run in another order, so values agree with the host's to rounding and a choice
  between two lambdas whose held-out errors tie may differ. Other fits (explicit ridge, points
  off the nodes, 3 axes) solve on the host. The device arrays of a fill are kept for the next
  fill of those sizes (``kronpe.cuda.empty_cache()`` frees them; at most 1 GiB).
- **Precision**: float32 vectors and products (the photographs' 8 bits need no more), float64
  dot products and coarsest-grid factorisation.
- **Choosing lambda** (``ridge=None``): held out on the whole grid. 10% of the nodes with data
  are left out; the channels' leading principal component (of their second moments, the final
  solve's first component; the leading component of their covariance where the sum of the
  channels cancels them, ``_selection_signal``) is fitted to the rest for lambda = rho 10^-k,
  k = 0, 0.5, ..., 4, largest first, each fit ONE step warm-started from the last
  (SWEEP_MAXITER; the ranking of the lambdas settles long before the solves converge: with up to
  four iterations each the choice was the same on five photographs): with a diagonal data term
  and the thin-plate penalty one V-cycle from the last fit, over-relaxed by SWEEP_OMEGA = 1.3
  (``ThinPlateMG.cycles``: no residual, operator or vector passes of its own; one thread, CPU ms
  per fill: masked astronaut 56 -> 50, chelsea 27 -> 25, scattered chelsea 28 -> 23), the first
  fit (the largest lambda) full multigrid alone, without the V-cycle after it (a V-cycle fewer per
  sweep: masked camera 128^2, alternating processes, 1.32-1.35 -> 1.25 ms; held-out PSNR of the
  twelve photograph rows -0.0002 to +0.0022 dB, the same lambdas but for the parabolic step's
  (camera 512^2, 25% as points: 10^-1.55 -> 10^-1.62 rho); on a smooth 26 x 31 test surface with
  half its nodes it chose 10^-2.5 rho instead of the interpolation limit, 2.68e-3 against 2.98e-3
  RMS on the missing nodes), else one
  preconditioned CG iteration (also with SWEEP_OMEGA = None). The truncated fits are part of the
  choice: with omega = 1 the lambdas chosen were smaller (scattered coffee 25.79 -> 25.74 dB,
  chelsea 30.749 -> 30.743, masked camera 28.341 -> 28.330); 1.3 chose as CG did on 10 of the 12
  photograph tasks on nodes and better on two (scattered chelsea 30.749 -> 30.751 dB, rocket
  26.899 -> 26.961), 1.6 lost masked chelsea (32.617 dB, under inpaint_biharmonic's 32.627); the
  order-3 volume keeps CG (its held-out axis weights chose 0.36 instead of 0.6 from V-cycles:
  28.04 against 28.20 dB). The sweep runs until the
  held-out error has risen twice or fallen by less than SWEEP_FLAT = 0.3% twice (0.6% chose the
  same on six photographs, both tasks, but sent four off-grid fits to the interpolation limit: up
  to 2.5 dB worse and 20x slower); with the V-cycle steps, by less than SWEEP_FLAT_NODES = 1% twice
  (the same PSNR on the twelve photograph rows on nodes but scattered chelsea, 30.7508 -> 30.7491 dB,
  still over its peers; one or two steps fewer where the samples want interpolating: CPU per fill
  on one thread, masked chelsea 16.8 -> 15.9 ms, astronaut 31.7 -> 31.0); one parabolic
  step in log lambda refines the best. When the best is the smallest lambda tried (the error
  still falling), the samples want interpolating: lambda = rho 10^-6 (INTERPOLATION_EXPONENT;
  astronaut, whose held-out error falls down to k = 4 and whose PSNR does to k = 6). Measured on
  five photographs with 25% random pixels, the chosen lambda's PSNR lies within 0.02 dB of the
  best of the grid k = 0, 1, ..., 4 (the earlier choice on a central 96^2 window missed by up to
  0.3 dB: a window is not the whole image). Cost: about one V-cycle per lambda tried.
- **Clipped to the samples' range**: the grid values are clipped, channel by channel, to the
  [min, max] of the samples (``info["clipped"]``: the fraction of values that were outside).
  The thin-plate fit overshoots next to edges; the truth of an image lies within its samples'
  range far more often than not. Measured on five photographs with 25% random pixels: astronaut
  26.914 -> 26.946 dB (inpaint_biharmonic, which clips the same way, 26.944), camera +0.004,
  coffee +0.002, chelsea and rocket +0.000/+0.001. Predictions blend clipped values with convex
  weights, so they lie in the range too.
- **No BLAS/LAPACK** in the solve (dot products and channel mixing in compiled or NumPy loops,
  the coarsest factorisation in the C++ hierarchy): on a busy machine OpenBLAS's threads spin
  against the kernels (a 176^2 Cholesky factorisation took 70 ms there and slowed every kernel
  after it).
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import _caches
from .._adapters import validate as _validate
from .krylov import SeparablePreconditioner, pcg, sweep_ridges
from .. import _core
from .multigrid import COARSEST, ThinPlateMG, _dot, chebyshev_lmax, thin_plate_apply
from .penalty import DifferencePenalty

Array = np.ndarray
PENALTY = DifferencePenalty(2, mixed=True)
# default_penalty's thin-plate forms (natural, mirrored): made once, never changed
_THIN_PLATE = (PENALTY, DifferencePenalty(2, mixed=True, boundary="reflect"))
BOUNDARIES = ("natural", "reflect")
TOL = 1e-3
MG_MAX_AXES = 3
EXPONENTS = (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0)
SWEEP_TOL = 0.0
SWEEP_MAXITER = 1
SWEEP_FLAT = 3e-3
SWEEP_OMEGA = 1.3
SWEEP_FLAT_NODES = 1e-2
INTERPOLATION_EXPONENT = 6.0
TOL_INTERPOLATING = 3e-4
HIERARCHY_KEY = "_hierarchy"
MIN_HOLDOUT = 20
FALLBACK_EXPONENT = 2.0
HOLDOUT_FRACTION = 0.1
HOLDOUT_SEED = 0
SELECTION_SUM_SHARE = 0.5
BOUNDARY_MARGIN = 0.01
START_SIGMA = 1.0
LATTICE_RTOL = 1e-6
LATTICE_TOL = 1e-6
LATTICE_MAX_NODES = 1 << 24  # per axis: a finer "lattice" (coordinates 1e-7 apart) takes the density grid
LATTICE_PROBE = 512
NODES_PER_SPACING = {1: 4.0, 2: 4.0, 3: 2.0}
ORDER = {1: 2, 2: 2, 3: 3}
DIAGONAL_SMOOTHER = (2, 4.0)
WEIGHT_STEP = 0.6
WEIGHT_ITERATIONS = 4
WEIGHT_MARGIN = 0.01
HIGHER = 0.1
HIGHER_MARGIN = 2e-3
HIGHER_KEY = "_higher"
SWEEP_FIT_KEY = "_sweep_fit"
SPECULATE_MAX_NODES = 1 << 15
SPECULATE_TEAM = 4
COMPILED_SWEEP = True


class DataTerm:
    """B^T B on the grid (N..., C): a diagonal ``diag`` (N...) (a mask, points on the nodes), or
    the stored blending matrix ``blend`` itself (a kronpe BlendingMatrix B, (P, G)): B^T (B W),
    two passes over the P x 2^D stored weights instead of one over the 3^D G entries of B^T B as a
    sparse matrix (0.9 against 1.9 ms for 65k points on a 1026^2 grid, one thread)."""

    def __init__(self, shape: Sequence[int], diag: Optional[Array] = None, blend=None, total: Optional[int] = None):
        self.shape = tuple(shape)
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
        return self.blend.rmatvec(self.blend.matvec(flat)).astype(W.dtype, copy=False).reshape(W.shape)

    def add_to(self, v: Array, out: Array) -> Array:
        """out += (B^T B) v for one plane v (N...) float32, out float32 C-contiguous of its size;
        off the nodes through the blending matrix's unchecked products into buffers kept between
        calls (CG's operator: the checks and fresh arrays of matvec / rmatvec took a tenth of an
        off-grid fit). Returns out."""
        if self.blend is None:
            out += self.diag * v
            return out
        if self._work is None:
            self._work = (np.empty((self.blend.shape[0], 1), np.float32), np.empty((self.blend.grid_size, 1), np.float32))
        at_points, on_grid = self._work
        self.blend._gather(np.ascontiguousarray(v, np.float32).reshape(-1, 1), at_points)
        self.blend._scatter(at_points, on_grid)
        out.reshape(-1)[...] += on_grid.reshape(-1)
        return out

    def lumped(self) -> Array:
        """The row sums of B^T B (i.e. B^T 1; the diagonal itself when diagonal), float32 (N...):
        the multigrid hierarchy's diagonal."""
        if self.blend is None:
            return self.diag
        ones = np.ones(self.blend.shape[0], np.float32)
        return np.asarray(self.blend.rmatvec(ones), np.float32).reshape(self.shape)


def lattice_grid(points: Array) -> Optional[List[Array]]:
    """Per-axis nodes k h over [0, 1] when every axis's coordinates are multiples of one h with
    1 / h an integer (module docstring), else None. h is the smallest gap between an axis's
    distinct coordinates; it is first read off an evenly strided subset of LATTICE_PROBE points
    and kept when every coordinate is a multiple of it and no two distinct coordinates round to
    the same multiple (then no gap of the whole set is smaller: the same h as from all of them),
    else found from all of them (sorting 65k coordinates took 2.6 ms per axis). One compiled call
    per axis (``_core.lattice_count``; its NumPy reference ``kronpe.reference.lattice_count``: the
    dozen NumPy passes it replaced took 0.1 ms of a 128^2 fill of 4k points)."""
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
    whose rows are then unit vectors, as one compiled scatter-add in float32 (building B took 5 ms
    for 65k points; NumPy's bincounts in float64 1.7 ms for 65k RGB samples, the compiled pass
    0.2; the same sums for up to two samples per node)."""
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
    """The default penalty of a grid of ``ndim`` axes (module docstring): the thin-plate form with
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


def _mg_penalty(penalty) -> Dict[str, Any]:
    """The multigrid kernels' arguments of a default penalty (or a HigherPenalty)."""
    if isinstance(penalty, HigherPenalty):
        return dict(reflect=True, order=3, weights=None, top=penalty.higher, tail=1.0)
    return dict(reflect=penalty.reflect, order=penalty.order, weights=penalty.weights)


def _as_planes(rhs) -> List[Array]:
    """A right-hand side as C contiguous float32 planes: a list of them as it is, or (N..., C)."""
    if isinstance(rhs, (list, tuple)):
        return [np.ascontiguousarray(p, dtype=np.float32) for p in rhs]
    return _planes(np.asarray(rhs, np.float32))


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
    (channel by channel, before the channels are interleaved: the clip of the interleaved array
    and its count took 7 ms at 512^2 RGB). Returns (W, iterations, per-channel stopping measure,
    the fraction of values clipped). ``lead``: the penalty (a ``HigherPenalty``) of the leading
    principal component's system, whose PCG ``mg`` (the thin-plate hierarchy) preconditions.
    ``moments``: the channels' ``_moments`` when the caller has them (``rhs`` as planes).
    ``lead_start``: the leading principal component's start (on grids of 1 to 3 axes; instead of
    ``x0``'s or full multigrid). ``basis``: the channels' ``principal_basis`` when the caller has it;
    ``mixed``: the right-hand side in that basis (``_mix_planes``) when the caller has it;
    ``lead_solution``: the leading component's (solution, iterations, error estimate), solved
    already (``LeadSolve``)."""
    D = len(data.shape)
    if D > MG_MAX_AXES:
        M = SeparablePreconditioner(None, data.rho, lam, penalty, data.shape)
        rhs = np.stack(rhs, -1) if isinstance(rhs, (list, tuple)) else rhs
        W, its, rels = pcg(lambda w: data(w) + np.float32(lam) * penalty.apply(w, D), M, rhs, x0, tol, maxiter)
        if value_range is None:
            return W, its, rels, 0.0
        return W, its, rels, _unmix(_planes(W), np.eye(W.shape[-1], dtype=np.float32), W, value_range)
    operator = _operator(data, lam, penalty)
    # the leading component's own penalty: its operator, preconditioned by the same hierarchy
    lead_operator = operator if lead is None or lead_solution is not None else _operator(data, lam, lead, always=True)
    # channels in their principal basis (module docstring), the strongest first: its norm sets
    # the error scale of the others
    planes = _as_planes(rhs)
    C = len(planes)
    V = principal_basis(planes, moments) if basis is None else basis
    b = _mix_planes(planes, V) if mixed is None else mixed
    start_ = None if x0 is None else _mix_planes(_planes(x0), V)
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
            scale = max(float(np.sqrt(_dot(w, w))), 1e-30)
        its = max(its, it)
        rels.append(rel)
    if C == 1 and value_range is None:  # (the sweep's fits) W itself, no copy
        return W[0][..., None], its, np.array(rels), 0.0
    out = np.empty(planes[0].shape + (C,), np.float32)
    return out, its, np.array(rels), _unmix(W, V.T, out, value_range)


def _operator(data: DataTerm, lam: float, penalty, always: bool = False) -> Optional[Callable[[Array], Array]]:
    """CG's operator B^T B v + lam R v for a data term off the nodes (None for a diagonal one: the
    hierarchy's own matrix, unless ``always``)."""
    if data.is_diagonal and not always:
        return None
    buf = np.empty(data.shape, np.float32)
    pen = _mg_penalty(penalty)
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


def _unmix(planes: List[Array], V: Array, out: Array, value_range: Optional[Tuple[Array, Array]]) -> float:
    """out[..., c] = sum_k V[k, c] planes[k] (out C-contiguous (N..., C)), each channel clipped to
    its (min, max) of ``value_range`` (None: not clipped) on the way: one compiled pass
    (``_core.mix_channels``; NumPy's multiply-adds, clips and counts per channel took 1.1 ms at 451 x
    300 RGB). Returns the fraction of values clipped."""
    C = V.shape[1]
    if not out.flags.c_contiguous:  # (reshape would copy: the writes would be lost)
        tmp = np.empty(out.shape, out.dtype)
        frac = _unmix(planes, V, tmp, value_range)
        out[...] = tmp
        return frac
    cols = list(out.reshape(-1, C).T)  # the channels of out, element stride C
    lo = hi = None
    if value_range is not None:
        lo, hi = (np.ascontiguousarray(np.asarray(v, out.dtype).reshape(-1)) for v in value_range)
    n = _core.mix_channels([p.reshape(-1) for p in planes], np.ascontiguousarray(V, out.dtype), cols, lo, hi)
    return n / max(out.size, 1)


def _planes(X: Array) -> List[Array]:
    """The channels of X (..., C) as C contiguous float32 arrays (mixing strided channels took
    5 ms for a 512^2 RGB image; copied once, 1 ms)."""
    return [np.ascontiguousarray(X[..., c], dtype=np.float32) for c in range(X.shape[-1])]


def _mix_planes(planes: List[Array], V: Array) -> List[Array]:
    """sum_k V[k, c] planes[k] for every column c, in float32, one compiled pass (no BLAS threads)."""
    V = np.asarray(V, np.float32)
    if len(planes) == 1 and V[0, 0] == 1:
        return [planes[0]]
    out = [np.empty_like(planes[0]) for _ in range(V.shape[1])]
    _core.mix_channels([p.reshape(-1) for p in planes], np.ascontiguousarray(V), [o.reshape(-1) for o in out])
    return out


def principal_basis(planes: List[Array], moments: Optional[Array] = None) -> Array:
    """The orthonormal (C, C) basis of the channels' second moments (``moments``: ``_moments(planes)``
    when the caller has it), strongest first (the identity for one channel); ``planes`` the C
    channels as arrays of one shape."""
    C = len(planes)
    if C == 1:
        return np.ones((1, 1), np.float32)
    w, V = np.linalg.eigh(_moments(planes) if moments is None else moments)
    return np.ascontiguousarray(V[:, ::-1], dtype=np.float32)


def hierarchy(data: DataTerm, lam: Optional[float], penalty: DifferencePenalty = PENALTY, threads: int = 0
              ) -> ThinPlateMG:
    """The multigrid hierarchy of M + lam R (M lumped when not diagonal), R a default penalty;
    with a diagonal data term and the thin-plate penalty, the smoother DIAGONAL_SMOOTHER (module
    docstring)."""
    degree, alpha = DIAGONAL_SMOOTHER if data.is_diagonal and penalty.order == 2 else (None, None)
    # (PCG's predicted stop only where the V-cycle's matrix is the data term's: multigrid.py)
    return ThinPlateMG(data.lumped(), lam, degree=degree, alpha=alpha, threads=threads,
                       predicted_stop=data.is_diagonal, **_mg_penalty(penalty))


def choose_ridge(data: DataTerm, rhs, maxiter: int, moments: Optional[Array] = None,
                 basis: Optional[Array] = None, threads: int = 0, mixed: Optional[List[Array]] = None
                 ) -> Tuple[float, Dict[str, Any]]:
    """lambda held out on the whole grid (module docstring) for a diagonal data term (grids with
    holes, points on a lattice): the held-out samples are nodes with data, their values
    rhs / diag. ``moments``: the channels' ``_moments``, when the caller has them; ``basis``:
    their ``principal_basis``, whose leading component is the selection signal unless it
    cancels them (``_selection_signal``). info[SWEEP_FIT_KEY]: the sweep's best fit when the
    signal was that component (in the basis' sign), a start for its final solve. ``mixed``: the
    channels in that basis (``_mix_planes``), when the caller has them."""
    diag = data.diag
    obs = np.flatnonzero(diag > 0 if data.observed is None else data.observed)
    if obs.size < MIN_HOLDOUT:
        return data.rho * 10.0 ** (-FALLBACK_EXPONENT), _too_few_to_hold_out()
    hold = obs[_holdout(obs.size)]
    planes = _as_planes(rhs)
    count = (float(diag.sum()) if data.total is None else data.total) if len(planes) > 1 else 1.0
    y, lead = _selection_signal(planes, count, moments, basis, None if mixed is None else mixed[0])
    D = diag.ndim
    if COMPILED_SWEEP and SWEEP_OMEGA is not None and D <= MG_MAX_AXES and ORDER.get(D, 2) == 2:
        lam, info = _compiled_sweep(diag, y, hold, data.rho, maxiter, threads)
        if not lead:
            info.pop(SWEEP_FIT_KEY, None)
        return lam, info
    train = diag.copy()
    train.flat[hold] = 0.0
    y = y[..., None]
    y_ho = y.reshape(-1)[hold] / diag.reshape(-1)[hold]
    # B^T y is 0 wherever diag(B^T B) is: leaving out the held-out nodes is all (a copy and a
    # scatter: np.where over the grid took 0.56 ms at 451 x 300)
    r_train = np.array(y, dtype=np.float32)
    r_train.reshape(-1)[hold] = 0.0

    error = _held_out_error(hold, y_ho)
    lam, info = _sweep(DataTerm(train.shape, train), r_train, error, data.rho, maxiter, threads)
    if not lead:
        info.pop(SWEEP_FIT_KEY, None)
    return lam, info


def _held_out_error(hold: Array, y_ho: Array) -> Callable[[Array], float]:
    """The mean squared error of a grid's values at the flat indices ``hold`` against ``y_ho``
    (float32), gathered into one kept buffer and summed in float64 by the compiled dot (the
    fancy index, its temporaries and np.mean took 14 us per call at 128^2, ten calls per fill)."""
    y_ho = np.ascontiguousarray(y_ho, np.float32)
    buf = np.empty_like(y_ho)

    def error(w: Array) -> float:
        np.take(w.reshape(-1), hold, out=buf)
        np.subtract(buf, y_ho, out=buf)
        return _dot(buf, buf) / max(buf.size, 1)

    return error


def choose_ridge_points(B, values: Array, shape: Sequence[int], rho: float, maxiter: int
                        ) -> Tuple[float, Dict[str, Any]]:
    """lambda held out among scattered samples: B the (P, G) blending matrix (a stored kronpe
    BlendingMatrix), values (P, C); HOLDOUT_FRACTION of the points left out, their error measured
    through their rows of B."""
    P = B.shape[0]
    if P < MIN_HOLDOUT:
        return rho * 10.0 ** (-FALLBACK_EXPONENT), _too_few_to_hold_out()
    hold = _holdout(P)
    keep = np.ones(P, bool)
    keep[hold] = False
    cols = [np.ascontiguousarray(values[:, c], np.float64) for c in range(values.shape[1])]
    y = _selection_signal(cols, float(P))[0]
    Bt, Bh = B.take(np.flatnonzero(keep)), B.take(hold)
    sub = DataTerm(shape, blend=Bt)
    r_train = np.asarray(Bt.rmatvec(y[keep]), np.float32).reshape(tuple(shape) + (1,))
    y_hold = y[hold]

    def error(w):
        return float(np.mean((Bh.matvec(w.reshape(-1)).astype(np.float64) - y_hold) ** 2))

    return _sweep(sub, r_train, error, rho, maxiter)


def _start(data: DataTerm, rhs) -> Optional[Array]:
    """CG's start (module docstring): None (full multigrid, in the solver) on grids of 1 to 3 axes
    with a diagonal data term, else the normalised convolution."""
    if len(data.shape) <= MG_MAX_AXES and data.is_diagonal:
        return None
    return start(data, np.stack(rhs, -1) if isinstance(rhs, (list, tuple)) else rhs)


def _too_few_to_hold_out() -> Dict[str, Any]:
    """The info of a fit with fewer than MIN_HOLDOUT samples: lambda = rho 10^-FALLBACK_EXPONENT,
    the natural boundary, nothing held out."""
    return {"ridge_candidates": [], "holdout_errors": [], "boundary": BOUNDARIES[0], "boundary_holdout_errors": []}


def _holdout(n: int) -> Array:
    """HOLDOUT_FRACTION of range(n), drawn with HOLDOUT_SEED, sorted (the gathers of the held-out
    error in memory order), read-only: a function of n alone, so kept for the last few n (the
    draw, a permutation of range(n), took 0.15 ms for a 451 x 300 fill's 68k samples)."""
    return _holdout_of(int(n), HOLDOUT_FRACTION, HOLDOUT_SEED)


@functools.lru_cache(maxsize=8)
def _holdout_of(n: int, fraction: float, seed: int) -> Array:
    rng = np.random.default_rng(seed)
    out = np.sort(rng.choice(n, max(1, int(round(fraction * n))), replace=False))
    out.setflags(write=False)
    return out


def _sweep(sub: DataTerm, r_train: Array, error: Callable[[Array], float], rho: float, maxiter: int,
           threads: int = 0) -> Tuple[float, Dict[str, Any]]:
    """The held-out sweep over lambda = rho 10^-k, k in EXPONENTS (module docstring); ``threads``:
    its hierarchy's kernels' (0: the default). With a diagonal data term and the thin-plate penalty
    choose_ridge runs the compiled one instead (_compiled_sweep, COMPILED_SWEEP)."""
    D = len(sub.shape)
    model = {"penalty": default_penalty(D)}
    mg = hierarchy(sub, None, model["penalty"], threads) if D <= MG_MAX_AXES else None
    x0 = _start(sub, r_train)
    # with a diagonal data term the hierarchy's matrix is the system's: over-relaxed V-cycles from
    # the last fit (SWEEP_OMEGA), else PCG iterations on the exact operator
    stationary = SWEEP_OMEGA is not None and mg is not None and sub.is_diagonal and model["penalty"].order == 2
    b_train = np.ascontiguousarray(r_train[..., 0]) if stationary else None

    def run(lam, w, iterations=SWEEP_MAXITER):
        if mg is not None:
            mg.set_ridge(lam)
        if stationary:  # (the first fit: full multigrid alone, module docstring)
            return mg.fmg(b_train) if w is None else mg.cycles(b_train, w, min(maxiter, iterations), SWEEP_OMEGA)
        return solve(sub, r_train, lam, x0 if w is None else w, SWEEP_TOL, min(maxiter, iterations),
                     model["penalty"], mg)[0]

    ratio = 10.0 ** (EXPONENTS[1] - EXPONENTS[0])
    best, lams, errs, x_best, x_from = sweep_ridges(run, error, [rho * 10.0 ** (-k) for k in EXPONENTS], ratio,
                                                    flat=SWEEP_FLAT_NODES if stationary else SWEEP_FLAT,
                                                    with_start=True)
    lam_fit = best  # the lambda x_best was fitted at
    interpolating = best == min(lams)
    if interpolating:  # still falling (or flat) at the smallest lambda tried: the samples want interpolating
        best = rho * 10.0 ** (-INTERPOLATION_EXPONENT)
    info: Dict[str, Any] = {"ridge_candidates": lams, "holdout_errors": errs, "interpolating": interpolating,
                            "boundary_holdout_errors": []}
    reflect = model["penalty"].reflect
    if mg is not None and model["penalty"].order == 2:
        # the boundary: the best fit's own step (natural) against that step mirrored, both from
        # the fit the best started from (None: the sweep's start), at its lambda (module docstring)
        mg.set_boundary(True)
        x_mirrored = run(lam_fit, x_from)
        info["boundary_holdout_errors"] = [min(errs), error(x_mirrored)]
        reflect = info["boundary_holdout_errors"][1] < info["boundary_holdout_errors"][0] * (1.0 + BOUNDARY_MARGIN)
        mg.set_boundary(reflect)
        if reflect:
            x_best = x_mirrored
        if HIGHER and stationary and interpolating and reflect and D == 2 and maxiter > 0 and x_from is not None:
            # the higher-order penalty for the leading component, held out the same way: one
            # over-relaxed step of its system from the same fit, preconditioned by this
            # hierarchy's V-cycle (module docstring)
            e_hi = error(_higher_step(mg, sub.lumped(), b_train, x_from, lam_fit))
            info["higher_holdout_errors"] = [info["boundary_holdout_errors"][1], e_hi]
            info[HIGHER_KEY] = e_hi < info["boundary_holdout_errors"][1] * (1.0 - HIGHER_MARGIN)
    elif mg is not None:
        info["weights"], info["weights_holdout_errors"] = _choose_weights(mg, model, lambda w: error(
            run(best, x_best, WEIGHT_ITERATIONS)))
    info["boundary"] = BOUNDARIES[int(reflect)]
    # the hierarchy goes back to fit (HIERARCHY_KEY), which gives it the whole data term: its work
    # arrays are allocated once per fit
    info[HIERARCHY_KEY] = mg
    info[SWEEP_FIT_KEY] = x_best
    return best, info


def _lead_solve(data: DataTerm, b: Array, maxiter: int) -> Tuple[Optional[Any], int]:
    """(the leading component's LeadSolve, or None where it is not tried; the threads of the
    sweep's hierarchy: 1 when the solve runs beside the sweep on one thread each, the team of
    each side when it runs on a thread of its own, else 0) for a fill choosing lambda on a
    diagonal data term (module docstring, "Speculation"): a solve of the component ``b`` at the
    interpolation limit with the mirrored thin-plate penalty (then, on 2 axes, with the
    higher-order one) on grids of 1 or 2 axes. Up to SPECULATE_MAX_NODES nodes it runs beside the
    sweep when kronpe has two threads or more and the cores are not busy (each on one thread),
    after it otherwise; larger grids speculate only with 2 SPECULATE_TEAM threads or more and
    the cores not busy, each side on half of them (started here)."""
    D = len(data.shape)
    size = math.prod(data.shape)
    if not (D in (1, 2) and ORDER.get(D, 2) == 2 and SWEEP_OMEGA is not None and size > 0
            and maxiter > 0 and data.rho > 0):
        return None, 0
    n, busy = _core.get_num_threads(), _core._tuning.busy_cores()[0]
    if size <= SPECULATE_MAX_NODES:
        threads = 1 if n >= 2 and not busy else 0
    elif n >= 2 * SPECULATE_TEAM and not busy:
        threads = n // 2
    else:
        return None, 0
    degree, alpha = DIAGONAL_SMOOTHER
    spec = _core.LeadSolve32(np.ascontiguousarray(data.diag, np.float32), np.ascontiguousarray(b, np.float32),
                             data.rho * 10.0 ** (-INTERPOLATION_EXPONENT), degree, chebyshev_lmax(D, 2), alpha,
                             COARSEST, threads, TOL_INTERPOLATING, maxiter, HIGHER if D == 2 else 0.0)
    if threads > 1:
        spec.start()
    return spec, threads


def _stages_wanted(info: Dict[str, Any], higher: Optional[bool] = None) -> int:
    """The LeadSolve stages a sweep's outcome ``info`` wants: none unless it chose the
    interpolation limit with the mirrored boundary, then 2 with the higher-order penalty
    (``higher``, default info's HIGHER_KEY), else 1."""
    if not (info.get("interpolating") and info.get("boundary") == BOUNDARIES[1]):
        return 0
    return 2 if (info.get(HIGHER_KEY, False) if higher is None else higher) else 1


def _lead_solved(spec, data: DataTerm, higher: bool) -> Tuple[Tuple[Array, int, float], Callable[[], ThinPlateMG]]:
    """(the leading component's (solution, iterations of both stages, error estimate), a function
    wrapping the LeadSolve's hierarchy for the other components) once the sweep chose the
    interpolation limit with the mirrored boundary; ``higher``: with the higher-order penalty
    (stage 2)."""
    stages = 2 if higher else 1
    spec.finish(stages)
    x, its, rel = spec.solution(stages)
    if higher:
        its += spec.result(1)[0]
    return (x.reshape(data.shape), int(its), float(rel)), _wrapper(data.diag, spec.hierarchy(), True)


def _wrapper(m: Array, h, reflect: bool, threads: int = 0) -> Callable[[], ThinPlateMG]:
    """A function wrapping ``h``, a compiled hierarchy of ``m`` with DIAGONAL_SMOOTHER and the
    boundary ``reflect`` (a LeadSolve's, the compiled sweep's), as a ThinPlateMG at its lambda:
    called only where another channel or a final solve wants it."""

    def wrapped() -> ThinPlateMG:
        degree, alpha = DIAGONAL_SMOOTHER
        mg = ThinPlateMG(m, None, reflect=reflect, degree=degree, alpha=alpha, threads=threads, _hierarchy=h)
        mg.lam = float(h.lam)
        return mg

    return wrapped


def _compiled_sweep(diag: Array, y: Array, hold: Array, rho: float, maxiter: int, threads: int
                    ) -> Tuple[float, Dict[str, Any]]:
    """_sweep's stationary branch (a diagonal data term ``diag``, the thin-plate penalty) for the
    selection signal ``y`` with the nodes ``hold`` held out, in one compiled call
    (``_core.held_out_fill_sweep``: the training term, its hierarchy, sweep_ridges' steps, the
    boundary test and the higher-order test, the same values as the Python loop; its per-step
    calls and array set-up took a fifth of a 128^2 fill). info[HIERARCHY_KEY]: a function that
    wraps the sweep's hierarchy (a ThinPlateMG), called only where it is wanted."""
    D = diag.ndim
    x_best = np.empty(diag.shape, np.float32)
    degree, alpha = DIAGONAL_SMOOTHER
    lams = [rho * 10.0 ** (-k) for k in EXPONENTS]
    h, o = _core.held_out_fill_sweep(
        np.ascontiguousarray(diag, np.float32), np.ascontiguousarray(y, np.float32).reshape(diag.shape), hold, x_best,
        degree, chebyshev_lmax(D, 2), alpha, COARSEST, threads, lams, 10.0 ** (EXPONENTS[1] - EXPONENTS[0]),
        SWEEP_FLAT_NODES, min(maxiter, SWEEP_MAXITER), SWEEP_OMEGA, BOUNDARY_MARGIN,
        HIGHER if (HIGHER and D == 2 and maxiter > 0) else 0.0, HIGHER_MARGIN)
    reflect = bool(o["reflect"])
    wrapped = _wrapper(diag, h, reflect, threads)
    best = rho * 10.0 ** (-INTERPOLATION_EXPONENT) if o["interpolating"] else o["best"]
    info: Dict[str, Any] = {"ridge_candidates": list(o["tried"]), "holdout_errors": list(o["errs"]),
                            "interpolating": bool(o["interpolating"]),
                            "boundary_holdout_errors": list(o["boundary_errs"]),
                            "boundary": BOUNDARIES[int(reflect)], HIERARCHY_KEY: wrapped, SWEEP_FIT_KEY: x_best}
    if "higher_errs" in o:
        info["higher_holdout_errors"] = list(o["higher_errs"])
        info[HIGHER_KEY] = bool(o["higher"])
    return best, info


def _higher_step(mg: ThinPlateMG, m: Array, b: Array, x: Array, lam: float) -> Array:
    """x + SWEEP_OMEGA V (b - (diag(m) + lam R_h) x), R_h the HigherPenalty(HIGHER) form and V one
    V-cycle of ``mg`` (the thin-plate hierarchy, mirrored, set for lam): one step of the
    higher-order system from x without a hierarchy of its own (module docstring)."""
    x = x.reshape(b.shape)
    r = thin_plate_apply(x, m, lam, **_mg_penalty(HigherPenalty(HIGHER)))
    np.subtract(b, r, out=r)
    z = mg.vcycle(r)
    z *= np.float32(SWEEP_OMEGA)
    z += x
    return z


def _choose_weights(mg: ThinPlateMG, model: Dict[str, Any], held_out: Callable[[Array], float]
                    ) -> Tuple[Tuple[float, ...], List[Tuple[Tuple[float, ...], float]]]:
    """The axis weights of the order-3 penalty, held out (module docstring): from all 1, each axis's
    weight times WEIGHT_STEP and 1 / WEIGHT_STEP, then one more step the way of the best when it
    beats all 1 by more than WEIGHT_MARGIN. ``held_out``: the held-out error after
    WEIGHT_ITERATIONS iterations from the sweep's best fit, with the weights ``model`` and ``mg``
    hold. Returns (weights, [(weights, error) tried])."""
    D = len(mg.shape)
    tried: Dict[Tuple[float, ...], float] = {}

    def evaluate(w: Tuple[float, ...]) -> float:
        if w not in tried:
            mg.set_weights(w)
            model["penalty"] = default_penalty(D, weights=w)
            tried[w] = held_out(w)
        return tried[w]

    def scaled(w: Tuple[float, ...], axis: int, f: float) -> Tuple[float, ...]:
        return tuple(v * f if i == axis else v for i, v in enumerate(w))

    base = (1.0,) * D
    e0 = evaluate(base)
    moves = [(a, f) for a in range(D) for f in (WEIGHT_STEP, 1.0 / WEIGHT_STEP)]
    errs = [evaluate(scaled(base, a, f)) for a, f in moves]
    k = int(np.argmin(errs))
    chosen = base
    if errs[k] < e0 * (1.0 - WEIGHT_MARGIN):
        w1 = scaled(base, *moves[k])
        w2 = scaled(w1, *moves[k])
        chosen = w2 if evaluate(w2) < tried[w1] else w1
    mg.set_weights(chosen)
    model["penalty"] = default_penalty(D, weights=chosen)
    return chosen, list(tried.items())


def _moments(planes: List[Array]) -> Array:
    """(C, C) sums of products of the planes (compiled dot products in float64, every pair of a
    block in one pass: no BLAS threads)."""
    C = len(planes)
    return np.array(_core.dots([np.ascontiguousarray(p) for p in planes])).reshape(C, C)


def _selection_signal(planes: List[Array], count: float, moments: Optional[Array] = None,
                      basis: Optional[Array] = None, leading: Optional[Array] = None) -> Tuple[Array, bool]:
    """The one signal lambda is chosen on, and whether it is ``basis``' leading component: that
    component (``basis`` given, the channels' ``principal_basis``: the final solve's first
    component, whose start the sweep's fit then is) or the sum of the channels, unless those
    cancel the channels (the sum's variance less than SELECTION_SUM_SHARE of the leading
    principal component's of the covariance, over the ``count`` samples; the planes are sums of
    samples at nodes, or the samples themselves): then that centred component. (Channels a and
    1 - a sum to a constant, which any lambda fits: the choice was left to rounding noise. On
    photographs the sum holds 90%+ of the leading centred component's variance; that component
    itself chose another lambda on rocket, 25% of its pixels, 0.08 dB worse. The sum and the
    leading component of the second moments chose the same lambda, boundary and lead penalty on
    the twelve photograph rows.) ``moments``: ``_moments(planes)`` when the caller has them.
    The means are float32 sums (float64 ones took 70 us per 451 x 300 channel). ``leading``: that
    component itself (``_mix_planes``' first), when the caller has it: the same values, not mixed
    again (a pass of 0.1 ms at 451 x 300 RGB)."""
    C = len(planes)
    if C == 1:
        return planes[0], True
    n = max(count, 1.0)
    mean = np.array([float(p.sum()) for p in planes]) / n
    cov = (_moments(planes) if moments is None else moments) / n - np.outer(mean, mean)
    w, V = np.linalg.eigh(cov)
    ones = np.full(C, 1.0 / np.sqrt(C))
    share = float(ones @ cov @ ones) / max(float(w[-1]), 1e-300)
    lead = share >= SELECTION_SUM_SHARE and basis is not None
    if lead and leading is not None:
        return leading, True
    v = basis[:, 0] if lead else (np.ones(C) if share >= SELECTION_SUM_SHARE else V[:, -1])
    y = np.empty_like(planes[0])
    _core.mix_channels([np.ascontiguousarray(p).reshape(-1) for p in planes], np.ascontiguousarray(v, y.dtype).reshape(C, 1),
                       [y.reshape(-1)])
    return y, lead


def sample_range(values: Array) -> Tuple[Array, Array]:
    """Per-channel (min, max) of finite samples (P, C) (the clip of ``fit``), over the channels as
    rows (NaN-aware reductions over (P, 3) took 3.6 ms for 196k samples)."""
    v = np.ascontiguousarray(np.asarray(values, np.float32).reshape(values.shape[0], -1).T)
    return v.min(axis=1), v.max(axis=1)


def fit(data: DataTerm, rhs, ridge: Optional[float], maxiter: Optional[int] = None,
        samples: Optional[Tuple[Any, Array]] = None, value_range: Optional[Tuple[Array, Array]] = None,
        device: Optional[int] = None) -> Tuple[Array, float, Dict[str, Any]]:
    """The default smooth fit: (grid values (N..., C) float32, lambda, info). ``samples`` = (B,
    values) for a blended data term B^T B: the held-out choice of lambda needs the points.
    ``value_range`` = per-channel (min, max) of the samples: the grid values are clipped to it
    (module docstring). ``device``: a CUDA device whose multigrid solves the fill where it can
    (module docstring, "On a GPU"); else, and for every other fit, the host's."""
    rhs = _as_planes(rhs)  # once: the sweep and the solve take the channels as planes
    size = sum(p.size for p in rhs)
    # the channels' second moments, once: the choice of lambda and the solve's basis both use them
    moments = _moments(rhs) if len(rhs) > 1 else None
    maxiter = 20 * sum(data.shape) if maxiter is None else maxiter
    if device is not None and ridge is None and size and _on_device(data, maxiter):
        return _device_fit(data, rhs, maxiter, moments, value_range, int(device))
    info: Dict[str, Any] = {}
    basis = mixed = spec = None
    if ridge is None:
        if not data.is_diagonal:
            if samples is None:
                raise ValueError("choosing lambda for a blended data term needs the samples")
            lam, extra = choose_ridge_points(samples[0], samples[1], data.shape, data.rho, maxiter)
        else:
            basis = principal_basis(rhs, moments)
            mixed = _mix_planes(rhs, basis)
            # the leading component at the interpolation limit, solved beside the sweep
            spec, threads = _lead_solve(data, mixed[0], maxiter)

            def sweep():
                chosen = choose_ridge(data, rhs, maxiter, moments, basis, threads, mixed)
                return chosen, _stages_wanted(chosen[1])

            if spec is not None and threads == 1:
                lam, extra = spec.beside(sweep)
            else:
                lam, extra = sweep()[0]
        info.update(extra)
    else:
        lam = float(ridge)
    x0 = _start(data, rhs)
    mg = info.pop(HIERARCHY_KEY, None)
    swept = info.pop(SWEEP_FIT_KEY, None)
    higher = bool(info.pop(HIGHER_KEY, False))
    lead_solution = None
    if spec is not None:
        if _stages_wanted(info, higher):
            lead_solution, mg = _lead_solved(spec, data, higher)
            swept = None
        else:
            spec.cancel()
    if swept is not None and (mg is None or not data.is_diagonal):
        swept = None
    # the leading component's PCG starts from the sweep's fit of it (module docstring)
    lead_start = None if swept is None else np.asarray(swept, np.float32).reshape(data.shape)
    penalty = default_penalty(len(data.shape), info.get("boundary", BOUNDARIES[0]) == "reflect", info.get("weights"))
    info["boundary"] = penalty.boundary
    if mg is not None and lead_solution is None:
        mg = mg if isinstance(mg, ThinPlateMG) else mg()
        mg.set_data(data.lumped()).set_ridge(lam)
    lead = None
    if higher:
        lead = HigherPenalty(HIGHER)
        info["lead_penalty"] = repr(HigherPenalty(HIGHER))
    # the interpolation limit converges slowest and its PSNR is the most sensitive to the solve
    tol = TOL_INTERPOLATING if info.get("interpolating") else TOL
    W, its, rels, clipped = solve(data, rhs, lam, x0, tol, maxiter, penalty, mg,
                                  value_range if size else None, lead, moments, lead_start, basis,
                                  lead_solution, mixed)
    if value_range is not None and size:
        info["clipped"] = clipped
    res = float(rels.max()) if rels.size else 0.0
    multigrid = len(data.shape) <= MG_MAX_AXES
    info.update(iterations=int(its), residual=res, converged=res <= tol, tol=tol, maxiter=maxiter, rho=data.rho,
                penalty=repr(penalty),
                preconditioner="a multigrid V-cycle (Chebyshev smoothing)" if multigrid else
                "(rho I + lambda R)^-1 in the DCT-II basis",
                stopping="||M r|| / ||W|| (error estimate)" if multigrid else "relative residual")
    return W, lam, info


def _on_device(data: DataTerm, maxiter: int) -> bool:
    """Whether a fill with lambda held out runs on a CUDA device (module docstring, "On a GPU"): a
    diagonal data term on 1 or 2 axes (the compiled sweep's case), enough samples to hold out."""
    D = len(data.shape)
    if not (data.is_diagonal and D in (1, 2) and ORDER.get(D, 2) == 2 and COMPILED_SWEEP
            and SWEEP_OMEGA is not None and maxiter > 0 and data.rho > 0):
        return False
    obs = data.diag > 0 if data.observed is None else data.observed
    return int(np.count_nonzero(obs)) >= MIN_HOLDOUT


def _device_fit(data: DataTerm, planes: List[Array], maxiter: int, moments: Optional[Array],
                value_range: Optional[Tuple[Array, Array]], device: int) -> Tuple[Array, float, Dict[str, Any]]:
    """fit on a CUDA device (``_core.cuda_smooth_fill``): the held-out nodes, the principal basis and
    the selection signal as on the host (choose_ridge), then the sweep and every component's solve
    there, then the components mixed back and clipped here. The steps of the host's fill without
    speculation; the device's sums run in another order, so the values agree to rounding."""
    diag = np.ascontiguousarray(data.diag, np.float32)
    D = diag.ndim
    obs = np.flatnonzero(diag > 0 if data.observed is None else data.observed)
    hold = obs[_holdout(obs.size)]
    C = len(planes)
    basis = principal_basis(planes, moments)
    mixed = _mix_planes(planes, basis)
    count = (float(diag.sum()) if data.total is None else data.total) if C > 1 else 1.0
    y, lead = _selection_signal(planes, count, moments, basis, mixed[0])
    degree, alpha = DIAGONAL_SMOOTHER
    W = [np.empty(data.shape, np.float32) for _ in range(C)]
    o = _core.cuda_smooth_fill(
        device, diag, [np.ascontiguousarray(p, np.float32).reshape(data.shape) for p in mixed],
        np.ascontiguousarray(y, np.float32).reshape(data.shape), hold, W,
        [data.rho * 10.0 ** (-k) for k in EXPONENTS], 10.0 ** (EXPONENTS[1] - EXPONENTS[0]), SWEEP_FLAT_NODES,
        min(maxiter, SWEEP_MAXITER), SWEEP_OMEGA, BOUNDARY_MARGIN, HIGHER if (HIGHER and D == 2) else 0.0,
        HIGHER_MARGIN, degree, chebyshev_lmax(D, 2), alpha, COARSEST, data.rho * 10.0 ** (-INTERPOLATION_EXPONENT),
        TOL, TOL_INTERPOLATING, maxiter, bool(lead))
    reflect = bool(o["reflect"])
    interpolating = bool(o["interpolating"])
    info: Dict[str, Any] = {"ridge_candidates": list(o["tried"]), "holdout_errors": list(o["errs"]),
                            "interpolating": interpolating, "boundary_holdout_errors": list(o["boundary_errs"]),
                            "boundary": BOUNDARIES[int(reflect)]}
    if "higher_errs" in o:
        info["higher_holdout_errors"] = list(o["higher_errs"])
        if o["higher"]:
            info["lead_penalty"] = repr(HigherPenalty(HIGHER))
    out = np.empty(data.shape + (C,), np.float32)
    clipped = _unmix(W, basis.T, out, value_range)
    if value_range is not None:
        info["clipped"] = clipped
    tol = TOL_INTERPOLATING if interpolating else TOL
    rels = np.asarray(o["errors"], np.float64)
    res = float(rels.max()) if rels.size else 0.0
    info.update(iterations=int(o["iterations"]), residual=res, converged=res <= tol, tol=tol, maxiter=maxiter,
                rho=data.rho, penalty=repr(default_penalty(D, reflect)),
                preconditioner="a multigrid V-cycle (Chebyshev smoothing)",
                stopping="||M r|| / ||W|| (error estimate)", device=f"cuda:{device}")
    return out, float(o["lam"]), info


for _cached in (_holdout_of,):  # kronpe.clear_caches forgets them too
    _caches.register(_cached.cache_clear)
