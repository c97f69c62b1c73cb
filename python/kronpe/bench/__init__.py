"""The benchmark harness behind ``kronpe bench``: kronpe against its peers, in the same run.

Suites (each a module with ``cases()``): ``chains`` (mode-n products), ``fits`` (closed-form grid
fits, fit + predict against splines), ``blend`` (blending-matrix products against the copy
bandwidth), ``scattered`` (fit_points and fit_grid(mask=) against griddata, RBF and
inpaint_biharmonic), ``field`` (kronpe.grid of scattered samples of smooth fields against griddata,
RBFInterpolator and verde), ``torch`` (Adam steps of kronpe.torch against the official formulation; needs
torch), ``cuda`` (mode-n chains on the GPU; only where torch sees one).

Studies (each a module with ``run()``, ``markdown()``; they run only when named): ``validation``
(the fill's tuned defaults on photographs and fields they were not tuned on: PSNR margins with
95% intervals, minutes long).

>>> from kronpe import bench
>>> doc = bench.run(["chains"], quick=True, match="D=2")      # doctest: +SKIP
>>> print(bench.report.markdown(doc))                          # doctest: +SKIP
"""
from __future__ import annotations

import datetime
import re
from typing import Callable, Dict, List, Optional, Sequence

from . import report
from .harness import Case, Method, cache_bytes, copy_bandwidth, gemm_rate, gpu_gemm_rate, machine_info, measure

__all__ = ["STUDIES", "SUITES", "Case", "Method", "cases", "measure", "report", "run", "study"]


def _suite(module: str) -> Callable[[], List[Case]]:
    def load() -> List[Case]:
        import importlib

        return importlib.import_module(f"{__name__}.{module}").cases()

    return load


def _torch_cases() -> List[Case]:
    from .harness import missing_module

    return [] if missing_module(["torch"]) else _suite("torch_steps")()


def _cuda_cases() -> List[Case]:
    from .chains import cuda_cases

    return cuda_cases()


#: suite name -> cases() (the order of the report)
SUITES: Dict[str, Callable[[], List[Case]]] = {
    "chains": _suite("chains"),
    "fits": _suite("fits"),
    "blend": _suite("blend"),
    "scattered": _suite("scattered"),
    "field": _suite("field"),
    "torch": _torch_cases,
    "cuda": _cuda_cases,
}

#: study name -> its module (run(quick=, match=, progress=, argv=) -> document; markdown(document)):
#: PSNR studies, not timings, outside "all suites"
STUDIES: Dict[str, str] = {"validation": f"{__name__}.validation"}


def study(name: str):
    """The module of the study ``name`` (STUDIES)."""
    import importlib
    from .._adapters import validate

    return importlib.import_module(STUDIES[validate.choice("study", name, tuple(STUDIES))])


def cases(suites: Optional[Sequence[str]] = None, quick: bool = False, match: Optional[str] = None) -> List[Case]:
    """The cases of ``suites`` (all by default); ``quick``: the quick ones only; ``match``: a
    regular expression searched in the group names."""
    from .._adapters import validate

    names = list(SUITES) if not suites else list(suites)
    for name in names:
        validate.choice("suite", name, tuple(SUITES))
    pattern = re.compile(match) if match else None
    out = []
    for name in names:
        for case in SUITES[name]():
            if quick and not case.quick:
                continue
            if pattern and not pattern.search(case.group):
                continue
            out.append(case)
    return out


def _label(setting: Optional[int]):
    """A thread setting as the records name it: its count, or "default"."""
    return "default" if setting is None else setting


#: With ``quick`` (and no ``rounds``), every case is timed in at most this many rounds: the settle
#: before each timed call (harness rule 4) waits out the peers' spinning BLAS threads, up to
#: 0.1 s a call, and at each case's full rounds those waits take the quick run past a minute on
#: two cores.
QUICK_ROUNDS = 10


def run(suites: Optional[Sequence[str]] = None, quick: bool = False, match: Optional[str] = None,
        rounds: Optional[int] = None, progress: bool = False, argv: Optional[Sequence[str]] = None,
        flush: bool = False, threads: Sequence[Optional[int]] = (None,), seeds: int = 1) -> dict:
    """Measure the machine's GEMM rate and copy bandwidth, then every selected case; returns the
    document that ``kronpe bench`` writes as JSON (pytest-benchmark's ``benchmarks`` layout).
    ``flush``: the CPU caches evicted before every timed call (else the figures are warm).
    ``threads``: the thread settings to measure every case under, in turn (an int: every library
    limited to that many; None: as the process runs); the report gives a table per setting.
    ``seeds``: the cases with random inputs are scored on that many draws (PSNR intervals).
    ``rounds``: timed rounds per case (default: the case's own; with ``quick`` at most
    QUICK_ROUNDS)."""
    if seeds < 1:
        raise ValueError(f"seeds must be a positive integer, got {seeds}")
    threads = list(threads) or [None]
    selected = cases(suites, quick, match)
    if not selected:
        raise ValueError(f"no benchmark matches suites={list(suites or SUITES)} quick={quick} match={match!r}")
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    side = 1024 if quick else 2048  # the GEMM that measures the rate (OpenBLAS is near its peak at both)
    from .harness import threads_limited

    def gemm_probe(setting, rounds=5, only=None):  # the GEMM rate under the threads the rows run with
        with threads_limited(setting):
            return gemm_rate(side, rounds=rounds, only=only)

    gemm_before = {t: gemm_probe(t) for t in threads}
    copy_before = copy_bandwidth()
    records: List[dict] = []
    from tqdm.auto import tqdm

    probes: List[dict] = []  # the fastest GEMM before every case too: on a shared machine the best probe counts
    with tqdm(selected, disable=None if progress else True, unit="case") as bar:
        for case in bar:
            bar.set_postfix_str(case.group[:40])
            for setting in threads:
                probes.append(dict(gemm_probe(setting, 2, gemm_before[setting]["fastest"]), setting=_label(setting)))
                n = rounds if rounds is not None or not quick else min(case.rounds, QUICK_ROUNDS)
                records += measure(case, n, flush=flush, threads=setting, seeds=seeds)
    gemm_after = {t: gemm_probe(t) for t in threads}
    copy_after = copy_bandwidth()
    per_setting = {}
    for t in threads:
        mine = [gemm_before[t], gemm_after[t]] + [p for p in probes if p["setting"] == _label(t)]
        best = max(mine, key=lambda g: g["best"])
        per_setting[_label(t)] = {"gemm_flops": best["best"], "gemm_by": best["fastest"]}
    gemm = max(per_setting.values(), key=lambda g: g["gemm_flops"])
    # the CUDA rows' reference: cuBLAS's GEMM rate on the same GPU, after the cases
    gpu_gemm = gpu_gemm_rate() if any(c.params.get("device") == "cuda" for c in selected) else None
    return {
        "kronpe_bench": 1,
        "datetime": started,
        "argv": list(argv) if argv is not None else None,
        "quick": quick,
        "thread_settings": [_label(t) for t in threads],
        "seeds": seeds,
        "caches": {"flushed": True, "flush_bytes": cache_bytes()} if flush else {"flushed": False},
        "machine_info": machine_info(),
        "rates": {"gemm_flops": gemm["gemm_flops"], "gemm_by": gemm["gemm_by"], "by_setting": per_setting,
                  "gemm": {"before": {_label(t): g for t, g in gemm_before.items()},
                           "after": {_label(t): g for t, g in gemm_after.items()}, "per_case": probes},
                  "copy_Bps": max(copy_before, copy_after), "copy": {"before": copy_before, "after": copy_after},
                  **({"gpu_gemm_flops": gpu_gemm} if gpu_gemm else {})},
        "benchmarks": records,
    }
