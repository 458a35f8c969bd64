"""The one place a rollout engine is built from the config (``rollout.engine``), for training,
evaluation and the vLLM server alike.

``rollout.tools`` (multi-turn tool use, multi_turn.py) is handed to the HF engines and the colocated
vLLM engine as ``ToolSettings``; under ``vllm_server`` the server runs the tool with the same settings
(its own config's, which the client checks against the trainer's).

- ``hf``: Hugging Face ``generate`` on the model itself (no copy); in lock-step on every rank when
  the model is FSDP-sharded (``train.fsdp`` under torchrun).
- ``hf_process``: Hugging Face ``generate`` in a worker process of its own (process_engine.py), fed
  the model's weights through ``push``; it runs under ``model.dtype`` autocast when the trainer does.
- ``vllm``: a colocated ``vllm.LLM`` that loads a model directory, then takes the model's current
  weights through ``sync_weights`` (a trainer's resumed policy, an eval's merged LoRA adapter).
- ``vllm_server``: a client of a separate ``mathrl vllm-serve`` process; it checks that the server
  serves the same architecture, then sends the model's weights.

vLLM is imported only when one of its engines is asked for (it is an optional extra).
"""

from __future__ import annotations

import dataclasses

from pipeline.config import RunConfig
from pipeline.parallel import fsdp
from pipeline.rollout.base import RolloutEngine
from pipeline.rollout.hf_engine import HFEngine
from pipeline.rollout.tool_runner import ToolSettings

__all__ = ["build_engine", "colocated_vllm"]


def build_engine(cfg: RunConfig, model, tokenizer, *, load_path: str | None = None,
                 holds_weights: bool = False, training: bool = False) -> RolloutEngine:
    """The engine ``rollout.engine`` names, sampling from ``model``'s weights.

    ``load_path``: the directory a colocated vLLM engine starts from (default
    ``model.name_or_path``); ``holds_weights``: it already holds exactly ``model``'s weights (an
    eval of a saved full model), so the first weight sync is skipped; ``training``: the trainer's
    engine, the only one that uses ``rollout.vllm_sleep_mode`` (vLLM allows one sleep-mode engine
    per process, and `mathrl run` builds eval engines before and after the trainer's)."""
    kind = cfg.rollout.engine
    if kind == "vllm":
        engine = colocated_vllm(cfg, load_path or cfg.model.name_or_path, sleep_mode=None if training else False,
                                tools=tool_settings(cfg))
        if not holds_weights:
            engine.sync_weights(model)
        return engine
    if kind == "vllm_server":
        from pipeline.rollout.vllm_client import VLLMServerEngine

        engine = VLLMServerEngine(cfg, model)
        engine.sync_weights(model)
        return engine
    if kind == "hf_process":
        from pipeline.rollout.process_engine import ProcessEngine

        return ProcessEngine(model, tokenizer, batch_size=cfg.rollout.batch_size, threads=cfg.rollout.worker_threads,
                             timeout_s=cfg.rollout.worker_timeout_s,
                             autocast_dtype=_mixed_dtype(cfg), shared_prefill=cfg.rollout.shared_prefill,
                             decode=cfg.rollout.decode, tools=tool_settings(cfg))
    return HFEngine(model, tokenizer, batch_size=cfg.rollout.batch_size, lockstep=fsdp.enabled(cfg),
                    shared_prefill=cfg.rollout.shared_prefill, decode=cfg.rollout.decode, tools=tool_settings(cfg))


def tool_settings(cfg: RunConfig) -> ToolSettings | None:
    """``rollout.tools`` and its limits for an engine, or None when no tool is on."""
    r = cfg.rollout
    if "python" not in r.tools:
        return None
    return ToolSettings(max_calls=r.max_tool_calls, output_chars=r.tool_output_chars, timeout_s=r.tool_timeout_s,
                        workers=r.tool_workers, backend=r.tool_sandbox_backend)


def _mixed_dtype(cfg: RunConfig) -> str | None:
    """``model.dtype`` when the trainer's forwards run under autocast to it (grpo/precision.py), else None."""
    mixed = cfg.train.master_dtype == "float32" and cfg.model.dtype != "float32"
    return cfg.model.dtype if mixed else None


def colocated_vllm(cfg: RunConfig, path: str, *, sleep_mode: bool | None = None, tools: ToolSettings | None = None):
    """A ``VLLMEngine`` on ``path`` with the config's dtype, seed and ``rollout.vllm_*`` settings
    (``sleep_mode`` overrides ``rollout.vllm_sleep_mode``: the server and eval engines never sleep;
    ``tools``: the multi-turn rollout)."""
    from pipeline.rollout.vllm_engine import VLLMEngine  # optional extra; needs vllm installed

    rollout = cfg.rollout if sleep_mode is None else dataclasses.replace(cfg.rollout, vllm_sleep_mode=sleep_mode)
    return VLLMEngine(path, rollout, dtype=cfg.model.dtype, seed=cfg.seed, tools=tools)
