"""FSDP2 with colocated vLLM on CPU (`train.fsdp=true rollout.engine=vllm` under torchrun, gloo).

Every rank takes part in gathering the full weights after each optimizer step and loads them
into its own tensor-parallel-1 engine (LoRA merged from the gathered tensors). Two sharded ranks
must sample the same completions, log the same metrics and end with the same weights as one
unsharded process with the same rollout.seed_block, and every rank's engine must sample from the
current policy at every step (`tis/max_abs_delta` < 1e-3). The LoRA run also uses dynamic
sampling, whose refill rounds give the ranks unequal numbers of generate calls (fine: vLLM's
generate is no collective).
"""

from __future__ import annotations

import pytest
import torch

from pipeline.config import load_run_config
from pipeline.grpo import trainer
from pipeline.grpo.run_log import read_metrics
from tests.dist_runs import assert_same_weights, torchrun
from tests.test_vllm_distributed import _args, assert_same_run

pytestmark = pytest.mark.vllm


def _fsdp_torchrun(args) -> None:
    out = torchrun([*args, "train.fsdp=true"])
    assert "sharded over 2 ranks" in out, out[-3000:]  # FSDP really ran


def test_fsdp_vllm_ranks_match_one_process(tiny_setup):
    one = trainer.train(load_run_config(None, _args(tiny_setup, "vfsdp-one", "train.steps=2")))
    _fsdp_torchrun(_args(tiny_setup, "vfsdp-two", "train.steps=2"))
    two = one.parent / "vfsdp-two"
    assert_same_run(two, one)
    assert_same_weights(two / "final", one / "final", base=load_run_config(None, tiny_setup[0]).model.name_or_path)


def test_fsdp_vllm_lora_with_dynamic_sampling_matches_one_process(tiny_setup):
    from peft import PeftModel

    from pipeline.models import load_policy

    extra = ("train.steps=2", "model.lora=true", "model.lora_r=4", "train.lr=1e-2", "rollout.seed_block=1",
             "train.dynamic_sampling=true", "train.max_resample_rounds=3")
    one = trainer.train(load_run_config(None, _args(tiny_setup, "vfsdp-lora-one", *extra)))
    # precondition (deterministic): groups were dropped and refilled, and the rounds did not run out
    assert all(r["zero_std_frac"] > 0 and r["groups"] == 4 for r in read_metrics(one))
    _fsdp_torchrun(_args(tiny_setup, "vfsdp-lora-two", *extra))
    two = one.parent / "vfsdp-lora-two"
    assert_same_run(two, one)

    def adapter(path):
        base, _ = load_policy(load_run_config(None, tiny_setup[0]).model.name_or_path)
        model = PeftModel.from_pretrained(base, str(path))
        return torch.cat([p.flatten() for n, p in model.named_parameters() if "lora_B" in n])

    got, want = adapter(two / "final"), adapter(one / "final")
    assert want.abs().sum() > 0  # the adapter trained, so the step-2 engines needed the merged weights
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
