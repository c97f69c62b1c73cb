"""Turn pytest-benchmark JSON (or ``kronpe bench`` JSON) into the ratio table of benches/README.md.

    python -m pytest benches --benchmark-only --benchmark-json=bench.json
    python benches/report.py bench.json [more.json ...] > tables.md

The table is kronpe.bench.report's, the one ``kronpe bench`` prints: per group every method's
median time (minimum in brackets), its ratio to the best peer of the group, and its GFLOP/s as a
fraction of the run's BLAS rate (``test_blas_rate``) or its GB/s as a fraction of the copy
bandwidth measured beside it; then the summary against the targets. Medians are the statistic: on
a shared machine both move; re-measure on a quiet one.
"""
from __future__ import annotations

import os
import sys
from typing import List

_PY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python")
if _PY not in sys.path:
    sys.path.insert(0, _PY)

from kronpe.bench import report  # noqa: E402


def main(argv: List[str]) -> int:
    if not argv:
        print(__doc__)
        return 1
    docs = [report.load(p) for p in argv]
    merged = dict(docs[0], benchmarks=[b for d in docs for b in d["benchmarks"]])
    for d in docs[1:]:  # the rates of a kronpe bench run, if any file has them
        merged.setdefault("rates", d.get("rates"))
    print(report.markdown(merged))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
