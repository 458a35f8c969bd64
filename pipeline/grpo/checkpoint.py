"""Atomic training checkpoints and ``resume=auto``.

A checkpoint is ``checkpoints/step_N/`` holding the model (``save_pretrained``; the adapter
only under LoRA), the tokenizer, and ``trainer_state.pt`` with optimizer, scheduler, RNG states,
the data sampler position and the step. It is written into a temporary folder and renamed, so
a crash mid-write never leaves a half checkpoint that resume would pick up.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import numpy as np
import torch

from pipeline import layout

STATE_FILE = "trainer_state.pt"


def rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(run_dir: Path, step: int, model, tokenizer, trainer_state: dict, keep: int = 2,
                    ref_model=None, model_state: dict | None = None, ref_state: dict | None = None) -> Path:
    """Write ``checkpoints/step_<step>`` atomically and prune all but the newest ``keep``.
    ``model_state`` / ``ref_state``: full state dicts gathered from FSDP-sharded models (fsdp.py),
    written instead of the models' own sharded ones; None: the model's ``state_dict()``."""
    final = layout.checkpoint_dir(run_dir, step)
    tmp = final.with_name(f".tmp_{final.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp, state_dict=model_state)
    tokenizer.save_pretrained(tmp)
    if ref_model is not None:
        ref_model.save_pretrained(tmp / "reference", state_dict=ref_state)
    torch.save({**trainer_state, "step": step, "rng": rng_state()}, tmp / STATE_FILE)
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in list_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    return [p for p in layout.step_dirs(run_dir) if (p / STATE_FILE).is_file()]


def find_resume(run_dir: Path, resume: str) -> Path | None:
    """The checkpoint to resume from: ``auto`` = newest in the run, ``never`` = none, else a path."""
    if resume == "never":
        return None
    if resume == "auto":
        found = list_checkpoints(run_dir)
        return found[-1] if found else None
    path = Path(resume)
    if not (path / STATE_FILE).is_file():
        raise FileNotFoundError(f"train.resume={resume}: no {STATE_FILE} there")
    return path


def load_trainer_state(ckpt: Path) -> dict:
    return torch.load(Path(ckpt) / STATE_FILE, weights_only=False)
