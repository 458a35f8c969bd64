"""The charge on calculations a wrong answer leaves out (`rewards.steps.reward`, points 3 and 5):
with the reference solution's calculation count, a step left out costs a wrong answer what a
refuted step does, so writing fewer checkable calculations no longer pays (the hole the sparse
outcome-vs-process experiment found at 4x the compute, docs/process_supervision.md). Measured
through the real DeepSeekMath process-advantage math; tokens are characters."""

from __future__ import annotations

import random

import pytest
import torch

from pipeline.config import DataConfig, RewardConfig
from pipeline.data.synth import generate, num_steps
from pipeline.grpo.advantages import process_advantages
from pipeline.grpo.episode_rewards import add_step_rewards, reward_episodes
from pipeline.grpo.episodes import Episode
from rewards import expected_calculations, step_rewards
from rewards.steps.reward import StepRewardConfig
from tests.helpers import CharTokenizer

GOLD = "51"
REFERENCE = "gets: <<12+5=17>>17\ntimes: <<17*3=51>>51\n#### 51"
FOUND = "12 + 5 = 17\n17 * 3 = 52\n#### 52"                 # the slip is written: refuted at step 2
SILENT = "12 and 5 make 17\nthree times that is 52\n#### 52"  # the same slip, nothing to check
SHORT = "17 * 3 = 52\n#### 52"                              # one of the two calculations left out
RIGHT = "12 + 5 = 17\n17 * 3 = 51\n#### 51"
PENALTY = StepRewardConfig().penalty


def _points(text, expected=2, gold=GOLD, **kw):
    return step_rewards(text, gold=gold, expected=expected, **kw)


def _total(text, expected=2, **kw):
    return sum(p.reward for p in _points(text, expected, **kw))


def _advantages(texts, expected=2, **kw):
    rewards, ends = [], []
    for text in texts:
        points = _points(text, expected, **kw)
        rewards.append([p.reward for p in points])
        ends.append([p.end - 1 for p in points])
    return process_advantages(rewards, ends, [len(t) for t in texts], group_size=len(texts))


def test_the_reference_solution_gives_the_calculation_count():
    assert expected_calculations(REFERENCE, GOLD) == 2
    train, _ = generate(DataConfig(synth_train_size=200, synth_test_size=20, synth_min_steps=1, synth_max_steps=5,
                                   synth_distractors=2))
    gaps = [num_steps(r) - expected_calculations(r["solution"], r["answer"]) for r in train]
    # a step that restates a number (<<0+11=11>>, <<1*2=2>>) earns no credit, so it is not expected either
    assert min(gaps) == 0 and sum(g == 0 for g in gaps) > 0.8 * len(gaps)
    assert expected_calculations("gets: <<0+11=11>>11\ntimes: <<11*3=33>>33\n#### 33", "33") == 1
    assert expected_calculations("", GOLD) == expected_calculations(None, GOLD) == 0
    assert expected_calculations("The answer is 51.", GOLD) == 0  # nothing the checks can read


def test_a_left_out_calculation_costs_what_a_refuted_one_does():
    two_slips = "12 + 5 = 18\n18 * 3 = 55\n#### 55"
    assert _total(FOUND) == pytest.approx(-PENALTY)  # both written, one refuted
    assert _total(SHORT) == pytest.approx(-2 * PENALTY)  # one refuted, one left out
    assert _total(SILENT) == pytest.approx(_total(two_slips)) == pytest.approx(-2 * PENALTY)
    assert _total(SILENT, expected=4) == pytest.approx(-4 * PENALTY)  # a longer problem: more to leave out
    before = StepRewardConfig(charge_missing=False)  # the rule before: silence paid once, two found slips twice
    assert _total(SILENT, config=before) > _total(two_slips, config=before)
    assert _total(SILENT, expected=None) == _total(SILENT, config=before) == pytest.approx(-PENALTY)


def test_a_right_answer_is_never_charged_for_what_it_left_out():
    assert _total("#### 51", expected=5) == pytest.approx(1.0)
    assert _total(RIGHT, expected=5) == pytest.approx(1.2)


def test_the_found_slip_is_at_least_the_silent_one_at_every_token():
    """Same group, same length of text before the answer: the written, refuted chain is charged
    where its slip is, the silent one at the end, so no token of the found one is worse off."""
    adv = _advantages([FOUND, SILENT, RIGHT])
    n = min(len(FOUND), len(SILENT))
    assert bool((adv[0, :n] >= adv[1, :n] - 1e-6).all())
    assert float(adv[0, len(FOUND) - 1]) > float(adv[1, len(SILENT) - 1])  # after the slip: strictly better
    old = _advantages([FOUND, SILENT, RIGHT], config=StepRewardConfig(charge_missing=False))
    assert float(old[0, 0]) < float(old[1, 0])  # before: the silent one started higher


def test_an_absurd_expected_count_is_bounded():
    from rewards.steps.reward import MAX_STEPS

    points = _points(SILENT, expected=10**9)  # a caller's mistake must not build a billion points
    assert len(points) == MAX_STEPS and min(p.value for p in points) >= -PENALTY - 1e-9


def test_cramming_false_claims_into_one_step_buys_nothing():
    """Written steps are counted by step, not by claim: five false claims on one line are one
    refuted step, and the four calculations it did not write are still owed."""
    crammed = "1 + 1 = 3, 2 + 2 = 5, 3 + 3 = 7, 4 + 4 = 9, 5 + 5 = 11\n#### 52"
    assert _total(crammed, expected=5) == pytest.approx(-5 * PENALTY)
    assert _total(SILENT, expected=5) == pytest.approx(-5 * PENALTY)


def test_no_point_is_lower_than_a_refuted_step():
    """Charges go in points of at most `penalty` (a false step's value stays the group's lowest,
    which keeps padding from raising a wrong answer's advantage, tests/test_step_padding.py); a
    wrong answer owes max(penalty, charged + penalty x missing) in all."""
    rng = random.Random(0)
    lines = ["12 + 5 = 17", "17 * 3 = 52", "2 + 2 = 5", "so that is more", "<<17*3=51>>51", "7 - 1 = 6"]
    for _ in range(300):
        text = "\n".join(rng.choice(lines) for _ in range(rng.randint(0, 6))) + f"\n#### {rng.choice(['51', '52'])}"
        expected = rng.randint(0, 6)
        points = _points(text, expected, step_probs=None)
        assert min(p.value for p in points) >= -PENALTY - 1e-9, text
        if points[-1].outcome == 0.0:
            steps = [p for p in points if p.score != 0 or p is points[-1]]
            refuted = sum(p.score < 0 for p in steps)
            assert -_total(text, expected) >= max(PENALTY, refuted * PENALTY) - 1e-9
            assert -_total(text, expected) <= max(PENALTY, expected * PENALTY, refuted * PENALTY) + 1e-9


def test_the_padding_guarantee_holds_with_the_charge():
    """A right answer's advantage stays above every token of a wrong one, charged or not."""
    chain = "".join(f"{k} + 1 = {k + 1}\n" for k in range(1, 30)) + "#### 30"
    wrong = [SILENT, FOUND, SHORT, "2 + 2 = 5\n" * 8 + "#### 5", chain]
    for w in wrong:
        for expected in (0, 2, 5):
            adv = _advantages([RIGHT, w], expected)
            assert float(adv[1, :len(w)].max()) < float(adv[0, :len(RIGHT)].min()), (w[:30], expected)


def _episodes(texts, solution):
    eps = [Episode(problem_id="p", group=0, sample=k, prompt="", completion=t, prompt_ids=[],
                   completion_ids=[ord(c) for c in t] + [0], finish_reason="stop", gold=GOLD, solution=solution)
           for k, t in enumerate(texts)]
    return eps


@pytest.mark.parametrize("charge", [True, False])
def test_the_trainer_reads_the_reference_solution(charge):
    """add_step_rewards counts the episode's reference solution and puts every charge at the
    last token (EOS included), with `reward.charge_missing_steps` switching it off."""
    cfg = RewardConfig(weights={"correct": 1.0}, style="gsm8k", workers=1, charge_missing_steps=charge)
    eps = _episodes([SILENT, FOUND], REFERENCE)
    reward_episodes(eps, cfg)
    add_step_rewards(eps, cfg, CharTokenizer())
    last = len(SILENT)  # the EOS token after the text
    if charge:
        assert eps[0].step_rewards == pytest.approx([-PENALTY, -PENALTY]) and eps[0].step_ends == [last, last]
        assert eps[1].step_rewards == pytest.approx([-PENALTY, 0.0])  # FOUND wrote both: its slip is all it pays
    else:
        assert eps[0].step_rewards == pytest.approx([-PENALTY]) and eps[0].step_ends == [last]
    adv = process_advantages([e.step_rewards for e in eps], [e.step_ends for e in eps],
                             [len(e.completion_ids) for e in eps], group_size=2)
    assert torch.isfinite(adv).all()


def test_fake_work_pays_what_an_honest_slip_does_and_never_less_than_the_penalty():
    """Known limit, kept as a test: a written step is one the checks refute or credit, and
    credited steps need not start from the question's numbers, so a wrong answer restated as
    true calculations counts as written. It pays `penalty` once, as every wrong answer did
    before the charge, the same as an honest chain with one found slip and less than silence;
    it never pays less than `penalty`, so it never comes near a right answer."""
    restated = "26 + 26 = 52\n50 + 2 = 52\n#### 52"
    assert _total(restated) == pytest.approx(_total(FOUND)) == pytest.approx(-PENALTY)
    assert _total(restated) > _total(SILENT)
    many = "".join(f"{52 - k} + {k} = 52\n" for k in range(1, 30)) + "#### 52"
    assert _total(many, expected=5) == pytest.approx(-PENALTY)
