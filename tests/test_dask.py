"""kronpe with dask arrays (kronpe.dask), on a real dask.distributed.LocalCluster of 2 worker
processes (loopback): results equal the in-memory ones; a worker killed in the middle of a batch
fit is replaced and the result is still right. Skipped without dask, distributed or zarr."""
import os
import sys

import numpy as np
import pytest

import kronpe
from kronpe import reference

from _samples import mode_product_cases, random_values

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
zarr = pytest.importorskip("zarr")
kd = pytest.importorskip("kronpe.dask")


@pytest.fixture(scope="module")
def client():
    """One cluster for the module (starting one costs seconds): 2 processes, 1 thread each."""
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the worker plugin below
    env = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=":0", worker_dashboard_address=":0",
                                  env=env) as cluster, distributed.Client(cluster) as c:
        yield c


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of at most 16 KB: every chain is cut into many blocks and rechunked between stages."""
    monkeypatch.setattr(kd, "BLOCK_BYTES", 16384)


def _chunks(shape, parts=3):
    return tuple(max(1, -(-n // parts)) for n in shape)


# ---- multi_mode_product --------------------------------------------------------------------------


@pytest.mark.parametrize("case", list(mode_product_cases()), ids=lambda c: c.id)
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["float32", "float64"])
def test_chain_matches_reference(case, dtype, monkeypatch):
    rng = np.random.default_rng(7)
    T, mats = case.host_inputs(rng, dtype)
    # blocks of about a quarter of the largest step: every chain cut and rechunked between stages
    sizes = [max([n] + [m for m, k in zip(case.rows, case.chain_modes) if k == i]) for i, n in enumerate(case.shape)]
    monkeypatch.setattr(kd, "BLOCK_BYTES", max(256, int(np.prod(sizes)) * np.dtype(dtype).itemsize // 4))
    view = random_values(rng, case.shape, dtype, case.layout) if case.layout != "contiguous" else T
    dT = da.from_array(view, chunks=_chunks(case.shape))
    out = kronpe.multi_mode_product(dT, mats, case.modes)
    assert isinstance(out, da.Array)
    want = reference.multi_mode_product(np.asarray(view, np.float64), [a.astype(np.float64) for a in mats],
                                        case.modes, optimize=True)
    got = out.compute(scheduler="synchronous")
    assert got.dtype == dtype and got.shape == want.shape
    scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=0, atol=(2e-5 if dtype == np.float32 else 1e-12) * scale
                               * max(1, int(np.prod(case.shape))) ** 0.5)


def test_mode_product_and_mixed_dtypes():
    rng = np.random.default_rng(0)
    T = rng.standard_normal((6, 7, 5)).astype(np.float32)
    A = rng.standard_normal((4, 7))  # float64: the chain runs in float64
    out = kronpe.mode_product(da.from_array(T, chunks=(2, 3, 5)), A, 1)
    assert isinstance(out, da.Array) and out.dtype == np.float64
    np.testing.assert_allclose(out.compute(), reference.mode_product(T.astype(np.float64), A, 1), atol=1e-12)
    ints = da.from_array(np.arange(12).reshape(3, 4), chunks=2)
    np.testing.assert_allclose(kronpe.multi_mode_product(ints, [np.eye(3)]).compute(), np.arange(12).reshape(3, 4))


def test_chain_bad_input():
    T = da.ones((4, 5), chunks=2)
    with pytest.raises(TypeError, match="T must hold real numbers"):
        kronpe.multi_mode_product(T.astype(np.complex128), [np.eye(4)])
    with pytest.raises(ValueError, match=r"matrices\[0\] must have shape \(m, 4\)"):
        kronpe.multi_mode_product(T, [np.eye(3)])
    with pytest.raises(ValueError, match="modes must be distinct"):
        kronpe.multi_mode_product(T, [np.eye(4), np.eye(4)], modes=[0, 0])
    with pytest.raises(ValueError, match="unknown size"):
        kronpe.multi_mode_product(T[T[:, 0] > 0], [np.eye(5)], modes=[1])


# ---- grid fits -----------------------------------------------------------------------------------


def _grid(n=(24, 18)):
    return [np.linspace(0, 1, k + 1)[:-1] for k in n]


def test_batch_fit_on_cluster_equals_in_memory(client, tmp_path):
    rng = np.random.default_rng(1)
    plan = kronpe.GridPlan(_grid(), [kronpe.Gaussian(16, 0.05), kronpe.Gaussian(12, 0.07)], ridge="gcv")
    S = rng.standard_normal((24, 18, 2, 10))  # 2 channels, a batch of 10 signals
    want = plan.fit(S, batch_axes=1)
    got = plan.fit(da.from_array(S, chunks=(24, 18, 1, 3)), batch_axes=1)  # channels rechunked together
    assert isinstance(got.weights, da.Array) and isinstance(got.ridge, da.Array)
    w, lam, score = client.compute([got.weights, got.ridge, got.gcv], sync=True)
    np.testing.assert_allclose(w, want.weights, rtol=1e-9, atol=1e-12)  # GEMM blocking differs by batch size
    np.testing.assert_allclose(lam, want.ridge, rtol=1e-9)
    np.testing.assert_allclose(score, want.gcv, rtol=1e-9)
    coords = [np.linspace(0, 1, 31), np.linspace(0, 1, 20)]
    pred = got.predict_grid(coords)
    assert isinstance(pred, da.Array)
    pred.to_zarr(str(tmp_path / "pred.zarr"))
    np.testing.assert_allclose(zarr.open(str(tmp_path / "pred.zarr"))[...], want.predict_grid(coords),
                               rtol=1e-9, atol=1e-12)
    pts = rng.random((9, 2))
    np.testing.assert_allclose(got.predict(pts).compute(), want.predict(pts), rtol=1e-9, atol=1e-12)


def test_fixed_ridge_fit_maps_channel_chunks():
    rng = np.random.default_rng(2)
    S = rng.standard_normal((20, 16, 7))
    plan = kronpe.GridPlan(_grid((20, 16)), kronpe.Gaussian(12, 0.06), ridge=1e-3)
    got = plan.fit(da.from_array(S, chunks=(20, 16, 2)))
    assert got.ridge == 1e-3 and got.weights.chunks[2] == (2, 2, 2, 1)  # channels stay in their chunks
    np.testing.assert_allclose(got.weights.compute(), plan.fit(S).weights, rtol=1e-12, atol=1e-12)


def test_penalty_and_mask_fit_per_chunk():
    rng = np.random.default_rng(3)
    S = rng.standard_normal((20, 16, 4))
    mask = rng.random((20, 16)) > 0.3
    plan = kronpe.GridPlan(_grid((20, 16)), kronpe.BSpline(12), ridge=1e-2, penalty=kronpe.DifferencePenalty(2))
    want = plan.fit(S, mask=mask, batch_axes=1)
    got = plan.fit(da.from_array(S, chunks=(20, 16, 1)), mask=mask, batch_axes=1)
    np.testing.assert_allclose(got.weights.compute(), want.weights, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("pad,ridge", [(0, 1e-3), (2, 1e-3), (0, 0.0)])
def test_chunked_grid_fit_on_cluster_equals_in_memory(client, small_blocks, tmp_path, pad, ridge):
    """A signal chunked along its grid axes (the beyond-memory path): blocked chains."""
    rng = np.random.default_rng(4)
    n = (30, 22, 9)
    embs = [kronpe.BSpline(k, margin=2) for k in n]
    plan = kronpe.GridPlan(_grid(n), embs, ridge=ridge, pad=pad)
    S = rng.standard_normal(n + (2,))
    want = plan.fit(S)
    got = plan.fit(da.from_array(S, chunks=(7, 6, 4, 1)))
    assert isinstance(got.weights, da.Array) and got.weights.npartitions > 1  # blocks, not one array
    tol = 1e-10 if ridge else 1e-6 * float(np.abs(want.weights).max())
    np.testing.assert_allclose(client.compute(got.weights, sync=True), want.weights, rtol=0, atol=tol)
    coords = [np.linspace(0, 1, 41)] * 3
    got.predict_grid(coords).to_zarr(str(tmp_path / "up.zarr"))
    np.testing.assert_allclose(zarr.open(str(tmp_path / "up.zarr"))[...], want.predict_grid(coords), rtol=0,
                               atol=tol)


def test_fit_grid_with_dask(client):
    rng = np.random.default_rng(5)
    x = np.linspace(0, 1, 33)
    S = np.sin(6 * x)[:, None] * np.cos(4 * x)[None, :] + 0.01 * rng.standard_normal((33, 33))
    want = kronpe.fit_grid(S)  # default embedders, pad 2, GCV
    got = kronpe.fit_grid(da.from_array(S, chunks=(33, 33)))
    np.testing.assert_allclose(client.compute(got.weights, sync=True), want.weights, rtol=1e-12, atol=1e-12)
    assert float(got.ridge.compute()) == want.ridge
    chunked = kronpe.fit_grid(da.from_array(S, chunks=(11, 17)), ridge=want.ridge)
    np.testing.assert_allclose(chunked.weights.compute(), want.weights, rtol=1e-10, atol=1e-10)


def test_grid_fit_bad_input():
    plan = kronpe.GridPlan(_grid((8, 6)), kronpe.Gaussian(5, 0.1), ridge="gcv")
    S = da.ones((8, 6), chunks=(4, 6))
    with pytest.raises(ValueError, match="ridge='gcv' needs the signal's grid axes in one chunk"):
        plan.fit(S)
    with pytest.raises(ValueError, match=r"signal must have shape \(8, 6\)"):
        plan.fit(da.ones((8, 5), chunks=4))
    with pytest.raises(TypeError, match="signal must hold real numbers"):
        plan.fit(S.astype(np.complex64), ridge=0.1)
    with pytest.raises(ValueError, match="batch_axes=1"):
        plan.fit(S, ridge=0.1, batch_axes=1)
    with pytest.raises(ValueError, match="width='gcv' is not available"):
        kronpe.fit_grid(S, width="gcv")


# ---- scattered points ------------------------------------------------------------------------------


def _scattered(rng, P=2500):
    pts = rng.random((P, 2))
    vals = np.stack([np.sin(6 * pts[:, 0]) * np.cos(4 * pts[:, 1]), pts[:, 0] ** 2], axis=1)
    return pts, vals + 0.01 * rng.standard_normal(vals.shape)


@pytest.mark.parametrize("tol", [1e-9, 1e-5], ids=["float64-products", "float32-products"])
def test_fit_points_on_cluster_equals_in_memory(client, tol):
    rng = np.random.default_rng(6)
    pts, vals = _scattered(rng)
    embs = [kronpe.Gaussian(14, 0.06), kronpe.Gaussian(10, 0.09)]
    want = kronpe.fit_points(pts, vals, embs, ridge=1e-4, tol=tol)
    got = kronpe.fit_points(da.from_array(pts, chunks=(600, 2)), da.from_array(vals, chunks=(400, 1)), embs,
                            ridge=1e-4, tol=tol)
    assert got.info["partitions"] == 5 and got.info["converged"]
    assert abs(got.info["iterations"] - want.info["iterations"]) <= 1
    scale = float(np.abs(want.weights).max())
    np.testing.assert_allclose(got.weights, want.weights, rtol=0, atol=(1e-8 if tol < 1e-6 else 1e-3) * scale)
    q = rng.random((50, 2))
    np.testing.assert_allclose(got.predict(q), want.predict(q), rtol=0, atol=(1e-8 if tol < 1e-6 else 1e-3))


def test_fit_points_bad_input():
    rng = np.random.default_rng(8)
    pts, vals = _scattered(rng, 200)
    dp, dv = da.from_array(pts, chunks=50), da.from_array(vals, chunks=50)
    emb = kronpe.Gaussian(8, 0.1)
    with pytest.raises(ValueError, match="ridge must be a number for dask points"):
        kronpe.fit_points(dp, dv, emb)
    with pytest.raises(ValueError, match="embedders must be given"):
        kronpe.fit_points(dp, dv, None, ridge=1e-3)
    with pytest.raises(ValueError, match=r"values must have one row per point \(200\)"):
        kronpe.fit_points(dp, dv[:10], emb, ridge=1e-3)
    with pytest.raises(ValueError, match=r"points must lie in \[0, 1\] along axis 1"):
        kronpe.fit_points(dp + np.array([0.0, 2.0]), dv, emb, ridge=1e-3)
    with pytest.raises(ValueError, match="points must be finite"):
        kronpe.fit_points(da.where(dp > 0.99, np.nan, dp), dv, emb, ridge=1e-3)
    with pytest.raises(ValueError, match="penalty is not available"):
        kronpe.fit_points(dp, dv, emb, ridge=1e-3, penalty=kronpe.DifferencePenalty(2))


# ---- a worker killed in the middle of a batch fit ---------------------------------------------------


class _KillOnce(distributed.WorkerPlugin):
    """Ends its worker's process (os._exit) when the first chunk fit finishes on any worker:
    the first worker to create ``marker`` dies, once."""

    name = "kronpe-kill-once"

    def __init__(self, marker: str):
        self.marker = marker

    def setup(self, worker):
        self.worker = worker

    def transition(self, key, start, finish, **kwargs):
        if finish == "memory" and "_fit_block" in str(key):
            try:
                fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return
            os.close(fd)
            os._exit(1)


def test_killed_worker_is_retried(client, tmp_path):
    rng = np.random.default_rng(9)
    plan = kronpe.GridPlan(_grid((40, 30)), kronpe.Gaussian(24, 0.04), ridge="gcv")
    S = rng.standard_normal((40, 30, 12))
    want = plan.fit(S, batch_axes=1)
    marker = tmp_path / "killed"
    client.register_plugin(_KillOnce(str(marker)))
    try:
        got = plan.fit(da.from_array(S, chunks=(40, 30, 2)), batch_axes=1)
        w, lam = client.compute([got.weights, got.ridge], sync=True)
    finally:
        client.unregister_worker_plugin(_KillOnce.name)
    assert marker.exists()  # a worker did die in the middle of the batch
    np.testing.assert_allclose(w, want.weights, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(lam, want.ridge, rtol=1e-9)
    client.wait_for_workers(2, timeout=60)  # the nanny restarted it
