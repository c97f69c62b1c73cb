"""`kronpe bench` (kronpe.app.bench_cmd over kronpe.bench): end to end in a subprocess on a tiny
selection, --compare, bad flags, and the harness's timing and report logic on made-up cases."""
import json
import os
import subprocess
import sys
import time

import kronpe
import numpy as np
import pytest
from kronpe import bench
from kronpe.app.cli import main
from kronpe.bench import report
from kronpe.bench.harness import Case, Method, measure

_PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(kronpe.__file__)))


def _doc(times, gemm=100e9, copy=10e9):
    """A made-up document: {(group, method): (median seconds, peer, flops)}."""
    benches = []
    for (group, m), (t, peer, flops) in times.items():
        benches.append({"group": group, "name": m, "suite": "chains",
                        "extra_info": {"method": m, "peer": peer, "flops": flops, "size": 10.0},
                        "stats": {"median": t, "min": t * 0.9, "rounds": 3}})
    return {"rates": {"gemm_flops": gemm, "copy_Bps": copy}, "machine_info": {}, "benchmarks": benches}


def test_bench_quick_end_to_end_in_a_subprocess(tmp_path):
    env = dict(os.environ, PYTHONPATH=_PKG_PARENT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "kronpe", "bench", "--quick", "--suite", "chains", "-k", "D=3 32->32",
         "--rounds", "2", "--no-progress", "--out", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "bench.json").read_text())
    assert {"cpu", "cores", "blas", "versions", "env"} <= set(doc["machine_info"])
    assert doc["rates"]["gemm_flops"] > 1e8 and doc["rates"]["copy_Bps"] > 1e7
    rows = {b["name"]: b for b in doc["benchmarks"]}
    assert {b["group"] for b in doc["benchmarks"]} == {"mode chain D=3 32->32"}
    k = rows["kronpe"]
    assert k["stats"]["rounds"] == 2 and 0 < k["stats"]["min"] <= k["stats"]["median"]
    assert k["extra_info"]["flops"] == 3 * 2 * 32**4 and k["extra_info"]["peer"] is False
    assert rows["numpy.einsum"]["extra_info"]["peer"] is True and "stats" in rows["numpy.einsum"]
    table = (tmp_path / "bench.md").read_text()
    assert "| mode chain D=3 32->32 | kronpe |" in table and "% GEMM" in table
    assert table.strip() in proc.stdout  # what it prints is what it writes
    assert (tmp_path / "bench-chains.png").stat().st_size > 1000


def test_compare_two_files_names_faster_and_slower(tmp_path, capsys):
    old = _doc({("g", "kronpe"): (1.0, False, 1e9), ("g", "peer"): (1.0, True, 1e9), ("g", "gone"): (1.0, True, 0)})
    new = _doc({("g", "kronpe"): (0.5, False, 1e9), ("g", "peer"): (1.5, True, 1e9), ("g", "new"): (1.0, True, 0)})
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    assert main(["bench", "--compare", str(tmp_path / "old.json"), str(tmp_path / "new.json")]) == 0
    out = capsys.readouterr().out
    assert "| g | kronpe | 1000 | 500.0 | 0.50 | faster |" in out
    assert "| g | peer | 1000 | 1500 | 1.50 | **slower** |" in out
    assert "1 faster, 1 slower, 0 within 10%" in out
    assert "only in the old run: g / gone" in out and "only in the new run: g / new" in out


def test_compare_against_a_run(tmp_path, capsys):
    args = ["bench", "--quick", "--suite", "chains", "-k", "D=3 32->32", "--rounds", "1", "--no-progress", "--no-plots"]
    assert main(args + ["--out", str(tmp_path / "a")]) == 0
    capsys.readouterr()
    assert main(args + ["--out", str(tmp_path / "b"), "--compare", str(tmp_path / "a" / "bench.json")]) == 0
    out = capsys.readouterr().out
    assert "| mode chain D=3 32->32 | kronpe |" in out and "new / old" in out


@pytest.mark.parametrize("argv, message", [
    (["--suite", "nope"], "suite must be one of"),
    (["--rounds", "0"], "--rounds must be a positive integer"),
    (["--threshold", "2"], "--threshold must lie in (0, 1)"),
    (["-k", "no such group"], "no benchmark matches"),
    (["--compare", "MISSING.json"], "MISSING.json"),
    (["--compare", "a.json", "b.json", "c.json"], "--compare takes OLD.json or OLD.json NEW.json"),
    (["--rounds", "many"], "invalid int value"),
    (["--threads", "1,two"], "--threads: each setting must be a positive integer or 'default'"),
    (["--threads", "0"], "--threads: each setting must be a positive integer or 'default'"),
    (["--seeds", "0"], "--seeds must be a positive integer"),
    (["--bogus"], "unrecognized arguments"),
])
def test_bad_flags_give_one_line_errors(argv, message, tmp_path, capsys):
    assert main(["bench", "--no-progress", "--out", str(tmp_path)] + argv) == 2
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert last.startswith("kronpe: error:") and message in last, err


def test_compare_rejects_a_file_that_is_not_a_benchmark(tmp_path, capsys):
    (tmp_path / "x.json").write_text("[1, 2]")
    (tmp_path / "y.json").write_text("not json")
    for name in ("x.json", "y.json"):
        assert main(["bench", "--compare", str(tmp_path / name), str(tmp_path / name)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("kronpe: error:") and name in err and "not a benchmark JSON file" in err


def test_rows_give_the_ratio_to_the_best_peer_and_the_fraction_of_gemm():
    doc = _doc({("g", "kronpe"): (2.0, False, 1e11), ("g", "slow peer"): (4.0, True, 1e11),
                ("g", "fast peer"): (1.0, True, 1e11)}, gemm=1e11)
    rows = {r["method"]: r for r in report.rows(doc)}
    assert rows["kronpe"]["vs_best_peer"] == pytest.approx(2.0)
    assert rows["fast peer"]["vs_best_peer"] == pytest.approx(1.0)
    assert rows["kronpe"]["fraction"] == pytest.approx(0.5) and rows["kronpe"]["rate"] == pytest.approx(50.0)
    text = report.markdown(doc)
    assert "1 group(s) slower than a peer by median: g 2.00x" in text


def test_median_interval_covers_the_median_as_it_says():
    """The order-statistic interval: its stated coverage is 1 - 2 P(B <= j), B ~ Binomial(n, 1/2),
    the narrowest at >= 95%; under six values the whole range with its (lower) coverage."""
    assert report.median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0, 0.75)
    lo, hi, cover = report.median_interval(list(range(10)))
    assert (lo, hi) == (1, 8) and cover == pytest.approx(1 - 2 * 11 / 1024)
    lo, hi, cover = report.median_interval(list(range(20)))
    assert (lo, hi) == (5, 14) and 0.95 <= cover < 0.96
    rng = np.random.default_rng(4)
    hits = [lo <= 0 <= hi for lo, hi, _ in (report.median_interval(rng.standard_normal(20)) for _ in range(4000))]
    assert abs(np.mean(hits) - cover) < 0.015


def test_paired_rounds_tell_ahead_tie_and_behind():
    """kronpe's time over the best peer's, round by round: a steady lead is ahead even when a drift
    of the machine moves both (their medians alone would overlap), an alternating one a tie, a
    steady lag behind."""
    drift = [1.0 + 0.5 * (i % 5) for i in range(20)]  # the machine slows and recovers, every round both

    def doc(kron):
        benches = []
        for name, data, peer in (("kronpe", kron, False), ("peer", drift, True)):
            benches.append({"group": "g", "name": name, "suite": "chains",
                            "extra_info": {"method": name, "peer": peer, "size": 1.0},
                            "stats": {"median": float(np.median(data)), "min": min(data), "max": max(data),
                                      "rounds": len(data), "data": list(data)}})
        return {"rates": {"gemm_flops": 1e9, "copy_Bps": 1e9}, "machine_info": {}, "benchmarks": benches}

    def line(kron):
        return next(x for x in report.summary(doc(kron)) if x.startswith("- paired by round"))

    assert "ahead in 1, tied in 0, behind in 0" in line([0.95 * t for t in drift])
    alternating = [t * (0.8 if i % 2 else 1.25) for i, t in enumerate(drift)]
    assert "ahead in 0, tied in 1, behind in 0" in line(alternating) and "tied: g " in line(alternating)
    text = line([1.05 * t for t in drift])
    assert "behind in 1" in text and "behind: g 1.05x [1.05, 1.05]" in text


def test_cuda_rows_are_a_fraction_of_the_gpu_gemm_rate():
    doc = _doc({("CUDA g", "kronpe (CUDA)"): (1e-3, False, 2e10), ("CUDA g", "peer"): (2e-3, True, 2e10),
                ("g", "kronpe"): (1.0, False, 5e10)}, gemm=1e11)
    for b in doc["benchmarks"]:
        if b["group"].startswith("CUDA"):
            b["params"] = {"device": "cuda"}
    rows = {r["method"]: r for r in report.rows(doc)}
    assert "fraction" not in rows["kronpe (CUDA)"]  # no GPU rate measured: no fraction of the host's
    assert rows["kronpe"]["fraction"] == pytest.approx(0.5)
    doc["rates"]["gpu_gemm_flops"] = 4e13
    rows = {r["method"]: r for r in report.rows(doc)}
    assert rows["kronpe (CUDA)"]["fraction"] == pytest.approx(0.5)
    assert rows["peer"]["fraction"] == pytest.approx(0.25)
    assert rows["kronpe"]["fraction"] == pytest.approx(0.5)
    text = report.markdown(doc)
    assert "GPU GEMM rate 40.0 TFLOP/s" in text and "| CUDA g | kronpe (CUDA) | 1.000 (0.900) | 0.50x | 20000.0 GFLOP/s | 50% GEMM |" in text


def test_measure_interleaves_checks_and_skips():
    calls = []

    def make(name, value):
        def fn(state):
            calls.append(name)
            return value
        return fn

    def check(state, method, result):
        assert result == 1, "wrong"
        return {"psnr": 30.0}

    case = Case("t", "g", lambda: {"flops": 10}, [
        Method("kronpe", make("kronpe", 1), peer=False), Method("peer", make("peer", 1)),
        Method("wrong peer", make("wrong", 2)), Method("absent peer", make("absent", 1), needs=("no_such_module_x",)),
        Method("raising peer", lambda s: 1 / 0)], check, rounds=3)
    recs = {r["name"]: r for r in measure(case)}
    assert recs["kronpe"]["stats"]["rounds"] == 3 and recs["kronpe"]["extra_info"]["psnr"] == 30.0
    assert recs["wrong peer"]["skipped"].startswith("wrong result") and "stats" not in recs["wrong peer"]
    assert "no_such_module_x does not import" in recs["absent peer"]["skipped"]
    assert recs["raising peer"]["skipped"].startswith("failed: ZeroDivisionError")
    assert calls.count("wrong") == 1 and "absent" not in calls  # never timed
    # rounds interleaved: after the checks (each instant method that passes is called three times
    # more, untimed, to size its batch), round r starts with method r mod 2; each timed round of these instant
    # methods follows an untimed call (harness.WARM_SECONDS) and times a batch of MAX_BATCH calls
    # (harness.ROUND_SECONDS)
    from kronpe.bench import harness

    b = harness.MAX_BATCH
    assert recs["kronpe"]["extra_info"]["calls_per_round"] == b
    assert calls[:9] == ["kronpe"] * 4 + ["peer"] * 4 + ["wrong"]
    assert calls[9:] == [m for m in ["kronpe", "peer", "peer", "kronpe", "kronpe", "peer"] for m in [m] * (1 + b)]


def test_every_suite_lists_its_cases_and_the_quick_ones_are_few():
    every = bench.cases()
    quick = bench.cases(quick=True)
    suites = {c.suite for c in every}
    assert {"chains", "fits", "blend", "scattered"} <= suites
    assert 0 < len(quick) < len(every)
    assert all(np.isfinite(c.size) for c in every)
    assert len({c.group for c in every}) == len(every)  # one group per case


def test_float64_chain_cases_run_in_float64_and_check_their_dtype():
    """The chains suite has float64 groups (NumPy's default dtype): their inputs are float64, and
    their check fails a result computed or returned in float32."""
    cases = {c.group: c for c in bench.cases() if c.suite == "chains"}
    wide = [g for g, c in cases.items() if c.params["dtype"] == "float64"]
    assert wide and all(g.endswith(" float64") for g in wide)
    assert all(c.params["dtype"] == "float32" and "float" not in g for g, c in cases.items() if g not in wide)
    case = cases["mode chain D=4 32->32 float64"]
    state = case.setup()
    assert state["T"].dtype == np.float64 and all(A.dtype == np.float64 for A in state["mats"])
    kr = next(m for m in case.methods if m.name == "kronpe")
    out = kr.fn(state)
    case.check(state, "kronpe", out)  # float64 and accurate to float64's precision
    with pytest.raises(AssertionError, match="dtype float32"):
        case.check(state, "kronpe", out.astype(np.float32))
    # a float32 computation in float64 clothes misses the float64 tolerance
    low = kronpe.multi_mode_product(state["T"].astype(np.float32), [A.astype(np.float32) for A in state["mats"]])
    with pytest.raises(AssertionError, match="relative error"):
        case.check(state, "kronpe", low.astype(np.float64))


def test_measure_settles_before_each_timed_call(monkeypatch):
    """Before every timed call of a case with several methods the harness waits until no other
    thread of the process runs (at most KRONPE_BENCH_SETTLE seconds), outside the timings."""
    from kronpe.bench import harness

    waits = []
    monkeypatch.setattr(harness, "settle", lambda limit: waits.append(limit) or 0.0)
    case = Case("t", "g", lambda: {}, [Method("kronpe", lambda s: 1, peer=False), Method("peer", lambda s: 1)],
                None, rounds=3)
    monkeypatch.setenv("KRONPE_BENCH_SETTLE", "0.125")
    recs = measure(case)
    assert waits == [0.125] * 6 and all(r["stats"]["rounds"] == 3 for r in recs)
    monkeypatch.delenv("KRONPE_BENCH_SETTLE")
    waits.clear()
    measure(case)
    assert waits == [harness.SETTLE_SECONDS] * 6
    for bad in ("soon", "-1", "nan"):
        monkeypatch.setenv("KRONPE_BENCH_SETTLE", bad)
        with pytest.raises(ValueError, match="KRONPE_BENCH_SETTLE"):
            measure(case)


def test_settle_waits_for_running_threads(monkeypatch):
    """settle polls the process's running threads: it returns once none runs, or at the limit."""
    from kronpe.bench import harness

    states = iter([2, 1, 0])
    monkeypatch.setattr(harness, "running_threads", lambda: next(states))
    monkeypatch.setattr(harness, "SETTLE_POLL", 0.001)
    assert harness.settle(5.0) < 1.0
    monkeypatch.setattr(harness, "running_threads", lambda: 1)
    assert 0.05 <= harness.settle(0.05) < 1.0


def test_running_threads_sees_a_busy_thread():
    import threading
    import time as _time

    from kronpe.bench import harness

    if harness.running_threads() is None:
        pytest.skip("no /proc/self/task here")
    stop = _time.perf_counter() + 0.5

    def spin():
        while _time.perf_counter() < stop:
            _time.sleep(0)  # yields the GIL, stays runnable

    t = threading.Thread(target=spin)
    t.start()
    seen = max(harness.running_threads() for _ in range(50))
    t.join()
    assert seen >= 1


def test_a_failing_kronpe_row_makes_the_command_fail(monkeypatch, tmp_path, capsys):
    """kronpe's own rows must run and be right; a peer that fails is only reported."""
    def broken(state):
        raise RuntimeError("kernel exploded")

    def peer_broken(state):
        raise RuntimeError("peer exploded")

    cases = [Case("chains", "made-up", lambda: {}, [Method("kronpe", broken, peer=False),
                                                    Method("peer", lambda s: 1.0)], rounds=1)]
    monkeypatch.setitem(bench.SUITES, "chains", lambda: cases)
    assert main(["bench", "--suite", "chains", "--no-progress", "--no-plots", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "made-up: kronpe: failed: RuntimeError: kernel exploded" in err
    assert (tmp_path / "bench.json").is_file()  # everything is written first
    cases[0] = Case("chains", "made-up", lambda: {}, [Method("kronpe", lambda s: 1.0, peer=False),
                                                      Method("peer", peer_broken)], rounds=1)
    assert main(["bench", "--suite", "chains", "--no-progress", "--no-plots", "--out", str(tmp_path)]) == 0


def test_cold_fit_rows_factorise_every_time(monkeypatch):
    """The "cold" grid fit clears kronpe's caches first: its per-axis factorisations (the
    pseudo-inverses by LU, or SVDs) are computed on every call (a second call of a warm fit_grid
    reuses them)."""
    import scipy.linalg

    from kronpe.bench import fits
    from kronpe.solvers import grid

    calls = []

    def counting(real):
        def call(*a, **k):
            calls.append(1)
            return real(*a, **k)
        return call

    monkeypatch.setattr(scipy.linalg, "svd", counting(scipy.linalg.svd))
    monkeypatch.setattr(grid, "_fast_inverse", counting(grid._fast_inverse))
    rng = np.random.default_rng(0)
    emb = kronpe.Gaussian(16, 0.05)
    img = rng.random((32, 32))
    kronpe.clear_caches()
    kronpe.fit_grid(img, [emb, emb], ridge=0.0)
    warm_first = len(calls)
    kronpe.fit_grid(img, [emb, emb], ridge=0.0)
    assert warm_first > 0 and len(calls) == warm_first  # warm: factorisations reused

    class _Case:
        train = img
        train_coords = kronpe.data.grid_coords(img.shape)

    cold = next(m for m in fits._fit_methods() if "cold" in m.name)
    state = {"case": _Case(), "embs": [emb, emb], "rcond": 1e-10}
    before = len(calls)
    cold.fn(state)
    cold.fn(state)
    assert len(calls) - before == 2 * warm_first  # each cold call factorises anew


def test_flush_evicts_the_caches_right_before_each_timed_call(monkeypatch):
    """With flush=True every timed call comes right after a flush (the settle's warm call, if any,
    before it), the records say so, and without it they say 'warm'."""
    from kronpe.bench import harness

    events = []
    monkeypatch.setattr(harness, "settle", lambda limit: 0.0)
    monkeypatch.setattr(harness, "flush_caches", lambda: events.append("flush") or 0)
    case = Case("t", "g", lambda: {}, [Method("kronpe", lambda s: events.append("kronpe"), peer=False),
                                       Method("peer", lambda s: events.append("peer"))], None, rounds=3)
    recs = measure(case, flush=True)
    assert events[:2] == ["kronpe", "peer"]  # the checked first calls
    timed = events[2:]
    # per timed call: the warm call, the flush, the timed call
    assert len(timed) == 6 * 3 and all(timed[i + 1] == "flush" and timed[i] == timed[i + 2]
                                       for i in range(0, len(timed), 3))
    assert {r["extra_info"]["caches"] for r in recs} == {"flushed"}
    events.clear()
    assert {r["extra_info"]["caches"] for r in measure(case)} == {"warm"} and "flush" not in events


def test_flush_writes_twice_the_largest_cache():
    """The flush reads and writes a buffer at least twice the largest CPU cache the system names
    (every cache line of it loaded and dirtied), so nothing a method touched stays cached."""
    import glob

    from kronpe.bench import harness

    sizes = []
    for path in glob.glob("/sys/devices/system/cpu/cpu*/cache/index*/size"):
        text = open(path).read().strip()
        sizes.append(int(text[:-1]) * {"K": 1 << 10, "M": 1 << 20}[text[-1]] if text[-1] in "KM" else int(text))
    n = harness.cache_bytes()
    assert n >= 2 * max(sizes, default=0) and n >= harness.FLUSH_MIN_BYTES
    assert harness.flush_caches() == n
    buf = harness._FLUSH["buffer"]
    before = float(buf[0]) + float(buf[-1])
    harness.flush_caches()
    assert float(buf[0]) + float(buf[-1]) == before + 2.0  # both ends written


def test_rows_record_every_librarys_threads():
    """Every record names the threads of kronpe's kernels and of the BLAS libraries (and torch's
    where loaded); the table's machine line repeats them."""
    case = Case("t", "g", lambda: {}, [Method("kronpe", lambda s: 1, peer=False), Method("peer", lambda s: 1)],
                None, rounds=1)
    recs = measure(case)
    threads = recs[0]["extra_info"]["threads"]
    assert threads["kronpe"] == kronpe.get_num_threads() and recs[1]["extra_info"]["threads"] == threads
    assert len(threads) >= 2  # at least one BLAS beside kronpe
    doc = {"rates": {"gemm_flops": 1e9, "copy_Bps": 1e9}, "machine_info": {}, "benchmarks": recs,
           "caches": {"flushed": False}}
    line = report.machine_line(doc)
    assert f"kronpe {threads['kronpe']}" in line and "caches warm" in line


def test_rows_count_the_busy_marks_of_their_timed_calls(monkeypatch):
    """A row records how often kronpe's threads backed off during its own timed calls (not during
    the warm-up or the other methods' calls), and the summary names the rows that did."""
    from kronpe.bench import harness

    count = [0]
    monkeypatch.setattr(harness, "busy_marks", lambda: count[0])

    def marking(s):
        count[0] += 2
        return 1

    case = Case("t", "g", lambda: {}, [Method("kronpe", marking, peer=False), Method("peer", lambda s: 1)],
                None, rounds=3)
    recs = measure(case)
    n = 3 * recs[0]["extra_info"]["calls_per_round"]  # 3 timed rounds of a batch, not the untimed calls
    assert [r["extra_info"]["busy_marks"] for r in recs] == [2 * n, 0]
    doc = {"rates": {"gemm_flops": 1e9, "copy_Bps": 1e9}, "machine_info": {}, "benchmarks": recs,
           "caches": {"flushed": False}}
    assert f"backed off (cores marked busy during their timed calls): 1 of 1: g / kronpe ({2 * n} marks)" in \
        report.markdown(doc)


def test_threads_limited_sets_every_library_and_puts_it_back():
    before = kronpe.get_num_threads()
    seen = []
    case = Case("t", "g", lambda: {}, [Method("kronpe", lambda s: seen.append(kronpe.get_num_threads()), peer=False)],
                None, rounds=2)
    target = 2 if before == 1 else 1
    recs = measure(case, threads=target)
    assert seen and set(seen) == {target}
    info = recs[0]["extra_info"]
    assert info["thread_setting"] == target and info["threads"]["kronpe"] == target
    assert all(v == target for k, v in info["threads"].items() if k.startswith(("openblas", "mkl", "blis", "torch")))
    assert kronpe.get_num_threads() == before
    assert measure(case)[0]["extra_info"]["thread_setting"] == "default"


def test_seeds_score_every_method_on_each_draw_and_report_the_paired_margin():
    """A case with a variant is scored on every seed (seed 0 from setup); the table gives the mean
    with its interval and the summary kronpe's margin over the best peer, paired by seed."""
    def state(seed):
        return {"seed": seed}

    def check(s, method, result):
        return {"psnr": float(result)}

    case = Case("t", "g", lambda: state(0), [
        Method("kronpe", lambda s: 30.0 + 0.5 + 0.01 * s["seed"], peer=False),
        Method("peer", lambda s: 30.0 + 0.1 * s["seed"] ** 2)], check, rounds=1, variant=state)
    recs = {r["name"]: r for r in measure(case, seeds=3)}
    assert recs["kronpe"]["extra_info"]["psnr_seeds"] == [30.5, 30.51, 30.52]
    assert recs["peer"]["extra_info"]["psnr_seeds"] == [30.0, 30.1, 30.4]
    doc = {"rates": {"gemm_flops": 1e9, "copy_Bps": 1e9}, "machine_info": {}, "seeds": 3,
           "benchmarks": list(recs.values())}
    text = report.markdown(doc)
    assert "PSNR (mean [95% interval], 3 seeds)" in text and "30.51 [30.49, 30.53]" in text
    # differences 0.5, 0.41, 0.12: mean +0.34, interval wide enough to contain 0 -> a tie
    margin = [line for line in text.splitlines() if line.startswith("- PSNR")][0]
    assert "g +0.34 [" in margin and "vs peer (tie)" in margin
    # a seed that fails is named, and the figures cover the seeds that ran
    case.methods[1] = Method("peer", lambda s: 1 / s["seed"] if s["seed"] == 0 else 30.0)
    case.setup = lambda: {"seed": 1}
    case.variant = lambda seed: {"seed": 0 if seed == 2 else seed}
    recs = {r["name"]: r for r in measure(case, seeds=3)}
    assert recs["peer"]["extra_info"]["psnr_seeds"] == [30.0, 30.0]
    assert recs["peer"]["extra_info"]["seed_failures"][0].startswith("seed 2: ZeroDivisionError")


def test_threads_limited_covers_libraries_not_yet_loaded():
    """In a fresh process, the libraries the GEMM probe loads (SciPy's BLAS, torch) run at the
    limit too: a BLAS loaded inside the block would keep its default threads."""
    code = (
        "import threadpoolctl\n"
        "from kronpe.bench.harness import threads_limited\n"
        "with threads_limited(1):\n"
        "    from scipy.linalg import blas\n"
        "    counts = {i['filepath']: i['num_threads'] for i in threadpoolctl.threadpool_info()\n"
        "              if i['user_api'] == 'blas'}\n"
        "    import sys\n"
        "    t = sys.modules.get('torch')\n"
        "    print(sorted(set(counts.values())), t.get_num_threads() if t is not None else 1)\n"
    )
    pytest.importorskip("threadpoolctl")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[1]", "1"]


def test_one_table_per_thread_setting_and_slow_rounds_named():
    doc = _doc({("g", "kronpe"): (1.0, False, 1e9), ("g", "peer"): (2.0, True, 1e9)})
    doc["thread_settings"] = [1, "default"]
    second = json.loads(json.dumps(doc["benchmarks"]))
    for b in doc["benchmarks"]:
        b["extra_info"]["thread_setting"] = 1
    for b in second:
        b["extra_info"]["thread_setting"] = "default"
        b["stats"].update(median=b["stats"]["median"] * 3, max=b["stats"]["median"] * 3 * 1.5)
    doc["benchmarks"] += second
    text = report.markdown(doc)
    one, default = text.split("### Each library at its default threads")
    assert one.startswith("### One thread per library") and "| g | kronpe | 1000 (900.0) | 0.50x" in one
    assert "| g | kronpe | 3000 (900.0) | 0.50x" in default
    assert "beyond 1.3x their median: 0 of 1" in one
    assert "beyond 1.3x their median: 1 of 1: g / kronpe 1.50x (peers' rows, same run: 1 of 1)" in default
    assert "(peers' rows, same run: 0 of 1)" in one
    cmp = report.compare(doc, doc)
    assert "| g [1 threads] | kronpe |" in cmp and "| g | kronpe |" in cmp
    # each setting's rows against the GEMM rate measured under its own threads
    doc["rates"]["by_setting"] = {"1": {"gemm_flops": 2e9, "gemm_by": "kronpe"},
                                  "default": {"gemm_flops": 1e9, "gemm_by": "numpy.matmul"}}
    one, default = report.markdown(doc).split("### Each library at its default threads")
    assert "| 50% GEMM |" in one and "GEMM rate 2.0 GFLOP/s (float32, fastest round, by kronpe)" in one
    assert "| 33% GEMM |" in default and "by numpy.matmul" in default


def test_machine_line_warns_of_a_blas_held_below_its_kernels():
    doc = _doc({("g", "kronpe"): (1.0, False, 1e9)})
    doc["machine_info"] = {"env": {"OPENBLAS_CORETYPE": "Haswell", "OMP_NUM_THREADS": "1"}}
    line = report.machine_line(doc)
    assert "WARNING: OPENBLAS_CORETYPE=Haswell limits the BLAS" in line
    doc["machine_info"] = {"env": {"OMP_NUM_THREADS": "1"}}
    assert "WARNING" not in report.machine_line(doc) and "NOTE" not in report.machine_line(doc)
    doc["machine_info"] = {"env": {"KRONPE_SIMD": "avx2"}}
    assert "NOTE: KRONPE_SIMD=avx2 holds kronpe's kernels to avx2 at most; peers that pick" in report.machine_line(doc)


def test_the_gemm_rate_is_the_fastest_gemm_at_hand():
    from kronpe.bench.harness import gemm_rate

    r = gemm_rate(128, rounds=1)
    names = [k for k in r if k not in ("best", "fastest", "n")]
    assert {"numpy.matmul", "scipy sgemm", "kronpe"} <= set(names)
    assert r["best"] == max(r[k] for k in names) and r[r["fastest"]] == r["best"]
    doc = _doc({("g", "kronpe"): (1.0, False, 1e9)})
    doc["rates"]["gemm_by"] = r["fastest"]
    assert f"fastest round, by {r['fastest']})" in report.machine_line(doc)


def test_short_methods_are_timed_in_batches_of_about_a_round(monkeypatch):
    """A method faster than ROUND_SECONDS once warm (even one whose first call was slower) is timed
    in rounds of several calls (about ROUND_SECONDS of them, at most MAX_BATCH), one slower than
    that one call a round; with --flush every timed
    call starts from evicted caches, so one call a round; the table says how calls were batched."""
    from kronpe.bench import harness

    assert harness.batch_size(harness.ROUND_SECONDS / 4) == 4
    assert harness.batch_size(harness.ROUND_SECONDS * 3) == 1
    assert harness.batch_size(1e-9) == harness.batch_size(0.0) == harness.MAX_BATCH
    calls = {"fast": 0, "slow": 0}

    def fast(s):
        calls["fast"] += 1

    def slow(s):
        calls["slow"] += 1
        time.sleep(harness.ROUND_SECONDS * 1.5)

    calls["cold"] = 0

    def cold(s):  # its first call pays for a plan (slower than a round), the next ones do not
        calls["cold"] += 1
        if calls["cold"] == 1:
            time.sleep(harness.ROUND_SECONDS * 3)

    case = Case("t", "g", lambda: {}, [Method("fast", fast, peer=False), Method("slow", slow),
                                       Method("cold", cold)], None, rounds=2)
    monkeypatch.setenv("KRONPE_BENCH_SETTLE", "0")
    recs = {r["name"]: r for r in measure(case)}
    assert recs["fast"]["extra_info"]["calls_per_round"] == harness.MAX_BATCH
    assert recs["cold"]["extra_info"]["calls_per_round"] == harness.MAX_BATCH  # sized once warm
    assert recs["slow"]["extra_info"]["calls_per_round"] == 1 and calls["slow"] == 1 + 3 + 2
    assert calls["fast"] == 4 + 2 * harness.MAX_BATCH
    doc = {"rates": {"gemm_flops": 1e9, "copy_Bps": 1e9}, "machine_info": {}, "benchmarks": list(recs.values()),
           "caches": {"flushed": False}}
    assert f"a batch of calls back to back ({harness.MAX_BATCH} to {harness.MAX_BATCH} calls" in report.markdown(doc)
    monkeypatch.setattr(harness, "flush_caches", lambda: 0)
    recs = {r["name"]: r for r in measure(case, flush=True)}
    assert recs["fast"]["extra_info"]["calls_per_round"] == 1


def test_quick_runs_at_most_quick_rounds_a_case(monkeypatch):
    """--quick times a case in at most QUICK_ROUNDS rounds (fewer when the case asks fewer);
    --rounds overrides both, and a full run keeps each case's own."""
    monkeypatch.setenv("KRONPE_BENCH_SETTLE", "0")
    monkeypatch.setattr(bench, "gemm_rate", lambda *a, **k: {"best": 1e9, "fastest": "x"})
    monkeypatch.setattr(bench, "copy_bandwidth", lambda *a, **k: 1e9)
    many = bench.QUICK_ROUNDS + 7
    cases = [Case("chains", "long", lambda: {}, [Method("kronpe", lambda s: 1.0, peer=False)], rounds=many,
                  quick=True),
             Case("chains", "short", lambda: {}, [Method("kronpe", lambda s: 1.0, peer=False)], rounds=2,
                  quick=True)]
    monkeypatch.setitem(bench.SUITES, "chains", lambda: cases)

    def rounds(**kw):
        return {r["group"]: r["stats"]["rounds"] for r in bench.run(["chains"], **kw)["benchmarks"]}

    assert rounds(quick=True) == {"long": bench.QUICK_ROUNDS, "short": 2}
    assert rounds() == {"long": many, "short": 2}
    assert rounds(quick=True, rounds=3) == {"long": 3, "short": 3}
