"""`is_equiv`: are two final answers mathematically the same? Fast exact path, then symbolic.

Order of work: normalise both strings (`rewards.normalize`); equal strings, numbers, and
lists/tuples/intervals of numbers are decided there with exact `Fraction` arithmetic. Only
the rest, answers that evaluate to clearly different values are rejected by a small numeric
evaluator (`rewards.numeric`, a proof by evaluation at generic points); only what is left
(radicals, pi, algebra, matrices, equations that may be equal) goes to math-verify/sympy in a
killable worker process (`rewards.symbolic`) under a hard wall-clock timeout.

Conventions (as MATH graders use them): `50\\%` == `50`; decimals are exact, so approximations
never equal exact values (`3.14` != `\\pi`, `0.333` != `\\frac13`); a bare comma list is a
multiset (`1, 2` == `2, 1`), a parenthesised tuple is ordered; `1,000` is one thousand; `i` is
the imaginary unit. Model text is never `eval`-ed: `(lambda: 1)()` is not a number.
"""

from __future__ import annotations

from rewards.normalize import MAX_FAST_LEN, fast_equiv, normalize
from rewards.numeric import clearly_different
from rewards.symbolic import EQUAL, NOT_EQUAL, PARSE_ERROR, TIMEOUT, get_pool

__all__ = ["is_equiv", "equiv_status", "EQUAL", "NOT_EQUAL", "PARSE_ERROR", "TIMEOUT"]

_MAX_SYMBOLIC_LEN = 1000  # longer answers are compared as strings only
_MAX_NESTING = 30  # real answers nest brackets a few levels; sympy's parser slows down badly
_CODE_MARKERS = ("lambda", "__", "import", "exec", "eval(", "os.", "sys.", "open(")


def equiv_status(pred: str, gold: str, timeout: float = 5.0) -> str:
    """EQUAL, NOT_EQUAL, PARSE_ERROR or TIMEOUT for two final answers; never raises."""
    try:
        if pred is None or gold is None:
            return PARSE_ERROR
        a, b = normalize(pred), normalize(gold)
        if not a or not b:
            return PARSE_ERROR
        verdict = fast_equiv(a, b)
        if verdict is not None:
            return EQUAL if verdict else NOT_EQUAL
        degrees = any(d in pred + gold for d in ("circ", "°", "degree"))  # sin 30 deg != sin 30
        if not degrees and clearly_different(a, b):
            return NOT_EQUAL
        if max(len(a), len(b)) > min(_MAX_SYMBOLIC_LEN, MAX_FAST_LEN):
            return PARSE_ERROR  # too long for any real answer: not worth a sympy run
        if any(m in a for m in _CODE_MARKERS) or _power_tower(a) or _power_tower(b):
            return PARSE_ERROR
        return get_pool().compare(a, b, timeout)
    except Exception:  # noqa: BLE001 - a reward must never raise
        return PARSE_ERROR


def _power_tower(s: str) -> bool:
    """A `^` inside an exponent group (`9^{9^{9}}`), which sympy would try to expand for
    ever, or brackets nested deeper than any real answer."""
    stack: list[bool] = []  # for each open brace: is it an exponent group?
    in_exp = depth = 0
    for i, c in enumerate(s):
        depth += (c in "([{") - (c in ")]}")
        if depth > _MAX_NESTING:
            return True
        if c == "^":
            if in_exp:
                return True
            if s[i + 1:i + 2] == "{":
                stack.append(True)
                in_exp += 1
                continue
        elif c == "{" and (i == 0 or s[i - 1] != "^"):
            stack.append(False)
        elif c == "}" and stack:
            in_exp -= stack.pop()
    return False


def is_equiv(pred: str, gold: str, timeout: float = 5.0) -> bool:
    """True iff `pred` and `gold` are the same answer (False on anything undecidable in time)."""
    return equiv_status(pred, gold, timeout) == EQUAL
