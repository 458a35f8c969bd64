"""What the GRPO loop is built from: policy + reference, optimizer + schedule, question sampler,
held together (with the rollout engine from ``pipeline.rollout.factory``) in a ``TrainState``.

Kept out of ``trainer.py`` so the loop reads like the algorithm. Reference policy rules:
beta = 0 (and KL not in the reward) -> no reference at all; LoRA -> the same model with its
adapter disabled (no second copy); full fine-tuning -> a frozen copy of the initial weights.
"""

from __future__ import annotations

import copy
import math
import random
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pipeline.config import RunConfig
from pipeline.grpo import precision
from pipeline.models import apply_lora, load_policy, resolve_device
from pipeline.rollout.base import RolloutEngine


def needs_reference(cfg: RunConfig) -> bool:
    return cfg.train.beta > 0


def build_policy(cfg: RunConfig, resume_from: Path | None):
    """(policy, tokenizer, reference or None). Under LoRA the reference is ``policy`` itself,
    used inside ``reference_mode``."""
    device = resolve_device(cfg.device)
    if cfg.model.lora:  # the frozen base in model.dtype; peft keeps the adapter in float32
        model, tok = load_policy(cfg.model.name_or_path, cfg.model.dtype, device)
        if resume_from is not None:
            from peft import PeftModel
            model = PeftModel.from_pretrained(model, str(resume_from), is_trainable=True)
        else:
            model = apply_lora(model, cfg.model)
        ref = model if needs_reference(cfg) else None
    else:  # full fine-tuning: policy and reference in the master dtype (precision.py)
        dtype = precision.master_dtype(cfg)
        model, tok = load_policy(str(resume_from or cfg.model.name_or_path), dtype, device)
        ref = None
        if needs_reference(cfg):
            saved_ref = resume_from / "reference" if resume_from is not None else None
            if saved_ref is not None and saved_ref.is_dir():
                ref, _ = load_policy(str(saved_ref), dtype, device)
            elif resume_from is not None:
                ref, _ = load_policy(cfg.model.name_or_path, dtype, device)
            else:
                ref = copy.deepcopy(model)
            ref.requires_grad_(False).eval()
    if cfg.model.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    model.train()
    return model, tok, ref


@contextmanager
def reference_mode(policy, ref):
    """Run the reference forward: the adapter-disabled base under LoRA, else the frozen copy."""
    if ref is policy and hasattr(policy, "disable_adapter"):
        with policy.disable_adapter():
            yield policy
    else:
        with nullcontext():
            yield ref


def build_optimizer(cfg: RunConfig, model):
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.train.lr, betas=tuple(cfg.train.adam_betas),
                            weight_decay=cfg.train.weight_decay)
    total = cfg.train.steps * cfg.train.updates_per_step
    warmup = cfg.train.warmup_steps

    def factor(i: int) -> float:
        if warmup and i < warmup:
            return (i + 1) / warmup
        if cfg.train.lr_schedule == "cosine":
            progress = (i - warmup) / max(1, total - warmup)
            return 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
        return 1.0

    return opt, torch.optim.lr_scheduler.LambdaLR(opt, factor)


class QuestionSampler:
    """Deterministic question order: a seeded shuffle per epoch; the position is checkpointed."""

    def __init__(self, problems: list[dict], seed: int):
        if not problems:
            raise ValueError("the training set is empty")
        self.problems, self.seed = problems, seed
        self.epoch, self.pos = 0, 0
        self._order = self._shuffle()

    def _shuffle(self) -> list[int]:
        order = list(range(len(self.problems)))
        random.Random(self.seed * 100003 + self.epoch).shuffle(order)
        return order

    def take(self, k: int) -> list[dict]:
        out = []
        for _ in range(k):
            if self.pos == len(self._order):
                self.epoch, self.pos = self.epoch + 1, 0
                self._order = self._shuffle()
            out.append(self.problems[self._order[self.pos]])
            self.pos += 1
        return out

    @property
    def drawn(self) -> int:
        """Questions handed out so far in the run (the next question's draw index)."""
        return self.epoch * len(self.problems) + self.pos

    def observe(self, groups: list[list]) -> None:
        """Scored groups of the last draw: uniform sampling ignores them (sampling.PassRateSampler)."""

    def stats(self) -> dict[str, float]:
        """Per-step metrics of the sampler (none for uniform sampling)."""
        return {}

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "pos": self.pos}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.pos = state["epoch"], state["pos"]
        self._order = self._shuffle()


@dataclass
class TrainState:
    """Everything a GRPO step reads and updates (the checkpoint holds the last four's state)."""

    policy: Any  # the trained model (a peft model under LoRA; FSDP-wrapped under train.fsdp)
    ref: Any | None  # the reference: None when beta = 0, the policy itself under LoRA
    tokenizer: Any
    engine: RolloutEngine  # samples from the policy's weights (synced after every step)
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    sampler: QuestionSampler
    prm: Any = None  # reward.prm's scorer (pipeline.prm.PRMScorer) for process supervision, else None
