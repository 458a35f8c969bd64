"""The run config: YAML + dotted overrides, strict errors that name the key."""

import dataclasses
import subprocess
import sys

import pytest

from pipeline.config import ConfigError, RunConfig, describe, load_run_config, save_config
from pipeline.config.loader import field_docs
from pipeline.config.schema import TrainConfig


def test_overrides_are_typed():
    cfg = load_run_config(None, ["train.lr=3e-4", "rollout.group_size=4", "train.mask_truncated=true",
                                 "reward.weights={correct: 1, format: 0.5}", "data.synth_ops=+,*"])
    assert cfg.train.lr == pytest.approx(3e-4) and isinstance(cfg.rollout.group_size, int)
    assert cfg.train.mask_truncated is True
    assert cfg.reward.weights == {"correct": 1.0, "format": 0.5}
    assert cfg.data.synth_ops == ["+", "*"]


@pytest.mark.parametrize("override, fragment", [
    ("train.lrr=1", "train.lrr"),
    ("train.lr=fast", "train.lr"),
    ("rollout.engine=tgi", "'hf', 'hf_process', 'vllm'"),
    ("train.steps=2.5", "train.steps"),
    ("nosuchsection.x=1", "nosuchsection"),
    ("train=3", "train"),
])
def test_bad_overrides_name_the_key(override, fragment):
    with pytest.raises(ConfigError) as e:
        load_run_config(None, [override])
    assert fragment in str(e.value) and "\n" not in str(e.value)


def test_yaml_file_and_roundtrip(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: x\ntrain:\n  steps: 7\n  beta: 0.0\n")
    cfg = load_run_config(path, ["train.steps=9"])
    assert (cfg.name, cfg.train.steps, cfg.train.beta) == ("x", 9, 0.0)
    save_config(cfg, tmp_path / "out" / "config.yaml")
    assert load_run_config(tmp_path / "out" / "config.yaml") == cfg


def test_yaml_unknown_key(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  stepz: 7\n")
    with pytest.raises(ConfigError, match="train.stepz"):
        load_run_config(path)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_run_config(tmp_path / "nope.yaml")


def test_every_field_is_documented():
    undocumented = [line for line in describe(RunConfig) if line.rstrip().endswith("):")]
    assert undocumented == []
    assert "KL coefficient" in field_docs(TrainConfig)["beta"]


def test_shipped_configs_load():
    from pathlib import Path
    for path in sorted(Path("configs").glob("*.yaml")):
        load_run_config(path)


def test_cli_reports_bad_key_in_one_line():
    out = subprocess.run([sys.executable, "-m", "pipeline", "data", "train.lrr=1"],
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "train.lrr" in out.stderr


@pytest.mark.parametrize("overrides, fragment", [
    (["train.advantage=process", "train.kl_in=reward"], "train.kl_in=reward"),
    (["rollout.group_size=1"], "rollout.group_size"),
    (["train.num_iterations=0"], "train.num_iterations"),
    (["model.lora=true", "train.ref_reset_every=5"], "train.ref_reset_every"),
    (["data.datasets=[gsm8k, mmlu]"], "data.datasets"),
    (["data.synth_ops=[^]"], "data.synth_ops"),
    (["model.tiny_heads=8"], "head_dim"),
    (["reward.weights={corect: 1.0}"], "reward.weights"),
    (["stages=[train, deploy]"], "stages"),
    (["eval.n_samples=2", "eval.temperature=0"], "eval.n_samples"),
    (["rollout.tis_cap=2.0", "rollout.top_p=0.9"], "rollout.tis_cap=2"),
    (["rollout.tis_cap=2.0", "rollout.top_k=50"], "rollout.tis_cap=2"),
    (["threads=-1"], "threads"),
    (["data.synth_distractors=-1"], "data.synth_distractors"),
    (["data.synth_longer_size=-5"], "data.synth_longer_size"),
    (["cpu_isa=neon"], "'avx2'"),
    (["sft.corrupt_mode=typo"], "'slip', 'carry'"),
])
def test_bad_values_are_refused_when_loading(overrides, fragment):
    """Value rules (checks.py) run when the config is built: one line naming the key."""
    with pytest.raises(ConfigError) as e:
        load_run_config(None, overrides)
    assert fragment in str(e.value) and "\n" not in str(e.value)


def test_tis_only_with_untruncated_sampling():
    """TIS divides the engine's processed log-probs (top-p/top-k renormalised) by the trainer's,
    which apply the temperature only: allowed when they describe the same distribution."""
    assert load_run_config(None, ["rollout.tis_cap=2.0", "rollout.temperature=0.7"]).rollout.tis_cap == 2.0
    assert load_run_config(None, ["rollout.top_p=0.9", "rollout.top_k=20"]).rollout.top_k == 20  # TIS off
    cfg = load_run_config(None, ["rollout.tis_cap=2.0"])
    with pytest.raises(ConfigError, match="rollout.top_p=1 and rollout.top_k=0"):
        dataclasses.replace(cfg.rollout, top_p=0.95)


def test_checks_see_the_final_values(tmp_path):
    """A section is built once from the YAML and the overrides together, so an override may
    repair a YAML combination; a stage's dataclasses.replace is checked too."""
    path = tmp_path / "c.yaml"
    path.write_text("eval:\n  n_samples: 4\n  temperature: 0.0\n  ks: [1]\n")
    assert load_run_config(path, ["eval.temperature=1.0"]).eval.n_samples == 4
    cfg = load_run_config(None, ["train.kl_in=reward", "reward.weights={tests.helpers:digit_fraction: 1.0}"])
    with pytest.raises(ConfigError, match="train.kl_in=reward"):
        dataclasses.replace(cfg.train, advantage="process")
