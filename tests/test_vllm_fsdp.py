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

import subprocess
import sys

import pytest
import torch

from pipeline.config import load_run_config
from pipeline.grpo import trainer
from pipeline.grpo.run_log import read_metrics
from tests.test_vllm_distributed import NOT_COMPARED, ROOT, _args, _completions, _env, _flat

pytestmark = pytest.mark.vllm


def _fsdp_torchrun(args) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "pipeline", "train", *args, "train.fsdp=true"]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "sharded over 2 ranks" in proc.stdout, proc.stdout[-3000:]  # FSDP really ran


def _assert_same_run(two, one) -> None:
    """Same completions and metrics (float tolerance) at every step, engines in sync with the policy."""
    rows_one, rows_two = read_metrics(one), read_metrics(two)
    assert [r["step"] for r in rows_two] == [r["step"] for r in rows_one] == [1, 2]
    for step, (got, want) in enumerate(zip(rows_two, rows_one, strict=True), start=1):
        assert len(_completions(two, step)) == 16
        assert _completions(two, step) == _completions(one, step)  # same samples, same order
        for k in want:
            if k.startswith(NOT_COMPARED):
                continue
            if isinstance(want[k], float):
                assert got[k] == pytest.approx(want[k], rel=1e-4, abs=1e-6), (step, k)
            else:
                assert got[k] == want[k], (step, k)
        # rank-averaged max gap; an engine that missed a sync (or got wrong LoRA merges) adds ~1e-2+
        for row in (got, want):
            assert row["tis/max_abs_delta"] < 1e-3, (step, row["tis/max_abs_delta"])
            assert row["grad_norm"] > 0


def test_fsdp_vllm_ranks_match_one_process(tiny_setup):
    one = trainer.train(load_run_config(None, _args(tiny_setup, "vfsdp-one", "train.steps=2")))
    _fsdp_torchrun(_args(tiny_setup, "vfsdp-two", "train.steps=2"))
    two = one.parent / "vfsdp-two"
    _assert_same_run(two, one)
    before = _flat(load_run_config(None, tiny_setup[0]).model.name_or_path)
    after_one, after_two = _flat(one / "final"), _flat(two / "final")
    assert not torch.allclose(before, after_one)
    torch.testing.assert_close(after_two, after_one, rtol=1e-4, atol=1e-5)


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
    _assert_same_run(two, one)

    def adapter(path):
        base, _ = load_policy(load_run_config(None, tiny_setup[0]).model.name_or_path)
        model = PeftModel.from_pretrained(base, str(path))
        return torch.cat([p.flatten() for n, p in model.named_parameters() if "lora_B" in n])

    got, want = adapter(two / "final"), adapter(one / "final")
    assert want.abs().sum() > 0  # the adapter trained, so the step-2 engines needed the merged weights
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
