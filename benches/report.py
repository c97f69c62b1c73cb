"""Turn pytest-benchmark JSON into the ratio tables of benches/README.md.

    python -m pytest benches --benchmark-only --benchmark-json=bench.json
    python benches/report.py bench.json [more.json ...] > tables.md

Tables (Markdown):
- the BLAS rate of the run (``test_blas_rate``: GFLOP/s of a float32 square matmul, from its
  fastest round: what the BLAS reaches when it gets the cores);
- mode-n chains: per case, every method's median time, GFLOP/s and % of the BLAS rate, and the
  speed of kronpe against the best peer (best peer median / kronpe median; > 1: kronpe faster),
  then the summary against the targets (never slower than the best peer, >= 1.5x in the median,
  >= 75% of the BLAS rate at large sizes);
- grid fits: per signal, every method's median time and its ratio to the fit's matrix products
  alone (target for the cached plan: <= 1.5) and to kronpe's cached plan;
- blend bandwidth (``bench_blend.py::test_blend_bandwidth``): per case, blend and transpose
  median times, GB/s of the bytes they must touch and that rate as a fraction of the copy
  bandwidth measured between their rounds (target >= 0.5).
Medians are the statistic (minimums in brackets): on a shared machine both move; re-measure on a
quiet one.
"""
from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from typing import Dict, List

LARGE_FLOPS = 5e8  # a chain of at least this many flops counts as "large" for the BLAS target


def load(paths: List[str]) -> List[dict]:
    benches = []
    for p in paths:
        with open(p) as f:
            doc = json.load(f)
        benches += doc["benchmarks"]
    return benches


def _method(b: dict) -> str:
    return b.get("extra_info", {}).get("method", b["name"])


def _gflops(b: dict) -> float:
    flops = b.get("extra_info", {}).get("flops")
    return float("nan") if not flops else flops / b["stats"]["median"] / 1e9


def blas_rate(benches: List[dict]) -> float:
    """The machine's float32 matmul rate: flops / the fastest round (what the BLAS can reach)."""
    rates = [
        b["extra_info"]["flops"] / b["stats"]["min"] / 1e9
        for b in benches
        if b.get("extra_info", {}).get("blas_rate")
    ]
    return max(rates) if rates else float("nan")


def _ms(t: float) -> str:
    return f"{t * 1e3:.2f}"


def chain_tables(benches: List[dict], blas: float) -> List[str]:
    groups: Dict[str, List[dict]] = defaultdict(list)
    for b in benches:
        if (b.get("group") or "").startswith("mode chain"):
            groups[b["group"]].append(b)
    if not groups:
        return []
    out = ["## Mode-n chains (float32)", ""]
    out.append("| case | method | median ms (min) | GFLOP/s | % of BLAS | kronpe speed-up |")
    out.append("|---|---|---:|---:|---:|---:|")
    speedups, large_fraction = [], []
    def size_key(g):
        info = groups[g][0].get("extra_info", {})
        return (info.get("D", 0), info.get("n", 0), info.get("m", 0))

    for g in sorted(groups, key=size_key):
        rows = sorted(groups[g], key=lambda b: b["stats"]["median"])
        kron = [b for b in rows if _method(b) == "kronpe"]
        peers = [b for b in rows if _method(b) != "kronpe"]
        k_med = kron[0]["stats"]["median"] if kron else float("nan")
        if kron and peers:
            best_min = min(b["stats"]["min"] for b in peers)
            speedups.append((g, peers[0]["stats"]["median"] / k_med, _method(peers[0]),
                             best_min / kron[0]["stats"]["min"]))
            if kron[0]["extra_info"].get("flops", 0) >= LARGE_FLOPS:
                large_fraction.append((g, _gflops(kron[0]) / blas))
        for b in rows:
            su = b["stats"]["median"] / k_med
            su_text = "" if _method(b) == "kronpe" or su != su else f"{su:.2f}x"
            out.append(
                f"| {g[len('mode chain '):]} | {_method(b)} | {_ms(b['stats']['median'])} "
                f"({_ms(b['stats']['min'])}) | {_gflops(b):.1f} | {100 * _gflops(b) / blas:.0f}% | "
                f"{su_text} |"
            )
    out += ["", f"BLAS rate of this run (float32 matmul, fastest round): {blas:.1f} GFLOP/s", ""]
    if speedups:
        vals = [t[1] for t in speedups]
        mins = [t[3] for t in speedups]
        worst = min(speedups, key=lambda t: t[1])
        out.append("Summary against the targets:")
        out.append("")
        out.append(
            f"- kronpe vs the best peer of each case (medians): median {statistics.median(vals):.2f}x, "
            f"worst {worst[1]:.2f}x ({worst[0]}, best peer {worst[2]}) "
            f"[targets: median >= 1.5x, never < 1.0x]"
        )
        out.append(
            f"- the same on minimum times (less sensitive to other load): median "
            f"{statistics.median(mins):.2f}x, worst {min(mins):.2f}x"
        )
        if large_fraction:
            fr = [f for _, f in large_fraction]
            out.append(
                f"- kronpe at large sizes (>= {LARGE_FLOPS:.0e} flops): "
                f"{100 * min(fr):.0f}% to {100 * max(fr):.0f}% of the BLAS rate, median "
                f"{100 * statistics.median(fr):.0f}% [target >= 75%]"
            )
        out.append("")
    return out


def fit_tables(benches: List[dict], blas: float) -> List[str]:
    groups: Dict[str, List[dict]] = defaultdict(list)
    for b in benches:
        if (b.get("group") or "").startswith("grid fit"):
            groups[b["group"]].append(b)
    if not groups:
        return []
    out = ["## Grid fits (float32)", ""]
    out.append("| signal | method | median ms (min) | / products alone | / kronpe plan | held-out PSNR |")
    out.append("|---|---|---:|---:|---:|---:|")
    summary = []
    for g in sorted(groups):
        rows = sorted(groups[g], key=lambda b: b["stats"]["median"])
        by = {_method(b): b["stats"]["median"] for b in rows}
        by_min = {_method(b): b["stats"]["min"] for b in rows}

        def pick(d, key):
            return next((t for m, t in d.items() if key in m), float("nan"))

        prod, plan = pick(by, "products alone"), pick(by, "cached plan")
        prod_min, plan_min = pick(by_min, "products alone"), pick(by_min, "cached plan")
        for b in rows:
            med = b["stats"]["median"]
            psnr = b.get("extra_info", {}).get("heldout_psnr")
            out.append(
                f"| {g[len('grid fit: '):]} | {_method(b)} | {_ms(med)} ({_ms(b['stats']['min'])}) | "
                f"{med / prod:.2f} | {med / plan:.2f} | {'' if psnr is None else f'{psnr:.2f}'} |"
            )
        papers = next((t for m, t in by.items() if m.startswith("papers")), float("nan"))
        summary.append(
            f"- {g[len('grid fit: '):]}: cached plan / products alone = {plan / prod:.2f} "
            f"(on minimum times {plan_min / prod_min:.2f}) [target <= 1.5]; "
            f"papers' formulation / cached plan = {papers / plan:.1f}x"
        )
    out += ["", "Summary against the targets:", ""] + summary + [""]
    return out


def blend_tables(benches: List[dict]) -> List[str]:
    rows = [b for b in benches if (b.get("group") or "").startswith("blend bandwidth")]
    if not rows:
        return []
    out = ["## Blend and transpose against the copy bandwidth", ""]
    out.append("| case | op | weights | C | dtype | median ms (min) | GB/s | copy GB/s | of copy |")
    out.append("|---|---|---|---:|---|---:|---:|---:|---:|")

    def key(b):
        i = b["extra_info"]
        return (i["case"], i["op"], i["form"], i["channels"], i["dtype"])

    fractions = []
    for b in sorted(rows, key=key):
        i = b["extra_info"]
        fractions.append((i["fraction_of_copy"], key(b)))
        out.append(f"| {i['case']} | {i['op']} | {'on the fly' if i['form'] == 'fly' else 'stored'} | "
                   f"{i['channels']} | {i['dtype']} | {_ms(b['stats']['median'])} ({_ms(b['stats']['min'])}) | "
                   f"{i['GBps']:.2f} | {i['copy_GBps']:.2f} | {100 * i['fraction_of_copy']:.0f}% |")
    worst = min(fractions)
    out += ["", f"Fraction of copy bandwidth: median {100 * statistics.median(f for f, _ in fractions):.0f}%, "
            f"worst {100 * worst[0]:.0f}% ({' '.join(map(str, worst[1]))}) [target >= 50%]", ""]
    return out


def main(argv: List[str]) -> int:
    if not argv:
        print(__doc__)
        return 1
    benches = load(argv)
    blas = blas_rate(benches)
    lines = chain_tables(benches, blas) + fit_tables(benches, blas) + blend_tables(benches)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
