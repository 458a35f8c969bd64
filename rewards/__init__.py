"""Rule-based reward checkers for math reasoning, usable without the trainer.

    from rewards import is_equiv, score_completion, check
    is_equiv("\\\\dfrac{1}{2}", "0.5")                      # True
    check("... so the answer is \\\\boxed{7}.", "7")       # RewardResult(1.0, '7', '')

Pure functions of (completion, gold) that never raise on model text; the symbolic path runs
in killable worker processes with a hard timeout, so every call works from any thread and
returns in bounded time. Never imports torch; the code reward imports `sandbox` lazily.
"""

from rewards.answers.boxed import last_boxed
from rewards.answers.extract import extract_answer
from rewards.equivalence.equiv import is_equiv
from rewards.outcome.answer import RewardResult, check, format_reward, score_completion
from rewards.outcome.code import code_reward
from rewards.registry import REWARDS, CombinedReward, build_reward, combine, get_reward, score_batch
from rewards.steps.reward import StepReward, expected_calculations, step_rewards


def warmup(workers: int | None = None) -> bool:
    """Start the symbolic worker processes now and wait for them (about a second), so the
    first checks of a run do not pay for it. Optional: checks start them on demand."""
    from rewards.equivalence.symbolic import get_pool

    return get_pool(workers).warm()


__all__ = [
    "REWARDS",
    "CombinedReward",
    "RewardResult",
    "StepReward",
    "build_reward",
    "check",
    "code_reward",
    "combine",
    "extract_answer",
    "format_reward",
    "get_reward",
    "is_equiv",
    "last_boxed",
    "score_batch",
    "score_completion",
    "step_rewards",
    "expected_calculations",
    "warmup",
]
