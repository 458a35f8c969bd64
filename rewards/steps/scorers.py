"""Step scorers: judge each step of a solution and locate the first wrong one.

The interface every step scorer follows (rules here; a process reward model can follow it too):

    scorer(question: str, steps: Sequence[str]) -> StepScores
    StepScores.scores[j]   +1 the step's checkable claims hold, -1 one is refuted, 0 nothing to
                           check (a learned scorer may put P(step correct) in [0, 1] instead)
    StepScores.first_error index of the first wrong step, -1 when none is found
    StepScores.reasons[j]  why (the refuted claim), "" when nothing to say

`steps_from_spans(text, spans)` cuts a completion into steps for scorers that get text plus
character spans. `RuleStepScorer` is the rule-based scorer (`rewards.claims.judge`): exact checks of
arithmetic in prose, LaTeX and GSM8K annotations. It never raises and its work is bounded.

`evaluate_step_checker(records, scorer)` measures a scorer as ProcessBench does (Zheng et al.,
2024, "ProcessBench: Identifying Process Errors in Mathematical Reasoning"): per subset, the
accuracy on erroneous solutions (predicted first-error index == labelled one), on correct
ones (predicted -1), and their harmonic mean F1; the paper's headline is the mean F1 over
subsets. Flag precision is reported beside it: of the solutions the scorer flags, how many
have their first error exactly at the flag, and how many have one at or before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Protocol, Sequence

from rewards.claims.judge import check_claims


@dataclass(frozen=True)
class StepScores:
    """Per-step scores, the first wrong step (-1: none) and a reason per step."""

    scores: tuple[float, ...]
    first_error: int
    reasons: tuple[str, ...] = ()


class StepScorer(Protocol):
    def __call__(self, question: str, steps: Sequence[str]) -> StepScores: ...


def steps_from_spans(text: str, spans: Sequence[tuple[int, int]]) -> list[str]:
    """The steps of `text` given as [start, end) character spans."""
    return [text[a:b] for a, b in spans]


def first_below(scores: Sequence[float], threshold: float) -> int:
    """Index of the first score below `threshold`, -1 if none (-1/0/+1 scores: threshold 0)."""
    return next((j for j, s in enumerate(scores) if s < threshold), -1)


def check_step_text(step: str) -> tuple[int, str]:
    """(+1 / -1 / 0, reason) for one step's text: -1 names the first refuted claim."""
    claims = check_claims(step)
    bad = next((c for c in claims if not c.ok), None)
    if bad is not None:
        return -1, f"false: {bad.text}"
    return (1, "") if claims else (0, "")


class RuleStepScorer:
    """The rule-based step scorer (see the module docstring); the question is not used."""

    def __call__(self, question: str, steps: Sequence[str]) -> StepScores:
        results = [check_step_text(s) for s in steps]
        scores = tuple(float(s) for s, _ in results)
        return StepScores(scores, first_below(scores, 0), tuple(r for _, r in results))


@dataclass
class SubsetResult:
    """ProcessBench numbers for one subset (accuracies and F1 in percent)."""

    name: str
    erroneous: int = 0
    correct: int = 0
    hit_erroneous: int = 0
    hit_correct: int = 0
    flags: int = 0
    flags_exact: int = 0
    flags_at_or_after: int = 0

    @property
    def acc_erroneous(self) -> float:
        return 100.0 * self.hit_erroneous / self.erroneous if self.erroneous else 0.0

    @property
    def acc_correct(self) -> float:
        return 100.0 * self.hit_correct / self.correct if self.correct else 0.0

    @property
    def f1(self) -> float:
        a, b = self.acc_erroneous, self.acc_correct
        return 2 * a * b / (a + b) if a + b else 0.0

    @property
    def false_alarm_rate(self) -> float:
        return 100.0 - self.acc_correct if self.correct else 0.0

    @property
    def precision_exact(self) -> float:
        return 100.0 * self.flags_exact / self.flags if self.flags else float("nan")

    @property
    def precision_error_by_flag(self) -> float:
        return 100.0 * self.flags_at_or_after / self.flags if self.flags else float("nan")

    def add(self, label: int, pred: int) -> None:
        if label < 0:
            self.correct += 1
            self.hit_correct += pred < 0
        else:
            self.erroneous += 1
            self.hit_erroneous += pred == label
        if pred >= 0:
            self.flags += 1
            self.flags_exact += pred == label
            self.flags_at_or_after += 0 <= label <= pred


def evaluate_step_checker(records: Iterable[Mapping], scorer: StepScorer,
                          subset_key: str = "dataset") -> dict[str, SubsetResult]:
    """ProcessBench metric per subset (records with `question`, `steps`, `first_error_step`;
    those without step labels are skipped). The "average" entry's f1 is the mean subset F1,
    the paper's headline; its counts are pooled."""
    out: dict[str, SubsetResult] = {}
    for rec in records:
        label, steps = rec.get("first_error_step"), rec.get("steps")
        if label is None or steps is None:
            continue
        pred = scorer(rec.get("question", ""), steps).first_error
        name = str(rec.get(subset_key, "all"))
        out.setdefault(name, SubsetResult(name)).add(int(label), int(pred))
    return out


def average_f1(results: Mapping[str, SubsetResult]) -> float:
    """The paper's headline number: the mean of the subsets' F1."""
    return sum(r.f1 for r in results.values()) / len(results) if results else 0.0


# Published ProcessBench average F1 (Zheng et al. 2024; Zhang et al. 2025 for Qwen2.5-Math-PRM-7B).
PUBLISHED = [("Math-Shepherd-PRM-7B", 31.5), ("Skywork-PRM-7B", 42.1),
             ("Qwen2.5-Math-7B-PRM800K", 56.5), ("Qwen2.5-Math-PRM-7B", 73.5)]
_COUNTS = ("erroneous", "correct", "hit_erroneous", "hit_correct", "flags", "flags_exact", "flags_at_or_after")


def pooled(results: Mapping[str, SubsetResult]) -> SubsetResult:
    """Every subset's counts added together."""
    out = SubsetResult("all (pooled)")
    for r in results.values():
        for name in _COUNTS:
            setattr(out, name, getattr(out, name) + getattr(r, name))
    return out


def format_table(results: Mapping[str, SubsetResult]) -> str:
    """The ProcessBench table: per subset, pooled, and the average F1 (the paper's metric)."""
    lines = [f"{'subset':<14}{'n err':>6}{'n cor':>6}{'acc err':>9}{'acc cor':>9}{'F1':>7}"
             f"{'false alarm':>13}{'flags':>7}{'prec exact':>12}{'prec err<=flag':>16}"]
    for r in [*results.values(), pooled(results)]:
        lines.append(f"{r.name:<14}{r.erroneous:>6}{r.correct:>6}{r.acc_erroneous:>9.1f}"
                     f"{r.acc_correct:>9.1f}{r.f1:>7.1f}{r.false_alarm_rate:>12.1f}%{r.flags:>7}"
                     f"{r.precision_exact:>12.1f}{r.precision_error_by_flag:>16.1f}")
    lines.append(f"{'average F1':<14}{average_f1(results):>44.1f}   (the paper's metric: mean of subset F1)")
    return "\n".join(lines)
