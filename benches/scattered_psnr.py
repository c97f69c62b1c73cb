"""Held-out PSNR of kronpe's default fills on the twelve photograph rows of the scattered suite, to
1e-4 dB (the benchmark table prints 0.01 dB), against a saved run and, with --peers, the peers.

    PYTHONPATH=python python benches/scattered_psnr.py [--save NEW.json] [--base OLD.json] [--peers]
        [--noisy]

The rows: 25% random pixels as scattered points (``fit_points``) and 50% missing pixels
(``fit_grid(mask=)``) on the photographs of kronpe.bench.scattered.IMAGES and the 128 x 128 crop of
camera, the same inputs as ``kronpe bench --suite scattered``. A change meant to make a fill
faster without changing what it computes shows +0.0000 on every row against the run before it;
--peers adds the best of inpaint_biharmonic (and, for points, griddata cubic and RBF thin-plate),
so that the margin of every row is on one line (RBF takes ~6 s per photograph).

--noisy: instead, the check that a change of the held-out sweep (its lambda grid, steps or
stopping) still chooses well where the samples are not exact: camera 128^2 and 256^2, chelsea and
astronaut 256^2 plus Gaussian noise of standard deviation NOISE (seed 1), half the pixels missing
(seed 1), ``fit_grid(mask=)``; the PSNR against the clean photograph on the missing pixels, with the
lambda chosen (k = log10(rho / lambda), 6 the interpolation limit) and the lambdas tried. (Issue 11:
SWEEP_FLAT_NODES 2% sent astronaut 256^2 at 0.05 to the interpolation limit, -0.05 dB.)
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))

import numpy as np  # noqa: E402

import kronpe  # noqa: E402
from kronpe.bench import scattered as S  # noqa: E402

NOISY_ROWS = [("camera", 128), ("camera", 256), ("chelsea", None), ("astronaut", 256)]
NOISE = (0.005, 0.01, 0.02, 0.05)


def rows():
    """(key, task, name, size) of the twelve rows."""
    for task in ("scattered", "masked"):
        for name, size in [("camera", 128)] + [(n, None) for n in S.IMAGES]:
            yield f"{task}:{name}:{size or 'full'}", task, name, size


def noisy_rows():
    """(key, PSNR, note) of the --noisy rows."""
    for name, size in NOISY_ROWS:
        for sigma in NOISE:
            img = S.image(name, size)
            rng = np.random.default_rng(1)
            noisy = img + sigma * rng.standard_normal(img.shape).astype(np.float32)
            mask = rng.random(img.shape[:2]) < 0.5
            m = kronpe.fit_grid(noisy, mask=mask)
            full = m.predict_grid(kronpe.data.grid_coords(mask.shape))
            note = f"k {math.log10(m.info['rho'] / m.ridge):.2f}, tried {len(m.info['ridge_candidates'])}"
            yield f"noisy:{name}:{size or 'full'}:{sigma}", S.psnr(full[~mask], img[~mask]), note


def twelve_rows(peers: bool):
    """(key, PSNR, note) of the twelve rows (note: the best peer's margin with ``peers``)."""
    for key, task, name, size in rows():
        s = S.task_inputs(name, task, size)
        fill = S.kronpe_mask if task == "masked" else S.kronpe_points
        value = S.psnr(fill(s), s["truth"])
        note = ""
        if peers:
            methods = [S.biharmonic] + ([S.griddata_cubic, S.rbf_thin_plate] if task == "scattered" else [])
            best = max((S.psnr(m(s), s["truth"]), m.__name__) for m in methods)
            note = f"best peer {best[1]} {best[0]:.4f}, margin {value - best[0]:+.4f}"
        yield key, value, note


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--save", help="write the PSNR of every row to this JSON file")
    ap.add_argument("--base", help="a JSON file of --save: print the difference of every row")
    ap.add_argument("--peers", action="store_true", help="the best peer's PSNR and the margin too")
    ap.add_argument("--noisy", action="store_true", help="the noisy photographs instead (module docstring)")
    args = ap.parse_args(argv)
    base = json.loads(Path(args.base).read_text()) if args.base else {}
    out = {}
    for key, value, note in (noisy_rows() if args.noisy else twelve_rows(args.peers)):
        out[key] = value
        line = f"{key:28s} {value:.4f}"
        if key in base:
            line += f"  {value - base[key]:+.4f} vs base"
        if note:
            line += f"  {note}"
        print(line, flush=True)
    if args.save:
        Path(args.save).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
