"""Which questions a step draws: uniform (``QuestionSampler``) or by pass rate (``train.sampling``).

A group whose G samples are all correct, or all wrong, has advantage 0 and teaches nothing.
``PassRateSampler`` walks the same seeded per-epoch shuffle as ``QuestionSampler`` but remembers
each question's pass rate (the share of its samples that the ``correct`` reward passed) at its
last draw, and when the walk reaches a question again:

- last drawn all-correct: retired, skipped for ``train.retire_epochs`` epochs after that draw
  (open-instruct's pass-rate retirement, prime-rl's difficulty pool: solved questions leave);
- last drawn all-wrong: drawn with probability ``train.unsolved_keep`` (a seeded coin per
  epoch and position), so questions out of reach are drawn less but come back;
- otherwise (or never drawn): drawn.

If a whole epoch's walk finds nothing to draw, the next question is drawn anyway. The pass
rates are the sampler's state: checkpointed with its position, so a resumed run draws the same
stream. Under torchrun every rank keeps the same sampler (it draws the global list), so
``observe`` gathers the pass rates of every rank's groups first.
"""

from __future__ import annotations

import random

from pipeline.config import ConfigError
from pipeline.grpo.components import QuestionSampler
from pipeline.parallel import distributed

SAMPLINGS = ("uniform", "pass_rate")
CORRECT = "correct"  # the reward component that decides "solved" (always scored: rewards package)


class PassRateSampler(QuestionSampler):
    """``QuestionSampler``'s order, skipping questions that taught nothing at their last draw."""

    def __init__(self, problems: list[dict], seed: int, retire_epochs: int = 1, unsolved_keep: float = 0.5):
        super().__init__(problems, seed)
        self.retire_epochs, self.unsolved_keep = retire_epochs, unsolved_keep
        self.handed = 0  # questions handed out: the draw index (seeds) counts draws, not skips
        self.seen: dict[str, tuple[float, int]] = {}  # problem id -> (pass rate, epoch of that draw)
        self.skipped = 0  # questions passed over so far (a logged statistic)

    def take(self, k: int) -> list[dict]:
        out: list[dict] = []
        passed = 0  # consecutive skips: after a whole epoch of them, draw anyway
        while len(out) < k:
            if self.pos == len(self._order):
                self.epoch, self.pos = self.epoch + 1, 0
                self._order = self._shuffle()
            problem = self.problems[self._order[self.pos]]
            self.pos += 1
            if passed < len(self.problems) and not self._draws(problem):
                passed += 1
                self.skipped += 1
                continue
            passed = 0
            out.append(problem)
        self.handed += len(out)
        return out

    def _draws(self, problem: dict) -> bool:
        if problem["id"] not in self.seen:
            return True
        rate, epoch = self.seen[problem["id"]]
        if rate >= 1.0:
            return self.epoch - epoch > self.retire_epochs
        if rate <= 0.0:  # a coin that depends only on (seed, epoch, position): the same on resume
            return random.Random(f"{self.seed}/{self.epoch}/{self.pos}").random() < self.unsolved_keep
        return True

    def observe(self, groups: list[list]) -> None:
        """Record the pass rate of each scored group (lists of episodes) of every rank."""
        rates = [(g[0].problem_id, sum(e.rewards.get(CORRECT, 0.0) >= 1.0 for e in g) / len(g)) for g in groups if g]
        for pid, rate in distributed.gather_list(rates):
            self.seen[pid] = (rate, self.epoch)

    @property
    def drawn(self) -> int:
        return self.handed

    def stats(self) -> dict[str, float]:
        """Logged per step: questions currently retired and passed over so far."""
        retired = sum(rate >= 1.0 and self.epoch - epoch <= self.retire_epochs for rate, epoch in self.seen.values())
        return {"sampling/retired": float(retired), "sampling/skipped": float(self.skipped)}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "handed": self.handed, "skipped": self.skipped,
                "seen": {pid: list(v) for pid, v in self.seen.items()}}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.handed, self.skipped = state["handed"], state["skipped"]
        self.seen = {pid: (float(v[0]), int(v[1])) for pid, v in state["seen"].items()}


def build_sampler(cfg, problems: list[dict]) -> QuestionSampler:
    """The question sampler ``train.sampling`` names, over the first ``train.question_pool`` problems
    (all when 0)."""
    if pool := cfg.train.question_pool:
        if pool > len(problems):
            raise ConfigError(f"train.question_pool={pool} but {cfg.train.task} has only {len(problems)} "
                             "training questions")
        problems = problems[:pool]
    if cfg.train.sampling == "pass_rate":
        return PassRateSampler(problems, cfg.seed, cfg.train.retire_epochs, cfg.train.unsolved_keep)
    return QuestionSampler(problems, cfg.seed)
