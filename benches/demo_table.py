"""The PSNR table of ``kronpe demo``, with the accuracy targets checked.

    python benches/demo_table.py [--out DIR] [--quick]

Runs every row of kronpe.app.demo.DEMO_ROWS on every demo signal (the photographs of
kronpe.data.DEMO_IMAGES at 512 x 512 from 256 x 256, and the 128^3 video from 64^3), writes
DIR/demo.md and DIR/demo.json (default DIR: benches/results) and prints the table followed by
the targets: kronpe's GCV mode at least as accurate on held-out samples as every fixed setting
of the papers on every signal, and how it compares with cubic splines.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE.parent / "python"))

from kronpe.app import demo as app  # noqa: E402

GCV = "kronpe GCV (embedders=None)"
SPLINE = "cubic spline (scipy.ndimage)"


def targets(entries) -> str:
    """Lines checking GCV >= every paper row and GCV vs cubic splines, per signal."""
    lines = ["", "Targets (held-out PSNR):", ""]
    cases = list(dict.fromkeys(e.case for e in entries))
    for c in cases:
        rows = {e.row: e.heldout_psnr for e in entries if e.case == c}
        gcv = rows.get(GCV, float("nan"))
        papers = {r: v for r, v in rows.items() if "paper" in r and v == v}
        best_name = max(papers, key=papers.get) if papers else "none"
        best = papers.get(best_name, float("nan"))
        spline = rows.get(SPLINE, float("nan"))
        ok = "met" if gcv >= best else "MISSED"
        lines.append(
            f"- {c}: GCV {gcv:.2f} dB vs best paper row {best:.2f} dB ({best_name}): {ok}; "
            f"vs cubic spline {spline:.2f} dB: {gcv - spline:+.2f} dB"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(_HERE / "results"))
    p.add_argument("--quick", action="store_true")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    rows = [r for r in app.DEMO_ROWS if r.quick or not args.quick]
    entries = app.run_demo_table(app.demo_cases(args.quick), rows, progress=not args.no_progress)
    text = app.format_demo(entries) + "\n" + targets(entries) + "\n"
    print(text)
    out = Path(args.out)
    os.makedirs(out, exist_ok=True)
    (out / "demo.md").write_text(text)
    (out / "demo.json").write_text(json.dumps([e.__dict__ for e in entries], indent=1) + "\n")
    print(f"wrote {out / 'demo.md'} and {out / 'demo.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
