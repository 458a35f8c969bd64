"""Padding cannot buy process advantage: a wrong answer, however padded, gets a lower advantage
than a right answer in its group, measured through the real DeepSeekMath process-advantage
math (`pipeline.grpo.advantages.process_advantages`).

Tokens here are characters (a character-level tokenizer), so a point's character end is its
token end; the trainer maps the same spans through its tokenizer.
"""

from __future__ import annotations

import random

import pytest
import torch

from pipeline.grpo.advantages import process_advantages
from rewards import step_rewards

GOLD = "51"
RIGHT = [
    "12 + 5 = 17\n17 * 3 = 51\n#### 51",
    "First, 12 + 5 = <<12+5=17>>17 apples.\nThen 17 * 3 = <<17*3=51>>51.\n#### 51",
    "The answer is 51.\n#### 51",
    "Let me think step by step.\nWe need three times the sum.\n" * 5 + "#### 51",
]
WRONG = [
    "12 + 5 = 17\n17 * 3 = 41\n#### 41",
    "#### 50",
    "12 + 5 = 18\n18 * 3 = 54\n#### 54",
]
PADDED_WRONG = [
    # four irrelevant true steps (the example)
    "Step 1: 2 * 3 = 6\nStep 2: 4 * 5 = 20\nStep 3: 7 + 1 = 8\nStep 4: 9 - 2 = 7\n#### 17",
    # thirty copies of a true annotation
    "<<1+1=2>>2\n" * 30 + "#### 2",
    # a long chain of true claims that does feed the (wrong) answer
    "".join(f"{k} + 1 = {k + 1}\n" for k in range(1, 30)) + "#### 30",
    # prose padding
    "Let me think about this very carefully.\n" * 60 + "#### 50",
    # the padding after the right computation, then a wrong answer
    "12 + 5 = 17\n17 * 3 = 51\n" + "2 + 2 = 4\n" * 20 + "#### 52",
    # false claims as padding
    "2 + 2 = 5\n" * 8 + "#### 5",
]


def advantages(texts: list[str]) -> torch.Tensor:
    """[N, T] process advantages of one group, tokens = characters."""
    rewards, ends = [], []
    for text in texts:
        points = step_rewards(text, gold=GOLD)
        rewards.append([p.reward for p in points])
        ends.append([p.end - 1 for p in points[:-1]] + [len(text) - 1])
    return process_advantages(rewards, ends, [len(t) for t in texts], group_size=len(texts))


def assert_right_above_wrong(texts: list[str]) -> None:
    adv = advantages(texts)
    right = [i for i, t in enumerate(texts) if t in RIGHT]
    wrong = [i for i, t in enumerate(texts) if t not in RIGHT]
    for r in right:
        low = adv[r, :len(texts[r])].min()
        for w in wrong:
            high = adv[w, :len(texts[w])].max()
            assert high < low, (texts[w][:40], float(high), texts[r][:40], float(low))


@pytest.mark.parametrize("padded", PADDED_WRONG, ids=range(len(PADDED_WRONG)))
def test_padded_wrong_answer_stays_below_a_right_one(padded):
    for right in RIGHT:
        assert_right_above_wrong([right, padded])
        assert_right_above_wrong([right, padded, WRONG[0], WRONG[2]])


@pytest.mark.parametrize("padded", PADDED_WRONG[:-1], ids=range(len(PADDED_WRONG) - 1))
def test_true_padding_gets_no_positive_advantage_against_a_right_answer(padded):
    adv = advantages([RIGHT[0], padded])
    assert (adv[1, :len(padded)] <= 0).all()  # was positive on 100% of the tokens


def test_false_padding_is_punished_where_it_stands():
    """False claims pull the group mean down, so the words after the last one may sit above
    it; the tokens leading to them collect every penalty after them."""
    padded = PADDED_WRONG[-1]
    adv = advantages([RIGHT[0], padded])
    first_false = len("2 + 2 = 5")
    assert (adv[1, :first_false] < -2).all()
    assert bool((adv[1, 1:len(padded)] >= adv[1, :len(padded) - 1]).all())  # penalties behind
    assert adv[1, :len(padded)].max() < adv[0, :len(RIGHT[0])].min()


def test_random_groups_of_padded_and_plain_completions():
    rng = random.Random(0)
    pool = RIGHT + WRONG + PADDED_WRONG
    checked = 0
    for _ in range(300):
        group = [rng.choice(pool) for _ in range(rng.randint(2, 8))]
        if not any(t in RIGHT for t in group) or all(t in RIGHT for t in group):
            continue
        assert_right_above_wrong(group)
        checked += 1
    assert checked > 150


def test_more_padding_does_not_raise_a_wrong_answers_advantage():
    """The final point of a wrong answer is capped, and text without evidence adds no point,
    so the first-token advantage of a wrong answer against a fixed right one cannot grow
    past the cap however long the padding chain."""
    firsts = []
    for n in (1, 3, 10, 30):
        chain = "".join(f"{k} + 1 = {k + 1}\n" for k in range(1, n + 1)) + f"#### {n + 1}"
        firsts.append(float(advantages([RIGHT[0], chain])[1, 0]))
    assert max(firsts) < 0
    assert firsts[2] == pytest.approx(firsts[3])  # capped: 10 or 30 padded steps alike
