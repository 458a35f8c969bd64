"""Mixed precision for GRPO: float32 master weights, forwards in ``model.dtype`` under autocast.

Why: AdamW moves each weight by about ``lr`` per step. With bfloat16 parameters (8 bits of
mantissa) an update of 1e-6, the DeepSeekMath learning rate, is far below the spacing of
bfloat16 numbers near a typical weight of 0.01-0.1, so it rounds away. Measured here: after 10
AdamW steps at lr 1e-6, 1.9 % of a bfloat16 matrix of N(0, 0.02) weights had changed, against
99.99 % of the same matrix in float32. So by default (``train.master_dtype=float32``) a policy
whose ``model.dtype`` is bfloat16 or float16 is trained as float32 parameters, gradients and
AdamW state, and its forwards (log-probs, and generation with the HF engine) run under
``torch.autocast(dtype=model.dtype)``, as in verl or TRL with ``bf16=True``. The reference copy
is kept in the same dtype as the policy, so the step-0 KL is exactly zero. Under LoRA the frozen
base stays in ``model.dtype``; peft already keeps the adapter in float32.

``train.master_dtype=model`` trains in ``model.dtype`` itself (half the memory for weights,
gradients and optimizer state; small updates are lost). With ``model.dtype=float32`` nothing
changes. vLLM engines keep ``model.dtype``: the syncs cast the float32 weights to it.
Checkpoints and ``final/`` hold the float32 master weights (twice the bytes of bf16), so a
resumed run continues exactly; `mathrl eval` loads them in ``model.dtype``.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch


def master_dtype(cfg) -> str:
    """dtype of the parameters the optimizer updates (full fine-tuning) and of the reference."""
    return "float32" if cfg.train.master_dtype == "float32" else cfg.model.dtype


def mixed(cfg) -> bool:
    """Forwards run under autocast: float32 master weights, lower-precision compute."""
    return master_dtype(cfg) != cfg.model.dtype


def autocast(cfg, device: str):
    """``torch.autocast`` to ``model.dtype`` on ``device`` ('cuda' or 'cpu') when mixed; else a no-op."""
    if not mixed(cfg):
        return nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=getattr(torch, cfg.model.dtype))


def autocast_for(cfg, engine=None):
    """``autocast`` for the trainer's own forwards: log-probs, and generation or evaluation with
    the HF engine (which runs the policy itself). A vLLM engine runs its own model: no-op."""
    from pipeline.models import resolve_device

    if engine is not None and not engine.runs_policy:
        return nullcontext()
    return autocast(cfg, resolve_device(cfg.device))
