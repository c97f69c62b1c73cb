"""Mode-n products (kronpe.ops) against numpy.einsum (kronpe.reference)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck

import kronpe
from kronpe import _core, ops, reference

TOL = {np.float32: 2e-5, np.float64: 1e-12}


def _dense(a: np.ndarray) -> bool:
    """One dense block in some axis order."""
    axes = [i for i in np.argsort([-abs(s) for s in a.strides], kind="stable") if a.shape[i] > 1]
    return np.transpose(a, axes + [i for i in range(a.ndim) if i not in axes]).flags.c_contiguous


def _check(result, expected, dtype, k_max, order="C"):
    tol = TOL[np.dtype(dtype).type]
    assert result.dtype == dtype
    assert result.shape == expected.shape
    assert result.flags.c_contiguous if order == "C" else _dense(result)
    scale = max(1.0, float(np.abs(expected).max(initial=0.0)))
    np.testing.assert_allclose(result, expected, rtol=tol, atol=tol * scale * max(1, k_max))


def _strided_view(base: np.ndarray, shape, how: str, rng) -> np.ndarray:
    """A view of `shape` with a layout named by `how`, filled with random values."""
    if how == "contiguous":
        a = base[: int(np.prod(shape))].reshape(shape)
    elif how == "fortran":
        a = np.asfortranarray(base[: int(np.prod(shape))].reshape(shape))
    elif how == "transposed":
        a = base[: int(np.prod(shape))].reshape(shape[::-1]).T
    elif how == "stepped":  # every second element along each axis, last axis reversed
        big = np.empty(tuple(2 * s + 1 for s in shape), base.dtype)
        big[...] = rng.standard_normal(big.shape)
        idx = tuple(slice(None, 2 * s, 2) for s in shape[:-1]) + (slice(2 * shape[-1] - 1, None, -2),)
        a = big[idx]
        assert a.shape == tuple(shape)
    elif how == "padded":  # rows of a wider array
        big = rng.standard_normal(tuple(shape[:-1]) + (shape[-1] + 3,)).astype(base.dtype)
        a = big[..., 1 : 1 + shape[-1]]
    else:  # broadcast along axis 0
        a = np.broadcast_to(base[: int(np.prod(shape[1:]))].reshape((1,) + tuple(shape[1:])), shape)
    return a


LAYOUTS = ["contiguous", "fortran", "transposed", "stepped", "padded", "broadcast"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    ndim=st.integers(1, 5),
    dtype=st.sampled_from([np.float32, np.float64]),
    layout=st.sampled_from(LAYOUTS),
    mat_layout=st.sampled_from(["contiguous", "transposed", "stepped"]),
    order=st.sampled_from(["K", "C"]),
)
def test_multi_mode_product_matches_einsum(data, ndim, dtype, layout, mat_layout, order):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    shape = tuple(data.draw(st.lists(st.integers(0, 6), min_size=ndim, max_size=ndim)))
    if layout == "stepped" and 0 in shape:
        layout = "contiguous"
    base = rng.standard_normal(int(np.prod(shape)) + int(np.prod(shape[1:])) + 1).astype(dtype)
    T = _strided_view(base, shape, layout, rng)
    modes = data.draw(st.permutations(range(ndim)))
    modes = modes[: data.draw(st.integers(0, ndim))]
    mats = []
    for k in modes:
        m = data.draw(st.integers(0, 6))
        a = rng.standard_normal((m, shape[k])).astype(dtype)
        if mat_layout == "transposed":
            a = np.ascontiguousarray(a.T).T
        elif mat_layout == "stepped":
            big = rng.standard_normal((2 * m + 1, 2 * shape[k] + 1)).astype(dtype)
            big[: 2 * m : 2, : 2 * shape[k] : 2] = a
            a = big[: 2 * m : 2, : 2 * shape[k] : 2]
        mats.append(a)
    result = ops.multi_mode_product(T, mats, modes, order=order)
    expected = reference.multi_mode_product(T, mats, modes)
    _check(result, expected, dtype, max(shape, default=1), order)


CHAINS = [
    ((70, 90, 3), (0, 1), (40, 120)),  # channels last: rotations + output copy
    ((3, 70, 90), (1, 2), (80, 50)),  # channels first: GEMMs straight into the output
    ((40, 33, 65), (1,), (20,)),  # middle mode: strided batch of GEMMs
    ((64, 4, 64), (1,), (64,)),  # middle mode, short: permuting copy first
    ((256, 128, 3), (0, 1), (512, 256)),  # expanding, channels last: input copy
    ((64, 64, 64), (2, 1, 0), (32, 64, 64)),
    ((24, 20, 22, 2), (0, 1, 2), (30, 10, 25)),
    ((9, 10, 11, 12, 2), (4, 0, 2), (3, 8, 13)),  # 5 axes, chosen order
    ((5, 6, 4, 3, 2, 3), (0, 1, 2, 3, 4, 5), (2, 3, 4, 5, 6, 7)),  # 6 modes: fixed order
    ((128, 64), (1, 0), (100, 200)),
    ((30, 30, 30, 2), (0, 1, 2), (4, 5, 6)),  # shrinking: intermediates larger than the result
    ((300,), (0,), (7,)),
    ((2, 2, 2, 2, 2, 2, 2, 2, 2, 3), tuple(range(9)), (3,) * 9),  # greedy planner
]


@pytest.mark.parametrize("shape, modes, rows", CHAINS)
def test_chains_against_einsum(rng, dtype, shape, modes, rows):
    T = rng.standard_normal(shape).astype(dtype)
    mats = [rng.standard_normal((m, shape[k])).astype(dtype) for k, m in zip(modes, rows)]
    expected = reference.multi_mode_product(T, mats, modes, optimize=True)
    for order in "CK":
        _check(ops.multi_mode_product(T, mats, modes, order=order), expected, dtype, 128, order)
        # the same chain on a transposed (Fortran-ordered) and a non-contiguous view
        Tf = np.asfortranarray(T)
        _check(ops.multi_mode_product(Tf, mats, modes, order=order), expected, dtype, 128, order)
    Tr = T[::-1]
    _check(
        ops.multi_mode_product(Tr, mats, modes, order="C"),
        reference.multi_mode_product(Tr, mats, modes, optimize=True),
        dtype,
        128,
    )


def test_planner_uses_every_step_kind():
    """The chains above exercise each GEMM formulation, move, and copy at least once."""
    seen = set()
    for shape, modes, rows in CHAINS:
        strides = [int(np.prod(shape[i + 1 :])) for i in range(len(shape))]
        for any_layout in (False, True):
            plan = _core.mode_chain_plan(list(shape), strides, list(modes), list(rows), 4, any_layout)
            for part in plan.split("; "):
                seen.update(part.split(":")[-1].split("+"))
    expected = {"FrontKeep", "FrontRotate", "BackKeep", "BackRotate", "Batched", "copy_output",
                "copy_input"}
    assert expected <= seen, seen
    assert seen & {"move_front", "move_back"}, seen  # at least one permuting move


def test_mode_product_single(rng, dtype):
    T = rng.standard_normal((4, 5, 6)).astype(dtype)
    A = rng.standard_normal((3, 5)).astype(dtype)
    out = ops.mode_product(T, A, 1, order="C")
    _check(out, reference.mode_product(T, A, 1), dtype, 5)
    _check(ops.mode_product(T, A, -2), reference.mode_product(T, A, 1), dtype, 5, "K")
    assert kronpe.mode_product is ops.mode_product


def test_defaults_and_carried_axes(rng):
    T = rng.standard_normal((5, 6, 3, 2))  # two carried axes
    mats = [rng.standard_normal((4, 5)), rng.standard_normal((7, 6))]
    out = ops.multi_mode_product(T, mats)
    assert out.shape == (4, 7, 3, 2) and _dense(out)
    np.testing.assert_allclose(out, np.einsum("ai,bj,ijcd->abcd", *mats, T), rtol=1e-12)
    # no matrices: a contiguous copy
    same = ops.multi_mode_product(T[:, ::2], [])
    np.testing.assert_array_equal(same, T[:, ::2])
    assert same.flags.c_contiguous


def test_dtype_promotion(rng):
    T32 = rng.standard_normal((4, 5)).astype(np.float32)
    A64 = rng.standard_normal((3, 4))
    out = ops.mode_product(T32, A64, 0)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, A64 @ T32.astype(np.float64), rtol=1e-12)
    Ti = np.arange(20).reshape(4, 5)
    out = ops.mode_product(Ti, A64, 0)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, A64 @ Ti, rtol=1e-12)
    A32 = A64.astype(np.float32)
    assert ops.mode_product(T32, A32, 0).dtype == np.float32


def test_empty_axes(dtype):
    T = np.zeros((3, 0, 4), dtype)
    out = ops.multi_mode_product(T, [np.ones((2, 3), dtype), np.ones((5, 0), dtype)])
    assert out.shape == (2, 5, 4) and not out.any()  # sums over an empty axis are zero
    T = np.ones((3, 4), dtype)
    out = ops.multi_mode_product(T, [np.ones((0, 3), dtype)])
    assert out.shape == (0, 4)
    out = ops.mode_product(np.ones((0, 2), dtype), np.ones((3, 2), dtype), 1)
    assert out.shape == (0, 3)


def test_nan_propagates():
    T = np.ones((3, 3))
    T[1, 1] = np.nan
    out = ops.mode_product(T, np.eye(3), 0)
    assert np.isnan(out[1, 1]) and np.isfinite(out[0, 0])


def test_torch_in_torch_out():
    torch = pytest.importorskip("torch")
    T = torch.randn(4, 5, dtype=torch.float64)
    A = torch.randn(3, 4, dtype=torch.float64)
    out = ops.mode_product(T, A, 0)
    assert isinstance(out, torch.Tensor)
    np.testing.assert_allclose(out.numpy(), A.numpy() @ T.numpy(), rtol=1e-12)


# Wrong types raise TypeError, wrong values ValueError (issue 10); both name the argument.
@pytest.mark.parametrize(
    "call, match, kind",
    [
        (lambda: ops.mode_product(np.ones((3, 4)), np.ones((2, 5)), 1), r"matrices\[0\]", ValueError),
        (lambda: ops.mode_product(np.ones((3, 4)), np.ones((2, 4)), 2), "modes", ValueError),
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
    plan = _core.mode_chain_plan([1, 2**40], [2**40, 1], [0, 1], [2**40, 1], 4, False)
    assert plan.index("1:") < plan.index("0:")
    with pytest.raises(ValueError, match="overflows 64-bit"):
        _core.mode_chain_plan([2**32, 2**32], [2**32, 1], [0], [3], 4, False)
