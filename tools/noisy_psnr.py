"""Default fills of noisy photographs: the check that a change of the held-out sweep (its lambda
grid, its steps, its stopping) keeps choosing well where the samples are not exact. Each row: a
photograph plus Gaussian noise of standard deviation SIGMA (seed 1), half its pixels missing
(seed 1), filled by ``fit_grid(mask=)``; printed: the PSNR against the clean photograph on the
missing pixels, the lambda chosen (k = log10(rho / lambda); 6 is the interpolation limit), how many
lambdas the sweep tried. With --base, the difference of every row's PSNR against a saved run.

    PYTHONPATH=python python tools/noisy_psnr.py [--save NEW.json] [--base OLD.json]

(Benches/README.md, issue 11: SWEEP_FLAT_NODES 2% sent astronaut 256^2 at 0.05 to the interpolation
limit, -0.05 dB; the predicted stop moved astronaut 256^2 at 0.005 and 0.01 by -0.001 dB.)
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))

import kronpe  # noqa: E402
from kronpe.bench import scattered as S  # noqa: E402

ROWS = [("camera", 128), ("camera", 256), ("chelsea", None), ("astronaut", 256)]
SIGMAS = (0.005, 0.01, 0.02, 0.05)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--save", help="write every row's PSNR to this JSON file")
    ap.add_argument("--base", help="a JSON file of --save: print the difference of every row")
    args = ap.parse_args(argv)
    base = json.loads(Path(args.base).read_text()) if args.base else {}
    out = {}
    for name, size in ROWS:
        for sigma in SIGMAS:
            img = S.image(name, size)
            rng = np.random.default_rng(1)
            noisy = img + sigma * rng.standard_normal(img.shape).astype(np.float32)
            mask = rng.random(img.shape[:2]) < 0.5
            m = kronpe.fit_grid(noisy, mask=mask)
            full = m.predict_grid(kronpe.data.grid_coords(mask.shape))
            key = f"{name}:{size or 'full'}:{sigma}"
            out[key] = S.psnr(full[~mask], img[~mask])
            info = m.info
            line = (f"{key:24s} PSNR {out[key]:.4f}  k {math.log10(info['rho'] / m.ridge):.2f}  "
                    f"tried {len(info['ridge_candidates'])}")
            if key in base:
                line += f"  {out[key] - base[key]:+.4f} vs base"
            print(line, flush=True)
    if args.save:
        Path(args.save).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
