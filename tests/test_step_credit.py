"""Step rewards pay only real work (issue 31): refuted claims stay refuted whatever words
follow, identities earn nothing, and a wrong final answer earns no credit at all."""

from __future__ import annotations

import pytest

from rewards.claims.judge import check_claims
from rewards.steps.reward import check_steps, step_rewards, steps_score


@pytest.mark.parametrize("text", ["So 2 + 8 = 4, which is not wrong.", "2 + 8 = 4 (no mistake here)",
                                  "2 + 8 = 4, which is false, no wait, it is right.", "2 + 8 = 4 is not a mistake"])
def test_excuse_words_do_not_unrefute(text):
    assert [c.ok for c in check_claims(text)] == [False]


def test_a_rejected_test_is_judged_neither_way():
    assert check_claims("Try x = 2: 2 + 8 = 4, which is false.") == []  # no credit, no penalty


@pytest.mark.parametrize("line", ["50 * 1 = 50", "50 + 0 = 50", "50 - 0 = 50", "50 / 1 = 50"])
def test_identity_steps_earn_no_credit(line):
    [step] = check_steps(line + "\n#### 50", "50")[:1]
    assert step.score == 1 and step.used == 0


def test_real_work_that_returns_an_operand_still_counts():
    [step] = check_steps("10 - 5 = 5\n#### 5", "5")[:1]
    assert step.used == 1


def test_no_credit_on_a_wrong_answer_and_padding_does_not_help():
    wrong = "3 * 6 = 18\n18 + 2 = 20\n#### 20"
    padded = "3 * 6 = 18\n18 * 1 = 18\n18 + 0 = 18\n18 + 2 = 20\n20 * 1 = 20\n#### 20"
    for text in (wrong, padded):
        points = step_rewards(text, gold="21")
        assert points[-1].outcome == 0.0 and points[-1].value == pytest.approx(-0.5)
        assert steps_score(text, "21") == 0.0
    right = "3 * 6 = 18\n18 + 3 = 21\n#### 21"
    padded_right = "3 * 6 = 18\n18 * 1 = 18\n18 + 0 = 18\n18 + 3 = 21\n21 * 1 = 21\n#### 21"
    assert step_rewards(padded_right, gold="21")[-1].value == step_rewards(right, gold="21")[-1].value
    # steps_score counts only steps with a non-trivial checked claim: padding neither helps nor hurts
    assert steps_score(padded_right, "21") == steps_score(right, "21") == 1.0
