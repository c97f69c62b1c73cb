"""``kronpe analyze``: redraw figures 2, 3 and 4 of "Trading Positional Complexity vs. Deepness in
Coordinate Networks" (Zheng et al., ECCV 2022; stable rank and distance preservation of the
embedders) from computed data, and print the numbers behind them."""
from __future__ import annotations

import math
import os
from typing import List, Mapping, Optional, Sequence

import numpy as np

from .._progress import bar as progress_bar
from ..analysis import (
    closed_form_only,
    grid,
    sigma_for_spacing,
    stable_rank,
    distance_curves,
    label,
    plot_distance,
    plot_stable_rank_vs_n,
    plot_stable_rank_vs_sigma,
    rff_sigma_for_gaussian,
    stable_rank_bound,
    stable_rank_vs_n,
    stable_rank_vs_sigma,
)
from ..embedders import BSpline, Embedder, Gaussian, Impulse, RandomFourier, Rectangle, Sine, Square, Triangle


def _half_width(deltas: np.ndarray, curve: np.ndarray) -> float:
    """Smallest delta >= 0 where the normalised distance falls to 1/2 (nan if it never does)."""
    pos = deltas >= 0
    d, c = deltas[pos], curve[pos]
    below = np.nonzero(c <= 0.5)[0]
    if below.size == 0:
        return float("nan")
    i = below[0]
    if i == 0:
        return 0.0
    return float(d[i - 1] + (0.5 - c[i - 1]) * (d[i] - d[i - 1]) / (c[i] - c[i - 1]))


def _fmt(v: Optional[float]) -> str:
    return "   -   " if v is None or not np.isfinite(v) else f"{v:7.2f}"


def _print_rank_table(title: str, embedders: Mapping[str, Embedder], Ns: Sequence[int], ranks: Mapping[str, np.ndarray]) -> None:
    print(f"\n{title}: stable rank, measured (theory) per N")
    width = max(len(n) for n in embedders) + 2
    print(" " * width + "".join(f"{'N=' + str(N):>18}" for N in Ns))
    for name, emb in embedders.items():
        cells = "".join(f"{_fmt(r)} ({_fmt(stable_rank_bound(emb, int(N)))})" for r, N in zip(ranks[name], Ns))
        print(f"{name:<{width}}{cells}")


def _print_distance_table(title: str, embedders: Mapping[str, Embedder], deltas, curves, closed) -> None:
    print(f"\n{title}: distance preservation, delta where D(delta)/D(0) = 1/2 (sampled | closed form)")
    for name in embedders:
        c = _half_width(deltas, closed[name]) if name in closed else None
        print(f"  {name:<24} {_half_width(deltas, curves[name]):.5f} | {'-' if c is None else f'{c:.5f}'}")


def _figure(nrows: int, ncols: int, size):
    from matplotlib.figure import Figure

    fig = Figure(figsize=size)  # fixed margins: a layout engine would draw the figure repeatedly
    fig.subplots_adjust(left=0.09 / ncols + 0.02, right=0.98, bottom=0.1 / nrows + 0.02, top=1 - 0.06 / nrows,
                        wspace=0.22, hspace=0.28)
    return fig, fig.subplots(nrows, ncols, squeeze=False)


def _save(fig, out: str, name: str) -> str:
    path = os.path.join(out, name)
    fig.savefig(path, dpi=110)
    return path


def run_analyze(out: str, progress: bool = True) -> int:
    """``kronpe analyze``: redraw the paper's figures 2, 3 and 4 from computed data.

    Writes ``fig2_gaussian_stable_rank_vs_sigma.png``, ``fig3_embedders.png`` and
    ``fig4_gaussian_vs_rff.png`` into ``out`` and prints the numbers behind them, then a few checks
    of the closed forms (docs/math/analysis.rst) at N = K = 1024. Returns the exit status (0).
    """
    import matplotlib

    matplotlib.use("Agg")
    os.makedirs(out, exist_ok=True)
    written: List[str] = []

    # -- figure 2: Gaussian stable rank against sigma, several N --------------------------------
    K2, Ns2 = 256, (16, 32, 64, 128, 256)
    sigmas = np.logspace(-4, -1, 13)
    ranks2 = stable_rank_vs_sigma(Ns2, sigmas, K2, progress)
    print(f"Figure 2: stable rank of Gaussian(K={K2}, sigma) on N grid points; theory min(N, 1/(2 sqrt(pi) sigma))")
    print(f"{'sigma':>10}{'theory':>10}" + "".join(f"{'N=' + str(N):>9}" for N in Ns2))
    for j, s in enumerate(sigmas):
        print(f"{s:10.2e}{1 / (2 * math.sqrt(math.pi) * s):10.2f}" + "".join(f"{ranks2[i, j]:9.2f}" for i in range(len(Ns2))))
    fig, axes = _figure(1, 1, (6, 4.5))
    plot_stable_rank_vs_sigma(axes[0, 0], Ns=Ns2, sigmas=sigmas, K=K2, data=ranks2)
    written.append(_save(fig, out, "fig2_gaussian_stable_rank_vs_sigma.png"))

    # -- figure 3: several embedders, stable rank against N and distance ------------------------
    K3 = 256
    Ns = (4, 8, 16, 32, 64, 128, 256)
    family = [Impulse(K3), Sine(K3, 2 * math.pi), Square(K3, 2 * math.pi), Rectangle(K3, 0.04),
              Triangle(K3, 0.02), Gaussian(K3, 0.01), RandomFourier(1024, 10.0), BSpline(K3, 3, 0.02)]
    emb3 = {label(e): e for e in family}
    deltas = np.linspace(-0.5, 0.5, 401)
    ranks3 = stable_rank_vs_n(emb3, Ns, progress)
    curves3 = distance_curves(emb3, deltas)
    closed3 = distance_curves(closed_form_only(emb3), deltas, sampled=False)
    _print_rank_table(f"Figure 3 (K={K3}; RFF K=1024)", emb3, Ns, ranks3)
    _print_distance_table("Figure 3", emb3, deltas, curves3, closed3)
    fig, axes = _figure(1, 2, (12, 4.5))
    plot_stable_rank_vs_n(emb3, Ns, axes[0, 0], data=ranks3)
    axes[0, 0].set_title("(a) stable rank (dashed: theory)")
    plot_distance(emb3, deltas, axes[0, 1], data=curves3)
    axes[0, 1].set_title("(b) distance preservation (dashed: closed form)")
    written.append(_save(fig, out, "fig3_embedders.png"))

    # -- figure 4: Gaussian and RFF across widths (RFF widths matched by stable rank) -----------
    sig_g = (0.005, 0.01, 0.03, 0.1)
    gau = {label(e): e for e in (Gaussian(K3, s) for s in sig_g)}
    rff = {label(e): e for e in (RandomFourier(2048, rff_sigma_for_gaussian(s)) for s in sig_g)}
    deltas4 = np.linspace(-0.25, 0.25, 401)
    fig, axes = _figure(2, 2, (12, 9))
    rows = ((f"Gaussian (K={K3})", gau), ("RFF (K=2048), σ_f = 1/(2√2 π σ_g)", rff))
    for row, (title, embs) in enumerate(rows):
        ranks = stable_rank_vs_n(embs, Ns, progress)
        curves = distance_curves(embs, deltas4)
        closed = distance_curves(embs, deltas4, sampled=False)
        _print_rank_table(f"Figure 4, {title}", embs, Ns, ranks)
        _print_distance_table(f"Figure 4, {title}", embs, deltas4, curves, closed)
        plot_stable_rank_vs_n(embs, Ns, axes[row, 0], data=ranks)
        axes[row, 0].set_title(f"{title}: stable rank")
        plot_distance(embs, deltas4, axes[row, 1], data=curves)
        axes[row, 1].set_title(f"{title}: distance preservation")
    written.append(_save(fig, out, "fig4_gaussian_vs_rff.png"))

    # -- checks of the closed forms of docs/math/analysis.rst ----------------------------------
    n = 1024
    print(f"\nClosed-form checks, N = K = {n} grid points (RFF: {n // 2} frequencies):")
    x = grid(n)
    checks = [Gaussian(n, 0.01), Triangle(n, 0.005), RandomFourier(n, 30.0)]
    with progress_bar(len(checks), progress, "checks") as bar:
        for emb in checks:
            print(f"  {emb!r}: measured {stable_rank(emb(x)):.2f}, theory {emb.stable_rank_bound(n):.2f}")
            bar.update()
    print(f"  sigma_for_spacing(1/256) = {sigma_for_spacing(1 / 256):.6g} "
          f"(= 1 / (4 * 256 * sqrt(1.6 ln 10)))")
    print(f"  Gaussian sigma 0.01 <-> RFF sigma {rff_sigma_for_gaussian(0.01):.4g} (equal stable rank)")
    print("\nwrote " + ", ".join(written))
    return 0
