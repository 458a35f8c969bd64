"""`is_equiv`: are two final answers the same mathematical object? Fast exact path, then symbolic.

Order of work, the same for both arguments (so the verdict never depends on their order):
1. Each answer is cleaned (`rewards.equivalence.normalize`: a character no answer is written
   with - a digit other than 0-9, a combining mark, a zero-width space - is never read as
   what it looks like, so `1８` equals only `1８`; two different listed units never match, `18
   dollars` is not `18 \\text{ cents}`; `0,111` is 0.111 against a decimal gold) and split into
   list items and equation chains (`rewards.equivalence.forms`). A
   left-hand side that only names the quantity is dropped (`x = 5`, `f(x) = 2x+3`, `|AB| = 1`,
   `(p,q) = (3,2)` are 5, 2x+3, 1, (3,2)). In a chain `a = b = c` every link is a claim that must
   hold; the answer is the last part (`\\frac{28}{4} = 7` is 7, `1^\\circ = 2 = 7` equals nothing).
   An equation whose left side is an expression (`2x - y = 0`, `x^3 = 12`) stays an
   equation, and an equation never equals a value.
2. Normalised strings (`rewards.equivalence.normalize`): equal strings, numbers, and lists/tuples/intervals
   of numbers are decided there with exact `Fraction` arithmetic.
3. Text answers compare as text: words are never products of letters (`seat` != `east`), and
   a word that is not a unit keeps a number from equalling a bare number (`18 minus one`).
   An answer that uses an operation outside the value vocabulary (`\\max`, `\\min`, `\\bmod`,
   `\\lceil`, `\\gcd`, an unknown macro: `rewards.equivalence.vocabulary`) equals only a gold
   that uses the same operations: `\\max(17, 18)` is not the answer 18, it picks among candidates.
4. Answers that evaluate to clearly different values are rejected by a small numeric evaluator
   (`rewards.equivalence.numeric`, a proof by evaluation at generic points).
5. Two values the closed grammar reads completely and finds equal by exact arithmetic alone
   (`0.\\overline{3}` and `\\frac13`, `\\log_2 8` and 3, `\\emptyset` and `\\varnothing`:
   `rewards.equivalence.grammar.compare.second_reading(exact=True)`) are equal without sympy.
6. Only what is left (radicals, pi, algebra, matrices, equations that may be equal) goes to
   math-verify/sympy in a killable worker process (`rewards.equivalence.symbolic`) under a hard wall-clock
   timeout; it must hold in both directions.

Conventions (as MATH graders use them): `50\\%` == `50`; `30^\\circ` == `30`; decimals are exact,
so approximations never equal exact values (`3.14` != `\\pi`, `0.333` != `\\frac13`); a bare comma
list is a multiset (`1, 2` == `2, 1`), a parenthesised tuple is ordered and equals a bare list
in the same order; `1,000` is one thousand, `1,8` a list; a number in another base (`52_8`)
equals only itself; `i` is the imaginary unit. Model text is never `eval`-ed.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from rewards.equivalence.forms import is_closed, is_name, split_chain
from rewards.equivalence.normalize import (MAX_FAST_LEN, clean, decimal_comma, fast_equiv, foreign_characters,
                                           normalize, split_top, units_differ)
from rewards.equivalence.numeric import clearly_different
from rewards.equivalence.symbolic import EQUAL, NOT_EQUAL, PARSE_ERROR, TIMEOUT, get_pool
from rewards.equivalence.vocabulary import foreign

__all__ = ["is_equiv", "equiv_status", "EQUAL", "NOT_EQUAL", "PARSE_ERROR", "TIMEOUT"]

_MAX_SYMBOLIC_LEN = 1000  # longer answers are compared as strings only
_MAX_NESTING = 30  # real answers nest brackets a few levels; sympy's parser slows down badly
_MAX_CLAIMS = 6
_CODE_MARKERS = ("lambda", "__", "import", "exec", "eval(", "os.", "sys.", "open(")
_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")
_SUBSCRIPTED_NUMBER = re.compile(r"(?<![A-Za-z_])\d+(?:\.\d+)?_")
_ENV_NAME = re.compile(r"\\(?:begin|end)\{[A-Za-z*]*\}")
_SHORT_WORDS = {"yes", "odd", "all", "any", "one", "two", "six", "ten", "not", "and", "the", "are",
                "was", "is", "or", "no", "none", "more", "less"}
_PERCENT = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?)\s*\\?%")
_TEXT_GROUP = re.compile(r"\\text\{([^{}]*)\}")
_FUNCTIONS = {"sin", "cos", "tan", "sec", "csc", "cot", "ln", "log", "exp", "sqrt", "arcsin",
              "arccos", "arctan", "sinh", "cosh", "tanh", "lim", "max", "min", "gcd", "lcm", "det",
              "mod", "pi", "oo", "inf", "frac", "text", "pmod", "bmod"}


@dataclass
class _Resolved:
    value: str
    claims: list[tuple[str, str]] = field(default_factory=list)



def equiv_status(pred: str, gold: str, timeout: float = 5.0) -> str:
    """EQUAL, NOT_EQUAL, PARSE_ERROR or TIMEOUT for two final answers; never raises."""
    try:
        if pred is None or gold is None:
            return PARSE_ERROR
        deadline = time.monotonic() + timeout
        cp, cg = clean(str(pred)), clean(str(gold))
        if cp == cg:
            return EQUAL  # the same answer written the same way
        if foreign(str(pred)) != foreign(str(gold)):
            return NOT_EQUAL  # an operation left undone that the gold does not use (module doc, 3)
        if foreign_characters(cp) or foreign_characters(cg):
            return NOT_EQUAL  # `1８` is not 18: only the same characters equal it (module doc, 1)
        if units_differ(cp, cg):
            return NOT_EQUAL  # 18 dollars is not 18 cents, 18 hours not 18 minutes
        a, b = _resolve(decimal_comma(cp, cg)), _resolve(decimal_comma(cg, cp))
        if a is None or b is None or _prose_between(a.value) or _prose_between(b.value):
            return PARSE_ERROR
        claims = a.claims + b.claims
        if len(claims) > _MAX_CLAIMS:
            return PARSE_ERROR
        for left, right in claims:
            status = _compare(left, right, deadline)
            if status != EQUAL:
                return status
        status = _compare(a.value, b.value, deadline)
        if status == NOT_EQUAL or (status == EQUAL and "=" in str(pred) + str(gold)):
            # two answers the closed grammar reads completely are decided there when the
            # lenient reading says "not equal" (0.\overline{3}, \log_2 8) or read a left side
            # away (x = 2x + 3 is not y = 2x + 3)
            from rewards.equivalence.grammar.compare import second_reading

            return second_reading(str(pred), str(gold), deadline, status == EQUAL) or status
        return status
    except Exception:  # noqa: BLE001 - a reward must never raise
        return PARSE_ERROR


def is_equiv(pred: str, gold: str, timeout: float = 5.0) -> bool:
    """True iff `pred` and `gold` are the same answer (False on anything undecidable in time).
    Symmetric: `is_equiv(a, b) == is_equiv(b, a)`."""
    return equiv_status(pred, gold, timeout) == EQUAL


def _resolve(s: str) -> _Resolved | None:
    """The value an answer states, and the claims its equation chains make (module doc, 1)."""
    c = clean(s)
    if not c:
        return None
    if len(c) > MAX_FAST_LEN or "=" not in c:
        value = normalize(c)
        return _Resolved(value) if value else None
    items = split_top(c)
    if len(items) > 1:
        parts = [_resolve_item(item) for item in items]
        if any(p is None for p in parts):
            return None
        return _Resolved(",".join(p.value for p in parts), [cl for p in parts for cl in p.claims])
    return _resolve_item(c)


def _resolve_item(item: str) -> _Resolved | None:
    raw = split_chain(item)
    if len(raw) == 1:
        value = normalize(item)
        return _Resolved(value) if value else None
    parts = [normalize(p) for p in raw]
    if not all(parts):
        return None
    # inside one equation a percent is a fraction: "0.56 = 56\%" holds
    exact = [normalize(_PERCENT.sub(r"\\frac{\1}{100}", p)) for p in raw]
    if is_name(parts[0]) and not (_pure_text(parts[0]) and _pure_text(parts[-1])):
        return _Resolved(parts[-1], list(zip(exact[1:], exact[2:])))
    if len(parts) == 2 and not is_closed(parts[0]):
        return _Resolved("=".join(parts))  # an equation (2x - y = 0, x^3 = 12): never a value
    return _Resolved(parts[-1], list(zip(exact, exact[1:])))


def _compare(a: str, b: str, deadline: float) -> str:
    """Verdict on two normalised values (steps 2-5 of the module docstring)."""
    verdict = fast_equiv(a, b)
    if verdict is not None:
        return EQUAL if verdict else NOT_EQUAL
    if "?" in a or "?" in b:
        return NOT_EQUAL  # "9?" asks, it does not answer
    if _SUBSCRIPTED_NUMBER.search(a) or _SUBSCRIPTED_NUMBER.search(b):
        return NOT_EQUAL  # 0.25_9, 18_{9}: a number with a base equals only itself, written alike
    verdict = _text_verdict(a, b)
    if verdict is not None:
        return EQUAL if verdict else NOT_EQUAL
    if clearly_different(a, b):
        return NOT_EQUAL
    if max(len(a), len(b)) > min(_MAX_SYMBOLIC_LEN, MAX_FAST_LEN):
        return PARSE_ERROR  # too long for any real answer: not worth a sympy run
    if any(m in a or m in b for m in _CODE_MARKERS) or _power_tower(a) or _power_tower(b):
        return PARSE_ERROR
    from rewards.equivalence.grammar.compare import second_reading

    if second_reading(a, b, deadline, exact=True) == EQUAL:
        return EQUAL  # exact in the closed grammar, no sympy needed: 0.\overline{3}, \log_2 8, \emptyset
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return TIMEOUT
    return get_pool().compare(*_for_sympy(a, b), remaining)


def _words(s: str, min_len: int = 2) -> list[str]:
    """Letter runs that are words, not commands or function names (case-blind). Runs of 2-3
    letters inside math are products of variables (`2xy`), unless a common short word."""
    inner = _TEXT_GROUP.sub(lambda m: " " + m.group(1) + " ", _ENV_NAME.sub("", s))
    out = []
    for w in _WORD.findall(inner):
        w = w.lower()
        if w not in _FUNCTIONS and (len(w) >= min_len or w in _SHORT_WORDS):
            out.append(w)
    return out


def _prose_between(s: str) -> bool:
    """A word in `\\text{}` with value on both sides (`\\sqrt{51} \\text{so} \\frac{14}{3}`): the
    readers before have taken the joiners (`and`, `or`) and a trailing unit, so what is left is
    prose the value path would drop, reading one value out of two."""
    for m in _TEXT_GROUP.finditer(s):
        rest = s[m.end():]
        if _CONDITION.fullmatch(m.group(1)) and _RELATION.search(rest):
            continue  # a condition on a parameter: `\\frac{\\pi}{6} + k\\pi \\text{ for } k \\in \\mathbb{Z}`
        if re.search(r"[A-Za-z]{2,}", m.group(1)) and s[:m.start()].strip() and rest.strip():
            return True
    return False


_CONDITION = re.compile(r"\s*,?\s*(?:for|where|with|when)(?:\s+(?:all|every|any|some))?\s*", re.I)
_RELATION = re.compile(r"\\in\b|\\[lg]eq?\b|\\neq?\b|[=<>]")


def _pure_text(s: str) -> bool:
    inner = _TEXT_GROUP.sub(lambda m: " " + m.group(1) + " ", s)
    return bool(_words(s)) and not re.search(r"[\d=+*/^<>\\]", inner) and \
        not re.search(r"(?<![^\W\d_])[A-Za-z](?![^\W\d_])", inner)


def _as_text(s: str) -> str:
    """Text answers compare case-blind, without spacing or \\text{} wrappers; every other
    character counts ("-east" is not "east", a Cyrillic "е" is not "e")."""
    return re.sub(r"\\text|[{}\s]", "", s.lower()).rstrip(".")


def _text_verdict(a: str, b: str) -> bool | None:
    """Text answers compare as text (case-blind, spacing ignored). An answer that mixes words
    with math equals only one with the same words; None leaves it to the symbolic path."""
    pa, pb = _pure_text(a), _pure_text(b)
    if pa and pb:
        return _as_text(a) == _as_text(b)
    if pa != pb:
        return False
    if sorted(_words(a, 4)) != sorted(_words(b, 4)):
        return False  # "18 minus one", "18\\text{ or more}" are not 18
    return None


def _for_sympy(a: str, b: str) -> tuple[str, str]:
    """Both answers with each word as one symbol `W_{k}` (the same k for the same word), so no
    anagram is a product of the same letters; `%` stays a percent sign (a bare `%` starts a
    LaTeX comment)."""
    names = {w: f"W_{{{k}}}" for k, w in enumerate(sorted(set(_words(a, 4) + _words(b, 4))))}

    def convert(s: str) -> str:
        s = _TEXT_GROUP.sub(lambda m: " " + m.group(1) + " " if _words(m.group(1), 4) else m.group(), s)
        if names:
            s = _WORD.sub(lambda m: names.get(m.group().lower(), m.group()), s)
        return s.replace("\\%", "%").replace("%", "\\%")

    return convert(a), convert(b)


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
