"""GPU benchmark harness: kronpe's CUDA kernels beside what a user would otherwise run, in one run.

    python benches/bench_cuda.py [--quick] [--tf32] [--json OUT.json] [--only SECTIONS]

Skips (exit 0, one line) without kronpe's CUDA kernels, a CUDA device, or CUDA torch. Timings come
from kronpe.bench.harness.timings: the device rows the median of repeated runs between CUDA events
on one stream, after a warm-up; the point fits (host solvers, the fill of CUDA tensors) wall time
with the device synchronised. Every kronpe result is checked against its baseline before it is
reported. ``--only`` runs some of the sections (chains, blend, fits, device_fits, torch, field).

Sections:
1. mode-n chains: kronpe.multi_mode_product vs torch.einsum, a torch.tensordot chain and
   cupy.einsum (when CuPy is installed), with cuBLAS's plain GEMM rate (torch.matmul, square
   float32) measured in the same run as the ceiling;
2. blend / blend_transpose (2-D, on the fly, deterministic and atomic transpose) vs the
   device-to-device copy bandwidth;
3. fits: the 2-D 512x512 closed form from a 256x256 grid (K = 256; plan cached, a batch of 64
   images, time per image), the 3-D 128^3 closed form (K = 128), and a scattered 2-D fit (25% of
   a 256x256 image), each against the papers' formulation in torch on the same GPU (per-axis
   pseudo-inverses for the grid fits, SGD on the blended complex encoding for scattered points);
   the default fill of 25% of the 512^2 astronaut given as CUDA tensors (the GPU's multigrid)
   beside the same fill of host arrays (the host's solver);
4. device fits: ``GridPlan.fit`` of CUDA tensors (one 256^2 image, a batch of 64, GCV) and a 3-D
   fit + ``predict_grid``, each checked against the host's fit of the same values;
5. torch Adam steps of the complex-encoding models (kronpe.bench.torch_steps) against the official
   formulation, after checking that 200 steps of each end at the same loss;
6. field: ``fit_spline`` of scattered samples given as CUDA tensors (kronpe.solvers.spline_torch)
   beside the same fit of host arrays on every core (the cases of ``kronpe bench --suite field``),
   the fit alone (its model's coefficients back on the host) and fit + the grid, PSNR of both
   against the noise-free field; the device's must be within 0.1 dB of the host's.

TF32 is OFF by default for kronpe (kronpe.cuda.allow_tf32() is False: float32 GEMMs in full
float32) and this harness turns it off in torch too (torch.backends.cuda.matmul.allow_tf32 =
False), so that both sides compute the same thing; --tf32 turns it on for both.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Callable, Dict, List

import numpy as np

from kronpe.bench.harness import timings


def _skip(reason: str) -> None:
    print(f"bench_cuda: skipped ({reason})")
    sys.exit(0)


def _setup():
    try:
        import torch
    except ImportError:
        _skip("needs torch with CUDA")
    import kronpe

    if not kronpe.cuda.is_available():
        _skip("kronpe was built without CUDA or no CUDA device is visible")
    if not torch.cuda.is_available():
        _skip("torch has no CUDA device")
    try:
        import cupy  # noqa: F401
    except Exception:
        cupy = None
    return torch, kronpe, cupy


def timeit(torch, fn: Callable[[], object], repeat: int = 20, warmup: int = 3, batch: int = 1) -> float:
    """Median seconds of fn() between CUDA events on the current stream (kronpe.bench.harness.timings:
    with batch > 1 the device's rate, the bandwidth rows; else one call from an idle device, its
    latency with the host's part)."""
    return statistics.median(timings(fn, repeat, warmup=warmup, batch=batch, cuda=torch))


def row(results: List[Dict], section: str, name: str, seconds: float, **extra) -> None:
    results.append(dict(section=section, name=name, ms=seconds * 1e3, **extra))
    tail = "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in extra.items())
    print(f"  {name:<44s} {seconds * 1e3:10.3f} ms  {tail}")


def check(got, ref, rtol: float, what: str) -> None:
    g = got.detach().double().cpu().numpy() if hasattr(got, "detach") else np.asarray(got.get() if hasattr(got, "get") else got)
    r = ref.detach().double().cpu().numpy() if hasattr(ref, "detach") else np.asarray(ref.get() if hasattr(ref, "get") else ref)
    err = float(np.max(np.abs(g - r)) / max(np.max(np.abs(r)), 1e-30))
    if not err <= rtol:
        raise AssertionError(f"{what}: relative error {err:.3g} > {rtol:g}")


# ---- 1. mode-n chains ------------------------------------------------------------------------


def bench_chains(torch, kronpe, cupy, results, quick: bool) -> None:
    print("mode-n chains (float32)")
    n = 2048 if quick else 8192
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    t = timeit(torch, lambda: torch.matmul(a, b), repeat=5)
    row(results, "chains", f"cuBLAS GEMM {n}^2 (torch.matmul)", t, tflops=2 * n**3 / t / 1e12)
    cases = [((256, 256, 256), [(256, 256)] * 3, "256^3 x 3 modes"),
             ((512, 512, 64), [(256, 512), (256, 512)], "512x512x64 -> 256x256x64"),
             ((64, 64, 64, 64), [(32, 64)] * 4, "64^4 x 4 modes")]
    if quick:
        cases = cases[:1]
    letters = "abcdefgh"
    for shape, mshapes, label in cases:
        T = torch.randn(shape, device="cuda")
        mats = [torch.randn(s, device="cuda") for s in mshapes]
        modes = list(range(len(mats)))
        flops = 0.0
        size = float(np.prod(shape))
        for (m, k) in mshapes:  # in the given order (kronpe may find a cheaper one)
            flops += 2 * size * m
            size = size / k * m
        ref = kronpe.multi_mode_product(T, mats, order="C")
        t_k = timeit(torch, lambda: kronpe.multi_mode_product(T, mats))
        row(results, "chains", f"kronpe {label}", t_k, tflops=flops / t_k / 1e12)
        src = letters[: len(shape)]
        dst = "".join(chr(ord("A") + i) if i < len(mats) else src[i] for i in range(len(shape)))
        spec = src + "," + ",".join(f"{chr(ord('A') + i)}{src[i]}" for i in range(len(mats))) + "->" + dst
        out = torch.einsum(spec, T, *mats)
        check(out, ref, 1e-4, f"torch.einsum {label}")
        row(results, "chains", f"torch.einsum {label}", timeit(torch, lambda: torch.einsum(spec, T, *mats)))

        def tensordot_chain():
            out = T
            for k, A in zip(modes, mats):
                out = torch.movedim(torch.tensordot(A, out, dims=([1], [k])), 0, k)
            return out.contiguous()

        check(tensordot_chain(), ref, 1e-4, f"tensordot {label}")
        row(results, "chains", f"torch.tensordot chain {label}", timeit(torch, tensordot_chain))
        if cupy is not None:
            Tc = cupy.asarray(T)
            mc = [cupy.asarray(A) for A in mats]
            with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
                check(cupy.einsum(spec, Tc, *mc, optimize=True), ref, 1e-4, f"cupy.einsum {label}")
                row(results, "chains", f"cupy.einsum {label}",
                    timeit(torch, lambda: cupy.einsum(spec, Tc, *mc, optimize=True)))


# ---- 2. blend ------------------------------------------------------------------------------------


# The blend rows are rates (bytes over device time): each timing encloses this many calls back to
# back, so the host's ~50-100 us of Python per call runs behind the queued kernels instead of
# inside the events (one call from an idle device counts it: a stored transpose of 0.29 ms of
# kernels read 0.323 ms).
BANDWIDTH_BATCH = 10


def bench_blend(torch, kronpe, results, quick: bool) -> None:
    print("blend (2-D, Gaussian, on the fly, float32 values, float32 points)")
    P = 1 << (20 if quick else 23)
    M = 513
    gen = torch.Generator(device="cuda").manual_seed(0)
    pts = torch.rand(P, 2, device="cuda", generator=gen)
    emb = kronpe.Gaussian(M - 1, 0.64 / (M - 1))
    B = kronpe.BlendingMatrix(pts, (M, M), emb)
    v = torch.randn(M * M, device="cuda", generator=gen)
    r = torch.randn(P, device="cuda", generator=gen)
    nbytes = 1 << 30
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    t = timeit(torch, lambda: dst.copy_(src), repeat=10, batch=BANDWIDTH_BATCH)
    bw = 2 * nbytes / t / 1e9
    row(results, "blend", "device-to-device copy 1 GiB", t, GBps=bw)
    moved = P * (2 * 4 + 4) + P * 4 * 4  # points + result, 4 corner reads (cached in part)
    t = timeit(torch, lambda: B.matvec(v), batch=BANDWIDTH_BATCH)
    row(results, "blend", f"blend P={P}", t, GBps=moved / t / 1e9, of_copy=moved / t / 1e9 / bw)
    B.gpu_deterministic = False
    t = timeit(torch, lambda: B.rmatvec(r), batch=BANDWIDTH_BATCH)
    row(results, "blend", f"blend_transpose atomic P={P}", t, GBps=moved / t / 1e9, of_copy=moved / t / 1e9 / bw)
    B.gpu_deterministic = True
    B.rmatvec(r)  # builds the plan once
    t = timeit(torch, lambda: B.rmatvec(r), batch=BANDWIDTH_BATCH)
    row(results, "blend", f"blend_transpose deterministic P={P}", t, GBps=moved / t / 1e9, of_copy=moved / t / 1e9 / bw)
    # stored weights (what the torch ops use): indices int64 + weights float64 per nonzero
    Bs = kronpe.BlendingMatrix(pts, (M, M), emb).store()
    Bs.gpu_deterministic = False
    check(Bs.matvec(v), B.matvec(v), 1e-5, "stored blend")
    moved_s = P * 4 * (8 + 8) + P * 4 + P * 4 * 4
    t = timeit(torch, lambda: Bs.matvec(v), batch=BANDWIDTH_BATCH)
    row(results, "blend", f"blend stored P={P}", t, GBps=moved_s / t / 1e9, of_copy=moved_s / t / 1e9 / bw)
    t = timeit(torch, lambda: Bs.rmatvec(r), batch=BANDWIDTH_BATCH)
    row(results, "blend", f"blend_transpose stored atomic P={P}", t, GBps=moved_s / t / 1e9, of_copy=moved_s / t / 1e9 / bw)


# ---- 3. fits ----------------------------------------------------------------------------------


def _image(torch, N: int, batch: int = 1):
    """Smooth test images on [0, 1]^2 (no data download): sums of random sinusoids."""
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.linspace(0, 1, N + 1, device="cuda")[:-1]
    f = torch.rand(batch, 6, 2, device="cuda", generator=g) * 12
    ph = torch.rand(batch, 6, device="cuda", generator=g) * 6.28
    img = torch.sin(f[..., 0, None, None] * x[:, None] * 6.28 + f[..., 1, None, None] * x[None, :] * 6.28
                    + ph[..., None, None]).mean(1)
    return (0.5 + 0.4 * img).permute(1, 2, 0).contiguous()  # (N, N, batch)


def bench_fits(torch, kronpe, results, quick: bool) -> None:
    print("fits (float32 data, factors in float64 then float32)")
    K = 256
    emb = kronpe.Gaussian(K, 0.0025)  # the papers' closed-form width (docs/math/encodings.rst)
    batch = 8 if quick else 64
    full = _image(torch, 512, batch)  # ground truth (512, 512, batch)
    S = full[::2, ::2].contiguous()  # the 256x256 training grid
    x_train = np.arange(256) / 256
    x_test = np.arange(512) / 512
    Phi = np.asarray(emb(x_train), dtype=np.float64)  # (256, K)
    U, s, Vt = np.linalg.svd(Phi, full_matrices=False)
    keep = s > 1e-10 * s[0]
    pinv = (Vt[keep].T / s[keep]) @ U[:, keep].T  # (K, 256)
    pinv_d = torch.from_numpy(pinv.astype(np.float32)).cuda()
    Psi_test = torch.from_numpy(np.asarray(emb(x_test), dtype=np.float32)).cuda()  # (512, K)

    def kronpe_fit():  # cached plan: W = S x_0 Phi^+ x_1 Phi^+ (pseudo-inverse, as the papers)
        return kronpe.multi_mode_product(S, [pinv_d, pinv_d])

    Phi_d = torch.from_numpy(Phi.astype(np.float32)).cuda()

    def paper_fit():  # the papers' formulation: pinv per fit, then two matmuls per image
        P1 = torch.linalg.pinv(Phi_d)
        return torch.einsum("ki,ijb,lj->klb", P1, S, P1)

    W = kronpe_fit()
    check(W, paper_fit(), 5e-3, "2-D closed form")
    pred = kronpe.multi_mode_product(W, [Psi_test, Psi_test], order="C")
    t = timeit(torch, kronpe_fit)
    row(results, "fits", f"kronpe 2-D 512^2 fit, batch {batch} (per image)", t / batch,
        psnr=kronpe.data.psnr(pred.double(), full.double()))
    t = timeit(torch, paper_fit, repeat=5)
    row(results, "fits", f"papers (torch pinv + einsum) 2-D (per image)", t / batch)

    # 3-D 128^3 from a 64^3 grid, K = 128
    N3, K3 = 64, 128
    emb3 = kronpe.Gaussian(K3, 0.64 / K3)
    vol = _image(torch, 128, 128)[::2, ::2, ::2].contiguous()  # (64, 64, 64)
    Phi3 = np.asarray(emb3(np.arange(N3) / N3), dtype=np.float64)
    p3 = torch.from_numpy(np.linalg.pinv(Phi3).astype(np.float32)).cuda()  # (K3, N3)
    Phi3_d = torch.from_numpy(Phi3.astype(np.float32)).cuda()
    k3 = lambda: kronpe.multi_mode_product(vol, [p3, p3, p3])  # noqa: E731

    def paper3():
        P1 = torch.linalg.pinv(Phi3_d)
        return torch.einsum("ai,bj,ck,ijk->abc", P1, P1, P1, vol)

    check(k3(), paper3(), 5e-3, "3-D closed form")
    row(results, "fits", "kronpe 3-D 64^3 -> K=128^3 fit", timeit(torch, k3))
    row(results, "fits", "papers (torch pinv + einsum) 3-D", timeit(torch, paper3, repeat=5))

    # scattered: 25% of a 256x256 image
    img = _image(torch, 256, 1)[..., 0]  # pixel (i, j) sits at (i / 256, j / 256)
    g = torch.Generator(device="cuda").manual_seed(2)
    P = 256 * 256 // 4
    flat = torch.randperm(256 * 256, device="cuda", generator=g)[:P]
    ij = torch.stack([flat // 256, flat % 256], 1)
    pts = ij.double() / 256
    vals = img[ij[:, 0], ij[:, 1]]
    K2 = 64
    embs = kronpe.Gaussian(K2, 0.004 * 256 / K2)
    fitted: list = []
    t_k = timings(lambda: kronpe.fit_points(pts, vals, embs, ridge=1e-6, tol=1e-5), keep=fitted)[0]
    model = fitted.pop()
    axis = torch.arange(256, device="cuda", dtype=torch.float64) / 256
    grid_pts = torch.stack(torch.meshgrid(axis, axis, indexing="ij"), -1).reshape(-1, 2)
    pred = model.predict(grid_pts).reshape(256, 256)
    row(results, "fits", f"kronpe fit_points P={P} (exact, host solver)", t_k, psnr=kronpe.data.psnr(pred.double(), img.double()))
    # the default fit of 25% of a 512^2 photograph given as CUDA tensors (the points copied to the
    # host once; the fill's multigrid on the GPU: kronpe.solvers.smooth, "On a GPU"), predicted
    # back on the GPU; beside it the same fit of host arrays (the host's solver on this machine's
    # cores), alternating
    photo = torch.from_numpy(kronpe.data.load_sample("astronaut")).cuda()  # (512, 512, 3)
    n = photo.shape[0]
    keep = torch.randperm(n * n, device="cuda", generator=g)[: n * n // 4]
    ij = torch.stack([keep // n, keep % n], 1)
    pts5 = ij.double() / n  # pixel (i, j) at (i / n, j / n), as kronpe.bench.scattered
    vals5 = photo[ij[:, 0], ij[:, 1]]
    held = torch.ones(n * n, dtype=torch.bool, device="cuda")
    held[keep] = False
    axis5 = torch.arange(n, device="cuda", dtype=torch.float64) / n
    grid5 = torch.stack(torch.meshgrid(axis5, axis5, indexing="ij"), -1).reshape(-1, 2)
    truth5 = photo.reshape(-1, 3)[held].double().cpu().numpy()
    host_in = (pts5.cpu().numpy(), vals5.cpu().numpy(), grid5[held].cpu().numpy())

    def device_fit():
        m = kronpe.fit_points(pts5, vals5)
        pred = m.predict(grid5[held])
        torch.cuda.synchronize()
        return m, pred

    def host_fit():
        return kronpe.fit_points(host_in[0], host_in[1]).predict(host_in[2])

    times, host_times, out5, hout5 = [], [], [], []
    for _ in range(3 if quick else 7):
        torch.cuda.synchronize()
        times += timings(device_fit, keep=out5)
        host_times += timings(host_fit, keep=hout5)
    m5, pred5 = out5[-1]
    hpred5 = hout5[-1]
    assert pred5.is_cuda and m5.info.get("device", "").startswith("cuda")
    row(results, "fits", f"kronpe fit_points defaults, 25% of 512^2 astronaut (fit + predict, GPU solver)",
        statistics.median(times), psnr_heldout=kronpe.data.psnr(pred5.double().cpu().numpy(), truth5))
    row(results, "fits", f"kronpe fit_points defaults, 25% of 512^2 astronaut (fit + predict, host arrays and solver)",
        statistics.median(host_times), psnr_heldout=kronpe.data.psnr(np.asarray(hpred5, np.float64), truth5))
    # papers: SGD (Adam) on W with the blended encoding, in torch
    B = kronpe.BlendingMatrix(pts, (K2 + 1, K2 + 1), embs).store()
    idx = torch.from_numpy(B.indices).cuda()
    wts = torch.from_numpy(B.weights).float().cuda()
    Phi_g = torch.from_numpy(np.asarray(embs(np.linspace(0, 1, K2 + 1)), dtype=np.float32)).cuda()
    Wp = torch.zeros(K2, K2, device="cuda", requires_grad=True)
    opt = torch.optim.Adam([Wp], lr=1e-2)
    steps = 200 if quick else 2000

    def train():
        for _ in range(steps):
            V = (Phi_g @ Wp @ Phi_g.T).reshape(-1)
            loss = ((V[idx] * wts).sum(1) - vals).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        torch.cuda.synchronize()

    torch.cuda.synchronize()
    t_p = timings(train)[0]
    with torch.no_grad():
        Vg = (Phi_g @ Wp @ Phi_g.T).reshape(-1, 1)
        pred_p = kronpe.BlendingMatrix(grid_pts, (K2 + 1, K2 + 1), embs).matvec(Vg).reshape(256, 256)
    row(results, "fits", f"papers (torch Adam, {steps} steps) scattered", t_p, psnr=kronpe.data.psnr(pred_p.double(), img.double()))


def bench_device_fits(torch, kronpe, results, quick: bool) -> None:
    """GridPlan.fit of CUDA tensors: the closed form on the tensors' GPU and stream, the weights a
    CUDA tensor (one 512x512 image's 256x256 subsample, K = 256 Gaussians, fixed ridge and GCV; a
    batch of them in one call, time per image; a 3-D 128^3 prediction from a 64^3 grid, K = 128),
    each checked against the host fit of the same values before it is timed."""
    print("device fits (GridPlan.fit / predict_grid of CUDA tensors, float32)")
    batch = 8 if quick else 64
    S = _image(torch, 512, batch)[::2, ::2].contiguous()  # (256, 256, batch): the training grids
    one = S[..., 0].contiguous()
    x = np.arange(256) / 256
    plan = kronpe.GridPlan([x, x], kronpe.Gaussian(256, 0.0025), ridge=1e-6)
    model = plan.fit(one)
    if not (isinstance(model.weights, torch.Tensor) and model.weights.device == one.device):
        raise AssertionError(f"GridPlan.fit of a CUDA tensor gave {type(model.weights).__name__} weights")
    check(model.weights, plan.fit(one.cpu().numpy()).weights, 1e-3, "GridPlan.fit one image")
    row(results, "device fits", "GridPlan.fit 2-D 256^2 -> K=256, one image", timeit(torch, lambda: plan.fit(one)),
        target_ms=0.5)

    check(plan.fit(S, batch_axes=1).weights, plan.fit(S.cpu().numpy(), batch_axes=1).weights, 1e-3,
          "GridPlan.fit batch")
    t = timeit(torch, lambda: plan.fit(S, batch_axes=1))
    row(results, "device fits", f"GridPlan.fit 2-D 256^2 -> K=256, batch {batch} (per image)", t / batch,
        target_ms=0.02)

    g = plan.fit(one, ridge="gcv")
    host = plan.fit(one.cpu().numpy(), ridge="gcv")  # the device's ridge must be as good on the host's curve
    if not float(plan.gcv(one.cpu().numpy(), [g.ridge])[0]) <= host.gcv * (1 + 1e-2):
        raise AssertionError(f"GridPlan.fit GCV: the device's ridge {g.ridge:.6g} scores worse than the host's "
                             f"{host.ridge:.6g}")
    check(g.weights, plan.fit(one.cpu().numpy(), ridge=g.ridge).weights, 1e-3, "GridPlan.fit GCV")
    t = timeit(torch, lambda: plan.fit(one, ridge="gcv"), repeat=5 if quick else 10)
    row(results, "device fits", "GridPlan.fit 2-D 256^2 -> K=256, one image, GCV", t, ridge=g.ridge,
        host_ridge=host.ridge)

    N3, K3 = 64, 128
    vol = _image(torch, 128, 128)[::2, ::2, ::2].contiguous()  # (64, 64, 64)
    x3, q3 = np.arange(N3) / N3, [np.arange(128) / 128] * 3
    plan3 = kronpe.GridPlan([x3] * 3, kronpe.Gaussian(K3, 0.64 / K3), ridge=1e-6)
    predict = lambda: plan3.fit(vol).predict_grid(q3)  # noqa: E731
    check(predict(), plan3.fit(vol.cpu().numpy()).predict_grid(q3), 1e-3, "3-D prediction")
    model3 = plan3.fit(vol)
    row(results, "device fits", "GridPlan.fit + predict_grid 3-D 64^3 -> K=128 -> 128^3", timeit(torch, predict),
        fit_ms=timeit(torch, lambda: plan3.fit(vol)) * 1e3,
        predict_ms=timeit(torch, lambda: model3.predict_grid(q3)) * 1e3, target_ms=1.0)


# ---- 4. torch training steps ----------------------------------------------------------------------


def bench_torch_steps(torch, kronpe, results, quick: bool) -> None:
    """One Adam step of the complex-encoding models of kronpe.bench.torch_steps (astronaut, K = 256;
    grid: 256^2 targets; points: 25% of 512^2 blended from 257^2 nodes), kronpe against the
    official formulation on this GPU, each eager and captured in a CUDA graph (kronpe.torch.train
    captures by default on CUDA; the official code runs eagerly); the same loss after 200 steps
    is checked first, for every variant."""
    print("torch Adam steps (float32, K = 256)")
    from kronpe.bench import torch_steps as ts

    for case in ts.CASES:
        steps, losses = {}, {}
        for graph in (False, True):
            for name, (m, t) in ts.make_models(case, device="cuda").items():
                label = f"{name} {'graph' if graph else 'eager'}"
                steps[label] = ts.stepper(m, t, cuda_graph=graph)
                losses[label] = float([steps[label]() for _ in range(200)][-1].detach())
        ref = losses["official eager"]
        for label, loss in losses.items():
            if not abs(loss - ref) <= 1e-3 * abs(ref):
                raise AssertionError(f"torch step {case}: loss after 200 steps {label} {loss}, official eager {ref}")
        t = {label: timeit(torch, step, repeat=10 if quick else 50) for label, step in steps.items()}
        for label in steps:
            row(results, "torch", f"{label} Adam step {case}", t[label], loss200=losses[label],
                official_eager_over_this=t["official eager"] / t[label])


# ---- 6. scattered samples of smooth fields ----------------------------------------------------------


def bench_field(torch, kronpe, results, quick: bool) -> None:
    """fit_spline of the field suite's samples as CUDA tensors against the host's fit of the same
    arrays (default threads), each timed on its own and with the grid's evaluation."""
    print("field (fit_spline of CUDA tensors on the device vs host arrays, float64)")
    from kronpe.bench import field

    plan = [("franke", 100000, "uniform", 0.0), ("franke", 20000, "uniform", 0.0), ("franke", 2000, "uniform", 0.0),
            ("franke", 10000, "halton", 0.0), ("franke", 10000, "tracks", 0.0),
            ("franke", 20000, "uniform", field.NOISE), ("terrain", field.GRID_2D ** 2 // 4, "uniform", 0.0),
            ("smooth3d", 20000, "uniform", 0.0)]
    if quick:
        plan = plan[:1]
    for name, P, layout, noise in plan:
        s = field.inputs(name, P, layout, noise)
        D = len(s["axes"])
        box = (np.zeros(D), np.ones(D))
        pts, vals = torch.tensor(s["pts"], device="cuda"), torch.tensor(s["vals"], device="cuda")
        dev = lambda: kronpe.fit_spline(pts, vals, _box=box)  # noqa: E731
        host = lambda: kronpe.fit_spline(s["pts"], s["vals"], _box=box)  # noqa: E731
        md, mh = dev(), host()
        on_device = str(md.info.get("device", "")).startswith("cuda")
        psnr_d = field._check(s, None, md.predict_grid(s["axes"]))["psnr"]
        psnr_h = field._check(s, None, mh.predict_grid(s["axes"]))["psnr"]
        if not psnr_d >= min(psnr_h, 80.0) - 0.1:
            raise AssertionError(f"field {name} {P}: device fit {psnr_d:.2f} dB, host fit {psnr_h:.2f} dB")
        reps = 5 if quick else 11
        t_dev = timeit(torch, dev, repeat=reps, warmup=2)
        t_dev_grid = timeit(torch, lambda: dev().predict_grid(s["axes"]), repeat=reps, warmup=1)
        t_host = statistics.median(timings(host, 5 if quick else 7, warmup=1))
        label = f"{name} {layout} {P}" + (f" noise {noise:g}" if noise else "")
        row(results, "field", f"fit_spline device, {label}", t_dev, on_device=on_device, grid=str(md.info.get("grid")),
            psnr=psnr_d, host_ms=t_host * 1e3, host_psnr=psnr_h, host_over_device=t_host / t_dev,
            fit_and_grid_ms=t_dev_grid * 1e3, target_ms=50.0 if P == 100000 else float("nan"))


def _section(name, fn, *args) -> None:
    """Run one section; a failure is printed and the other sections still run (exit code 1)."""
    try:
        fn(*args)
    except Exception:
        import traceback

        traceback.print_exc()
        print(f"bench_cuda: section {name} FAILED")
        _section.failed = True


_section.failed = False


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 in kronpe and torch")
    ap.add_argument("--json", help="write the rows to this file")
    ap.add_argument("--only", help="comma-separated sections to run (chains, blend, fits, device_fits, torch, field)")
    args = ap.parse_args(argv)
    torch, kronpe, cupy = _setup()
    kronpe.cuda.set_allow_tf32(args.tf32)
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    print(f"device: {torch.cuda.get_device_name()}  kronpe {kronpe.__version__}  torch {torch.__version__}  "
          f"TF32: kronpe={kronpe.cuda.allow_tf32()} torch={torch.backends.cuda.matmul.allow_tf32}")
    results: List[Dict] = []
    only = set(args.only.split(",")) if args.only else None
    sections = [("chains", bench_chains, (torch, kronpe, cupy, results, args.quick)),
                ("blend", bench_blend, (torch, kronpe, results, args.quick)),
                ("fits", bench_fits, (torch, kronpe, results, args.quick)),
                ("device_fits", bench_device_fits, (torch, kronpe, results, args.quick)),
                ("torch", bench_torch_steps, (torch, kronpe, results, args.quick)),
                ("field", bench_field, (torch, kronpe, results, args.quick))]
    for name, fn, fargs in sections:
        if only is None or name in only:
            _section(name, fn, *fargs)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), tf32=args.tf32, rows=results), f, indent=1)
    return 1 if _section.failed else 0


if __name__ == "__main__":
    sys.exit(main())
