"""Load the model to evaluate: a hub id, a local model dir, a LoRA adapter dir, or a run dir.

``resolve_model_path`` turns a run directory (``runs/<name>``) into the model it holds: its
``final/`` folder if there is one, else its newest ``checkpoints/step_N``. A folder with an
``adapter_config.json`` is a peft LoRA adapter: the base model named in that file is loaded and
the adapter merged into it (merged weights generate faster and give the same outputs).
"""

from __future__ import annotations

import json
from pathlib import Path

from pipeline import layout

MODEL_FILES = ("config.json", "adapter_config.json")


def resolve_model_path(name_or_path: str) -> str:
    """A loadable model folder for a run/checkpoint dir; anything else is returned unchanged."""
    path = Path(name_or_path)
    if not path.is_dir():
        if path.exists() or name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") > 1:
            raise FileNotFoundError(f"model path {name_or_path!r} is not a model directory")
        return name_or_path  # a hub id such as Qwen/Qwen2.5-0.5B-Instruct
    if any((path / f).is_file() for f in MODEL_FILES):
        return str(path)
    for sub in (layout.FINAL, "model", "policy"):
        if (path / sub).is_dir():
            return resolve_model_path(str(path / sub))
    steps = layout.step_dirs(path)
    if steps:
        return resolve_model_path(str(steps[-1]))
    raise FileNotFoundError(f"{path} holds no model: expected config.json (a model), adapter_config.json "
                            "(a LoRA adapter), final/ or checkpoints/step_N/ (a run directory)")


def load_for_eval(name_or_path: str, dtype: str = "float32", device: str = "auto"):
    """(model in eval mode, tokenizer, resolved path) for any supported model source."""
    from pipeline.models import load_policy, resolve_device
    path = resolve_model_path(name_or_path)
    device = resolve_device(device)
    adapter_cfg = Path(path) / "adapter_config.json"
    if adapter_cfg.is_file():
        from peft import PeftModel
        from transformers import AutoTokenizer
        base_path = resolve_model_path(json.loads(adapter_cfg.read_text())["base_model_name_or_path"])
        base, tokenizer = load_policy(base_path, dtype, device)
        model = PeftModel.from_pretrained(base, path).merge_and_unload()
        if (Path(path) / "tokenizer_config.json").is_file():  # the trainer saves it next to the adapter
            tokenizer = AutoTokenizer.from_pretrained(path)
    else:
        model, tokenizer = load_policy(path, dtype, device)
    model.eval()
    return model, tokenizer, path


def adapter_base(path: str) -> str | None:
    """The base model of a LoRA adapter folder, or None for a full model."""
    adapter_cfg = Path(path) / "adapter_config.json"
    if not adapter_cfg.is_file():
        return None
    return resolve_model_path(json.loads(adapter_cfg.read_text())["base_model_name_or_path"])
