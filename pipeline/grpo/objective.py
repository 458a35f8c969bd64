"""The GRPO objective as the config chooses it: which advantage, surrogate, aggregation and KL.

The math is in the pure modules (``advantages.py``, ``losses.py``; the importance weights in
``rollout/tis.py``); this file only reads ``cfg`` and hands each of them its hyper-parameters, so
the trainer and the batch call one function each and never name a variant. The variants, their
formulas and sources: docs/grpo_math.md. Which combinations are allowed: ``check_objective`` in
pipeline/config/checks.py.
"""

from __future__ import annotations

import torch

from pipeline.grpo.advantages import normalised_advantages
from pipeline.grpo.episodes import Episode
from pipeline.grpo.losses import TopK, policy_loss
from pipeline.parallel import distributed


def surrogate_params(train) -> dict[str, float | str]:
    """The hyper-parameters of ``train.surrogate`` (none for ``clip``: it takes clip_low / clip_high)."""
    return {
        "clip": {},
        "sapo": {"tau_pos": train.sapo_tau_pos, "tau_neg": train.sapo_tau_neg},
        "cispo": {"cap": train.cispo_cap},
        "vespo": {"k_pos": train.vespo_k_pos, "lambda_pos": train.vespo_lambda_pos,
                  "k_neg": train.vespo_k_neg, "lambda_neg": train.vespo_lambda_neg},
        "dppo": {"divergence": train.dppo_divergence, "delta": train.dppo_delta, "topk": train.dppo_topk},
    }[train.surrogate]


def loss(cfg, logp: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor | None, advantages: torch.Tensor,
         mask: torch.Tensor, is_weights: torch.Tensor | None, *, num_tokens: float | None = None,
         num_rows: float | None = None, topk: TopK | None = None) -> tuple[torch.Tensor, dict]:
    """``policy_loss`` of one micro-batch with the config's objective (arguments as there)."""
    t = cfg.train
    return policy_loss(
        logp, old_logp, ref_logp, advantages, mask, loss_type=t.loss_type, clip_low=t.clip_low,
        clip_high=t.clip_high, beta=t.beta if t.kl_in == "loss" else 0.0, kl_estimator=t.kl_estimator,
        importance_level=t.importance_level, max_completion_length=cfg.rollout.max_new_tokens,
        is_weights=is_weights, num_tokens=num_tokens, num_rows=num_rows, surrogate=t.surrogate,
        surrogate_params=surrogate_params(t), topk=topk)


def reward_components(cfg, episodes: list[Episode], device) -> torch.Tensor:
    """[N, K] the reward.weights components of each episode (0 where a completion was cut and
    reward.truncated_zero zeroes its total), in the order of reward.weights."""
    names = list(cfg.reward.weights)
    rows = [[0.0 if cfg.reward.truncated_zero and e.finish_reason == "length" else e.rewards.get(n, 0.0)
             for n in names] for e in episodes]
    return torch.tensor(rows, dtype=torch.float32, device=device).reshape(len(episodes), len(names))


def outcome_advantages(cfg, episodes: list[Episode], scores: torch.Tensor) -> torch.Tensor:
    """[N] this rank's outcome advantages from its episodes and their (weighted) scores, normalised
    as train.adv_norm says over every rank's rows (so batch-std scaling sees the global batch)."""
    t = cfg.train
    components = None
    if t.adv_norm == "per_reward":
        components = distributed.gather_cat(reward_components(cfg, episodes, scores.device))
    adv = normalised_advantages(t.adv_norm, distributed.gather_cat(scores), cfg.rollout.group_size,
                                scale=t.adv_scale, eps=t.adv_eps, components=components,
                                weights=list(cfg.reward.weights.values()))
    return adv[distributed.rank() * len(scores):][:len(scores)]
