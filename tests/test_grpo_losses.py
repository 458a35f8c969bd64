"""Tests for pipeline.grpo.losses.policy_loss: hand arithmetic, a per-token Python loop
reference, DeepSeekMath's gradient coefficient GC_GRPO, PPO clipping, KL estimators,
aggregations, gradient accumulation, masking.

Expected numbers come from Python floats (`math`), never from the function under test.
"""
import itertools
import math
import random

import pytest
import torch

from pipeline.grpo.losses import kl_divergence, policy_loss

T64 = torch.float64


def _t(rows):
    return torch.tensor(rows, dtype=T64)


def _py_kl(lp, rf, est):
    d = rf - lp
    return {"k1": -d, "k2": d * d / 2, "k3": math.exp(d) - d - 1}[est]


def _py_loss(lp, old, ref, adv, mask, *, loss_type="grpo", clip_low=0.2, clip_high=0.2, beta=0.04,
             kl_estimator="k3", importance_level="token", max_completion_length=None, w=None):
    """Per-token loop reference on nested Python lists (adv rows may be scalars or lists)."""
    n = len(lp)
    total, count, seq_means = 0.0, 0, []
    for i in range(n):
        toks = [t for t in range(len(lp[i])) if mask[i][t]]
        seq_lr = sum(lp[i][t] - old[i][t] for t in toks) / max(len(toks), 1)
        row = 0.0
        for t in toks:
            a = adv[i][t] if isinstance(adv[i], list) else adv[i]
            rho = math.exp(seq_lr if importance_level == "sequence" else lp[i][t] - old[i][t])
            sur = min(rho * a, min(max(rho, 1 - clip_low), 1 + clip_high) * a)
            if w is not None:
                sur *= w[i][t]
            kl = _py_kl(lp[i][t], ref[i][t], kl_estimator) if ref is not None else 0.0
            row += -(sur - beta * kl)
        total += row
        count += len(toks)
        seq_means.append(row / max(len(toks), 1))
    if loss_type == "grpo":
        return sum(seq_means) / n
    if loss_type == "dr_grpo":
        return total / (n * max_completion_length)
    return total / max(count, 1)


def _random_batch(gen, n=4, t=6, process=False):
    lp = [[gen.uniform(-3, -0.1) for _ in range(t)] for _ in range(n)]
    old = [[x + gen.uniform(-0.4, 0.4) for x in row] for row in lp]
    ref = [[x + gen.uniform(-0.5, 0.5) for x in row] for row in lp]
    lengths = [gen.randint(1, t) for _ in range(n)]
    mask = [[1 if j < lengths[i] else 0 for j in range(t)] for i in range(n)]
    adv = ([[gen.uniform(-2, 2) for _ in range(t)] for _ in range(n)] if process
           else [gen.uniform(-2, 2) for _ in range(n)])
    return lp, old, ref, adv, mask


def test_single_token_hand_computed():
    # logp -1, old -1.1, ref -1.2, A = 2: ratio e^0.1 (inside [0.8, 1.2]); k3 = e^-0.2 + 0.2 - 1.
    loss, stats = policy_loss(_t([[-1.0]]), _t([[-1.1]]), _t([[-1.2]]), _t([2.0]), torch.ones(1, 1))
    ratio, k3 = math.exp(0.1), math.exp(-0.2) + 0.2 - 1
    assert loss.item() == pytest.approx(-(2 * ratio - 0.04 * k3), abs=1e-12)
    assert stats["kl"] == pytest.approx(k3) and stats["ratio_mean"] == pytest.approx(ratio)
    # Ratio e^0.3 = 1.35 > 1.2 with A > 0: the surrogate is the clipped 1.2 * A.
    loss, stats = policy_loss(_t([[-0.8]]), _t([[-1.1]]), _t([[-0.8]]), _t([2.0]), torch.ones(1, 1))
    assert loss.item() == pytest.approx(-2.4, abs=1e-12)
    assert stats["clip_frac_high"] == 1.0 and stats["clip_frac_low"] == 0.0


@pytest.mark.parametrize("loss_type,estimator,level,process", list(itertools.product(
    ["grpo", "bnpo", "dapo", "dr_grpo"], ["k1", "k2", "k3"], ["token", "sequence"], [False, True])))
def test_matches_loop_reference(loss_type, estimator, level, process):
    gen = random.Random(f"{loss_type}-{estimator}-{level}-{process}")
    lp, old, ref, adv, mask = _random_batch(gen, process=process)
    kw = dict(loss_type=loss_type, kl_estimator=estimator, importance_level=level,
              max_completion_length=8, clip_low=0.1, clip_high=0.15, beta=0.3)
    loss, _ = policy_loss(_t(lp), _t(old), _t(ref), _t(adv), torch.tensor(mask), **kw)
    assert loss.item() == pytest.approx(_py_loss(lp, old, ref, adv, mask, **kw), rel=1e-10, abs=1e-12)


def test_step_zero_loss_is_zero_for_outcome_advantages():
    # Symmetric group of equal-length completions: exactly 0.0, bit for bit.
    logp = torch.randn(4, 5, requires_grad=True)
    adv = torch.tensor([0.8, -0.8, 0.8, -0.8])
    loss, stats = policy_loss(logp, logp.detach(), logp.detach(), adv, torch.ones(4, 5))
    assert loss.item() == 0.0 and stats["kl"] == 0.0
    loss.backward()
    assert logp.grad.abs().sum() > 0  # the ratio is 1 but its gradient flows
    # Any group-normalised advantages and ragged lengths: 0 up to float rounding.
    from pipeline.grpo.advantages import outcome_advantages
    logp = torch.randn(8, 7, requires_grad=True)
    adv = outcome_advantages(torch.tensor([1.0, 0, 0, 1, 0, 0, 0, 1]), 4)
    mask = torch.arange(7) < torch.tensor([7, 3, 5, 1, 2, 7, 6, 4]).unsqueeze(1)
    loss, _ = policy_loss(logp, logp.detach(), logp.detach(), adv, mask)
    assert abs(loss.item()) < 1e-6


@pytest.mark.parametrize("process", [False, True])
def test_gradient_is_seed_002_gc_grpo(process):
    gen = random.Random(7)
    lp, _, ref, adv, mask = _random_batch(gen, n=5, t=7, process=process)
    beta, n = 0.04, len(lp)
    logp = _t(lp).requires_grad_()
    loss, _ = policy_loss(logp, logp.detach(), _t(ref), _t(adv), torch.tensor(mask), beta=beta)
    loss.backward()
    for i, t in itertools.product(range(n), range(7)):
        length = sum(mask[i])
        if not mask[i][t]:
            assert logp.grad[i, t].item() == 0.0
            continue
        a = adv[i][t] if process else adv[i]
        want = -(a + beta * (math.exp(ref[i][t] - lp[i][t]) - 1)) / (length * n)
        assert logp.grad[i, t].item() == pytest.approx(want, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("adv,log_ratio,zero_grad,which", [
    (1.0, math.log(1.5), True, "clip_frac_high"),    # A > 0, ratio > 1 + eps_high: clipped
    (-1.0, math.log(0.5), True, "clip_frac_low"),    # A < 0, ratio < 1 - eps_low: clipped
    (1.0, math.log(0.5), False, None),               # A > 0, ratio low: unclipped (pessimistic)
    (-1.0, math.log(1.5), False, None),              # A < 0, ratio high: unclipped
    (1.0, math.log(1.1), False, None),               # inside the trust region
    (-1.0, math.log(0.9), False, None),
])
def test_clipping_stops_gradient_where_ppo_says(adv, log_ratio, zero_grad, which):
    logp = torch.tensor([[-1.0]], dtype=T64, requires_grad=True)
    old = torch.tensor([[-1.0 - log_ratio]], dtype=T64)
    loss, stats = policy_loss(logp, old, None, _t([adv]), torch.ones(1, 1), beta=0.0)
    loss.backward()
    grad = logp.grad.item()
    if zero_grad:
        assert grad == 0.0 and stats[which] == 1.0 and stats["clip_frac"] == 1.0
    else:
        assert grad == pytest.approx(-adv * math.exp(log_ratio)) and stats["clip_frac"] == 0.0


def test_asymmetric_clip_bounds():
    # ratio 1.25 lies inside clip_high = 0.28 (DAPO clip-higher) but outside 0.2.
    old = _t([[-1.0 - math.log(1.25)]])
    for clip_high, want in ((0.2, -1.2), (0.28, -1.25)):
        loss, _ = policy_loss(_t([[-1.0]]), old, None, _t([1.0]), torch.ones(1, 1), beta=0.0, clip_high=clip_high)
        assert loss.item() == pytest.approx(want)


@pytest.mark.parametrize("est", ["k1", "k2", "k3"])
def test_kl_estimators_formula(est):
    lp = [-0.3, -2.0, -1.0, -4.0]
    rf = [-0.5, -1.0, -1.0, -0.1]
    got = kl_divergence(_t(lp), _t(rf), est).tolist()
    for g, a, b in zip(got, lp, rf):
        assert g == pytest.approx(_py_kl(a, b, est), abs=1e-12)
    if est == "k3":
        assert min(got) >= 0.0
    _, stats = policy_loss(_t([lp]), _t([lp]), _t([rf]), _t([0.0]), torch.ones(1, 4), kl_estimator=est)
    assert stats["kl"] == pytest.approx(sum(_py_kl(a, b, est) for a, b in zip(lp, rf)) / 4)


def test_aggregations_hand_computed():
    # ratio 1, beta 0: per-token loss = -A. Row 0 has 1 token (A=3), row 1 has 3 (A=1, 2, 6).
    lp = _t([[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]])
    adv = _t([[3.0, 9.0, 9.0], [1.0, 2.0, 6.0]])
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    def run(loss_type, **kw):
        return policy_loss(lp, lp, None, adv, mask, beta=0.0, loss_type=loss_type, **kw)[0].item()
    assert run("grpo") == pytest.approx(-(3 / 1 + 9 / 3) / 2)
    assert run("bnpo") == pytest.approx(-12 / 4)
    assert run("dapo") == pytest.approx(-12 / 4)
    assert run("dr_grpo", max_completion_length=5) == pytest.approx(-12 / (2 * 5))
    assert run("dapo", num_tokens=10) == pytest.approx(-12 / 10)


def test_dapo_num_tokens_makes_accumulation_exact():
    gen = random.Random(3)
    lp, old, ref, adv, mask = _random_batch(gen, n=6, t=5)
    full, _ = policy_loss(_t(lp), _t(old), _t(ref), _t(adv), torch.tensor(mask), loss_type="dapo")
    total = sum(map(sum, mask))
    parts = [policy_loss(_t(lp[s]), _t(old[s]), _t(ref[s]), _t(adv[s]), torch.tensor(mask[s]),
                         loss_type="dapo", num_tokens=total)[0] for s in (slice(0, 2), slice(2, 6))]
    assert (parts[0] + parts[1]).item() == pytest.approx(full.item(), rel=1e-12)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "dr_grpo"])
def test_batch_counts_make_accumulated_micro_batches_the_batch_loss(loss_type):
    """The trainer passes the whole batch's rows and tokens and sums the micro-batch losses (over
    ranks too); that sum is the whole batch's loss, and so is the gradient. bnpo keeps each
    micro-batch's token count (as TRL), so its sum is the row-weighted mean of the parts."""
    gen = random.Random(11)
    lp, old, ref, adv, mask = _random_batch(gen, n=6, t=5)
    kw = dict(loss_type=loss_type, max_completion_length=5, beta=0.04)
    full_lp = _t(lp).requires_grad_()
    full, _ = policy_loss(full_lp, _t(old), _t(ref), _t(adv), torch.tensor(mask), **kw)
    full.backward()
    tokens = float(sum(map(sum, mask)))
    parts_lp = _t(lp).requires_grad_()
    total, plain = 0.0, []
    for s in (slice(0, 2), slice(2, 6)):
        args = (parts_lp[s], _t(old[s]), _t(ref[s]), _t(adv[s]), torch.tensor(mask[s]))
        loss, stats = policy_loss(*args, num_tokens=tokens, num_rows=6, **kw)
        loss.backward()
        total = total + loss.item()
        plain.append(policy_loss(*args, num_tokens=tokens if loss_type == "dapo" else None, **kw)[0].item())
        assert stats["loss"] == pytest.approx(plain[-1], rel=1e-6)  # the call's own loss (stats are float32)
    if loss_type == "bnpo":
        assert total == pytest.approx((2 * plain[0] + 4 * plain[1]) / 6, rel=1e-12)
    else:
        assert total == pytest.approx(full.item(), rel=1e-12)
        assert torch.allclose(parts_lp.grad, full_lp.grad, rtol=1e-10, atol=1e-14)


def test_masked_tokens_contribute_nothing():
    gen = random.Random(5)
    lp, old, ref, adv, mask = _random_batch(gen, process=True)
    clean, _ = policy_loss(_t(lp), _t(old), _t(ref), _t(adv), torch.tensor(mask))
    dirty = [_t(x) for x in (lp, old, ref, adv)]
    pad = ~torch.tensor(mask, dtype=torch.bool)
    for tensor, junk in zip(dirty, (-math.inf, math.nan, math.inf, math.nan)):
        tensor[pad] = junk
    logp = dirty[0].requires_grad_()
    loss, stats = policy_loss(logp, *dirty[1:], torch.tensor(mask))
    assert loss.item() == pytest.approx(clean.item(), rel=1e-12)
    assert all(math.isfinite(v) for v in stats.values())
    loss.backward()
    assert torch.isfinite(logp.grad).all() and (logp.grad[pad] == 0).all()


def test_sequence_level_ratio_is_gspo():
    # Sequence tokens log-ratios 0.1 and -0.3 (third token masked): ratio = exp(-0.1) for both.
    logp = torch.tensor([[-1.0, -2.0, -5.0]], dtype=T64, requires_grad=True)
    old = _t([[-1.1, -1.7, 0.0]])
    loss, stats = policy_loss(logp, old, None, _t([2.0]), torch.tensor([[1, 1, 0]]),
                              beta=0.0, importance_level="sequence")
    assert loss.item() == pytest.approx(-2 * math.exp(-0.1))
    assert stats["ratio_mean"] == pytest.approx(math.exp(-0.1))
    loss.backward()
    # d/dlogp_t of -(A exp(mean)) / 1 = -A exp(-0.1) / 2, the same for both tokens.
    assert logp.grad[0, :2].tolist() == pytest.approx([-math.exp(-0.1)] * 2)
    assert logp.grad[0, 2].item() == 0.0


def test_is_weights_scale_surrogate_not_kl():
    lp, old, ref = _t([[-1.0, -1.0]]), _t([[-1.0, -1.0]]), _t([[-1.5, -0.5]])
    w = _t([[0.5, 2.0]])
    loss, _ = policy_loss(lp, old, ref, _t([1.0]), torch.ones(1, 2), is_weights=w, beta=0.1)
    k3 = [_py_kl(-1.0, -1.5, "k3"), _py_kl(-1.0, -0.5, "k3")]
    want = (-(0.5 - 0.1 * k3[0]) - (2.0 - 0.1 * k3[1])) / 2
    assert loss.item() == pytest.approx(want)


def test_stats_hand_computed():
    lp = _t([[-1.0, -1.0], [-1.0, -1.0]])
    old = _t([[-1.0 - math.log(2), -1.0], [-1.0 - math.log(0.5), -1.0]])
    adv = _t([1.0, -3.0])
    _, stats = policy_loss(lp, old, None, adv, torch.ones(2, 2), beta=0.0)
    assert stats["ratio_mean"] == pytest.approx((2 + 1 + 0.5 + 1) / 4)
    assert stats["ratio_min"] == pytest.approx(0.5) and stats["ratio_max"] == pytest.approx(2.0)
    assert stats["adv_abs_mean"] == pytest.approx(2.0)
    assert stats["clip_frac_high"] == 0.25 and stats["clip_frac_low"] == 0.25
    assert stats["num_tokens"] == 4 and stats["kl"] == 0.0


def test_argument_errors():
    x, m = torch.zeros(2, 3), torch.ones(2, 3)
    with pytest.raises(ValueError, match="max_completion_length"):
        policy_loss(x, x, x, torch.zeros(2), m, loss_type="dr_grpo")
    with pytest.raises(ValueError, match="ref_logp"):
        policy_loss(x, x, None, torch.zeros(2), m, beta=0.1)
    with pytest.raises(ValueError):
        policy_loss(x, x, x, torch.zeros(3), m)
    with pytest.raises(ValueError):
        policy_loss(x, x, x, torch.zeros(2), m, loss_type="ppo")
    with pytest.raises(ValueError):
        policy_loss(x, x, x, torch.zeros(2), m, kl_estimator="k4")
    with pytest.raises(ValueError, match="num_rows"):
        policy_loss(x, x, x, torch.zeros(2), m, num_rows=1)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "dr_grpo"])
def test_fully_masked_batch_is_zero_and_finite(loss_type):
    # e.g. every completion truncated under mask_truncated: no signal, no NaN.
    logp = torch.randn(3, 4, requires_grad=True)
    loss, stats = policy_loss(logp, logp.detach() + 1, logp.detach() - 1, torch.ones(3), torch.zeros(3, 4),
                              loss_type=loss_type, max_completion_length=4)
    loss.backward()
    assert loss.item() == 0.0 and (logp.grad == 0).all()
    assert stats["num_tokens"] == 0 and all(math.isfinite(v) for v in stats.values())
