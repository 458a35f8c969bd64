"""Rule-based PROCESS reward: per-step claim checks turned into reward points for GRPO.

1. Steps (`split_steps`). With "Step k:" markers at line starts, each step runs from one marker
   to the next (text before the first marker is a step of its own); otherwise every non-blank
   line is a step, except that a line break inside math (`$...$`, `\\[...\\]`, an `align`)
   does not end one. Spans `[start, end)` exclude surrounding whitespace.
2. Checks (`check_steps`): each step's claims (`rewards.claims.judge`: arithmetic in prose, LaTeX
   and `<<a=b>>` annotations) give +1 (all true), -1 (one false) or 0 (none). A true claim is
   *used* when its result feeds the final answer: its value is the answer, or an operand of a
   later used claim (followed back from the answer, so a chain of padding that never reaches
   the answer earns nothing).
3. Reward points (`step_rewards`), the values process supervision places at token positions:
   - every step with a false claim gets `-penalty` at its end;
   - the final step gets the outcome (1.0 / 0.0) plus the credit: `credit` per step whose claims
     are all true with at least one used, at most `max_credit` in all (< 1);
   - a wrong answer pays `penalty` in all at least (`charge_unflagged`): what its steps were not
     charged (all of it when none was judged wrong) goes at its final step, since its error is in
     a step no check could reach. Without this, silence pays: on problems a policy mostly gets
     wrong, a chain with fewer checkable claims scores above one whose slip is found, and the
     process arm of the sparse experiment learned to write fewer calculations
     (docs/process_supervision.md). With it a found slip costs no more than a hidden one, and
     the found one sits at the step that made it;
   - with `expected` (the reference solution's calculations, `expected_calculations`), a wrong
     answer pays `penalty` per calculation it did not write as well (`charge_missing`): it owes
     max(penalty, charged + penalty x missing), missing = expected - its written steps (those
     refuted, or credited below), never below 0. At 4x the compute the policy learned to write
     fewer calculations again, since a wrong chain with two refuted steps paid twice what a
     silent one did; now a step left out costs what a refuted one does, and more of the
     completion's tokens, since its charge sits at the end. What it owes beyond its steps' points
     goes at the final step in points of at most `penalty` each (the extra ones share the final
     step's span and come just before it), so no point is lower than a refuted step's;
   - steps with nothing to judge get no point of their own: their tokens share the next point.
   Why this shape: in DeepSeekMath's normalisation (rewards normalised over all steps of the
   group, each token summing the normalised rewards of the steps from it to the end) every
   extra point moves a completion's advantage by (r - mean) / std, so points with no evidence
   behind them (0 for "nothing to check") reward or punish length, not correctness. Here a
   completion has one point per false step or charge plus one final point, and a wrong answer's
   final point is at most `max_credit` < 1 <= a right answer's; since a false step's point is the
   group's lowest value (no point is below -penalty), a right answer with no false claim has a
   higher advantage than any wrong answer at every token, however the wrong one is padded
   (tests/test_step_padding.py, tests/test_step_missing.py).
4. Outcome: pass `outcome=` (the `RewardResult` or score the outcome reward already computed)
   to grade nothing twice; else, with a gold answer, `check(completion, gold, style, timeout)`
   grades it once. The final answer that claims must feed is the outcome's `pred`, or
   `extract_answer(completion, style)`.
5. Expected calculations (`expected_calculations(solution, answer)`): the steps of a reference
   solution that the same checks credit (true, non-trivial claims feeding its answer), e.g. one
   per `<<a+b=c>>` line of a GSM8K or gsm-synth solution. Judging the reference with the
   completion's own rules means a form the checks cannot read is expected from neither.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

from rewards.claims.arith import ParseError, Value, evaluate
from rewards.claims.judge import Claim, check_claims
from rewards.claims.latex_text import rewrite
from rewards.steps.mix import StepMix, mix_scores, penalties

MAX_STEPS = 400  # more lines than this: the rest joins the last step
MAX_CHECKED_CHARS = 60_000
MAX_FEEDS = 2_000  # claims are read in the first this many characters of a completion
_STEP_MARK = re.compile(r"(?im)^[ \t]*(?:\*\*|#+[ \t]*)?step[ \t]*\d+[ \t]*[:.)]")
_MATH_TOGGLE = re.compile(r"\\begin\{|\\end\{|\\\[|\\\]|\$\$|\\\(|\\\)|(?<!\\)\$")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


@dataclass(frozen=True)
class StepRewardConfig:
    """Values of the reward points (see the module docstring, point 3)."""

    credit: float = 0.1
    max_credit: float = 0.3
    penalty: float = 0.5
    charge_unflagged: bool = True
    charge_missing: bool = True

    def __post_init__(self):
        if not (0 <= self.credit and 0 <= self.max_credit < 1 and self.penalty >= 0):
            raise ValueError("need credit >= 0, 0 <= max_credit < 1 and penalty >= 0")


@dataclass(frozen=True)
class StepCheck:
    """One step: span, +1/-1/0, its claims, how many are used toward the answer, the reason."""

    start: int
    end: int
    score: int
    claims: tuple[Claim, ...] = ()
    used: int = 0
    reason: str = ""

    @property
    def false_claims(self) -> int:
        return sum(not c.ok for c in self.claims)


@dataclass(frozen=True)
class StepReward:
    """One reward point: span [start, end) (from the previous point's end), the step's score
    (+1/-1/0), claim counts, `value` (credit or penalty), and on the last point the outcome.
    `reward` = value + outcome is what goes at the point's last token."""

    start: int
    end: int
    score: int
    claims: int = 0
    false_claims: int = 0
    outcome: float | None = None
    value: float = 0.0

    @property
    def reward(self) -> float:
        return self.value + (self.outcome or 0.0)


def _math_breaks(text: str) -> set[int]:
    """Positions of newlines that fall inside math (they do not end a step)."""
    inside, depth, out = False, 0, set()
    pos = 0
    for m in _MATH_TOGGLE.finditer(text):
        if inside or depth:
            out.update(i for i in range(pos, m.start()) if text[i] == "\n")
        tok = m.group(0)
        if tok == "\\begin{":
            depth += 1
        elif tok == "\\end{":
            depth = max(0, depth - 1)
        elif tok in ("\\[", "\\("):
            inside = True
        elif tok in ("\\]", "\\)"):
            inside = False
        else:  # $ or $$ toggles
            inside = not inside
        pos = m.end()
    return out


def split_steps(text: str) -> list[tuple[int, int]]:
    """Character spans of the steps (see the module docstring, point 1)."""
    if not isinstance(text, str):
        return []
    marks = [m.start() for m in _STEP_MARK.finditer(text)]
    if marks:
        bounds = ([0] if text[:marks[0]].strip() else []) + marks + [len(text)]
    else:
        keep = _math_breaks(text)
        bounds = [0] + [i + 1 for i, c in enumerate(text) if c == "\n" and i not in keep] + [len(text)]
    out = []
    for a, b in zip(bounds, bounds[1:]):
        seg = text[a:b]
        if seg.strip():
            out.append((a + len(seg) - len(seg.lstrip()), a + len(seg.rstrip())))
    if len(out) > MAX_STEPS:
        out = out[:MAX_STEPS - 1] + [(out[MAX_STEPS - 1][0], out[-1][1])]
    return out


def _answer_values(pred: str | None) -> list[Value]:
    """Numbers the final answer states: its value, and every number written in it."""
    if not pred:
        return []
    pred = pred[:200]
    out: list[Value] = [Fraction(x) for x in _NUMBER.findall(pred.replace(",", ""))]
    try:
        out.append(evaluate(rewrite(pred).replace(" ", "")))
    except ParseError:
        pass
    return out


def _same(a: Value, b: Value) -> bool:
    return a == b or abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(a)))


def used_claims(claims: list[Claim], answer: list[Value]) -> list[bool]:
    """For claims in text order: is each one true and feeding the answer (directly or through
    later claims that do, true or not)? Followed backwards from the answer."""
    used = [False] * len(claims)
    feeds: list[Value] = list(answer)
    for i in range(len(claims) - 1, -1, -1):
        c = claims[i]
        if c.value is not None and any(_same(c.value, v) for v in feeds[:MAX_FEEDS]):
            used[i] = c.ok
            feeds.extend(c.operands)
    return used


def trivial(claim: Claim) -> bool:
    """A claim that restates a number (`50 = 50`, `50 * 1 = 50`, `50 + 0 - 0 = 50`, `50 / 1 = 50`):
    its value is one of its operands and every other operand is 0 or 1. It is checked (a false
    one still costs) but earns no credit: padding is not work."""
    if claim.value is None:
        return False
    ops = list(claim.operands)
    same = next((k for k, v in enumerate(ops) if _same(v, claim.value)), None)
    if same is None:
        return not ops
    del ops[same]
    return all(v in (0, 1) for v in ops)


def check_steps(completion: str, answer: str | None = None) -> list[StepCheck]:
    """Every step with its claims checked; `answer` (the final answer text) marks used claims."""
    if not isinstance(completion, str):
        return []
    spans = split_steps(completion)
    per_step = [check_claims(completion[a:b]) if a < MAX_CHECKED_CHARS else [] for a, b in spans]
    flat = [c for cs in per_step for c in cs]
    used = used_claims(flat, _answer_values(answer))
    out, k = [], 0
    for (a, b), cs in zip(spans, per_step):
        n_used = sum(u and not trivial(c) for u, c in zip(used[k:k + len(cs)], cs))
        k += len(cs)
        bad = next((c for c in cs if not c.ok), None)
        score = -1 if bad else (1 if cs else 0)
        out.append(StepCheck(a, b, score, tuple(cs), n_used, f"false: {bad.text}" if bad else ""))
    return out


def _credited(step: StepCheck) -> bool:
    """A step whose claims all hold, one of them non-trivial and feeding the answer."""
    return step.score == 1 and step.used > 0


def expected_calculations(solution: str | None, answer: str | None) -> int:
    """How many calculations a reference solution makes (module docstring, point 5); 0 without one."""
    if not isinstance(solution, str) or not solution.strip():
        return 0
    return sum(_credited(s) for s in check_steps(solution, answer))


def _charges(amount: float, room: float, size: float) -> tuple[float, list[float]]:
    """`amount` split into what the final point takes (at most `room`) and extra charges of at
    most `size` each."""
    first = min(amount, max(room, 0.0))
    amount -= first
    extra = []
    while size > 0 and amount > 1e-12:
        extra.append(min(size, amount))
        amount -= extra[-1]
    return first, extra


def _outcome(completion, gold, style, timeout, outcome, policy="lenient") -> tuple[float | None, str | None]:
    """(score, final answer text): reuse a given outcome, else grade once (or not at all)."""
    from rewards.answers.extract import extract_answer
    from rewards.outcome.answer import RewardResult, check

    if isinstance(outcome, RewardResult):
        return float(outcome.score), outcome.pred
    if outcome is None and gold is not None:
        res = check(completion, gold, style, timeout=timeout, policy=policy)
        return float(res.score), res.pred
    try:
        pred = extract_answer(completion, style)
    except ValueError:
        raise
    except Exception:  # noqa: BLE001 - a reward never raises on model text
        pred = None
    return (None if outcome is None else float(outcome)), pred


def step_rewards(completion: str, gold: str | None = None, style: str = "auto", *,
                 timeout: float = 5.0, outcome=None, config: StepRewardConfig | None = None,
                 step_probs: Sequence[float | None] | None = None, mix: StepMix | None = None,
                 expected: int | None = None) -> list[StepReward]:
    """Reward points for process supervision (module docstring, points 3-4). `outcome`: the
    outcome reward's `RewardResult` or score for this completion, reused as is. `expected`: the
    calculations of the problem's reference solution (`expected_calculations`), for the charge
    on calculations a wrong answer left out.
    `step_probs`: a process reward model's P(step correct) for each step of
    `split_steps(completion)` (None: no score), combined with the rule verdicts by `mix`
    (`rewards.steps.mix`: a step below the threshold gets a clipped penalty); without it the
    points are the rules' alone."""
    if not isinstance(completion, str):
        return []
    cfg = config or StepRewardConfig()
    score, pred = _outcome(completion, gold, style, timeout, outcome)
    steps = check_steps(completion, pred)
    if not steps:
        return []
    if step_probs is not None and len(step_probs) != len(steps):
        raise ValueError(f"{len(step_probs)} step probabilities for {len(steps)} steps of split_steps(completion)")
    mix = mix or StepMix()
    q = mix_scores(step_probs if step_probs is not None else [None] * len(steps), [s.score for s in steps], mix)
    values = penalties(q, mix.threshold, cfg.penalty)
    charged = owed = -sum(v for v in values if v < 0)
    if score is not None and score <= 0:
        if cfg.charge_unflagged:
            owed = max(owed, cfg.penalty)
        if cfg.charge_missing and expected:
            written = sum(s.score < 0 or _credited(s) for s in steps)
            missing = min(max(0, expected - written), MAX_STEPS)  # a reference has at most MAX_STEPS steps
            owed = max(owed, charged + cfg.penalty * missing)
    on_final, extra = _charges(owed - charged, cfg.penalty + values[-1], cfg.penalty)
    values[-1] -= on_final
    # credit pays for work behind a right answer only: on a wrong one, true steps earn nothing
    credit = min(cfg.max_credit, cfg.credit * sum(map(_credited, steps))) if score is None or score > 0 else 0.0
    points, start = [], steps[0].start
    for j, s in enumerate(steps):
        last = j == len(steps) - 1
        if values[j] >= 0 and not last:
            continue
        if last:
            points += [StepReward(start, s.end, 0, value=-c) for c in extra]
        points.append(StepReward(start, s.end, s.score, len(s.claims), s.false_claims,
                                 score if last else None, values[j] + (credit if last else 0.0)))
        if not last:
            start = steps[j + 1].start
    return points


def steps_score(completion: str, gold: str, style: str = "auto", timeout: float = 5.0,
                outcome=None, policy: str = "lenient") -> float:
    """The registry's scalar `steps` reward: outcome x (share of judged steps that are right),
    judged steps being those with a false claim or with true claims used toward the answer.
    A wrong answer scores 0 whatever its steps; padding can only lower a right answer."""
    try:
        score, pred = _outcome(completion, gold, style, timeout, outcome, policy)
        if not score or not isinstance(completion, str):
            return 0.0
        steps = check_steps(completion, pred)
        right = sum(map(_credited, steps))
        wrong = sum(s.score < 0 for s in steps)
        return float(score) * (right / (right + wrong) if right + wrong else 1.0)
    except ValueError:
        raise
    except Exception:  # noqa: BLE001 - a reward never raises on model text
        return 0.0
