"""mathrl's training pipeline: the stages of a verifiable-reward GRPO run.

Layers, top to bottom (docs/architecture.md; ``tests/test_layers.py`` checks every import):
the stages (``cli``, ``run_all``, ``experiment``, ``card``, ``push``) > ``grpo`` (the GRPO math and trainer) |
``sft`` (the warm start) | the ``evals`` package > ``rollout`` (engines and their factory) >
``parallel`` (torchrun, FSDP) | ``weights`` (export in Hugging Face names, the weight channel) |
``models`` > ``prompts`` | ``data`` (preparation, gsm-synth, the problem loader) > ``config`` |
``faults`` | ``determinism``. Any of them may import ``rewards`` (and through it ``sandbox``); nothing in
``rewards`` or ``sandbox`` imports this package. This file imports nothing.
"""
