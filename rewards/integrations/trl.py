"""Reward functions for TRL's `GRPOTrainer(reward_funcs=[...])` (written against TRL 1.16).

    from rewards.integrations.trl import accuracy_reward, format_reward, steps_reward
    trainer = GRPOTrainer(model, reward_funcs=[accuracy_reward, format_reward], train_dataset=ds, ...)

TRL calls every reward function as `f(prompts=..., completions=..., completion_ids=...,
**columns, trainer_state=..., log_extra=..., log_metric=...)`, where `columns` are the dataset's
other columns, one value per completion; it wants one float per completion back, `None` meaning
"does not apply to this completion" (logged as NaN, left out of that reward's mean, and adding
nothing to the weighted sum). Completions are text, or a list of messages for chat datasets
(the last assistant message is scored). TRL logs each function under its `__name__`.

- accuracy: 1.0/0.0 from `rewards.check` against the gold read from a dataset column (default:
  the first of `answer`, `solution` the batch has; a whole reference solution works too, see
  `gold.gold_answer`); `None` for rows whose gold is empty. Also logs `<name>_pred` and
  `<name>_reason` columns to TRL's completions table.
- format: `rewards.format_reward` (one final answer in the expected form, nothing after it).
- steps: `REWARDS["steps"]` against the same gold column (`rewards.steps.reward.steps_score`: the
  outcome times the share of judged steps that are right, so a wrong answer earns nothing from
  its steps); `None` for rows whose gold is empty.
Make variants with `make_accuracy_reward(gold_column=..., style=...)` and the like. Nothing here
imports TRL or torch; the functions only follow its calling convention.
"""

from __future__ import annotations

from typing import Sequence

from rewards.integrations.gold import completion_text, gold_answer
from rewards.outcome.answer import format_reward as _format_reward
from rewards.registry import score_batch
from rewards.steps.reward import steps_score

DEFAULT_GOLD_COLUMNS = ("answer", "solution")


class TRLReward:
    """One reward function in TRL's convention; `kind` is "accuracy", "format" or "steps"."""

    def __init__(self, kind: str, *, name: str | None = None, style: str = "auto",
                 gold_column: str | Sequence[str] = DEFAULT_GOLD_COLUMNS, workers: int = 2):
        if kind not in ("accuracy", "format", "steps"):
            raise ValueError(f"unknown reward kind {kind!r}; valid: accuracy, format, steps")
        if style not in ("auto", "gsm8k", "math"):
            raise ValueError(f"unknown style {style!r}; valid: auto, gsm8k, math")
        self.kind, self.style, self.workers = kind, style, workers
        self.gold_columns = (gold_column,) if isinstance(gold_column, str) else tuple(gold_column)
        self.__name__ = name or kind  # what TRL logs: rewards/<name>/mean

    def __repr__(self) -> str:
        return f"TRLReward({self.kind!r}, name={self.__name__!r}, style={self.style!r})"

    def __call__(self, prompts=None, completions=None, **kwargs) -> list[float | None]:
        texts = [completion_text(c) for c in completions or []]
        if self.kind == "format":
            return [_format_reward(t, self.style) for t in texts]
        if self.kind == "steps":
            golds = [gold_answer(g) for g in self._gold_column(kwargs, len(texts))]
            return [None if g is None else steps_score(t, g, self.style) for t, g in zip(texts, golds)]
        return self._accuracy(texts, kwargs)

    def _accuracy(self, texts: list[str], columns: dict) -> list[float | None]:
        golds = [gold_answer(g) for g in self._gold_column(columns, len(texts))]
        todo = [i for i, g in enumerate(golds) if g is not None]
        results = score_batch([texts[i] for i in todo], [golds[i] for i in todo], self.style,
                              workers=self.workers, progress=False)
        scores: list[float | None] = [None] * len(texts)
        preds: list[str | None] = [None] * len(texts)
        reasons = ["no gold answer"] * len(texts)
        for i, res in zip(todo, results):
            scores[i], preds[i], reasons[i] = res.score, res.pred, res.reason
        log_extra = columns.get("log_extra")
        if callable(log_extra):
            log_extra(f"{self.__name__}_pred", preds)
            log_extra(f"{self.__name__}_reason", reasons)
        return scores

    def _gold_column(self, columns: dict, n: int) -> list:
        for name in self.gold_columns:
            if name in columns:
                values = list(columns[name])
                if len(values) != n:
                    raise ValueError(f"gold column {name!r} has {len(values)} values for {n} completions")
                return values
        have = sorted(k for k in columns if k not in ("trainer_state", "log_extra", "log_metric",
                                                       "completion_ids", "environments"))
        raise KeyError(f"reward {self.__name__!r} reads the gold answer from column "
                       f"{' or '.join(map(repr, self.gold_columns))}, but the dataset has {have}; "
                       f"pass gold_column=... to make_{self.kind}_reward")


def make_accuracy_reward(*, gold_column: str | Sequence[str] = DEFAULT_GOLD_COLUMNS, style: str = "auto",
                         name: str = "accuracy", workers: int = 2) -> TRLReward:
    """Accuracy against the gold in `gold_column` (a name, or names tried in order)."""
    return TRLReward("accuracy", name=name, style=style, gold_column=gold_column, workers=workers)


def make_format_reward(*, style: str = "auto", name: str = "format") -> TRLReward:
    return TRLReward("format", name=name, style=style)


def make_steps_reward(*, gold_column: str | Sequence[str] = DEFAULT_GOLD_COLUMNS, style: str = "auto",
                      name: str = "steps") -> TRLReward:
    return TRLReward("steps", name=name, style=style, gold_column=gold_column)


accuracy_reward = make_accuracy_reward()
format_reward = make_format_reward()
steps_reward = make_steps_reward()

__all__ = ["TRLReward", "accuracy_reward", "format_reward", "make_accuracy_reward", "make_format_reward",
           "make_steps_reward", "steps_reward"]
