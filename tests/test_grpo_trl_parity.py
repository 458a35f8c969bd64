"""Parity of pipeline.grpo with TRL 1.16's GRPOTrainer, running TRL's own code on the same tensors.

How TRL is called: its loss and its advantages are not free functions but methods of
`GRPOTrainer` (`_compute_loss` and the middle of `_generate_and_score_completions`). Building a
real trainer needs a model, a tokenizer, a dataset and an accelerate setup, so instead the tests
create the object with `object.__new__(GRPOTrainer)` and set only the attributes those two
methods read; the model forward (`_get_per_token_logps_and_entropies`), generation
(`_generate`) and reward calls (`_calculate_rewards`) are replaced by stubs that return our
tensors. Every line of arithmetic that is compared is TRL's unmodified code.

Known, intended differences (documented, not bent to match):
- Groups whose rewards are all equal: TRL computes (r - mean) / (std + 1e-4), which leaves
  float residue (about 7e-5 for seven rewards of 0.1 in float32); ours returns exactly 0.
- TRL's eps is fixed at 1e-4 (our default), and it only has the k3 KL estimator.
- TRL divides grpo/bnpo/dr_grpo losses by the gradient-accumulation steps inside the loss;
  `policy_loss` returns the micro-batch loss and leaves that scaling to the trainer. dapo's
  whole-batch token count is passed to us as `num_tokens` (TRL's `num_items_in_batch`).
- Sequence-level (GSPO) clip fractions: TRL averages per sequence, ours per token; compared
  only at token level.
"""
import collections
import itertools
import types

import pytest
import torch
from trl.trainer.grpo_trainer import GRPOTrainer

from pipeline.grpo import outcome_advantages, policy_loss
from pipeline.grpo.advantages import per_reward_advantages


class _Accelerator:
    """Single-process stand-in for accelerate.Accelerator (gather/reduce are identities)."""

    device = torch.device("cpu")
    process_index = 0
    num_processes = 1

    def gather(self, x):
        return x

    def reduce(self, x, reduction="sum"):
        return x

    def gather_for_metrics(self, x):
        return x


def _bare_trainer(**attrs):
    trainer = object.__new__(GRPOTrainer)
    base = dict(accelerator=_Accelerator(),
                model=types.SimpleNamespace(training=True, is_gradient_checkpointing=False),
                _metrics=collections.defaultdict(lambda: collections.defaultdict(list)))
    for name, value in {**base, **attrs}.items():
        setattr(trainer, name, value)
    return trainer


def _trl_loss(logp, old, ref, adv, mask, *, loss_type, level, beta, max_len, is_weights=None,
              grad_accum=1, num_items=None, epsilon_high=0.28, **args):
    """TRL's `_compute_loss` on given tensors; returns (loss, TRL's logged metrics). ``args``: more
    GRPOConfig fields (sapo_temperature_pos, vespo_k_pos, ...)."""
    n, t = logp.shape
    trainer = _bare_trainer(
        top_entropy_quantile=1.0, off_policy_mask_threshold=None, importance_sampling_level=level,
        beta=beta, loss_type=loss_type, epsilon_low=0.2, epsilon_high=epsilon_high,
        use_vllm=is_weights is not None, vllm_importance_sampling_correction=is_weights is not None,
        current_gradient_accumulation_steps=grad_accum, max_completion_length=max_len,
        _entropy_bonus_enabled=False, aux_loss_enabled=False,
        args=types.SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=grad_accum,
                                   **args))
    trainer._get_per_token_logps_and_entropies = lambda *a, **k: (logp, torch.zeros(n, t), None)
    inputs = dict(prompt_ids=torch.zeros(n, 1, dtype=torch.long), prompt_mask=torch.ones(n, 1, dtype=torch.long),
                  completion_ids=torch.zeros(n, t, dtype=torch.long), completion_mask=mask.long(),
                  advantages=adv, old_per_token_logps=old,
                  num_items_in_batch=torch.tensor(float(mask.sum() if num_items is None else num_items)))
    if ref is not None:
        inputs["ref_per_token_logps"] = ref
    if is_weights is not None:
        inputs["importance_sampling_ratio"] = is_weights
    loss = trainer._compute_loss(None, inputs)
    return loss, {k: v[-1] for k, v in trainer._metrics["train"].items()}


def _batch(seed, n=6, t=9, process=False):
    gen = torch.Generator().manual_seed(seed)
    logp = -torch.rand(n, t, generator=gen, dtype=torch.float64) * 3
    old = logp + (torch.rand(n, t, generator=gen, dtype=torch.float64) - 0.5) * 0.8  # some ratios clip
    ref = logp + (torch.rand(n, t, generator=gen, dtype=torch.float64) - 0.5)
    lengths = torch.randint(1, t + 1, (n,), generator=gen)
    mask = torch.arange(t) < lengths.unsqueeze(1)
    shape = (n, t) if process else (n,)
    adv = torch.randn(*shape, generator=gen, dtype=torch.float64)
    return logp, old, ref, adv, mask


CASES = list(itertools.product(["grpo", "bnpo", "dr_grpo", "dapo"], ["token", "sequence"], [0.0, 0.04], [False, True]))


@pytest.mark.parametrize("loss_type,level,beta,process", CASES)
def test_loss_and_gradient_match_trl(loss_type, level, beta, process):
    logp, old, ref, adv, mask = _batch(CASES.index((loss_type, level, beta, process)), process=process)
    ours_in = logp.clone().requires_grad_()
    theirs_in = logp.clone().requires_grad_()
    ours, stats = policy_loss(ours_in, old, ref if beta else None, adv, mask, loss_type=loss_type,
                              importance_level=level, beta=beta, clip_low=0.2, clip_high=0.28,
                              max_completion_length=12)
    theirs, metrics = _trl_loss(theirs_in, old, ref if beta else None, adv, mask, loss_type=loss_type,
                                level=level, beta=beta, max_len=12)
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-10, abs=1e-12)
    ours.backward()
    theirs.backward()
    torch.testing.assert_close(ours_in.grad, theirs_in.grad, rtol=1e-9, atol=1e-12)
    if beta:
        assert stats["kl"] == pytest.approx(metrics["kl"], rel=1e-6)  # our stats are float32
    if level == "token":
        assert stats["clip_frac_low"] == pytest.approx(metrics["clip_ratio/low_mean"])
        assert stats["clip_frac_high"] == pytest.approx(metrics["clip_ratio/high_mean"])
        assert stats["clip_frac"] == pytest.approx(metrics["clip_ratio/region_mean"])
        assert metrics["clip_ratio/region_mean"] > 0  # the case really exercises clipping


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_truncated_is_weights_match_trl_vllm_correction(loss_type):
    logp, old, ref, adv, mask = _batch(100)
    weights = torch.rand(logp.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 2
    ours, _ = policy_loss(logp, old, ref, adv, mask, loss_type=loss_type, clip_high=0.28, is_weights=weights)
    theirs, _ = _trl_loss(logp, old, ref, adv, mask, loss_type=loss_type, level="token", beta=0.04,
                          max_len=None, is_weights=weights)
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-10)


def test_dapo_whole_batch_token_count_matches_trl_accumulation():
    # Two micro-batches of one optimizer step: TRL normalises by num_items_in_batch of the
    # generation batch; ours takes the same count as `num_tokens`.
    logp, old, ref, adv, mask = _batch(200)
    total = int(mask.sum())
    for part in (slice(0, 2), slice(2, 6)):
        args = (logp[part], old[part], ref[part], adv[part], mask[part])
        ours, _ = policy_loss(*args, loss_type="dapo", clip_high=0.28, num_tokens=total)
        theirs, _ = _trl_loss(*args, loss_type="dapo", level="token", beta=0.04, max_len=None,
                              grad_accum=2, num_items=total)
        assert ours.item() == pytest.approx(theirs.item(), rel=1e-10)


# ---------------------------------------------------------------- surrogates TRL has (sapo, cispo, vespo)
# TRL's loss_type names a surrogate and an aggregation together: sapo aggregates as grpo, cispo and
# vespo as dapo. SAPO temperatures are exact binary fractions here: TRL builds them with
# torch.where from Python floats, i.e. rounded to float32 first, and ours are exact (1.05 would
# differ by 1e-8 relative, a rounding of TRL's, not a different formula).

SAPO = {"tau_pos": 1.0, "tau_neg": 1.25}
VESPO = {"k_pos": 2.0, "lambda_pos": 3.0, "k_neg": 3.0, "lambda_neg": 2.0}
VARIANTS = {  # ours: (surrogate, params, loss_type); TRL: (loss_type, its config fields)
    "sapo": (("sapo", SAPO, "grpo"), ("sapo", dict(sapo_temperature_pos=1.0, sapo_temperature_neg=1.25))),
    "cispo": (("cispo", {"cap": 1.1}, "dapo"), ("cispo", dict(epsilon_high=1.1))),  # a cap that bites here
    "vespo": (("vespo", VESPO, "dapo"), ("vespo", dict(vespo_k_pos=2.0, vespo_lambda_pos=3.0, vespo_k_neg=3.0,
                                                        vespo_lambda_neg=2.0))),
}
VARIANT_CASES = [(v, level, beta, process) for v in VARIANTS for level in ("token", "sequence")
                 for beta in (0.0, 0.04) for process in (False, True) if not (v == "vespo" and level == "sequence")]


@pytest.mark.parametrize("variant,level,beta,process", VARIANT_CASES)
def test_variant_loss_and_gradient_match_trl(variant, level, beta, process):
    (surrogate, params, loss_type), (trl_type, trl_args) = VARIANTS[variant]
    logp, old, ref, adv, mask = _batch(300 + VARIANT_CASES.index((variant, level, beta, process)), process=process)
    ours_in, theirs_in = logp.clone().requires_grad_(), logp.clone().requires_grad_()
    ours, stats = policy_loss(ours_in, old, ref if beta else None, adv, mask, loss_type=loss_type,
                              importance_level=level, beta=beta, surrogate=surrogate, surrogate_params=params)
    theirs, metrics = _trl_loss(theirs_in, old, ref if beta else None, adv, mask, loss_type=trl_type, level=level,
                                beta=beta, max_len=12, **trl_args)
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-10, abs=1e-12)
    ours.backward()
    theirs.backward()
    torch.testing.assert_close(ours_in.grad, theirs_in.grad, rtol=1e-9, atol=1e-12)
    if beta:
        assert stats["kl"] == pytest.approx(metrics["kl"], rel=1e-6)
    if variant == "cispo":
        assert (torch.exp(logp - old)[mask] > 1.1).any()  # the cap really bit


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_variant_with_importance_weights_matches_trl(variant):
    # TRL multiplies sapo / cispo losses by the vLLM weights, and folds them into VESPO's sequence
    # weight; its weights are 1 on padding (it sums their logs unmasked), ours are masked anyway.
    (surrogate, params, loss_type), (trl_type, trl_args) = VARIANTS[variant]
    logp, old, ref, adv, mask = _batch(400)
    weights = torch.rand(logp.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * 2
    weights = torch.where(mask, weights, 1.0)
    ours, _ = policy_loss(logp, old, ref, adv, mask, loss_type=loss_type, surrogate=surrogate,
                          surrogate_params=params, is_weights=weights)
    theirs, _ = _trl_loss(logp, old, ref, adv, mask, loss_type=trl_type, level="token", beta=0.04, max_len=None,
                          is_weights=weights, **trl_args)
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-10)


# ---------------------------------------------------------------- advantages


def _trl_advantages(rewards, group_size, scale, aggregation="sum_then_normalize", weights=(1.0,)):
    """TRL's reward -> advantage code in `_generate_and_score_completions`, generation stubbed.
    rewards: N values, or N rows of one value per reward function (weighted by ``weights``)."""
    n = len(rewards)
    table = torch.tensor(rewards, dtype=torch.float32).reshape(n, len(weights))
    trainer = _bare_trainer(
        environment_factories=None, tools=None, environments=None, _tokenizer=types.SimpleNamespace(pad_token_id=0),
        pad_to_multiple_of=None, mask_truncated_completions=False, num_iterations=1, use_vllm=False, beta=0.0,
        num_generations=group_size, multi_objective_aggregation=aggregation, scale_rewards=scale,
        reward_weights=torch.tensor(weights), reward_func_names=[f"r{i}" for i in range(len(weights))],
        reward_funcs=[None] * len(weights), log_multimodal=False,
        _pending_extra_logs={}, _pending_metrics={},
        _logs={"prompt": [], "completion": [], "rewards": collections.defaultdict(list), "advantages": [],
               "extra": collections.defaultdict(list)},
        args=types.SimpleNamespace(per_device_train_batch_size=n, gradient_checkpointing_kwargs=None,
                                   steps_per_generation=1, gradient_accumulation_steps=1))
    trainer._generate = lambda prompts: ([[1]] * n, [[2, 3]] * n, None, ["c"] * n, None, {}, None, None)
    trainer._calculate_rewards = lambda *a: table
    return trainer._generate_and_score_completions([{"prompt": "q"}] * n)["advantages"]


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_advantages_match_trl(scale):
    gen = torch.Generator().manual_seed(3)
    rewards = (torch.randint(0, 3, (32,), generator=gen).float() * 0.5).tolist()
    rewards[8:16] = [1.0] * 8  # one zero-std group (exact in floats, so TRL also gives 0)
    ours = outcome_advantages(torch.tensor(rewards), 8, scale)
    theirs = _trl_advantages(rewards, 8, scale)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    assert (ours[8:16] == 0).all() and (theirs[8:16] == 0).all()


def test_zero_std_residue_is_the_documented_difference():
    rewards = [0.1] * 7 + [1.0] + [0.0] * 6
    ours = outcome_advantages(torch.tensor(rewards), 7)
    theirs = _trl_advantages(rewards, 7, "group")
    assert (ours[:7] == 0).all()
    assert theirs[:7].abs().max() > 1e-6  # TRL: float residue / (0-ish std + 1e-4)
    torch.testing.assert_close(ours[7:], theirs[7:], rtol=1e-5, atol=1e-6)


def test_per_reward_matches_trl_normalize_then_sum_up_to_its_batch_rescale():
    # TRL's normalize_then_sum (GDPO) normalises each reward in its group, sums with the weights,
    # and then standardises the sum over the batch; ours stops at the weighted sum (the seed chapter's
    # formula; with one reward it is exactly GRPO). One batch standardisation apart, they agree.
    gen = torch.Generator().manual_seed(4)
    correct = torch.randint(0, 2, (32,), generator=gen).float()
    fmt = torch.randint(0, 2, (32,), generator=gen).float()
    correct[0:8] = 1.0  # a group where only the format bonus varies
    fmt[8:16] = 0.0  # and one where only correctness does
    table = torch.stack([correct, fmt], dim=1)
    ours = per_reward_advantages(table, [1.0, 0.1], 8)
    theirs = _trl_advantages(table.tolist(), 8, "group", "normalize_then_sum", (1.0, 0.1))
    rescaled = (ours - ours.mean()) / (ours.std() + 1e-4)
    torch.testing.assert_close(rescaled, theirs, rtol=1e-5, atol=1e-5)
    assert (ours[0:8].abs() < 0.25).all()  # the format-only group moves by a tenth, not a whole unit
