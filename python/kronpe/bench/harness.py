"""The engine of ``kronpe bench``: cases, interleaved timing, the machine's reference rates.

A :class:`Case` is one comparison (a group of the table): inputs built once by ``setup``, then
every :class:`Method` (kronpe's and its peers') run on them. :func:`measure` calls each method
once to warm up and checks its result (``Case.check``: an ``AssertionError`` marks the row as
wrong, never silently timed), then times the methods in interleaved rounds (round r runs every
method once, in an order rotated by r), so that every method sees the same load on a shared
machine; before each timed call the harness waits (``settle``) until no other thread of the
process is running, at most SETTLE_SECONDS (0.3 s; env ``KRONPE_BENCH_SETTLE``; a plain sleep of
that long where /proc/self/task is not there), so that the threads the previous method left
spinning have gone to sleep: OpenBLAS's workers spin ~0.1 s after a threaded call (torch's about
a tenth of that), and a method timed among them is timed against the previous method's threads
(a 32^3 chain takes four times as long right after the peers' calls). After the wait, a method
whose first call took less than WARM_SECONDS (50 ms) is called once more, untimed, just before its
timed call: the wait lets thread pools fall asleep, and waking them (torch's, OpenMP's) costs tiny
calls up to 10 ms. A round of a method faster than ROUND_SECONDS (2 ms) once warm (the fastest
of three calls after the first, which pays for plans and pools) times a batch of calls back to
back, as many as make up about ROUND_SECONDS (at most MAX_BATCH), and records their mean:
one call of 50 us is moved by a few microseconds of anything else the machine does, a batch of
40 much less (not with --flush, where every call starts from evicted caches). Every method,
kronpe's and the peers', gets the same treatment, outside its timing. The statistics are those
of pytest-benchmark (min, median, mean, stddev, rounds), and the records it returns have
pytest-benchmark's layout (``group``, ``name``, ``stats``, ``extra_info``), so
``benches/report.py`` and ``--compare`` read both. Every timed call goes through :func:`timings`.

The files of ``benches/`` run the same cases under pytest-benchmark (``benches/conftest.py``).
"""
from __future__ import annotations

import contextlib
import glob
import importlib
import math
import os
import platform
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple


@dataclass
class Method:
    """One row of a case: ``fn(state)`` returns the result that ``Case.check`` judges.

    ``peer``: False for kronpe's own rows (they are compared to the best peer); ``needs``: modules
    that must import, else the row is reported as skipped."""

    name: str
    fn: Callable[[Any], Any]
    peer: bool = True
    needs: Sequence[str] = ()


@dataclass
class Case:
    """A group of the table: ``setup()`` builds the state once (a dict; ``flops`` or ``bytes`` in
    it give the work of one call, per method under ``work[method]``); ``check(state, method,
    result)`` asserts the result (it may return extra figures, e.g. a PSNR, for the row)."""

    suite: str
    group: str
    setup: Callable[[], Dict[str, Any]]
    methods: List[Method]
    check: Optional[Callable[[Dict[str, Any], str, Any], Optional[dict]]] = None
    rounds: int = 5
    quick: bool = False
    size: float = 0.0  # the x axis of the plots (elements, pixels, points)
    params: Dict[str, Any] = field(default_factory=dict)
    #: ``variant(seed)``: the state of the same case drawn with another random seed (seed 0 is
    #: ``setup``'s); with it, ``measure(seeds=n)`` scores every method on seeds 0 .. n - 1
    variant: Optional[Callable[[int], Dict[str, Any]]] = None


def missing_module(names: Sequence[str]) -> Optional[str]:
    """The first of ``names`` that does not import (any failure counts), or None."""
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # a peer that fails to import for any reason is skipped
            return name
    return None


def _stats(times: List[float]) -> dict:
    return {
        "min": min(times), "max": max(times), "median": statistics.median(times),
        "mean": statistics.fmean(times),
        "stddev": statistics.stdev(times) if len(times) > 1 else 0.0,
        "rounds": len(times), "data": list(times),
    }


def timings(fn: Callable[[], Any], rounds: int = 1, *, warmup: int = 0, batch: int = 1, cuda: Any = None,
            keep: Optional[list] = None) -> List[float]:
    """Seconds per call of ``fn()`` in each of ``rounds`` timed rounds, after ``warmup`` untimed
    calls: the timer of kronpe.bench and of ``benches/``.

    A round times ``batch`` calls back to back and divides by ``batch``. The clock is
    ``time.perf_counter``; with ``cuda`` (the torch module) it is a pair of CUDA events on torch's
    current stream, the device synchronised after the warm-up and at the end of every round: with
    ``batch`` > 1 the host's launches run behind the queued work (the device's rate), with 1 a call
    starts from an idle device (its latency, the host's part included). ``keep``: a list that
    receives each timed call's result (``batch`` 1)."""
    if keep is not None and batch != 1:
        raise ValueError(f"keep= takes the result of one call per round, got batch={batch}")
    for _ in range(warmup):
        fn()
    if cuda is not None:
        cuda.cuda.synchronize()
    out = []
    for _ in range(rounds):
        if cuda is None:
            t0 = time.perf_counter()
            for _ in range(batch):
                result = fn()
            out.append((time.perf_counter() - t0) / batch)
        else:
            start, stop = cuda.cuda.Event(enable_timing=True), cuda.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(batch):
                result = fn()
            stop.record()
            stop.synchronize()
            out.append(start.elapsed_time(stop) * 1e-3 / batch)
        if keep is not None:
            keep.append(result)
        result = None  # not held while the next round runs
    return out


def busy_marks() -> int:
    """How many times kronpe's kernels have marked the cores busy (kronpe.threads: their teams
    then shrink for a moment): recorded per row over its timed calls, so that a slow kronpe row
    says whether its threads backed off."""
    from .. import _core

    return int(_core._tuning.busy_cores()[1])


SETTLE_SECONDS = 0.3
SETTLE_POLL = 0.002
WARM_SECONDS = 0.05
ROUND_SECONDS = 0.002
MAX_BATCH = 64
FLUSH_MIN_BYTES = 64 << 20  # a flush writes at least this much (where /sys names no cache)


def settle_seconds() -> float:
    """The longest wait before a timed call (module docstring): ``KRONPE_BENCH_SETTLE`` (seconds)
    if set, else SETTLE_SECONDS."""
    value = os.environ.get("KRONPE_BENCH_SETTLE")
    if value is None:
        return SETTLE_SECONDS
    try:
        out = float(value)
    except ValueError:
        raise ValueError(f"KRONPE_BENCH_SETTLE must be a number of seconds, got {value!r}") from None
    if not out >= 0:
        raise ValueError(f"KRONPE_BENCH_SETTLE must be >= 0 seconds, got {value!r}")
    return out


def running_threads() -> Optional[int]:
    """How many other threads of this process are running now (Linux: state R in
    /proc/self/task/*/stat); None where that cannot be read."""
    import threading

    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    me, n = str(threading.get_native_id()), 0
    for t in tasks:
        if t == me:
            continue
        try:
            with open(f"/proc/self/task/{t}/stat") as f:
                stat = f.read()
        except OSError:  # the thread ended meanwhile
            continue
        n += stat[stat.rindex(")") + 2:].startswith("R")
    return n


def settle(limit: float) -> float:
    """Wait until no other thread of this process is running, at most ``limit`` seconds (a sleep of
    ``limit`` where that cannot be seen); returns the seconds waited."""
    t0 = time.perf_counter()
    if running_threads() is None:
        time.sleep(limit)
    else:
        while running_threads() and time.perf_counter() - t0 < limit:
            time.sleep(SETTLE_POLL)
    return time.perf_counter() - t0


def cache_bytes() -> int:
    """The bytes a flush writes: twice the largest CPU cache the system reports (the last level,
    shared or not, /sys/devices/system/cpu/cpu*/cache), at least FLUSH_MIN_BYTES."""
    largest = 0
    for path in glob.glob("/sys/devices/system/cpu/cpu*/cache/index*/size"):
        try:
            with open(path) as f:
                text = f.read().strip().upper()
        except OSError:  # pragma: no cover - a cache entry that vanished
            continue
        unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            largest = max(largest, int(digits) * unit)
    return max(2 * largest, FLUSH_MIN_BYTES)


_FLUSH: Dict[str, Any] = {}


def flush_caches() -> int:
    """Evict the CPU caches: read and write a buffer of ``cache_bytes()`` (every line loaded and
    left dirty, so what a method touched before is gone from every level). Returns its size."""
    import numpy as np

    buf = _FLUSH.get("buffer")
    if buf is None:
        buf = _FLUSH["buffer"] = np.zeros(cache_bytes() // 8, np.float64)
    buf += 1.0
    return buf.nbytes


def thread_settings() -> Dict[str, Any]:
    """The threads each library would use now: kronpe's kernels, the BLAS libraries loaded
    (threadpoolctl when installed, else the one kronpe calls), torch's pool where torch is loaded."""
    import sys

    import kronpe

    out: Dict[str, Any] = {"kronpe": kronpe.get_num_threads()}
    blas = [b for b in _blas_libraries() if isinstance(b, dict) and "num_threads" in b]
    if blas:
        for b in blas:
            out[f"{b.get('internal_api')} {b.get('version')}"] = b.get("num_threads")
    else:
        from .._adapters import blas as _blas

        out["blas"] = _blas.blas_threads()
    torch = sys.modules.get("torch")
    if torch is not None:
        out["torch"] = torch.get_num_threads()
    return out


def thread_setting(text: str) -> Optional[int]:
    """A ``--threads`` item: a positive count, or ``default`` (None: the libraries' own)."""
    if text == "default":
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"--threads: each setting must be a positive integer or 'default', got {text!r}")
    return int(text)


@contextlib.contextmanager
def threads_limited(n: Optional[int]):
    """Every library at ``n`` threads inside the block: kronpe's kernels, each BLAS and OpenMP
    runtime (threadpoolctl where installed, else the BLAS that kronpe calls) and torch's pool
    where torch is installed, SciPy's BLAS and torch loaded first; restored afterwards. None: nothing changed (the defaults the
    process started with, i.e. its environment's OMP_NUM_THREADS and the like)."""
    if n is None:
        yield
        return
    import kronpe
    from .._adapters import blas as _blas

    # every library a row or the GEMM probe may call is loaded first: one loaded inside the
    # block would run at its default threads (SciPy's OpenBLAS is a library of its own)
    importlib.import_module("scipy.linalg.blas")
    torch = None if missing_module(["torch"]) else importlib.import_module("torch")
    before = kronpe.get_num_threads()
    torch_before = torch.get_num_threads() if torch is not None else None
    with contextlib.ExitStack() as stack:
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:  # threadpoolctl is optional: the BLAS kronpe calls, then back
            blas_before = _blas.blas_threads()
            if isinstance(blas_before, int) and _blas.set_blas_threads(n):
                stack.callback(_blas.set_blas_threads, blas_before)
        else:
            stack.enter_context(threadpool_limits(limits=n))
        kronpe.set_num_threads(n)
        stack.callback(kronpe.set_num_threads, before)
        if torch is not None:
            torch.set_num_threads(n)
            stack.callback(torch.set_num_threads, torch_before)
        yield


def t_interval(values: Sequence[float], level: float = 0.95) -> Tuple[float, float, float]:
    """(mean, low, high): the mean of ``values`` with its two-sided Student-t interval (NaN
    bounds with fewer than two values)."""
    n = len(values)
    mean = statistics.fmean(values)
    if n < 2:
        return mean, math.nan, math.nan
    from scipy import stats

    half = stats.t.ppf(0.5 + level / 2, n - 1) * statistics.stdev(values) / math.sqrt(n)
    return mean, mean - half, mean + half


def _score_seeds(case: Case, live: List["Method"], records: Dict[str, dict], seeds: int) -> None:
    """Every live method scored (untimed) on the case's seeds 1 .. seeds - 1 as well: each record
    gets ``<figure>_seeds`` (seed 0 first) for every number its check returned on seed 0."""
    per: Dict[str, List[dict]] = {m.name: [records[m.name]["extra_info"]] for m in live}
    for seed in range(1, seeds):
        state = case.variant(seed)
        for m in live:
            try:
                extra = case.check(state, m.name, m.fn(state)) or {}
            except Exception as exc:  # scored on fewer seeds, and the record says why
                records[m.name]["extra_info"].setdefault("seed_failures", []).append(
                    f"seed {seed}: {type(exc).__name__}: {' '.join(str(exc).split())[:120]}")
                continue
            per[m.name].append(extra)
        del state
    for m in live:
        info = records[m.name]["extra_info"]
        for key in [k for k, v in info.items() if k in ("psnr", "rmse") and isinstance(v, float)]:
            info[f"{key}_seeds"] = [float(d[key]) for d in per[m.name] if key in d]


def measure(case: Case, rounds: Optional[int] = None, flush: bool = False, threads: Optional[int] = None,
            seeds: int = 1) -> List[dict]:
    """Records (pytest-benchmark's layout) of every method of ``case``, timed interleaved.
    ``flush``: the caches evicted (``flush_caches``) right before every timed call; the records
    say ``caches``: "flushed" or "warm", and the threads of every library (``thread_settings``).
    ``threads``: every library limited to that many threads for the warm-up and the timed calls
    (``threads_limited``; None: as the process runs). ``seeds``: a case with a ``variant`` is
    also scored, untimed, on that many random draws in all (``psnr_seeds`` in its records)."""
    state = case.setup()
    with threads_limited(threads):
        return _measure(case, state, rounds, flush, threads, seeds)


def batch_size(seconds: float) -> int:
    """Calls per timed round of a method whose warm call took ``seconds``: about ROUND_SECONDS
    of them, at least 1, at most MAX_BATCH."""
    if not seconds > 0:
        return MAX_BATCH
    return max(1, min(MAX_BATCH, math.ceil(ROUND_SECONDS / seconds)))


def _measure(case: Case, state: Dict[str, Any], rounds: Optional[int], flush: bool, setting: Optional[int],
             seeds: int) -> List[dict]:
    threads = thread_settings()
    live: List[Method] = []
    records: Dict[str, dict] = {}
    short = set()  # methods called once more, untimed, right before each timed call
    batch: Dict[str, int] = {}  # calls per timed round
    for m in case.methods:
        rec = {"group": case.group, "name": m.name, "suite": case.suite, "params": dict(case.params),
               "extra_info": {"method": m.name, "peer": m.peer, "size": case.size,
                              "caches": "flushed" if flush else "warm", "threads": dict(threads),
                              "thread_setting": "default" if setting is None else setting}}
        work = state.get("work", {}).get(m.name, {})
        for key in ("flops", "bytes"):
            value = work.get(key, state.get(key))
            if value:
                rec["extra_info"][key] = float(value)
        records[m.name] = rec
        missing = missing_module(m.needs)
        if missing:
            rec["skipped"] = f"{missing} does not import"
            continue
        try:
            first: List[Any] = []
            took = timings(lambda: m.fn(state), keep=first)[0]  # warm-up, and the result to check
            result = first.pop()
            if took < WARM_SECONDS:
                short.add(m.name)
        except Exception as exc:  # a peer that fails here (version, memory) is reported, not fatal
            rec["skipped"] = f"failed: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
            continue
        if case.check is not None:
            try:
                extra = case.check(state, m.name, result)
            except AssertionError as exc:
                rec["skipped"] = f"wrong result: {exc}"
                continue
            rec["extra_info"].update(extra or {})
        del result
        # the fastest of three more calls, warm, sizes the batch: a first call pays for plans,
        # pools and caches (kronpe's, torch's, pyfastkron's: 1-10 ms where the next takes 0.1-1)
        if took < WARM_SECONDS and not flush:
            batch[m.name] = batch_size(min([took] + timings(lambda: m.fn(state), 3)))
        live.append(m)
    times: Dict[str, List[float]] = {m.name: [] for m in live}
    marks: Dict[str, int] = {m.name: 0 for m in live}
    n = max(1, case.rounds if rounds is None else rounds)
    limit = settle_seconds()
    for r in range(n):
        for i in range(len(live)):
            m = live[(i + r) % len(live)]
            if limit > 0 and len(live) > 1:
                settle(limit)
                if m.name in short:
                    m.fn(state)
            if flush:
                flush_caches()
            before = busy_marks()
            times[m.name] += timings(lambda: m.fn(state), batch=batch.get(m.name, 1))
            marks[m.name] += busy_marks() - before
    for name, ts in times.items():
        records[name]["stats"] = _stats(ts)
        records[name]["extra_info"]["busy_marks"] = marks[name]
        records[name]["extra_info"]["calls_per_round"] = batch.get(name, 1)
    if seeds > 1 and case.variant is not None and case.check is not None:
        _score_seeds(case, live, records, seeds)
    return [records[m.name] for m in case.methods]


# ---- the machine ----------------------------------------------------------------------------------


def gemm_rate(n: int = 2048, rounds: int = 5, only: Optional[str] = None) -> dict:
    """The machine's float32 GEMM rate (flop/s of the fastest round) by every GEMM at hand:
    NumPy's matmul, the BLAS that kronpe calls (SciPy's sgemm), kronpe's own (one mode product
    through its chain GEMM) and torch.matmul where torch imports; the fastest is the reference.
    ``only``: that one of them (a probe repeating the fastest)."""
    import numpy as np
    from scipy.linalg import blas

    import kronpe

    rng = np.random.default_rng(3)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    af, bf = np.asfortranarray(a), np.asfortranarray(b)
    fns = {"numpy.matmul": lambda: np.matmul(a, b), "scipy sgemm": lambda: blas.sgemm(1.0, af, bf),
           "kronpe": lambda: kronpe.multi_mode_product(b, [a], modes=[0])}
    if missing_module(["torch"]) is None:
        import torch

        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        fns["torch.matmul"] = lambda: torch.matmul(ta, tb)
    if only is not None:
        fns = {only: fns[only]}
    out = {name: 2.0 * n**3 / min(timings(fn, rounds, warmup=1)) for name, fn in fns.items()}
    out["best"] = max(out.values())
    out["fastest"] = max(fns, key=lambda k: out[k])
    out["n"] = n
    return out


def gpu_gemm_rate(n: int = 8192, rounds: int = 5) -> Optional[float]:
    """cuBLAS's float32 GEMM rate on torch's current GPU (flop/s of the fastest round, TF32 off,
    timed with CUDA events), the reference of the CUDA rows; None without a GPU."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        g = torch.Generator(device="cuda").manual_seed(3)
        a = torch.randn(n, n, device="cuda", generator=g)
        b = torch.randn(n, n, device="cuda", generator=g)
        return 2.0 * n**3 / min(timings(lambda: torch.matmul(a, b), rounds, warmup=1, cuda=torch))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32


def copy_bandwidth(nbytes: int = 64 << 20, rounds: int = 5) -> float:
    """Bytes per second (read + write) of a NumPy copy of ``nbytes``, fastest round."""
    import numpy as np

    a = np.ones(nbytes // 4, np.float32)
    b = np.empty_like(a)
    return 2.0 * a.nbytes / min(timings(lambda: np.copyto(b, a), rounds, warmup=1))


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _blas_libraries() -> List[dict]:
    """The BLAS libraries loaded (threadpoolctl when installed; else NumPy's config)."""
    try:
        from threadpoolctl import threadpool_info

        keys = ("internal_api", "version", "architecture", "num_threads", "prefix")
        return [{k: i.get(k) for k in keys} for i in threadpool_info() if i.get("user_api") == "blas"]
    except Exception:  # threadpoolctl is optional
        pass
    try:
        import numpy as np

        cfg = np.show_config(mode="dicts")
        return [{"numpy": cfg.get("Build Dependencies", {}).get("blas", {})}]
    except Exception:
        return []


def machine_info() -> dict:
    """CPU, cores, BLAS, thread settings and versions of what the run measured."""
    import numpy as np
    import scipy

    import kronpe

    versions = {"python": platform.python_version(), "numpy": np.__version__, "scipy": scipy.__version__,
                "kronpe": kronpe.__version__}
    for mod in ("torch", "tensorly", "pyfastkron", "skimage", "matplotlib"):
        try:
            module = __import__(mod)
            versions[mod] = getattr(module, "__version__", "?")
        except Exception:
            versions[mod] = None
    try:
        load = os.getloadavg()
    except OSError:  # pragma: no cover - not on every platform
        load = None
    return {
        "cpu": _cpu_model(),
        "machine": platform.machine(),
        "system": platform.platform(),
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "blas": _blas_libraries(),
        "kronpe_build": {k: str(v) for k, v in kronpe.build_info().items()},
        "env": {k: os.environ[k] for k in sorted(os.environ)
                if k.startswith(("OMP_", "OPENBLAS_", "MKL_", "KRONPE_"))},
        "versions": versions,
        "loadavg_at_start": load,
    }
