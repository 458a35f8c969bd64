"""Mixed precision (pipeline/grpo/precision.py): with model.dtype=bfloat16 the trainer keeps
float32 master weights and runs its forwards under autocast, so a DeepSeekMath-sized learning
rate (1e-6) still moves the weights; pure bfloat16 training (train.master_dtype=model) loses
most of those updates to rounding, which is why it is not the default."""

from __future__ import annotations

import torch

from pipeline.grpo import trainer
from pipeline.grpo.components import build_policy
from pipeline.grpo.run_log import read_metrics
from pipeline.models import load_policy
from tests.test_trainer import run_cfg

SMALL_LR = ["train.steps=1", "model.dtype=bfloat16", "train.lr=1e-6", "train.beta=0.04", "train.save_every=0"]


def _changed_fraction(before_dir, after_dir, dtype: str) -> float:
    before, _ = load_policy(str(before_dir), dtype)
    after, _ = load_policy(str(after_dir), dtype)
    pairs = list(zip(before.state_dict().values(), after.state_dict().values(), strict=True))
    return sum(int((a != b).sum()) for a, b in pairs) / sum(a.numel() for a, _ in pairs)


def test_bf16_policy_keeps_float32_master_weights(tiny_setup):
    cfg = run_cfg(tiny_setup, "mp-fp32", *SMALL_LR)
    policy, _, ref = build_policy(cfg, None)
    assert {p.dtype for p in policy.parameters()} == {p.dtype for p in ref.parameters()} == {torch.float32}
    run_dir = trainer.train(cfg)
    row = read_metrics(run_dir)[0]
    assert row["grad_norm"] > 0 and abs(row["kl"]) < 1e-7  # step 1: policy == reference, same autocast path
    assert _changed_fraction(cfg.model.name_or_path, run_dir / "final", "float32") > 0.9


def test_pure_bf16_training_loses_small_updates(tiny_setup):
    cfg = run_cfg(tiny_setup, "mp-bf16", *SMALL_LR, "train.master_dtype=model")
    policy, _, _ = build_policy(cfg, None)
    assert {p.dtype for p in policy.parameters()} == {torch.bfloat16}
    run_dir = trainer.train(cfg)
    assert read_metrics(run_dir)[0]["grad_norm"] > 0
    assert _changed_fraction(cfg.model.name_or_path, run_dir / "final", "bfloat16") < 0.2
