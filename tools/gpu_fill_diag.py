"""The default fills on a GPU machine: host solve against device solve, side by side.

    python3 tools/gpu_fill_diag.py [REPEATS [TASKS]]

For 25% random pixels of 512^2 photographs given as points (fit_points + predict of the held-out
pixels) and 50% masked (fit_grid(mask=)): the fill of host arrays (the host's solver) and of CUDA
torch tensors (the device's multigrid, kronpe.solvers.smooth "On a GPU"), alternating, medians of
REPEATS (default 5) after a warm-up (TASKS: a comma list of astronaut, camera, chelsea, masked;
default all); the held-out PSNR of each, the choices (lambda, boundary,
higher-order penalty) and the device call's own time (``_core.cuda_smooth_fill``, wrapped).
"""
from __future__ import annotations

import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, "python")
import kronpe  # noqa: E402
from kronpe import _core  # noqa: E402
from kronpe.data import load_sample  # noqa: E402

REPEATS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
TASKS = sys.argv[2].split(",") if len(sys.argv) > 2 else ["astronaut", "camera", "chelsea", "masked"]
core_times: list = []
_fill = _core.cuda_smooth_fill


def _timed_fill(*a, **k):
    t0 = time.perf_counter()
    try:
        return _fill(*a, **k)
    finally:
        core_times.append(time.perf_counter() - t0)


_core.cuda_smooth_fill = _timed_fill


def psnr(a, b) -> float:
    return float(10 * np.log10(1.0 / np.mean((np.asarray(a, np.float64) - np.asarray(b, np.float64)) ** 2)))


def points_task(name: str):
    img = load_sample(name).astype(np.float32)
    if img.ndim == 2:
        img = img[..., None]
    H, W = img.shape[:2]
    rng = np.random.default_rng(0)
    keep = np.zeros(H * W, bool)
    keep[rng.choice(H * W, H * W // 4, replace=False)] = True
    keep = keep.reshape(H, W)
    ij, held = np.argwhere(keep), np.argwhere(~keep)
    hw = np.array([H, W], np.float64)
    return img, ij / hw, img[keep], held / hw, img[~keep]


def run_points(name: str) -> None:
    img, pts, vals, held, truth = points_task(name)
    tp, tv, th = (torch.from_numpy(np.ascontiguousarray(a)).cuda() for a in (pts, vals, held))

    def host():
        m = kronpe.fit_points(pts, vals)
        return m, m.predict(held)

    def dev():
        m = kronpe.fit_points(tp, tv)
        p = m.predict(th)
        torch.cuda.synchronize()
        return m, p.cpu().numpy()

    report(f"{name} 25% points", host, dev, truth)


def run_masked(name: str) -> None:
    img = load_sample(name).astype(np.float32)
    mask = np.random.default_rng(1).random(img.shape[:2]) < 0.5
    ti = torch.from_numpy(img).cuda()
    truth = img[~mask]

    def host():
        m = kronpe.fit_grid(img, mask=mask)
        return m, np.asarray(m.weights)[~mask]

    def dev():
        m = kronpe.fit_grid(ti, mask=mask)
        torch.cuda.synchronize()
        return m, m.weights.cpu().numpy()[~mask]

    report(f"{name} 50% masked", host, dev, truth)


def report(label, host, dev, truth) -> None:
    host(), dev()  # warm-up
    th, td = [], []
    core_times.clear()
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        mh, ph = host()
        th.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        md, pd = dev()
        td.append(time.perf_counter() - t0)
    core = statistics.median(core_times) if core_times else float("nan")
    for tag, m, p, t in (("host", mh, ph, th), ("device", md, pd, td)):
        i = m.info
        print(f"{label:24s} {tag:6s} {statistics.median(t) * 1e3:8.1f} ms (min {min(t) * 1e3:7.1f})  "
              f"PSNR {psnr(p, truth):.4f}  lam {m.ridge:.3e} {i.get('boundary')} interp={i.get('interpolating')} "
              f"lead={'higher' if 'lead_penalty' in i else '-'} its={i.get('iterations')} dev={i.get('device', '-')}")
    print(f"{label:24s} device call alone {core * 1e3:.1f} ms; host/device {statistics.median(th) / statistics.median(td):.2f}x")
    sys.stdout.flush()


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), "host threads", kronpe.get_num_threads() if hasattr(kronpe, "get_num_threads") else "?")
    for name in [t for t in TASKS if t != "masked"]:
        try:
            run_points(name)
        except Exception as e:  # (report and go on: one run on the device machine)
            print(name, "points failed:", type(e).__name__, e)
    for name in ["astronaut"] if "masked" in TASKS else []:
        try:
            run_masked(name)
        except Exception as e:
            print(name, "masked failed:", type(e).__name__, e)
