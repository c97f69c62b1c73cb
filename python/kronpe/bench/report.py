"""Tables, comparisons and plots of a benchmark document (``kronpe bench`` JSON, or
pytest-benchmark JSON whose benchmarks carry ``extra_info["method"]``).

Every row: the median time (minimum in brackets), the ratio to the best peer of its group
(median / best peer's median: < 1 is faster than every peer), and the rate reached, GFLOP/s as a
fraction of the machine's GEMM rate or GB/s as a fraction of its copy bandwidth, whichever work
the case declares. The summary judges kronpe against the best peer of each group round by round
(the harness times every method once a round): the median of the per-round ratios with a
distribution-free 95% interval, ahead or behind only where the interval excludes 1.
"""
from __future__ import annotations

import json
import math
import statistics
from collections import OrderedDict
from typing import Dict, List, Optional, Tuple

#: a chain of at least this many flops counts as "large" for the GEMM-rate target
LARGE_FLOPS = 5e8
#: environment variables that hold a BLAS below its best kernels for this CPU
LIMITING_ENV = ("OPENBLAS_CORETYPE", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR")
#: a kronpe row whose slowest timed round is beyond this multiple of its median is named
SPREAD_LIMIT = 1.3


def load(path: str) -> dict:
    """A benchmark document from ``path`` (ValueError naming the file when it is not one)."""
    with open(path) as f:
        try:
            doc = json.load(f)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} is not a benchmark JSON file: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise ValueError(f"{path} is not a benchmark JSON file (no 'benchmarks' list)")
    return doc


def method(b: dict) -> str:
    return b.get("extra_info", {}).get("method", b.get("name", "?"))


def is_peer(b: dict) -> bool:
    info = b.get("extra_info", {})
    return bool(info["peer"]) if "peer" in info else not method(b).startswith("kronpe")


def _timed(b: dict) -> bool:
    return "stats" in b and not b.get("skipped")


def rates(doc: dict) -> Tuple[float, float]:
    """(GEMM flop/s, copy bytes/s) of the run: kronpe bench's ``rates``; in pytest-benchmark
    JSON the fastest round of the ``blas_rate`` benchmark and the copy probes' ``copy_GBps``."""
    r = doc.get("rates")
    if r:
        return float(r["gemm_flops"]), float(r["copy_Bps"])
    gemm = [b["extra_info"]["flops"] / b["stats"]["min"] for b in doc["benchmarks"]
            if b.get("extra_info", {}).get("blas_rate")]
    copy = [b["extra_info"]["copy_GBps"] * 1e9 for b in doc["benchmarks"] if "copy_GBps" in b.get("extra_info", {})]
    return (max(gemm) if gemm else math.nan), (max(copy) if copy else math.nan)


def gpu_gemm(doc: dict) -> float:
    """cuBLAS's float32 GEMM rate measured in the run (flop/s; NaN when no CUDA row ran)."""
    return float(doc.get("rates", {}).get("gpu_gemm_flops") or math.nan)


def groups(doc: dict) -> "OrderedDict[str, List[dict]]":
    out: "OrderedDict[str, List[dict]]" = OrderedDict()
    for b in doc["benchmarks"]:
        if b.get("group") and not b.get("extra_info", {}).get("blas_rate"):
            out.setdefault(b["group"], []).append(b)
    return out


def rows(doc: dict) -> List[dict]:
    """One dict per benchmark: group, method, peer, median, min, vs_best_peer, rate, fraction, unit."""
    gemm, copy = rates(doc)
    gpu = gpu_gemm(doc)
    out = []
    for group, bs in groups(doc).items():
        timed = [b for b in bs if _timed(b)]
        peers = [b["stats"]["median"] for b in timed if is_peer(b)]
        best = min(peers) if peers else math.nan
        for b in sorted(timed, key=lambda b: b["stats"]["median"]) + [b for b in bs if not _timed(b)]:
            info = b.get("extra_info", {})
            row = dict(group=group, method=method(b), peer=is_peer(b), suite=b.get("suite", ""),
                       skipped=b.get("skipped"), size=info.get("size"), psnr=info.get("psnr"),
                       psnr_seeds=info.get("psnr_seeds"), flops=info.get("flops"), bytes=info.get("bytes"),
                       busy_marks=info.get("busy_marks", 0), calls_per_round=info.get("calls_per_round", 1))
            if _timed(b):
                med = b["stats"]["median"]
                row.update(median=med, min=b["stats"]["min"], max=b["stats"].get("max", med), vs_best_peer=med / best,
                           data=b["stats"].get("data"))
                if info.get("flops"):  # a GPU row against the GPU's GEMM rate, never the host's
                    ref = gpu if b.get("params", {}).get("device") == "cuda" else gemm
                    row.update(rate=info["flops"] / med / 1e9, unit="GFLOP/s")
                    if math.isfinite(ref):
                        row.update(fraction=info["flops"] / med / ref)
                elif info.get("bytes"):
                    row.update(rate=info["bytes"] / med / 1e9, unit="GB/s", fraction=info["bytes"] / med / copy)
            out.append(row)
    return out


def _ms(t: float) -> str:
    digits = 3 if t < 0.01 else 2 if t < 0.1 else 1 if t < 1 else 0
    return f"{t * 1e3:.{digits}f}"


def _threads_of(doc: dict) -> dict:
    """The libraries' threads the rows recorded, when every row recorded the same (else {})."""
    seen = {str(sorted(r["extra_info"]["threads"].items())): r["extra_info"]["threads"]
            for r in doc.get("benchmarks", []) if "threads" in r.get("extra_info", {})}
    return next(iter(seen.values())) if len(seen) == 1 else {}


def machine_line(doc: dict) -> str:
    m = doc.get("machine_info", {})
    gemm, copy = rates(doc)
    blas = "; ".join(
        ", ".join(str(v) for v in (b.get("internal_api"), b.get("version"), b.get("architecture"),
                                   f"{b.get('num_threads')} threads") if v)
        for b in m.get("blas", []) if isinstance(b, dict) and "internal_api" in b)
    env = " ".join(f"{k}={v}" for k, v in m.get("env", {}).items())
    limiting = [k for k in m.get("env", {}) if k in LIMITING_ENV]
    cpu = m.get("cpu", "?")
    if isinstance(cpu, dict):  # pytest-benchmark's py-cpuinfo record
        cpu = cpu.get("brand_raw", "?")
    parts = [str(cpu), f"{m.get('cores_usable', m.get('cores', '?'))} cores"]
    if blas:
        parts.append(f"BLAS: {blas}")
    chain_gemm = m.get("kronpe_build", {}).get("chain_gemm")
    if chain_gemm:
        parts.append(f"kronpe chain GEMM: {chain_gemm}")
    if env:
        parts.append(env)
    for k in limiting:
        parts.append(f"WARNING: {k}={m['env'][k]} limits the BLAS to other kernels than this CPU's best: "
                     "its rows are not the peers' best")
    simd = m.get("env", {}).get("KRONPE_SIMD")
    if simd:
        parts.append(f"NOTE: KRONPE_SIMD={simd} holds kronpe's kernels to {simd} at most; peers that pick their "
                     "kernels by CPUID alone (pyfastkron, NumPy's own loops) still run this CPU's best")
    threads = _threads_of(doc)
    if threads:
        parts.append("threads: " + ", ".join(f"{k} {v}" for k, v in threads.items()))
    caches = doc.get("caches")
    if caches is not None:
        parts.append(f"caches flushed before every timed call ({caches.get('flush_bytes', 0) >> 20} MiB written)"
                     if caches.get("flushed") else "caches warm (no --flush)")
    by = doc.get("rates", {}).get("gemm_by")
    parts.append(f"GEMM rate {gemm / 1e9:.1f} GFLOP/s (float32, fastest round{', by ' + by if by else ''}), "
                 f"copy {copy / 1e9:.1f} GB/s")
    if math.isfinite(gpu_gemm(doc)):
        parts.append(f"GPU GEMM rate {gpu_gemm(doc) / 1e12:.1f} TFLOP/s (cuBLAS float32, TF32 off; the CUDA rows' "
                     "reference)")
    return "Machine: " + "; ".join(parts)


def setting_of(b: dict) -> str:
    """The thread setting a record was measured under ("1", "2", ..., "default")."""
    return str(b.get("extra_info", {}).get("thread_setting", "default"))


def by_setting(doc: dict) -> List[Tuple[str, dict]]:
    """The document split per thread setting (``kronpe bench --threads``), in the run's order:
    [(setting, the document with that setting's records only)]."""
    order = [str(t) for t in doc.get("thread_settings", [])]
    for b in doc["benchmarks"]:
        if setting_of(b) not in order:
            order.append(setting_of(b))
    by_rate = doc.get("rates", {}).get("by_setting", {})

    def part(t: str) -> dict:  # each setting's rows against the GEMM rate under its own threads
        sub = dict(doc, benchmarks=[b for b in doc["benchmarks"] if setting_of(b) == t])
        rate = next((v for k, v in by_rate.items() if str(k) == t), None)
        if rate:
            sub["rates"] = dict(doc["rates"], **rate)
        return sub

    return [(t, part(t)) for t in order]


def _setting_title(setting: str) -> str:
    if setting == "default":
        return "Each library at its default threads"
    return "One thread per library" if setting == "1" else f"{setting} threads per library"


def markdown(doc: dict) -> str:
    """The table of every row, then the summary against the targets; one table and summary per
    thread setting when the run measured several (``--threads``)."""
    parts = by_setting(doc)
    if len(parts) <= 1:
        return _markdown(doc)
    return "\n\n".join(f"### {_setting_title(t)}\n\n" + _markdown(sub) for t, sub in parts)


def _psnr_cell(r: dict) -> str:
    seeds = r.get("psnr_seeds") or []
    if len(seeds) >= 2:
        from .harness import t_interval

        mean, lo, hi = t_interval(seeds)
        return f"{mean:.2f} [{lo:.2f}, {hi:.2f}]"
    return "" if r["psnr"] is None else f"{r['psnr']:.2f}"


def _markdown(doc: dict) -> str:
    seeds = int(doc.get("seeds", 1) or 1)
    psnr_head = f"PSNR (mean [95% interval], {seeds} seeds)" if seeds > 1 else "PSNR"
    lines = [machine_line(doc), "",
             f"| group | method | median ms (min) | vs best peer | rate | of GEMM / copy | {psnr_head} |",
             "|---|---|---:|---:|---:|---:|---:|"]
    table = rows(doc)
    for r in table:
        name = r["method"]
        if r.get("median") is None:
            lines.append(f"| {r['group']} | {name} | skipped: {r['skipped']} | | | | |")
            continue
        vs = "" if math.isnan(r["vs_best_peer"]) else f"{r['vs_best_peer']:.2f}x"
        rate = f"{r['rate']:.1f} {r['unit']}" if "rate" in r else ""
        frac = f"{100 * r['fraction']:.0f}% {'GEMM' if r['unit'] == 'GFLOP/s' else 'copy'}" if "fraction" in r else ""
        psnr = _psnr_cell(r)
        lines.append(f"| {r['group']} | {name} | {_ms(r['median'])} ({_ms(r['min'])}) | {vs} | {rate} | {frac} | {psnr} |")
    batched = [r["calls_per_round"] for r in table if r["calls_per_round"] > 1]
    lines += ["", "vs best peer: median time / the fastest peer's median time in the same group (< 1: kronpe "
              "faster). Rates: the case's flops (cheapest order) or bytes touched per median time."
              + (f" Times per call: a round of a method faster than 2 ms is the mean of a batch of calls back to "
                 f"back ({min(batched)} to {max(batched)} calls, about 2 ms), every method alike." if batched else ""),
              ""]
    lines += summary(doc)
    return "\n".join(lines)


def median_interval(values: List[float], level: float = 0.95) -> Tuple[float, float, float]:
    """(low, high, coverage): a distribution-free interval for the median of ``values``, between
    two order statistics. With B ~ Binomial(n, 1/2) the count of values below the median, the
    sorted values' [j-th, (n-1-j)-th] cover it with probability 1 - 2 P(B <= j): the narrowest
    such interval that covers it with probability >= ``level``, or (too few values for that) the
    smallest and largest, whose coverage 1 - 2^(1 - n) it returns."""
    v = sorted(values)
    n = len(v)
    if n == 0:
        return math.nan, math.nan, math.nan

    def cover(j: int) -> float:
        return 1.0 - 2.0 * sum(math.comb(n, i) for i in range(j + 1)) / 2.0**n

    j = 0
    while 2 * (j + 1) < n and cover(j + 1) >= level:
        j += 1
    return v[j], v[n - 1 - j], cover(j)


def paired_ratio(k: dict, p: dict) -> Optional[Tuple[float, float, float, float, int]]:
    """(median, low, high, coverage, rounds) of kronpe's time over a peer's, round by round: the
    harness runs every method once a round, so round r of both saw the same moment of the
    machine, and the ratio of a pair is free of the drifts a shared machine goes through between
    rounds. None without per-round data."""
    a, b = k.get("data") or [], p.get("data") or []
    ratios = [x / y for x, y in zip(a, b) if y > 0]
    if not ratios:
        return None
    lo, hi, cover = median_interval(ratios)
    return statistics.median(ratios), lo, hi, cover, len(ratios)


def _beyond(r: dict) -> bool:
    """Whether a row's slowest timed round lies beyond SPREAD_LIMIT x its median."""
    return r.get("max", 0) > SPREAD_LIMIT * r["median"]


def summary(doc: dict) -> List[str]:
    """kronpe's rows against their best peers (worst first), and the chains' GEMM-rate target."""
    rs = [r for r in rows(doc) if not r["peer"] and r.get("median") is not None
          and not math.isnan(r["vs_best_peer"])]
    if not rs:
        return []
    out = ["Summary:", ""]
    # per group, kronpe's fastest row against the best peer
    ratios = sorted(fastest_per_group(rs).values(), key=lambda r: -r["vs_best_peer"])
    behind = [r for r in ratios if r["vs_best_peer"] > 1.0]
    out.append(f"- kronpe's fastest row / best peer, per group: median "
               f"{statistics.median(r['vs_best_peer'] for r in ratios):.2f}x over {len(ratios)} groups; "
               f"{len(behind)} group(s) slower than a peer by median" + (": " + ", ".join(
                   f"{r['group']} {r['vs_best_peer']:.2f}x" for r in behind) if behind else ""))
    peers = [r for r in rows(doc) if r["peer"] and r.get("median") is not None]
    out += paired_verdicts(ratios, peers)
    spread = [r for r in rs if _beyond(r)]
    out.append(f"- kronpe rows with a timed round beyond {SPREAD_LIMIT}x their median: {len(spread)} of {len(rs)}"
               + (": " + ", ".join(f"{r['group']} / {r['method']} {r['max'] / r['median']:.2f}x" for r in spread)
                  if spread else "")
               + (f" (peers' rows, same run: {sum(map(_beyond, peers))} of {len(peers)})" if peers else ""))
    backed = [r for r in rs if r.get("busy_marks")]
    out.append(f"- kronpe rows whose threads backed off (cores marked busy during their timed calls): "
               f"{len(backed)} of {len(rs)}" + (": " + ", ".join(
                   f"{r['group']} / {r['method']} ({r['busy_marks']} marks)" for r in backed) if backed else ""))
    out += psnr_margins(doc)
    chains = [r for r in rs if r["group"].startswith("mode chain") and r["method"] == "kronpe"]
    large = [r for r in chains if (r.get("flops") or 0) >= LARGE_FLOPS]
    if chains:
        fr = [r["fraction"] for r in chains if "fraction" in r]
        out.append(f"- mode-n chains: kronpe at {100 * min(fr):.0f}% to {100 * max(fr):.0f}% of the GEMM rate "
                   f"(median {100 * statistics.median(fr):.0f}%)" + (
                       f"; at >= {LARGE_FLOPS:.0e} flops {100 * min(r['fraction'] for r in large):.0f}% to "
                       f"{100 * max(r['fraction'] for r in large):.0f}%" if large else ""))
    out.append("")
    return out


def fastest_per_group(rs: List[dict]) -> Dict[str, dict]:
    """The row of least median time in each group (of timed rows)."""
    best: Dict[str, dict] = {}
    for r in rs:
        if r["group"] not in best or r["median"] < best[r["group"]]["median"]:
            best[r["group"]] = r
    return best


def paired_verdicts(kron: List[dict], peers: List[dict]) -> List[str]:
    """Per group, kronpe's fastest row over the best peer (by median) round by round
    (``paired_ratio``): ahead when the interval lies below 1, behind when above, else a tie."""
    best_peer = fastest_per_group(peers)
    verdicts: Dict[str, List[str]] = {"ahead": [], "tie": [], "behind": []}
    for k in kron:
        p = best_peer.get(k["group"])
        got = paired_ratio(k, p) if p is not None else None
        if got is None:
            continue
        med, lo, hi, cover, n = got
        verdict = "ahead" if hi < 1.0 else "behind" if lo > 1.0 else "tie"
        level = "" if cover >= 0.95 else f", {100 * cover:.0f}% with {n} rounds"
        verdicts[verdict].append(f"{k['group']} {med:.2f}x [{lo:.2f}, {hi:.2f}{level}]")
    if not any(verdicts.values()):
        return []
    return [f"- paired by round (kronpe's time / the best peer's in the same round: median [95% interval]): "
            f"ahead in {len(verdicts['ahead'])}, tied in {len(verdicts['tie'])}, behind in "
            f"{len(verdicts['behind'])} group(s)"
            + "".join(f"; {v}: " + ", ".join(items) for v, items in (("behind", verdicts["behind"]),
                                                                    ("tied", verdicts["tie"])) if items)]


def psnr_margins(doc: dict) -> List[str]:
    """Per group scored on several seeds: kronpe's best row by mean PSNR minus the best peer's,
    paired by seed, with its 95% interval (a tie when the interval contains 0)."""
    from .harness import t_interval

    parts = []
    by_group: "OrderedDict[str, List[dict]]" = OrderedDict()
    for r in rows(doc):
        by_group.setdefault(r["group"], []).append(r)
    for group, rs in by_group.items():
        scored = [r for r in rs if r.get("median") is not None and len(r.get("psnr_seeds") or []) >= 2]
        kron = [r for r in scored if not r["peer"]]
        peers = [r for r in scored if r["peer"]]
        if not kron or not peers:
            continue
        k = max(kron, key=lambda r: statistics.fmean(r["psnr_seeds"]))
        p = max(peers, key=lambda r: statistics.fmean(r["psnr_seeds"]))
        n = min(len(k["psnr_seeds"]), len(p["psnr_seeds"]))
        mean, lo, hi = t_interval([a - b for a, b in zip(k["psnr_seeds"][:n], p["psnr_seeds"][:n])])
        verdict = "ahead" if lo > 0 else "behind" if hi < 0 else "tie"
        parts.append(f"{group} {mean:+.2f} [{lo:+.2f}, {hi:+.2f}] vs {p['method']} ({verdict})")
    if not parts:
        return []
    return ["- PSNR, kronpe's best row minus the best peer's (dB, mean [95% interval] over seeds, paired): "
            + "; ".join(parts)]


def compare(old: dict, new: dict, threshold: float = 0.1) -> str:
    """What got faster or slower (median time ratio new / old beyond 1 +- threshold), per row
    present in both documents; then the rows only one of them has."""
    def index(doc):
        return {(b["group"] + ("" if setting_of(b) == "default" else f" [{setting_of(b)} threads]"), method(b)): b
                for b in doc["benchmarks"] if _timed(b)}

    a, b = index(old), index(new)
    lines = ["| group | method | old ms | new ms | new / old | |", "|---|---|---:|---:|---:|---|"]
    changed = {"faster": 0, "slower": 0, "same": 0}
    for key in [k for k in b if k in a]:
        to, tn = a[key]["stats"]["median"], b[key]["stats"]["median"]
        ratio = tn / to
        verdict = "faster" if ratio < 1 - threshold else "slower" if ratio > 1 + threshold else "same"
        changed[verdict] += 1
        mark = {"faster": "faster", "slower": "**slower**", "same": ""}[verdict]
        lines.append(f"| {key[0]} | {key[1]} | {_ms(to)} | {_ms(tn)} | {ratio:.2f} | {mark} |")
    only_old = [k for k in a if k not in b]
    only_new = [k for k in b if k not in a]
    lines += ["", f"{changed['faster']} faster, {changed['slower']} slower, {changed['same']} within "
              f"{100 * threshold:.0f}% (median times; rows in both runs: {sum(changed.values())})"]
    if only_old:
        lines.append(f"only in the old run: {', '.join(f'{g} / {m}' for g, m in only_old)}")
    if only_new:
        lines.append(f"only in the new run: {', '.join(f'{g} / {m}' for g, m in only_new)}")
    return "\n".join(lines)


def plots(doc: dict, out_dir: str) -> List[str]:
    """One PNG per suite: median time against the case size, one line per method (log-log);
    nothing (an empty list) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:  # matplotlib is optional for the harness
        return []
    import os

    by_suite: Dict[str, Dict[str, List[Tuple[float, float]]]] = {}
    parts = by_setting(doc)
    for setting, sub in parts:
        for r in rows(sub):
            if r.get("median") is None or not r.get("size"):
                continue
            label = r["method"] + ("" if len(parts) == 1 else f" [{setting} threads]")
            by_suite.setdefault(r["suite"] or "benchmarks", {}).setdefault(label, []).append((r["size"], r["median"]))
    paths = []
    for suite, methods in by_suite.items():
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for name, pts in sorted(methods.items()):
            pts.sort()
            xs, ys = zip(*pts)
            ax.plot(xs, [y * 1e3 for y in ys], marker="o", lw=2.0 if name.startswith("kronpe") else 1.0,
                    label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("size (elements, pixels or points)")
        ax.set_ylabel("median time (ms)")
        ax.set_title(f"kronpe bench: {suite}")
        ax.legend(fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
        path = os.path.join(out_dir, f"bench-{suite}.png")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def dumps(doc: dict) -> str:
    return json.dumps(doc, indent=1, default=float)


def target_rows(doc: dict, prefix: Optional[str] = None) -> List[dict]:
    """kronpe's rows (optionally of groups starting with ``prefix``) with their ratios."""
    return [r for r in rows(doc) if not r["peer"] and r.get("median") is not None
            and (prefix is None or r["group"].startswith(prefix))]
