"""The GRPO policy loss: a surrogate (clipped ratio or a variant), KL penalty, aggregation (pure math).

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

Surrogates (`surrogate`, the per-token objective that replaces the clipped term; A the advantage,
rho the ratio above, sg() a detached factor, formulas and sources in docs/grpo_math.md):
  clip    min(rho A, clip(rho, 1 - clip_low, 1 + clip_high) A)                  (PPO / GRPO);
  sapo    (4 / tau) sigmoid(tau (rho - 1)) A, tau = tau_pos if A > 0 else tau_neg (SAPO,
          arXiv:2511.20347): a soft gate whose gradient weight sech^2(tau (rho - 1) / 2) is 1 at
          rho = 1 and fades off-policy instead of dropping to 0 at a clip edge;
  cispo   sg(min(rho, cap)) A logp (MiniMax-M1 arXiv:2506.13585, ScaleRL arXiv:2510.13786): the
          weight is capped, never the gradient, so no token is dropped;
  vespo   sg(phi(W)) A logp with W = prod_t rho_t the sequence ratio and
          phi(W) = W^k exp(lambda (1 - W)) (VESPO, arXiv:2602.10693; k, lambda by the sign of A);
  dppo    rho A on tokens inside a trust region on the total variation or the KL between the old and
          the current distribution (DPPO, arXiv:2602.04879): a token is dropped only when the
          update would move it further out (A > 0 and p up, A < 0 and p down). The divergence is
          the paper's binary one (the sampled token against all others) or, with `topk` K > 0 and
          a `TopK`, its top-K one over the old policy's K most likely tokens, the sampled token and
          "other" (`dppo_divergence`; K = 0 is the binary one).
Each registry (SURROGATES, AGGREGATIONS, KL_ESTIMATORS, LEVELS) is keyed by the names of the
matching `Literal` of pipeline/config/schema.py, the one list of choices
(tests/test_grpo_registries.py checks they agree); this module imports nothing of pipeline.

With old_logp = logp.detach() (one update per batch) the ratio is exactly 1 but carries the
gradient of logp, so d loss / d logp[i, t] = -(A_i + beta * (exp(ref - logp) - 1)) / (|o_i| N)
under `grpo` (DeepSeekMath's gradient coefficient GC_GRPO, sec. 5.2.1, derived in its appendix
A.1), and the loss value is the negative mean advantage, i.e. 0 at step 0 for outcome advantages when
ref = policy.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping

import torch

__all__ = ["policy_loss", "kl_divergence", "dppo_divergence", "TopK", "SURROGATES", "AGGREGATIONS",
           "KL_ESTIMATORS", "LEVELS", "DPPO_DIVERGENCES"]

# d = ref_logp - logp
KL_ESTIMATORS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "k1": lambda d: -d,
    "k2": lambda d: d * d / 2,
    "k3": lambda d: torch.exp(d) - d - 1,
}
LEVELS = ("token", "sequence")  # importance_level: one ratio per token or per sequence (GSPO)


def kl_divergence(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k3") -> torch.Tensor:
    """Per-token estimate of KL(pi_theta || pi_ref) from sampled-token log-probs, same shape."""
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"unknown kl_estimator {estimator!r}; expected one of {tuple(KL_ESTIMATORS)}")
    return KL_ESTIMATORS[estimator](ref_logp - logp)


@dataclass(frozen=True)
class TopK:
    """DPPO's top-K approximation (Qi et al. 2026, arXiv:2602.04879, sec. 4.3): at each position the
    K most likely tokens of the old policy, as [N, T, K] tensors.

    old_logp: their log-probs under the old policy; logp: under the current one (no gradient is
    taken through them); sampled: True where the entry is the sampled token itself, which the
    divergence counts once, through the sampled token's own logp / old_logp.
    """

    old_logp: torch.Tensor
    logp: torch.Tensor
    sampled: torch.Tensor


@dataclass(frozen=True)
class Tokens:
    """What a surrogate sees of one (micro-)batch; padding is already sanitised (log-ratio 0).

    logp: [N, T] (with grad); old_logp: [N, T] (padding 0); token_log_ratio: [N, T] logp - old
    per token; ratio: [N, T] exp of the token or (GSPO) sequence log-ratio; adv: [N, 1] or
    [N, T]; m: [N, T] bool mask; is_weights: [N, T] detached importance weights or None;
    topk: DPPO's top-K tokens (`TopK`, masked positions already 0 / False) or None.
    """

    logp: torch.Tensor
    old_logp: torch.Tensor
    token_log_ratio: torch.Tensor
    ratio: torch.Tensor
    adv: torch.Tensor
    m: torch.Tensor
    is_weights: torch.Tensor | None
    topk: TopK | None = None

    def weighted(self, objective: torch.Tensor) -> torch.Tensor:
        """The objective times the importance weights (vLLM/trainer mismatch), when there are any."""
        return objective if self.is_weights is None else objective * self.is_weights


# A surrogate returns (per-token objective to maximise, low, high): low / high mark the tokens its
# trust region cut (A < 0 / A > 0), for the clip_frac statistics.
Surrogate = Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


def _clip(x: Tokens, *, clip_low: float, clip_high: float):
    clipped = torch.clamp(x.ratio, 1 - clip_low, 1 + clip_high)
    surrogate = torch.minimum(x.ratio * x.adv, clipped * x.adv)  # [N, T]
    low = (x.ratio < 1 - clip_low) & (x.adv < 0)
    high = (x.ratio > 1 + clip_high) & (x.adv > 0)
    return x.weighted(surrogate), low, high


def _sapo(x: Tokens, *, tau_pos: float, tau_neg: float):
    tau = _pick(x.adv > 0, tau_pos, tau_neg, x.ratio)
    gate = torch.sigmoid(tau * (x.ratio - 1)) * (4 / tau)
    none = torch.zeros_like(x.m)
    return x.weighted(gate * x.adv), none, none


def _cispo(x: Tokens, *, cap: float):
    weight = torch.clamp(x.ratio, max=cap).detach()
    none = torch.zeros_like(x.m)
    return x.weighted(weight * x.adv * x.logp), none, (x.ratio > cap) & (x.adv > 0)


def _vespo(x: Tokens, *, k_pos: float, lambda_pos: float, k_neg: float, lambda_neg: float):
    floor = math.log(1e-8)  # as TRL 1.16's get_gamma_weights
    with torch.no_grad():
        log_w = torch.where(x.m, x.token_log_ratio.clamp(-20.0, 20.0), 0.0).sum(dim=1, keepdim=True)  # [N, 1]
        if x.is_weights is not None:  # token-level TIS/MIS folded into the sequence weight
            log_is = torch.log(x.is_weights).clamp(floor, 20.0)
            log_w = log_w + torch.where(x.m, log_is, 0.0).sum(dim=1, keepdim=True)
        log_w = log_w.clamp(floor, 20.0)
        nonneg = x.adv >= 0
        k = _pick(nonneg, k_pos, k_neg, log_w)
        lam = _pick(nonneg, lambda_pos, lambda_neg, log_w).clamp(min=1e-4)
        phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
    none = torch.zeros_like(x.m)
    return phi * x.adv * x.logp, none, none


def dppo_divergence(logp: torch.Tensor, old_logp: torch.Tensor, divergence: str,
                    topk: TopK | None = None) -> torch.Tensor:
    """[N, T] DPPO's divergence D(old || current) at each position (no gradient), from the sampled
    token's log-probs [N, T] and, for the top-K approximation, the old policy's top-K tokens.

    Binary (topk None; Qi et al. eqs. 6-7): the Bernoulli (sampled token, everything else) of each
    policy; tv = |p - p_old|, kl = KL(Bern(p_old) || Bern(p)). Top-K (eqs. 8-9): the categorical over
    the old top-K tokens, the sampled token (once) and "other" = 1 - their sum; tv = half the L1
    distance, kl = sum p_old log(p_old / p). K = 0 is the binary partition, so both give the binary
    values; a finer partition never lowers a divergence, so binary <= top-K <= the full divergence.
    """
    with torch.no_grad():
        p, p_old = torch.exp(logp), torch.exp(old_logp)
        if topk is None:
            if divergence == "tv":
                return (p - p_old).abs()
            if divergence == "kl":
                return p_old * (old_logp - logp) + (1 - p_old) * (torch.log1p(-p_old.clamp(max=1 - 1e-7))
                                                                  - torch.log1p(-p.clamp(max=1 - 1e-7)))
        else:
            others = ~topk.sampled
            head, head_old = torch.exp(topk.logp) * others, torch.exp(topk.old_logp) * others  # [N, T, K]
            rest = (1 - p - head.sum(-1)).clamp(min=0)  # "other": float sums may dip below 0
            rest_old = (1 - p_old - head_old.sum(-1)).clamp(min=0)
            if divergence == "tv":
                return ((p - p_old).abs() + (head - head_old).abs().sum(-1) + (rest - rest_old).abs()) / 2
            if divergence == "kl":
                def term(q, r):  # q log(q / r), 0 where q = 0
                    return torch.xlogy(q, q) - torch.xlogy(q, r.clamp(min=1e-30))
                return term(p_old, p) + term(head_old, head).sum(-1) + term(rest_old, rest)
        raise ValueError(f"unknown dppo divergence {divergence!r}; expected one of {DPPO_DIVERGENCES}")


def _dppo(x: Tokens, *, divergence: str, delta: float, topk: int = 0):
    if topk > 0 and x.topk is None:
        raise ValueError(f"dppo with topk={topk} needs the old policy's top-K log-probs (policy_loss's topk)")
    with torch.no_grad():
        outside = dppo_divergence(x.logp, x.old_logp, divergence, x.topk if topk > 0 else None) > delta
        p, p_old = torch.exp(x.logp), torch.exp(x.old_logp)
        up, down = p > p_old, p < p_old
        high = outside & up & (x.adv > 0)  # moving further out of the region: masked
        low = outside & down & (x.adv < 0)
        keep = ~(high | low)
    return x.weighted(x.ratio * x.adv * keep), low, high


def _pick(cond: torch.Tensor, a: float, b: float, like: torch.Tensor) -> torch.Tensor:
    """a where cond else b, in like's dtype (exact: not rounded through float32 first)."""
    return torch.where(cond, torch.as_tensor(a, dtype=like.dtype, device=like.device),
                       torch.as_tensor(b, dtype=like.dtype, device=like.device))


SURROGATES: dict[str, Surrogate] = {"clip": _clip, "sapo": _sapo, "cispo": _cispo, "vespo": _vespo,
                                    "dppo": _dppo}
DPPO_DIVERGENCES = ("tv", "kl")


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
    surrogate: str = "clip",
    surrogate_params: Mapping[str, float | str] | None = None,
    topk: TopK | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """GRPO loss of one (micro-)batch and its statistics.

    logp: [N, T] log-probs of the sampled tokens under the policy being trained (with grad);
    old_logp: [N, T] under the policy that sampled them (no grad; logp.detach() when mu = 1);
    ref_logp: [N, T] under the reference policy, or None when beta = 0;
    advantages: [N] (outcome) or [N, T] (process); mask: [N, T], 1/True on completion tokens.
    is_weights: optional [N, T] truncated / masked importance-sampling weights multiplying the
    per-token surrogate (treated as constants; the weights of rollout/tis.py).
    num_tokens / num_rows: completion tokens / rows of the whole optimizer batch under gradient
    accumulation (see the module notes); None: this call is the whole batch.
    surrogate: a SURROGATES name; surrogate_params: its hyper-parameters (sapo: tau_pos,
    tau_neg; cispo: cap; vespo: k_pos, lambda_pos, k_neg, lambda_neg; dppo: divergence, delta and
    optionally topk, K of the top-K divergence, 0 = binary), all required; `clip` takes clip_low /
    clip_high. topk: the old policy's top-K tokens, required by dppo with topk > 0 (`TopK`).
    Returns (scalar loss, stats) with stats 0-dim float32 tensors on logp's device (read them
    once per step, not per call: each read waits for the device): loss (this call's loss before
    the accumulation scaling), kl (masked token mean of the chosen estimator,
    0.0 without ref_logp), clip_frac_low / clip_frac_high / clip_frac (fraction of tokens the
    surrogate's trust region cut: for clip the clipped, zero-gradient branch, A < 0 and
    ratio < 1 - clip_low / A > 0 and ratio > 1 + clip_high; for dppo the masked tokens; for cispo
    the tokens whose weight was capped; 0 for sapo and vespo), ratio_mean / ratio_min /
    ratio_max and adv_abs_mean (masked token statistics) and num_tokens.
    """
    _check_args(logp, mask, advantages, loss_type, importance_level, beta, ref_logp,
                max_completion_length, num_rows, surrogate, kl_estimator)
    m = mask.to(torch.bool)  # [N, T]
    mf = m.to(logp.dtype)
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    # Sanitise padding first so that inf/NaN there cannot reach the value or the gradient.
    token_log_ratio = torch.where(m, logp - old_logp, zero)  # [N, T]
    log_ratio = token_log_ratio
    if importance_level == "sequence":
        seq = log_ratio.sum(dim=1, keepdim=True) / mf.sum(dim=1, keepdim=True).clamp(min=1)  # [N, 1]
        log_ratio = seq.expand_as(log_ratio)
    ratio = torch.exp(log_ratio)  # [N, T]
    if advantages.dim() == 1:
        adv = advantages.to(logp.dtype).unsqueeze(1)  # [N, 1]
    else:
        adv = torch.where(m, advantages.to(logp.dtype), zero)  # [N, T]
    tokens = Tokens(torch.where(m, logp, zero), torch.where(m, old_logp.to(logp.dtype), zero), token_log_ratio,
                    ratio, adv, m, None if is_weights is None else is_weights.detach().to(logp.dtype),
                    None if topk is None else _sanitised(topk, m, logp.dtype))
    params = {"clip_low": clip_low, "clip_high": clip_high} if surrogate == "clip" else dict(surrogate_params or {})
    objective, low, high = SURROGATES[surrogate](tokens, **params)
    per_token = -objective
    kl = None
    if ref_logp is not None:
        kl = kl_divergence(torch.where(m, logp, zero), torch.where(m, ref_logp.to(logp.dtype), zero), kl_estimator)
        if beta != 0:
            per_token = per_token + beta * kl
    loss = AGGREGATIONS[loss_type](torch.where(m, per_token, zero), mf, max_completion_length, num_tokens)
    stats = _stats(loss, ratio, adv, kl, m, mf, low, high)
    if num_rows is not None and loss_type != "dapo":  # dapo's num_tokens already spans the batch
        loss = loss * (logp.shape[0] / num_rows)
    return loss, stats


def _sanitised(topk: TopK, m: torch.Tensor, dtype: torch.dtype) -> TopK:
    """``topk`` with padding positions holding no probability (log-prob -inf, not sampled), detached."""
    pad = torch.full((), -torch.inf, dtype=dtype, device=m.device)
    keep = m.unsqueeze(-1)
    old, new = (torch.where(keep, t.detach().to(dtype), pad) for t in (topk.old_logp, topk.logp))
    return TopK(old, new, topk.sampled.to(torch.bool) & keep)


# Reductions of masked [N, T] per-token losses (padding already zeroed) to a scalar.
def _grpo(per_token, mf, max_completion_length, num_tokens):
    return (per_token.sum(dim=1) / mf.sum(dim=1).clamp(min=1)).mean()


def _dr_grpo(per_token, mf, max_completion_length, num_tokens):
    return per_token.sum() / (per_token.shape[0] * max_completion_length)


def _bnpo(per_token, mf, max_completion_length, num_tokens):  # this micro-batch's tokens (TRL)
    return per_token.sum() / mf.sum().clamp(min=1)


def _dapo(per_token, mf, max_completion_length, num_tokens):
    if num_tokens is None:
        return _bnpo(per_token, mf, max_completion_length, num_tokens)
    return per_token.sum() / torch.as_tensor(num_tokens, dtype=mf.dtype, device=mf.device).clamp(min=1)


AGGREGATIONS = {"grpo": _grpo, "bnpo": _bnpo, "dapo": _dapo, "dr_grpo": _dr_grpo}


@torch.no_grad()
def _stats(loss, ratio, adv, kl, m, mf, low, high):
    count = mf.sum().clamp(min=1)
    low, high = low & m, high & m
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


def _check_args(logp, mask, advantages, loss_type, importance_level, beta, ref_logp,
                max_completion_length, num_rows, surrogate, kl_estimator):
    for what, name, known in (("loss_type", loss_type, AGGREGATIONS), ("importance_level", importance_level, LEVELS),
                              ("surrogate", surrogate, SURROGATES), ("kl_estimator", kl_estimator, KL_ESTIMATORS)):
        if name not in known:
            raise ValueError(f"unknown {what} {name!r}; expected one of {tuple(known)}")
    if logp.dim() != 2 or mask.shape != logp.shape:
        raise ValueError(f"logp and mask must both be [N, T]; got {tuple(logp.shape)} and {tuple(mask.shape)}")
    if advantages.shape not in (logp.shape[:1], logp.shape):
        raise ValueError(f"advantages must be [N] or [N, T]; got {tuple(advantages.shape)} "
                         f"for logp {tuple(logp.shape)}")
    if beta != 0 and ref_logp is None:
        raise ValueError("ref_logp is required when beta != 0")
    if loss_type == "dr_grpo" and not max_completion_length:
        raise ValueError("loss_type='dr_grpo' needs max_completion_length (the generation length limit)")
    if num_rows is not None and num_rows < logp.shape[0]:
        raise ValueError(f"num_rows={num_rows} (the whole batch's rows) is smaller than this call's {logp.shape[0]}")
