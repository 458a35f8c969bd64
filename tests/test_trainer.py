"""The GRPO loop on a tiny local model: it updates parameters, records the run, resumes exactly,
and stops cleanly on a non-finite loss."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from pipeline import faults
from pipeline.config import load_run_config
from pipeline.grpo import trainer
from pipeline.grpo.run_log import read_metrics
from pipeline.models import load_policy

# An untrained model never writes a correct answer; the digit-share reward varies within every
# group, so each step has a real gradient.
FAST = ["train.questions_per_step=3", "rollout.group_size=4", "rollout.max_new_tokens=12",
        "train.micro_batch_size=6", "train.lr=1e-3", "train.save_every=1",
        "reward.weights={tests.helpers:digit_fraction: 1.0, format: 0.1}"]


def run_cfg(setup, name, *extra):
    overrides, _ = setup
    return load_run_config(None, [*overrides, *FAST, f"name={name}", *extra])


def _params(path):
    model, _ = load_policy(str(path))
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_two_steps_update_parameters_and_write_metrics(tiny_setup):
    cfg = run_cfg(tiny_setup, "two", "train.steps=2")
    run_dir = trainer.train(cfg)
    before, after = _params(cfg.model.name_or_path), _params(run_dir / "final")
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert len(changed) > len(before) // 2
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2]
    for key in ("reward/mean", "reward/correct", "kl", "clip_frac_low", "grad_norm", "lr", "zero_std_frac",
                "completion_len/mean", "truncated_frac", "tokens_per_s", "time/rollout", "time/update"):
        assert key in rows[0], key
    assert (run_dir / "config.yaml").is_file() and (run_dir / "curves.png").is_file()
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert samples and {"prompt", "completion", "rewards", "reward", "num_tokens", "finish_reason"} <= set(samples[0])


def _comparable(row):
    return {k: v for k, v in row.items() if not k.startswith("time/") and k != "tokens_per_s"}


def test_resume_after_kill_reproduces_next_step(tiny_setup):
    straight = trainer.train(run_cfg(tiny_setup, "straight", "train.steps=3"))
    assert any(r["grad_norm"] > 0 for r in read_metrics(straight))  # the steps really trained
    overrides, _ = tiny_setup
    args = [*overrides, *FAST, "name=killed", "train.steps=3"]
    env = {**os.environ, faults.CRASH_AFTER_STEP: "2"}
    proc = subprocess.run([sys.executable, "-m", "pipeline", "train", *args], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]  # killed by SIGKILL right after step 2
    killed_dir = straight.parent / "killed"
    assert [r["step"] for r in read_metrics(killed_dir)] == [1, 2]
    trainer.train(load_run_config(None, args))  # resume=auto picks up checkpoints/step_2
    resumed = read_metrics(killed_dir)
    assert [r["step"] for r in resumed] == [1, 2, 3]
    assert _comparable(resumed[2]) == _comparable(read_metrics(straight)[2])
    assert torch.equal(torch.cat([p.flatten() for p in _params(killed_dir / "final").values()]),
                       torch.cat([p.flatten() for p in _params(straight / "final").values()]))


def test_non_finite_loss_stops_with_message(tiny_setup, monkeypatch):
    real = trainer.policy_loss

    def nan_loss(*args, **kwargs):
        loss, stats = real(*args, **kwargs)
        return loss * float("nan"), stats

    monkeypatch.setattr(trainer, "policy_loss", nan_loss)
    cfg = run_cfg(tiny_setup, "nan", "train.steps=1")
    assert trainer.main(cfg) == 1
    assert not (trainer.Path(cfg.output_dir) / "nan" / "final").exists()


def test_lora_trains_only_the_adapter(tiny_setup):
    cfg = run_cfg(tiny_setup, "lora", "train.steps=1", "model.lora=true", "model.lora_r=4",
                  "model.lora_target_modules=q_proj,v_proj")
    run_dir = trainer.train(cfg)
    assert (run_dir / "final" / "adapter_config.json").is_file()
    from safetensors.torch import load_file
    adapter = load_file(run_dir / "final" / "adapter_model.safetensors")
    assert adapter and all("lora_" in k for k in adapter)
    assert any(float(v.abs().sum()) > 0 for k, v in adapter.items() if "lora_B" in k)


@pytest.mark.parametrize("extra", [
    ["train.advantage=process"],
    ["train.num_iterations=2", "train.kl_in=reward"],
    ["train.loss_type=dr_grpo", "train.beta=0", "train.importance_level=sequence"],
    ["train.dynamic_sampling=true", "train.max_resample_rounds=1", "train.loss_type=dapo"],
])
def test_variants_run(tiny_setup, extra):
    cfg = run_cfg(tiny_setup, "variant-" + "-".join(e.split("=")[0].split(".")[1] for e in extra),
                  "train.steps=1", *extra)
    run_dir = trainer.train(cfg)
    row = read_metrics(run_dir)[0]
    assert row["grad_norm"] >= 0 and "loss" in row
