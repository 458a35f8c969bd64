"""Rule-based PROCESS reward: check the arithmetic claims in each step of a solution.

Scheme (what the trainer gets from `step_rewards`):
1. Steps. If the text has "Step k:" markers at line starts, each step runs from one marker to
   the next (text before the first marker is a step of its own); otherwise every non-blank
   line is a step. Each step has a character span `[start, end)` into the completion
   (trailing whitespace excluded) so the trainer can map it to tokens.
2. Claims in a step:
   - GSM8K calculator annotations `<<48/2=24>>`: the left side must evaluate to the right;
   - equality chains `a op b = c (= d ...)` in the text (after the annotations are removed,
     `\\frac{a}{b}`, `\\times`, `\\cdot`, `\\div`, `$` and thousands commas rewritten), where
     the first side has an operator. Every side must evaluate, else the chain is not a claim.
     A chain right after a multiplicative word ("half of 48 = 24") is skipped: the words
     are part of the expression and we cannot read them.
   Evaluation is exact (`rewards.arith`, Fractions, never floats or eval). A right-hand side
   written as a decimal with d places is accepted if it is the exact value rounded to d
   places (GSM8K writes `<<10/3=3.33>>`).
3. Scores: +1 if the step has claims and all are true, -1 if any claim is false, 0 if it has
   no checkable claim.
4. Outcome: the last step also carries `outcome` = score_completion(completion, gold) (1.0 or
   0.0) when a gold answer is given, else None. `StepReward.reward` is score + outcome, the
   value to place at the step's last token.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from rewards.arith import ParseError, evaluate

_STEP_MARK = re.compile(r"(?im)^[ \t]*(?:\*\*|#+[ \t]*)?step[ \t]*\d+[ \t]*[:.)]")
_ANNOT = re.compile(r"<<([^<>=]{1,300})=([^<>=]{1,100})>>")
_ANNOT_ANY = re.compile(r"<<[^<>]{0,400}>>")
_RUN = re.compile(r"[\d.()+\-*/^% =]+")
_FRAC = re.compile(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}")
_FRAC_SHORT = re.compile(r"\\[dt]?frac\s*(\d)\s*(\d)")
_BULLET = re.compile(r"(?m)^[ \t]*(?:\d+[.)]|[-*•])[ \t]+")
_DIGIT_COMMA = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_REMAINDER = re.compile(r"\s*(?:\\text\{\s*)?(?:r\b|rem)", re.IGNORECASE)
_DECIMAL = re.compile(r"^\s*-?\d*\.(\d+)\s*$")
_MULT_WORDS = ("of", "times", "twice", "half", "double", "triple", "by", "per", "x")
_LATEX_OPS = (("\\times", "*"), ("\\cdot", "*"), ("\\div", "/"), ("×", "*"), ("÷", "/"),
              ("−", "-"), ("–", "-"), ("\\left", ""), ("\\right", ""), ("$", ""), ("\\(", ""),
              ("\\)", ""), ("\\[", ""), ("\\]", ""), ("\\!", ""), ("\\,", ""))


@dataclass(frozen=True)
class StepReward:
    """One step: span [start, end) in the completion, score +1/-1/0, claim counts, outcome."""

    start: int
    end: int
    score: int
    claims: int = 0
    false_claims: int = 0
    outcome: float | None = None

    @property
    def reward(self) -> float:
        return self.score + (self.outcome or 0.0)


def split_steps(text: str) -> list[tuple[int, int]]:
    """Character spans of the steps (see module docstring, point 1)."""
    marks = [m.start() for m in _STEP_MARK.finditer(text)]
    if marks:
        bounds = ([0] if text[:marks[0]].strip() else []) + marks + [len(text)]
        spans = [(a, b) for a, b in zip(bounds, bounds[1:])]
    else:
        spans, pos = [], 0
        for line in text.split("\n"):
            spans.append((pos, pos + len(line)))
            pos += len(line) + 1
    out = []
    for a, b in spans:
        seg = text[a:b]
        if seg.strip():
            lead = len(seg) - len(seg.lstrip())
            out.append((a + lead, a + len(seg.rstrip())))
    return out


def _close(claimed_text: str, exact: Fraction, claimed: Fraction) -> bool:
    if exact == claimed:
        return True
    m = _DECIMAL.match(claimed_text)
    if m is None:
        return False
    return abs(exact - claimed) <= Fraction(1, 2 * 10 ** len(m.group(1)))


def _side(s: str) -> str:
    s = s.strip().rstrip(".").rstrip()
    return s[1:] if s.startswith(".") and not s[1:2].isdigit() else s


def _check_pair(lhs: str, rhs: str) -> bool | None:
    """True/False for a claim lhs = rhs, None when either side is not plain arithmetic.

    `%` is read both as /100 and as a unit label ("9/27*100% = 33.3%"); either reading that
    holds makes the claim true.
    """
    readings = [(lhs, rhs)]
    if "%" in lhs or "%" in rhs:
        readings.append((lhs.replace("%", ""), rhs.replace("%", "")))
    verdict = None
    for a, b in readings:
        try:
            verdict = _close(b.rstrip("%"), evaluate(a), evaluate(b)) or bool(verdict)
        except (ParseError, ZeroDivisionError, ValueError, OverflowError):
            continue
        if verdict:
            return True
    return verdict


def _prepare(text: str) -> str:
    text = _ANNOT_ANY.sub("", text)
    for old, new in _LATEX_OPS:
        text = text.replace(old, new)
    text = _FRAC_SHORT.sub(r"\\frac{\1}{\2}", text)
    for _ in range(4):  # innermost fractions first
        text = _FRAC.sub(r"((\1)/(\2))", text)
    text = _BULLET.sub("", text)
    return _DIGIT_COMMA.sub("", text)


def _glued(text: str, start: int, end: int, run: str) -> bool:
    """Is the run only part of a longer expression (so its sides are not what they seem)?"""
    if start > 0 and (text[start - 1].isalpha() or text[start - 1] in "}_:"):
        return True  # "5P + 30 = 95", "2x+4 = 120", "1:2^2 = 1:4"
    if end < len(text) and (text[end].isalpha() or text[end] in "\\{_:!"):
        return True  # "100/5 = 5A/5", "= 4!": the last side runs on
    prev = text[:start].rstrip()[-1:]
    if run[:1] in "(-" and prev and (prev.isalpha() or prev in "}_"):
        return True  # "5x -3 + 6 = ...": binary minus; "g (1/2) = 0": a function call
    return _REMAINDER.match(text, end) is not None  # "100 / 12 = 8 R 4"


def _chain_claims(text: str) -> list[bool]:
    results = []
    for m in _RUN.finditer(text):
        run = m.group(0)
        if "=" not in run or "==" in run:
            continue
        start = m.start() + len(run) - len(run.lstrip())
        end = m.end() - (len(run) - len(run.rstrip()))
        if _glued(text, start, end, run.strip()):
            continue
        before = text[max(0, start - 12): start].split()
        if before and before[-1].lower() in _MULT_WORDS:
            continue
        sides = [_side(s) for s in run.split("=")]
        while sides and not any(c.isdigit() for c in sides[0]):
            sides.pop(0)
        if len(sides) < 2 or not all(any(c.isdigit() for c in s) for s in sides):
            continue
        if sides[0][0] in "+*/^%" or sides[0].startswith(("- ", "-\t")):
            continue  # a binary operator with its left operand in the words before
        if not any(op in sides[0].lstrip("-") for op in "+-*/^%"):
            continue
        pairs = [_check_pair(a, b) for a, b in zip(sides, sides[1:])]
        if None not in pairs:
            results.append(all(pairs))
    return results


def check_step(step: str) -> tuple[int, int]:
    """(number of claims, number of false claims) in one step's text."""
    verdicts = []
    for m in _ANNOT.finditer(step):
        ok = _check_pair(_DIGIT_COMMA.sub("", m.group(1)), _DIGIT_COMMA.sub("", m.group(2)))
        if ok is not None:
            verdicts.append(ok)
    verdicts += _chain_claims(_prepare(step))
    return len(verdicts), verdicts.count(False)


def step_rewards(completion: str, gold: str | None = None, style: str = "auto") -> list[StepReward]:
    """Per-step process rewards with character spans (scheme in the module docstring)."""
    if not isinstance(completion, str):
        return []
    out = []
    for start, end in split_steps(completion):
        n, bad = check_step(completion[start:end])
        score = -1 if bad else (1 if n else 0)
        out.append(StepReward(start, end, score, n, bad))
    if out and gold is not None:
        from rewards.outcome import score_completion

        last = out[-1]
        out[-1] = StepReward(last.start, last.end, last.score, last.claims, last.false_claims,
                             score_completion(completion, gold, style))
    return out
