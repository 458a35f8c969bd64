"""DPPO's top-K divergence (Qi et al. 2026, arXiv:2602.04879, sec. 4.3) against hand computations,
its reduction to the binary divergence at K = 0, and the ordering binary <= top-K <= full that the
paper's appendix states (the top-K partition refines the binary one, and the full vocabulary refines
every top-K partition)."""

from __future__ import annotations

import math

import pytest
import torch

from pipeline.grpo.losses import TopK, dppo_divergence, policy_loss

D = torch.float64


def _position(p_new, p_old, head_new, head_old, sampled=None):
    """One position: the sampled token's probabilities and the old top-K entries, as [1, 1] / [1, 1, K]."""
    def log(xs):
        return torch.tensor([math.log(x) for x in xs], dtype=D).reshape(1, 1, -1)
    k = len(head_old)
    sampled = torch.tensor(sampled or [False] * k).reshape(1, 1, k)
    return (torch.tensor([[math.log(p_new)]], dtype=D), torch.tensor([[math.log(p_old)]], dtype=D),
            TopK(log(head_old), log(head_new), sampled))


# the sampled token barely moves (0.10 -> 0.12) while the old top-2 (0.6, 0.2) swap mass (0.3, 0.5)
HEAD_SHIFT = dict(p_new=0.12, p_old=0.10, head_new=[0.3, 0.5], head_old=[0.6, 0.2])


def test_top_k_tv_and_kl_by_hand():
    logp, old, topk = _position(**HEAD_SHIFT)
    # other: 1 - 0.1 - 0.8 = 0.1 before, 1 - 0.12 - 0.8 = 0.08 after
    tv = (abs(0.12 - 0.10) + abs(0.3 - 0.6) + abs(0.5 - 0.2) + abs(0.08 - 0.10)) / 2
    kl = 0.1 * math.log(0.1 / 0.12) + 0.6 * math.log(0.6 / 0.3) + 0.2 * math.log(0.2 / 0.5) + 0.1 * math.log(0.1 / 0.08)
    assert dppo_divergence(logp, old, "tv", topk).item() == pytest.approx(tv, rel=1e-12)
    assert dppo_divergence(logp, old, "kl", topk).item() == pytest.approx(kl, rel=1e-12)
    # the binary divergence sees only the sampled token's small move
    assert dppo_divergence(logp, old, "tv").item() == pytest.approx(0.02, rel=1e-12)


def test_the_sampled_token_among_the_top_k_is_counted_once():
    # old top-2: 0.6 and the sampled token (0.2); other 0.2 before and after
    logp, old, topk = _position(p_new=0.25, p_old=0.2, head_new=[0.55, 0.25], head_old=[0.6, 0.2],
                                sampled=[False, True])
    assert dppo_divergence(logp, old, "tv", topk).item() == pytest.approx((0.05 + 0.05 + 0.0) / 2, rel=1e-12)
    kl = 0.6 * math.log(0.6 / 0.55) + 0.2 * math.log(0.2 / 0.25)
    assert dppo_divergence(logp, old, "kl", topk).item() == pytest.approx(kl, rel=1e-12)


def _random_case(seed, n=5, t=7, v=8):
    g = torch.Generator().manual_seed(seed)
    old_lp = torch.log_softmax(torch.randn(n, t, v, generator=g, dtype=D) * 2, -1)
    new_lp = torch.log_softmax(old_lp + torch.randn(n, t, v, generator=g, dtype=D), -1)
    tokens = torch.randint(0, v, (n, t), generator=g)
    return old_lp, new_lp, tokens


def _top_k(old_lp, new_lp, tokens, k):
    ids = old_lp.topk(k, dim=-1).indices  # [N, T, K]
    return TopK(old_lp.gather(-1, ids), new_lp.gather(-1, ids), ids == tokens.unsqueeze(-1))


@pytest.mark.parametrize("divergence", ["tv", "kl"])
def test_k_zero_is_the_binary_divergence(divergence):
    old_lp, new_lp, tokens = _random_case(0)
    logp, old = new_lp.gather(-1, tokens.unsqueeze(-1))[..., 0], old_lp.gather(-1, tokens.unsqueeze(-1))[..., 0]
    binary = dppo_divergence(logp, old, divergence)
    top0 = dppo_divergence(logp, old, divergence, _top_k(old_lp, new_lp, tokens, 0))
    torch.testing.assert_close(top0, binary, rtol=1e-9, atol=1e-12)
    assert binary.max() > 0.05  # not a vacuous comparison of zeros


@pytest.mark.parametrize("divergence", ["tv", "kl"])
def test_binary_le_top_k_le_full_and_k_equal_to_the_vocabulary_is_exact(divergence):
    old_lp, new_lp, tokens = _random_case(1)
    logp, old = new_lp.gather(-1, tokens.unsqueeze(-1))[..., 0], old_lp.gather(-1, tokens.unsqueeze(-1))[..., 0]
    full = ((old_lp.exp() - new_lp.exp()).abs().sum(-1) / 2 if divergence == "tv"
            else (old_lp.exp() * (old_lp - new_lp)).sum(-1))
    previous = dppo_divergence(logp, old, divergence)
    for k in range(1, 9):  # each top-(k) partition refines the one before: never lower
        current = dppo_divergence(logp, old, divergence, _top_k(old_lp, new_lp, tokens, k))
        assert (current >= previous - 1e-12).all(), k
        assert (current <= full + 1e-12).all(), k
        previous = current
    torch.testing.assert_close(previous, full, rtol=1e-9, atol=1e-12)
    assert (full - dppo_divergence(logp, old, divergence)).max() > 0.05  # the bounds are not all equalities


def _dppo_grad(adv, topk_k, **case):
    logp, old, topk = _position(**case)
    logp = logp.requires_grad_()
    loss, stats = policy_loss(logp, old, None, torch.tensor([adv], dtype=D), torch.ones(1, 1, dtype=torch.bool),
                              beta=0.0, loss_type="dapo", surrogate="dppo",
                              surrogate_params={"divergence": "tv", "delta": 0.15, "topk": topk_k}, topk=topk)
    loss.backward()
    return logp.grad.item(), stats


def test_top_k_masks_a_head_shift_the_binary_mask_misses():
    ratio = 0.12 / 0.10
    grad, stats = _dppo_grad(1.0, 2, **HEAD_SHIFT)  # tv 0.32 > 0.15 and A > 0 with p up: moving out
    assert grad == 0.0 and float(stats["clip_frac_high"]) == 1.0
    grad, stats = _dppo_grad(1.0, 0, **HEAD_SHIFT)  # binary tv 0.02: kept
    assert grad == pytest.approx(-ratio, rel=1e-12) and float(stats["clip_frac_high"]) == 0.0
    grad, _ = _dppo_grad(-1.0, 2, **HEAD_SHIFT)  # A < 0 with p up pulls back in: never masked
    assert grad == pytest.approx(ratio, rel=1e-12)


def test_top_k_needs_the_top_k_tensors_and_ignores_padding():
    logp, old, topk = _position(**HEAD_SHIFT)
    with pytest.raises(ValueError, match="top-K"):
        policy_loss(logp, old, None, torch.ones(1, dtype=D), torch.ones(1, 1, dtype=torch.bool), beta=0.0,
                    surrogate="dppo", surrogate_params={"divergence": "tv", "delta": 0.15, "topk": 2})
    # a padded second column with NaN log-probs everywhere changes neither the loss nor the gradient
    mask = torch.tensor([[True, False]])
    nan = torch.full((1, 1), math.nan, dtype=D)
    results = []
    for lp, od, tk, m in ((logp, old, topk, mask[:, :1]),
                          (torch.cat([logp, nan], 1), torch.cat([old, nan], 1),
                           TopK(*(torch.cat([x, torch.full_like(x, math.nan)], 1) for x in (topk.old_logp, topk.logp)),
                                torch.cat([topk.sampled, torch.ones_like(topk.sampled)], 1)), mask)):
        lp = lp.clone().requires_grad_()
        loss, _ = policy_loss(lp, od, None, -torch.ones(1, dtype=D), m, beta=0.0, loss_type="grpo",
                              surrogate="dppo", surrogate_params={"divergence": "kl", "delta": 0.05, "topk": 2},
                              topk=tk)
        loss.backward()
        results.append((loss.item(), lp.grad[0, 0].item()))
    assert results[0] == results[1] and results[0][1] != 0.0
