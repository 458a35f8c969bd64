"""Value checks of the run config, one function per section plus the cross-section ones.

Types and unknown keys are the loader's job (``loader.py``); this file holds every rule about
values: each ``Literal`` field's choices (the choice lists are the ``Literal``s of ``schema.py``),
the range of every number (and no NaN or infinity anywhere), the shape of every path, name and
host, combinations within a section and across sections, and the stage options that depend on the
config (``check_options``, run by the command before the stage starts). Each section dataclass
calls its check from ``__post_init__``, so a config is checked when it is built, whether by the
loader or by ``dataclasses.replace`` in a stage (TRL checks its ``GRPOConfig`` the same way).
Stages do not check again. Every error is one line that names the key, e.g.
``train.kl_in=reward is implemented for outcome supervision only; ...``.

``check_world`` is the exception: whether ``train.questions_per_step`` splits over the ranks
depends on how many processes torchrun started (``WORLD_SIZE``), so the loader runs it on the
finished config rather than on every construction.
"""

from __future__ import annotations

import dataclasses
import functools
import ipaddress
import math
import os
import re
import typing
from typing import Literal, get_args, get_origin


class ConfigError(ValueError):
    """A bad config key or value; the message is one line naming the key."""


_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")  # owner/name on the Hugging Face Hub
_USER_REWARD = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # package.module:function
_HOST = re.compile(r"^[A-Za-z0-9.:_-]+$")  # a host name or IP address, no scheme, port or path
_NAME = re.compile(r"^[\w][\w.+-]*$")  # a run or project name: one directory name, no path


def _fields(section, prefix: str) -> None:
    """Every ``Literal`` field (or list of them) holds one of its choices, also when the section is
    built in code rather than by the loader; no number is NaN or infinite (in lists and mappings too)."""
    hints = _hints(type(section))
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else [value]
        if any(isinstance(v, float) and not math.isfinite(v) for v in items):
            raise ConfigError(f"{prefix}{f.name} must be a finite number, got {value}")
        many = get_origin(hints[f.name]) is list
        kind = get_args(hints[f.name])[0] if many else hints[f.name]
        choices = get_args(kind) if get_origin(kind) is Literal else ()
        for i, v in enumerate(items if choices else ()):
            if v not in choices:
                raise ConfigError(f"{prefix}{f.name}{f'[{i}]' if many else ''}: {v!r} is not allowed; "
                                  f"choose one of {', '.join(map(repr, choices))}")


@functools.cache
def _hints(cls: type) -> dict:
    return typing.get_type_hints(cls)


def _at_least(section, prefix: str, low, *keys: str) -> None:
    for key in keys:
        if getattr(section, key) < low:
            raise ConfigError(f"{prefix}{key} must be >= {low}, got {getattr(section, key)}")


def _positive(section, prefix: str, *keys: str) -> None:
    for key in keys:
        if not getattr(section, key) > 0:
            raise ConfigError(f"{prefix}{key} must be > 0, got {getattr(section, key)}")


def _fraction(section, prefix: str, *keys: str, low_open: bool = False, high_open: bool = False) -> None:
    """Each key in [0, 1], with 0 (``low_open``) or 1 (``high_open``) left out."""
    for key in keys:
        v = getattr(section, key)
        if not ((0 < v) if low_open else (0 <= v)) or not ((v < 1) if high_open else (v <= 1)):
            span = f"{'(' if low_open else '['}0, 1{')' if high_open else ']'}"
            raise ConfigError(f"{prefix}{key} must lie in {span}, got {v}")


def _path(key: str, value: str, *, empty: bool = False) -> None:
    """A path or hub id: one line, no surrounding spaces; empty only where the key allows it."""
    if not value and empty:
        return
    if not value.strip() or value != value.strip() or any(c in value for c in "\n\r\t\0"):
        raise ConfigError(f"{key}: {value!r} is not a usable path (empty, surrounding spaces or a control character)")


def _task(key: str, task: str) -> None:
    """A prepared dataset name or a JSONL path, or several joined by ``schema.MIX``."""
    _path(key, task)
    names = get_args(_schema().Dataset)
    bad = [part for part in task.split(_schema().MIX) if part not in names and not part.endswith(".jsonl")]
    if bad:
        raise ConfigError(f"{key}: {bad[0]!r} is neither a prepared dataset ({', '.join(names)}) nor a .jsonl file")


def _schema():
    from pipeline.config import schema  # schema imports this module: the choice lists are read on use

    return schema


def check_data(d) -> None:
    _fields(d, "data.")
    _path("data.raw_dir", d.raw_dir)
    _path("data.prepared_dir", d.prepared_dir)
    if not d.synth_ops or len(set(d.synth_ops)) != len(d.synth_ops):
        raise ConfigError(f"data.synth_ops must be a non-empty list of distinct operations, got {d.synth_ops}")
    _at_least(d, "data.", 1, "synth_train_size", "synth_test_size")
    _at_least(d, "data.", 2, "synth_max_number", "synth_max_factor")  # a start value and a * / operand of 2..
    _at_least(d, "data.", 0, "synth_seed")
    if not 1 <= d.synth_min_steps <= d.synth_max_steps:
        raise ConfigError(f"need 1 <= data.synth_min_steps <= data.synth_max_steps, got "
                          f"{d.synth_min_steps} and {d.synth_max_steps}")
    for key in ("synth_distractors", "synth_longer_size"):
        if getattr(d, key) < 0:
            raise ConfigError(f"data.{key} must be >= 0, got {getattr(d, key)}")
    if d.synth_max_value < 2 * d.synth_max_number:
        # then + or - always fits, so every drawn problem can be completed
        raise ConfigError(f"data.synth_max_value={d.synth_max_value} must be at least 2 * data.synth_max_number "
                          f"({2 * d.synth_max_number})")


def check_model(m) -> None:
    _fields(m, "model.")
    _path("model.name_or_path", m.name_or_path)
    _path("model.tiny_dir", m.tiny_dir)
    _at_least(m, "model.", 1, "lora_r", "lora_alpha", "tiny_layers", "tiny_intermediate_size")
    _fraction(m, "model.", "lora_dropout", high_open=True)
    if not m.lora_target_modules or not all(name.strip() for name in m.lora_target_modules):
        raise ConfigError(f"model.lora_target_modules must be a non-empty list of module names, "
                          f"got {m.lora_target_modules}")
    _at_least(m, "model.", 16, "tiny_max_positions")
    _at_least(m, "model.", 64, "tiny_vocab_size")  # the digits, the special tokens and some merges
    hidden, heads, kv = m.tiny_hidden_size, m.tiny_heads, m.tiny_kv_heads
    if heads < 1 or kv < 1 or hidden % heads or heads % kv or hidden // heads < 32:
        # head_dim >= 32: vLLM's CPU attention backend refuses smaller heads
        raise ConfigError(f"need model.tiny_hidden_size % model.tiny_heads == 0, "
                          f"model.tiny_heads % model.tiny_kv_heads == 0 and head_dim = hidden / heads >= 32; "
                          f"got hidden={hidden} heads={heads} kv_heads={kv}")


def check_prompt(p) -> None:
    _fields(p, "prompt.")
    _at_least(p, "prompt.", 0, "few_shot")


def check_rollout(r) -> None:
    _fields(r, "rollout.")
    _at_least(r, "rollout.", 1, "max_new_tokens", "batch_size", "vllm_max_model_len")
    _at_least(r, "rollout.", 0, "temperature", "top_k", "tis_cap")
    _fraction(r, "rollout.", "top_p", "gpu_memory_utilization", low_open=True)
    if r.group_size < 2:
        raise ConfigError("rollout.group_size must be >= 2: GRPO needs a group to compare against")
    if r.seed_block < 0:
        raise ConfigError(f"rollout.seed_block must be >= 0, got {r.seed_block}")
    if r.tis_cap > 0 and (r.top_p < 1 or r.top_k > 0):
        # vLLM's processed log-probs are those of the truncated, renormalised distribution; the
        # trainer's come from logits / temperature only, so their ratio would bias every weight
        raise ConfigError(f"rollout.tis_cap={r.tis_cap:g} needs rollout.top_p=1 and rollout.top_k=0 (got top_p="
                          f"{r.top_p:g}, top_k={r.top_k}): the trainer's log-probs do not apply top-p/top-k, so "
                          "the importance weights would be biased; set rollout.tis_cap=0 or sample untruncated")
    if r.worker_threads < 0 or r.worker_timeout_s <= 0:
        raise ConfigError(f"rollout.worker_threads must be >= 0 and rollout.worker_timeout_s > 0, got "
                          f"{r.worker_threads} and {r.worker_timeout_s:g}")
    check_tools(r)
    if r.decode == "loop" and r.engine not in ("hf", "hf_process"):
        raise ConfigError(f"rollout.decode=loop is the HF engines' decode loop; rollout.engine={r.engine} "
                          "decodes by itself: leave rollout.decode=generate")
    check_server(r)


def check_tools(r) -> None:
    """rollout.tools and its limits (pipeline/rollout/multi_turn.py)."""
    if len(set(r.tools)) != len(r.tools):
        raise ConfigError(f"rollout.tools must not repeat a tool, got {r.tools}")
    _at_least(r, "rollout.", 1, "max_tool_calls", "tool_workers")
    _at_least(r, "rollout.", 16, "tool_output_chars")
    if not 0 < r.tool_timeout_s <= 600:
        raise ConfigError(f"rollout.tool_timeout_s must lie in (0, 600] seconds, got {r.tool_timeout_s:g}")
    if r.tools and r.engine in ("vllm", "vllm_server") and r.vllm_max_model_len <= r.max_new_tokens:
        raise ConfigError(f"rollout.tools on {r.engine}: rollout.vllm_max_model_len ({r.vllm_max_model_len}) must "
                          f"hold the prompt plus rollout.max_new_tokens ({r.max_new_tokens}); raise it")


def check_server(r) -> None:
    """The `mathrl vllm-serve` limits, and the no-token opt-out on loopback only."""
    small = [k for k in ("server_max_n", "server_max_prompts", "server_max_body_mb", "server_max_connections",
                         "server_max_unauth_connections", "server_timeout_s", "server_read_timeout_s",
                         "server_auth_timeout_s") if not getattr(r, k) > 0]
    if small:
        raise ConfigError(f"rollout.{small[0]} must be > 0, got {getattr(r, small[0])}")
    if not 0 <= r.server_batch_window_s <= 1:
        raise ConfigError(f"rollout.server_batch_window_s must lie in [0, 1] seconds, got {r.server_batch_window_s}")
    if not _HOST.match(r.server_host):
        raise ConfigError(f"rollout.server_host must be a host name or IP address (no scheme, port or path), "
                          f"got {r.server_host!r}")
    if not 1 <= r.server_port <= 65535:
        raise ConfigError(f"rollout.server_port must lie in 1..65535, got {r.server_port}")
    _path("rollout.server_token_file", r.server_token_file, empty=True)
    if r.server_allow_no_token and not is_loopback(r.server_host):
        raise ConfigError(f"rollout.server_allow_no_token=true needs a loopback rollout.server_host (127.0.0.1, ::1, "
                          f"localhost), got {r.server_host!r}: a server other machines reach must ask for a token")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_reward(r) -> None:
    import rewards  # light: the checkers load their heavy parts on first use

    _fields(r, "reward.")
    _at_least(r, "reward.", 1, "workers")
    _positive(r, "reward.", "timeout")
    for name in r.weights:
        if name not in rewards.REWARDS and not _USER_REWARD.match(name):
            raise ConfigError(f"reward.weights: unknown reward {name!r}; valid: {', '.join(rewards.REWARDS)}, "
                              "or a function given as package.module:function")
    if r.audit_sample < 0:
        raise ConfigError(f"reward.audit_sample must be >= 0 (0 = off), got {r.audit_sample}")
    if r.policy not in ("strict", "lenient"):
        raise ConfigError(f"reward.policy must be strict or lenient, got {r.policy!r}")
    if not 0 <= r.prm_rule_weight <= 1:
        raise ConfigError(f"reward.prm_rule_weight must lie in [0, 1], got {r.prm_rule_weight}")
    if not 0 < r.prm_threshold <= 1:
        raise ConfigError(f"reward.prm_threshold must lie in (0, 1], got {r.prm_threshold}")
    if r.prm_batch_size < 1 or r.prm_max_tokens < 16:
        raise ConfigError(f"need reward.prm_batch_size >= 1 and reward.prm_max_tokens >= 16, got "
                          f"{r.prm_batch_size} and {r.prm_max_tokens}")
    if r.prm:
        check_model_ref("reward.prm", r.prm)


def check_model_ref(key: str, ref: str) -> None:
    """A model reference is a local directory holding config.json, or a hub id (owner/name)."""
    if os.path.isdir(ref):
        if not os.path.isfile(os.path.join(ref, "config.json")):
            raise ConfigError(f"{key}: {ref} is a directory without config.json (not a saved model)")
    elif not _HUB_ID.match(ref):
        raise ConfigError(f"{key}: {ref!r} is neither a local model directory nor a hub id (owner/name)")


def check_train(t) -> None:
    _fields(t, "train.")
    _task("train.task", t.task)
    _at_least(t, "train.", 1, "steps", "keep_checkpoints")
    _at_least(t, "train.", 0, "warmup_steps", "weight_decay", "max_grad_norm", "clip_high", "beta", "ref_reset_every",
              "max_resample_rounds", "save_every", "eval_every", "eval_limit", "log_samples")
    _positive(t, "train.", "lr", "adv_eps", "dist_timeout_s")
    _fraction(t, "train.", "clip_low", high_open=True)  # 1 - clip_low stays a positive ratio
    _fraction(t, "train.", "warn_zero_std_frac")
    if len(t.adam_betas) != 2 or not all(0 <= b < 1 for b in t.adam_betas):
        raise ConfigError(f"train.adam_betas must be two numbers in [0, 1), got {t.adam_betas}")
    if t.resume not in ("auto", "never") and not os.path.isdir(t.resume):
        raise ConfigError(f"train.resume must be auto, never or an existing checkpoint directory, got {t.resume!r}")
    if not _NAME.match(t.tracker_project):
        raise ConfigError(f"train.tracker_project must be a plain name (letters, digits, . _ + -), "
                          f"got {t.tracker_project!r}")
    alone = [name for name in ("auto", "none") if name in t.report_to and len(t.report_to) > 1]
    if alone:
        raise ConfigError(f"train.report_to: {alone} must stand alone; give any of "
                          f"{', '.join(get_args(_schema().Tracker))}, or [auto] (TensorBoard if installed), "
                          "or [] for metrics.jsonl only")
    if t.advantage == "process" and t.kl_in == "reward":
        raise ConfigError("train.kl_in=reward is implemented for outcome supervision only; "
                          "use train.kl_in=loss with train.advantage=process")
    if t.max_questions < 0:
        raise ConfigError(f"train.max_questions must be >= 0 (0 = no question budget); got {t.max_questions}")
    if t.question_pool < 0:
        raise ConfigError(f"train.question_pool must be >= 0 (0 = every training question); got {t.question_pool}")
    if t.retire_epochs < 0 or not 0 < t.unsolved_keep <= 1:
        raise ConfigError(f"train.retire_epochs must be >= 0 and train.unsolved_keep in (0, 1]; got "
                          f"{t.retire_epochs} and {t.unsolved_keep}")
    small = [k for k in ("micro_batch_size", "questions_per_step", "num_iterations", "mini_batches")
             if getattr(t, k) < 1]
    if small:
        raise ConfigError(f"train.{small[0]} must be >= 1, got {getattr(t, small[0])}")
    if t.micro_batch_tokens < 0:
        raise ConfigError(f"train.micro_batch_tokens must be >= 0 (0 = micro_batch_size rows), "
                          f"got {t.micro_batch_tokens}")


def check_sft(s) -> None:
    _fields(s, "sft.")
    _task("sft.task", s.task)
    _path("sft.init", s.init)
    _path("sft.output", s.output)
    _at_least(s, "sft.", 1, "steps", "batch_size")
    _at_least(s, "sft.", 0, "warmup_steps", "eval_limit", "micro_batch_tokens")
    _at_least(s, "sft.", 1, "processes")
    if s.processes > 1 and s.micro_batch_tokens <= 0:
        raise ConfigError(f"sft.processes={s.processes} shares each step's micro-batches between processes: set "
                          "sft.micro_batch_tokens > 0 (e.g. 1024) to cut the step into micro-batches")
    _positive(s, "sft.", "lr")
    _fraction(s, "sft.", "corrupt_frac", "tool_frac")


def check_eval(e) -> None:
    """Settings whose metrics would be meaningless, and the shapes of the paths."""
    _fields(e, "eval.")
    _path("eval.model", e.model, empty=True)
    _task("eval.dataset", e.dataset)
    _path("eval.output_dir", e.output_dir, empty=True)
    _at_least(e, "eval.", 0, "limit", "temperature")
    _at_least(e, "eval.", 1, "max_new_tokens")
    if not e.ks:
        raise ConfigError("eval.ks must list at least one k")
    if e.n_samples < 1:
        raise ConfigError(f"eval.n_samples must be >= 1 (got {e.n_samples})")
    bad = [k for k in e.ks if not 1 <= k <= e.n_samples]
    if bad:
        raise ConfigError(f"eval.ks {bad} must each lie in 1..eval.n_samples={e.n_samples}")
    if e.n_samples > 1 and e.temperature <= 0:
        raise ConfigError(f"eval.n_samples={e.n_samples} with eval.temperature=0 gives {e.n_samples} identical "
                          "greedy samples; set eval.temperature > 0 or eval.n_samples=1")


def check_experiment(x) -> None:
    _fields(x, "experiment.")
    if not x.seeds or len(set(x.seeds)) != len(x.seeds):
        raise ConfigError(f"experiment.seeds must be a non-empty list of distinct seeds, got {x.seeds}")
    if min(x.seeds) < 0:
        raise ConfigError(f"experiment.seeds must be >= 0, got {x.seeds}")
    if x.workers < 0:
        raise ConfigError(f"experiment.workers must be >= 0 (0 = one per core), got {x.workers}")


def check_run(cfg) -> None:
    """The run's own keys, and the rules that span sections."""
    _fields(cfg, "")
    if not _NAME.match(cfg.name):
        raise ConfigError(f"name must be a plain name (letters, digits, . _ + -; it names a directory), "
                          f"got {cfg.name!r}")
    _path("output_dir", cfg.output_dir)
    if cfg.seed < 0:
        raise ConfigError(f"seed must be >= 0, got {cfg.seed}")
    if len(set(cfg.stages)) != len(cfg.stages):
        raise ConfigError(f"stages must not repeat a stage, got {cfg.stages}")
    evaluated = {"eval.dataset": cfg.eval.dataset}
    if cfg.train.eval_every:  # the periodic eval reads the task's test split
        evaluated["train.task"] = cfg.train.task
    for key, value in evaluated.items() if cfg.prompt.few_shot else ():
        if value not in get_args(_schema().Dataset):  # its train split supplies the examples
            raise ConfigError(f"prompt.few_shot={cfg.prompt.few_shot} needs {key} to be one prepared dataset "
                              f"({', '.join(get_args(_schema().Dataset))}), got {value!r}; set prompt.few_shot=0")
    if cfg.reward.truncated_zero and cfg.train.advantage == "process":
        raise ConfigError("reward.truncated_zero is for outcome supervision; with train.advantage=process "
                          "use train.mask_truncated=true to drop truncated completions")
    if cfg.threads < 0:
        raise ConfigError(f"threads must be >= 0 (0 = torch's default), got {cfg.threads}")
    check_pipelined(cfg)
    if cfg.train.void_turn_filter and not cfg.rollout.tools:
        raise ConfigError("train.void_turn_filter filters multi-turn tool use: it needs rollout.tools=[python]")
    if cfg.eval.compare_without_tools and not cfg.rollout.tools:
        raise ConfigError("eval.compare_without_tools compares evals with and without the tool: it needs "
                          "rollout.tools=[python]")
    if cfg.rollout.tools and cfg.train.fsdp:  # the decode loop of the multi-turn rollout is not lock-step
        raise ConfigError(f"rollout.tools={cfg.rollout.tools} is not supported on an FSDP-sharded policy: set "
                          "train.fsdp=false or rollout.tools=[]")
    if cfg.train.micro_batch_tokens and cfg.train.fsdp:  # each rank's cut would differ: forwards are collectives
        raise ConfigError("train.micro_batch_tokens cuts each rank's rows by their lengths, so FSDP ranks would run "
                          "different numbers of forwards: set train.micro_batch_tokens=0 or train.fsdp=false")
    if cfg.model.lora and cfg.train.ref_reset_every:
        raise ConfigError("train.ref_reset_every needs full fine-tuning: under LoRA the reference is "
                          "the frozen base model (set model.lora=false or train.ref_reset_every=0)")
    check_objective(cfg)


def check_objective(cfg) -> None:
    """The GRPO objective's variants (docs/grpo_math.md): hyper-parameter ranges and the combinations
    that would silently mean something else."""
    t, r = cfg.train, cfg.rollout
    positive = ("sapo_tau_pos", "sapo_tau_neg", "cispo_cap", "dppo_delta")
    bad = [k for k in positive if not getattr(t, k) > 0] or [
        k for k in ("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg") if getattr(t, k) < 0]
    if bad:
        raise ConfigError(f"train.{bad[0]} must be {'> 0' if bad[0] in positive else '>= 0'}, got {getattr(t, bad[0])}")
    if t.dppo_topk < 0 or t.dppo_topk and t.surrogate != "dppo":
        raise ConfigError(f"train.dppo_topk={t.dppo_topk} needs train.surrogate=dppo and a value >= 0 "
                          "(0: the binary divergence)")
    if t.surrogate in ("vespo", "dppo") and t.importance_level != "token":
        why = ("its weight is already one per sequence" if t.surrogate == "vespo"
               else "its mask is on token probabilities")
        raise ConfigError(f"train.surrogate={t.surrogate} needs train.importance_level=token: {why}")
    if t.surrogate == "vespo" and r.tis_cap > 0 and r.is_level != "token":
        raise ConfigError("train.surrogate=vespo folds token importance weights into its sequence weight; "
                          "set rollout.is_level=token (as TRL requires)")
    if r.tis_cap <= 0 and (r.is_correction != "tis" or r.is_level != "token"):
        raise ConfigError(f"rollout.is_correction={r.is_correction} / rollout.is_level={r.is_level} do nothing "
                          "without rollout.tis_cap > 0; set the cap or leave them at tis / token")
    if t.adv_norm != "group":
        if t.advantage != "outcome" or t.kl_in != "loss":
            raise ConfigError(f"train.adv_norm={t.adv_norm} normalises outcome rewards: it needs "
                              "train.advantage=outcome and train.kl_in=loss")
        if t.adv_norm == "rank" and t.adv_scale != "group":
            raise ConfigError(f"train.adv_norm=rank does not divide by a std; leave train.adv_scale=group "
                              f"(got {t.adv_scale})")


def check_options(cfg, stage: str, options: dict) -> None:
    """The options of `mathrl plan`, `mathrl eval-prm` (``scorer``) and `mathrl seed-grid`
    (``starts``), some against the config they run with; the command runs this with the config's
    checks, before the stage."""
    if stage == "plan" and not (options["gpu_mem"] > 0 and options["ranks"] >= 1 and options["prompt_tokens"] >= 0):
        raise ConfigError("plan: --gpu-mem must be > 0, --ranks >= 1, --prompt-tokens >= 0")
    scorers = get_args(_schema().StepScorer)
    if stage == "eval-prm" and options["scorer"] not in scorers:
        raise ConfigError(f"--scorer must be one of {', '.join(scorers)}, got {options['scorer']!r}")
    if stage == "eval-prm" and options["scorer"] != "rules" and not cfg.reward.prm:
        raise ConfigError(f"eval-prm --scorer {options['scorer']} needs reward.prm (a PRM directory or hub id)")
    if stage == "compare-sampling":
        check_sampling_pool(cfg)
    if stage == "seed-grid" and cfg.sft.corrupt_frac == 0 and "clean" not in options["starts"]:
        raise ConfigError(f"seed-grid: no warm start left from {options['starts']} (the config's sft.corrupt_frac is "
                          "0, so `corrupted` is the same as `clean`)")


def check_sampling_pool(cfg) -> None:
    """`mathrl compare-sampling`: the question pool must come back, or pass_rate is uniform sampling."""
    draws, pool = cfg.train.steps * cfg.train.questions_per_step, cfg.train.question_pool
    if not 0 < pool < draws:
        raise ConfigError(f"compare-sampling draws {draws} questions (train.steps x train.questions_per_step); set "
                          f"train.question_pool below that (got {pool}) so that questions come back and pass_rate "
                          "has something to act on, e.g. train.question_pool=1000")


def check_pipelined(cfg) -> None:
    """train.async_staleness and rollout.engine=hf_process: the combinations the pipelined loop supports."""
    k, t, r = cfg.train.async_staleness, cfg.train, cfg.rollout
    if k < 0:
        raise ConfigError(f"train.async_staleness must be >= 0 (0 = synchronous), got {k}")
    if r.engine == "hf_process" and (cfg.model.lora or t.fsdp):
        raise ConfigError("rollout.engine=hf_process pushes the full model's weights: it needs model.lora=false and "
                          "train.fsdp=false")
    if not k:
        return
    if r.tis_cap <= 0:
        raise ConfigError(f"train.async_staleness={k} corrects stale batches with the engine's log-probs: set "
                          "rollout.tis_cap > 0 (e.g. 2; docs/pipelined.md)")
    if t.dynamic_sampling and world_size() > 1:
        raise ConfigError(f"train.async_staleness={k} refills dynamic sampling's batches in one process only: "
                          "set train.dynamic_sampling=false or train.async_staleness=0 under torchrun")
    if t.fsdp or cfg.model.lora:
        raise ConfigError(f"train.async_staleness={k} needs full weights to push between batches: set "
                          "train.fsdp=false and model.lora=false")


def world_size() -> int:
    """Processes the run starts with: torchrun's WORLD_SIZE, 1 outside torchrun."""
    return max(1, int(os.environ.get("WORLD_SIZE", "1")))


def check_world(cfg, ranks: int) -> None:
    """The global batch splits evenly over ``ranks``, and so do the seeded generate blocks."""
    qps = cfg.train.questions_per_step
    if qps % ranks:
        raise ConfigError(f"train.questions_per_step={qps} must be divisible by the number of ranks ({ranks}): "
                          "it is the global batch, split evenly across ranks")
    if qps // ranks % cfg.train.mini_batches:
        raise ConfigError(f"train.mini_batches={cfg.train.mini_batches} must divide each rank's share of "
                          f"train.questions_per_step ({qps // ranks}): every mini-batch holds whole groups")
    block = cfg.rollout.seed_block
    if block and qps // ranks % block:
        raise ConfigError(f"rollout.seed_block={block} must divide each rank's share of "
                          f"train.questions_per_step ({qps // ranks})")
