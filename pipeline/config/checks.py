"""Value checks of the run config, one function per section plus the cross-section ones.

Types, unknown keys and ``Literal`` choices are the loader's job (``loader.py``); this file
holds every rule about values: ranges, combinations within a section, combinations across
sections. Each section dataclass calls its check from ``__post_init__``, so a config is checked
when it is built, whether by the loader or by ``dataclasses.replace`` in a stage (TRL checks
its ``GRPOConfig`` the same way). Stages do not check again. Every error is one line that names
the key, e.g. ``train.kl_in=reward is implemented for outcome supervision only; ...``.

``check_world`` is the exception: whether ``train.questions_per_step`` splits over the ranks
depends on how many processes torchrun started (``WORLD_SIZE``), so the loader runs it on the
finished config rather than on every construction.
"""

from __future__ import annotations

import ipaddress
import os
import re


class ConfigError(ValueError):
    """A bad config key or value; the message is one line naming the key."""


# Names the config refers to; the code that implements them checks it agrees (tests/test_config.py).
DATASETS = ("gsm8k", "math", "math500", "gsm-synth")  # prepared by `mathrl data`
STAGES = ("build-tiny", "sft", "train", "eval")  # what `mathrl run` may run, in this order
SYNTH_OPS = ("+", "-", "*", "/")
TRACKERS = ("tensorboard", "wandb", "trackio", "mlflow")  # train.report_to (pipeline/grpo/trackers.py)
_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")  # owner/name on the Hugging Face Hub
_USER_REWARD = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # package.module:function


def check_data(d) -> None:
    unknown = [name for name in d.datasets if name not in DATASETS]
    if unknown:
        raise ConfigError(f"data.datasets: unknown dataset(s) {unknown}; choose from {', '.join(DATASETS)}")
    bad = [op for op in d.synth_ops if op not in SYNTH_OPS]
    if bad or not d.synth_ops:
        raise ConfigError(f"data.synth_ops must be a non-empty subset of {SYNTH_OPS}, got {d.synth_ops}")
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
    hidden, heads, kv = m.tiny_hidden_size, m.tiny_heads, m.tiny_kv_heads
    if heads < 1 or kv < 1 or hidden % heads or heads % kv or hidden // heads < 32:
        # head_dim >= 32: vLLM's CPU attention backend refuses smaller heads
        raise ConfigError(f"model.tiny_*: need tiny_hidden_size % tiny_heads == 0, tiny_heads % tiny_kv_heads == 0 "
                          f"and head_dim = hidden / heads >= 32; got hidden={hidden} heads={heads} kv_heads={kv}")


def check_rollout(r) -> None:
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
    check_server(r)


def check_server(r) -> None:
    """The `mathrl vllm-serve` limits, and the no-token opt-out on loopback only."""
    small = [k for k in ("server_max_n", "server_max_prompts", "server_max_body_mb", "server_max_connections",
                         "server_max_unauth_connections", "server_timeout_s", "server_read_timeout_s",
                         "server_auth_timeout_s") if not getattr(r, k) > 0]
    if small:
        raise ConfigError(f"rollout.{small[0]} must be > 0, got {getattr(r, small[0])}")
    if not 0 <= r.server_batch_window_s <= 1:
        raise ConfigError(f"rollout.server_batch_window_s must lie in [0, 1] seconds, got {r.server_batch_window_s}")
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

    for name in r.weights:
        if name not in rewards.REWARDS and not _USER_REWARD.match(name):
            raise ConfigError(f"reward.weights: unknown reward {name!r}; valid: {', '.join(rewards.REWARDS)}, "
                              "or a function given as package.module:function")
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
    alone = [name for name in ("auto", "none") if name in t.report_to and len(t.report_to) > 1]
    unknown = [name for name in t.report_to if name not in (*TRACKERS, "auto", "none")]
    if unknown or alone:
        raise ConfigError(f"train.report_to: {unknown or alone} "
                          f"{'unknown' if unknown else 'must stand alone'}; give any of {', '.join(TRACKERS)}, "
                          "or [auto] (TensorBoard if installed), or [] for metrics.jsonl only")
    if t.advantage == "process" and t.kl_in == "reward":
        raise ConfigError("train.kl_in=reward is implemented for outcome supervision only; "
                          "use train.kl_in=loss with train.advantage=process")
    small = [k for k in ("micro_batch_size", "questions_per_step", "num_iterations", "mini_batches") if getattr(t, k) < 1]
    if small:
        raise ConfigError(f"train.{small[0]} must be >= 1, got {getattr(t, small[0])}")


def check_eval(e) -> None:
    """Settings whose metrics would be meaningless."""
    if e.n_samples < 1:
        raise ConfigError(f"eval.n_samples must be >= 1 (got {e.n_samples})")
    bad = [k for k in e.ks if not 1 <= k <= e.n_samples]
    if bad:
        raise ConfigError(f"eval.ks {bad} must each lie in 1..eval.n_samples={e.n_samples}")
    if e.n_samples > 1 and e.temperature <= 0:
        raise ConfigError(f"eval.n_samples={e.n_samples} with eval.temperature=0 gives {e.n_samples} identical "
                          "greedy samples; set eval.temperature > 0 or eval.n_samples=1")


def check_experiment(x) -> None:
    if not x.seeds or len(set(x.seeds)) != len(x.seeds):
        raise ConfigError(f"experiment.seeds must be a non-empty list of distinct seeds, got {x.seeds}")
    if x.workers < 0:
        raise ConfigError(f"experiment.workers must be >= 0 (0 = one per core), got {x.workers}")


def check_run(cfg) -> None:
    """Rules that span sections."""
    unknown = [s for s in cfg.stages if s not in STAGES]
    if unknown:
        raise ConfigError(f"stages: unknown stage(s) {unknown}; choose from {', '.join(STAGES)}")
    if cfg.reward.truncated_zero and cfg.train.advantage == "process":
        raise ConfigError("reward.truncated_zero is for outcome supervision; with train.advantage=process "
                          "use train.mask_truncated=true to drop truncated completions")
    if cfg.threads < 0:
        raise ConfigError(f"threads must be >= 0 (0 = torch's default), got {cfg.threads}")
    if cfg.model.lora and cfg.train.ref_reset_every:
        raise ConfigError("train.ref_reset_every needs full fine-tuning: under LoRA the reference is "
                          "the frozen base model (set model.lora=false or train.ref_reset_every=0)")


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
