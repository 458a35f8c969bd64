"""The rollout interface shared by every engine (Hugging Face generate, vLLM).

An engine turns formatted prompt strings into ``n`` sampled completions each, with token ids
and, where the engine can give them, the log-probability it assigned to each sampled token
(the behaviour policy, used for vLLM/trainer mismatch correction). After an optimizer step the
trainer calls ``sync_weights(model)`` so the next rollout samples from the updated policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


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


class RolloutEngine(Protocol):
    def generate(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Sample]]:
        """``n`` samples for each prompt, in prompt order: result[i][j] is sample j of prompt i."""

    def sync_weights(self, model) -> None:
        """Make the engine sample from ``model``'s current weights."""

    def sleep(self) -> None:
        """The rollout phase is over (the trainer calls it once per step, before the update): free
        what the engine can until the next ``sync_weights`` / ``generate``; most engines do nothing."""

    def close(self) -> None:
        """Release the engine's resources."""
