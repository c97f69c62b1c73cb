"""Held-out PSNR of kronpe's default fills on the twelve photograph rows of the scattered suite, to
1e-4 dB (the benchmark table prints 0.01 dB), against a saved run and, with --peers, the peers.

    PYTHONPATH=python python benches/scattered_psnr.py [--save NEW.json] [--base OLD.json] [--peers]

The rows: 25% random pixels as scattered points (``fit_points``) and 50% missing pixels
(``fit_grid(mask=)``) on the photographs of kronpe.bench.scattered.IMAGES and the 128 x 128 crop of
camera, the same inputs as ``kronpe bench --suite scattered``. A change meant to make a fill
faster without changing what it computes shows +0.0000 on every row against the run before it;
--peers adds the best of inpaint_biharmonic (and, for points, griddata cubic and RBF thin-plate),
so that the margin of every row is on one line (RBF takes ~6 s per photograph).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

from kronpe.bench import scattered as S  # noqa: E402


def rows():
    """(key, task, name, size) of the twelve rows."""
    for task in ("scattered", "masked"):
        for name, size in [("camera", 128)] + [(n, None) for n in S.IMAGES]:
            yield f"{task}:{name}:{size or 'full'}", task, name, size


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--save", help="write the PSNR of every row to this JSON file")
    ap.add_argument("--base", help="a JSON file of --save: print the difference of every row")
    ap.add_argument("--peers", action="store_true", help="the best peer's PSNR and the margin too")
    args = ap.parse_args(argv)
    base = json.loads(Path(args.base).read_text()) if args.base else {}
    out = {}
    for key, task, name, size in rows():
        s = S.task_inputs(name, task, size)
        fill = S.kronpe_mask if task == "masked" else S.kronpe_points
        out[key] = S.psnr(fill(s), s["truth"])
        line = f"{key:24s} {out[key]:.4f}"
        if key in base:
            line += f"  {out[key] - base[key]:+.4f} vs base"
        if args.peers:
            peers = [S.biharmonic] + ([S.griddata_cubic, S.rbf_thin_plate] if task == "scattered" else [])
            best = max((S.psnr(m(s), s["truth"]), m.__name__) for m in peers)
            line += f"  best peer {best[1]} {best[0]:.4f}, margin {out[key] - best[0]:+.4f}"
        print(line, flush=True)
    if args.save:
        Path(args.save).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
