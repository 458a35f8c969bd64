"""Scoring episodes goes through the rewards package's one combiner (``rewards.CombinedReward``):
registered rewards and user functions by import path, correctness always logged."""

from __future__ import annotations

import pytest

import rewards
from pipeline.config import RewardConfig
from pipeline.grpo.episodes import Episode
from pipeline.grpo.scoring import score_episodes
from tests.helpers import digit_fraction


def _episode(completion: str, gold: str) -> Episode:
    return Episode(problem_id="p", group=0, sample=0, prompt="", completion=completion, prompt_ids=[],
                   completion_ids=[1], finish_reason="stop", gold=gold)


def test_components_and_weighted_total_match_the_combiner():
    eps = [_episode("3 + 4 = 7\n#### 7", "7"), _episode("no idea", "7")]
    cfg = RewardConfig(weights={"tests.helpers:digit_fraction": 2.0, "format": 0.5}, workers=2)
    score_episodes(eps, cfg)
    for ep in eps:
        assert list(ep.rewards) == ["correct", "tests.helpers:digit_fraction", "format"]  # correct always logged
        assert ep.rewards["tests.helpers:digit_fraction"] == digit_fraction(ep.completion, ep.gold)
        assert ep.reward == 2.0 * ep.rewards["tests.helpers:digit_fraction"] + 0.5 * ep.rewards["format"]
    assert eps[0].rewards["correct"] == 1.0 and eps[1].rewards["correct"] == 0.0
    combined = rewards.CombinedReward(cfg.weights, always=("correct",))
    assert combined(eps[0].completion, "7") == eps[0].reward


def test_a_user_reward_that_does_not_import_names_itself():
    with pytest.raises(ValueError, match="tests.helpers:nope"):
        rewards.CombinedReward({"tests.helpers:nope": 1.0})
