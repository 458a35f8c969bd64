"""Reward registry, weighted combination, and batch scoring.

Every callable in `REWARDS` has the signature `fn(completion, gold, style="auto") -> float`
and never raises on bad model text. Pick them by name; a wrong name lists the valid ones.
"""

from __future__ import annotations

import importlib
from concurrent.futures import ThreadPoolExecutor, as_completed
from functools import partial
from typing import Callable, Sequence

from rewards.outcome.answer import RewardResult, check, format_reward, score_completion
from rewards.outcome.code import code_reward, default_runner
from rewards.steps.reward import steps_score

RewardFn = Callable[..., float]


def _correct(completion: str, gold: str, style: str = "auto") -> float:
    return score_completion(completion, gold, style)


def _format(completion: str, gold: str, style: str = "auto") -> float:
    return format_reward(completion, style)


def _code(completion: str, gold: str, style: str = "auto") -> float:
    return code_reward(completion, gold)


def _steps(completion: str, gold: str, style: str = "auto") -> float:
    """Outcome x share of judged steps that are right (`rewards.steps.reward.steps_score`): 0 for a
    wrong answer however its steps look."""
    return steps_score(completion, gold, style)


REWARDS: dict[str, RewardFn] = {
    "correct": _correct,
    "format": _format,
    "code": _code,
    "steps": _steps,
}


def get_reward(name: str) -> RewardFn:
    """The reward called `name`; KeyError naming every valid reward otherwise."""
    try:
        return REWARDS[name]
    except KeyError:
        raise KeyError(f"unknown reward {name!r}; valid: {', '.join(sorted(REWARDS))}") from None


def build_reward(name: str, *, timeout: float = 5.0, sandbox_backend: str = "auto",
                 policy: str = "lenient") -> RewardFn:
    """REWARDS[name] with its options bound: the per-completion timeout and the answer policy
    (`strict`/`lenient`, `rewards.outcome.answer.check`) for "correct" and "steps", the sandbox backend
    for "code" (RewardConfig.timeout / .policy / .sandbox_backend). A name of
    the form ``package.module:function`` is a user function with the registry's signature, imported."""
    if ":" in name:
        return _import_reward(name)
    fn = get_reward(name)
    if name == "correct":
        def correct(completion: str, gold: str, style: str = "auto") -> float:
            return check(completion, gold, style, timeout=timeout, policy=policy).score
        return correct
    if name == "steps":
        def steps(completion: str, gold: str, style: str = "auto") -> float:
            return steps_score(completion, gold, style, timeout=timeout, policy=policy)
        return steps
    if name == "code":
        runner = partial(default_runner, backend=sandbox_backend)

        def code(completion: str, gold: str, style: str = "auto") -> float:
            return code_reward(completion, gold, runner=runner)
        return code
    return fn


def _import_reward(name: str) -> RewardFn:
    module, _, attr = name.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"reward {name!r}: cannot import {attr} from {module} ({e})") from None


class CombinedReward:
    """sum_i w_i * fn_i(completion, gold, style) over registered rewards (or user functions given
    as package.module:function); `.components` for logging. Names in `always` are scored and
    reported even without a weight (weight 0), e.g. correctness while training on another reward."""

    def __init__(self, weights: dict[str, float], *, timeout: float = 5.0,
                 sandbox_backend: str = "auto", always: Sequence[str] = (), policy: str = "lenient"):
        self.weights = {**{name: 0.0 for name in always}, **weights}
        if not self.weights:
            raise ValueError("combine() needs at least one reward name")
        self.fns = {name: build_reward(name, timeout=timeout, sandbox_backend=sandbox_backend, policy=policy)
                    for name in self.weights}

    def components(self, completion: str, gold: str, style: str = "auto") -> dict[str, float]:
        return {name: float(fn(completion, gold, style)) for name, fn in self.fns.items()}

    def total(self, parts: dict[str, float]) -> float:
        """The weighted sum of `components`' values."""
        return sum(self.weights[n] * v for n, v in parts.items())

    def __call__(self, completion: str, gold: str, style: str = "auto") -> float:
        return self.total(self.components(completion, gold, style))


def combine(weights: dict[str, float], *, timeout: float = 5.0,
            sandbox_backend: str = "auto", policy: str = "lenient") -> CombinedReward:
    """A reward that is the weighted sum of registered rewards, e.g. {"correct": 1, "format": .1}."""
    return CombinedReward(weights, timeout=timeout, sandbox_backend=sandbox_backend, policy=policy)


def score_batch(completions: Sequence[str], golds: Sequence[str], style: str = "auto",
                workers: int = 2, progress: bool = True) -> list[RewardResult]:
    """`check` over many pairs with `workers` threads (and as many symbolic worker processes)."""
    if len(completions) != len(golds):
        raise ValueError(f"{len(completions)} completions but {len(golds)} golds")
    from rewards.equivalence.symbolic import get_pool

    get_pool(max(1, workers))
    out: list[RewardResult | None] = [None] * len(completions)
    bar = _progress(len(completions), progress)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as ex:
        futures = {ex.submit(check, c, g, style): i
                   for i, (c, g) in enumerate(zip(completions, golds))}
        for fut in as_completed(futures):
            out[futures[fut]] = fut.result()
            bar.update(1)
    bar.close()
    return out  # type: ignore[return-value]


def _progress(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, disable=not enabled, desc="scoring", unit="ans")
