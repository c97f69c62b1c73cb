"""A grid fit beyond one worker's memory: a volume upsampled with kronpe.dask on a LocalCluster.

The volume (N^3 float32, a smooth field plus noise, written to Zarr chunk by chunk so the client
never holds it) is fitted with cubic B-splines at the sample spacing (``BSpline(N, margin=2)``,
pad 2, a fixed ridge: kronpe's default embedders with a given ridge) and predicted on an
M^3 grid (M = 4 N / 3), in two ways, interleaved, each ``--repeats`` times:

- in memory, one process: ``np.asarray(zarr)``, ``GridPlan.fit``, ``predict_grid`` (BLAS on
  all the cores given: ``OPENBLAS_NUM_THREADS`` / ``OMP_NUM_THREADS``, default 2);
- kronpe.dask: the Zarr array as a dask array (chunks of ``--chunk``^3), ``GridPlan.fit``,
  ``predict_grid(...).to_zarr(...)``, on a LocalCluster of ``--workers`` processes of 1 thread
  each with a ``--memory-limit`` per worker (so the same cores as in memory).

Throughput is input voxels per second of the whole run (the in-memory time does not include
writing its result; the dask time includes reading the input and writing the Zarr output). The
dask result is checked against the in-memory one on slices through every axis (max abs
difference over the field's range). The volume and the outputs live in a temporary directory,
removed at the end. Times come from kronpe.bench's harness timer (one call per round, no warm-up:
a run is minutes long). ``python benches/bench_dask.py --n 768`` is the 1.8 GB run of
benches/README.md; ``python -m pytest benches/bench_dask.py --benchmark-only`` runs a small
version (N = 96) as a pytest-benchmark pair.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile

import numpy as np

_PY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python")
if _PY not in sys.path:
    sys.path.insert(0, _PY)

RIDGE = 1e-4


def _field_block(block_info=None):
    """One chunk of the test volume: sinusoids of the coordinates plus seeded noise."""
    loc = block_info[None]["array-location"]
    n = block_info[None]["shape"][0]
    x, y, z = (np.arange(lo, hi, dtype=np.float32)[s] / n for (lo, hi), s in
               zip(loc, [np.s_[:, None, None], np.s_[None, :, None], np.s_[None, None, :]]))
    seed = abs(hash(tuple(lo for lo, _ in loc))) % (2**32)
    noise = np.random.default_rng(seed).standard_normal((x.size, y.size, z.size), dtype=np.float32)
    return (np.sin(7 * x) * np.cos(5 * y) + np.sin(3 * z + 11 * x * y) + 0.05 * noise).astype(np.float32)


def make_volume(path: str, n: int, chunk: int) -> None:
    import dask.array as da

    vol = da.map_blocks(_field_block, chunks=((chunk,) * (n // chunk) + ((n % chunk,) if n % chunk else ()),) * 3,
                        dtype=np.float32)
    vol.to_zarr(path)


def plan_for(n: int):
    import kronpe

    coords = [np.linspace(0, 1, n + 1)[:-1]] * 3
    return kronpe.GridPlan(coords, [kronpe.BSpline(n, margin=2)] * 3, ridge=RIDGE, pad=2)


def out_coords(m: int):
    return [np.linspace(0, 1, m + 1)[:-1]] * 3


def run_memory(src: str, n: int, m: int) -> np.ndarray:
    """The in-memory fit and prediction of the volume at ``src`` (N^3 -> M^3)."""
    import zarr

    S = np.asarray(zarr.open(src, mode="r")[...])
    return plan_for(n).fit(S).predict_grid(out_coords(m))


def run_dask(src: str, dst: str, n: int, m: int) -> None:
    """The same with kronpe.dask: the Zarr input as a dask array, the prediction written to ``dst``."""
    import dask.array as da

    plan_for(n).fit(da.from_zarr(src)).predict_grid(out_coords(m)).to_zarr(dst, overwrite=True)


def check_slices(dst: str, ref: np.ndarray) -> float:
    import zarr

    out = zarr.open(dst, mode="r")
    k = ref.shape[0] // 3
    err = max(float(np.abs(out[k] - ref[k]).max()), float(np.abs(out[:, k] - ref[:, k]).max()),
              float(np.abs(out[:, :, k] - ref[:, :, k]).max()))
    return err / float(np.ptp(ref[k]))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=768)
    ap.add_argument("--chunk", type=int, default=128)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory-limit", default="1GB")
    ap.add_argument("--block-mb", type=int, default=16, help="kronpe.dask.BLOCK_BYTES in MB")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--no-memory", action="store_true", help="skip the in-memory runs (a volume that does not fit)")
    ap.add_argument("--dir", default=None, help="where the temporary directory goes (default: the system's)")
    args = ap.parse_args(argv)
    import dask
    from distributed import Client, LocalCluster

    import kronpe.dask
    from kronpe.bench.harness import timings

    kronpe.dask.BLOCK_BYTES = args.block_mb << 20

    n, m = args.n, 4 * args.n // 3
    tmp = tempfile.mkdtemp(prefix="kronpe-bench-dask-", dir=args.dir)
    env = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    try:
        src, dst = os.path.join(tmp, "in.zarr"), os.path.join(tmp, "out.zarr")
        with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                          memory_limit=args.memory_limit, dashboard_address=":0", env=env,
                          local_directory=tmp) as cluster, Client(cluster), \
                dask.config.set({"array.rechunk.method": "tasks"}):
            make_volume(src, n, args.chunk)
            gb_in, gb_out = n**3 * 4 / 1e9, m**3 * 4 / 1e9
            print(f"volume {n}^3 float32 ({gb_in:.2f} GB) -> {m}^3 ({gb_out:.2f} GB), chunks {args.chunk}^3, "
                  f"{args.workers} workers x 1 thread, memory limit {args.memory_limit} each, blocks of "
                  f"{args.block_mb} MB; "
                  f"in memory: {os.environ.get('OPENBLAS_NUM_THREADS', 'all')} BLAS threads", flush=True)
            t_mem, t_dask, err = [], [], None
            for r in range(args.repeats):
                ref = []
                if not args.no_memory:
                    t_mem += timings(lambda: run_memory(src, n, m), keep=ref)
                    print(f"  round {r}: in memory {t_mem[-1]:.1f} s", flush=True)
                t_dask += timings(lambda: run_dask(src, dst, n, m))
                print(f"  round {r}: dask {t_dask[-1]:.1f} s", flush=True)
                if ref:
                    err = check_slices(dst, ref.pop())
        md = statistics.median(t_dask)
        print("\n| run | median s | input Mvoxel/s | vs in memory |\n|---|---|---|---|")
        if t_mem:
            mm = statistics.median(t_mem)
            print(f"| in memory, 1 process | {mm:.1f} | {n**3 / mm / 1e6:.2f} | 1.00 |")
        print(f"| kronpe.dask, {args.workers} x {args.memory_limit}, Zarr out | {md:.1f} | {n**3 / md / 1e6:.2f} | "
              f"{(statistics.median(t_mem) / md) if t_mem else float('nan'):.2f} |")
        if err is not None:
            print(f"max |dask - in memory| on slices through every axis: {err:.2e} of the range")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# ---- pytest-benchmark: the same pair at a small size ------------------------------------------------


def test_dask_upsample_small(benchmark, tmp_path):
    import pytest

    pytest.importorskip("zarr")
    distributed = pytest.importorskip("distributed")
    n, m = 96, 128
    src, dst = str(tmp_path / "in.zarr"), str(tmp_path / "out.zarr")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=":0", memory_limit="1GB") as cluster, distributed.Client(cluster):
        make_volume(src, n, 32)
        ref = run_memory(src, n, m)
        benchmark.group = "upsample 96^3 -> 128^3"
        benchmark.pedantic(run_dask, args=(src, dst, n, m), rounds=3)
        assert check_slices(dst, ref) < 1e-4


def test_memory_upsample_small(benchmark, tmp_path):
    import pytest

    pytest.importorskip("zarr")
    pytest.importorskip("distributed")
    n, m = 96, 128
    src = str(tmp_path / "in.zarr")
    import dask

    with dask.config.set(scheduler="synchronous"):
        make_volume(src, n, 32)
    benchmark.group = "upsample 96^3 -> 128^3"
    out = benchmark.pedantic(run_memory, args=(src, n, m), rounds=3)
    assert out.shape == (m, m, m) and np.isfinite(out).all()


if __name__ == "__main__":
    main()
