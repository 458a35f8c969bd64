"""Truncated or masked importance sampling (TIS / MIS) for rollout/trainer log-probability mismatch.

The rollout engine (vLLM) samples from its own numerics (fused kernels, other reduction
order, maybe another dtype), so its log-probabilities of the sampled tokens differ from the
trainer's even with identical weights. The completions are samples of the *engine's* policy;
the GRPO ratio pi_theta / pi_old assumes they came from the trainer's pi_old. Following
"Your efficient RL framework secretly brings you off-policy RL training" (Yao et al., 2025),
each token's loss is weighted by the capped ratio

    w_t = min(C, exp(trainer_old_logp_t - engine_logp_t))

which is detached (a constant weight, no gradient). C = ``rollout.tis_cap``; 0 turns it off.
``rollout.is_correction`` (CORRECTIONS) chooses what happens past C: ``tis`` truncates the weight
to C, ``mis`` (masked importance sampling, Liu, Li et al. 2025, "When Speed Kills Stability:
Demystifying RL Collapse from the Training-Inference Mismatch") sets it to 0, so those tokens or
sequences give no gradient at all. ``rollout.is_level`` (IS_LEVELS): ``token`` weighs each
token by its own ratio; ``sequence`` gives every token of a completion the completion's ratio
prod_t exp(trainer - engine), the ratio of the sequence probabilities (unbiased, higher variance;
TRL 1.16's sequence_truncate / sequence_mask). MIS at sequence level drops whole completions.
Both log-probs must describe the same distribution: the trainer's apply the temperature only, so
the config refuses TIS with top-p < 1 or top-k > 0 (``config/checks.py``, ``check_rollout``).
The mismatch statistics are worth logging every step: a growing mean |delta| means the engine
and the trainer disagree (a failed weight sync shows up here first).
"""

from __future__ import annotations

import torch

__all__ = ["tis_weights", "pad_logprobs", "CORRECTIONS", "IS_LEVELS"]

# ratio, cap -> weight (tests/test_grpo_registries.py: keyed by the schema's rollout.is_correction names)
CORRECTIONS = {
    "tis": lambda ratio, cap: torch.clamp(ratio, max=cap),
    "mis": lambda ratio, cap: torch.where(ratio > cap, torch.zeros_like(ratio), ratio),
}
IS_LEVELS = ("token", "sequence")


@torch.no_grad()
def tis_weights(trainer_logp: torch.Tensor, engine_logp: torch.Tensor, mask: torch.Tensor,
                cap: float, correction: str = "tis", level: str = "token") -> tuple[torch.Tensor, dict[str, float]]:
    """Per-token truncated (``tis``) or masked (``mis``) importance weights, token or sequence level,
    and mismatch statistics.

    trainer_logp, engine_logp, mask: [N, T] (mask 1 on completion tokens, 0 on padding).
    Returns weights [N, T] (0 where masked) and stats over unmasked tokens, 0-dim tensors on the
    inputs' device (the caller reads them):
    ``tis/mean_abs_delta``, ``tis/max_abs_delta`` (|trainer - engine| logp),
    ``tis/mean_weight`` and ``tis/clipped_frac`` (fraction of tokens where the cap bit: truncated
    or masked; at sequence level every token of a completion past the cap).
    """
    if cap <= 0:
        raise ValueError(f"tis cap must be > 0, got {cap}")
    if correction not in CORRECTIONS or level not in IS_LEVELS:
        raise ValueError(f"unknown importance correction {correction!r} / level {level!r}; expected one of "
                         f"{tuple(CORRECTIONS)} / {IS_LEVELS}")
    m = mask.to(trainer_logp.dtype)  # [N, T]
    delta = (trainer_logp.detach() - engine_logp.to(trainer_logp.dtype)) * m  # [N, T]
    log_ratio = delta if level == "token" else delta.sum(dim=1, keepdim=True).expand_as(delta)
    ratio = torch.exp(log_ratio)  # [N, T]; exp(0) = 1 on padding, masked below
    weights = CORRECTIONS[correction](ratio, cap) * m  # [N, T]
    n = m.sum().clamp(min=1.0)
    abs_delta = delta.abs()
    stats = {
        "tis/mean_abs_delta": abs_delta.sum() / n,
        "tis/max_abs_delta": abs_delta.max() if abs_delta.numel() else abs_delta.new_zeros(()),
        "tis/mean_weight": weights.sum() / n,
        "tis/clipped_frac": ((ratio > cap).to(m.dtype) * m).sum() / n,
    }
    return weights, stats


def pad_logprobs(rows: list[list[float]], width: int, fill: float = 0.0,
                 device: torch.device | str | None = None) -> torch.Tensor:
    """Right-pad per-completion engine logprobs (``Sample.logprobs``) into a [N, width] tensor on
    ``device`` (built on the host, then one copy)."""
    out = torch.full((len(rows), width), fill, dtype=torch.float32)
    for i, row in enumerate(rows):
        row = row[:width]
        out[i, :len(row)] = torch.tensor(row, dtype=torch.float32)
    return out if device is None else out.to(device)
