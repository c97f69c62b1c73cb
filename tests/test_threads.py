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
    """The smoothing kernels' team rule (one thread per 2^16 nodes beyond two, a hook for the
    many-core measurements of tools/gpu_host_diag.py): set returns the previous value, a share
    under the serial threshold is refused by name, and the rule picks team sizes, not results."""
    from kronpe import _core
    from kronpe.solvers.multigrid import ThinPlateMG

    rng = np.random.default_rng(1)
    m = rng.random((300, 300)).astype(np.float32) * (rng.random((300, 300)) < 0.3)
    b = (m * rng.standard_normal((300, 300))).astype(np.float32)
    kronpe.set_num_threads(4)
    fits = []
    previous = _core.set_nodes_per_extra_thread(1 << 13)
    try:
        assert previous == 1 << 16
        for k in (13, 17):
            assert _core.set_nodes_per_extra_thread(1 << k) in (1 << 13, 1 << 17)
            fits.append(ThinPlateMG(m, 1e-2).solve(b, tol=1e-6)[0])
        with pytest.raises(ValueError, match="nodes must be at least 8192"):
            _core.set_nodes_per_extra_thread(100)
        assert _core.set_nodes_per_extra_thread(1 << 16) == 1 << 17
    finally:
        _core.set_nodes_per_extra_thread(previous)
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


# A process that keeps one core busy for 20 s: a fresh interpreter (a forked child of this
# many-threaded process could hang on a lock another thread held at the fork, and then busy
# nothing: a clean-clone CI run saw 15 s of V-cycles without one late team).
_SPIN = "import time\nend = time.perf_counter() + 20.0\nwhile time.perf_counter() < end:\n    pass\n"


def test_busy_cores_fall_back_to_one_thread(restore_threads):
    """Processes that keep every core busy start the kernels' teams late (kronpe/threads.h): the
    cores are marked busy, default teams shrink to one thread (the same bits: results never depend
    on the count), and after the back-off the default count is back; get_num_threads is unchanged."""
    import os
    import subprocess
    import time

    from kronpe import _core
    from kronpe.solvers.multigrid import ThinPlateMG

    kronpe.set_num_threads(2)
    rng = np.random.default_rng(0)
    m = (rng.random((512, 512)) < 0.5).astype(np.float32)
    b = rng.standard_normal(m.shape).astype(np.float32)
    mg = ThinPlateMG(m, 1e-3)
    want = mg.vcycle(b).copy()
    # twice as many spinners as cores: the kernels' threads get a third of a core each
    procs = [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(2 * (os.cpu_count() or 2))]
    try:
        marks = _core.busy_cores()[1]
        deadline = time.perf_counter() + 15.0
        while _core.busy_cores()[1] == marks and time.perf_counter() < deadline:
            np.testing.assert_array_equal(mg.vcycle(b), want)
        assert _core.busy_cores()[1] > marks, "teams started on time with every core busy"
        assert _core.busy_cores()[0] and kronpe.get_num_threads() == 2
        assert _core.kernel_threads() == 1  # half of two
        kronpe.set_num_threads(8)  # halved by every mark while busy
        assert _core.kernel_threads() in (4, 2, 1) or not _core.busy_cores()[0]
        kronpe.set_num_threads(2)
        np.testing.assert_array_equal(mg.vcycle(b), want)
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
    time.sleep(0.3)  # > kBusyMilliseconds
    assert not _core.busy_cores()[0]
    np.testing.assert_array_equal(mg.vcycle(b), want)


# A fresh interpreter: fits a 512^2 chain (two-thread teams) after pauses and reports, as JSON,
# the workers moved, whether every thread's CPU set is what it was, and whether the results held.
_COLD = """
import json, os, sys, time
import numpy as np
if sys.argv[1] == "pinned":
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
import kronpe
from kronpe import _core
kronpe.set_num_threads(2)
_core.set_cold_wake_steering(sys.argv[2] == "on")
rng = np.random.default_rng(0)
T = rng.standard_normal((512, 512), dtype=np.float32)
mats = [rng.standard_normal((512, 512), dtype=np.float32) for _ in range(2)]
want = kronpe.multi_mode_product(T, mats)  # the team's workers exist from here on
def sets():
    return {t: sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")}
before, moved = sets(), _core.cold_wake_steering()[1]
same = True
for _ in range(3):
    end = time.perf_counter() + 5.0
    while _core.busy_cores()[0] and time.perf_counter() < end:  # a busy mark: one-thread teams
        time.sleep(0.02)
    time.sleep(0.05)  # > kColdMicroseconds: the next team is cold
    same &= bool(np.array_equal(kronpe.multi_mode_product(T, mats), want))
print(json.dumps({"moved": _core.cold_wake_steering()[1] - moved, "sets_kept": sets() == before, "same": same,
                  "busy_marks": _core.busy_cores()[1]}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="CPU sets of threads (Linux)")
@pytest.mark.parametrize("case", ["free on", "free off", "pinned on"])
def test_cold_teams_move_their_workers_and_put_them_back(case):
    """kronpe/threads.h's cold wakes: after a pause a team moves each worker it has seen off the
    launching thread's CPU and the worker puts its CPU set back in the region: every thread of the
    process ends with the set it had, results are unchanged; off when turned off, and nothing is
    moved when the process is pinned to one CPU."""
    import json
    import os
    import subprocess

    if not kronpe.build_info()["openmp"]:
        pytest.skip("built without OpenMP")
    placement, steering = case.split()
    if placement == "free" and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    out = subprocess.run([sys.executable, "-c", _COLD, placement, steering], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got["same"] and got["sets_kept"], got
    if placement == "free" and steering == "on":
        assert got["moved"] >= 3, got  # one worker per cold team
    else:
        assert got["moved"] == 0, got
