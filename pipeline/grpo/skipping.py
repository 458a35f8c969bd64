"""Which rows of an update can move the weights (pure tensor logic, no model).

With the KL term out of the loss (beta = 0, or ``train.kl_in=reward``), a completion's per-token
loss is -w * min(ratio * A, clip(ratio) * A): with every advantage of its completion tokens 0
(an outcome group whose rewards are all equal, or a fully masked row) both the loss and its
gradient are exactly 0 whatever the ratio. Forwarding and back-propagating such rows only adds
zeros, so the trainer leaves them out of the micro-batches while every loss keeps the
normalisation of the full mini-batch (its rows and tokens are counted before the rows are
dropped; ``losses.policy_loss``'s ``num_rows`` / ``num_tokens``), which gives the same gradient.

Exact only where the normalisation does not depend on which rows share a micro-batch: ``grpo``,
``dapo`` and ``dr_grpo``; ``bnpo`` divides by each micro-batch's own token count, so nothing is
skipped under it. Nor under FSDP, where every rank must run the same forwards (each is a collective).
A skipped row's forward is not run, so a non-finite value there would no longer stop the run.
"""

from __future__ import annotations

import torch

# Aggregations whose per-row weight is fixed by the whole mini-batch, not by the micro-batch.
EXACT_LOSS_TYPES = ("grpo", "dapo", "dr_grpo")


def can_skip(loss_type: str, kl_in_loss: bool, sharded: bool) -> bool:
    """Whether dropping zero-advantage rows leaves this configuration's gradient unchanged."""
    return loss_type in EXACT_LOSS_TYPES and not kl_in_loss and not sharded


def teaching_rows(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[N] bool: rows with a non-zero advantage on at least one loss token. ``advantages``: [N]
    (outcome) or [N, T] (process); ``mask``: [N, T] loss mask."""
    m = mask.to(torch.bool)
    adv = advantages.unsqueeze(1).expand_as(m) if advantages.dim() == 1 else advantages
    return ((adv != 0) & m).any(dim=1)
