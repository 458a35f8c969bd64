"""Combine a learned step scorer (a process reward model) with the rule checks, step by step.

Both speak per step. The rules (`rewards.claims.judge` through `rewards.steps.reward`) say -1 (a claim is
refuted), +1 (every claim holds) or 0 (nothing to check); a process reward model (PRM) says
P(step correct) in [0, 1], or None where it gave no score (the step was cut off by its context
length). `mix_scores` turns the two into one P(step correct) per step, `q`:

- `rule_overrides` (default): a refuted claim makes the step wrong (q = 0) whatever the PRM
  says; every other step keeps the PRM's probability. Claims that hold do NOT override: they
  verify the arithmetic, not the reasoning (on ProcessBench 369 of the 1,501 first errors are
  steps whose written arithmetic is right), so the PRM keeps the say there.
- `weighted`: q = (1 - w) * p + w * rule, with rule = 1 for +1 and 0 for -1; where only one of
  them has a verdict (rule 0, or no PRM score) that one is used.
- `prm_only`: q = p.
Without a PRM (every p None), q = 0 for refuted steps and None (no verdict) elsewhere, for
every mode.

`penalties(q, threshold, penalty)`: the reward value of each step, the clip mechanism of Gao et
al. 2024 ("On Designing Effective RL Reward at Training Time for LLM Reasoning"): only steps the
scorer doubts are punished, -penalty * (threshold - q) / threshold for q < threshold, 0 above
(with threshold 0.5 and penalty 0.5: min(q - 0.5, 0), their clip). Steps the scorer likes earn
nothing, so padding a solution with steps a PRM approves of cannot raise its return, the
failure Gao et al. report for unclipped PRM rewards. With rules alone this gives exactly the
rule points of `rewards.steps.reward` (-penalty at a refuted step, nothing elsewhere).

`MixedStepScorer` is the same mix as a step scorer (`rewards.steps.scorers` interface), for
measuring rules + PRM on ProcessBench.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal, Sequence

from rewards.steps.scorers import RuleStepScorer, StepScores, first_below

MIXES = ("rule_overrides", "weighted", "prm_only")
Mix = Literal["rule_overrides", "weighted", "prm_only"]


@dataclass(frozen=True)
class StepMix:
    """How PRM probabilities and rule verdicts combine (module docstring): the mode, the rule's
    weight in `weighted`, and the threshold below which a step counts as wrong."""

    mode: Mix = "rule_overrides"
    rule_weight: float = 0.5
    threshold: float = 0.5

    def __post_init__(self):
        if self.mode not in MIXES:
            raise ValueError(f"unknown step mix {self.mode!r}; choose from {', '.join(MIXES)}")
        if not (0 <= self.rule_weight <= 1 and 0 < self.threshold <= 1):
            raise ValueError("need 0 <= rule_weight <= 1 and 0 < threshold <= 1")


def _rule_value(r: float) -> float | None:
    return 0.0 if r < 0 else 1.0 if r > 0 else None


def mix_scores(prm: Sequence[float | None], rule: Sequence[float], mix: StepMix = StepMix()) -> list[float | None]:
    """One P(step correct) per step, or None where neither says anything (module docstring)."""
    if len(prm) != len(rule):
        raise ValueError(f"{len(prm)} PRM scores but {len(rule)} rule verdicts: they must score the same steps")
    out: list[float | None] = []
    for p, r in zip(prm, rule):
        v = _rule_value(r)
        if p is None:  # no PRM verdict: the rules alone, and only a refutation counts
            out.append(0.0 if r < 0 else None)
        elif mix.mode == "prm_only":
            out.append(float(p))
        elif mix.mode == "rule_overrides":
            out.append(0.0 if r < 0 else float(p))
        else:
            out.append(float(p) if v is None else (1 - mix.rule_weight) * float(p) + mix.rule_weight * v)
    return out


def penalties(q: Sequence[float | None], threshold: float = 0.5, penalty: float = 0.5) -> list[float]:
    """Reward value per step: -penalty * (threshold - q) / threshold below the threshold, else 0."""
    return [-penalty * (threshold - x) / threshold if x is not None and x < threshold else 0.0 for x in q]


class MixedStepScorer:
    """Rules + a probability scorer as one step scorer: `scores` are the mixed P(step correct)
    (1.0 where nothing has a verdict), `first_error` the first below `mix.threshold`."""

    def __init__(self, prm: Callable[[str, Sequence[str]], StepScores], mix: StepMix = StepMix(),
                 rules: Callable[[str, Sequence[str]], StepScores] | None = None):
        self.prm, self.mix, self.rules = prm, mix, rules or RuleStepScorer()

    def __call__(self, question: str, steps: Sequence[str]) -> StepScores:
        p = self.prm(question, steps)
        r = self.rules(question, steps)
        probs = [None if x is None or x != x else x for x in p.scores]  # NaN: no score
        q = mix_scores(probs, r.scores, self.mix)
        scores = tuple(1.0 if x is None else x for x in q)
        reasons = tuple(rr or pr for rr, pr in zip(r.reasons, p.reasons or ("",) * len(steps)))
        return StepScores(scores, first_below(scores, self.mix.threshold), reasons)
