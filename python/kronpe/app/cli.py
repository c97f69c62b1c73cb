"""The ``kronpe`` command: fit | upsample | resample | fill | grid | predict | demo | analyze | bench."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import List, Optional


def _add_sampling(p) -> None:
    p.add_argument("--sampling", choices=("area", "point"), default="area",
                   help="how the input was sampled: area (pixel means: cameras, box-downsampled images; the "
                        "default) or point (values at the nodes: every k-th node of a field, img[::2, ::2])")


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-progress", action="store_true", help="turn the progress bars off")
    p.add_argument("--out", default="kronpe-out", help="folder for the files written (default: kronpe-out)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (the numbers and the files written) instead of text")


class _Parser(argparse.ArgumentParser):
    """argparse with one error format for the whole command: ``kronpe: error: ...``, exit 2."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        sub = self.prog[len("kronpe"):].strip()
        self.exit(2, f"kronpe: error: {sub + ': ' if sub else ''}{message}\n")


#: What a user's mistake raises (our checks, missing or unreadable files): one line, exit 2.
USER_ERRORS = (ValueError, TypeError, MemoryError, OSError)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kronpe", description=__doc__)
    parser.add_argument("--version", action="store_true", help="print the version and build info")
    parser.add_argument("--debug", action="store_true", help="show the Python traceback of an error")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser)

    p = sub.add_parser("analyze", help="stable rank and distance preservation of the embedders (plots + numbers)")
    _add_common(p)

    p = sub.add_parser("fit", help="fit an image, video or .npy array and report PSNR and time")
    p.add_argument("path", nargs="?", help="an image file (PNG/JPEG) or a .npy array of any dimension")
    p.add_argument("--sample", help="a bundled real sample instead of a path (see kronpe.data.SAMPLES)")
    p.add_argument("--stride", type=int, default=2, help="keep every s-th sample per axis for training (default 2)")
    p.add_argument("--random", type=float, default=None, metavar="FRACTION",
                   help="train on a random FRACTION of the samples instead of a regular subsample")
    p.add_argument("--seed", type=int, default=0, help="seed of the random subset")
    p.add_argument("--size", type=int, default=None,
                   help="with --sample: use a SIZE x SIZE version (central square, resized; see --crop)")
    p.add_argument("--crop", action="store_true",
                   help="with --sample and --size: cut the central window at native resolution instead of resizing")
    p.add_argument("--channels", choices=["auto", "last", "none"], default="auto",
                   help=".npy arrays: is the last axis channels? auto: yes when the array has >= 3 axes "
                        "and the last has <= 4 entries (default auto)")
    p.add_argument("--peak", type=float, default=None,
                   help="PSNR peak (default: 1 for images and videos, max - min for .npy arrays)")
    p.add_argument("--save", default=None, metavar="MODEL.npz", help="save the fitted model (kronpe predict reads it)")
    _add_common(p)

    p = sub.add_parser("upsample", help="upsample an image (PNG out) or an array (.npy out) by a scale or to a size")
    p.add_argument("path", help="an image (PNG/JPEG/TIFF), a .npy array or a NIfTI volume (.nii, .nii.gz; needs nibabel)")
    p.add_argument("--scale", type=float, default=None, help="scale factor of every spatial axis (e.g. 2)")
    p.add_argument("--size", type=int, nargs=2, default=None, metavar=("W", "H"), help="images: the output size")
    _add_sampling(p)
    _add_common(p)

    p = sub.add_parser("resample", help="resample an N-D array (video, volume) to a new shape (.npy out)")
    p.add_argument("path", help="a .npy array, a NIfTI volume (.nii, .nii.gz; needs nibabel) or an image")
    p.add_argument("--shape", type=int, nargs="+", required=True, metavar="N",
                   help="new sizes of the leading axes (the remaining axes are carried along)")
    _add_sampling(p)
    _add_common(p)

    p = sub.add_parser("predict", help="evaluate a saved model (kronpe fit/grid --save) on a grid (.npy out)")
    p.add_argument("model", help="a model file written by --save or model.save (.npz)")
    p.add_argument("--shape", type=int, nargs="+", required=True, metavar="N", help="samples per axis of the grid")
    _add_common(p)

    p = sub.add_parser("fill", help="fill the missing pixels of an image (a mask, or random pixels dropped)")
    p.add_argument("path", nargs="?", help="an image file (PNG/JPEG/TIFF)")
    p.add_argument("--sample", help="a bundled real sample instead of a path (see kronpe.data.SAMPLES)")
    p.add_argument("--size", type=int, default=None, help="with --sample: use a SIZE x SIZE version")
    p.add_argument("--mask", default=None, help="an image of the same size: non-zero (white) pixels are filled")
    p.add_argument("--missing", type=float, default=None, metavar="FRACTION",
                   help="drop this fraction of the pixels at random and fill them (prints the PSNR on them)")
    p.add_argument("--seed", type=int, default=0, help="seed of --missing")
    _add_common(p)

    p = sub.add_parser("grid", help="fit scattered samples (.npy or .csv rows: coordinates, values) onto a grid")
    p.add_argument("path", help="a .npy array or a .csv file, one sample per row: D coordinates, then the values")
    p.add_argument("--shape", type=int, nargs="+", default=None, metavar="N",
                   help="the grid to predict: samples per axis (D numbers)")
    p.add_argument("--spacing", type=float, nargs="+", default=None, metavar="H",
                   help="grid field data in the points' own units (kronpe.grid): the node spacing, one number "
                        "(2-D points, or the axes of --region) or one per axis")
    p.add_argument("--region", type=float, nargs="+", default=None, metavar="V",
                   help="with --spacing: lo_1 hi_1 ... lo_D hi_D (default: the points' bounding box)")
    p.add_argument("--maxdist", type=float, default=None, metavar="DIST",
                   help="with --spacing: NaN at nodes farther than DIST from every point")
    p.add_argument("--save", default=None, metavar="MODEL.npz", help="save the fitted model (kronpe predict reads it)")
    _add_common(p)

    p = sub.add_parser("demo", help="PSNR/time table over bundled real photographs and a video")
    p.add_argument("--quick", action="store_true", help="fewer signals and rows (a smoke run)")
    p.add_argument("--adam", action="store_true",
                   help="add the papers' gradient-descent rows (Adam through kronpe.torch; needs torch, slow)")
    _add_common(p)

    p = sub.add_parser("bench", help="the benchmark suite against its peers: table, JSON and plots")
    p.add_argument("--quick", action="store_true", help="the small cases only (under a minute)")
    p.add_argument("--suite", action="append", metavar="NAME",
                   help="run only these suites (repeat or comma-separate): chains, fits, blend, scattered, "
                        "field, torch, cuda (default: all); and validation, run only when named (the fill's "
                        "tuned defaults on images they were not tuned on: PSNR margins with 95%% intervals, "
                        "minutes long; writes validation.md and validation.json)")
    p.add_argument("-k", "--match", default=None, metavar="REGEX",
                   help="run only the groups whose name matches REGEX (e.g. 'D=3'); validation: the images "
                        "whose name matches")
    p.add_argument("--rounds", type=int, default=None,
                   help="timed rounds per case (default: per case, at most 10 with --quick)")
    p.add_argument("--flush", action="store_true",
                   help="evict the CPU caches before every timed call (twice the largest cache; else the "
                        "figures are warm: each method's inputs may still be cached from its last call)")
    p.add_argument("--threads", default=None, metavar="LIST",
                   help="measure every case under each of these thread settings in turn, every library "
                        "(kronpe, each BLAS and OpenMP runtime, torch) limited alike: comma-separated counts "
                        "and 'default' (the libraries' own), e.g. '1,default': a table each (default: as the "
                        "process runs, i.e. its OMP_NUM_THREADS and the like)")
    p.add_argument("--seeds", type=int, default=None,
                   help="score the cases with random inputs (masks, points, noise) on this many draws, "
                        "untimed beyond the first: PSNR as a mean with its 95%% interval, and kronpe's "
                        "margin over the best peer paired by seed (default: 3; 1 with --quick)")
    p.add_argument("--compare", nargs="+", metavar="JSON",
                   help="OLD.json: print what got faster or slower than that run; OLD.json NEW.json: compare "
                        "two runs without measuring")
    p.add_argument("--threshold", type=float, default=0.1,
                   help="with --compare: a change counts beyond this fraction (default 0.1)")
    p.add_argument("--no-plots", action="store_true", help="do not write the PNG plots")
    _add_common(p)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Run the command; a user error prints ``kronpe: error: ...`` and returns 2 (``--debug``:
    the traceback instead)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a bad command line (2, already printed)
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return _run(parser, args)
    except USER_ERRORS as exc:
        if args.debug:
            raise
        message = str(exc) or type(exc).__name__
        if isinstance(exc, OSError) and exc.filename is not None and str(exc.filename) not in message:
            message = f"{message}: {exc.filename}"
        print(f"kronpe: error: {' '.join(message.split())}", file=sys.stderr)
        return 2


def _run(parser: argparse.ArgumentParser, args) -> int:
    if args.version:
        import kronpe

        print(kronpe.__version__, kronpe.build_info())
        return 0
    if args.command is None:
        parser.print_help()
        return 1
    if args.command == "analyze":
        from .analyze import run_analyze

        if not args.json:
            return run_analyze(out=args.out, progress=not args.no_progress)
        import contextlib

        from .output import Output

        report = Output(args, "analyze")
        with contextlib.redirect_stdout(sys.stderr):  # the text goes to stderr, the JSON to stdout
            status = run_analyze(out=args.out, progress=False)
        report.put(files=sorted(str(f) for f in Path(args.out).glob("fig*.png")))
        return status or report.done()
    if args.command == "fit":
        from .fit_cmd import run_fit

        return run_fit(args)
    if args.command in ("fill", "grid", "upsample", "resample", "predict"):
        from . import jobs

        return getattr(jobs, f"run_{args.command}")(args)
    if args.command == "bench":
        from .bench_cmd import run_bench

        return run_bench(args)
    if args.command == "demo":
        from .demo import run_demo

        return run_demo(args)
    parser.error(f"unknown command {args.command}")
    return 2  # pragma: no cover - parser.error exits


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
