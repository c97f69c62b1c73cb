"""kronpe.set_num_threads / get_num_threads, and kronpe.torch's kernels sharing torch's threads."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import kronpe
from kronpe._adapters import blas


@pytest.fixture
def restore_threads():
    before, before_blas = kronpe.get_num_threads(), blas.blas_threads()
    yield
    kronpe.set_num_threads(None)
    if before_blas is not None:
        blas.set_blas_threads(before_blas)
    assert kronpe.get_num_threads() == before


def test_set_and_get(restore_threads):
    kronpe.set_num_threads(1)
    assert kronpe.get_num_threads() == 1
    if blas.blas_threads() is not None:  # SciPy's OpenBLAS follows
        assert blas.blas_threads() == 1
    kronpe.set_num_threads(3)
    assert kronpe.get_num_threads() == 3


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-2, ValueError), (10**6, ValueError), ("2", TypeError),
                                        (1.5, TypeError)])
def test_bad_counts_name_the_argument(bad, error):
    with pytest.raises(error, match="^n must be an integer"):
        kronpe.set_num_threads(bad)


def test_results_do_not_depend_on_the_count(restore_threads):
    rng = np.random.default_rng(0)
    points = rng.random((20000, 2))
    values = rng.standard_normal((33 * 33, 3))
    out = {}
    for n in (1, 2):
        kronpe.set_num_threads(n)
        B = kronpe.BlendingMatrix(points, (33, 33), [kronpe.Gaussian(32, 0.02)] * 2)
        out[n] = (B @ values, B.T @ (B @ values), kronpe.Gaussian(64, 0.02)(points[:, 0]))
    for a, b in zip(out[1], out[2]):
        np.testing.assert_array_equal(a, b)


def test_smoothing_team_rule_round_trips_and_refuses_tiny_shares(restore_threads):
    """The smoothing kernels' team rule (one thread per 2^16 nodes beyond two, a hook for
    measuring team sizes on many-core machines): set returns the previous value, a share
    under the serial threshold is refused by name, and the rule picks team sizes, not results."""
    from kronpe import _core
    from kronpe.solvers.multigrid import ThinPlateMG

    rng = np.random.default_rng(1)
    m = rng.random((300, 300)).astype(np.float32) * (rng.random((300, 300)) < 0.3)
    b = (m * rng.standard_normal((300, 300))).astype(np.float32)
    kronpe.set_num_threads(4)
    fits = []
    previous = _core._tuning.set_nodes_per_extra_thread(1 << 13)
    try:
        assert previous == 1 << 16
        for k in (13, 17):
            assert _core._tuning.set_nodes_per_extra_thread(1 << k) in (1 << 13, 1 << 17)
            fits.append(ThinPlateMG(m, 1e-2).solve(b, tol=1e-6)[0])
        with pytest.raises(ValueError, match="nodes must be at least 8192"):
            _core._tuning.set_nodes_per_extra_thread(100)
        assert _core._tuning.set_nodes_per_extra_thread(1 << 16) == 1 << 17
    finally:
        _core._tuning.set_nodes_per_extra_thread(previous)
    np.testing.assert_array_equal(fits[0], fits[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")
def test_one_openmp_runtime_with_torch():
    """kronpe's OpenMP kernels run on the runtime torch loaded: one libgomp in a process that
    imports torch and kronpe (a fresh one: other libraries the suite imports, e.g. pyfastkron,
    bring their own)."""
    pytest.importorskip("torch")
    if not kronpe.build_info()["openmp"]:
        pytest.skip("built without OpenMP")
    import os
    import subprocess
    import sys

    code = (
        "import torch, kronpe.torch as kt\n"
        "idx = torch.randint(0, 100, (5000, 4))\n"
        "kt.blend(torch.randn(100, 3), idx, torch.rand(5000, 4))\n"
        "torch.randn(512, 512) @ torch.randn(512, 512)\n"
        "libs = {l.split()[-1] for l in open('/proc/self/maps') if 'gomp' in l or 'libiomp' in l}\n"
        "print(len({p.rsplit('/', 1)[-1] for p in libs}), sorted(libs))\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "1", out.stdout


def test_torch_kernels_follow_torch_threads():
    """kronpe.torch's blend gives the same result on 1 thread and on torch's default."""
    torch = pytest.importorskip("torch")
    import kronpe.torch as kt

    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, 4000, (300000, 4), generator=g)
    w = torch.rand(300000, 4, generator=g)
    V = torch.randn(4000, 3, generator=g)
    R = torch.randn(300000, 3, generator=g)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = kt.blend(V, idx, w), kt.blend_transpose(R, idx, w, 4000)
        torch.set_num_threads(max(2, before))
        many = kt.blend(V, idx, w), kt.blend_transpose(R, idx, w, 4000)
    finally:
        torch.set_num_threads(before)
    for a, b in zip(one, many):
        torch.testing.assert_close(a, b, rtol=0, atol=0)




def test_clear_caches_forgets_what_kronpe_keeps():
    """kronpe.clear_caches empties every registered cache and the core's kept work memory; results
    are the same after it."""
    from kronpe import _core
    from kronpe.solvers import grid

    rng = np.random.default_rng(0)
    img = rng.random((24, 20))
    emb = kronpe.Gaussian(12, 0.05)
    first = kronpe.fit_grid(img, [emb, emb], ridge=1e-3).weights
    kronpe.upsample(img, 2)
    mask = rng.random((64, 64)) < 0.5
    kronpe.fit_grid(rng.random((64, 64)), mask=mask)
    assert grid._FACTORS
    kronpe.clear_caches()
    assert not grid._FACTORS and _core._tuning.work_cache() == 0
    from kronpe import resampling

    assert not resampling._CACHE
    np.testing.assert_array_equal(kronpe.fit_grid(img, [emb, emb], ridge=1e-3).weights, first)


def test_cold_teams_count_only_when_late_on_oversubscribed_cores():
    """The busy-cores rule (kronpe/threads.h): a warm team is always judged; a cold one (its threads
    woke from sleep) only when it came late while more tasks were runnable than there are CPUs,
    i.e. another library's threads held the cores (NumPy's OpenBLAS workers between kronpe's
    calls); late on free cores it only woke slowly, and on time it says nothing."""
    from kronpe import _core

    judged = _core._tuning.team_is_judged
    assert judged(False, False, 0) and judged(False, True, -1) and judged(False, True, 3)
    assert judged(True, True, 1) and judged(True, True, 2)
    assert not judged(True, True, 0) and not judged(True, True, -1)
    assert not judged(True, False, 2)
