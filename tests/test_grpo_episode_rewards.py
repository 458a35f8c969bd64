"""Scoring episodes goes through the rewards package's one combiner (``rewards.CombinedReward``):
registered rewards and user functions by import path, correctness always logged."""

from __future__ import annotations

import pytest

import rewards
from pipeline.config import RewardConfig
from pipeline.grpo.episodes import Episode
from pipeline.grpo.episode_rewards import reward_episodes
from tests.helpers import CharTokenizer, digit_fraction


def _episode(completion: str, gold: str) -> Episode:
    return Episode(problem_id="p", group=0, sample=0, prompt="", completion=completion, prompt_ids=[],
                   completion_ids=[1], finish_reason="stop", gold=gold)


def test_components_and_weighted_total_match_the_combiner():
    eps = [_episode("3 + 4 = 7\n#### 7", "7"), _episode("no idea", "7")]
    cfg = RewardConfig(weights={"tests.helpers:digit_fraction": 2.0, "format": 0.5}, workers=2)
    reward_episodes(eps, cfg)
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


def _scored_group(texts, gold, cfg):
    eps = [Episode(problem_id="p", group=0, sample=k, prompt="", completion=t, prompt_ids=[], completion_ids=[],
                   finish_reason="stop", gold=gold) for k, t in enumerate(texts)]
    reward_episodes(eps, cfg)
    return eps


def _with_ids(eps):
    for ep in eps:
        ep.completion_ids = [ord(c) for c in ep.completion]
    return eps


def test_process_supervision_grades_the_outcome_once_per_completion(monkeypatch):
    """reward_episodes grades each completion once; add_step_rewards reuses that grade (no second
    `check`), with the run's style and timeout."""
    import rewards.outcome.answer
    import rewards.registry
    from pipeline.grpo.episode_rewards import add_step_rewards

    calls = []
    real = rewards.outcome.answer.check

    def counting(completion, gold, style="auto", timeout=5.0, **kw):
        calls.append((completion, style, timeout))
        return real(completion, gold, style, timeout=timeout, **kw)

    monkeypatch.setattr(rewards.outcome.answer, "check", counting)
    monkeypatch.setattr(rewards.registry, "check", counting)
    cfg = RewardConfig(weights={"correct": 1.0}, style="gsm8k", timeout=2.5, workers=1)
    texts = ["a: <<3+4=7>>7\n#### 7", "a: <<3+4=8>>8\n#### 8", "#### 7"]
    eps = _with_ids(_scored_group(texts, "7", cfg))
    add_step_rewards(eps, cfg, CharTokenizer())
    assert sorted(c for c, _, _ in calls) == sorted(texts)  # one grade per completion, in total
    assert {(s, t) for _, s, t in calls} == {("gsm8k", 2.5)}
    assert [ep.step_rewards[-1] for ep in eps] == [1.1, 0.0, 1.0]  # outcome + 0.1 credit for the used 3+4=7
    assert eps[1].step_rewards[0] == -0.5  # the false 3+4=8 step


def test_outcome_and_process_agree_under_the_run_style():
    """A plain "7." with gold 7 under reward.style=gsm8k: correct for the outcome reward, and the
    same outcome in the final step reward (style "math" reads no plain number there and would
    say wrong). The issue's `\\boxed{5}. #### 7` is read as 7 in every style since the answer
    policy became one for all styles (the last statement wins), so it no longer tells them apart."""
    from pipeline.grpo.episode_rewards import add_step_rewards

    text = "So the total is 7."
    # the lenient policy reads a plain last sentence; the strict training default pays only a box
    # or #### line (tested below)
    cfg = RewardConfig(weights={"correct": 1.0}, style="gsm8k", workers=1, policy="lenient")
    (ep,) = _with_ids(_scored_group([text], "7", cfg))
    assert ep.rewards["correct"] == 1.0 and ep.reward == 1.0
    add_step_rewards([ep], cfg, CharTokenizer())
    assert ep.step_rewards == [1.0] and ep.step_ends == [len(text) - 1]
    assert rewards.check(text, "7", "math").score == 0.0  # why the style must be the run's
    assert all(rewards.check("The answer is \\boxed{5}. #### 7", "7", style).score == 1.0
               for style in ("auto", "gsm8k", "math"))


def test_training_default_is_the_strict_policy():
    cfg = RewardConfig(weights={"correct": 1.0}, workers=1)
    assert cfg.policy == "strict"
    eps = _scored_group(["So the total is 7.", "So the total is $\\boxed{7}$.", "#### 7 thousand"], "7", cfg)
    assert [e.rewards["correct"] for e in eps] == [0.0, 1.0, 0.0]
