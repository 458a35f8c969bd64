"""The outcome-vs-process experiment's summary, table and plot from given curves."""

from pipeline.config import RunConfig
from pipeline.experiment import plot, summarise, write_table


def test_summary_table_and_plot(tmp_path):
    curves = {"outcome": {0: [(10, 0.4), (20, 0.5)], 1: [(10, 0.3), (20, 0.7)]},
              "process": {0: [(10, 0.5), (20, 0.6)], 1: [(10, 0.6), (20, 0.6)]}}
    summary = summarise(curves, start_acc=0.25)
    assert summary["modes"]["outcome"]["finals"] == [0.5, 0.7]
    assert abs(summary["modes"]["outcome"]["final_mean"] - 0.6) < 1e-12
    assert abs(summary["modes"]["outcome"]["final_std"] - 0.1414213562) < 1e-9  # stdev of 0.5, 0.7
    assert summary["modes"]["process"]["final_std"] == 0.0
    write_table(summary, RunConfig(), [0, 1], tmp_path / "results.md")
    text = (tmp_path / "results.md").read_text()
    assert "| outcome | 0.600 ± 0.141 | 0.500, 0.700 |" in text
    plot(summary, tmp_path / "plot.png")
    assert (tmp_path / "plot.png").stat().st_size > 5000
