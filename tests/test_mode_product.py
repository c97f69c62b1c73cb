"""Mode-n products (kronpe.multi_mode_product) against numpy.einsum (kronpe.reference), on every
device, over the cases of tests/_samples.py (mode_product_cases)."""
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import kronpe
from kronpe import _core, ops, reference
from _samples import (CPU, LARGE_CHAINS, LAYOUTS, PLANNER_CHAINS, TEAM_CHAINS, ids, mode_product_cases, random_values,
                      tolerance)

CASES = list(mode_product_cases())


def reference_chain(T, mats, modes):
    """The chain in float64 (numpy.einsum)."""
    return reference.multi_mode_product(T.astype(np.float64), [a.astype(np.float64) for a in mats], modes,
                                        optimize=True)


def check_product(device, result, expected, dtype, k, order="C"):
    """A product computed on the device against its float64 reference: kind, dtype, shape,
    layout (C order, or one dense block with order "K") and values (k: the contraction length)."""
    assert device.kind_of(result) == device.lib
    assert device.dtype_of(result) == dtype
    assert tuple(result.shape) == expected.shape
    assert device.is_dense(result, order)
    tol = tolerance(device, dtype, "sums")
    scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
    np.testing.assert_allclose(device.host(result), expected, rtol=tol.rtol, atol=tol.rtol * scale * max(1, k))


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_chain_matches_einsum(case, device, dtype, rng):
    T, mats = case.host_inputs(rng, dtype)
    Td, mats_d = case.device_inputs(device, T, mats)
    expected = reference_chain(T, mats, case.chain_modes)
    k = sum(case.shape[m] for m in case.chain_modes)
    for order in "CK":
        check_product(device, kronpe.multi_mode_product(Td, mats_d, case.modes, order=order), expected, dtype, k,
                      order)


@pytest.fixture(params=["blas", "packed"])
def chain_gemm(request):
    """The CPU chains on the BLAS and on kronpe's packed GEMM (where the CPU runs it: AVX-512, or
    AVX2 and FMA; CI runs this file with KRONPE_SIMD=avx2 too)."""
    if request.param == "packed" and not _core._tuning.packed_gemm_supported():
        pytest.skip("neither AVX-512 nor AVX2 and FMA on this CPU")
    _core._tuning.set_chain_gemm(request.param)
    yield request.param
    _core._tuning.set_chain_gemm("auto")


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_chain_gemms_match_einsum(case, chain_gemm, dtype, rng):
    """Both GEMMs of the CPU chains (each plans with its own cost model) give the reference."""
    T, mats = case.host_inputs(rng, dtype)
    expected = reference_chain(T, mats, case.chain_modes)
    k = sum(case.shape[m] for m in case.chain_modes)
    for order in "CK":
        check_product(CPU, kronpe.multi_mode_product(T, mats, case.modes, order=order), expected, dtype, k, order)


def test_packed_chain_plans_follow_the_kernels():
    """The packed GEMM's cost model is its kernels': with the AVX-512 ones every step of a cube's
    chain is X^T A^T (the tensor read in place), with the AVX2 ones (this file also runs with
    KRONPE_SIMD=avx2) the steps at k = 64-128 over thousands of columns are A X^T (the tensor
    packed by 8 x 8 transposes: 5-17% faster there), the others X^T A^T."""
    gemm = kronpe.build_info()["chain_gemm"]
    if not gemm.startswith("packed"):
        pytest.skip("the chains do not run the packed GEMM on this CPU")
    avx2 = gemm == "packed AVX2"

    def matrix_left(n, m):
        ops = _core.mode_chain_program([n] * 3, [n * n, n, 1], [0, 1, 2], [m] * 3, 4, False, "packed")[0]
        return [op[4] for op in ops if op[0] == "gemm"]

    assert matrix_left(64, 64) == matrix_left(128, 128) == matrix_left(64, 128) == [avx2] * 3
    assert matrix_left(32, 32) == matrix_left(256, 256) == [False] * 3


@pytest.mark.parametrize("shape, rows", LARGE_CHAINS)
def test_large_chains_on_both_gemms_and_threads(chain_gemm, dtype, shape, rows):
    """Chains big enough for several blocks per GEMM step (and a contraction longer than a k
    block; the last: steps over 16 MiB, read with prefetches and written with streaming stores by
    the packed GEMM): the reference values, and the same bits on one and two threads."""
    rng = np.random.default_rng(3)
    T = rng.standard_normal(shape).astype(dtype)
    mats = [rng.standard_normal((m, shape[i])).astype(dtype) for i, m in enumerate(rows)]
    modes = tuple(range(len(rows)))
    expected = reference_chain(T, mats, modes)
    try:  # kronpe's own thread count (the packed GEMM's), the BLAS's left as it is
        _core.set_num_threads(1)
        one = kronpe.multi_mode_product(T, mats)
        _core.set_num_threads(2)
        two = kronpe.multi_mode_product(T, mats)
    finally:
        _core.set_num_threads(0)
    check_product(CPU, one, expected, dtype, sum(shape[m] for m in modes), "K")
    if chain_gemm == "packed":
        np.testing.assert_array_equal(one, two)
    else:
        check_product(CPU, two, expected, dtype, sum(shape[m] for m in modes), "K")


@pytest.mark.parametrize("shape, rows, modes", TEAM_CHAINS)
@pytest.mark.parametrize("order", ["K", "C"])
def test_small_chains_on_one_team(chain_gemm, dtype, shape, rows, modes, order):
    """Chains of at least 4 MFLOP whose steps are each too small for a team of their own run every
    step on one team (csrc/cpu/mode_product.cpp, kTeamChainFlops): each thread a share of every
    step's rows, columns or batches. The reference values, and the same bits on one and two threads."""
    rng = np.random.default_rng(11)
    modes = tuple(range(len(rows))) if modes is None else modes
    T = rng.standard_normal(shape).astype(dtype)
    mats = [rng.standard_normal((m, shape[k])).astype(dtype) for m, k in zip(rows, modes)]
    if shape == (24, 50, 50):
        T, mats = np.asfortranarray(T), [np.asfortranarray(a) for a in mats]
    if shape == (64, 32, 32):  # every second slab of T, and the matching columns of its matrix
        T, mats[0] = T[::2], np.ascontiguousarray(mats[0][:, ::2])
        shape = T.shape
    expected = reference_chain(T, mats, modes)
    try:
        _core.set_num_threads(1)
        one = kronpe.multi_mode_product(T, mats, modes, order=order)
        _core.set_num_threads(2)
        two = kronpe.multi_mode_product(T, mats, modes, order=order)
    finally:
        _core.set_num_threads(0)
    check_product(CPU, one, expected, dtype, sum(shape[m] for m in modes), order)
    if chain_gemm == "packed":
        np.testing.assert_array_equal(one, two)
    else:
        check_product(CPU, two, expected, dtype, sum(shape[m] for m in modes), order)


@pytest.mark.parametrize("order", ["K", "C"])
def test_numpy_fast_path_matches_the_general_path(dtype, order):
    """NumPy operands of one float dtype take a short path (ops._numpy_chain); matrices given as
    an iterator take the general one: the same bits, shapes and layouts, over negative and
    tuple modes, strided and transposed operands, empty axes and 1-D tensors."""
    rng = np.random.default_rng(5)

    def arr(*shape):
        return rng.standard_normal(shape).astype(dtype)

    cases = [
        (arr(6, 7, 8), [arr(3, 6), arr(5, 8)], [0, -1]),
        (arr(6, 7, 8)[::2, :, 1::2], [arr(4, 7), arr(2, 3)], (1, 0)),
        (arr(9, 8).T, [arr(8, 9).T], None),
        (arr(5, 0, 4), [arr(3, 0), arr(2, 4)], [1, 2]),
        (arr(7), [arr(4, 7)], [-1]),
        (arr(4, 5, 6, 3), [arr(6, 4), arr(6, 5), arr(6, 6)], None),
    ]
    for T, mats, modes in cases:
        assert T.size == 0 or ops._numpy_chain(T, mats, modes, order) is not None  # the short path
        fast = ops.multi_mode_product(T, mats, modes, order=order)
        general = ops.multi_mode_product(T, iter(mats), modes, order=order)
        assert fast.shape == general.shape and fast.dtype == general.dtype == dtype
        assert fast.strides == general.strides
        np.testing.assert_array_equal(fast, general)


@pytest.mark.skipif(not _core._tuning.packed_gemm_supported(), reason="neither AVX-512 nor AVX2 and FMA on this CPU")
@pytest.mark.parametrize("rows", [256, 253, 250, 245])
@pytest.mark.parametrize("big", ["a", "b"])
def test_packed_gemm_last_rows_keep_their_bits(dtype, rows, big):
    """The packed GEMM's last sliver of rows (fewer than a whole sliver) runs a narrower kernel:
    every row of C has the bits it has when more rows follow it (the operands read as rows of a
    taller matrix). ``big``: A the larger operand (its slivers blocked) or B (A packed whole)."""
    rng = np.random.default_rng(rows)
    k, n = 70, (40 if big == "a" else 400)
    a = rng.standard_normal((rows + 20, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)

    def product(m):
        c = np.full((m, n), np.nan, dtype)
        _core.packed_gemm(a[:m], b, c, False, False, 1)
        return c

    np.testing.assert_array_equal(product(rows), product(rows + 20)[:rows])


def test_large_results_start_on_a_cache_line():
    """Results of 16 MiB or more start on a 64-byte boundary (the packed GEMM's streaming stores
    need it); smaller ones are NumPy's own arrays."""
    from kronpe._adapters import arrays

    for shape, dtype in [((1 << 22,), np.float32), ((512, 1024, 4), np.float64), ((3, 0, 5), np.float32)]:
        x = arrays.empty_aligned(shape, dtype)
        assert x.shape == shape and x.dtype == dtype and x.flags.c_contiguous and x.flags.writeable
        if x.nbytes >= 16 << 20:
            assert x.ctypes.data % 64 == 0
        else:
            assert x.base is None
    T = np.ones((64, 64, 64, 17), np.float32)
    out = kronpe.multi_mode_product(T, [np.eye(64, dtype=np.float32)] * 3)
    assert out.ctypes.data % 64 == 0
    np.testing.assert_array_equal(out, T)


def test_chains_on_several_threads_at_once(chain_gemm):
    """Chains running at the same time on several Python threads (the GIL released): each its own
    scratch, each the reference result."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(11)
    jobs = []
    for i in range(6):
        shape = (30 + i, 40, 20 + 3 * i)
        T = rng.standard_normal(shape).astype(np.float32)
        mats = [rng.standard_normal((17 + i, n)).astype(np.float32) for n in shape]
        jobs.append((T, mats))
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda job: [kronpe.multi_mode_product(*job) for _ in range(5)], jobs))
    for (T, mats), outs in zip(jobs, results):
        expected = reference_chain(T, mats, (0, 1, 2))
        for out in outs:
            check_product(CPU, out, expected, np.float32, sum(T.shape), "K")


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    data=st.data(),
    ndim=st.integers(1, 5),
    dtype=st.sampled_from([np.float32, np.float64]),
    layout=st.sampled_from(LAYOUTS),
    mat_layout=st.sampled_from(["contiguous", "fortran", "stepped", "reversed"]),
    order=st.sampled_from(["K", "C"]),
)
def test_random_chains_match_einsum(device, data, ndim, dtype, layout, mat_layout, order):
    assume(device.supports(layout) and device.supports(mat_layout))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    shape = tuple(data.draw(st.lists(st.integers(0, 6), min_size=ndim, max_size=ndim)))
    T = random_values(rng, shape, dtype, layout)
    modes = data.draw(st.permutations(range(ndim)))
    modes = modes[: data.draw(st.integers(0, ndim))]
    mats = [rng.standard_normal((data.draw(st.integers(0, 6)), shape[k])).astype(dtype) for k in modes]
    result = kronpe.multi_mode_product(device.view(T, layout), [device.view(a, mat_layout) for a in mats], modes,
                                       order=order)
    check_product(device, result, reference_chain(T, mats, modes), dtype, max(shape, default=1), order)


def test_planner_uses_every_step_kind():
    """The planner chains exercise each GEMM formulation, move, and copy at least once."""
    seen = set()
    for _, shape, modes, rows in PLANNER_CHAINS:
        strides = [int(np.prod(shape[i + 1 :])) for i in range(len(shape))]
        for any_layout in (False, True):
            plan = _core._tuning.mode_chain_plan(list(shape), strides, list(modes), list(rows), 4, any_layout)
            for part in plan.split("; "):
                seen.update(part.split(":")[-1].split("+"))
    expected = {"FrontKeep", "FrontRotate", "BackKeep", "BackRotate", "Batched", "copy_output",
                "copy_input"}
    assert expected <= seen, seen
    assert seen & {"move_front", "move_back"}, seen  # at least one permuting move


def test_mode_product_single(device, dtype, rng):
    T = rng.standard_normal((4, 5, 6)).astype(dtype)
    A = rng.standard_normal((3, 5)).astype(dtype)
    expected = reference_chain(T, [A], [1])
    check_product(device, kronpe.mode_product(device.put(T), device.put(A), 1, order="C"), expected, dtype, 5)
    check_product(device, kronpe.mode_product(device.put(T), device.put(A), -2), expected, dtype, 5, "K")
    assert kronpe.mode_product is ops.mode_product


def test_host_matrices_go_to_the_tensors_device(device, dtype, rng):
    T = rng.standard_normal((8, 12, 10)).astype(dtype)
    mats = [rng.standard_normal((7, 10)).astype(dtype), rng.standard_normal((6, 8)).astype(dtype)]
    host = [CPU.view(mats[0], "fortran"), CPU.view(mats[1], "stepped")]
    out = kronpe.multi_mode_product(device.view(T, "permuted"), host, (2, 0))
    check_product(device, out, reference_chain(T, mats, (2, 0)), dtype, 18, "K")


def test_dtype_promotion(device, rng):
    """float32 with float64 and integers with floats compute in float64, on every device."""
    T32 = rng.standard_normal((4, 5)).astype(np.float32)
    A64 = rng.standard_normal((3, 4))
    out = kronpe.mode_product(device.put(T32), device.put(A64), 0)
    assert device.dtype_of(out) == np.float64
    np.testing.assert_allclose(device.host(out), A64 @ T32.astype(np.float64), rtol=1e-12)
    Ti = np.arange(20).reshape(4, 5)
    out = kronpe.mode_product(device.put(Ti), device.put(A64), 0)
    assert device.dtype_of(out) == np.float64
    np.testing.assert_allclose(device.host(out), A64 @ Ti, rtol=1e-12)
    A32 = A64.astype(np.float32)
    assert device.dtype_of(kronpe.mode_product(device.put(T32), device.put(A32), 0)) == np.float32


def test_nan_propagates(device):
    T = np.ones((3, 3))
    T[1, 1] = np.nan
    out = device.host(kronpe.mode_product(device.put(T), device.put(np.eye(3)), 0))
    assert np.isnan(out[1, 1]) and np.isfinite(out[0, 0])


def test_torch_in_torch_out():
    torch = pytest.importorskip("torch")
    T = torch.randn(4, 5, dtype=torch.float64)
    A = torch.randn(3, 4, dtype=torch.float64)
    out = ops.mode_product(T, A, 0)
    assert isinstance(out, torch.Tensor)
    np.testing.assert_allclose(out.numpy(), A.numpy() @ T.numpy(), rtol=1e-12)


def test_errors_name_the_argument(device):
    T = device.put(np.zeros((4, 5)))
    with pytest.raises(ValueError, match=r"matrices\[0\] .*must have shape \(m, 4\)"):
        kronpe.mode_product(T, device.put(np.zeros((3, 5))), 0)
    with pytest.raises(ValueError, match="modes must be distinct"):
        kronpe.multi_mode_product(T, [np.zeros((2, 4)), np.zeros((2, 4))], (0, 0))


# Wrong types raise TypeError, wrong values ValueError; both name the argument.
@pytest.mark.parametrize(
    "call, match, kind",
    [
        (lambda: ops.mode_product(np.ones((3, 4)), np.ones((2, 5)), 1), r"matrices\[0\]", ValueError),
        (lambda: ops.mode_product(np.ones((3, 4)), np.ones((2, 4)), 2), "mode", ValueError),
        (lambda: ops.mode_product(np.ones((3, 4)), np.ones((2, 4)), 1.0), "mode", TypeError),
        (lambda: ops.mode_product(np.ones(()), np.ones((2, 1)), 0), "T", ValueError),
        (lambda: ops.mode_product(np.ones((3, 4)), np.ones((2, 4, 1)), 1), r"matrices\[0\]", ValueError),
        (lambda: ops.mode_product(np.ones((3, 4), complex), np.ones((2, 4)), 1), "T", TypeError),
        (lambda: ops.multi_mode_product(np.ones((3, 4)), [np.ones((2, 3))] * 2, [0, 0]), "distinct", ValueError),
        (lambda: ops.multi_mode_product(np.ones((3, 4)), [np.ones((2, 3))], [0, 1]), "modes", ValueError),
        (lambda: ops.multi_mode_product(np.ones((3, 4)), [np.ones((2, 3))] * 3), "matrices", ValueError),
        (lambda: ops.multi_mode_product(np.ones((3, 4)), np.ones((2, 3))), "matrices", ValueError),
        (lambda: ops.multi_mode_product(np.ones((3, 4)), [np.ones((2, 3))], ["a"]), "modes", TypeError),
        (lambda: ops.multi_mode_product(np.ones((3, 4)), [np.ones((2, 3))], order="F"), "order", ValueError),
    ],
)
def test_bad_input(call, match, kind):
    with pytest.raises(kind, match=match):
        call()


def test_planner_sizes_never_wrap():
    # intermediates of 2^80 elements along one order: the planner takes the other order
    plan = _core._tuning.mode_chain_plan([1, 2**40], [2**40, 1], [0, 1], [2**40, 1], 4, False)
    assert plan.index("1:") < plan.index("0:")
    with pytest.raises(ValueError, match="overflows 64-bit"):
        _core._tuning.mode_chain_plan([2**32, 2**32], [2**32, 1], [0], [3], 4, False)


@pytest.mark.parametrize("layouts", ["fixed", "measured"])
def test_chain_layout_modes_agree(layouts):
    """Both ways of costing the GEMM layouts (KRONPE_CHAIN_LAYOUTS) give the reference result;
    the measured one records its shape classes, and the mode goes back to the default after."""
    from kronpe import ops

    rng = np.random.default_rng(5)
    T = rng.standard_normal((6, 33, 17, 2)).astype(np.float32)
    mats = [rng.standard_normal((m, n)).astype(np.float32) for m, n in ((9, 6), (20, 33), (5, 17))]
    want = np.einsum("abcd,ia,jb,kc->ijkd", T.astype(np.float64), *[a.astype(np.float64) for a in mats])
    try:
        ops._chain_layouts(layouts)
        assert _core._tuning.mode_cost_model()["layout_measured"] == (layouts == "measured")
        got = kronpe.multi_mode_product(T, mats)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
        if layouts == "measured":
            table = _core._tuning.mode_layout_table()
            assert table and all(len(r) == 8 and min(r[4:]) == 1.0 for r in table)
    finally:
        ops._chain_layouts("")
    assert not _core._tuning.mode_cost_model()["layout_measured"]


def test_chain_layout_mode_bad_value():
    from kronpe import ops

    with pytest.raises(ValueError, match="KRONPE_CHAIN_LAYOUTS"):
        ops._chain_layouts("fast")
