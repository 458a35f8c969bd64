"""A model's shape (``memory.ModelShape``) from its transformers config, without loading weights.

``model.name_or_path`` is either a local model directory (its ``config.json``, read with
``AutoConfig.from_pretrained``) or a hub id. The Hub is not reachable from every machine, so the
architecture fields of the hub models the shipped GPU configs name are kept in
``pipeline/plan/models/<org>--<name>.json`` (each with its public source); any other hub id needs a
local copy. Supported families: Qwen2 (q/k/v biases, ``Qwen2ForCausalLM``), Llama and Mistral.
"""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.plan.memory import ModelShape

SNAPSHOTS = Path(__file__).parent / "models"
# Same architecture as a shipped snapshot (their public configs list the same fields).
ALIASES = {
    "Qwen/Qwen2.5-Math-1.5B-Instruct": "Qwen/Qwen2.5-Math-1.5B",  # configs/gpu_qwen_math_tir.yaml
    "deepseek-ai/deepseek-math-7b-instruct": "deepseek-ai/deepseek-math-7b-base",
    "deepseek-ai/deepseek-math-7b-rl": "deepseek-ai/deepseek-math-7b-base",
}
FAMILIES = ("qwen2", "llama", "mistral")


def snapshot_path(hub_id: str) -> Path:
    return SNAPSHOTS / (ALIASES.get(hub_id, hub_id).replace("/", "--") + ".json")


def load_config(name_or_path: str):
    """(transformers config, where it came from) for a local model directory or a known hub id."""
    from transformers import AutoConfig

    local = Path(name_or_path)
    if (local / "config.json").is_file():
        return AutoConfig.from_pretrained(str(local)), str(local / "config.json")
    snap = snapshot_path(name_or_path)
    if snap.is_file():
        fields = {k: v for k, v in json.loads(snap.read_text()).items() if not k.startswith("_")}
        return AutoConfig.for_model(**fields), str(snap.relative_to(SNAPSHOTS.parent.parent.parent))
    known = sorted(p.stem.replace("--", "/") for p in SNAPSHOTS.glob("*.json")) + sorted(ALIASES)
    raise ValueError(f"no config for {name_or_path!r}: pass a local model directory (with config.json) "
                     f"or one of the hub ids with a shipped snapshot: {', '.join(known)}")


def shape_from_config(cfg) -> ModelShape:
    """The parameter-relevant fields of a Qwen2 / Llama / Mistral config."""
    kind = getattr(cfg, "model_type", "")
    if kind not in FAMILIES:
        raise ValueError(f"model_type {kind!r} is not supported by the memory planner ({', '.join(FAMILIES)})")
    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    attention_bias = bool(getattr(cfg, "attention_bias", False))
    return ModelShape(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_layers=cfg.num_hidden_layers,
        num_heads=heads, num_kv_heads=getattr(cfg, "num_key_value_heads", None) or heads, head_dim=head_dim,
        intermediate_size=cfg.intermediate_size, tie_embeddings=bool(cfg.tie_word_embeddings),
        qkv_bias=kind == "qwen2" or attention_bias, o_bias=attention_bias and kind != "qwen2",
        mlp_bias=bool(getattr(cfg, "mlp_bias", False)))
