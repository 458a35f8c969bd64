"""Summary and report from hand-built graded records (no model, no grader): numbers and tables."""

from __future__ import annotations

import pytest

from evals.harness import summarize
from evals.published import PUBLISHED, published_for
from evals.report import render_report, write_outputs


def _rec(pid, correct, preds, subject=None, level=None, ks=(1, 2)):
    rec = {"id": pid, "question": "q", "gold": "1", "prompt": "p", "completions": ["c"] * len(correct),
           "finish_reasons": ["stop"] * (len(correct) - 1) + ["length"], "num_tokens": [10] * len(correct),
           "preds": preds, "correct": correct,
           "reasons": [None if c else ("no answer found" if p is None else "not equal")
                       for c, p in zip(correct, preds)],
           "pass@k": {str(k): 0.0 for k in ks}, "maj@k": {str(k): 0.0 for k in ks}}
    if subject:
        rec.update(subject=subject, level=level)
    return rec


def test_summarize_hand_computed():
    records = [_rec("a", [True, False], ["1", "2"], "Algebra", 1),
               _rec("b", [False, False], [None, "3"], "Algebra", 2),
               _rec("c", [True, True], ["1", "1"], "Geometry", 2)]
    records[0]["pass@k"] = {"1": 0.5, "2": 1.0}
    records[2]["pass@k"] = {"1": 1.0, "2": 1.0}
    s = summarize(records, [1, 2])
    assert s["accuracy"] == pytest.approx((0.5 + 0 + 1) / 3)
    assert s["pass@k"] == {"1": pytest.approx(1.5 / 3), "2": pytest.approx(2 / 3)}
    assert s["extraction_failure_rate"] == pytest.approx(1 / 6)
    assert s["truncation_rate"] == pytest.approx(3 / 6)
    assert s["failure_reasons"] == {"not equal": 2, "no answer found": 1}
    assert s["by_subject"]["Algebra"] == {"n": 2, "accuracy": pytest.approx(0.25),
                                          "extraction_failure_rate": pytest.approx(0.25)}
    assert s["by_level"]["2"]["n"] == 2 and s["by_level"]["2"]["accuracy"] == pytest.approx(0.5)


def test_report_shows_published_numbers_only_for_a_matching_model(tmp_path):
    records = [_rec("a", [True, False], ["1", "2"], "Algebra", 1)]
    summary = {**summarize(records, [1, 2]), "dataset": "math500", "n_samples": 2, "greedy": False}
    text = render_report(records, {**summary, "model": "/models/Qwen2.5-1.5B-Instruct"})
    assert "published, not measured" in text
    row = published_for("Qwen/Qwen2.5-1.5B-Instruct", "math")[0]
    assert f"{row.accuracy:.1f}" in text and row.source in text
    assert "published" not in render_report(records, {**summary, "model": "data/models/tiny-sft"})
    assert "| maj@2 |" in text and "## By subject" in text
    write_outputs(tmp_path, records, {**summary, "model": "x"})
    assert {p.name for p in tmp_path.iterdir()} == {"results.jsonl", "summary.json", "report.md", "accuracy.png"}


def test_published_rows_are_complete():
    for p in PUBLISHED:
        assert p.dataset in {"gsm8k", "math"} and 0 < p.accuracy < 100 and p.source and "/" in p.model
    assert published_for("deepseek-ai/deepseek-math-7b-rl", "gsm8k")[0].accuracy == 88.2
    assert published_for("some/other-model", "gsm8k") == []
