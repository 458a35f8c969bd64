"""Process (step) rewards: step spans, claim checks per step, reward points, the outcome reused
with the run's style and timeout, the registry `steps` reward, and bounded work on hostile text."""

from __future__ import annotations

import dataclasses
import time

import pytest

import rewards.outcome.answer
from rewards import REWARDS, RewardResult, build_reward, check, format_reward, step_rewards
from rewards.claims.arith import ParseError, evaluate
from rewards.claims.judge import check_claims
from rewards.steps.reward import StepRewardConfig, check_steps, split_steps, steps_score, trivial, used_claims

SYNTH = "12 + 5 = <<12+5=17>>17\n17 * 3 = <<17*3=51>>51\n#### 51"


def test_right_solution_is_one_final_point_with_credit():
    points = step_rewards(SYNTH, gold="51")
    assert len(points) == 1  # no false claim: only the final point
    p = points[0]
    assert (p.start, p.end) == (0, len(SYNTH))
    assert p.outcome == 1.0 and p.value == pytest.approx(0.2)  # two used steps x 0.1
    assert p.reward == pytest.approx(1.2)


def test_false_claim_gets_its_own_penalty_point():
    text = "12 + 5 = <<12+5=18>>18\n18 * 3 = <<18*3=54>>54\n#### 54"
    points = step_rewards(text, gold="51")
    assert [(p.start, p.end) for p in points] == [(0, 22), (23, len(text))]
    assert points[0].value == -0.5 and points[0].score == -1 and points[0].false_claims == 2
    assert points[0].outcome is None
    assert points[1].outcome == 0.0
    # 18 * 3 = 54 is true and gives the answer, but the answer is wrong: no credit (issue 31)
    assert points[1].value == pytest.approx(0.0)


def test_steps_without_evidence_share_the_next_point():
    text = "Let me think.\nFirst we add.\n2 + 2 = 5\nSo far so good.\nMore words.\n#### 5"
    points = step_rewards(text, gold="4")
    assert [text[p.start:p.end] for p in points] == [
        "Let me think.\nFirst we add.\n2 + 2 = 5",
        "So far so good.\nMore words.\n#### 5",
    ]
    assert [p.value for p in points] == [-0.5, 0.0]


def test_config_is_validated():
    with pytest.raises(ValueError, match="max_credit"):
        StepRewardConfig(max_credit=1.0)
    points = step_rewards(SYNTH, gold="51", config=StepRewardConfig(credit=0.05, max_credit=0.05))
    assert points[-1].value == pytest.approx(0.05)


def test_outcome_is_reused_not_regraded(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("graded twice")

    monkeypatch.setattr(rewards.outcome.answer, "check", boom)
    given = RewardResult(1.0, "51", "")
    assert step_rewards(SYNTH, gold="51", outcome=given)[-1].outcome == 1.0
    assert step_rewards(SYNTH, gold="51", outcome=0.0)[-1].outcome == 0.0  # a float score works too
    assert steps_score(SYNTH, "51", outcome=given) == 1.0


def test_outcome_uses_the_runs_style_and_timeout(monkeypatch):
    # the issue's example: every style reads the last statement (#### 7), as the outcome reward
    # does, so process and outcome agree; with no statement, "math" reads only math
    for style in ("gsm8k", "math", "auto"):
        issue = "The answer is \\boxed{5}. #### 7"
        assert step_rewards(issue, gold="7", style=style)[-1].outcome == check(issue, "7", style).score == 1.0
    text = "So the total is 7."
    assert step_rewards(text, gold="7", style="gsm8k")[-1].outcome == 1.0
    assert step_rewards(text, gold="7", style="math")[-1].outcome == 0.0
    seen = {}
    real = rewards.outcome.answer.check

    def spy(completion, gold, style="auto", timeout=5.0, policy="lenient"):
        seen["timeout"], seen["style"] = timeout, style
        return real(completion, gold, style, timeout=timeout, policy=policy)

    monkeypatch.setattr(rewards.outcome.answer, "check", spy)
    step_rewards(text, "7", "gsm8k", timeout=1.5)
    assert seen == {"timeout": 1.5, "style": "gsm8k"}


def test_old_call_still_works():
    points = step_rewards(SYNTH, "51")  # the pipeline's call: completion, gold
    assert points[-1].outcome == 1.0
    assert step_rewards(SYNTH)[-1].outcome is None  # no gold: no outcome


def test_only_claims_that_feed_the_answer_earn_credit():
    padding = "Step 1: 2 * 3 = 6\nStep 2: 4 * 5 = 20\nStep 3: 7 + 1 = 8\nStep 4: 9 - 2 = 7\n"
    steps = check_steps(padding + "#### 17", "17")
    assert [s.score for s in steps] == [1, 1, 1, 1]
    assert [s.used for s in steps] == [0, 0, 0, 0]  # true but unused: no credit
    # the wrong answer pays the unflagged penalty, and its true padding earns nothing back
    assert step_rewards(padding + "#### 17", gold="18")[-1].reward == -0.5
    old_rule = StepRewardConfig(charge_unflagged=False)
    assert step_rewards(padding + "#### 17", gold="18", config=old_rule)[-1].reward == 0.0
    feeding = "2 * 3 = 6\n6 + 11 = 17\n#### 17"
    assert [s.used for s in check_steps(feeding, "17")] == [1, 1, 0]


def test_used_claims_follow_back_from_the_answer():
    claims = check_claims("1 + 1 = 2") + check_claims("5 + 5 = 10") + check_claims("2 * 3 = 6")
    assert used_claims(claims, [6]) == [True, False, True]
    assert used_claims(claims, [10]) == [False, True, False]
    assert used_claims(claims, []) == [False, False, False]


def test_credit_is_capped():
    chain = "".join(f"{k} + 1 = {k + 1}\n" for k in range(1, 30)) + "#### 30"
    points = step_rewards(chain, gold="31")  # 29 true steps feed the (wrong) answer
    # a wrong answer earns no credit at all, however many true steps feed it
    assert points[-1].value == pytest.approx(-0.5) and points[-1].outcome == 0.0
    points = step_rewards(chain, gold="30")
    assert points[-1].value == pytest.approx(0.3) and points[-1].outcome == 1.0


def _total(text, gold):
    return sum(p.reward for p in step_rewards(text, gold=gold))


def test_a_found_slip_costs_no_more_than_a_hidden_one():
    """The sparse experiment's hole: with a penalty only where a check refutes a claim, a wrong
    chain that writes fewer checkable calculations scored above one whose slip is found, and the
    process arm learned to stop writing them."""
    found = "12 + 5 = 17\n17 * 3 = 52\n#### 52"          # the slip is checkable: refuted at step 2
    hidden = "12 and 5 make 17\nthree times that is 52\n#### 52"  # the same slip, nothing to check
    assert [s.score for s in check_steps(found, "52")] == [1, -1, 0]
    assert [s.score for s in check_steps(hidden, "52")] == [0, 0, 0]
    assert _total(hidden, "51") == pytest.approx(-0.5)
    assert _total(found, "51") >= _total(hidden, "51")
    before = StepRewardConfig(charge_unflagged=False)  # the old rule: silence scored higher
    assert sum(p.reward for p in step_rewards(found, gold="51", config=before)) < \
        sum(p.reward for p in step_rewards(hidden, gold="51", config=before))


def test_a_planted_false_claim_does_not_lower_what_a_wrong_answer_pays():
    """Attack: write a trivially false claim first so the penalty lands there, not at the end."""
    hidden = "12 and 5 make 17\nthree times that is 52\n#### 52"
    planted = "1 + 1 = 3\n" + hidden
    points = step_rewards(planted, gold="51")
    assert points[0].value == -0.5 and points[0].end == len("1 + 1 = 3")  # on the planted step's own tokens
    assert _total(planted, "51") == pytest.approx(_total(hidden, "51")) == pytest.approx(-0.5)


def test_every_wrong_answer_pays_the_penalty_once_at_least():
    two_slips = "2 + 2 = 5\n5 * 3 = 16\n#### 16"
    points = step_rewards(two_slips, gold="12")
    assert [p.value for p in points] == [-0.5, -0.5, 0.0]  # both refuted: no extra charge at the end
    hidden = "12 and 5 make 17\nthree times that is 52\n#### 52"
    doubted = step_rewards(hidden, gold="51", step_probs=[0.9, 0.4, None])  # a PRM doubts step 2 a little
    assert [p.value for p in doubted] == pytest.approx([-0.1, -0.4])  # the final step pays the rest
    right = "2 + 2 = 4\n4 * 3 = 12\n#### 12"
    assert step_rewards(right, gold="12")[-1].reward == pytest.approx(1.2)  # a right answer is never charged
    assert step_rewards("no numbers here\n#### 7")[-1].reward == 0.0     # no outcome known: no charge


def test_issue_false_claims_are_refuted():
    for text in ["<<50%=50>>50", "half of 48 = 30", "2+2=5!", "2 + 2 = 5apples"]:
        assert [s.score for s in check_steps(text)] == [-1], text


def test_registry_steps_reward_reads_the_gold():
    assert REWARDS["steps"](SYNTH, "51") == 1.0
    assert REWARDS["steps"](SYNTH, "52") == 0.0  # a wrong answer earns nothing from its steps
    wrong_step = "12 + 5 = 17\n17 * 3 = 50\n50 + 1 = 51\n#### 51"
    assert REWARDS["steps"](wrong_step, "51") == pytest.approx(2 / 3)
    bound = build_reward("steps", timeout=2.0)
    assert bound(SYNTH, "51") == 1.0 and bound(SYNTH, "50") == 0.0


def test_split_steps_markers_lines_and_math():
    text = "Intro words.\nStep 1: 3 + 4 = 7\nmore of step one\nStep 2: 7 * 2 = 15\n"
    assert [text[a:b] for a, b in split_steps(text)] == [
        "Intro words.", "Step 1: 3 + 4 = 7\nmore of step one", "Step 2: 7 * 2 = 15"]
    text = "so $1 - \\frac{1}{2} -\n\\frac{1}{5} = \\frac{3}{10}$.\nNext line."
    spans = split_steps(text)
    assert len(spans) == 2 and text[spans[0][0]:spans[0][1]].endswith("$.")
    assert [s.score for s in check_steps(text)] == [1, 0]


def test_generated_gsm_synth_solutions_all_check():
    from pipeline.config import DataConfig
    from pipeline.data.synth import generate

    cfg = dataclasses.replace(DataConfig(), synth_train_size=200, synth_test_size=20,
                              synth_ops=["+", "-", "*", "/"])
    train, _ = generate(cfg)
    for rec in train:
        steps = check_steps(rec["solution"], rec["answer"])
        assert all(s.score == 1 for s in steps[:-1]), rec["solution"]
        # every step feeds the answer; identities (`0 + 7 = 7`) feed it without earning credit
        assert all(s.used > 0 or all(trivial(c) for c in s.claims) for s in steps[:-1]), rec["solution"]
        points = step_rewards(rec["solution"], gold=rec["answer"], style="gsm8k")
        assert len(points) == 1 and points[0].outcome == 1.0
        assert format_reward(rec["solution"], "gsm8k") == 1.0


def test_evaluator_is_exact_bounded_and_never_evals():
    assert evaluate("2^10 - (3 * 4) / 6") == 1022
    assert evaluate("25%") * 4 == 1
    assert evaluate("sqrt(9/4)") == evaluate("3/2")
    assert evaluate("binom(9, 3)") == 84 and evaluate("5!") == 120
    assert evaluate("4 sqrt(3) / 6 sqrt(3)") == pytest.approx(2 / 3)  # a coefficient binds first
    assert evaluate("3 x + 2", {"x": 2}) == 8
    for bad in ["__import__('os')", "9^9^9^9", "2^100000", "(" * 100 + "1" + ")" * 100, "1/0",
                "a+1", "31!", "binom(1000, 3)", "(-8)^(1/3)", "1" * 600]:
        with pytest.raises(ParseError):
            evaluate(bad)


HOSTILE = [
    "", "\n\n\n", "<<1+1=>>", "<<=>>", "= = =", "\x00" * 50, "1" * 100_000 + "=1",
    "1+1=2 " * 200_000, "1+1=2\n" * 50_000, "\\frac{" * 5000 + "1" + "}{2}" * 5000 + " = 3",
    "(" * 10_000 + "1" + ")" * 10_000 + " + 1 = 2", "2^{2^{2^{2^{2^{100}}}}} + 1 = 5",
    "(10^{100})! + 1 = 2", "{" * 100_000, "<<1+1=2>>" * 100_000, "\\" * 100_000,
    "$" * 100_000 + "1+1=3", "\\(\\sqrt{\\sqrt{\\sqrt{2}}}\\) = " * 3000, "9^9^9^9^9 = 1",
]


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_text_is_bounded_and_never_raises(text):
    from rewards.claims.judge import claims_of

    t0 = time.monotonic()
    points = step_rewards(text, gold="1")
    assert isinstance(points, list) and all(p.start <= p.end <= len(text) for p in points)
    assert len(claims_of(text)) <= 400  # the unguarded path raises nothing either
    assert time.monotonic() - t0 < 30  # a hang guard, not a speed target


def test_very_long_completions_keep_one_final_point_at_the_end():
    text = "1 + 1 = 2\n" * 1000 + "#### 2"
    points = step_rewards(text, gold="2")
    assert points[-1].end == len(text)
    assert len(split_steps(text)) == 400  # the rest joined the last step
