"""The step-scorer interface, the rule scorer, and the ProcessBench metric on hand-made records
(the real ProcessBench data is measured by benchmarks/bench_processbench.py, not here)."""

from __future__ import annotations

import json

import pytest

from rewards.steps.scorers import (RuleStepScorer, StepScores, average_f1, evaluate_step_checker,
                                first_below, steps_from_spans)

STEPS = ["Each box holds 12 eggs and there are 3 boxes.", "So 3 * 12 = 36 eggs.",
         "She sells 36 - 10 = 25 of them.", "The answer is 25."]


def test_rule_scorer_scores_each_step_and_finds_the_first_error():
    res = RuleStepScorer()("How many eggs?", STEPS)
    assert res.scores == (0.0, 1.0, -1.0, 0.0)
    assert res.first_error == 2
    assert "36 - 10 = 25" in res.reasons[2] and res.reasons[1] == ""


def test_scorer_on_text_with_spans_and_thresholds():
    text = "\n\n".join(STEPS)
    spans, pos = [], 0
    for s in STEPS:
        spans.append((pos, pos + len(s)))
        pos += len(s) + 2
    assert steps_from_spans(text, spans) == STEPS
    assert first_below([1.0, 0.0, -1.0], 0) == 2
    assert first_below([0.9, 0.7, 0.2], 0.5) == 2  # probabilities from a learned scorer
    assert first_below([0.9], 0.5) == -1


class Fixed:
    """A scorer that answers from a table, to test the metric arithmetic."""

    def __init__(self, answers):
        self.answers = answers

    def __call__(self, question, steps):
        j = self.answers[question]
        return StepScores(tuple(-1.0 if k == j else 0.0 for k in range(len(steps))), j)


RECORDS = [
    # subset a: 2 erroneous (one found exactly, one flagged late), 2 correct (one false alarm)
    {"dataset": "a", "question": "q1", "steps": ["s", "s", "s"], "first_error_step": 1},
    {"dataset": "a", "question": "q2", "steps": ["s", "s", "s"], "first_error_step": 0},
    {"dataset": "a", "question": "q3", "steps": ["s", "s"], "first_error_step": -1},
    {"dataset": "a", "question": "q4", "steps": ["s", "s"], "first_error_step": -1},
    # subset b: 1 erroneous missed, 1 correct kept
    {"dataset": "b", "question": "q5", "steps": ["s", "s"], "first_error_step": 1},
    {"dataset": "b", "question": "q6", "steps": ["s"], "first_error_step": -1},
    {"dataset": "b", "question": "q7", "steps": ["s"], "first_error_step": None},  # unlabelled
]
ANSWERS = {"q1": 1, "q2": 2, "q3": -1, "q4": 0, "q5": -1, "q6": -1, "q7": 0}


def test_processbench_metric_by_hand():
    res = evaluate_step_checker(RECORDS, Fixed(ANSWERS))
    a, b = res["a"], res["b"]
    assert (a.erroneous, a.correct, b.erroneous, b.correct) == (2, 2, 1, 1)
    assert a.acc_erroneous == 50.0 and a.acc_correct == 50.0 and a.f1 == 50.0
    assert a.false_alarm_rate == 50.0
    assert (a.flags, a.flags_exact, a.flags_at_or_after) == (3, 1, 2)
    assert a.precision_exact == pytest.approx(100 / 3)
    assert b.acc_erroneous == 0.0 and b.acc_correct == 100.0 and b.f1 == 0.0
    assert average_f1(res) == 25.0


def test_rule_scorer_through_the_metric():
    records = [
        {"dataset": "x", "question": "", "steps": STEPS, "first_error_step": 2},
        {"dataset": "x", "question": "", "steps": STEPS[:2] + ["She sells 36 - 10 = 26 of them."],
         "first_error_step": -1},
    ]
    res = evaluate_step_checker(records, RuleStepScorer())["x"]
    assert (res.hit_erroneous, res.hit_correct, res.flags) == (1, 1, 1)
    assert res.f1 == 100.0


def test_bench_script_prints_the_table(tmp_path, capsys):
    from benchmarks.bench_processbench import main

    path = tmp_path / "pb.jsonl"
    lines = [dict(r, question=r["question"], steps=STEPS) for r in RECORDS if r["first_error_step"] is not None]
    for r, label in zip(lines, [2, 2, -1, -1, 2, -1]):
        r["first_error_step"] = label
    lines[2]["steps"] = lines[3]["steps"] = lines[5]["steps"] = STEPS[:2]
    path.write_text("\n".join(json.dumps(r) for r in lines))
    assert main([str(path), "--show-flags", "1"]) == 0
    out = capsys.readouterr().out
    assert "average F1" in out and "100.0" in out
    assert "6 solutions" in out
