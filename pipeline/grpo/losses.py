"""The GRPO policy loss: clipped surrogate, KL penalty, token/sequence aggregation (pure tensor math).

Per token (notation of docs/grpo_math.md): ratio = exp(logp - old_logp),
surrogate = min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A), and
loss_t = -(w_t * surrogate - beta * KL_t), w_t an optional truncated importance weight
(vLLM sampler vs trainer log-prob mismatch; 1 when not given). KL estimators
(Schulman, "Approximating KL divergence"), with d = ref_logp - logp:
  k1 = -d,   k2 = d^2 / 2,   k3 = exp(d) - d - 1 (>= 0; GRPO's choice).
Aggregations over the [N, T] per-token losses, masked tokens excluded:
  grpo    mean over each sequence's tokens, then mean over the N sequences (fully masked
          sequences count in N with loss 0, as in TRL);
  bnpo    sum over all tokens / number of tokens;
  dapo    the same, but `num_tokens` may pass the token count of the whole optimizer batch so
          that gradient accumulation over micro-batches gives the full-batch loss;
  dr_grpo sum / (N * max_completion_length).
Gradient accumulation (one call per micro-batch, on every rank): with `num_rows` and
`num_tokens`, the rows and completion tokens of the whole optimizer batch, each call returns its
share, so the gradients summed over micro-batches and ranks are those of the whole batch. dapo
divides by `num_tokens`; grpo, dr_grpo and bnpo are scaled by N / `num_rows` (bnpo keeps each
micro-batch's own token count, as TRL does). All of the loss normalisation lives here (verl
keeps it in one function too, `agg_loss` in `core_algos.py`); the trainer only calls backward.
`importance_level="sequence"` (GSPO): one ratio per sequence, exp(masked mean of logp - old),
broadcast to its tokens; everything else is unchanged.

With old_logp = logp.detach() (one update per batch) the ratio is exactly 1 but carries the
gradient of logp, so d loss / d logp[i, t] = -(A_i + beta * (exp(ref - logp) - 1)) / (|o_i| N)
under `grpo` (DeepSeekMath's gradient coefficient GC_GRPO, sec. 5.2.1, derived in its appendix
A.1), and the loss value is the negative mean advantage, i.e. 0 at step 0 for outcome advantages when
ref = policy.
"""
from __future__ import annotations

import torch

__all__ = ["policy_loss", "kl_divergence", "LOSS_TYPES", "KL_ESTIMATORS"]

LOSS_TYPES = ("grpo", "bnpo", "dapo", "dr_grpo")
KL_ESTIMATORS = ("k1", "k2", "k3")
_LEVELS = ("token", "sequence")


def kl_divergence(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(pi_theta || pi_ref) from sampled-token log-probs, same shape."""
    d = ref_logp - logp
    if estimator == "k1":
        return -d
    if estimator == "k2":
        return d * d / 2
    if estimator == "k3":
        return torch.exp(d) - d - 1
    raise ValueError(f"unknown kl_estimator {estimator!r}; expected one of {KL_ESTIMATORS}")


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    loss_type: str = "grpo",
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    beta: float = 0.04,
    kl_estimator: str = "k3",
    importance_level: str = "token",
    max_completion_length: int | None = None,
    is_weights: torch.Tensor | None = None,
    num_tokens: float | None = None,
    num_rows: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GRPO loss of one (micro-)batch and its statistics.

    logp: [N, T] log-probs of the sampled tokens under the policy being trained (with grad);
    old_logp: [N, T] under the policy that sampled them (no grad; logp.detach() when mu = 1);
    ref_logp: [N, T] under the reference policy, or None when beta = 0;
    advantages: [N] (outcome) or [N, T] (process); mask: [N, T], 1/True on completion tokens.
    is_weights: optional [N, T] truncated importance-sampling weights multiplying the per-token
    surrogate (treated as constants; the truncated importance sampling weights of tis.py).
    num_tokens / num_rows: completion tokens / rows of the whole optimizer batch under gradient
    accumulation (see the module notes); None: this call is the whole batch.
    Returns (scalar loss, stats) with stats 0-dim float32 tensors on logp's device (read them
    once per step, not per call: each read waits for the device): loss (this call's loss before
    the accumulation scaling), kl (masked token mean of the chosen estimator,
    0.0 without ref_logp), clip_frac_low / clip_frac_high / clip_frac (fraction of tokens whose
    surrogate takes the clipped, zero-gradient branch: A < 0 and ratio < 1 - clip_low /
    A > 0 and ratio > 1 + clip_high), ratio_mean / ratio_min / ratio_max and adv_abs_mean
    (masked token statistics) and num_tokens.
    """
    _check_args(logp, mask, advantages, loss_type, importance_level, kl_estimator, beta, ref_logp,
                max_completion_length, num_rows)
    m = mask.to(torch.bool)  # [N, T]
    mf = m.to(logp.dtype)
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    # Sanitise padding first so that inf/NaN there cannot reach the value or the gradient.
    log_ratio = torch.where(m, logp - old_logp, zero)  # [N, T]
    if importance_level == "sequence":
        seq = log_ratio.sum(dim=1, keepdim=True) / mf.sum(dim=1, keepdim=True).clamp(min=1)  # [N, 1]
        log_ratio = seq.expand_as(log_ratio)
    ratio = torch.exp(log_ratio)  # [N, T]
    if advantages.dim() == 1:
        adv = advantages.to(logp.dtype).unsqueeze(1)  # [N, 1]
    else:
        adv = torch.where(m, advantages.to(logp.dtype), zero)  # [N, T]
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    surrogate = torch.minimum(ratio * adv, clipped * adv)  # [N, T]
    if is_weights is not None:
        surrogate = surrogate * is_weights.detach().to(logp.dtype)
    per_token = -surrogate
    kl = None
    if ref_logp is not None:
        kl = kl_divergence(torch.where(m, logp, zero), torch.where(m, ref_logp.to(logp.dtype), zero), kl_estimator)
        if beta != 0:
            per_token = per_token + beta * kl
    loss = _aggregate(torch.where(m, per_token, zero), mf, loss_type, max_completion_length, num_tokens)
    stats = _stats(loss, ratio, adv, kl, m, mf, clip_low, clip_high)
    if num_rows is not None and loss_type != "dapo":  # dapo's num_tokens already spans the batch
        loss = loss * (logp.shape[0] / num_rows)
    return loss, stats


def _aggregate(per_token, mf, loss_type, max_completion_length, num_tokens):
    """Reduce masked [N, T] per-token losses to a scalar (padding already zeroed)."""
    if loss_type == "grpo":
        return (per_token.sum(dim=1) / mf.sum(dim=1).clamp(min=1)).mean()
    if loss_type == "dr_grpo":
        return per_token.sum() / (per_token.shape[0] * max_completion_length)
    if loss_type == "bnpo" or num_tokens is None:  # bnpo: this micro-batch's tokens (TRL)
        denom = mf.sum()
    else:
        denom = torch.as_tensor(num_tokens, dtype=mf.dtype, device=mf.device)
    return per_token.sum() / denom.clamp(min=1)


@torch.no_grad()
def _stats(loss, ratio, adv, kl, m, mf, clip_low, clip_high):
    count = mf.sum().clamp(min=1)
    low = (ratio < 1 - clip_low) & (adv < 0) & m
    high = (ratio > 1 + clip_high) & (adv > 0) & m
    big = torch.finfo(ratio.dtype).max
    values = torch.stack([
        loss.detach().float(),
        (kl * mf).sum() / count if kl is not None else torch.zeros((), device=mf.device),
        low.sum() / count,
        high.sum() / count,
        (low | high).sum() / count,
        (ratio * mf).sum() / count,
        torch.where(m.any(), torch.where(m, ratio, big).min(), 1.0),  # no host sync for empty batches
        torch.where(m.any(), torch.where(m, ratio, -big).max(), 1.0),
        (adv.abs().expand_as(mf) * mf).sum() / count,
        mf.sum(),
    ]).float()
    names = ("loss", "kl", "clip_frac_low", "clip_frac_high", "clip_frac", "ratio_mean",
             "ratio_min", "ratio_max", "adv_abs_mean", "num_tokens")
    return dict(zip(names, values.unbind()))  # tensors: reading them is the caller's (one) device sync


def _check_args(logp, mask, advantages, loss_type, importance_level, kl_estimator, beta, ref_logp,
                max_completion_length, num_rows):
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"unknown loss_type {loss_type!r}; expected one of {LOSS_TYPES}")
    if importance_level not in _LEVELS:
        raise ValueError(f"unknown importance_level {importance_level!r}; expected one of {_LEVELS}")
    if logp.dim() != 2 or mask.shape != logp.shape:
        raise ValueError(f"logp and mask must both be [N, T]; got {tuple(logp.shape)} and {tuple(mask.shape)}")
    if kl_estimator not in KL_ESTIMATORS:
        raise ValueError(f"unknown kl_estimator {kl_estimator!r}; expected one of {KL_ESTIMATORS}")
    if advantages.shape not in (logp.shape[:1], logp.shape):
        raise ValueError(f"advantages must be [N] or [N, T]; got {tuple(advantages.shape)} for logp {tuple(logp.shape)}")
    if beta != 0 and ref_logp is None:
        raise ValueError("ref_logp is required when beta != 0")
    if loss_type == "dr_grpo" and not max_completion_length:
        raise ValueError("loss_type='dr_grpo' needs max_completion_length (the generation length limit)")
    if num_rows is not None and num_rows < logp.shape[0]:
        raise ValueError(f"num_rows={num_rows} (the whole batch's rows) is smaller than this call's {logp.shape[0]}")
