"""The compiled inverse of the grid fit's square axes (``_core.invert_in_place``: blocked
Gauss-Jordan with row pivoting) against the reference (NumPy's)."""
import numpy as np
import pytest

from kronpe import _core, reference


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 2, 7, 31, 32, 33, 64, 65, 100, 257])
def test_inverse_matches_numpy(n, dtype):
    rng = np.random.default_rng(n)
    a = (rng.standard_normal((n, n)) + 2.0 * np.eye(n)).astype(dtype)
    x = a.copy()
    assert _core.invert_in_place(x)
    want = reference.inverse(a)
    kappa = np.linalg.cond(a.astype(np.float64))
    err = np.abs(x - want).max() / np.abs(want).max()
    assert err <= 20 * n * np.finfo(dtype).eps * kappa


def test_pivoting_and_row_stride():
    """A zero leading pivot needs a row swap; a matrix inside a wider array keeps its neighbours."""
    rng = np.random.default_rng(3)
    n = 70
    wide = rng.standard_normal((n, n + 5))
    wide[:, :n] = np.eye(n)[rng.permutation(n)] * rng.uniform(1, 2, n)  # a scaled permutation
    wide[0, :n] += 0.5 * rng.standard_normal(n) * (np.abs(wide[0, :n]) == 0)
    before = wide[:, n:].copy()
    a = wide[:, :n].copy()
    assert _core.invert_in_place(wide[:, :n])
    np.testing.assert_allclose(wide[:, :n] @ a, np.eye(n), atol=1e-12)
    np.testing.assert_array_equal(wide[:, n:], before)


def test_singular_and_bad_arguments():
    assert not _core.invert_in_place(np.zeros((4, 4)))
    a = np.ones((40, 40), np.float32)  # rank one: a zero pivot after the first column
    assert not _core.invert_in_place(a)
    with pytest.raises(Exception, match="square"):
        _core.invert_in_place(np.ones((3, 4)))
    x = np.empty((0, 0))
    assert _core.invert_in_place(x)
    with pytest.raises(ValueError, match="contiguous rows"):
        _core.invert_in_place(np.eye(6)[::2, ::2])
    with pytest.raises(ValueError, match="rows must not overlap"):
        _core.invert_in_place(np.eye(6)[::-1])
    with pytest.raises(ValueError, match="rows must not overlap"):
        _core.invert_in_place(np.broadcast_to(np.ones(4), (4, 4)))
    with pytest.raises(ValueError, match="float32 or float64"):
        _core.invert_in_place(np.eye(3, dtype=np.int64))
    nan = np.eye(5)
    nan[1, 2] = np.nan  # NaN spreads into the inverse (never a finite wrong answer)
    _core.invert_in_place(nan)
    assert not np.isfinite(nan).all()


@pytest.mark.parametrize("n", [40, 513])
def test_fast_inverse_by_elimination_and_by_lu(n):
    """The grid fit's square pseudo-inverse: Gauss-Jordan up to 512^2 entries, LAPACK's LU above,
    both with a bound at least the condition number."""
    from kronpe.solvers import grid

    rng = np.random.default_rng(n)
    phi = rng.standard_normal((n, n)) + 3.0 * np.sqrt(n) * np.eye(n)
    for dt in (np.dtype(np.float32), np.dtype(np.float64)):
        X, bound = grid._fast_inverse(phi, dt)
        assert X.dtype == dt and X.flags.c_contiguous
        assert bound >= np.linalg.cond(phi) * (1 - 1e-9)
        want = np.linalg.inv(phi)
        assert np.abs(X - want).max() / np.abs(want).max() <= 100 * n * np.finfo(dt).eps
