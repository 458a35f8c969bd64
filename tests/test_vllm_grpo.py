"""Two GRPO steps with rollout.engine=vllm on the tiny model: the loop runs, writes metrics, and
the engine/trainer log-prob mismatch stays at float32 noise after each weight sync (a missed or
wrong sync would show up as a large tis/max_abs_delta at step 2)."""

import pytest
import torch

from pipeline.config import load_run_config
from pipeline.grpo import trainer
from pipeline.grpo.run_log import read_metrics
from pipeline.models import load_policy

pytestmark = pytest.mark.vllm

FAST = ["train.questions_per_step=3", "rollout.group_size=4", "rollout.max_new_tokens=12",
        "train.micro_batch_size=6", "train.lr=1e-3", "train.save_every=0",
        "reward.weights={tests.helpers:digit_fraction: 1.0, tests.helpers:char_count: 0.1, format: 0.1}",
        "rollout.engine=vllm", "rollout.vllm_max_model_len=512", "rollout.tis_cap=2.0"]


def test_two_grpo_steps_with_vllm(tiny_setup):
    overrides, _ = tiny_setup
    cfg = load_run_config(None, [*overrides, *FAST, "name=vllm2", "train.steps=2"])
    run_dir = trainer.train(cfg)
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["completion_len/mean"] > 0 and row["grad_norm"] > 0
        assert row["tis/max_abs_delta"] < 1e-3, row  # engine == trainer policy up to float noise
        assert 0.5 < row["tis/mean_weight"] <= 2.0
    before, _ = load_policy(cfg.model.name_or_path)
    after, _ = load_policy(str(run_dir / "final"))
    b, a = before.state_dict(), after.state_dict()
    assert sum(not torch.equal(b[k], a[k]) for k in b) > len(b) // 2
