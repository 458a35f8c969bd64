"""GRPO: group-relative advantages and the clipped policy loss (pure tensor math), and the trainer.

`advantages` and `losses` import only torch; the training loop lives in `pipeline.grpo.trainer`
and is imported from there explicitly so that the math stays cheap to import.
"""
from pipeline.grpo.advantages import outcome_advantages, process_advantages, reward_with_kl
from pipeline.grpo.losses import kl_divergence, policy_loss

__all__ = [
    "outcome_advantages",
    "process_advantages",
    "reward_with_kl",
    "policy_loss",
    "kl_divergence",
]
