"""The outcome-vs-process experiment's statistics (by hand), summary, table and plot from given curves."""

import json
import math

import pytest

from pipeline.config import RunConfig
from pipeline.stages.experiment import plot, step_signal, summarise, write_table
from evals.stats import band, first_reach, mean_ci, permutation_p, welch_ci


def test_statistics_by_hand():
    m, h = mean_ci([0.5, 0.7])
    assert m == pytest.approx(0.6) and h == pytest.approx(12.706 * 0.1)  # t(1) * stdev 0.1414 / sqrt(2)
    assert mean_ci([0.3]) == (0.3, 0.0)
    assert first_reach({0: 0.2, 10: 0.5, 20: 0.4, 30: 0.6}, 0.5) == 10
    assert first_reach({0: 0.2, 10: 0.5}, 0.65) is None
    # 6 values split 3 / 3: 20 splits; only the observed one and its mirror reach |diff| = 1
    assert permutation_p([0.0, 0.0, 0.0], [1.0, 1.0, 1.0]) == pytest.approx(2 / 20)
    assert permutation_p([0.1, 0.2], [0.2, 0.1]) == 1.0
    diff, half = welch_ci([1.0, 2.0, 3.0], [2.0, 3.0, 4.0])  # variances 1/3 each, Welch df = 4
    assert diff == pytest.approx(1.0) and half == pytest.approx(2.776 * math.sqrt(2 / 3))
    rows = band([{0: 0.2, 10: 0.4, 20: 0.5}, {0: 0.2, 10: 0.6}])  # step 20 is not shared
    assert [r[0] for r in rows] == [0, 10]
    assert rows[1][1] == pytest.approx(0.5) and rows[1][3] - rows[1][1] == pytest.approx(12.706 * 0.1)


def test_summary_table_and_plot(tmp_path):
    curves = {"outcome": {0: [(10, 0.4), (20, 0.5)], 1: [(10, 0.3), (20, 0.7)]},
              "process": {0: [(10, 0.6), (20, 0.6)], 1: [(10, 0.5), (20, 0.6)]}}
    summary = summarise(curves, start_acc=0.25)
    out = summary["modes"]["outcome"]
    assert out["finals"] == [0.5, 0.7] and out["final_mean"] == pytest.approx(0.6)
    assert out["final_std"] == pytest.approx(0.1414213562)
    assert summary["modes"]["process"]["final_std"] == 0.0
    reach = summary["steps_to_threshold"]
    assert reach["threshold"] == pytest.approx(0.6)
    assert reach["outcome"] == {"mean_curve": 20, "per_seed": [None, 20]}  # mean curve 0.25, 0.35, 0.6
    assert reach["process"] == {"mean_curve": 20, "per_seed": [10, 20]}  # mean 0.55 at 10, 0.6 at 20
    cmp = summary["process_minus_outcome"]
    assert cmp["diff"] == pytest.approx(0.0) and cmp["permutation_p"] == 1.0
    signal = {"SFT start": {"right_clean": 3, "right_flagged": 0, "wrong_flagged": 2, "wrong_silent": 1,
                            "wrong_truncated": 0, "claims": 15}}
    write_table(summary, RunConfig(), [0, 1], tmp_path / "results.md", signal)
    text = (tmp_path / "results.md").read_text()
    assert "| outcome | 0.600 ± 0.141 | ± 1.271 | 0.500, 0.700 | 20 | not reached, 20 |" in text
    assert "| process | 0.600 ± 0.000 | ± 0.000 | 0.600, 0.600 | 20 | 10, 20 |" in text
    assert "p = 1.000" in text and "| SFT start | 3 | 0 | 2 | 1 (16.7%) | 0 | 2.50 |" in text
    assert "measures nothing" not in text  # the threshold 0.6 lies above the start 0.25
    write_table(summarise(curves, start_acc=0.6), RunConfig(), [0, 1], tmp_path / "flat.md")
    assert "here steps-to-threshold measures nothing" in (tmp_path / "flat.md").read_text()
    plot(summary, tmp_path / "plot.png")
    assert (tmp_path / "plot.png").stat().st_size > 5000


def test_step_signal_sorts_completions_by_outcome_and_refuted_steps(tmp_path):
    rec = {"completions": ["gets: <<3+4=7>>7\n#### 7", "gets: <<3+4=8>>8\n#### 8", "gets: <<3+5=8>>8\n#### 8",
                           "gets: <<3+4=7>>7\n#### 7", "gets: <<3+"],
           "correct": [True, False, False, True, False], "finish_reasons": ["stop", "stop", "stop", "stop", "length"]}
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    assert step_signal([path]) == {"right_clean": 2, "right_flagged": 0, "wrong_flagged": 1, "wrong_silent": 1,
                                   "wrong_truncated": 1, "claims": 4}  # the cut one's `<<3+` is no claim


def test_finished_runs_of_the_same_config_are_reused_and_others_are_not(tmp_path):
    from pipeline import freshness
    from pipeline.stages.experiment import finished_curve, run_config, run_fingerprint

    start = tmp_path / "sft"
    start.mkdir()
    (start / "model.safetensors").write_bytes(b"weights")
    cfg = RunConfig(output_dir=str(tmp_path))
    cfg.model.name_or_path = str(start)
    cfg.train.steps = 20
    run_cfg = run_config(cfg, "process", 3)
    run_dir = tmp_path / run_cfg.name
    assert finished_curve(run_cfg) is None  # nothing there yet
    rows = [{"step": 10, "eval/accuracy": 0.25}, {"step": 15}, {"step": 20, "eval/accuracy": 0.5}]
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert finished_curve(run_cfg) is None  # a log, but the run never finished (killed at its end)
    freshness.mark_current(run_dir, run_fingerprint(run_cfg))  # what run_one does when train returns
    assert finished_curve(run_cfg) == [(10, 0.25), (20, 0.5)]
    cfg.experiment.seeds = [0, 1, 2, 3, 4]  # more seeds: the same run
    assert finished_curve(run_config(cfg, "process", 3)) == [(10, 0.25), (20, 0.5)]
    (start / "model.safetensors").write_bytes(b"retrained")  # another starting model: run again
    assert finished_curve(run_config(cfg, "process", 3)) is None
    (start / "model.safetensors").write_bytes(b"weights")
    cfg.train.lr = 3e-4  # a different run
    assert finished_curve(run_config(cfg, "process", 3)) is None
