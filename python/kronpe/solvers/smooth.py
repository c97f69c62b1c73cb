"""The default fits of grids with holes and of scattered samples (docs/math/penalties.rst): the
model's values on a grid under a smoothness penalty, lambda held out, solved by
multigrid-preconditioned CG. ``fit_grid(signal, mask=)`` and ``fit_points(points, values)`` use it
when neither embedders nor a penalty is given. Its parts: the grid of scattered points
(:mod:`.lattice`), the system and its solve (:mod:`.smooth_system`, :mod:`.multigrid`), the
channels' basis (:mod:`.channels`); this module makes the fill's choices. Decisions (documented
once, here):

**Model and penalty.** The unknowns are the grid values (the identity embedding), the data term
B^T B a diagonal (a mask, points on a lattice) or the stored blending matrix (points elsewhere).
On 1 and 2 axes the penalty is the thin-plate form, which fills photographs best; on 3 axes the
third-order form mirrored at the ends, which fills videos better, with per-axis weights held out
(each axis's weight stepped by WEIGHT_STEP). The boundary, natural or mirrored, is held out with
lambda (the mirrored one's interpolation limit is ``inpaint_biharmonic``'s solution). At the
interpolation limit of a 2-D grid the leading component may take L^2 + HIGHER L^3 instead, held
out the same way and preconditioned by the thin-plate hierarchy. The held-out error alone decides
both: a margin in favour of either (BOUNDARY_MARGIN, HIGHER_MARGIN) gained nothing measurable on
photographs the fill was not tuned on (``kronpe bench --suite validation``), while HIGHER and
TOL_INTERPOLATING gain there (+0.16 and +0.08 dB filling 50% holes). With an explicit ridge
nothing is held out: natural boundary, unit weights.

**Choosing lambda.** A tenth of the samples is held out, and lambda chosen on one signal: the
channels' leading principal component (:mod:`.channels`). The sweep tries lambda = rho 10^-k for
k in EXPONENTS, largest first, each fit one step warm-started from the last (an over-relaxed
V-cycle with a diagonal data term, else a PCG iteration): the ranking of the lambdas settles long
before the solves converge. It stops when the held-out error has risen or flattened twice, and a
parabolic step in log lambda refines the best. When the error still falls at the smallest lambda
the samples want interpolating: lambda = rho 10^-INTERPOLATION_EXPONENT. With a diagonal data
term the whole sweep is one compiled call.

Off the nodes (a blended data term) the sweep is its own (``_blended_sweep``), the same steps
(the first fit full multigrid and a PCG step) with two other rules. It stops at the first fit
that holds out no better than BLENDED_FLAT below the best before it: there the one-step fits'
errors zigzag by a few tenths of a percent at small lambda, which kept the rule above from
stopping until 10^-4 and the interpolation limit (a thousand CG iterations, 1 dB lost on one of
the photographs' off-grid samples). It takes the largest lambda held out within BLENDED_FLAT of
the least error, never the interpolation limit: nearly exact samples hold out alike over decades
of lambda, while each decade less costs CG iterations (the V-cycle sees the data term's lumped
diagonal only, a poorer model of it the smaller lambda), and 0.5% of a squared error is 0.02 dB.

**Solve.** Preconditioned CG stops when its error estimate falls below TOL of the solution's norm
(TOL_INTERPOLATING at the interpolation limit, whose accuracy follows the solve most closely). It
starts from full multigrid on grids of 1 to 3 axes, the leading component from the sweep's own fit
of it where lambda was held out (off the nodes too: the fit of nine tenths of the samples at the
lambda chosen left 7 CG iterations of 10 on a photograph's off-grid samples), beyond them from the
normalised convolution of the samples (which took a sixth of an off-grid fill and saved CG no
iteration over full multigrid). Channels share lambda and the
hierarchy. Vectors are float32, dot products float64, and no BLAS runs in the solve (its threads
spin against the kernels on busy machines). The grid values are finally clipped to the samples'
range, channel by channel: a thin-plate fit overshoots next to edges, the truth rarely does.

**Threads and devices.** On grids of up to SPECULATE_MAX_NODES nodes the leading component's
solve at the interpolation limit runs beside the sweep, on a second thread, and is used when the
sweep chooses that limit: the same bits as on one thread, where it runs after the sweep when
wanted. Larger grids do so only with SPECULATE_TEAM threads or more per side, starting that
component from full multigrid instead of the sweep's fit (a fill within the solver's tolerance of
the one on fewer threads). On a CUDA device (``fit(..., device=)``) a fill of 1 or 2 axes with a
diagonal data term runs the same steps there (the device's kernels sum in another order: its
values agree with the host's to rounding); other fills solve on the host.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .. import _caches
from .. import _core
from .channels import as_planes, mix_planes, principal_basis, second_moments, selection_signal, unmix
from .krylov import sweep_ridges
from .multigrid import COARSEST, ThinPlateMG, chebyshev_lmax, dot, thin_plate_apply
from .smooth_system import (
    DIAGONAL_SMOOTHER,
    MG_MAX_AXES,
    ORDER,
    DataTerm,
    HigherPenalty,
    default_penalty,
    hierarchy,
    mg_penalty,
    solve,
    start,
)

Array = np.ndarray
BOUNDARIES = ("natural", "reflect")  # the penalty's boundaries, by info["boundary"]
TOL = 1e-3  # CG stops at this error estimate relative to the solution's norm
EXPONENTS = (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0)  # the sweep's lambdas, rho 10^-k
SWEEP_TOL = 0.0  # the sweep's fits stop by their iteration count alone
SWEEP_MAXITER = 1  # iterations per lambda of the sweep
SWEEP_FLAT = 3e-3  # the sweep stops after two held-out errors that fall by less than this
SWEEP_OMEGA = 1.3  # over-relaxation of the sweep's V-cycle steps (None: PCG steps)
SWEEP_FLAT_NODES = 1e-2  # SWEEP_FLAT of the sweep's V-cycle steps
INTERPOLATION_EXPONENT = 6.0  # lambda = rho 10^-this when the samples want interpolating
TOL_INTERPOLATING = 3e-4  # TOL at the interpolation limit
HIERARCHY_KEY = "_hierarchy"  # info entry handing the sweep's hierarchy to the final solve
MIN_HOLDOUT = 20  # fewer samples: lambda is not held out
FALLBACK_EXPONENT = 2.0  # lambda = rho 10^-this when it is not held out
HOLDOUT_FRACTION = 0.1  # the fraction of the samples held out
HOLDOUT_SEED = 0  # the seed of their draw
BOUNDARY_MARGIN = 0.0  # the mirrored boundary is taken when it holds out better by this much (0: when better)
WEIGHT_STEP = 0.6  # the order-3 penalty's axis weights are stepped by this factor and its inverse
WEIGHT_ITERATIONS = 4  # CG iterations per weight candidate, from the sweep's best fit
WEIGHT_MARGIN = 0.01  # a weight step must hold out better by this much to go on
HIGHER = 0.1  # the leading component's higher-order penalty: L^2 + HIGHER L^3 (0: not tried)
HIGHER_MARGIN = 0.0  # that penalty is taken when it holds out better by this much (0: when better)
HIGHER_KEY = "_higher"  # info entry: whether it was taken
SWEEP_FIT_KEY = "_sweep_fit"  # info entry handing the sweep's best fit to the final solve
SPECULATE_MAX_NODES = 1 << 15  # grids up to this size solve the leading component beside the sweep
SPECULATE_TEAM = 4  # larger grids do so with at least twice this many threads
COMPILED_SWEEP = True  # the sweep of a diagonal data term in one compiled call
BLENDED_FLAT = 5e-3  # off the nodes: the sweep's gain that counts, and its choice's margin over the least error


def sample_range(values: Array) -> Tuple[Array, Array]:
    """Per-channel (min, max) of finite samples (P, C) (the clip of ``fit``), over the channels as
    rows (NaN-aware reductions over (P, 3) would take 3.6 ms for 196k samples)."""
    v = np.ascontiguousarray(np.asarray(values, np.float32).reshape(values.shape[0], -1).T)
    return v.min(axis=1), v.max(axis=1)


def fit(data: DataTerm, rhs, ridge: Optional[float], maxiter: Optional[int] = None,
        samples: Optional[Tuple[Any, Array]] = None, value_range: Optional[Tuple[Array, Array]] = None,
        device: Optional[int] = None) -> Tuple[Array, float, Dict[str, Any]]:
    """The default smooth fit: (grid values (N..., C) float32, lambda, info). ``samples`` = (B,
    values) for a blended data term B^T B: the held-out choice of lambda needs the points.
    ``value_range`` = per-channel (min, max) of the samples: the grid values are clipped to it
    (module docstring). ``device``: a CUDA device whose multigrid solves the fill where it can
    (module docstring, "Threads and devices"); else, and for every other fit, the host's."""
    rhs = as_planes(rhs)  # once: the sweep and the solve take the channels as planes
    size = sum(p.size for p in rhs)
    # the channels' second moments, once: the choice of lambda and the solve's basis both use them
    moments = second_moments(rhs) if len(rhs) > 1 else None
    maxiter = 20 * sum(data.shape) if maxiter is None else maxiter
    if device is not None and ridge is None and size and _on_device(data, maxiter):
        return _device_fit(data, rhs, maxiter, moments, value_range, int(device))
    info: Dict[str, Any] = {}
    basis = mixed = spec = None
    if ridge is None:
        basis = principal_basis(rhs, moments)
        if not data.is_diagonal:
            if samples is None:
                raise ValueError("choosing lambda for a blended data term needs the samples")
            lam, extra = choose_ridge_points(samples[0], samples[1], data.shape, data.rho, maxiter, basis)
        else:
            mixed = mix_planes(rhs, basis)
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
    if swept is not None and mg is None:
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


def choose_ridge(data: DataTerm, rhs, maxiter: int, moments: Optional[Array] = None,
                 basis: Optional[Array] = None, threads: int = 0, mixed: Optional[List[Array]] = None
                 ) -> Tuple[float, Dict[str, Any]]:
    """lambda held out on the whole grid (module docstring) for a diagonal data term (grids with
    holes, points on a lattice): the held-out samples are nodes with data, their values
    rhs / diag. ``moments``: the channels' ``second_moments``, when the caller has them; ``basis``:
    their ``principal_basis``, whose leading component is the selection signal unless it
    cancels them (``selection_signal``). info[SWEEP_FIT_KEY]: the sweep's best fit when the
    signal was that component (in the basis' sign), a start for its final solve. ``mixed``: the
    channels in that basis (``mix_planes``), when the caller has them."""
    diag = data.diag
    obs = np.flatnonzero(diag > 0 if data.observed is None else data.observed)
    if obs.size < MIN_HOLDOUT:
        return data.rho * 10.0 ** (-FALLBACK_EXPONENT), _too_few_to_hold_out()
    hold = obs[_holdout(obs.size)]
    planes = as_planes(rhs)
    count = (float(diag.sum()) if data.total is None else data.total) if len(planes) > 1 else 1.0
    y, lead = selection_signal(planes, count, moments, basis, None if mixed is None else mixed[0])
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
    # scatter: np.where over the grid would take 0.56 ms at 451 x 300)
    r_train = np.array(y, dtype=np.float32)
    r_train.reshape(-1)[hold] = 0.0

    error = _held_out_error(hold, y_ho)
    lam, info = _sweep(DataTerm(train.shape, train), r_train, error, data.rho, maxiter, threads)
    if not lead:
        info.pop(SWEEP_FIT_KEY, None)
    return lam, info


def _held_out_error(hold: Array, y_ho: Array) -> Callable[[Array], float]:
    """The mean squared error of a grid's values at the flat indices ``hold`` against ``y_ho``
    (float32), gathered into one kept buffer and summed in float64 by the compiled dot (the fancy
    index, its temporaries and np.mean would take 14 us per call at 128^2, ten calls per fill)."""
    y_ho = np.ascontiguousarray(y_ho, np.float32)
    buf = np.empty_like(y_ho)

    def error(w: Array) -> float:
        np.take(w.reshape(-1), hold, out=buf)
        np.subtract(buf, y_ho, out=buf)
        return dot(buf, buf) / max(buf.size, 1)

    return error


def choose_ridge_points(B, values: Array, shape: Sequence[int], rho: float, maxiter: int,
                        basis: Optional[Array] = None) -> Tuple[float, Dict[str, Any]]:
    """lambda held out among scattered samples: B the (P, G) blending matrix (a stored kronpe
    BlendingMatrix), values (P, C); HOLDOUT_FRACTION of the points left out, their error measured
    through their rows of B."""
    P = B.shape[0]
    if P < MIN_HOLDOUT:
        return rho * 10.0 ** (-FALLBACK_EXPONENT), _too_few_to_hold_out()
    hold = _holdout(P)
    keep = np.ones(P, np.float32)
    keep[hold] = 0.0
    cols = [np.ascontiguousarray(values[:, c], np.float64) for c in range(values.shape[1])]
    y, lead = selection_signal(cols, float(P), None, basis)
    Bh = B.take(hold)
    # the training term: B's rows weighted 0 or 1 (no copy of the kept rows and their plan)
    sub = DataTerm(shape, blend=B, keep=keep)
    r_train = np.asarray(B.rmatvec((y * keep).astype(np.float32)), np.float32).reshape(tuple(shape) + (1,))
    y_hold = y[hold]

    def error(w):
        return float(np.mean((Bh.matvec(w.reshape(-1)).astype(np.float64) - y_hold) ** 2))

    lam, info = _sweep(sub, r_train, error, rho, maxiter)
    if not lead:
        info.pop(SWEEP_FIT_KEY, None)
    return lam, info


def _start(data: DataTerm, rhs) -> Optional[Array]:
    """CG's start (module docstring): None (full multigrid, in the solver) on grids of 1 to 3 axes,
    else the normalised convolution."""
    if len(data.shape) <= MG_MAX_AXES:
        return None
    return start(data, np.stack(rhs, -1) if isinstance(rhs, (list, tuple)) else rhs)


def _too_few_to_hold_out() -> Dict[str, Any]:
    """The info of a fit with fewer than MIN_HOLDOUT samples: lambda = rho 10^-FALLBACK_EXPONENT,
    the natural boundary, nothing held out."""
    return {"ridge_candidates": [], "holdout_errors": [], "boundary": BOUNDARIES[0], "boundary_holdout_errors": []}


def _holdout(n: int) -> Array:
    """HOLDOUT_FRACTION of range(n), drawn with HOLDOUT_SEED, sorted (the gathers of the held-out
    error in memory order), read-only: a function of n alone, so kept for the last few n (the
    draw, a permutation of range(n), costs 0.15 ms for a 451 x 300 fill's 68k samples)."""
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

    candidates = [rho * 10.0 ** (-k) for k in EXPONENTS]
    if sub.is_diagonal:
        ratio = 10.0 ** (EXPONENTS[1] - EXPONENTS[0])
        best, lams, errs, x_best, x_from = sweep_ridges(run, error, candidates, ratio,
                                                        flat=SWEEP_FLAT_NODES if stationary else SWEEP_FLAT,
                                                        with_start=True)
        lam_fit = best  # the lambda x_best was fitted at
        interpolating = best == min(lams)
    else:
        best, lams, errs, x_best, x_from = _blended_sweep(run, error, candidates)
        lam_fit = best
        interpolating = False
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
        info["boundary_holdout_errors"] = [errs[lams.index(lam_fit)], error(x_mirrored)]
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


def _blended_sweep(run: Callable[[float, Optional[Array]], Array], error: Callable[[Array], float],
                   lams: Sequence[float]) -> Tuple[float, List[float], List[float], Array, Optional[Array]]:
    """The held-out sweep of a blended data term (module docstring): ``run(lam, x)`` one step
    from the fit x (None: the start) for each of ``lams`` (largest first), stopped at the first
    fit that holds out no better than BLENDED_FLAT below the best before it. Returns (the largest
    lambda held out within BLENDED_FLAT of the least error, the lambdas tried, their errors, that
    lambda's fit, the fit it started from)."""
    tried: List[float] = []
    errs: List[float] = []
    fits: List[Optional[Array]] = []  # the fits still wanted: within BLENDED_FLAT of the least error, and their starts
    for lam in lams:
        fits.append(run(lam, fits[-1] if fits else None))
        tried.append(lam)
        errs.append(error(fits[-1]))
        floor = min(errs) * (1.0 + BLENDED_FLAT)
        for i in range(len(fits) - 1):  # (the least error's floor only falls: a fit dropped is never wanted)
            if not (errs[i] <= floor or errs[i + 1] <= floor):
                fits[i] = None
        if len(errs) > 1 and errs[-1] >= min(errs[:-1]) * (1.0 - BLENDED_FLAT):
            break
    k = next(i for i, e in enumerate(errs) if e <= min(errs) * (1.0 + BLENDED_FLAT))  # (the largest lambda)
    return tried[k], tried, errs, fits[k], fits[k - 1] if k > 0 else None


def _higher_step(mg: ThinPlateMG, m: Array, b: Array, x: Array, lam: float) -> Array:
    """x + SWEEP_OMEGA V (b - (diag(m) + lam R_h) x), R_h the HigherPenalty(HIGHER) form and V one
    V-cycle of ``mg`` (the thin-plate hierarchy, mirrored, set for lam): one step of the
    higher-order system from x without a hierarchy of its own (module docstring)."""
    x = x.reshape(b.shape)
    r = thin_plate_apply(x, m, lam, **mg_penalty(HigherPenalty(HIGHER)))
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


def _compiled_sweep(diag: Array, y: Array, hold: Array, rho: float, maxiter: int, threads: int
                    ) -> Tuple[float, Dict[str, Any]]:
    """_sweep's stationary branch (a diagonal data term ``diag``, the thin-plate penalty) for the
    selection signal ``y`` with the nodes ``hold`` held out, in one compiled call
    (``_core.held_out_fill_sweep``: the training term, its hierarchy, sweep_ridges' steps, the
    boundary test and the higher-order test, the same values as the Python loop; its per-step
    calls and array set-up would take a fifth of a 128^2 fill). info[HIERARCHY_KEY]: a function that
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


def _lead_solve(data: DataTerm, b: Array, maxiter: int) -> Tuple[Optional[Any], int]:
    """(the leading component's LeadSolve, or None where it is not tried; the threads of the
    sweep's hierarchy: 1 when the solve runs beside the sweep on one thread each, the team of
    each side when it runs on a thread of its own, else 0) for a fill choosing lambda on a
    diagonal data term (module docstring, "Threads and devices"): a solve of the component ``b`` at the
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


def _on_device(data: DataTerm, maxiter: int) -> bool:
    """Whether a fill with lambda held out runs on a CUDA device (module docstring, "Threads and devices"): a
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
    mixed = mix_planes(planes, basis)
    count = (float(diag.sum()) if data.total is None else data.total) if C > 1 else 1.0
    y, lead = selection_signal(planes, count, moments, basis, mixed[0])
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
    clipped = unmix(W, basis.T, out, value_range)
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
