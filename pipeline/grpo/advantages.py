"""Group-relative advantages for GRPO: outcome and process supervision (pure tensor math).

Rows are completions; consecutive runs of `group_size` rows answer the same question.

- `outcome_advantages`: one scalar per completion, A_i = (r_i - mean(group)) / (std + eps)
  (or batch std, or no division: Dr. GRPO).
- `process_advantages`: DeepSeekMath sec. 4.1.3 process supervision; each step reward is
  normalised over all step rewards of the group, and token t gets the sum of the normalised
  rewards of the steps that end at or after t.
- `normalised_advantages`: the outcome advantage by `norm` (ADV_NORMS): `group` is
  `outcome_advantages` of the weighted reward; `per_reward` (GDPO, the seed chapter's
  "Group reward-Decoupled normalisation", Liu et al. 2026, arXiv:2601.05242) normalises each
  reward component in its group and then takes the weighted sum, so a format bonus no longer
  shifts the advantages of a group whose correctness is all-equal (the paper and TRL then also
  standardise the sum over the batch; not done here, docs/grpo_math.md); `rank` (GOPO) replaces the
  rewards by their rank in the group mapped linearly onto [-1, 1] (ties share their mean rank),
  which no monotone transform of the rewards changes.
- `reward_with_kl`: the PPO-style alternative to a KL loss term, a detached KL penalty
  subtracted from the scalar reward before advantages are computed (`train.kl_in="reward"`).

Device: results are on the inputs' device (``process_advantages`` takes lists and builds on
``device``); nothing is read back to the host except the finiteness check of the rewards, which
is skipped on ``meta`` (shapes only, no values).

Conventions (both documented in docs/grpo_math.md):
- std is the unbiased (Bessel-corrected) std, torch's default.
- A group whose rewards are all equal (std zero) or that has fewer than two values (std
  undefined) gets advantage exactly 0 on every row/token: no learning signal, and no
  1e-17 / (1e-17 + eps) noise either.
"""
from __future__ import annotations

import math

import torch

__all__ = ["outcome_advantages", "process_advantages", "reward_with_kl", "normalised_advantages", "ADV_NORMS",
           "SCALES"]

SCALES = ("group", "batch", "none")  # train.adv_scale (tests/test_grpo_registries.py: the schema's names)


def outcome_advantages(
    rewards: torch.Tensor, group_size: int, scale: str = "group", eps: float = 1e-4
) -> torch.Tensor:
    """Outcome-supervised GRPO advantages, one per completion.

    rewards: [N] with N = groups x group_size, consecutive rows forming a group.
    scale: "group" divides by the group's std + eps, "batch" by the whole batch's std + eps,
    "none" (Dr. GRPO) only subtracts the group mean. Returns [N] in the rewards' float dtype.
    """
    if scale not in SCALES:
        raise ValueError(f"unknown scale {scale!r}; expected one of {SCALES}")
    rewards = _check_rewards(rewards, group_size)
    if group_size < 2:  # std undefined in every group
        return torch.zeros_like(rewards)
    grouped = rewards.view(-1, group_size)  # [B, G]
    centred = grouped - grouped.mean(dim=1, keepdim=True)  # [B, G]
    # All-equal groups: exactly 0 (the float mean of equal values need not equal them).
    flat = grouped.amax(dim=1, keepdim=True) == grouped.amin(dim=1, keepdim=True)  # [B, 1]
    if scale == "group":
        adv = centred / (grouped.std(dim=1, keepdim=True) + eps)
    elif scale == "batch":
        adv = centred / (rewards.std() + eps)
    else:
        adv = centred
    return torch.where(flat, torch.zeros_like(adv), adv).reshape(-1)  # [N]


def per_reward_advantages(components: torch.Tensor, weights, group_size: int, scale: str = "group",
                          eps: float = 1e-4) -> torch.Tensor:
    """GDPO: sum_k w_k * outcome_advantages(components[:, k]); components [N, K], weights K floats.

    With one component of weight 1 this is exactly `outcome_advantages` of it (GRPO). Returns [N].
    """
    if components.dim() != 2 or components.shape[1] != len(weights):
        raise ValueError(f"components must be [N, {len(weights)}] (one column per weight), got "
                         f"{tuple(components.shape)}")
    columns = [w * outcome_advantages(components[:, k], group_size, scale, eps) for k, w in enumerate(weights)]
    return torch.stack(columns).sum(dim=0) if columns else torch.zeros(components.shape[0])


def rank_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """GOPO: A_i = 2 (rank_i - 1) / (G - 1) - 1 with rank_i in 1..G the rank of r_i in its group
    (1 = worst; tied rewards share the mean of their ranks, so an all-equal group gets exactly 0).
    Returns [N] in the rewards' float dtype."""
    rewards = _check_rewards(rewards, group_size)
    if group_size < 2:
        return torch.zeros_like(rewards)
    grouped = rewards.view(-1, group_size)  # [B, G]
    below = (grouped.unsqueeze(1) < grouped.unsqueeze(2)).sum(dim=2)  # [B, G]: rewards below r_i
    tied = (grouped.unsqueeze(1) == grouped.unsqueeze(2)).sum(dim=2)  # [B, G]: r_i itself included
    rank = below.to(rewards.dtype) + (tied.to(rewards.dtype) + 1) / 2
    return (2 * (rank - 1) / (group_size - 1) - 1).reshape(-1)


def _group_norm(rewards, components, weights, group_size, scale, eps):
    return outcome_advantages(rewards, group_size, scale, eps)


def _per_reward_norm(rewards, components, weights, group_size, scale, eps):
    if components is None:
        raise ValueError("norm='per_reward' needs the reward components ([N, K]) and their weights")
    return per_reward_advantages(components, weights, group_size, scale, eps).to(rewards.dtype)


def _rank_norm(rewards, components, weights, group_size, scale, eps):
    return rank_advantages(rewards, group_size)


ADV_NORMS = {"group": _group_norm, "per_reward": _per_reward_norm, "rank": _rank_norm}


def normalised_advantages(norm: str, rewards: torch.Tensor, group_size: int, *, scale: str = "group",
                          eps: float = 1e-4, components: torch.Tensor | None = None,
                          weights=()) -> torch.Tensor:
    """Outcome advantages [N] by ADV_NORMS[norm]: rewards [N] (the weighted sum); components
    [N, K] and weights (K floats) are what `per_reward` normalises; `rank` ignores scale and eps."""
    if norm not in ADV_NORMS:
        raise ValueError(f"unknown advantage normalisation {norm!r}; expected one of {tuple(ADV_NORMS)}")
    return ADV_NORMS[norm](rewards, components, weights, group_size, scale, eps)


def process_advantages(
    step_rewards: list[list[float]],
    step_ends: list[list[int]],
    lengths: list[int],
    group_size: int,
    eps: float = 1e-4,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Process-supervised GRPO advantages (DeepSeekMath sec. 4.1.3), one per token.

    step_rewards[i][j]: reward of step j of completion i; step_ends[i][j]: 0-based index of
    that step's last completion token (must lie in [0, lengths[i])); lengths[i]: completion
    length in tokens. All step rewards of a group are normalised together,
    rbar = (r - mean(R)) / (std(R) + eps) with R the group's step rewards; then
    A[i, t] = sum_j [step_ends[i][j] >= t] * rbar[i][j] for t < lengths[i], 0 past the end.
    A group whose step rewards are all equal or number fewer than two gets rbar = 0.
    Returns [N, T] float tensor (default dtype) on ``device`` (default: torch's default device),
    T = max(lengths).
    """
    n = len(lengths)
    if not (len(step_rewards) == len(step_ends) == n):
        raise ValueError("step_rewards, step_ends and lengths must have one entry per completion")
    if group_size < 1 or n % group_size:
        raise ValueError(f"{n} completions do not split into groups of {group_size}")
    rows, ends, values = _flatten_steps(step_rewards, step_ends, lengths, device)
    rbar = _normalise_by_group(values, rows // group_size, n // group_size, eps)  # [S]
    width = max(lengths, default=0)
    scattered = torch.zeros(n, width + 1, dtype=rbar.dtype, device=rbar.device)  # [N, T + 1]
    scattered.index_put_((rows, ends), rbar, accumulate=True)
    # Reverse cumulative sum: position t collects every step ending at t or later.
    adv = scattered.flip(1).cumsum(1).flip(1)[:, :width]  # [N, T]
    valid = torch.arange(width, device=rbar.device) < torch.tensor(lengths, device=rbar.device).unsqueeze(1)  # [N, T]
    return torch.where(valid, adv, torch.zeros_like(adv))


def reward_with_kl(
    rewards: torch.Tensor,
    logp: torch.Tensor,
    ref_logp: torch.Tensor,
    mask: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """KL placed in the reward (PPO style): r_i - beta * sum_t m[i,t] * (logp - ref_logp), detached.

    rewards: [N]; logp, ref_logp, mask: [N, T]. `logp` should be the log-probs of the policy
    that sampled the completions (pi_old), so the penalty is a constant of the update: this
    is the placement Liu et al. 2025 (arXiv:2510.01555) show is unbiased when several updates
    (mu > 1) reuse a batch.
    The per-token estimator is k1 = logp - ref_logp, whose sum over a sampled sequence is an
    unbiased estimate of the sequence KL(pi_old || pi_ref). Feed the result to
    `outcome_advantages`. Returns [N], no gradient.
    """
    with torch.no_grad():
        r = rewards if rewards.is_floating_point() else rewards.float()
        k1 = torch.where(mask.to(torch.bool), logp.to(r.dtype) - ref_logp.to(r.dtype), 0.0)  # [N, T]
        return r - beta * k1.sum(dim=1)  # [N]


def _check_rewards(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [N], got shape {tuple(rewards.shape)}")
    if group_size < 1 or rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    if not rewards.is_floating_point():
        rewards = rewards.float()
    if not rewards.is_meta and not torch.isfinite(rewards).all():  # meta: shapes only, nothing to read
        raise ValueError("rewards contain NaN or inf; reward functions must return finite floats")
    return rewards


def _flatten_steps(step_rewards, step_ends, lengths, device):
    """Flatten ragged steps into (row, end, reward) tensors, validating every index."""
    rows, ends, values = [], [], []
    for i, (rs, es, length) in enumerate(zip(step_rewards, step_ends, lengths)):
        if len(rs) != len(es):
            raise ValueError(f"completion {i}: {len(rs)} step rewards but {len(es)} step ends")
        for r, e in zip(rs, es):
            if not 0 <= e < length:
                raise ValueError(f"completion {i}: step end {e} outside [0, {length})")
            if not math.isfinite(r):
                raise ValueError(f"completion {i}: non-finite step reward {r}")
            rows.append(i)
            ends.append(e)
            values.append(float(r))
    dtype = torch.get_default_dtype()
    return (
        torch.tensor(rows, dtype=torch.long, device=device),
        torch.tensor(ends, dtype=torch.long, device=device),
        torch.tensor(values, dtype=dtype, device=device),
    )


def _normalise_by_group(values: torch.Tensor, group: torch.Tensor, num_groups: int, eps: float):
    """(v - mean) / (unbiased std + eps) within each group; 0 for flat or singleton groups."""
    if values.numel() == 0:
        return values
    zeros = values.new_zeros  # on the values' device
    count = zeros(num_groups).index_add_(0, group, torch.ones_like(values))
    mean = zeros(num_groups).index_add_(0, group, values) / count.clamp(min=1)
    centred = values - mean[group]  # [S]
    sq = zeros(num_groups).index_add_(0, group, centred * centred)
    std = (sq / (count - 1).clamp(min=1)).sqrt()  # [B]
    # Steps arrive grouped in order, so each group's first step sits at its count offset.
    first = values[(count.cumsum(0) - count).long().clamp(max=values.numel() - 1)]  # [B]
    differs = zeros(num_groups).index_add_(0, group, (values != first[group]).to(values.dtype))
    flat = (count < 2) | (differs == 0)  # [B]
    out = centred / (std[group] + eps)
    return torch.where(flat[group], torch.zeros_like(out), out)
