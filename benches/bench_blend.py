"""Blending matrix and scattered fits: kronpe against the ways a user would otherwise do it.

Run (not collected by the plain test run)::

    python -m pytest benches/bench_blend.py --benchmark-only --benchmark-json=blend.json -s

Groups:

- ``blend``/``blend_transpose``: 1M random points in [0, 1]^2, a 512 x 512 grid, 3 channels,
  float32 values. kronpe with weights on the fly (Gaussian closed form) and from stored
  (indices, weights); NumPy fancy indexing on the same arrays; a SciPy CSR product; and a large
  NumPy copy that measures the machine's memory bandwidth in the same run. Each method's
  ``extra_info`` holds the bytes it must move at least and its bandwidth as a fraction of the
  copy's (target for kronpe's blend: >= 0.5).
- ``blend bandwidth: <case>``: blend and transpose (the default matrix with its kept per-axis
  weights, weights on the fly, stored; C = 1 and 3, float32 and float64) of random points on
  512 x 512 (25% and 100% of the node count) and 128^3 (12.5%) grids, as a fraction of the copy
  bandwidth of a NumPy copy timed before every round (``blend_bytes`` says what is counted;
  target >= 0.5); ``benches/report.py`` prints the table.
- ``fit_points``: the 512 x 512 astronaut photograph (float RGB in [0, 1]) from a random 25% of
  its pixels, PSNR on the other 75%. kronpe.fit_points (automatic embedders, grid and ridge, and
  the same with the ridge given), scipy.interpolate.griddata linear and cubic, and Adam (2000
  steps, torch) on the very objective fit_points solves. Targets: PSNR >= griddata cubic's, in
  <= 1/20 of its time.

Every benchmark asserts its result (against a float64 oracle, or a PSNR floor).
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import median_seconds, run_timed  # (puts the source tree on sys.path)

import kronpe
from kronpe import BlendingMatrix
from kronpe.bench import harness
from kronpe.bench.blend import bincount_transpose, blend_bytes, fancy_blend, matrices

P_BLEND = 1_000_000
GRID = (512, 512)
CHANNELS = 3
COPY_BYTES = 256 << 20  # the bandwidth probe copies 256 MiB
ROUNDS = 7


# ---- memory bandwidth and blend/blend_transpose ------------------------------------------------


@pytest.fixture(scope="module")
def copy_bandwidth():
    """Bytes per second of a large NumPy copy (read + write), best of 5."""
    return harness.copy_bandwidth(COPY_BYTES)


@pytest.fixture(scope="module")
def blend_case():
    rng = np.random.default_rng(7)
    pts = rng.random((P_BLEND, 2))
    emb = kronpe.Gaussian(512, 1 / 512)
    fly = BlendingMatrix(pts, GRID, emb, cache_weights=False)  # weights computed in every product
    stored = BlendingMatrix(pts, GRID, emb).store()
    v = rng.standard_normal((fly.grid_size, CHANNELS)).astype(np.float32)
    r = rng.standard_normal((P_BLEND, CHANNELS)).astype(np.float32)
    idx = stored.indices
    w32 = stored.weights.astype(np.float32)
    csr = stored.to_scipy().astype(np.float32)
    csr_t = csr.T.tocsr()
    # float64 oracles from the CSR form (itself checked against the dense reference in tests/)
    csr64 = stored.to_scipy()
    want_b = csr64 @ v.astype(np.float64)
    want_t = csr64.T @ r.astype(np.float64)
    return dict(pts=pts, fly=fly, stored=stored, v=v, r=r, idx=idx, w32=w32, csr=csr, csr_t=csr_t,
                want_b=want_b, want_t=want_t)


def _record(benchmark, method, nbytes, bw):
    benchmark.extra_info.update(method=method, bytes=int(nbytes), copy_GBps=bw / 1e9)
    t = median_seconds(benchmark)
    if t:
        benchmark.extra_info["GBps"] = nbytes / t / 1e9
        benchmark.extra_info["fraction_of_copy"] = nbytes / t / bw


def _check(got, want, rtol):
    err = np.max(np.abs(np.asarray(got, np.float64) - want)) / np.max(np.abs(want))
    assert err <= rtol, err


def test_copy_bandwidth(benchmark):
    benchmark.group = "blend: memory bandwidth probe"
    a = np.ones(COPY_BYTES // 4, np.float32)
    b = np.empty_like(a)
    run_timed(benchmark, lambda: np.copyto(b, a), 5)
    benchmark.extra_info.update(method="numpy copy 256 MiB", bytes=2 * a.nbytes)
    if median_seconds(benchmark):
        benchmark.extra_info["GBps"] = 2 * a.nbytes / median_seconds(benchmark) / 1e9


BLEND_METHODS = ["kronpe on the fly", "kronpe stored", "numpy fancy indexing", "scipy CSR"]


@pytest.mark.parametrize("method", BLEND_METHODS)
def test_blend(benchmark, blend_case, copy_bandwidth, method):
    c = blend_case
    benchmark.group = f"blend: {P_BLEND} points, grid {GRID}, C={CHANNELS}, float32"
    P = P_BLEND
    out = np.empty((P, CHANNELS), np.float32)
    if method == "kronpe on the fly":
        fn = lambda: c["fly"].matvec(c["v"], out=out)  # noqa: E731
        nbytes = c["pts"].nbytes + out.nbytes
    elif method == "kronpe stored":
        fn = lambda: c["stored"].matvec(c["v"], out=out)  # noqa: E731
        nbytes = c["idx"].nbytes + c["stored"].weights.nbytes + out.nbytes
    elif method == "numpy fancy indexing":
        idx, w, v = c["idx"], c["w32"], c["v"]
        fn = lambda: fancy_blend(idx, w, v)  # noqa: E731
        nbytes = idx.nbytes + w.nbytes + out.nbytes
    else:
        csr, v = c["csr"], c["v"]
        fn = lambda: csr @ v  # noqa: E731
        nbytes = csr.data.nbytes + csr.indices.nbytes + csr.indptr.nbytes + out.nbytes
    got = run_timed(benchmark, fn, ROUNDS)
    _check(got, c["want_b"], 1e-5)
    _record(benchmark, method, nbytes, copy_bandwidth)


@pytest.mark.parametrize("method", BLEND_METHODS)
def test_blend_transpose(benchmark, blend_case, copy_bandwidth, method):
    c = blend_case
    benchmark.group = f"blend_transpose: {P_BLEND} points, grid {GRID}, C={CHANNELS}, float32"
    G = c["fly"].grid_size
    r = c["r"]
    if method == "kronpe on the fly":
        c["fly"].rmatvec(r)  # the slab plan is built once per matrix (cached), as in a solver
        fn = lambda: c["fly"].rmatvec(r)  # noqa: E731
        nbytes = c["pts"].nbytes + r.nbytes + G * CHANNELS * 4
    elif method == "kronpe stored":
        c["stored"].rmatvec(r)
        fn = lambda: c["stored"].rmatvec(r)  # noqa: E731
        nbytes = c["idx"].nbytes + c["stored"].weights.nbytes + r.nbytes + G * CHANNELS * 4
    elif method == "numpy fancy indexing":
        idx, w = c["idx"], c["w32"]
        fn = lambda: bincount_transpose(idx, w, r, G)  # noqa: E731
        nbytes = c["idx"].nbytes + w.nbytes + r.nbytes + G * CHANNELS * 4
    else:
        csr_t = c["csr_t"]
        fn = lambda: csr_t @ r  # noqa: E731
        nbytes = csr_t.data.nbytes + csr_t.indices.nbytes + csr_t.indptr.nbytes + r.nbytes + G * CHANNELS * 4
    got = run_timed(benchmark, fn, ROUNDS)
    _check(got, c["want_t"], 1e-4)
    _record(benchmark, method, nbytes, copy_bandwidth)


# ---- blend/blend_transpose against the copy bandwidth, interleaved -----------------------------

#: (id, grid, fraction of the grid's node count given as random points)
BW_CASES = [("2d-512-25pct", (512, 512), 0.25), ("2d-512-100pct", (512, 512), 1.0),
            ("3d-128-12pct", (128, 128, 128), 0.125)]
BW_ROUNDS = 15
BW_COPY_BYTES = 64 << 20  # per interleaved probe: 64 MiB read + 64 MiB written (twice the L3)
_BW_MATRICES: dict = {}


def _bw_matrices(case: str):
    """(default, fly, stored) BlendingMatrix of a case, built once per run (float64 points,
    Gaussian weights with sigma one grid spacing; the default keeps its per-axis weights)."""
    if case not in _BW_MATRICES:
        _, grid, frac = next(c for c in BW_CASES if c[0] == case)
        _BW_MATRICES[case] = matrices(grid, frac)
    return _BW_MATRICES[case]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("form", ["factors", "fly", "stored"])
@pytest.mark.parametrize("op", ["blend", "transpose"])
@pytest.mark.parametrize("case", [c[0] for c in BW_CASES])
def test_blend_bandwidth(benchmark, case, op, form, channels, dtype):
    """kronpe's blend (gather, ``B @ v``) and transpose (scatter, ``B.T @ r``) as a fraction of
    the copy bandwidth, a NumPy copy of 64 MiB timed before every round (interleaved, so both
    see the same load). Target: >= 0.5."""
    B = dict(zip(("factors", "fly", "stored"), _bw_matrices(case)))[form]
    rng = np.random.default_rng(3)
    dt = np.dtype(dtype)
    P, G = B.shape
    benchmark.group = f"blend bandwidth: {case}"
    if op == "blend":
        x = rng.standard_normal((G, channels)).astype(dt)
        out = np.empty((P, channels), dt)
        B.matvec(x, out=out)  # the plan (and kept weights) are built once per matrix, as in a solver
        fn = lambda: B.matvec(x, out=out)  # noqa: E731
    else:
        x = rng.standard_normal((P, channels)).astype(dt)
        out = np.empty((G, channels), dt)
        B.rmatvec(x, out=out)  # the plan is built once per matrix (cached), as in a solver
        fn = lambda: B.rmatvec(x, out=out)  # noqa: E731
    src = np.ones(BW_COPY_BYTES // 4, np.float32)
    dst = np.empty_like(src)
    copies = []

    def probe():  # untimed by pytest-benchmark: runs before every round
        copies.extend(harness.timings(lambda: np.copyto(dst, src)))

    got = benchmark.pedantic(fn, setup=probe, rounds=BW_ROUNDS, iterations=1, warmup_rounds=1)
    csr = B.to_scipy()
    want = (csr if op == "blend" else csr.T) @ x.astype(np.float64)
    _check(got, want, 1e-5 if dt == np.float32 else 1e-12)
    copy_bw = 2 * src.nbytes / float(np.median(copies))
    nbytes = blend_bytes(B, channels, dt.itemsize, {"fly": "points"}.get(form, form), op)
    benchmark.extra_info.update(case=case, op=op, form=form, channels=channels, dtype=dtype, points=P,
                                bytes=int(nbytes), copy_GBps=copy_bw / 1e9, method=f"kronpe {op} {form}", peer=False)
    med = median_seconds(benchmark)
    if med:
        benchmark.extra_info.update(GBps=nbytes / med / 1e9, fraction_of_copy=nbytes / med / copy_bw)


# ---- fit_points on a photograph -----------------------------------------------------------------


FIT_TOL = 1e-4  # relative residual of the normal equations; the PSNR does not move below it
ADAM_STEPS = 2000


@pytest.fixture(scope="module")
def photo():
    from skimage import data

    img = data.astronaut()[:512, :512].astype(np.float64) / 255.0  # (512, 512, 3) in [0, 1]
    H, W, C = img.shape
    rng = np.random.default_rng(0)
    order = rng.permutation(H * W)
    n_train = H * W // 4
    train, test = order[:n_train], order[n_train:]
    yy, xx = np.unravel_index(np.arange(H * W), (H, W))
    pts = np.stack([yy / (H - 1), xx / (W - 1)], axis=1)
    vals = img.reshape(-1, C)
    return dict(pts=pts, vals=vals, train=train, test=test, auto={})


def _psnr(pred, want):
    return float(-10 * np.log10(np.mean((np.clip(pred, 0, 1) - want) ** 2)))


def _fit_group(benchmark, method, psnr, seconds=None):
    benchmark.group = "fit_points: astronaut 512x512 RGB from 25% random pixels (PSNR on the other 75%)"
    benchmark.extra_info.update(method=method, psnr=psnr)
    print(f"\n{method}: held-out PSNR {psnr:.3f} dB")


def test_fit_points_auto(benchmark, photo):
    p = photo
    model = run_timed(benchmark, lambda: kronpe.fit_points(p["pts"][p["train"]], p["vals"][p["train"]],
                                                           tol=FIT_TOL), 2)
    psnr = _psnr(model.predict(p["pts"][p["test"]]), p["vals"][p["test"]])
    p["auto"].update(embedders=list(model.embedders), ridge=model.ridge, grid=list(model.grid_coords))
    benchmark.extra_info.update(ridge=model.ridge, iterations=model.info["iterations"],
                                embedder=repr(model.embedders[0]), grid=[g.size for g in model.grid_coords])
    _fit_group(benchmark, "kronpe fit_points (automatic embedders, grid, ridge)", psnr)
    assert model.info["converged"] and psnr > 24.0


def test_fit_points_given_ridge(benchmark, photo):
    p = photo
    if not p["auto"]:
        pytest.skip("needs test_fit_points_auto first (it chooses the ridge)")
    a = p["auto"]
    model = run_timed(benchmark, lambda: kronpe.fit_points(p["pts"][p["train"]], p["vals"][p["train"]], a["embedders"],
                                                           grid=a["grid"], ridge=a["ridge"], tol=FIT_TOL), 3)
    psnr = _psnr(model.predict(p["pts"][p["test"]]), p["vals"][p["test"]])
    benchmark.extra_info.update(ridge=model.ridge, iterations=model.info["iterations"])
    _fit_group(benchmark, "kronpe fit_points (the automatic run's embedders and ridge, given)", psnr)
    assert model.info["converged"] and psnr > 24.0


@pytest.mark.parametrize("kind", ["linear", "cubic"])
def test_griddata(benchmark, photo, kind):
    from scipy.interpolate import griddata

    p = photo
    pred = run_timed(benchmark, lambda: griddata(p["pts"][p["train"]], p["vals"][p["train"]], p["pts"][p["test"]],
                                                 method=kind, fill_value=0.5), 2)
    psnr = _psnr(pred, p["vals"][p["test"]])
    _fit_group(benchmark, f"scipy.interpolate.griddata {kind}", psnr)
    assert psnr > 24.0


def test_adam_same_model(benchmark, photo):
    """Adam on the objective fit_points solves (same embedders, grid, ridge), as the papers fit
    their complex encodings: lr 1e-2 on the weights, full batch, float32, torch on the CPU."""
    torch = pytest.importorskip("torch")
    p = photo
    if not p["auto"]:
        pytest.skip("needs test_fit_points_auto first (it chooses the model)")
    a = p["auto"]
    B = BlendingMatrix(p["pts"][p["train"]], a["grid"], a["embedders"]).store()
    idx = torch.from_numpy(B.indices)
    w = torch.from_numpy(B.weights.astype(np.float32))
    phis = [torch.from_numpy(e(g).astype(np.float32)) for e, g in zip(a["embedders"], a["grid"])]
    target = torch.from_numpy(p["vals"][p["train"]].astype(np.float32))
    lam = float(a["ridge"])
    shape = tuple(g.size for g in a["grid"])

    def train():
        W = torch.zeros(phis[0].shape[1], phis[1].shape[1], 3, requires_grad=True)
        opt = torch.optim.Adam([W], lr=1e-2)
        for _ in range(ADAM_STEPS):
            opt.zero_grad()
            V = torch.einsum("ia,abc,jb->ijc", phis[0], W, phis[1]).reshape(shape[0] * shape[1], 3)
            pred = (V[idx] * w[..., None]).sum(1)
            loss = ((pred - target) ** 2).sum() + lam * (W**2).sum()
            loss.backward()
            opt.step()
        return W.detach()

    W = benchmark.pedantic(train, rounds=1, iterations=1, warmup_rounds=0)  # 2000 steps take minutes
    V = np.einsum("ia,abc,jb->ijc", phis[0].numpy(), W.numpy(), phis[1].numpy(), optimize=True)
    Bt = BlendingMatrix(p["pts"][p["test"]], a["grid"], a["embedders"])
    psnr = _psnr(Bt @ V.reshape(-1, 3).astype(np.float64), p["vals"][p["test"]])
    _fit_group(benchmark, f"Adam, {ADAM_STEPS} steps, same objective (torch)", psnr)
    assert psnr > 15.0
