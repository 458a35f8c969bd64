"""Outcome rewards: `check` (score + extracted answer + reason), `score_completion`, and
`format_reward` (the format bonus).

`check` never raises: any failure becomes score 0.0 with a reason for logging, one of
"no answer found", "no single answer" (the final statement hedges, negates or offers
alternatives), "parse error", "timeout", "not equal" (or "" on success).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from rewards.answers.boxed import count_boxes, last_boxed_span
from rewards.answers.extract import read_final
from rewards.equivalence.budget import budget
from rewards.equivalence.equiv import EQUAL, PARSE_ERROR, TIMEOUT, equiv_status

NO_ANSWER = "no answer found"
_GSM_FINAL = re.compile(r"####[ \t]*\$?-?[\d,]*\d(?:\.\d+)?")
_AFTER_BOX_OK = re.compile(r"(?:\s|\$|\.|\\\]|\\\)|\\end\{(?:equation|align)\*?\})*")


@dataclass(frozen=True)
class RewardResult:
    """One scored completion: `score` in [0, 1], the extracted `pred`, and why it failed."""

    score: float
    pred: str | None
    reason: str


POLICIES = ("lenient", "strict")


def check(completion: str, gold: str, style: str = "auto", timeout: float = 5.0,
          policy: str = "lenient") -> RewardResult:
    """Extract the final answer from `completion` and compare it with `gold`. `timeout` is the
    budget of the whole completion (reading and every comparison). `policy="strict"` pays only
    one final statement whose content parses completely in the closed answer grammar
    (`rewards.outcome.strict`, the training default); "lenient" reads natural forms (evaluation)."""
    if policy == "strict":
        from rewards.outcome.strict import strict_check

        return strict_check(completion, gold, timeout)
    if policy != "lenient":
        raise ValueError(f"unknown policy {policy!r}; valid: {', '.join(POLICIES)}")
    deadline = time.monotonic() + timeout
    try:
        with budget(deadline):
            reading = read_final(completion, style)
    except ValueError:
        raise  # an unknown style is a programming error, not a bad completion
    except Exception:  # noqa: BLE001
        return RewardResult(0.0, None, NO_ANSWER)
    pred = reading.answer
    if pred is None:
        return RewardResult(0.0, None, reading.problem or NO_ANSWER)
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return RewardResult(0.0, pred, TIMEOUT)
    status = equiv_status(pred, gold, remaining)
    if status == EQUAL:
        return RewardResult(1.0, pred, "")
    return RewardResult(0.0, pred, status if status in (PARSE_ERROR, TIMEOUT) else "not equal")


def score_completion(completion: str, gold: str, style: str = "auto", policy: str = "lenient") -> float:
    """1.0 if the completion's final answer is equivalent to `gold`, else 0.0."""
    return check(completion, gold, style, policy=policy).score


def format_reward(completion: str, style: str = "auto") -> float:
    """1.0 for exactly one final answer in the expected form with nothing after it, else 0.0.

    "gsm8k": exactly one `####` in the text, on the last non-blank line, followed by a number
    and nothing else. "math": exactly one `\\boxed{}`/`\\fbox{}` with balanced braces, followed
    only by whitespace, `$`, `.` or closing math delimiters. "auto" picks by what the text
    contains. Repeating the answer block scores 0, so the bonus cannot be farmed that way.
    """
    if not isinstance(completion, str):
        return 0.0
    if style == "auto":
        style = "math" if ("\\boxed" in completion or "\\fbox" in completion) else "gsm8k"
    if style == "gsm8k":
        if completion.count("####") != 1:
            return 0.0
        last_line = completion.rstrip().rsplit("\n", 1)[-1].strip()
        return 1.0 if _GSM_FINAL.fullmatch(last_line) else 0.0
    if style == "math":
        if count_boxes(completion) != 1:
            return 0.0
        span = last_boxed_span(completion)
        if span is None or span[3] == span[2]:
            return 0.0
        return 1.0 if _AFTER_BOX_OK.fullmatch(completion, span[1]) else 0.0
    raise ValueError(f"unknown style {style!r}; valid: auto, gsm8k, math")
