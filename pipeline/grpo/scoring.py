"""Score episodes with the `rewards` registry: every component, the weighted total, and the
per-step rewards that process supervision needs.

Components run in a thread pool (`reward.workers`); the checkers themselves are hang-proof
(their symbolic path runs in killable worker processes), so a thread is enough here.

Process supervision (DeepSeekMath 4.1.3): the step rewards come from `rewards.step_rewards`
(+1 / -1 / 0 per step, the final step carrying the outcome). Weighted components other than
correctness (the format bonus, say) are added to the final step so both supervision modes see
the same incentives. Character spans become token indices through the tokenizer.
"""

from __future__ import annotations

import importlib
from concurrent.futures import ThreadPoolExecutor

from pipeline.config import RewardConfig
from pipeline.grpo.episodes import Episode, char_to_token_ends

OUTCOME = "correct"


def resolve_reward(name: str, timeout: float = 5.0, sandbox_backend: str = "auto"):
    """A registry name (`rewards.REWARDS`, with the equivalence timeout and sandbox backend
    bound) or a user function as ``package.module:function`` with the registry's signature
    ``fn(completion, gold, style) -> float``."""
    import rewards

    if name in rewards.REWARDS:
        return rewards.build_reward(name, timeout=timeout, sandbox_backend=sandbox_backend)
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"reward.weights: cannot import {name!r}: {e}") from None
    raise ValueError(f"unknown reward {name!r} in reward.weights; valid: {', '.join(rewards.REWARDS)}, "
                     "or a function given as package.module:function")


def score_episodes(episodes: list[Episode], cfg: RewardConfig) -> None:
    """Fill ``rewards`` (each component) and ``reward`` (weighted sum) of every episode.
    Correctness is always scored and logged, with weight 0 when it is not in the weights."""
    weights, style = cfg.weights, cfg.style
    fns = {name: resolve_reward(name, cfg.timeout, cfg.sandbox_backend) for name in {OUTCOME: 0.0, **weights}}

    def score(ep: Episode) -> dict[str, float]:
        return {name: float(fn(ep.completion, ep.gold, style)) for name, fn in fns.items()}

    with ThreadPoolExecutor(max(1, cfg.workers)) as pool:
        for ep, comps in zip(episodes, pool.map(score, episodes)):
            ep.rewards = comps
            ep.reward = sum(weights.get(name, 0.0) * value for name, value in comps.items())


def add_step_rewards(episodes: list[Episode], weights: dict[str, float], tokenizer) -> None:
    """Fill ``step_rewards`` / ``step_ends`` (token indices) for process supervision."""
    import rewards

    for ep in episodes:
        steps = rewards.step_rewards(ep.completion, ep.gold)
        extra = sum(w * ep.rewards.get(name, 0.0) for name, w in weights.items() if name != OUTCOME)
        last = max(len(ep.completion_ids) - 1, 0)
        if not steps or not ep.completion_ids:
            ep.step_rewards, ep.step_ends = [ep.reward], [last]
            continue
        ends = char_to_token_ends(tokenizer, ep.completion_ids, [s.end for s in steps])
        values = [float(s.reward) for s in steps]  # the final step includes the outcome
        values[-1] += extra
        # The last step closes at the last token (EOS included) so no token is left without credit.
        ends[-1] = last
        ep.step_rewards, ep.step_ends = values, [min(e, last) for e in ends]
