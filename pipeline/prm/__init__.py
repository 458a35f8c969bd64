"""Process reward models (PRMs) for process supervision and `mathrl eval-prm`.

`model.py` loads a PRM (the Qwen2.5-Math-PRM family, or a 2-label token classifier) and builds
a tiny random one for tests; `scorer.py` turns (question, steps) into P(step good) per step,
batched. How PRM scores combine with the rule checks is pure math in `rewards.steps.mix`.
`load_scorer(cfg)` builds the scorer a run config asks for (`reward.prm`).
"""

from __future__ import annotations

from pipeline.prm.model import PRMError, Qwen2ForProcessRewardModel, SEPARATOR, build_tiny_prm, load_prm
from pipeline.prm.scorer import CachedScorer, PRMScorer


def load_scorer(cfg) -> PRMScorer:
    """The PRM of `cfg.reward.prm` on the run's device (bfloat16 on a GPU under prm_dtype=auto)."""
    import torch

    from pipeline.device import resolve_device

    r = cfg.reward
    device = resolve_device(cfg.device)
    dtype = r.prm_dtype if r.prm_dtype != "auto" else ("bfloat16" if device.startswith("cuda") else "float32")
    model, tokenizer, sep = load_prm(r.prm, getattr(torch, dtype), device)
    return PRMScorer(model, tokenizer, sep, batch_size=r.prm_batch_size, max_tokens=r.prm_max_tokens,
                     threshold=r.prm_threshold)


__all__ = ["CachedScorer", "PRMError", "PRMScorer", "Qwen2ForProcessRewardModel", "SEPARATOR", "build_tiny_prm",
           "load_prm", "load_scorer"]
