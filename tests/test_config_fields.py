"""Every key the schema holds refuses a bad value with one line naming it, and the choice lists
the config names agree with the code that implements them.

The table ``BAD`` has one bad value (or a bad combination, its first override the key's own) for
every leaf field of ``RunConfig``; the test walks the schema's dataclasses, so a new field without
an entry here fails ``test_every_field_has_a_bad_value``.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from typing import get_args

import pytest

from pipeline.config import ConfigError, RunConfig, load_run_config
from pipeline.config import schema


def leaf_fields(cls: type = RunConfig, prefix: str = "") -> dict[str, object]:
    """Dotted key -> type of every non-section field of ``cls``."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            out.update(leaf_fields(hints[f.name], f"{prefix}{f.name}."))
        else:
            out[f"{prefix}{f.name}"] = hints[f.name]
    return out


BAD: dict[str, str | list[str]] = {
    "name": "runs/x",
    "output_dir": "",
    "seed": "-1",
    "device": "tpu",
    "stages": "[train, deploy]",
    "threads": "-1",
    "deterministic": "maybe",
    "cpu_isa": "neon",
    "data.source": "ftp",
    "data.raw_dir": "",
    "data.prepared_dir": " data/prepared",
    "data.datasets": "[gsm8k, mmlu]",
    "data.dedup_math_train": "maybe",
    "data.synth_train_size": "0",
    "data.synth_test_size": "0",
    "data.synth_min_steps": "0",
    "data.synth_max_steps": "0",
    "data.synth_max_number": "1",
    "data.synth_ops": "[+, +]",
    "data.synth_max_factor": "1",
    "data.synth_max_value": "10",
    "data.synth_seed": "-3",
    "data.synth_distractors": "-1",
    "data.synth_longer_size": "-5",
    "model.name_or_path": "",
    "model.dtype": "int8",
    "model.lora": "maybe",
    "model.lora_r": "0",
    "model.lora_alpha": "0",
    "model.lora_dropout": "1.0",
    "model.lora_target_modules": "[]",
    "model.gradient_checkpointing": "maybe",
    "model.tiny_dir": "",
    "model.tiny_hidden_size": "100",
    "model.tiny_layers": "0",
    "model.tiny_heads": "8",
    "model.tiny_kv_heads": "3",
    "model.tiny_intermediate_size": "0",
    "model.tiny_tie_embeddings": "maybe",
    "model.tiny_max_positions": "8",
    "model.tiny_vocab_size": "10",
    "prompt.template": "gsm8kk",
    "prompt.chat": "maybe",
    "prompt.few_shot": "-1",
    "rollout.engine": "tgi",
    "rollout.group_size": "1",
    "rollout.max_new_tokens": "0",
    "rollout.temperature": "-0.5",
    "rollout.top_p": "0",
    "rollout.top_k": "-1",
    "rollout.batch_size": "0",
    "rollout.gpu_memory_utilization": "1.5",
    "rollout.vllm_max_model_len": "0",
    "rollout.vllm_enforce_eager": "maybe",
    "rollout.vllm_sleep_mode": "maybe",
    "rollout.tis_cap": ["rollout.tis_cap=2.0", "rollout.top_p=0.9"],
    "rollout.is_correction": "mis",  # without rollout.tis_cap
    "rollout.is_level": "sequence",
    "rollout.server_host": "http://localhost",
    "rollout.server_port": "70000",
    "rollout.server_timeout_s": "0",
    "rollout.server_token_file": " token.txt",
    "rollout.server_allow_no_token": ["rollout.server_allow_no_token=true", "rollout.server_host=10.0.0.5"],
    "rollout.server_max_n": "0",
    "rollout.server_max_prompts": "0",
    "rollout.server_max_body_mb": "-1",
    "rollout.server_read_timeout_s": "0",
    "rollout.server_max_connections": "0",
    "rollout.server_max_unauth_connections": "0",
    "rollout.server_auth_timeout_s": "0",
    "rollout.server_batch_window_s": "5",
    "rollout.server_weight_backend": "mpi",
    "rollout.seed_block": "-1",
    "rollout.tools": "[bash]",
    "rollout.max_tool_calls": "0",
    "rollout.tool_output_chars": "8",
    "rollout.tool_timeout_s": "0",
    "rollout.tool_workers": "0",
    "rollout.tool_sandbox_backend": "chroot",
    "rollout.shared_prefill": "maybe",
    "rollout.decode": "fast",
    "rollout.worker_threads": "-1",
    "rollout.worker_timeout_s": "0",
    "reward.weights": "{corect: 1.0}",
    "reward.style": "latex",
    "reward.workers": "0",
    "reward.timeout": "0",
    "reward.audit_sample": "-1",
    "reward.policy": "loose",
    "reward.sandbox_backend": "chroot",
    "reward.truncated_zero": ["reward.truncated_zero=true", "train.advantage=process"],
    "reward.charge_missing_steps": "maybe",
    "reward.prm": "not a model",
    "reward.prm_mix": "average",
    "reward.prm_rule_weight": "1.5",
    "reward.prm_threshold": "0",
    "reward.prm_batch_size": "0",
    "reward.prm_max_tokens": "8",
    "reward.prm_dtype": "int8",
    "train.task": "gsm9k",
    "train.steps": "0",
    "train.questions_per_step": "0",
    "train.micro_batch_size": "0",
    "train.micro_batch_tokens": "-1",
    "train.num_iterations": "0",
    "train.mini_batches": "0",
    "train.lr": "0",
    "train.lr_schedule": "linear",
    "train.warmup_steps": "-1",
    "train.weight_decay": "-0.1",
    "train.adam_betas": "[0.9]",
    "train.max_grad_norm": "-1",
    "train.advantage": "token",
    "train.adv_scale": "max",
    "train.adv_eps": "0",
    "train.adv_norm": ["train.adv_norm=rank", "train.adv_scale=batch"],
    "train.loss_type": "ppo",
    "train.importance_level": "batch",
    "train.clip_low": "1.0",
    "train.clip_high": "-0.2",
    "train.beta": "-0.04",
    "train.kl_estimator": "k4",
    "train.surrogate": ["train.surrogate=vespo", "train.importance_level=sequence"],
    "train.sapo_tau_pos": "0",
    "train.sapo_tau_neg": "-1",
    "train.cispo_cap": "0",
    "train.vespo_k_pos": "-1",
    "train.vespo_lambda_pos": "-0.5",
    "train.vespo_k_neg": "-1",
    "train.vespo_lambda_neg": "-0.5",
    "train.dppo_divergence": "js",
    "train.dppo_delta": "0",
    "train.dppo_topk": "-1",
    "train.kl_in": ["train.kl_in=reward", "train.advantage=process"],
    "train.ref_reset_every": "-1",
    "train.dynamic_sampling": "maybe",
    "train.max_resample_rounds": "-1",
    "train.mask_truncated": "maybe",
    "train.void_turn_filter": "true",  # without rollout.tools
    "train.save_every": "-1",
    "train.keep_checkpoints": "0",
    "train.resume": "nevr",
    "train.eval_every": "-1",
    "train.eval_limit": "-1",
    "train.eval_on_start": "maybe",
    "train.log_samples": "-1",
    "train.report_to": "[auto, wandb]",
    "train.tracker_project": "team/project",
    "train.warn_zero_std_frac": "1.5",
    "train.dist_timeout_s": "0",
    "train.master_dtype": "bfloat16",
    "train.fsdp": "maybe",
    "train.async_staleness": "-1",
    "train.sampling": "hardest",
    "train.retire_epochs": "-1",
    "train.unsolved_keep": "1.5",
    "train.question_pool": "-1",
    "train.max_questions": "-1",
    "train.forward_layout": "packed",
    "train.skip_zero_advantage": "maybe",
    "sft.task": "gsm9k",
    "sft.init": "",
    "sft.output": "",
    "sft.steps": "0",
    "sft.batch_size": "0",
    "sft.lr": "-1e-3",
    "sft.warmup_steps": "-1",
    "sft.corrupt_frac": "1.5",
    "sft.corrupt_mode": "typo",
    "sft.tool_frac": "1.5",
    "sft.eval_limit": "-1",
    "sft.micro_batch_tokens": "-1",
    "sft.processes": "0",
    "eval.model": " model",
    "eval.dataset": "gsm8k+mmlu",
    "eval.split": "tset",
    "eval.extra_splits": "[tset]",
    "eval.limit": "-1",
    "eval.n_samples": "0",
    "eval.temperature": "-1",
    "eval.ks": "[0]",
    "eval.max_new_tokens": "0",
    "eval.compare_without_tools": "true",  # without rollout.tools
    "eval.output_dir": " out",
    "experiment.seeds": "[1, 1]",
    "experiment.workers": "-1",
}


def names_key(message: str, key: str) -> bool:
    """``key`` appears in ``message`` as a whole dotted key (not inside a longer one)."""
    return re.search(rf"(?<![\w.]){re.escape(key)}(?![\w])", message) is not None


def overrides_of(key: str) -> list[str]:
    bad = BAD[key]
    return bad if isinstance(bad, list) else [f"{key}={bad}"]


def test_every_field_has_a_bad_value():
    assert sorted(leaf_fields()) == sorted(BAD), "a field without a bad value here, or an entry for no field"


@pytest.mark.parametrize("key", sorted(BAD))
def test_a_bad_value_is_one_line_naming_the_key(key):
    overrides = overrides_of(key)
    assert overrides[0].startswith(f"{key}=")
    load_run_config(None, overrides[1:])  # the other overrides alone are fine: the key's value is the bad one
    with pytest.raises(ConfigError) as e:
        load_run_config(None, overrides)
    message = str(e.value)
    assert "\n" not in message and names_key(message, key), message


@pytest.mark.parametrize("key", sorted(k for k, tp in leaf_fields().items() if tp is float))
def test_no_number_may_be_nan_or_infinite(key):
    for value in ("nan", "inf"):
        with pytest.raises(ConfigError) as e:
            load_run_config(None, [f"{key}={value}"])
        assert "\n" not in str(e.value) and names_key(str(e.value), key), str(e.value)


def test_choices_hold_when_a_section_is_built_in_code():
    """``Literal`` choices are checked by the section itself, not only by the loader."""
    cfg = load_run_config(None, [])
    with pytest.raises(ConfigError, match=r"prompt.template: 'gsm9k' is not allowed"):
        dataclasses.replace(cfg.prompt, template="gsm9k")
    with pytest.raises(ConfigError, match=r"data.datasets\[1\]: 'mmlu'"):
        dataclasses.replace(cfg.data, datasets=["gsm8k", "mmlu"])


def test_few_shot_needs_a_prepared_dataset():
    """The examples come from a prepared train split: a JSONL file or a mixture has none."""
    for overrides, key in ((["eval.dataset=mine.jsonl"], "eval.dataset"),
                           (["train.task=gsm8k+math", "train.eval_every=5"], "train.task")):
        load_run_config(None, overrides)
        with pytest.raises(ConfigError, match=rf"prompt.few_shot=2 needs {key} to be one prepared dataset"):
            load_run_config(None, [*overrides, "prompt.few_shot=2"])
    no_periodic_eval = load_run_config(None, ["train.task=gsm8k+math", "prompt.few_shot=2"])
    assert no_periodic_eval.prompt.few_shot == 2


def test_bad_stage_options_are_config_errors():
    from pipeline.config.checks import check_options

    cfg = load_run_config(None, ["sft.corrupt_frac=0"])
    for stage, options, fragment in (
            ("plan", {"gpu_mem": 0.0, "ranks": 1, "prompt_tokens": 512}, "--gpu-mem must be > 0"),
            ("plan", {"gpu_mem": 80.0, "ranks": 0, "prompt_tokens": 512}, "--ranks >= 1"),
            ("eval-prm", {"scorer": "judge"}, "--scorer must be one of rules, prm, both"),
            ("eval-prm", {"scorer": "prm"}, "needs reward.prm"),
            ("seed-grid", {"starts": ("corrupted",)}, "same as `clean`")):
        with pytest.raises(ConfigError, match=re.escape(fragment)):
            check_options(cfg, stage, options)
    check_options(cfg, "plan", {"gpu_mem": 80.0, "ranks": 8, "prompt_tokens": 0})
    check_options(cfg, "eval-prm", {"scorer": "rules"})
    check_options(cfg, "seed-grid", {"starts": ("corrupted", "clean")})


def test_choice_lists_agree_with_the_code():
    """Each schema ``Literal`` is the one list of its names; the code that implements them agrees."""
    import sandbox
    from pipeline import cli, prompts
    from pipeline.data import synth
    from pipeline.data.prepare import LICENCES, SOURCES
    from pipeline.data.problems import FEW_SHOT_SOURCE, SYNTH
    from pipeline.grpo import trackers

    datasets = get_args(schema.Dataset)
    assert set(datasets) == {*SOURCES, SYNTH} == set(LICENCES) == set(FEW_SHOT_SOURCE)
    assert set(get_args(schema.Split)) == {split for splits in SOURCES.values() for split in splits} | {synth.LONGER}
    assert get_args(schema.SynthOp) == tuple(synth.PHRASES)
    assert get_args(schema.TemplateName) == tuple(prompts.TEMPLATES)
    assert get_args(schema.Tracker) == tuple(trackers.TRACKERS) == tuple(trackers.PACKAGES)
    assert get_args(schema.SandboxBackend) == ("auto", *sandbox.BACKENDS)
    assert set(get_args(schema.Stage)) <= set(cli.STAGES)
    assert cli.seed_grid_starts() == get_args(schema.WarmStart)
    # names whose code lives where the schema cannot be imported (rewards is standalone; device.py
    # and determinism.py sit beside config on the bottom layer) or that map a name to its numbers
    from pipeline.determinism import ISA_ENV
    from pipeline.plan.report import DTYPE_BYTES
    from rewards.answers.extract import STYLES

    hints = leaf_fields()
    assert get_args(hints["reward.style"]) == STYLES
    assert set(get_args(hints["cpu_isa"])) == {"", *ISA_ENV}
    assert get_args(hints["model.dtype"]) == tuple(DTYPE_BYTES)
    assert {t.style for t in prompts.TEMPLATES.values()} <= set(STYLES)
