"""Process (step) rewards: step splitting with spans, exact claim checks, the final outcome."""

from __future__ import annotations

import dataclasses

import pytest

from rewards import format_reward, step_rewards
from rewards.arith import ParseError, evaluate
from rewards.steps import check_step

SYNTH = "12 + 5 = <<12+5=17>>17\n17 * 3 = <<17*3=51>>51\n#### 51"


def test_synthetic_solution_lines():
    steps = step_rewards(SYNTH, gold="51")
    assert [SYNTH[s.start:s.end] for s in steps] == SYNTH.split("\n")
    assert [s.score for s in steps] == [1, 1, 0]
    assert [s.claims for s in steps] == [2, 2, 0]  # annotation + the written chain
    assert steps[-1].outcome == 1.0 and steps[0].outcome is None
    assert [s.reward for s in steps] == [1.0, 1.0, 1.0]


def test_false_claim_and_wrong_outcome():
    text = "12 + 5 = <<12+5=18>>18\n18 * 3 = <<18*3=54>>54\n#### 54"
    steps = step_rewards(text, gold="51")
    assert [s.score for s in steps] == [-1, 1, 0]
    assert steps[-1].outcome == 0.0
    assert steps[0].false_claims == 2


def test_only_the_written_chain_is_false():
    # the annotation is right but the prose claims something else
    n, bad = check_step("12 + 5 = 18, so <<12+5=17>>17")
    assert (n, bad) == (2, 1)


def test_generated_gsm_synth_solutions_all_check(tmp_path):
    from pipeline.config import DataConfig
    from pipeline.synth import generate

    cfg = dataclasses.replace(DataConfig(), synth_train_size=200, synth_test_size=20,
                              synth_ops=["+", "-", "*", "/"])
    train, _ = generate(cfg)
    for rec in train:
        steps = step_rewards(rec["solution"], gold=rec["answer"], style="gsm8k")
        assert all(s.score == 1 for s in steps[:-1]), rec["solution"]
        assert steps[-1].outcome == 1.0
        assert format_reward(rec["solution"], "gsm8k") == 1.0


def test_step_markers_and_spans():
    text = "Intro words.\nStep 1: 3 + 4 = 7\nmore of step one\nStep 2: 7 * 2 = 15\n"
    steps = step_rewards(text)
    pieces = [text[s.start:s.end] for s in steps]
    assert pieces == ["Intro words.", "Step 1: 3 + 4 = 7\nmore of step one", "Step 2: 7 * 2 = 15"]
    assert [s.score for s in steps] == [0, 1, -1]
    assert steps[-1].outcome is None


@pytest.mark.parametrize("step,expected", [
    ("$\\frac{1}{2} + \\frac{1}{3} = \\frac{5}{6}$", (1, 0)),
    ("$\\frac{1}{2} + \\frac{1}{3} = \\frac{2}{5}$", (1, 1)),
    ("$3 \\times 4 = 12$ and $12 \\div 4 = 3$", (2, 0)),
    ("0.1 + 0.2 = 0.3", (1, 0)),                  # exact, not floating point
    ("10/3 = <<10/3=3.33>>3.33", (2, 0)),         # a decimal right side may be rounded
    ("10/3 = 3.34", (1, 1)),
    ("$1,000 + 5 = $1,005", (1, 0)),
    ("2 + 3 = 5 = 6", (1, 1)),
    ("x = 5", (0, 0)), ("5P + 30 = 95", (0, 0)), ("2x+4 = 120", (0, 0)),
    ("half of 48 = 24", (0, 0)), ("Tenly has 68 animals + 5 = 73", (0, 0)),
    ("1 + 1 = (lambda: 2)()", (0, 0)), ("2**3 = 8", (1, 0)), ("5/0 = 1 + 1", (0, 0)),
    ("$5x -3 + 6 = 12 + 6$", (0, 0)), ("$g \\left( \\frac{1}{2} \\right) = 0$", (0, 0)),
    ("$1000 \\div 9 = 111$ remainder 1", (0, 0)), ("$1 \\cdot 4 \\cdot 3 = 3!$", (0, 0)),
    ("ratio $1:2^2=1:4$", (0, 0)), ("$\\frac 12 \\cdot 3 \\cdot 6 = 9$", (1, 0)),
])
def test_claims(step, expected):
    assert check_step(step) == expected


def test_evaluator_is_bounded_and_never_evals():
    assert evaluate("2^10 - (3 * 4) / 6") == 1022
    assert evaluate("25%") * 4 == 1
    for bad in ["__import__('os')", "9^9^9^9", "2^100000", "(" * 100 + "1" + ")" * 100, "1/0", "a+1"]:
        with pytest.raises(ParseError):
            evaluate(bad)


def test_step_rewards_never_raise_on_junk():
    for junk in ["", "\n\n\n", "<<1+1=>>", "<<=>>", "= = =", "\x00" * 50, "1" * 100_000 + "=1"]:
        assert isinstance(step_rewards(junk), list)
