"""Audit the reward against a second grader while training: how often math-verify (its own
extraction and verification, as its README calls it) and our checker disagree.

A policy that finds a hole in the reward is paid where an independent grader is not, so a
rising disagreement rate is the first sign of reward hacking. `audit(completions, golds,
ours)` grades a seeded sample with math-verify in the killable symbolic workers (one deadline
per completion, so hostile text cannot stall a step) and returns the rate and the disagreeing
cases; `DisagreementWatch` keeps the rates of a run and says when one climbs well above the
run's early level. A math-verify timeout or parse failure counts as "not paid" by it.

    result = audit(texts, golds, [r.score for r in results], sample=32, seed=step)
    result.rate, result.checked, result.cases   # cases: dicts for the run directory
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Sequence

from rewards.equivalence.symbolic import EQUAL, get_pool


@dataclass(frozen=True)
class Audit:
    rate: float  # disagreeing / checked (0 when none checked)
    checked: int
    cases: list[dict] = field(default_factory=list)  # the disagreements: index, ours, mv, gold, tail


def audit(completions: Sequence[str], golds: Sequence[str], ours: Sequence[float], sample: int = 32,
          seed: int = 0, timeout: float = 5.0) -> Audit:
    """math-verify's verdict on up to `sample` of the completions (seeded choice) against ours."""
    idx = list(range(len(completions)))
    if sample < len(idx):
        idx = sorted(random.Random(seed).sample(idx, sample))
    pool = get_pool()
    cases = []
    for i in idx:
        mv = 1.0 if pool.compare(str(completions[i]), str(golds[i]), timeout, grade=True) == EQUAL else 0.0
        if mv != (1.0 if ours[i] >= 1.0 else 0.0):
            cases.append({"index": i, "ours": float(ours[i]), "math_verify": mv, "gold": str(golds[i]),
                          "tail": str(completions[i])[-400:]})
    return Audit(len(cases) / len(idx) if idx else 0.0, len(idx), cases)


class DisagreementWatch:
    """Flags a rate well above the run's early level: after `warmup` audited steps, a step whose
    rate exceeds `factor` x the early mean and the early mean + `margin`."""

    def __init__(self, warmup: int = 5, factor: float = 2.0, margin: float = 0.05):
        self.warmup, self.factor, self.margin = warmup, factor, margin
        self.rates: list[float] = []

    def add(self, rate: float) -> str | None:
        """Record one step's rate; a warning line when it has climbed, else None."""
        self.rates.append(rate)
        if len(self.rates) <= self.warmup:
            return None
        base = sum(self.rates[:self.warmup]) / self.warmup
        if rate > base * self.factor and rate > base + self.margin:
            return (f"reward/disagree_mv {rate:.2f} against {base:.2f} in the first {self.warmup} steps: "
                    "the policy may have found a hole in the reward (read the audited disagreements)")
        return None
