"""The rollout interface shared by every engine (Hugging Face generate, vLLM, a server client).

An engine turns formatted prompt strings into ``n`` sampled completions each, with token ids
and, where the engine can give them, the log-probability it assigned to each sampled token
(the behaviour policy, used for vLLM/trainer mismatch correction). After an optimizer step the
trainer calls ``sync_weights(model)`` so the next rollout samples from the updated policy.

``RolloutEngine`` is the whole contract as callers use it, with defaults: a new engine subclasses
it and implements ``generate`` and ``sync_weights``; ``sleep`` and ``close`` do nothing unless the
engine holds something to free, and the three attributes describe how callers must drive it.

``submit`` starts a ``generate`` and returns a ``Pending`` handle at once; the pipelined trainer
(``pipeline/grpo/pipelined.py``) updates the policy while it runs. The default runs ``generate``
right away and returns a handle that is already done, so an engine that cannot overlap still works
(it just does not overlap). ``policy_version`` is what the caller says the pushed weights are (the
optimizer step they come from); the engine reports, per result, the version it generated with.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SamplingParams:
    """How to sample; one object for every engine."""

    max_new_tokens: int = 256
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    seed: int | None = None
    logprobs: bool = False  # also return each sampled token's log-prob (engines that always do, still do)


@dataclass
class Sample:
    """One completion of one prompt."""

    prompt: str
    prompt_ids: list[int]
    completion: str  # decoded without special tokens
    completion_ids: list[int]  # includes the EOS token when the model stopped by itself
    finish_reason: str  # "stop" (EOS) or "length" (hit max_new_tokens)
    logprobs: list[float] | None = None  # engine's log-prob of each completion token, if known (0.0 at tool tokens)
    # rollout.tools: [start, end) of each appended tool-output block in completion_ids (the rest the policy
    # sampled), and the completion's tool statistics (calls, errors, timeouts, sandbox_s); empty without tools
    tool_spans: list[tuple[int, int]] = field(default_factory=list)
    tool_stats: dict[str, float] = field(default_factory=dict)
    turns: list[str] = field(default_factory=list)  # rollout.tools: the text of each policy turn


class EngineError(RuntimeError):
    """The engine cannot give a result (its process died, hung past its timeout, or raised): the
    message is one line that names the engine and what to do."""


@dataclass
class Pending:
    """A submitted ``generate``: ``result(timeout)`` waits for it. Known once done: ``version``, the
    policy version of the weights it was generated with, and ``seconds``, the engine's time on it."""

    samples: list[list[Sample]] | None = None
    version: int | None = None
    seconds: float = 0.0
    wait: Any = field(default=None, repr=False)  # fn(timeout) -> (samples, version, seconds), for a running one

    def done(self) -> bool:
        return self.samples is not None

    def result(self, timeout: float | None = None) -> list[list[Sample]]:
        if self.samples is None:
            self.samples, self.version, self.seconds = self.wait(timeout)
        return self.samples


class RolloutEngine:
    """Base class of every engine. Callers use exactly what is declared here."""

    lockstep: bool = False
    """Every rank must make the same ``generate`` calls with the same number of prompts (an engine
    whose forwards are collectives, such as HF generate on an FSDP-sharded policy): the trainer then
    runs its periodic eval on every rank, not only on rank 0."""
    batch_size: int | None = None
    """Sequences the engine generates at once, when it batches a fixed number itself (HF generate):
    callers chunk long prompt lists by it. None: the engine schedules its own batches (vLLM)."""
    policy_version: int = 0
    """The optimizer step of the weights the engine samples from now, as ``push`` was told."""
    runs_policy: bool = False
    """The engine runs the trainer's policy module itself (HF generate), so the trainer's autocast
    applies to its forwards; an engine with a model of its own (vLLM) keeps that model's dtype."""

    def generate(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Sample]]:
        """``n`` samples for each prompt, in prompt order: result[i][j] is sample j of prompt i."""
        raise NotImplementedError(f"{type(self).__name__} must implement generate")

    def sync_weights(self, model) -> None:
        """Make the engine sample from ``model``'s current weights."""
        raise NotImplementedError(f"{type(self).__name__} must implement sync_weights")

    def submit(self, prompts: list[str], n: int, params: SamplingParams) -> Pending:
        """Start ``generate`` and return its handle. Default: generate now (no overlap); the handle
        is done at once, with the version last given to ``push``."""
        t0 = time.perf_counter()
        samples = self.generate(prompts, n, params)
        return Pending(samples, self.policy_version, time.perf_counter() - t0)

    def push(self, model, version: int) -> None:
        """``sync_weights`` for a pipelined trainer: ``version`` names the weights (their optimizer
        step). An engine with a queue applies them after the generations already submitted."""
        self.sync_weights(model)
        self.policy_version = version

    def sleep(self) -> None:
        """The rollout phase is over (the trainer calls it once per step, before the update): free
        what the engine can until the next ``sync_weights`` / ``generate``, which wake it."""

    def close(self) -> None:
        """Release the engine's resources; the engine is not used again."""
