"""Embedders: the compiled kernel against the NumPy reference, the closed forms of the embedded
distance (the inner product of two embeddings as a function of their offset) against the sampled
embedders, the sinusoidal-embedding tutorial's formulas value by value, bad input."""
import math
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kronpe
from kronpe import _formulas, reference
from kronpe.analysis import grid, stable_rank
from kronpe.embedders import (
    BSpline,
    Gaussian,
    Impulse,
    LinearFourier,
    LogFourier,
    NeRF,
    NyquistWarning,
    Random,
    RandomFourier,
    Rectangle,
    Sine,
    Square,
    Transformer,
    Triangle,
)

from _samples import embed_cases, ids, out_view, tolerance

CASES = list(embed_cases())


# ---- compiled kernel against the reference -------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_kernel_matches_reference(case, device, dtype, tol, rng):
    """Every embedder on every device, x and out in every layout, and empty x."""
    emb = case.embedder
    x = case.coords(rng, dtype)
    expect = emb.reference(x)
    xd = device.view(x, case.x_layout)
    if case.out_layout is None:
        out = emb(xd)
    else:
        out, outside = out_view(device, (x.size, emb.K), dtype, case.out_layout)
        assert emb(xd, out=out) is out
        assert (outside() == -7).all()  # nothing written outside the view
    assert device.kind_of(out) == device.lib and device.dtype_of(out) == dtype
    assert tuple(out.shape) == (x.size, emb.K)
    np.testing.assert_allclose(device.host(out), expect, **tol())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    family=st.sampled_from(["gaussian", "triangle", "rectangle", "impulse", "sine", "square", "bspline", "random",
                            "linf", "logf", "rff", "nerf", "transformer"]),
    n=st.integers(0, 40),
    k=st.integers(1, 24),
    margin=st.integers(0, 3),
    width=st.floats(1e-3, 0.5),
    f64=st.booleans(),
    stride=st.integers(1, 3),
    seed=st.integers(0, 2**32),
)
def test_kernel_matches_reference_hypothesis(device, family, n, k, margin, width, f64, stride, seed):
    make = {
        "gaussian": lambda: Gaussian(k, width, margin=margin),
        "triangle": lambda: Triangle(k, width, margin=margin),
        "rectangle": lambda: Rectangle(k, width, margin=margin),
        "impulse": lambda: Impulse(k, margin=margin),
        "sine": lambda: Sine(k, 40 * width, margin=margin),
        "square": lambda: Square(k, 40 * width, margin=margin),
        "bspline": lambda: BSpline(k, order=margin, width=width, margin=margin),
        "random": lambda: Random(k, seed=seed),
        "linf": lambda: LinearFourier(2 * k, 10 * width),
        "logf": lambda: LogFourier(2 * k, 10 * width),
        "rff": lambda: RandomFourier(2 * k, 40 * width, seed=seed % 1000),
        "nerf": lambda: NeRF(min(k, 12), include_input=bool(margin % 2)),
        "transformer": lambda: Transformer(k, max_positions=1 / width),
    }
    emb = make[family]()
    dtype = np.float64 if f64 else np.float32
    x = np.random.default_rng(seed).random(n * stride).astype(dtype)
    out = emb(device.put(x)[::stride])
    x = x[::stride]
    assert tuple(out.shape) == (n, emb.K) and device.dtype_of(out) == dtype
    np.testing.assert_allclose(device.host(out), emb.reference(x), **tolerance(device, dtype)())


def test_integer_big_endian_and_torch_input():
    x = np.array([0, 1])
    assert Gaussian(4, 0.1)(x).dtype == np.float64
    xb = np.linspace(0, 1, 9).astype(">f8")
    np.testing.assert_array_equal(Gaussian(4, 0.1)(xb), Gaussian(4, 0.1)(xb.astype(np.float64)))
    with pytest.raises(ValueError, match="out must have dtype"):
        Gaussian(4, 0.1)(xb, out=np.empty((9, 4), dtype=">f8"))
    torch = pytest.importorskip("torch")
    t = torch.linspace(0, 1, 7, dtype=torch.float32)
    out = Triangle(8)(t)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32
    np.testing.assert_allclose(out.numpy(), Triangle(8)(t.numpy()))


# ---- interface ----------------------------------------------------------------------------


def test_interface_fields_replace_repr():
    g = Gaussian(64, 0.01, margin=2)
    assert g.K == 68 and g.K_base == 64 and g.spacing == 1 / 64 and g.width_param == "sigma"
    np.testing.assert_allclose(g.centres, np.arange(-2, 66) / 64)
    assert repr(g) == "Gaussian(K=64, sigma=0.01, margin=2)"
    h = g.replace(sigma=0.02)
    assert h == Gaussian(64, 0.02, margin=2) and h != g and hash(h) == hash(Gaussian(64, 0.02, margin=2))
    assert g.replace(K=32).K == 36
    with pytest.raises(ValueError, match="sigma"):
        g.replace(sigma=-1.0)
    with pytest.raises(ValueError, match="no parameter"):
        g.replace(width=0.1)
    t = Triangle(100)
    assert t.width == 0.01 and t.width_param == "width" and not t.paper_distance
    assert BSpline(50).width == 0.02 and BSpline(50).width_param == "width"
    assert NeRF(4).K == 8 and NeRF(4, include_input=True).K == 9 and Transformer(5).K == 10
    assert LinearFourier(10, 2).K == 10 and Random(5).K == 5
    assert RandomFourier(8, 2.0, seed=1) == RandomFourier(8, 2.0, seed=1)
    np.testing.assert_array_equal(RandomFourier(8, 2.0, seed=1).frequencies, RandomFourier(8, 2.0, seed=1).frequencies)
    assert not np.array_equal(RandomFourier(8, 2.0, seed=1).frequencies, RandomFourier(8, 2.0, seed=2).frequencies)
    assert "amplitude_mod=1.0" in repr(NeRF(3))


def test_top_level_exports():
    for name in ["Gaussian", "Triangle", "Rectangle", "Impulse", "Sine", "Square", "Random", "LinearFourier",
                 "LogFourier", "RandomFourier", "NeRF", "Transformer", "BSpline", "stable_rank",
                 "embedded_distance", "sigma_for_spacing", "plot_distance"]:
        assert name in kronpe.__all__ and hasattr(kronpe, name)


def test_psi_matches_embedding():
    for emb in [Gaussian(16, 0.05), Triangle(16, 0.1), Rectangle(16, 0.1), BSpline(16, 3, 0.05), Sine(16, 3.0)]:
        x = np.linspace(0, 1, 11)
        np.testing.assert_allclose(emb(x), emb.psi(x[:, None] - emb.centres[None, :]), rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(Impulse(4).psi([-0.125, 0.0, 0.124, 0.125]), [1, 1, 1, 0])


# ---- families: values -----------------------------------------------------------------------


def test_impulse_is_one_hot_at_nearest_centre():
    x = np.array([0.0, 0.12, 0.13, 0.5, 0.99, 1.0])
    out = Impulse(4)(x)  # centres 0, .25, .5, .75
    np.testing.assert_array_equal(out.sum(axis=1), 1)
    np.testing.assert_array_equal(out.argmax(axis=1), [0, 0, 1, 2, 3, 3])  # x = 1 clips to the last
    np.testing.assert_array_equal(Impulse(4, margin=1)(x).argmax(axis=1), [1, 1, 2, 3, 5, 5])


def test_bspline_order1_is_triangle_order0_is_rectangle_and_partition_of_unity(rng):
    x = rng.random(50)
    np.testing.assert_allclose(BSpline(20, order=1, width=0.07)(x), Triangle(20, 0.07)(x), atol=1e-14)
    np.testing.assert_array_equal(BSpline(20, order=0, width=0.05)(x), Rectangle(20, 0.05)(x))
    for p in range(6):  # width = spacing, enough margin: the B-splines sum to one on [0, 1]
        np.testing.assert_allclose(BSpline(16, order=p, margin=p // 2 + 1)(x).sum(axis=1), 1.0, rtol=1e-12)


@pytest.mark.parametrize("degree", range(8))
def test_bspline_recursion_matches_truncated_powers(degree, rng):
    u = rng.uniform(-(degree + 2) / 2, (degree + 2) / 2, 400)
    np.testing.assert_allclose(_formulas.bspline(u, degree), reference.bspline_truncated_power(u, degree),
                               rtol=1e-9, atol=1e-12)
    midpoints = (np.arange(100000) + 0.5) * 1e-4 - 5.0  # integral of B_p is 1
    assert abs(float(_formulas.bspline(midpoints, degree).sum()) * 1e-4 - 1.0) < 1e-6


def test_random_embedder_is_reproducible_per_point():
    x = np.array([0.1, 0.2, 0.3, 0.2], dtype=np.float32)
    r = Random(50, seed=3)
    a = r(x)
    np.testing.assert_array_equal(a[1], a[3])  # same x, same row
    np.testing.assert_array_equal(r(x[1:2])[0], a[1])  # any batch
    np.testing.assert_array_equal(r(x.astype(np.float64)).astype(np.float32), a)  # any dtype
    assert not np.array_equal(Random(50, seed=4)(x), a)
    assert (a >= -1).all() and (a < 1).all()
    big = Random(64, seed=0)(np.linspace(0, 1, 4001))
    assert abs(big.mean()) < 0.01 and abs(big.var() - 1 / 3) < 0.01
    assert abs(np.corrcoef(big[:, 0], big[:, 1])[0, 1]) < 0.05


def test_fourier_features_formulas():
    x = np.linspace(0, 1, 13)
    b = np.linspace(1, 2**3, 4)
    np.testing.assert_allclose(LinearFourier(8, 3)(x), np.hstack([np.cos(2 * np.pi * np.outer(x, b)),
                                                                   np.sin(2 * np.pi * np.outer(x, b))]), atol=1e-12)
    np.testing.assert_allclose(LogFourier(8, 3).frequencies, 2.0 ** np.linspace(0, 3, 4))
    z = np.random.default_rng(5).standard_normal(6)
    np.testing.assert_allclose(RandomFourier(12, 2.5, seed=5).frequencies, 2.5 * z)


# ---- the sinusoidal-embedding tutorial, value by value ---------------------------------------


def test_tutorial_integer_frequencies_example():
    # g(x') = [sin(x'), cos(x'), ..., sin(L x'), cos(L x')], x' = 2 pi x; LinearFourier(2L, log2 L) in blocks
    L, x = 3, np.linspace(0, 1, 1000)
    xn = 2 * np.pi * x
    out = LinearFourier(2 * L, math.log2(L))(x)
    for l in range(1, L + 1):
        np.testing.assert_allclose(out[:, l - 1], np.cos(l * xn), atol=1e-12)
        np.testing.assert_allclose(out[:, L + l - 1], np.sin(l * xn), atol=1e-12)
    m = 2.5  # amplitude and frequency modulation: m g(x') and g(m x')
    amp = LinearFourier(2 * L, math.log2(L), amplitude_mod=m)(x)
    np.testing.assert_allclose(amp, m * out, atol=1e-12)
    fm = LinearFourier(2 * L, math.log2(L), frequency_mod=m)(x)
    for l in range(1, L + 1):
        np.testing.assert_allclose(fm[:, L + l - 1], np.sin(l * xn * m), atol=1e-12)


def test_tutorial_nerf_and_transformer():
    L, x = 3, np.linspace(0, 1, 1000)
    xn = 2 * np.pi * x
    nerf = NeRF(L, include_input=True)(x)
    np.testing.assert_array_equal(nerf[:, 0], x)  # the raw coordinate first
    for k in range(L):
        u = 2 * x  # NeRF's sin(2^k pi u) on a domain of length 2 = sin(2^k x')
        np.testing.assert_allclose(nerf[:, 1 + 2 * k], np.sin(2**k * np.pi * u), atol=1e-12)
        np.testing.assert_allclose(nerf[:, 2 + 2 * k], np.cos(2**k * np.pi * u), atol=1e-12)
        np.testing.assert_allclose(nerf[:, 1 + 2 * k], np.sin(2**k * xn), atol=1e-12)
    m = 2.5
    fm = NeRF(L, frequency_mod=m)(x)
    am = NeRF(L, amplitude_mod=m, include_input=True)(x)
    np.testing.assert_array_equal(am[:, 0], x)  # the raw coordinate is not modulated
    for k in range(L):
        np.testing.assert_allclose(fm[:, 2 * k], np.sin(2**k * xn * m), atol=1e-12)
        np.testing.assert_allclose(am[:, 1 + 2 * k], m * np.sin(2**k * xn), atol=1e-12)
    P = 1000
    tr = Transformer(L, max_positions=P)(x)
    for k in range(L):
        np.testing.assert_allclose(tr[:, 2 * k], np.sin(xn / P ** (k / L)), atol=1e-12)
        np.testing.assert_allclose(tr[:, 2 * k + 1], np.cos(xn / P ** (k / L)), atol=1e-12)


def test_nyquist_checks():
    # the tutorial's bounds: L < N/2 for integer frequencies, 2^(L-1) < N/2 for NeRF, divided by m
    assert NeRF(3).check_nyquist(1000) and NeRF(3, frequency_mod=2.5).check_nyquist(1000)
    assert NeRF(9).check_nyquist(1000)  # 256 < 500
    assert NeRF(10).nyquist_limit(1000) == 500 and NeRF(10, frequency_mod=2.5).nyquist_limit(1000) == 200
    with pytest.warns(NyquistWarning, match=r"2\^\(L-1\) = 512 .* N / \(2 m\) = 1000 / \(2 \* 1\) = 500"):
        assert not NeRF(10).check_nyquist(1000)
    with pytest.raises(ValueError, match=r"2\^\(L-1\) = 256 .* = 200 .*L < 1 \+ log2"):
        NeRF(9, frequency_mod=2.5).check_nyquist(1000, action="raise")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not NeRF(12).check_nyquist(100, action="ignore")
    lin = lambda L, **kw: LinearFourier(2 * L, math.log2(L), **kw)  # noqa: E731 - frequencies 1..L
    assert lin(499).check_nyquist(1000) and lin(199, frequency_mod=2.5).check_nyquist(1000)
    with pytest.raises(ValueError, match=r"2\^sigma = 500 .* = 500"):
        lin(500).check_nyquist(1000, action="raise")
    with pytest.raises(ValueError, match=r"2\^sigma = 201 .* = 200 "):
        lin(201, frequency_mod=2.5).check_nyquist(1000, action="raise")
    assert NeRF(10, frequency_mod=2.5).highest_frequency == 512 * 2.5
    assert Transformer(4).check_nyquist(3) and not Transformer(4).check_nyquist(2, action="ignore")
    assert Sine(8, 2 * np.pi * 10).check_nyquist(21) and not Square(8, 2 * np.pi * 10).check_nyquist(20, "ignore")
    with pytest.raises(ValueError, match="max \\|f\\|"):
        RandomFourier(8, 100.0).check_nyquist(4, action="raise")
    with pytest.raises(ValueError, match="action"):
        NeRF(3).check_nyquist(10, action="loud")
    with pytest.raises(ValueError, match="N must"):
        NeRF(3).check_nyquist(0)


# ---- distances: closed forms against the sampled embedders --------------------------------------

DELTAS = np.linspace(-0.06, 0.06, 49)


@pytest.mark.parametrize(
    "emb, rtol",
    [
        (Gaussian(256, 0.01), 1e-10),  # smooth: the average over a centre spacing is spectrally exact
        (Gaussian(128, 0.02, margin=3), 1e-10),
        (Triangle(256, 0.01), 1e-5),
        (Triangle(256), 1e-5),
        (Rectangle(256, 0.02), 2e-3),  # a jump: the average over 256 positions is O(1/256)
        (BSpline(256, 3, 0.01), 1e-9),
        (BSpline(256, 0, 0.02), 2e-3),
        (BSpline(256, 2), 1e-6),
    ],
    ids=repr,
)
def test_closed_form_distance_matches_sampled(emb, rtol):
    closed = emb.distance(DELTAS)
    sampled = emb.sampled_distance(DELTAS, scaled=True, samples=256)
    np.testing.assert_allclose(sampled, closed, rtol=0, atol=rtol * closed.max())
    assert closed.max() == pytest.approx(float(emb.distance(0.0)))


def test_closed_forms_values():
    d = np.array([0.0, 0.01, 0.03])
    np.testing.assert_allclose(Gaussian(8, 0.02).distance(d), math.sqrt(math.pi) * 0.02 * np.exp(-d**2 / (4 * 0.02**2)))
    np.testing.assert_allclose(Rectangle(8, 0.02).distance(d), [0.02, 0.01, 0.0])
    h = 0.02  # exact triangle autocorrelation h B3(d / h) and the paper's Prop. 5 with sigma = 2 h
    b3 = lambda u: np.where(np.abs(u) <= 1, 2 / 3 - u**2 + np.abs(u) ** 3 / 2, (2 - np.abs(u)) ** 3 / 6)  # noqa: E731
    np.testing.assert_allclose(Triangle(8, h).distance(d), h * b3(d / h))
    paper = Triangle(8, h, paper_distance=True)
    np.testing.assert_allclose(paper.distance(d), (2 * h) ** 2 / 4 * np.maximum(1 - d / (2 * h), 0) ** 2)
    shape_exact = Triangle(8, h).distance(d) / Triangle(8, h).distance(0.0)
    shape_paper = paper.distance(d) / paper.distance(0.0)
    assert abs(shape_exact[1] - shape_paper[1]) > 0.1  # the paper's form is only an approximation
    np.testing.assert_allclose(RandomFourier(8, 3.0).distance(d), math.sqrt(2 * math.pi) * 3 * np.exp(-2 * math.pi**2 * 9 * d**2))
    np.testing.assert_allclose(RandomFourier(8, 3.0, amplitude_mod=2.0, frequency_mod=2.0).distance(d),
                               4 * math.sqrt(2 * math.pi) * 6 * np.exp(-2 * math.pi**2 * 36 * d**2))
    # shape preserved, scalars accepted
    assert Gaussian(8, 0.1).distance(np.zeros((2, 3))).shape == (2, 3)
    assert Gaussian(8, 0.1).distance(0.0).shape == ()


def test_rff_distance_matches_sampled_with_many_frequencies():
    emb = RandomFourier(2**15, 10.0)
    d = np.linspace(-0.1, 0.1, 41)
    np.testing.assert_allclose(emb.sampled_distance(d, scaled=True), emb.distance(d), atol=0.02 * emb.distance(0.0))


def test_fourier_sampled_distance_is_exact_cosine_sum(rng):
    emb = LogFourier(16, 4.0, amplitude_mod=1.5)
    x1 = rng.random(20)
    d = rng.uniform(-0.3, 0.3, 20)
    expect = 2.25 * np.cos(2 * np.pi * np.outer(d, emb.frequencies)).sum(axis=1)
    np.testing.assert_allclose(emb.sampled_distance(d, x=x1), expect, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(emb.sampled_distance(d), expect, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(emb.distance(d), expect, rtol=1e-12, atol=1e-12)  # no closed form: sampled
    nerf = NeRF(3, include_input=True)  # + the raw coordinates' x1 x2 averaged over positions
    grid_x = (np.arange(4000) + 0.5) / 4000
    d0 = 0.2
    pairs = grid_x[grid_x >= d0]
    avg = np.mean(np.sum(nerf(pairs) * nerf(pairs - d0), axis=1))
    assert float(nerf.distance(d0)) == pytest.approx(avg, rel=1e-5)


def test_sampled_distance_forms(rng):
    emb = Impulse(64)  # no closed form: the sampled one, scaled by the spacing, is h tri(delta / h)
    h = 1 / 64
    d = np.linspace(-2 * h, 2 * h, 17)
    np.testing.assert_allclose(emb.distance(d), h * np.maximum(1 - np.abs(d) / h, 0), atol=1e-12)
    g = Gaussian(32, 0.05)
    x = rng.random(10) * 0.5 + 0.25
    dd = rng.uniform(-0.2, 0.2, 10)
    np.testing.assert_allclose(g.sampled_distance(dd, x=x), np.sum(g(x) * g(x - dd), axis=1), rtol=1e-12)
    r = Random(400, seed=1)  # i.i.d. noise: about K/3 at zero offset and about zero elsewhere
    s = r.sampled_distance(np.array([0.0, 0.1, -0.3]))
    assert s[0] == pytest.approx(400 / 3, rel=0.05) and abs(s[1]) < 10 and abs(s[2]) < 10


# ---- stable rank against theory -----------------------------------------------------------------
# The theory ("Trading Positional Complexity vs. Deepness in Coordinate Networks", Zheng,
# Ramasinghe, Li, Lucey; Props. 2-5) treats the embedding matrix as circulant with a continuous
# spectrum: it needs the basis resolved by both samplings (width >= ~10 centre spacings and
# >= ~10 coordinate spacings) and a stable rank well below N (few border rows; the circulant
# approximation ignores the ends of [0, 1]). N = K = 512 with widths of 10-25 spacings keeps the
# measured values within 1-2 %; RFF needs many frequencies (the count near zero frequency sets
# the top singular value, so it fluctuates like 1/sqrt(K / sigma)) and sqrt(2 pi) sigma >> 1.


@pytest.mark.parametrize(
    "emb, N",
    [
        (Gaussian(512, 0.02), 512),  # 14.1
        (Triangle(512, 0.01), 512),  # 66.7 (full width 0.02)
        (Rectangle(512, 0.05), 512),  # 20
        (BSpline(512, 3, 0.02), 512),  # 24.0
        (RandomFourier(8192, 4.0), 256),  # 10.0
        (Sine(64, 2 * math.pi), 64),  # 2 (the rank)
    ],
    ids=repr,
)
def test_stable_rank_within_5_percent_of_theory(emb, N):
    measured = stable_rank(emb(grid(N)))
    assert measured == pytest.approx(emb.stable_rank_bound(N), rel=0.05)


def test_gaussian_stable_rank_at_2048():
    # Gaussian sigma = 0.01 with N = K = 2048: a measured stable rank of 28.08 against 28.21 from the
    # closed form (sqrt(pi) sigma exp(-delta^2 / (4 sigma^2)) as a circulant spectrum)
    g = Gaussian(2048, 0.01)
    assert stable_rank(g(grid(2048))) == pytest.approx(28.08, abs=0.01)
    assert g.stable_rank_bound(2048) == pytest.approx(28.21, abs=0.01)


def test_stable_rank_bounds_saturate_at_N():
    assert Gaussian(64, 1e-4).stable_rank_bound(100) == 100
    assert Triangle(64, 0.01).stable_rank_bound(10**6) == pytest.approx(4 / (3 * 0.02))
    assert Rectangle(64, 0.1).stable_rank_bound(5) == 5
    assert BSpline(64, 1, 0.01).stable_rank_bound(10**6) == pytest.approx(Triangle(64, 0.01).stable_rank_bound(10**6))
    assert BSpline(64, 0, 0.1).stable_rank_bound(10**6) == pytest.approx(10.0)
    for emb in (Impulse(8), Square(8, 1.0), Random(8), NeRF(3), LinearFourier(8, 2)):
        with pytest.raises(NotImplementedError):
            emb.stable_rank_bound(10)


# ---- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "x, match",
    [
        (np.array([0.1, np.nan]), "x must be finite"),
        (np.array([0.1, np.inf]), "x must be finite"),
        (np.array([0.1, 1.5]), r"x must lie in \[0, 1\]"),
        (np.array([-0.01]), r"x must lie in \[0, 1\]"),
        (np.zeros((2, 2)), "x must be a 1-D"),
        (np.array(0.5), "x must be a 1-D"),
        (np.array([0.1j]), "x must hold real numbers"),  # a TypeError
    ],
)
def test_bad_coordinates(device, x, match):
    kind = TypeError if np.iscomplexobj(x) else ValueError  # wrong type / wrong value
    for emb in (Gaussian(8, 0.1), NeRF(2), Random(3)):
        with pytest.raises(kind, match=match):
            emb(device.put(x))


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: Gaussian(0, 0.1), "K must"),
        (lambda: Gaussian(-3, 0.1), "K must"),
        (lambda: Gaussian(2.5, 0.1), "K must"),  # a TypeError
        (lambda: Gaussian(8, 0.0), "sigma must"),
        (lambda: Gaussian(8, -1.0), "sigma must"),
        (lambda: Gaussian(8, float("nan")), "sigma must"),
        (lambda: Gaussian(8, 0.1, margin=-1), "margin must"),
        (lambda: Triangle(8, 0.0), "width must"),
        (lambda: Rectangle(8, -0.1), "width must"),
        (lambda: Impulse(0), "K must"),
        (lambda: Sine(8, 0.0), "freq must"),
        (lambda: Square(8, float("inf")), "freq must"),
        (lambda: Random(0), "K must"),
        (lambda: Random(4, seed=-1), "seed must"),
        (lambda: BSpline(8, order=8), "order must"),
        (lambda: BSpline(8, order=-1), "order must"),
        (lambda: BSpline(8, width=0), "width must"),
        (lambda: LinearFourier(7, 2.0), "K must be even"),
        (lambda: LinearFourier(0, 2.0), "K must"),
        (lambda: LogFourier(8, 0.0), "sigma must"),
        (lambda: RandomFourier(8, -2.0), "sigma must"),
        (lambda: RandomFourier(8, 2.0, seed=-1), "seed must"),
        (lambda: NeRF(0), "L must"),
        (lambda: NeRF(61), "L must"),
        (lambda: NeRF(3, amplitude_mod=0.0), "amplitude_mod must"),
        (lambda: NeRF(3, frequency_mod=-2.0), "frequency_mod must"),
        (lambda: Transformer(0), "L must"),
        (lambda: Transformer(4, max_positions=0), "max_positions must"),
    ],
)
def test_bad_parameters(make, match):
    with pytest.raises((TypeError, ValueError), match=match) as info:
        make()
    # a float where an integer is expected is a wrong type; the rest are wrong values
    assert info.type is (TypeError if "2.5" in repr(info.value) else ValueError)
    with pytest.raises((TypeError, ValueError), match=match):
        make()


def test_bad_out_and_delta():
    g = Gaussian(8, 0.1)
    x = np.linspace(0, 1, 5)
    with pytest.raises(ValueError, match="out must have shape"):
        g(x, out=np.empty((5, 7)))
    with pytest.raises(ValueError, match="out must have dtype"):
        g(x, out=np.empty((5, 8), dtype=np.float32))
    ro = np.empty((5, 8))
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="out must be writeable"):
        g(x, out=ro)
    with pytest.raises(ValueError, match="delta must be finite"):
        g.distance([0.1, np.nan])
    with pytest.raises(ValueError, match="delta must be finite"):
        NeRF(2).distance([np.inf])
    with pytest.raises(ValueError, match="N must"):
        g.stable_rank_bound(0)


def test_core_rejects_bad_arguments():
    from kronpe import _core
    from kronpe._adapters.arrays import Array, describe, host_array

    x = np.zeros(1)
    out = np.zeros((1, 1))
    xa, oa = host_array(x), host_array(out)
    with pytest.raises(ValueError, match="kind"):
        _core.embed_basis(xa, oa, "nope", 0, 1.0, 1.0, 3, 0)
    with pytest.raises(ValueError, match="positive"):
        _core.embed_basis(xa, oa, "gaussian", 0, 1.0, -1.0, 3, 0)
    with pytest.raises(ValueError, match="degree"):
        _core.embed_basis(xa, oa, "bspline", 0, 1.0, 1.0, 9, 0)
    with pytest.raises(ValueError, match="float32 or float64"):
        _core.embed_basis(xa._replace(dtype="int8"), oa._replace(dtype="int8"), "gaussian", 0, 1.0, 1.0, 3, 0)
    with pytest.raises(ValueError, match="layout"):
        _core.embed_fourier(xa, describe(np.zeros((1, 2))), xa, "x", False, 1.0)
    # wrong Python types are TypeErrors, wrong values ValueErrors
    with pytest.raises(TypeError):
        _core.embed_basis("float64", oa, "gaussian", 0, 1.0, 1.0, 3, 0)
    with pytest.raises(TypeError):
        _core.embed_basis(xa, oa, "gaussian", "0", 1.0, 1.0, 3, 0)
    with pytest.raises(ValueError, match="on cuda:0"):
        _core.embed_basis(xa._replace(device=0), oa, "gaussian", 0, 1.0, 1.0, 3, 0)
    assert isinstance(xa, Array) and xa.device == -1
