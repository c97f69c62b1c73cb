"""``kronpe analyze``: writes the three figures as PNG files and prints the numbers behind them."""
import os

from kronpe.app import cli

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
FIGURES = ["fig2_gaussian_stable_rank_vs_sigma.png", "fig3_embedders.png", "fig4_gaussian_vs_rff.png"]


def test_analyze_writes_pngs_and_prints_numbers(tmp_path, capsys):
    out = tmp_path / "analysis"
    assert cli.main(["analyze", "--out", str(out), "--no-progress"]) == 0
    for name in FIGURES:
        path = out / name
        assert path.is_file() and os.path.getsize(path) > 10_000
        with open(path, "rb") as f:
            assert f.read(8) == PNG_SIGNATURE
    captured = capsys.readouterr()
    text = captured.out
    for needle in ["Figure 2", "Figure 3", "Figure 4", "theory", "Gaussian(K=1024, sigma=0.01", "wrote"]:
        assert needle in text
    assert "it/s" not in captured.err  # --no-progress: no progress bars
