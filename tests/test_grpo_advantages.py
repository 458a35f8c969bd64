"""Tests for pipeline.grpo.advantages against hand arithmetic and naive per-element loops.

Expected values are computed here with Python floats / `statistics` (independent of torch and
of the code under test); loop references re-derive the definitions one element at a time.
"""
import math
import random
import statistics

import pytest
import torch

from pipeline.grpo.advantages import outcome_advantages, process_advantages, reward_with_kl

EPS = 1e-4


def _close(actual, expected, tol=1e-6):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert math.isclose(a, e, rel_tol=tol, abs_tol=tol), (actual, expected)


# ---------------------------------------------------------------- outcome


def test_outcome_group_hand_computed():
    # Group [1, 0, 0, 0]: mean 1/4, unbiased variance = (9/16 + 3 * 1/16) / 3 = 1/4, std = 1/2.
    adv = outcome_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), group_size=4)
    _close(adv.tolist(), [0.75 / (0.5 + EPS)] + [-0.25 / (0.5 + EPS)] * 3)


def test_outcome_scales_hand_computed():
    rewards = [1.0, 0.0, 2.0, 2.0, 0.0, 4.0]  # groups of 2: [1,0] [2,2] [0,4]
    r = torch.tensor(rewards, dtype=torch.float64)
    std_a = statistics.stdev([1.0, 0.0])  # sqrt(1/2)
    std_c = statistics.stdev([0.0, 4.0])  # sqrt(8)
    _close(outcome_advantages(r, 2, "group").tolist(),
           [0.5 / (std_a + EPS), -0.5 / (std_a + EPS), 0.0, 0.0, -2 / (std_c + EPS), 2 / (std_c + EPS)])
    batch_std = statistics.stdev(rewards)
    _close(outcome_advantages(r, 2, "batch").tolist(),
           [0.5 / (batch_std + EPS), -0.5 / (batch_std + EPS), 0.0, 0.0,
            -2 / (batch_std + EPS), 2 / (batch_std + EPS)])
    _close(outcome_advantages(r, 2, "none").tolist(), [0.5, -0.5, 0.0, 0.0, -2.0, 2.0])


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_zero_std_group_is_exactly_zero(scale):
    # In float32 the mean of seven 0.1s is not 0.1 (residue ~7e-9, std ~8e-9), so a naive
    # (r - mean) / (std + eps) would give about -7e-5 here instead of 0.
    r = torch.tensor([0.1] * 7 + [1.0] + [0.0] * 6)
    adv = outcome_advantages(r, 7, scale)
    assert adv[:7].tolist() == [0.0] * 7
    assert (adv[7:] != 0).all()


def test_group_of_one_has_undefined_std_and_zero_advantage():
    assert outcome_advantages(torch.tensor([1.0, 0.0, 3.0]), 1).tolist() == [0.0, 0.0, 0.0]


def test_outcome_loop_vs_vectorised():
    gen = random.Random(0)
    for group_size in (2, 3, 8):
        rewards = [float(gen.choice([0, 0.1, 1, 1.1])) for _ in range(group_size * 5)]
        got = outcome_advantages(torch.tensor(rewards, dtype=torch.float64), group_size).tolist()
        want = []
        for g in range(0, len(rewards), group_size):
            grp = rewards[g:g + group_size]
            if len(set(grp)) == 1:
                want += [0.0] * group_size
            else:
                mu, sd = statistics.fmean(grp), statistics.stdev(grp)
                want += [(x - mu) / (sd + EPS) for x in grp]
        _close(got, want, tol=1e-9)


def test_outcome_rejects_bad_input():
    with pytest.raises(ValueError):
        outcome_advantages(torch.zeros(5), 2)
    with pytest.raises(ValueError):
        outcome_advantages(torch.tensor([1.0, float("nan")]), 2)
    with pytest.raises(ValueError):
        outcome_advantages(torch.zeros(4), 2, scale="rank")


def test_outcome_accepts_integer_rewards():
    adv = outcome_advantages(torch.tensor([1, 0]), 2)
    assert adv.dtype.is_floating_point and adv[0] > 0 > adv[1]


# ---------------------------------------------------------------- process


def test_process_hand_computed():
    # One group of two completions. Steps: c0 ends at tokens 1 and 3 with rewards 1, 0;
    # c1 ends at token 2 with reward 0.5. R = {1, 0, 0.5}: mean 0.5, unbiased std 0.5.
    adv = process_advantages([[1.0, 0.0], [0.5]], [[1, 3], [2]], lengths=[5, 3], group_size=2)
    s = 0.5 + EPS
    hi, lo = 0.5 / s, -0.5 / s
    assert adv.shape == (2, 5)
    _close(adv[0].tolist(), [hi + lo, hi + lo, lo, lo, 0.0])  # token 4: after the last step
    _close(adv[1].tolist(), [0.0, 0.0, 0.0, 0.0, 0.0])  # its step reward is the mean; t >= 3 past end


def test_process_groups_normalise_separately():
    # Group 1 (rows 2, 3) has rewards {0, 2} only; its std is sqrt(2), independent of group 0.
    adv = process_advantages([[1.0], [0.0], [0.0], [2.0]], [[0], [0], [1], [0]], [1, 1, 2, 1], 2)
    s0, s1 = statistics.stdev([1.0, 0.0]), statistics.stdev([0.0, 2.0])
    _close(adv[:, 0].tolist(), [0.5 / (s0 + EPS), -0.5 / (s0 + EPS), -1 / (s1 + EPS), 1 / (s1 + EPS)])
    _close(adv[2].tolist(), [-1 / (s1 + EPS)] * 2)


def test_process_flat_and_stepless_groups_are_zero():
    adv = process_advantages([[], [], [1.0, 1.0], [1.0]], [[], [], [0, 2], [1]], [2, 3, 3, 2], 2)
    assert adv.abs().sum().item() == 0.0
    assert process_advantages([[], []], [[], []], [2, 3], 2).shape == (2, 3)


def test_process_prm_steps_with_different_counts_hand_computed():
    """Steps from a PRM: fractional clipped penalties, 3 / 1 / 2 points per completion in one group
    (DeepSeekMath 4.1.3: all six points normalised together). Points R = -0.2, -0.5, 1.0 | 0.0 |
    -0.1, 1.0: mean 0.2, deviations -0.4 -0.7 0.8 | -0.2 | -0.3 0.8, squares sum 2.06, unbiased
    std sqrt(2.06 / 5)."""
    rewards = [[-0.2, -0.5, 1.0], [0.0], [-0.1, 1.0]]
    ends = [[1, 3, 5], [3], [2, 4]]
    adv = process_advantages(rewards, ends, [6, 4, 5], group_size=3, eps=0.0)
    s = math.sqrt(2.06 / 5)
    assert adv.shape == (3, 6)
    _close(adv[0].tolist(), [-0.3 / s, -0.3 / s, 0.1 / s, 0.1 / s, 0.8 / s, 0.8 / s])  # -0.4-0.7+0.8, -0.7+0.8, 0.8
    _close(adv[1].tolist(), [-0.2 / s] * 4 + [0.0, 0.0])  # one point at its last token; past the end 0
    _close(adv[2].tolist(), [0.5 / s] * 3 + [0.8 / s] * 2 + [0.0])  # -0.3+0.8 up to token 2, then 0.8
    # With the default eps the same numbers over (std + eps):
    _close(process_advantages(rewards, ends, [6, 4, 5], 3)[2].tolist(),
           [0.5 / (s + EPS)] * 3 + [0.8 / (s + EPS)] * 2 + [0.0])


def test_process_two_points_on_one_token_add_up():
    """Two steps can end on the same token (a token spanning a step boundary); both count there."""
    adv = process_advantages([[0.0, -0.5, 1.0], [1.0]], [[1, 1, 2], [2]], [3, 3], group_size=2, eps=0.0)
    pool = [0.0, -0.5, 1.0, 1.0]
    mu, sd = statistics.fmean(pool), statistics.stdev(pool)
    z = [(r - mu) / sd for r in pool]
    _close(adv[0].tolist(), [z[0] + z[1] + z[2]] * 2 + [z[2]])
    _close(adv[1].tolist(), [z[3]] * 3)


def _naive_process(step_rewards, step_ends, lengths, group_size):
    n, width = len(lengths), max(lengths)
    out = [[0.0] * width for _ in range(n)]
    for g in range(0, n, group_size):
        pool = [r for i in range(g, g + group_size) for r in step_rewards[i]]
        flat = len(pool) < 2 or len(set(pool)) == 1
        mu = statistics.fmean(pool) if pool else 0.0
        sd = statistics.stdev(pool) if len(pool) > 1 else 0.0
        for i in range(g, g + group_size):
            for t in range(lengths[i]):
                for r, e in zip(step_rewards[i], step_ends[i]):
                    if e >= t and not flat:
                        out[i][t] += (r - mu) / (sd + EPS)
    return out


@pytest.mark.parametrize("seed,group_size", [(1, 4), (2, 2), (3, 3), (4, 1), (5, 6)])
def test_process_loop_vs_vectorised(seed, group_size):
    gen = random.Random(seed)
    n = 12
    lengths = [gen.randint(1, 9) for _ in range(n)]
    ends = [sorted(gen.sample(range(length), gen.randint(0, length))) for length in lengths]
    rewards = [[gen.choice([0.0, 0.5, 1.0]) for _ in e] for e in ends]
    got = process_advantages(rewards, ends, lengths, group_size)
    want = _naive_process(rewards, ends, lengths, group_size)
    for row_got, row_want in zip(got.tolist(), want):
        _close(row_got, row_want, tol=1e-5)


def test_process_single_final_step_matches_outcome():
    # One step ending at the last token = outcome supervision: same normalisation, every token.
    rewards = [1.0, 0.0, 0.0, 1.0]
    lengths = [3, 2, 4, 1]
    adv = process_advantages([[r] for r in rewards], [[n - 1] for n in lengths], lengths, 4)
    outcome = outcome_advantages(torch.tensor(rewards), 4)
    for i, n in enumerate(lengths):
        assert torch.allclose(adv[i, :n], outcome[i].expand(n))
        assert (adv[i, n:] == 0).all()


def test_process_rejects_bad_steps():
    with pytest.raises(ValueError):
        process_advantages([[1.0]], [[3]], [3], 1)  # end past the completion
    with pytest.raises(ValueError):
        process_advantages([[1.0, 0.0]], [[0]], [3], 1)  # ragged
    with pytest.raises(ValueError):
        process_advantages([[1.0], [0.0], [1.0]], [[0], [0], [0]], [1, 1, 1], 2)  # not whole groups


# ---------------------------------------------------------------- KL in the reward


def test_reward_with_kl_hand_computed_and_detached():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -9.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0, -3.0], [-0.25, -1.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    out = reward_with_kl(torch.tensor([1.0, 0.0]), logp, ref, mask, beta=0.1)
    # Row 0: k1 sum = 0.5 - 1.0 + 0 = -0.5; row 1: -0.25 + 0.5 = 0.25 (masked token ignored).
    _close(out.tolist(), [1.0 - 0.1 * -0.5, 0.0 - 0.1 * 0.25])
    assert not out.requires_grad
