"""kronpe.analysis: stable rank, embedded distance, the theory of the embedders' widths and stable
ranks, plot helpers."""
import math

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from kronpe import analysis  # noqa: E402
from kronpe.analysis import (  # noqa: E402
    distance_curves,
    embedded_distance,
    gaussian_sigma_for_rff,
    grid,
    plot_distance,
    plot_stable_rank_vs_n,
    plot_stable_rank_vs_sigma,
    rff_sigma_for_gaussian,
    sigma_for_spacing,
    stable_rank,
    stable_rank_vs_n,
    stable_rank_vs_sigma,
)
from kronpe.embedders import Gaussian, Impulse, NeRF, RandomFourier, Rectangle, Sine, Triangle  # noqa: E402


def _exact_stable_rank(A):
    s = np.linalg.svd(np.asarray(A, dtype=np.float64), compute_uv=False)
    return float(np.sum(s**2) / s[0] ** 2)


# ---- stable rank ------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 40), k=st.integers(1, 40), seed=st.integers(0, 1000), f32=st.booleans())
def test_stable_rank_small_matches_svd(n, k, seed, f32):
    A = np.random.default_rng(seed).standard_normal((n, k)).astype(np.float32 if f32 else np.float64)
    assert stable_rank(A) == pytest.approx(_exact_stable_rank(A), rel=1e-9)


@pytest.mark.parametrize("shape", [(300, 150), (150, 300), (200, 200)])
def test_stable_rank_large_matches_svd(shape, rng):
    # past 128 rows and columns the Lanczos path is taken: check it against the SVD
    A = rng.standard_normal(shape) + 0.3 * rng.standard_normal((shape[0], 1))
    assert stable_rank(A) == pytest.approx(_exact_stable_rank(A), rel=1e-8)
    B = Gaussian(shape[1], 0.004)(grid(shape[0]))  # a clustered spectrum near the top
    assert stable_rank(B) == pytest.approx(_exact_stable_rank(B), rel=1e-8)
    assert stable_rank(B.T) == pytest.approx(stable_rank(B), rel=1e-10)
    assert stable_rank(3.0 * B) == pytest.approx(stable_rank(B), rel=1e-10)


def test_stable_rank_exact_on_degenerate_spectra():
    x = grid(512)
    assert stable_rank(Impulse(512)(x)) == 512.0  # one-hot: all singular values equal
    assert stable_rank(Sine(512, 2 * math.pi)(x)) == pytest.approx(2.0, rel=1e-12)  # rank 2, equal pair
    assert stable_rank(np.ones((300, 200))) == pytest.approx(1.0, rel=1e-12)
    q, _ = np.linalg.qr(np.random.default_rng(0).standard_normal((400, 250)))
    assert stable_rank(q) == pytest.approx(250.0, rel=1e-10)


@pytest.mark.parametrize(
    "A, match",
    [
        (np.ones(4), "A must be a 2-D"),
        (np.ones((2, 2, 2)), "A must be a 2-D"),
        (np.array([[1.0, np.nan]]), "A must be finite"),
        (np.array([[1.0, np.inf]]), "A must be finite"),
        (np.zeros((3, 3)), "A must have a non-zero"),
        (np.zeros((0, 3)), "A must have a non-zero"),
        (np.array([["a"]]), "A must hold real"),
    ],
)
def test_stable_rank_bad_input(A, match):
    # strings are a wrong type (TypeError), the rest wrong values
    with pytest.raises(TypeError if "real" in match else ValueError, match=match):
        stable_rank(A)


# ---- distances ---------------------------------------------------------------------------------


def test_embedded_distance_is_the_inner_product(rng):
    emb = Triangle(32, 0.05)
    x1, x2 = rng.random(10), rng.random(10)
    np.testing.assert_allclose(embedded_distance(emb, x1, x2), np.sum(emb(x1) * emb(x2), axis=1), rtol=1e-12)
    np.testing.assert_allclose(embedded_distance(emb, 0.5, x2), np.sum(emb(np.full(10, 0.5)) * emb(x2), axis=1))
    assert embedded_distance(emb, 0.3, 0.3).shape == ()
    np.testing.assert_allclose(emb.sampled_distance(x1 - x2, x=x1), embedded_distance(emb, x1, x2), rtol=1e-12)
    with pytest.raises(ValueError, match="x1 and x2"):
        embedded_distance(emb, np.zeros(3), np.zeros(4))
    with pytest.raises(ValueError, match="x1 and x2"):
        embedded_distance(emb, np.zeros((2, 2)), 0.1)
    with pytest.raises(ValueError, match=r"x1 must lie in \[0, 1\]"):
        embedded_distance(emb, 1.5, 0.1)
    with pytest.raises(ValueError, match="x2 must be finite"):
        embedded_distance(emb, 0.5, np.nan)


def test_distance_curves_normalised():
    curves = distance_curves([Gaussian(64, 0.02), RandomFourier(64, 5.0)], np.array([0.0, 0.05]))
    for c in curves.values():
        assert c[0] == pytest.approx(1.0)
    closed = distance_curves({"g": Gaussian(64, 0.02)}, np.array([0.0, 0.05]), sampled=False)
    assert closed["g"][1] == pytest.approx(math.exp(-0.05**2 / (4 * 0.02**2)))
    raw = distance_curves({"g": Gaussian(64, 0.02)}, np.array([0.0]), sampled=False, normalize=False)
    assert raw["g"][0] == pytest.approx(math.sqrt(math.pi) * 0.02)


# ---- theory: widths for a spacing, stable-rank bounds ------------------------------------------------


def test_sigma_for_spacing_rule():
    N = 256
    assert sigma_for_spacing(1 / N) == pytest.approx(1 / (4 * N * math.sqrt(1.6 * math.log(10))))
    assert sigma_for_spacing(1 / N, k=3.5) == pytest.approx(1 / (4 * N * math.sqrt(3.5 * math.log(10))))
    # its meaning: the normalised Gaussian distance at half a spacing is 10^-k
    g = Gaussian(N, sigma_for_spacing(1 / N))
    assert float(g.distance(0.5 / N) / g.distance(0.0)) == pytest.approx(10**-1.6)
    assert analysis.sigma_for_interval(0.1, k=2.0) == pytest.approx(0.1 / (2 * math.sqrt(2 * math.log(10))))


def test_gaussian_rff_equivalence():
    sg = 0.02
    sf = rff_sigma_for_gaussian(sg)
    assert gaussian_sigma_for_rff(sf) == pytest.approx(sg)
    assert sg * sf == pytest.approx(1 / (2 * math.sqrt(2) * math.pi))
    g, r = Gaussian(512, sg), RandomFourier(8192, sf)
    assert g.stable_rank_bound(10**6) == pytest.approx(r.stable_rank_bound(10**6))
    d = np.linspace(-0.1, 0.1, 21)  # the normalised closed-form distances coincide
    np.testing.assert_allclose(g.distance(d) / g.distance(0.0), r.distance(d) / r.distance(0.0), rtol=1e-12)
    # and so do the measured stable ranks (sizes where the theory applies, see test_embedders)
    assert stable_rank(r(grid(256))) == pytest.approx(stable_rank(g(grid(512))), rel=0.05)


def test_theory_functions_match_embedders():
    assert analysis.gaussian_stable_rank(0.01, 1000) == Gaussian(8, 0.01).stable_rank_bound(1000)
    assert analysis.rff_stable_rank(4.0, 1000) == RandomFourier(8, 4.0).stable_rank_bound(1000)
    assert analysis.rectangle_stable_rank(0.05) == pytest.approx(20.0)
    assert analysis.triangle_stable_rank(0.02) == Triangle(8, 0.01).stable_rank_bound(10**6)
    assert analysis.stable_rank_bound(Impulse(8), 10) is None
    assert analysis.stable_rank_bound(Rectangle(8, 0.5), 10) == 2.0
    d = np.array([0.0, 0.01])
    np.testing.assert_allclose(analysis.triangle_distance(d, 0.02), Triangle(8, 0.02).distance(d))
    np.testing.assert_allclose(analysis.rff_distance(d, 3.0), RandomFourier(8, 3.0).distance(d))


# ---- data and plots --------------------------------------------------------------------------------


def test_stable_rank_tables():
    r = stable_rank_vs_sigma([8, 16], [1e-3, 0.1], K=32)
    assert r.shape == (2, 2)
    assert r[0, 0] == pytest.approx(8, rel=1e-3) and r[1, 0] == pytest.approx(16, rel=1e-3)  # saturated at N
    assert r[1, 1] == pytest.approx(2.88, abs=0.05)  # wide: about 1 / (2 sqrt(pi) 0.1) = 2.82
    t = stable_rank_vs_n([Impulse(16), Sine(16, 2 * math.pi)], [4, 8])
    np.testing.assert_allclose(t["Impulse"], [4, 8])
    np.testing.assert_allclose(t["Sine f=6.28"], [2, 2], rtol=1e-9)


def test_plot_helpers_take_and_return_ax():
    fig = Figure()
    axes = fig.subplots(1, 3)
    assert plot_stable_rank_vs_sigma(axes[0], Ns=(8, 16), sigmas=[1e-3, 1e-2, 1e-1], K=32) is axes[0]
    assert len(axes[0].lines) == 3  # two N and the theory
    embs = {"g": Gaussian(32, 0.05), "imp": Impulse(32), "nerf": NeRF(3)}
    assert plot_stable_rank_vs_n(embs, [4, 8, 16], axes[1]) is axes[1]
    assert len(axes[1].lines) == 4  # three embedders and the Gaussian's theory
    deltas = np.linspace(-0.2, 0.2, 21)
    assert plot_distance(embs, deltas, axes[2]) is axes[2]
    assert len(axes[2].lines) == 4  # three sampled and the Gaussian's closed form
    np.testing.assert_allclose(axes[2].lines[0].get_ydata(), distance_curves({"g": embs["g"]}, deltas)["g"])
    ax = plot_distance(embs, deltas, data=distance_curves(embs, deltas), theory=False)
    assert len(ax.lines) == 3
