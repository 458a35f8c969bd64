"""The objective variants against hand computations, and the properties their sources state.

Hand values are written with `math` on scalars, independently of the tensor code; each case is
small enough to follow on paper (docs/grpo_math.md has the formulas).
"""

from __future__ import annotations

import math

import pytest
import torch

from pipeline.config import ConfigError, load_run_config
from pipeline.grpo import objective
from pipeline.grpo.advantages import normalised_advantages, outcome_advantages, per_reward_advantages, rank_advantages
from pipeline.grpo.losses import policy_loss
from pipeline.rollout.tis import tis_weights

D = torch.float64


def _one_row(log_ratios, adv, logp=None):
    """A single completion whose tokens have the given log-ratios; returns (logp leaf, old, mask, adv)."""
    log_ratios = torch.tensor(log_ratios, dtype=D)
    logp = torch.tensor(logp if logp is not None else [-1.0] * len(log_ratios), dtype=D).unsqueeze(0)
    old = logp - log_ratios.unsqueeze(0)
    return logp.clone().requires_grad_(), old, torch.ones_like(logp, dtype=torch.bool), torch.tensor([adv], dtype=D)


def _loss_and_grad(surrogate, params, log_ratios, adv, loss_type="bnpo", logp=None, **kw):
    lp, old, mask, a = _one_row(log_ratios, adv, logp)
    loss, stats = policy_loss(lp, old, None, a, mask, beta=0.0, loss_type=loss_type, surrogate=surrogate,
                              surrogate_params=params, **kw)
    loss.backward()
    return loss.item(), lp.grad[0].tolist(), stats


def _sigmoid(z):
    return 1 / (1 + math.exp(-z))


# ------------------------------------------------------------------ SAPO


def test_sapo_value_and_gradient_by_hand():
    rho, tau = 1.5, 1.0
    loss, grad, _ = _loss_and_grad("sapo", {"tau_pos": tau, "tau_neg": 2.0}, [math.log(rho)], 1.0)
    s = _sigmoid(tau * (rho - 1))
    assert loss == pytest.approx(-(4 / tau) * s * 1.0, rel=1e-12)
    # d/dlogp of (4/tau) sigmoid(tau (rho - 1)) A = 4 s (1 - s) rho A
    assert grad[0] == pytest.approx(-4 * s * (1 - s) * rho, rel=1e-12)
    # A < 0 takes tau_neg
    loss, _, _ = _loss_and_grad("sapo", {"tau_pos": tau, "tau_neg": 2.0}, [math.log(rho)], -1.0)
    assert loss == pytest.approx((4 / 2.0) * _sigmoid(2.0 * (rho - 1)), rel=1e-12)


def test_sapo_on_policy_gradient_is_grpo_and_it_tends_to_a_hard_gate():
    # rho = 1: SAPO's gradient weight sech^2(0) = 1, the same gradient as the clipped surrogate.
    clip = _loss_and_grad("clip", None, [0.0, 0.0], 0.7)[1]
    sapo = _loss_and_grad("sapo", {"tau_pos": 3.0, "tau_neg": 3.0}, [0.0, 0.0], 0.7)[1]
    assert sapo == pytest.approx(clip, rel=1e-12)
    # Off-policy tokens: the weight sech^2(tau (rho - 1) / 2) falls to 0 as tau grows (the seed
    # chapter's temperature 1/tau -> 0): the hard gate of a clip whose range shrinks to rho = 1.
    rhos = [0.7, 0.9, 1.1, 1.3]
    weights = {tau: [g / (-rho) for g, rho in zip(
        _loss_and_grad("sapo", {"tau_pos": tau, "tau_neg": tau}, [math.log(r) for r in rhos], 1.0,
                       loss_type="dapo")[1], rhos)] for tau in (1.0, 10.0, 100.0)}
    for i in range(len(rhos)):  # per token, 4 tokens -> each gradient is rho w / 4
        assert weights[1.0][i] > weights[10.0][i] > weights[100.0][i] >= 0
    assert max(weights[100.0]) * 4 < 1e-3  # sech^2(100 * 0.1 / 2) = 1.8e-4 (x 4: the dapo mean over 4 tokens)
    # ...and as tau -> 0 it becomes the unclipped ratio objective (weight 1 everywhere).
    small = _loss_and_grad("sapo", {"tau_pos": 1e-4, "tau_neg": 1e-4}, [math.log(r) for r in rhos], 1.0,
                           loss_type="dapo")[1]
    assert small == pytest.approx([-r / 4 for r in rhos], rel=1e-6)


# ------------------------------------------------------------------ CISPO


def test_cispo_weights_by_the_capped_ratio_and_never_drops_a_token():
    rhos, cap = [0.5, 1.2, 8.0], 5.0
    logp = [-0.5, -1.0, -2.0]
    loss, grad, stats = _loss_and_grad("cispo", {"cap": cap}, [math.log(r) for r in rhos], 2.0, loss_type="dapo",
                                       logp=logp)
    w = [min(r, cap) for r in rhos]
    assert loss == pytest.approx(-sum(wi * 2.0 * lp for wi, lp in zip(w, logp)) / 3, rel=1e-12)
    assert grad == pytest.approx([-wi * 2.0 / 3 for wi in w], rel=1e-12)  # the capped token keeps a gradient
    assert float(stats["clip_frac_high"]) == pytest.approx(1 / 3)  # ...and is counted as capped
    clip = _loss_and_grad("clip", None, [math.log(r) for r in rhos], 2.0, loss_type="dapo")[1]
    assert clip[2] == 0.0 and grad[2] != 0.0  # where PPO's clip drops it


# ------------------------------------------------------------------ VESPO


def test_vespo_sequence_weight_by_hand():
    a, b, adv = 0.1, 0.25, 1.5
    k, lam = 2.0, 3.0
    params = {"k_pos": k, "lambda_pos": lam, "k_neg": 3.0, "lambda_neg": 2.0}
    logp = [-0.4, -1.1]
    loss, grad, _ = _loss_and_grad("vespo", params, [a, b], adv, loss_type="dapo", logp=logp)
    w = math.exp(a + b)  # product of the token ratios
    phi = w ** k * math.exp(lam * (1 - w))
    assert loss == pytest.approx(-phi * adv * sum(logp) / 2, rel=1e-12)
    assert grad == pytest.approx([-phi * adv / 2] * 2, rel=1e-12)  # phi is a constant weight
    # A < 0 takes k_neg, lambda_neg; W = 1 gives phi = 1 (the on-policy gradient)
    _, grad, _ = _loss_and_grad("vespo", params, [0.0, 0.0], -1.0, loss_type="dapo")
    assert grad == pytest.approx([0.5, 0.5], rel=1e-12)
    loss, _, _ = _loss_and_grad("vespo", params, [a, b], -1.0, loss_type="dapo", logp=logp)
    assert loss == pytest.approx(w ** 3.0 * math.exp(2.0 * (1 - w)) * sum(logp) / 2, rel=1e-12)


def test_vespo_down_weights_stale_and_runaway_sequences():
    params = {"k_pos": 2.0, "lambda_pos": 3.0, "k_neg": 3.0, "lambda_neg": 2.0}
    weight = {}
    for w in (0.2, 1.0, 3.0):
        grad = _loss_and_grad("vespo", params, [math.log(w)], 1.0, loss_type="dapo")[1][0]
        weight[w] = -grad
    assert weight[1.0] == pytest.approx(1.0) and weight[0.2] < 1.0 and weight[3.0] < 1.0


# ------------------------------------------------------------------ DPPO


def _dppo_case():
    # p_old and p of the sampled token for six tokens, with the advantage's sign
    p_old = [0.50, 0.50, 0.50, 0.50, 0.05, 0.90]
    p_new = [0.80, 0.20, 0.20, 0.80, 0.10, 0.88]
    signs = [1.0, 1.0, -1.0, -1.0, 1.0, -1.0]
    return p_old, p_new, signs


def _dppo_grad(divergence, delta):
    p_old, p_new, signs = _dppo_case()
    logp = torch.tensor([math.log(p) for p in p_new], dtype=D).unsqueeze(1).requires_grad_()
    old = torch.tensor([math.log(p) for p in p_old], dtype=D).unsqueeze(1)
    adv = torch.tensor(signs, dtype=D)
    loss, stats = policy_loss(logp, old, None, adv, torch.ones_like(old, dtype=torch.bool), beta=0.0,
                              loss_type="dapo", surrogate="dppo",
                              surrogate_params={"divergence": divergence, "delta": delta})
    loss.backward()
    return logp.grad[:, 0].tolist(), stats


def test_dppo_binary_tv_masks_exactly_the_tokens_moving_out():
    p_old, p_new, signs = _dppo_case()
    grad, stats = _dppo_grad("tv", 0.15)
    # masked: |p - p_old| > 0.15 AND moving the way A pushes: token 0 (A > 0, up 0.3), token 2 (A < 0, down 0.3)
    # kept: token 1 (A > 0 but p fell: the update pulls it back), token 3 (A < 0, p rose), tokens 4, 5 (small moves)
    keep = [False, True, False, True, True, True]
    for i, (po, pn, s) in enumerate(zip(p_old, p_new, signs)):
        want = -(pn / po) * s / 6 if keep[i] else 0.0  # gradient of ratio A: ratio A, dapo mean over 6
        assert grad[i] == pytest.approx(want, rel=1e-12, abs=0.0), i
    assert float(stats["clip_frac_high"]) == pytest.approx(1 / 6)
    assert float(stats["clip_frac_low"]) == pytest.approx(1 / 6)


def test_dppo_binary_kl_uses_the_bernoulli_kl_of_the_sampled_token():
    p_old, p_new, signs = _dppo_case()

    def kl(q, p):  # KL(Bernoulli(q) || Bernoulli(p))
        return q * math.log(q / p) + (1 - q) * math.log((1 - q) / (1 - p))

    delta = 0.05
    grad, _ = _dppo_grad("kl", delta)
    for i, (po, pn, s) in enumerate(zip(p_old, p_new, signs)):
        outward = (pn > po and s > 0) or (pn < po and s < 0)
        masked = outward and kl(po, pn) > delta
        assert (grad[i] == 0.0) == masked, (i, kl(po, pn))
    # token 4 moves 0.05 -> 0.10 outward: a small TV (kept under tv) and a KL of 0.016 (kept here too);
    # token 0 (0.5 -> 0.8): KL 0.22 > 0.05, masked
    assert grad[0] == 0.0 and grad[4] != 0.0


# ------------------------------------------------------------------ TIS / MIS


def _is_case():
    # three completions, lengths 3, 2, 3; trainer - engine log-prob per token
    delta = torch.tensor([[0.1, 0.2, 0.3], [1.0, -0.1, 0.0], [-0.5, 0.9, 0.0]], dtype=D)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    engine = torch.full_like(delta, -1.0)
    return engine + delta, engine, mask, delta


def test_token_tis_and_mis_by_hand():
    trainer, engine, mask, delta = _is_case()
    cap = 2.0
    tis, _ = tis_weights(trainer, engine, mask, cap, "tis", "token")
    mis, stats = tis_weights(trainer, engine, mask, cap, "mis", "token")
    for i in range(3):
        for t in range(3):
            r = math.exp(delta[i, t]) if mask[i, t] else 0.0
            assert tis[i, t].item() == pytest.approx(min(r, cap) if mask[i, t] else 0.0, rel=1e-12)
            assert mis[i, t].item() == pytest.approx(0.0 if r > cap else r, rel=1e-12)
    assert float(stats["tis/clipped_frac"]) == pytest.approx(2 / 8)  # e^1.0 and e^0.9 are past 2


def test_sequence_mis_zeroes_exactly_the_rows_past_the_threshold():
    trainer, engine, mask, delta = _is_case()
    cap = 2.0
    seq = [math.exp(sum(delta[i, t].item() for t in range(3) if mask[i, t])) for i in range(3)]  # e^0.6, e^0.9, e^0.4
    assert [s > cap for s in seq] == [False, True, False]
    mis, stats = tis_weights(trainer, engine, mask, cap, "mis", "sequence")
    tis, _ = tis_weights(trainer, engine, mask, cap, "tis", "sequence")
    for i in range(3):
        row = [mis[i, t].item() for t in range(3) if mask[i, t]]
        assert row == pytest.approx([0.0 if seq[i] > cap else seq[i]] * len(row), rel=1e-12)
        assert [tis[i, t].item() for t in range(3) if mask[i, t]] == pytest.approx([min(seq[i], cap)] * len(row))
    assert (mis[~mask] == 0).all()
    assert float(stats["tis/clipped_frac"]) == pytest.approx(2 / 8)  # row 1's two tokens


def test_masked_weights_give_those_tokens_no_gradient():
    trainer, engine, mask, _ = _is_case()
    weights, _ = tis_weights(trainer, engine, mask, 2.0, "mis", "sequence")
    logp = trainer.clone().requires_grad_()
    loss, _ = policy_loss(logp, logp.detach(), None, torch.tensor([1.0, 1.0, -1.0], dtype=D), mask, beta=0.0,
                          is_weights=weights)
    loss.backward()
    assert (logp.grad[1] == 0).all() and (logp.grad[0][mask[0]] != 0).all()


# ------------------------------------------------------------------ GDPO


def test_gdpo_with_one_reward_is_grpo():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.0, 0.25, 1.0, 0.0])
    for scale in ("group", "batch", "none"):
        gdpo = per_reward_advantages(rewards.unsqueeze(1), [1.0], 4, scale)
        assert torch.equal(gdpo, outcome_advantages(rewards, 4, scale))


def test_gdpo_keeps_a_format_bonus_from_swamping_an_all_equal_group():
    # one group: all four correct, only the first well formatted; weights correct 1, format 0.1
    correct = torch.tensor([1.0, 1.0, 1.0, 1.0])
    fmt = torch.tensor([1.0, 0.0, 0.0, 0.0])
    eps = 1e-4
    grpo = outcome_advantages(correct + 0.1 * fmt, 4, eps=eps)
    # total = (1.1, 1, 1, 1): mean 1.025, unbiased std 0.05 -> (0.075, -0.025) / 0.0501
    assert grpo.tolist() == pytest.approx([0.075 / (0.05 + eps), -0.025 / (0.05 + eps), -0.025 / (0.05 + eps),
                                           -0.025 / (0.05 + eps)], rel=1e-5)
    gdpo = per_reward_advantages(torch.stack([correct, fmt], dim=1), [1.0, 0.1], 4, eps=eps)
    # correct: flat -> 0; format: mean 0.25, std 0.5 -> (0.75, -0.25) / 0.5001, times 0.1
    assert gdpo.tolist() == pytest.approx([0.1 * 0.75 / (0.5 + eps)] + [0.1 * -0.25 / (0.5 + eps)] * 3, rel=1e-5)
    assert gdpo.abs().max() < grpo.abs().max() / 9  # GRPO: +-1.5 from a 0.1 bonus; GDPO: +-0.15


def test_per_reward_components_follow_the_weights_and_truncation(tiny_episodes):
    cfg = load_run_config(None, ["train.adv_norm=per_reward", "reward.weights={correct: 1.0, format: 0.1}",
                                 "reward.truncated_zero=true", "rollout.group_size=2"])
    table = objective.reward_components(cfg, tiny_episodes, "cpu")
    assert table.tolist() == [[1.0, 1.0], [0.0, 1.0], [0.0, 0.0], [1.0, 0.0]]  # row 2 was cut: zeroed
    scores = torch.tensor([e.reward for e in tiny_episodes])
    adv = objective.outcome_advantages(cfg, tiny_episodes, scores)
    assert torch.equal(adv, per_reward_advantages(table, [1.0, 0.1], 2))


@pytest.fixture
def tiny_episodes():
    from pipeline.grpo.episodes import Episode

    def ep(group, correct, fmt, finish="stop"):
        e = Episode(problem_id="p", group=group, sample=0, prompt="q", completion="c", prompt_ids=[1],
                    completion_ids=[2], finish_reason=finish, gold="1")
        e.rewards = {"correct": correct, "format": fmt}
        e.reward = 0.0 if finish == "length" else correct + 0.1 * fmt
        return e

    return [ep(0, 1.0, 1.0), ep(0, 0.0, 1.0), ep(1, 1.0, 1.0, "length"), ep(1, 1.0, 0.0)]


# ------------------------------------------------------------------ GOPO


def test_gopo_ranks_by_hand_with_ties():
    rewards = torch.tensor([0.2, 0.9, 0.5, 0.5, 3.0, 3.0, 3.0, 3.0])
    # group 1: ranks 1, 4, 2.5, 2.5 -> 2 (rank - 1) / 3 - 1; group 2: all tied -> exactly 0
    assert rank_advantages(rewards, 4).tolist() == pytest.approx([-1.0, 1.0, 0.0, 0.0, 0, 0, 0, 0], abs=1e-15)
    assert (rank_advantages(rewards, 4)[4:] == 0).all()


def test_gopo_is_invariant_to_monotone_reward_transforms():
    gen = torch.Generator().manual_seed(5)
    rewards = torch.randint(0, 4, (32,), generator=gen).double() / 3
    base = rank_advantages(rewards, 8)
    for transform in (torch.exp, lambda r: r ** 3, lambda r: 10 * r - 7, lambda r: torch.sigmoid(5 * r)):
        assert torch.equal(rank_advantages(transform(rewards), 8), base)
    assert not torch.equal(outcome_advantages(torch.exp(rewards), 8), outcome_advantages(rewards, 8))  # GRPO is not


def test_normalised_advantages_dispatches_by_name():
    rewards = torch.tensor([0.0, 1.0, 1.0, 0.5])
    assert torch.equal(normalised_advantages("group", rewards, 2), outcome_advantages(rewards, 2))
    assert torch.equal(normalised_advantages("rank", rewards, 2), rank_advantages(rewards, 2))
    with pytest.raises(ValueError, match="per_reward"):
        normalised_advantages("per_reward", rewards, 2)


# ------------------------------------------------------------------ the config's default and its checks


def test_the_default_objective_is_todays_loss_exactly():
    cfg = load_run_config(None, [])
    gen = torch.Generator().manual_seed(1)
    logp = -torch.rand(6, 7, generator=gen)
    old = logp + (torch.rand(6, 7, generator=gen) - 0.5) * 0.6
    ref = logp + (torch.rand(6, 7, generator=gen) - 0.5)
    mask = torch.arange(7) < torch.randint(1, 8, (6, 1), generator=gen)
    adv = torch.randn(6, generator=gen)
    a, b = logp.clone().requires_grad_(), logp.clone().requires_grad_()
    ours, s1 = objective.loss(cfg, a, old, ref, adv, mask, None, num_tokens=60.0, num_rows=12)
    plain, s2 = policy_loss(b, old, ref, adv, mask, loss_type="grpo", clip_low=0.2, clip_high=0.2, beta=0.04,
                            kl_estimator="k3", max_completion_length=cfg.rollout.max_new_tokens, num_tokens=60.0,
                            num_rows=12)
    assert torch.equal(ours, plain) and all(torch.equal(s1[k], s2[k]) for k in s1)
    ours.backward()
    plain.backward()
    assert torch.equal(a.grad, b.grad)
    assert cfg.train.surrogate == "clip" and cfg.train.adv_norm == "group" and cfg.rollout.is_correction == "tis"


@pytest.mark.parametrize("overrides,words", [
    (["train.surrogate=vespo", "train.importance_level=sequence"], "train.importance_level=token"),
    (["train.surrogate=dppo", "train.importance_level=sequence"], "token probabilities"),
    (["train.dppo_delta=0"], "train.dppo_delta must be > 0"),
    (["train.dppo_topk=4"], "train.surrogate=dppo"),
    (["train.vespo_lambda_neg=-1"], "train.vespo_lambda_neg must be >= 0"),
    (["rollout.is_correction=mis"], "rollout.tis_cap > 0"),
    (["train.adv_norm=rank", "train.adv_scale=batch"], "train.adv_scale=group"),
    (["train.adv_norm=per_reward", "train.advantage=process"], "train.advantage=outcome"),
    (["train.adv_norm=per_reward", "train.kl_in=reward"], "train.kl_in=loss"),
    (["train.surrogate=vespo", "rollout.tis_cap=2", "rollout.is_level=sequence"], "rollout.is_level=token"),
])
def test_check_objective_refuses_with_one_line(overrides, words):
    with pytest.raises(ConfigError) as err:
        load_run_config(None, overrides)
    assert words in str(err.value) and "\n" not in str(err.value)


# ------------------------------------------------------------------ through the trainer


@pytest.mark.parametrize("variant", [
    ["train.surrogate=dppo", "train.adv_norm=per_reward"],
    ["train.surrogate=vespo", "train.adv_norm=rank", "train.loss_type=dapo"],
    # top-K DPPO both ways: the old top-K from the batch's old forward (mu = 2), and this forward's own (mu = 1)
    ["train.surrogate=dppo", "train.dppo_topk=4", "train.num_iterations=2"],
    ["train.surrogate=dppo", "train.dppo_topk=4", "train.dppo_divergence=kl"],
])
def test_a_variant_trains_through_the_real_loop(tiny_setup, variant):
    from pipeline.grpo import trainer
    from pipeline.grpo.run_log import read_metrics
    from pipeline.models import load_policy
    from tests.test_trainer import run_cfg

    cfg = run_cfg(tiny_setup, "variant-" + "-".join(v.split("=")[1] for v in variant), "train.steps=1", *variant)
    run_dir = trainer.train(cfg)
    (row,) = read_metrics(run_dir)
    assert math.isfinite(row["loss"]) and row["grad_norm"] > 0  # a real gradient reached the weights
    before = load_policy(cfg.model.name_or_path)[0].state_dict()
    after = load_policy(str(run_dir / "final"))[0].state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_two_grpo_recipe_is_a_pairwise_contrast():
    # configs/two_grpo.yaml: G = 2, and the same completions per step as the CPU default
    two, default = load_run_config("configs/two_grpo.yaml"), load_run_config("configs/cpu_tiny.yaml")
    assert two.rollout.group_size == 2 and two.train.surrogate == "clip" and two.train.loss_type == "grpo"
    assert two.rollout.group_size * two.train.questions_per_step == \
        default.rollout.group_size * default.train.questions_per_step
    # each non-flat pair gets +-(r1 - r2) / 2 / (|r1 - r2| / sqrt 2 + eps): +-1/sqrt(2) whatever the gap
    adv = outcome_advantages(torch.tensor([1.0, 0.0, 0.3, 0.2, 0.5, 0.5]), 2)
    s = 1 / math.sqrt(2)
    assert adv.tolist() == pytest.approx([s, -s, s, -s, 0.0, 0.0], rel=2e-3)
