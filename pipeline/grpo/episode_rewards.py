"""Reward episodes with the `rewards` package: every component and the weighted total
(``rewards.CombinedReward``), and the per-step rewards that process supervision needs.

Components run in a thread pool (`reward.workers`); the checkers themselves are hang-proof
(their symbolic path runs in killable worker processes), so a thread is enough here.

Process supervision (DeepSeekMath 4.1.3): the step rewards come from `rewards.step_rewards`
(a penalty at each step judged wrong, the final step carrying the outcome, which is reused from
the outcome reward rather than graded twice, and on a wrong answer a charge for each calculation
of the reference solution it left out, `reward.charge_missing_steps`), the judgement from the
rule checks, or from a process reward model (`reward.prm`) combined with them. Weighted
components other than correctness (the format bonus, say) are added to the final step so both
supervision modes see the same incentives. Character spans become token indices through the tokenizer.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import rewards
from pipeline.config import RewardConfig
from pipeline.grpo.episodes import Episode, char_to_token_ends
from rewards.steps.mix import StepMix
from rewards.steps.reward import StepRewardConfig, split_steps

OUTCOME = "correct"


def reward_episodes(episodes: list[Episode], cfg: RewardConfig) -> None:
    """Fill ``rewards`` (each component) and ``reward`` (weighted sum) of every episode, with the
    rewards package's combiner. Correctness is always scored and logged, with weight 0 when it
    is not in the weights. ``reward.truncated_zero``: the weighted sum is 0 for a completion that
    hit max_new_tokens (its components are still logged as scored)."""
    combined = rewards.CombinedReward(cfg.weights, timeout=cfg.timeout, sandbox_backend=cfg.sandbox_backend,
                                      always=(OUTCOME,), policy=cfg.policy)

    def score(ep: Episode) -> dict[str, float]:
        return combined.components(ep.completion, ep.gold, cfg.style)

    with ThreadPoolExecutor(max(1, cfg.workers)) as pool:
        for ep, comps in zip(episodes, pool.map(score, episodes)):
            ep.rewards = comps
            # Oat's Dr. GRPO recipe: a completion cut at max_new_tokens earns nothing, whatever it contains
            truncated = cfg.truncated_zero and ep.finish_reason == "length"
            ep.reward = 0.0 if truncated else combined.total(comps)


def add_step_rewards(episodes: list[Episode], cfg: RewardConfig, tokenizer, prm=None) -> None:
    """Fill ``step_rewards`` / ``step_ends`` (token indices) for process supervision. The outcome is
    the one ``reward_episodes`` computed (``ep.rewards["correct"]``, graded with ``reward.style`` and
    ``reward.timeout``), reused, not graded again. With ``prm`` (a ``pipeline.prm.PRMScorer``), every
    completion's steps (``rewards.steps.reward.split_steps``) are scored in batches and combined with the
    rule checks as ``reward.prm_mix`` says (``rewards.steps.mix``)."""
    probs = prm_step_probabilities(episodes, prm) if prm is not None else [None] * len(episodes)
    mix = StepMix(cfg.prm_mix, cfg.prm_rule_weight, cfg.prm_threshold)
    step_cfg = StepRewardConfig(charge_missing=cfg.charge_missing_steps)
    expected: dict[tuple[str, str], int] = {}  # a group shares its reference solution: judge it once
    for ep, p in zip(episodes, probs):
        key = (ep.solution, ep.gold)
        if key not in expected:
            expected[key] = rewards.expected_calculations(ep.solution, ep.gold)
        steps = rewards.step_rewards(ep.completion, ep.gold, cfg.style, timeout=cfg.timeout,
                                     outcome=ep.rewards.get(OUTCOME), step_probs=p, mix=mix,
                                     config=step_cfg, expected=expected[key])
        extra = sum(w * ep.rewards.get(name, 0.0) for name, w in cfg.weights.items() if name != OUTCOME)
        last = max(len(ep.completion_ids) - 1, 0)
        if not steps or not ep.completion_ids:
            ep.step_rewards, ep.step_ends = [ep.reward], [last]
            continue
        ends = char_to_token_ends(tokenizer, ep.completion_ids, [s.end for s in steps])
        values = [float(s.reward) for s in steps]  # the final step includes the outcome
        values[-1] += extra
        # The last step closes at the last token (EOS included) so no token is left without credit;
        # so do the charges placed with it (they share its span).
        ends = [last if s.end == steps[-1].end else e for s, e in zip(steps, ends)]
        ep.step_rewards, ep.step_ends = values, [min(e, last) for e in ends]


def prm_step_probabilities(episodes: list[Episode], prm) -> list[list[float | None]]:
    """The PRM's P(step good) for each step of each completion, all completions in batches."""
    items = [(ep.question, [ep.completion[a:b] for a, b in split_steps(ep.completion)]) for ep in episodes]
    return prm.probabilities(items)
