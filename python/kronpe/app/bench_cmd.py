"""``kronpe bench``: the benchmark suite with its peers in the same run (kronpe.bench).

Writes ``bench.md`` (the table), ``bench.json`` (every timing and the machine) and ``bench-<suite>.png``
(time against size, per method; with matplotlib) into ``--out``; prints the table (``--json``: the
JSON document instead) and, with ``--compare OLD.json``, what got faster or slower. Exits 1 when one
of kronpe's own rows failed or gave a wrong result (after writing everything).

A study (``kronpe.bench.STUDIES``: ``validation``) runs only when ``--suite`` names it, and writes
``<study>.md`` and ``<study>.json`` instead (with ``--quick`` and ``-k``; the timing flags do not
apply to it). Named beside timed suites, both run: the suites first.
"""
from __future__ import annotations

import os
import sys

DEFAULT_SEEDS = 3  # random draws each PSNR is scored on (a mean with its interval); 1 with --quick


def run_bench(args) -> int:
    from .. import bench
    from ..bench import report

    if args.rounds is not None and args.rounds < 1:
        raise ValueError(f"--rounds must be a positive integer, got {args.rounds}")
    if args.seeds is not None and args.seeds < 1:
        raise ValueError(f"--seeds must be a positive integer, got {args.seeds}")
    if args.threshold <= 0 or args.threshold >= 1:
        raise ValueError(f"--threshold must lie in (0, 1), got {args.threshold}")
    if args.compare is not None and len(args.compare) > 2:
        raise ValueError(f"--compare takes OLD.json or OLD.json NEW.json, got {len(args.compare)} files")
    old = [report.load(p) for p in args.compare] if args.compare else []
    if len(old) == 2:  # two files: compare them, measure nothing
        print(report.compare(old[0], old[1], args.threshold))
        return 0
    from .._adapters import validate

    suites = [s for item in (args.suite or []) for s in item.split(",") if s] or None
    for name in suites or []:
        validate.choice("suite", name, tuple(bench.SUITES) + tuple(bench.STUDIES))
    studies = [s for s in suites or [] if s in bench.STUDIES]
    timed = [s for s in suites or [] if s not in bench.STUDIES] or (None if not studies else [])
    if old and not timed and studies:
        raise ValueError("--compare compares timings: name a timed suite beside the study")
    status = run_timed(args, timed, old) if timed != [] else 0
    for name in studies:
        run_study(args, name)
    return status


def run_study(args, name: str) -> None:
    """Run the study ``name`` and write ``<name>.md`` and ``<name>.json`` into ``--out``; print
    its table (``--json``: its document)."""
    from .. import bench
    from ..bench import report

    module = bench.study(name)
    doc = module.run(quick=args.quick, match=args.match, progress=not args.no_progress and sys.stderr.isatty(),
                     argv=sys.argv[1:])
    os.makedirs(args.out, exist_ok=True)
    table = module.markdown(doc)
    with open(os.path.join(args.out, f"{name}.json"), "w") as f:
        f.write(report.dumps(doc))
    with open(os.path.join(args.out, f"{name}.md"), "w") as f:
        f.write(table + "\n")
    if args.json:
        print(report.dumps(doc))
    else:
        print(table)
        print(f"wrote {os.path.join(args.out, name + '.md')}, {name}.json")


def run_timed(args, suites, old) -> int:
    """The timed suites ``suites`` (None: all): bench.md, bench.json, the plots, --compare."""
    from .. import bench
    from ..bench import report

    from ..bench.harness import thread_setting

    threads = [thread_setting(t.strip()) for t in args.threads.split(",")] if args.threads else [None]
    seeds = args.seeds if args.seeds is not None else (1 if args.quick else DEFAULT_SEEDS)
    doc = bench.run(suites, quick=args.quick, match=args.match, rounds=args.rounds,
                    progress=not args.no_progress and sys.stderr.isatty(), argv=sys.argv[1:],
                    flush=args.flush, threads=threads, seeds=seeds)
    os.makedirs(args.out, exist_ok=True)
    table = report.markdown(doc)
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        f.write(report.dumps(doc))
    with open(os.path.join(args.out, "bench.md"), "w") as f:
        f.write(table + "\n")
    pngs = [] if args.no_plots else report.plots(doc, args.out)
    if args.json:
        print(report.dumps(doc))
    else:
        print(table)
        print(f"wrote {os.path.join(args.out, 'bench.md')}, bench.json" + (f" and {len(pngs)} plot(s)" if pngs else ""))
    if old:
        print("", file=sys.stderr if args.json else sys.stdout)
        print(report.compare(old[0], doc, args.threshold), file=sys.stderr if args.json else sys.stdout)
    failed = failed_kronpe_rows(doc)
    if failed:  # kronpe's own rows must run and be right: a failure is the command's failure
        for rec in failed:
            print(f"kronpe: error: {rec['group']}: {rec['name']}: {rec['skipped']}", file=sys.stderr)
        return 1
    return 0


def failed_kronpe_rows(doc: dict) -> list:
    """The records of kronpe's own rows that failed or gave a wrong result (a peer that fails, or
    a module that does not import, is reported in the table and is not an error)."""
    out = []
    for rec in doc.get("benchmarks", []):
        why = rec.get("skipped", "")
        if not rec.get("extra_info", {}).get("peer", True) and why.startswith(("failed", "wrong result")):
            out.append(rec)
    return out
