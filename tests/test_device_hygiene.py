"""Device hygiene without a GPU: every tensor of a GRPO update lives on the policy's device.

On a GPU box the first training step would crash if a mask, reward, advantage or engine
log-prob stayed on the host. Two ways to see that on a CPU box:

1. The pure functions (losses, advantages, TIS, KL-in-reward) with every input on ``meta``: they
   must build nothing on the host and read no values (``meta`` has none).
2. A whole update (``make_batch`` + ``optimise`` + ``step_metrics``) under ``HostTags``
   (tests/device_tags.py), which keeps tensors made from Python data apart from the policy's
   device and raises on any op that mixes them, for every config that changes the tensors:
   outcome and process advantages, beta > 0, kl_in=reward, mu = 2, TIS, LoRA, bf16 autocast with
   float32 master weights. Generation is replaced by an engine that replays recorded completions
   (reference solutions, half of them made wrong) with engine log-probs, so TIS has inputs.
"""

from __future__ import annotations

import dataclasses
import math
import re

import pytest
import torch

from pipeline.config import load_run_config
from pipeline.grpo import trainer
from pipeline.grpo.advantages import outcome_advantages, process_advantages, reward_with_kl
from pipeline.grpo.batch import make_batch
from pipeline.grpo.losses import policy_loss
from pipeline.rollout.base import RolloutEngine, Sample
from pipeline.rollout.tis import tis_weights
from tests.device_tags import DeviceMix, HostTags

META = torch.device("meta")


def _meta(*shape, dtype=torch.float32):
    return torch.empty(shape, dtype=dtype, device=META)


# --- the tag mode itself: it catches what CUDA would refuse and allows what CUDA allows ----------


def test_host_tags_catch_mixes_and_allow_moves():
    weight = torch.ones(3)  # made before the mode: on the policy's device
    with HostTags() as tags:
        data = torch.tensor([1.0, 2.0, 3.0])
        assert tags.on_host(data) and not tags.on_host(weight)
        with pytest.raises(DeviceMix, match="mixes host tensors"):
            weight * data
        with pytest.raises(DeviceMix):
            torch.where(data > 1, weight, 0.0)
        moved = data.to(weight.device)
        assert not tags.on_host(moved) and torch.equal((moved * weight).cpu(), data)
        assert not tags.on_host(torch.zeros(2, device=weight.device))
        assert tags.on_host(torch.zeros(2, device=data.device))  # a device read from a host tensor
        assert tags.on_host((weight * 2).cpu()) and not tags.on_host(weight.new_zeros(2))
        assert not tags.on_host(weight * torch.tensor(2.0))  # a 0-dim host tensor is a scalar
        with pytest.raises(DeviceMix):
            torch.stack([weight.sum(), torch.tensor(2.0)])  # ... but not in stack / cat
        assert not tags.on_host(weight[torch.tensor([0, 2])])  # host index into a device tensor
        weight[0] = data[1]  # copies cross devices
        assert float(weight.sum()) == 4.0 and tags.checked > 5 and tags.made_on_host > 5


# --- pure functions on meta -----------------------------------------------------------------------


@pytest.mark.parametrize("kw", [
    {},  # grpo, beta > 0
    {"loss_type": "dapo", "num_tokens": 40.0, "num_rows": 8},
    {"loss_type": "dr_grpo", "max_completion_length": 5, "beta": 0.0},
    {"importance_level": "sequence", "kl_estimator": "k1"},
])
@pytest.mark.parametrize("per_token", [False, True])
def test_policy_loss_on_meta(kw, per_token):
    n, t = 4, 5
    logp = _meta(n, t).requires_grad_()
    adv = _meta(n, t) if per_token else _meta(n)
    loss, stats = policy_loss(logp, _meta(n, t), _meta(n, t), adv, _meta(n, t), is_weights=_meta(n, t), **kw)
    assert loss.device == META and loss.shape == ()
    assert all(v.device == META and v.shape == () for v in stats.values())
    loss.backward()
    assert logp.grad.device == META


def test_meta_raises_on_a_mix_that_cuda_would_refuse():
    """What the issue saw: log-probs on the policy's device, the mask on the host."""
    with pytest.raises(RuntimeError, match="device"):
        policy_loss(_meta(2, 3), _meta(2, 3), None, _meta(2), torch.ones(2, 3), beta=0.0)


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_outcome_advantages_on_meta(scale):
    adv = outcome_advantages(_meta(8), 4, scale)
    assert adv.device == META and adv.shape == (8,)


def test_process_advantages_built_on_the_given_device():
    adv = process_advantages([[1.0, 0.0], [0.5], [], [1.0]], [[1, 3], [2], [], [0]], [5, 3, 2, 1], 2, device=META)
    assert adv.device == META and adv.shape == (4, 5)
    on_cpu = process_advantages([[1.0, 0.0], [0.5]], [[1, 3], [2]], [5, 3], 2, device="cpu")
    assert on_cpu.device.type == "cpu" and on_cpu.shape == (2, 5)


def test_reward_with_kl_and_tis_on_meta():
    out = reward_with_kl(_meta(3), _meta(3, 4), _meta(3, 4), _meta(3, 4), beta=0.1)
    assert out.device == META and out.shape == (3,)
    w, stats = tis_weights(_meta(3, 4), _meta(3, 4), _meta(3, 4), cap=2.0)
    assert w.device == META and w.shape == (3, 4)
    assert stats and all(v.device == META for v in stats.values())


# --- a whole update under HostTags ---------------------------------------------------------------


class RecordedEngine(RolloutEngine):
    """Replays recorded completions instead of sampling: for each prompt, the problem's reference
    solution, every second one with a wrong final answer and a wrong last step (so rewards and
    step rewards vary within a group), cut at ``max_new_tokens``; engine log-probs are fixed
    numbers near the policy's, so TIS weights vary and some hit the cap."""

    def __init__(self, problems: list[dict], tokenizer):
        self.by_question = {p["question"]: p for p in problems}
        self.tok = tokenizer

    def _problem(self, prompt: str) -> dict:
        return next(p for q, p in self.by_question.items() if q in prompt)

    def generate(self, prompts, n, params):
        out = []
        for prompt in prompts:
            solution = self._problem(prompt)["solution"]
            samples = []
            for j in range(n):
                text = solution if j % 2 == 0 else re.sub(r"\d+$", lambda m, j=j: str(int(m.group()) + 1 + j),
                                                          solution)
                ids = self.tok(text, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
                reason = "length" if len(ids) > params.max_new_tokens else "stop"
                ids = ids[:params.max_new_tokens]
                samples.append(Sample(prompt=prompt, prompt_ids=self.tok(prompt, add_special_tokens=False)["input_ids"],
                                      completion=self.tok.decode(ids, skip_special_tokens=True), completion_ids=ids,
                                      finish_reason=reason,
                                      logprobs=[-6.5 + 0.4 * ((k * 7 + j) % 5) for k in range(len(ids))]))
            out.append(samples)
        return out

    def sync_weights(self, model):
        pass


VARIANTS = {
    "outcome-beta": [],
    "process-beta-mu2": ["train.advantage=process", "train.num_iterations=2"],
    "kl-in-reward": ["train.kl_in=reward"],
    "tis-minibatches-dapo": ["rollout.tis_cap=2.0", "train.mini_batches=2", "train.loss_type=dapo"],
    "lora": ["model.lora=true", "model.lora_r=4", "model.lora_target_modules=q_proj,v_proj"],
    "bf16-autocast-fp32-master": ["model.dtype=bfloat16", "train.master_dtype=float32"],
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_update_keeps_every_tensor_on_the_policy_device(tiny_setup, tmp_path, name):
    overrides, _ = tiny_setup
    cfg = load_run_config(None, [*overrides, "device=cpu", f"name=hygiene-{name}", "train.questions_per_step=4",
                                 "rollout.group_size=4", "rollout.max_new_tokens=24", "train.micro_batch_size=6",
                                 "train.lr=1e-3", "train.beta=0.04", "reward.workers=1", *VARIANTS[name]])
    state, _ = trainer._build_state(cfg, None, None)
    state = dataclasses.replace(state, engine=RecordedEngine(state.sampler.problems, state.tokenizer))
    before = [p.detach().clone() for p in state.policy.parameters() if p.requires_grad]
    timer: dict = {}
    with HostTags() as tags:
        batch = make_batch(cfg, state, timer)
        update = trainer.optimise(cfg, state, batch, 1, tmp_path, timer)
        metrics = trainer.step_metrics(cfg, batch, update, timer)
    on_device = [*vars(batch.packed).values(), batch.advantages, batch.old_logp, batch.ref_logp,
                 batch.importance_weights]
    assert not [t.shape for t in on_device if isinstance(t, torch.Tensor) and tags.on_host(t)]
    assert tags.made_on_host > 0 and tags.checked > 500  # it saw host data and checked the update
    assert all(math.isfinite(v) for v in metrics.values() if isinstance(v, float))
    if batch.ref_logp is None:  # KL not in the loss (kl_in=reward): its loss statistic would be a constant 0
        assert "kl" not in metrics
    elif cfg.train.updates_per_step == 1:  # one optimizer step: the policy still equals the reference
        assert metrics["kl"] == 0.0
    if "tis" in name:
        assert batch.importance_weights is not None and 0 < metrics["tis/clipped_frac"] < 1
    if "process" in name:
        assert batch.advantages.dim() == 2 and batch.old_logp is not None
    after = [p.detach() for p in state.policy.parameters() if p.requires_grad]
    assert any(not torch.equal(a, b) for a, b in zip(before, after))
