"""How a claimed value is compared with the computed one (see `rewards.claims.judge`).

A link `a = b` (or `a ≈ b`) is judged under every reading of what is ambiguous in writing,
and it is false only if no reading holds:
- `⊞` (a number before a fraction, `2\\frac12`): mixed number or product;
- a `!` ending the chain: factorial or an exclamation mark (`2+2=5!` is false both ways);
- `%`: always `/100`; also a label (dropped) when it sits only on the right-hand side(s) or on
  every side (`0.25 * 100 = 25%`), never when only the left side has it (`50% = 50` is false).
Tolerance: exact values must match exactly, except that a side written as a decimal with d
places may be rounded (|error| <= 10^-d / 2) or truncated toward zero (< 10^-d), decimals on
the computing side that look rounded (`0.33`: two or more places, not ending in 0) widen that
by their own rounding, and `≈` allows 2% (or one unit of the last written place).
"""

from __future__ import annotations

import re
from fractions import Fraction

from rewards.claims.arith import MAX_LEN, ParseError, Value, evaluate
from rewards.claims.latex_text import MIXED

_DECIMAL = re.compile(r"^-?\d*\.(\d+)$")


def plain_decimals(side: str) -> int | None:
    """Places of a side that is just a number (`3.33` -> 2, `12` -> 0), else None."""
    s = side.replace(" ", "").rstrip("%")
    while s.startswith("(") and s.endswith(")"):
        s = s[1:-1]
    m = _DECIMAL.match(s)
    if m:
        return len(m.group(1))
    return 0 if re.fullmatch(r"-?\d+", s) else None


def _rounding_slack(side: str, value: Value) -> float:
    """Relative error a side may carry from rounded decimals written in it (`0.33 * 600`)."""
    slack = 0.0
    if plain_decimals(side) is not None:
        return 0.0  # a written result: its own rounding is judged by the places it shows
    for m in re.finditer(r"(\d*)\.(\d{2,})", side):
        x = float(m.group(0))
        if x and not m.group(2).endswith("0"):
            slack += 10 ** -len(m.group(2)) / x
    return slack * abs(float(value))


def close(a_txt: str, a: Value, b_txt: str, b: Value, approx: bool) -> bool:
    if isinstance(a, Fraction) and isinstance(b, Fraction) and a == b:
        return True
    diff = abs(float(a) - float(b))
    if diff <= 1e-9 * max(1.0, abs(float(a)), abs(float(b))):
        return True
    slack = _rounding_slack(a_txt, a) + _rounding_slack(b_txt, b)
    if approx and diff <= slack + 0.02 * max(abs(float(a)), abs(float(b))):
        return True
    exact = isinstance(a, Fraction) and isinstance(b, Fraction)
    for txt, written, other in ((a_txt, a, b), (b_txt, b, a)):
        d = plain_decimals(txt)
        if d is None or (d == 0 and exact and not approx):
            continue
        unit = 10.0 ** -d
        truncated = abs(float(written)) <= abs(float(other)) and diff < unit
        if diff <= 0.5 * unit * (1 + 1e-9) + slack or truncated or (approx and diff <= unit + slack):
            return True
    return diff <= slack


def _readings(a: str, b: str, last: bool, sides: list[str]) -> list[tuple[str, str]]:
    pairs = [(a, b)]
    if MIXED in a + b:
        pairs = [(mixed(x, op), mixed(y, op)) for op in "+*" for x, y in pairs]
    if last and b.rstrip().endswith("!"):
        pairs += [(x, y.rstrip()[:-1]) for x, y in pairs]
    if "%" in b and ("%" not in sides[0] or all("%" in s for s in sides if s.strip())):
        pairs += [(x.replace("%", ""), y.replace("%", "")) for x, y in pairs]
    return pairs


def mixed(s: str, op: str) -> str:
    """`2 ⊞ ((1)/(2))` read as (2 + 1/2) or as 2 * (1/2): the number binds to the group after it."""
    if len(s) > MAX_LEN:
        return s  # too long to evaluate anyway
    while MIXED in s:
        k = s.index(MIXED)
        num = re.search(r"(\d+(?:\.\d+)?)\s*$", s[:k])
        j, depth = k + 1, 0
        while j < len(s) and s[j] == " ":
            j += 1
        end = j
        while end < len(s):
            depth += {"(": 1, ")": -1}.get(s[end], 0)
            end += 1
            if depth == 0:
                break
        if num is None or depth != 0:
            return s.replace(MIXED, op)
        s = f"{s[:num.start()]}({num.group(1)} {op} {s[j:end]}){s[end:]}"
    return s


def value_of(s: str) -> Value | None:
    try:
        return evaluate(s)
    except ParseError:
        return None


def link(a: str, b: str, approx: bool, last: bool, sides: list[str]) -> bool | None:
    """True / False for the claim a = b (or a ≈ b), None when it cannot be evaluated."""
    verdict = None
    for x, y in _readings(a, b, last, sides):
        va, vb = value_of(x), value_of(y)
        if va is None or vb is None:
            continue
        if close(x, va, y, vb, approx):
            return True
        verdict = False
    return verdict


def same_value(a: Value, b: Value) -> bool:
    return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(a)))
