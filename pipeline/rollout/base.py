"""The rollout interface shared by every engine (Hugging Face generate, vLLM, a server client).

An engine turns formatted prompt strings into ``n`` sampled completions each, with token ids
and, where the engine can give them, the log-probability it assigned to each sampled token
(the behaviour policy, used for vLLM/trainer mismatch correction). After an optimizer step the
trainer calls ``sync_weights(model)`` so the next rollout samples from the updated policy.

``RolloutEngine`` is the whole contract as callers use it, with defaults: a new engine subclasses
it and implements ``generate`` and ``sync_weights``; ``sleep`` and ``close`` do nothing unless the
engine holds something to free, and the three attributes describe how callers must drive it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SamplingParams:
    """How to sample; one object for every engine."""

    max_new_tokens: int = 256
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    seed: int | None = None


@dataclass
class Sample:
    """One completion of one prompt."""

    prompt: str
    prompt_ids: list[int]
    completion: str  # decoded without special tokens
    completion_ids: list[int]  # includes the EOS token when the model stopped by itself
    finish_reason: str  # "stop" (EOS) or "length" (hit max_new_tokens)
    logprobs: list[float] | None = None  # engine's log-prob of each completion token, if known


class RolloutEngine:
    """Base class of every engine. Callers use exactly what is declared here."""

    lockstep: bool = False
    """Every rank must make the same ``generate`` calls with the same number of prompts (an engine
    whose forwards are collectives, such as HF generate on an FSDP-sharded policy): the trainer then
    runs its periodic eval on every rank, not only on rank 0."""
    batch_size: int | None = None
    """Sequences the engine generates at once, when it batches a fixed number itself (HF generate):
    callers chunk long prompt lists by it. None: the engine schedules its own batches (vLLM)."""
    runs_policy: bool = False
    """The engine runs the trainer's policy module itself (HF generate), so the trainer's autocast
    applies to its forwards; an engine with a model of its own (vLLM) keeps that model's dtype."""

    def generate(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Sample]]:
        """``n`` samples for each prompt, in prompt order: result[i][j] is sample j of prompt i."""
        raise NotImplementedError(f"{type(self).__name__} must implement generate")

    def sync_weights(self, model) -> None:
        """Make the engine sample from ``model``'s current weights."""
        raise NotImplementedError(f"{type(self).__name__} must implement sync_weights")

    def sleep(self) -> None:
        """The rollout phase is over (the trainer calls it once per step, before the update): free
        what the engine can until the next ``sync_weights`` / ``generate``, which wake it."""

    def close(self) -> None:
        """Release the engine's resources; the engine is not used again."""
