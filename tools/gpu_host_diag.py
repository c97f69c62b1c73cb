"""Diagnostics for the GPU machine (issue 14), printed as short tables:

1. ``threads``: the scattered fit of benches (25% of the 512^2 astronaut, host arrays) at 1 to 16
   OpenMP threads: median total, and per compiled kernel (pcg, the held-out sweep, thin_plate, the
   rest) from one cProfile run;
2. ``pairs``: two such fits at once in two Python threads (the kernels release the GIL), at t
   threads each, against one alone: do two teams share the cores without slowing each other?
3. ``gemm``: the four layouts of one chain step as torch.mm calls on CUDA float32 (TF32 off), for
   the steps of the bench's chains (FrontKeep C = A X, FrontRotate C = X^T A^T with X (n, rest);
   BackKeep C = X A^T, BackRotate C = A X^T with X (rest, n)), timed with CUDA events;
4. ``busy``: the busy marks (kronpe/threads.h's back-off) the fits add per thread count;
5. ``spec``: the leading component's final solve beside the held-out sweep at 512^2, each side
   on a team of 2, 4 or 8 threads, against each alone;
6. ``overhead``: host time per call of kronpe's CUDA chain (64^3 x 3) and of its parts, against
   torch's tensordot chain, torch.mm and torch.empty;
7. ``rule``: the smoothing kernels' team rule beyond two threads (one thread per 2^k nodes,
   ``_core._tuning.set_nodes_per_extra_thread``; k from DIAG_RULES, default 15,16,17) against the thread
   counts of DIAG_COUNTS: the scattered fit's median ms and the busy marks added, fits interleaved
   over the pairs (rule, threads) in 7 rounds;
8. ``lead``: the leading component's solve beside the sweep on large grids (smooth.py's
   SPECULATE_TEAM) against the fill without it, interleaved in 8 rounds per thread count of
   DIAG_COUNTS: the scattered fit's median ms, and the largest difference of the predictions;
9. ``parts``: the scattered fit per thread count of DIAG_COUNTS with the BLAS as it is and with
   the BLAS on one thread (threadpoolctl), interleaved in 8 rounds (median ms), then one
   cProfile run per count: the compiled calls by their own time (ms);
10. ``fit``: ``GridPlan.fit`` of one 256^2 CUDA image (K = 256, the bench's 0.5 ms row), wall time
   per call (each call ends in its one synchronisation), and where the host's time goes: a
   cProfile of 300 calls, the top functions by their own time.

    python tools/gpu_host_diag.py [threads,pairs,busy,spec,rule,lead,parts,gemm,overhead,fit]
"""
from __future__ import annotations

import cProfile
import os
import pstats
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import kronpe  # noqa: E402
from kronpe.bench.scattered import kronpe_points, task_inputs  # noqa: E402

COUNTS = tuple(int(c) for c in os.environ.get("DIAG_COUNTS", "1,2,3,4,6,8,12,16").split(","))


def _median_ms(fn, n=5):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts)) * 1e3


def threads(s):
    print("## fit_points, 25% of 512^2 astronaut: threads, median ms, per kernel (cProfile ms)")
    for t in COUNTS:
        kronpe.set_num_threads(t)
        kronpe_points(s)
        total = _median_ms(lambda: kronpe_points(s))
        pr = cProfile.Profile()
        pr.enable()
        kronpe_points(s)
        pr.disable()
        st = pstats.Stats(pr).stats
        by = {"pcg": 0.0, "held_out_fill_sweep": 0.0, "thin_plate": 0.0}
        whole = 0.0
        for (_, _, name), (_, _, tt, _, _) in st.items():
            whole += tt
            for k in by:
                if name.endswith(f"_core.{k}>") or f"'{k}' of" in name:
                    by[k] += tt
        rest = whole - sum(by.values())
        print(f"threads {t:2d}: {total:6.1f} ms | pcg {by['pcg'] * 1e3:5.1f} sweep "
              f"{by['held_out_fill_sweep'] * 1e3:5.1f} thin_plate {by['thin_plate'] * 1e3:5.1f} rest {rest * 1e3:5.1f}")
    kronpe.set_num_threads(None)


def pairs(s):
    print("## two fits at once (two Python threads) against one: t threads each, median ms")
    for t in (2, 4, 6, 8):
        kronpe.set_num_threads(t)
        one = _median_ms(lambda: kronpe_points(s))

        def two():
            th = [threading.Thread(target=kronpe_points, args=(s,)) for _ in range(2)]
            for x in th:
                x.start()
            for x in th:
                x.join()

        two()
        both = _median_ms(two)
        print(f"t={t}: one {one:6.1f} ms, two at once {both:6.1f} ms ({both / one:.2f}x one)")
    kronpe.set_num_threads(None)


def busy(s):
    """Whether the kernels' back-off (kronpe/threads.h: late teams mark the cores busy, the
    default teams shrink) fires during the fit: median ms and the busy marks added, per thread count."""
    from kronpe import _core

    print("## busy marks during 7 fits: threads, median ms, marks added, busy at the end")
    for t in COUNTS:
        kronpe.set_num_threads(t)
        kronpe_points(s)
        m0 = _core._tuning.busy_cores()[1]
        ms = _median_ms(lambda: kronpe_points(s), 7)
        now, m1 = _core._tuning.busy_cores()
        print(f"threads {t:2d}: {ms:6.1f} ms, {m1 - m0} marks, busy {now}")
    kronpe.set_num_threads(None)


def rule(s):
    """The team rule's exponent k (one thread per 2^k nodes beyond two) against the thread counts."""
    from kronpe import _core

    rules = tuple(int(k) for k in os.environ.get("DIAG_RULES", "15,16,17").split(","))
    pairs = [(k, t) for k in rules for t in COUNTS]
    times = {p: [] for p in pairs}
    marks = dict.fromkeys(pairs, 0)
    previous = _core._tuning.set_nodes_per_extra_thread(1 << rules[0])
    try:
        for r in range(8):
            for k, t in pairs:
                _core._tuning.set_nodes_per_extra_thread(1 << k)
                kronpe.set_num_threads(t)
                m0 = _core._tuning.busy_cores()[1]
                t0 = time.perf_counter()
                kronpe_points(s)
                if r:  # the first round warms up
                    times[(k, t)].append(time.perf_counter() - t0)
                marks[(k, t)] += _core._tuning.busy_cores()[1] - m0
    finally:
        _core._tuning.set_nodes_per_extra_thread(previous)
        kronpe.set_num_threads(None)
    print("## team rule: one thread per 2^k nodes beyond two; fit_points 25% astronaut, median ms (busy marks)")
    print("k   " + "".join(f"{t:>14d}" for t in COUNTS))
    for k in rules:
        cells = "".join(f"{np.median(times[(k, t)]) * 1e3:8.1f} ({marks[(k, t)]:3d})" for t in COUNTS)
        print(f"{k:<4d}{cells}")


def _interleaved(s, variants, rounds=8):
    """(times[(variant, threads)] in seconds, the last output per pair) of the scattered fit for
    every thread count of COUNTS and every variant, in `rounds` rounds (the first one warms up), the
    variants' order reversed every other round; variants[v]() is a context manager that sets
    variant v up and undoes it."""
    times = {(v, t): [] for v in variants for t in COUNTS}
    outs = {}
    try:
        for r in range(rounds):
            for t in COUNTS:
                kronpe.set_num_threads(t)
                for v, ctx in (list(variants.items()) if r % 2 else list(variants.items())[::-1]):
                    with ctx():
                        t0 = time.perf_counter()
                        outs[(v, t)] = kronpe_points(s)
                        if r:
                            times[(v, t)].append(time.perf_counter() - t0)
    finally:
        kronpe.set_num_threads(None)
    return times, outs


def lead(s):
    """The large grids' speculation (smooth.SPECULATE_TEAM threads per side) against none."""
    import contextlib

    from kronpe.solvers import smooth

    @contextlib.contextmanager
    def team(k):
        before = smooth.SPECULATE_TEAM
        smooth.SPECULATE_TEAM = k
        try:
            yield
        finally:
            smooth.SPECULATE_TEAM = before

    times, preds = _interleaved(s, {"beside": contextlib.nullcontext, "without": lambda: team(1 << 30)})
    print("## the lead solve beside the sweep on large grids: fit_points 25% astronaut, median ms")
    for t in COUNTS:
        diff = float(np.max(np.abs(preds[("beside", t)] - preds[("without", t)])))
        print(f"threads {t:2d}: beside {np.median(times[('beside', t)]) * 1e3:6.1f}, without "
              f"{np.median(times[('without', t)]) * 1e3:6.1f} ms; max |difference| {diff:.2e}")


def parts(s):
    """Where the fit's time goes per thread count, and whether the BLAS's threads cost it."""
    import contextlib

    variants = {"blas as is": contextlib.nullcontext}
    try:
        from threadpoolctl import threadpool_limits

        variants["blas 1 thread"] = lambda: threadpool_limits(1, "blas")
    except ImportError:
        pass
    times, _ = _interleaved(s, variants)
    print("## fit_points 25% astronaut, median ms: " + ", ".join(variants))
    for t in COUNTS:
        print(f"threads {t:2d}: " + ", ".join(f"{np.median(times[(v, t)]) * 1e3:6.1f}" for v in variants))
    try:
        for t in COUNTS:
            kronpe.set_num_threads(t)
            pr = cProfile.Profile()
            pr.enable()
            kronpe_points(s)
            pr.disable()
            st = sorted(((tt, name) for (_, _, name), (_, _, tt, _, _) in pstats.Stats(pr).stats.items()), reverse=True)
            print(f"threads {t:2d} own ms: " + "; ".join(f"{n.strip('<>').replace('built-in method ', '')} {tt * 1e3:.1f}"
                                                     for tt, n in st[:7]))
    finally:
        kronpe.set_num_threads(None)


def spec(s):
    """What running the leading component's final solve (LeadSolve, both stages) beside the
    held-out sweep would gain at 512^2 on many cores (smooth.py's "Speculation" runs it only up to
    SPECULATE_MAX_NODES, each side on one thread): the sweep alone, the solve alone, and both at
    once (the solve on its own std::thread, LeadSolve.start), each side's kernels on `team`
    threads; medians of 5, ms."""
    import math

    from kronpe import _core
    from kronpe.solvers import smooth
    from kronpe.solvers.multigrid import chebyshev_lmax

    got = {}
    original = smooth.fit

    def capture(data, rhs, *args, **kw):
        got.setdefault("args", (data, rhs))
        return original(data, rhs, *args, **kw)

    smooth.fit = capture
    try:
        kronpe_points(s)
    finally:
        smooth.fit = original
    data, rhs = got["args"]
    planes = smooth._as_planes(rhs)
    moments = smooth._moments(planes)
    basis = smooth.principal_basis(planes, moments)
    b = np.ascontiguousarray(smooth._mix_planes(planes, basis)[0], np.float32)
    maxiter = 20 * sum(data.shape)
    D = len(data.shape)
    degree, alpha = smooth.DIAGONAL_SMOOTHER

    def lead(team):
        return _core.LeadSolve32(np.ascontiguousarray(data.diag, np.float32), b,
                                 data.rho * 10.0 ** (-smooth.INTERPOLATION_EXPONENT), degree, chebyshev_lmax(D, 2),
                                 alpha, smooth.COARSEST, team, smooth.TOL_INTERPOLATING, maxiter,
                                 smooth.HIGHER if D == 2 else 0.0)

    print(f"## the sweep beside the leading component's solve, grid {data.shape} ({math.prod(data.shape)} nodes)")
    for team in (2, 4, 8):
        kronpe.set_num_threads(team)

        def sweep():
            smooth.choose_ridge(data, planes, maxiter, moments, basis, team)

        def solve():
            sp = lead(team)
            sp.finish(2)

        def both():
            sp = lead(team)
            sp.start()
            sweep()
            sp.finish(2)

        sweep(), solve(), both()
        print(f"team {team}: sweep {_median_ms(sweep):6.1f}, solve {_median_ms(solve):6.1f}, "
              f"both at once {_median_ms(both):6.1f} ms")
    kronpe.set_num_threads(None)


def gemm():
    import torch

    if not (torch.cuda.is_available() and kronpe.cuda.is_available()):
        print("## gemm: needs CUDA torch and kronpe's CUDA kernels (skipped)")
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    print("## chain steps as torch.mm, float32, median us (CUDA events, 50 reps)")
    # (m rows of the chain matrix, n contracted, rest): the steps of bench_cuda's chains
    shapes = [(256, 512, 32768), (256, 512, 16384), (256, 256, 65536), (64, 64, 262144), (128, 64, 4096)]
    g = torch.Generator(device="cuda").manual_seed(0)

    def t_us(fn):
        for _ in range(5):
            fn()
        st = [torch.cuda.Event(enable_timing=True) for _ in range(51)]
        for e in st[:1]:
            e.record()
        times = []
        for i in range(50):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            times.append((a, b))
        torch.cuda.synchronize()
        return float(np.median([a.elapsed_time(b) for a, b in times])) * 1e3

    for m, n, rest in shapes:
        A = torch.randn(m, n, device="cuda", generator=g)
        Xf = torch.randn(n, rest, device="cuda", generator=g)  # contracted axis in front
        Xb = torch.randn(rest, n, device="cuda", generator=g)  # contracted axis at the back
        r = {
            "FrontKeep": t_us(lambda: torch.mm(A, Xf)),
            "FrontRotate": t_us(lambda: torch.mm(Xf.t(), A.t())),
            "BackKeep": t_us(lambda: torch.mm(Xb, A.t())),
            "BackRotate": t_us(lambda: torch.mm(A, Xb.t())),
        }
        flops = 2.0 * m * n * rest
        print(f"m={m} n={n} rest={rest}: " + ", ".join(f"{k} {v:7.1f} us ({flops / v / 1e6:5.1f} TF)" for k, v in r.items()))
        # kronpe's own single-step chain of the same shapes (order K: the planner's layout)
        for name, X, mode in (("front", Xf, 0), ("back", Xb, 1)):
            tk = t_us(lambda: kronpe.multi_mode_product(X, [A], [mode], order="K"))
            print(f"    kronpe mode {mode} ({name}) {tk:7.1f} us")


def overhead():
    """Host time per call (no synchronisation inside the loop: the GPU work of these calls is
    shorter than their launch), microseconds: kronpe's CUDA chain and its parts against torch."""
    import torch

    if not (torch.cuda.is_available() and kronpe.cuda.is_available()):
        print("## overhead: needs CUDA torch and kronpe's CUDA kernels (skipped)")
        return
    from kronpe import _core
    from kronpe import torch as _kronpe_torch  # noqa: F401  (registers the ops; binds no local `kronpe`)
    from kronpe._adapters import arrays as _arrays
    from kronpe._adapters import cuda as _cuda

    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator(device="cuda").manual_seed(0)
    T = torch.randn(64, 64, 64, device="cuda", generator=g)
    mats = [torch.randn(64, 64, device="cuda", generator=g) for _ in range(3)]
    X = torch.randn(64, 4096, device="cuda", generator=g)
    modes = [0, 1, 2]
    at = _arrays.where(T)
    tb = _arrays.describe(T, "T", at)
    mbs = [_arrays.describe(a, "m", at) for a in mats]
    out = torch.empty(64, 64, 64, device="cuda")
    ob = _arrays.describe(out, "out", at)
    nbytes = _core.cuda_multi_mode_workspace(tb, mbs, modes, True)
    _keep, ws = _arrays.device_workspace(T, nbytes, at)
    mb1 = [_arrays.describe(mats[0], "m", at)]
    xb = _arrays.describe(X, "X", at)
    o1 = torch.empty(64, 4096, device="cuda")
    o1b = _arrays.describe(o1, "o", at)

    def host_us(fn, n=400):
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        best = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            best.append((time.perf_counter() - t0) / n)
            torch.cuda.synchronize()
        return float(np.median(best)) * 1e6

    rows = {
        "kronpe.multi_mode_product 64^3 x 3": lambda: kronpe.multi_mode_product(T, mats, modes),
        "kronpe.torch.multi_mode_product 64^3 x 3": lambda: kronpe.torch.multi_mode_product(T, mats, modes),
        "tensordot chain 64^3 x 3": lambda: torch.tensordot(torch.tensordot(torch.tensordot(
            T, mats[0], dims=([0], [1])), mats[1], dims=([0], [1])), mats[2], dims=([0], [1])),
        "torch.mm 64x64 @ 64x4096": lambda: torch.mm(mats[0], X),
        "torch.empty 64^3": lambda: torch.empty(64, 64, 64, device="cuda"),
        "_cuda.multi_mode_product (adapter)": lambda: _cuda.multi_mode_product(T, mats, (0, 1, 2), "K"),
        "where(T)": lambda: _arrays.where(T),
        "describe(T, at)": lambda: _arrays.describe(T, "T", at),
        "_core.cuda_multi_mode_workspace": lambda: _core.cuda_multi_mode_workspace(tb, mbs, modes, True),
        "device_workspace": lambda: _arrays.device_workspace(T, nbytes, at),
        "_core.cuda_multi_mode_product 3 GEMMs": lambda: _core.cuda_multi_mode_product(tb, mbs, modes, ob, True, ws),
        "_core.cuda_multi_mode_product 1 GEMM": lambda: _core.cuda_multi_mode_product(xb, mb1, [0], o1b, True, None),
        "torch.cuda.current_stream": lambda: torch.cuda.current_stream(T.device),
    }
    print("## host time per call, us (median of 5 loops of 400 calls)")
    for name, fn in rows.items():
        print(f"  {name:<44s} {host_us(fn):8.1f}")


def fit():
    """GridPlan.fit of a CUDA tensor (bench_cuda.py's one-image row): its wall time per call and a
    cProfile of the host's share (the GPU's work is a few microseconds; the target is 0.5 ms)."""
    import torch

    if not (torch.cuda.is_available() and kronpe.cuda.is_available()):
        print("## fit: needs CUDA torch and kronpe's CUDA kernels (skipped)")
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    x = (np.arange(256) + 0.5) / 256
    plan = kronpe.GridPlan([x, x], kronpe.Gaussian(256, 0.0025), ridge=1e-6)
    one = torch.rand(256, 256, device="cuda", generator=torch.Generator(device="cuda").manual_seed(0))
    for _ in range(20):
        plan.fit(one)
    torch.cuda.synchronize()
    loops = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(200):
            plan.fit(one)
        loops.append((time.perf_counter() - t0) / 200)
    print(f"## GridPlan.fit 256^2 -> K=256 on CUDA: {np.median(loops) * 1e3:.3f} ms per call "
          f"(median of 5 loops of 200; min {min(loops) * 1e3:.3f})")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(300):
        plan.fit(one)
    prof.disable()
    torch.cuda.synchronize()
    pstats.Stats(prof).sort_stats("tottime").print_stats(18)


SECTIONS = {"threads": threads, "pairs": pairs, "busy": busy, "spec": spec, "rule": rule, "lead": lead,
            "parts": parts, "gemm": gemm, "overhead": overhead, "fit": fit}
FITTING = {"threads", "pairs", "busy", "spec", "rule", "lead", "parts"}  # these take the fit's inputs

if __name__ == "__main__":
    which = (sys.argv[1] if len(sys.argv) > 1 else "threads,pairs,gemm").split(",")
    s = task_inputs("astronaut", "scattered") if FITTING & set(which) else None
    for name, section in SECTIONS.items():
        if name in which:
            section(s) if name in FITTING else section()
