"""Decide symbolic equalities (`(x+1)^2 = x^2 + 2x + 1`) by exact evaluation at sample points.

Two rational (or algebraic) expressions that agree at several generic points are equal with
overwhelming probability (Schwartz-Zippel); one point where they differ proves them unequal.
The points are fixed positive rationals with large, distinct denominators, so a check is
deterministic, exact (Fractions; floats only once a square root or pi enters) and never
meets a removable zero by accident. Everything goes through `rewards.claims.arith`, so sizes stay
bounded and nothing is `eval`ed. No sympy: evaluation decides these claims without the
parse-time cost and hang risk of a computer algebra system.
"""

from __future__ import annotations

import math
from fractions import Fraction

from rewards.claims.arith import ParseError, Value, evaluate, variables

MAX_VARIABLES = 6
# Generic points: positive (so square roots and even roots stay real), distinct per variable.
_POINTS = [[Fraction(37, 17), Fraction(53, 29), Fraction(71, 43), Fraction(89, 61),
            Fraction(103, 79), Fraction(127, 97)],
           [Fraction(41, 13), Fraction(59, 23), Fraction(67, 31), Fraction(83, 47),
            Fraction(109, 53), Fraction(131, 59)],
           [Fraction(29, 11), Fraction(47, 19), Fraction(61, 37), Fraction(97, 41),
            Fraction(113, 67), Fraction(139, 71)]]
_CONSTANTS = {"i", "e"}  # the imaginary unit and Euler's number are not free variables


def _close(a: Value, b: Value) -> bool:
    if isinstance(a, Fraction) and isinstance(b, Fraction):
        return a == b
    return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(a)), abs(float(b)))


def _pairs(lhs: str, rhs: str) -> list[tuple[Value, Value]] | None:
    """(lhs, rhs) values at each sample point where both evaluate; None when the pair has no
    free variables, a constant such as i or e, or too many variables."""
    names = sorted(variables(lhs) | variables(rhs))
    if not names or len(names) > MAX_VARIABLES or _CONSTANTS & set(names):
        return None
    out = []
    for point in _POINTS:
        env = dict(zip(names, point))
        try:
            out.append((evaluate(lhs, env), evaluate(rhs, env)))
        except ParseError:
            continue
    return out


def identity(lhs: str, rhs: str) -> bool | None:
    """True if lhs = rhs for all values of their variables, False if they differ, None when
    it cannot be decided (see `_pairs`, or the expressions fail at the sample points)."""
    pairs = _pairs(lhs, rhs)
    if pairs is None:
        return None
    agree = sum(_close(a, b) for a, b in pairs)
    if pairs and not agree:
        return False
    if agree >= 2 and agree == len(pairs):
        return True
    return None


def proportional(lhs: str, rhs: str) -> bool | None:
    """True if lhs = c * rhs for a constant c != 0 (the same equation `... = 0` scaled),
    False if not, None when undecidable (see `identity`)."""
    pairs = _pairs(lhs, rhs)
    if pairs is None or len(pairs) < 2 or any(a == 0 or b == 0 for a, b in pairs):
        return None
    ratios = [a / b for a, b in pairs]
    return all(_close(r, ratios[0]) for r in ratios[1:])


def degree(expr: str) -> float | None:
    """Growth order of an expression in its variables (all scaled together): 2 for
    `x^2 + y`, 0 for `(x+1)/(x-1)`; None when it cannot be evaluated."""
    names = sorted(variables(expr))
    if not names or len(names) > MAX_VARIABLES:
        return None
    try:
        small = evaluate(expr, dict(zip(names, _POINTS[0])))
        large = evaluate(expr, {n: p * 1000 for n, p in zip(names, _POINTS[0])})
    except ParseError:
        return None
    if small == 0 or large == 0:
        return None
    return math.log(abs(float(large)) / abs(float(small))) / math.log(1000)
