"""Check the arithmetic claims of one solution step, in prose, LaTeX or GSM8K annotations.

    check_claims(r"so \\(1/3 \\times 18 = 6\\) and \\(18 - 6 = 12\\)")   # two true claims

A claim is an equality chain (`rewards.claims.chains`) with at least one checkable link: two
adjacent sides that both evaluate (`rewards.claims.arith`, exact where possible) and at least one of
which computes something (an operator or function; `5 = 5` is not a claim). GSM8K calculator
annotations `<<48/2=24>>` are claims too. Values are compared as `rewards.claims.compare`
says (readings of ambiguous notation, rounding). What is *not* an error, though it looks like
one, is excused; each excuse is a class of writing seen in real solutions:
- a running computation `20 - 5 = 15 - 3 = 12` (the next side starts with the value so far);
- integer division `21 / 14 = 1 remainder 7`, `36 / 5 = 7 full pens`, `500 / 13 = 13*38 + 6`;
- a residue when the step works modulo m (`7 * 3 = 1` for a units digit);
- unit conversions (`9pi/4 = 180°/pi * 9pi/4 = 405°`), a chain tested and rejected
  ("2 + 8 = 4, which is false"), a typo inside a chain whose ends agree;
- a number that labels the left side (`Time to heat up to 400 degrees = 20 + 8`).
Chains whose first side is a name (`Total = 3 + 3 + 1.5`) with no result are completed by the
next chain `Total = 8`. Symbolic claims: a later link of a chain (`... = A = B`, the same one
variable on both sides) must be an identity (`rewards.claims.identities`); an equation must share a
root with the equation it was derived from (`rewards.claims.equations`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

from rewards.claims.arith import Value
from rewards.claims.chains import Chain, Tok, chains_and_tokens
from rewards.claims.compare import close, link, mixed, plain_decimals, same_value, value_of
from rewards.claims.equations import equation_claims
from rewards.claims.identities import degree, identity, proportional
from rewards.claims.latex_text import rewrite
from rewards.claims.sides import computes, operates, readable, symbolic, symbolic_text, variable_names

MAX_CLAIMS = 200
MAX_STEP_CHARS = 20_000  # a longer step is read up to here
MAX_IDENTITY_VARIABLES = 1  # multivariate "rewrites" are too often conditions (x = a^2 - bc = b^2 - ac)
_ANNOT = re.compile(r"<<([^<>=]{1,300})=([^<>=]{1,100})>>")
_ANNOT_ANY = re.compile(r"<<[^<>]{0,400}>>")
_DIGIT_COMMA = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
# A false chain is a rejected test only when the words right after it say so in one of these
# forms ("which is false", ", a contradiction", "is impossible"), and nothing after them takes
# it back: "not wrong", "no mistake", "is wrong? No, it is right" leave it refuted.
_REJECT_LEAD = {"which", "that", "this", "it", "is", "so", "and", "but", "a", "clearly", "obviously",
                "thus", "hence", "gives", "we", "get", "have"}
_REJECT = {"false", "contradiction", "impossible", "incorrect", "wrong", "invalid", "untrue", "fails"}
_REJECT_PAIRS = {("not", "true"), ("not", "possible"), ("not", "valid"), ("not", "correct"),
                 ("isn", "t"), ("doesn", "t"), ("not", "hold"), ("not", "equal")}
_TAKE_BACK = {"no", "not", "right", "correct", "true", "fine", "ok", "okay", "valid", "holds",
              "actually", "mistake", "error", "isn", "doesn", "never", "wait"}
_ROUNDING = {"nearest", "rounded", "round", "rounding", "approximately", "roughly", "about"}
_MODULUS = re.compile(r"(?:\bmod(?:ulo)?|\\pmod|\\bmod|divided by|divisible by)\s*\{?\s*(\d{1,6})", re.I)
_DIGITS_MODULUS = ((re.compile(r"units? digit|ones digit|last digit", re.I), 10),
                   (re.compile(r"last two digits", re.I), 100),
                   (re.compile(r"last three digits", re.I), 1000),
                   (re.compile(r"parity", re.I), 2))
_PREPOSITIONS = {"in", "to", "after", "for", "of", "at", "on", "by", "with", "from", "per",
                 "than", "over", "under", "within", "about", "day", "week", "year", "month"}


@dataclass(frozen=True)
class Claim:
    """One checked claim: `ok` verdict, the value it produces and the numbers it used."""

    text: str
    ok: bool
    value: Value | None
    operands: tuple[Value, ...]


def rejected(after: list[str]) -> bool:
    """Do the words after a false chain reject it (see `_REJECT`)?"""
    k = 0
    while k < len(after) and k < 4 and after[k] in _REJECT_LEAD:
        k += 1
    if k < len(after) and after[k] in _REJECT:
        rest = after[k + 1:]
    elif tuple(after[k:k + 2]) in _REJECT_PAIRS:
        rest = after[k + 2:]
    else:
        return False
    return not (set(rest) & _TAKE_BACK)


def _labelled_number(chain: Chain) -> bool:
    """`Time to heat up to 400 degrees = 20 + 8`, `in 48 hours = ...`: the number names it."""
    side = chain.sides[0]
    nums = [t for t in side if t.kind != "unit"]
    if len(nums) != 1 or nums[0].kind != "num":
        return False
    return any(t.kind == "unit" for t in side) or (bool(chain.before) and chain.before[-1] in _PREPOSITIONS)


def _running(a_val: Value | None, side: list[Tok]) -> bool:
    """`= 15 - 3` right after a side worth 15: a new operation, not a claim that 15 = 12."""
    if a_val is None:
        return False
    depth, texts = 0, [t.text for t in side if t.kind != "unit"]
    if len(texts) > 200:
        return False  # longer than anything we evaluate
    for k, t in enumerate(texts):
        depth += {"(": 1, ")": -1}.get(t, 0)
        if depth == 0 and k > 0 and t in ("+", "-", "*", "/") and texts[k - 1] not in "+-*/(":
            v = value_of(mixed(" ".join(texts[:k]), "+"))
            if v is not None and abs(float(v) - float(a_val)) <= 1e-9 * max(1.0, abs(float(v))):
                return True
    return False


def _whole_division(a: str, b: str) -> bool:
    """`36 / 5 = 7` (whole boxes), `13 / 4 = 4` (boxes needed): a quotient rounded to a whole;
    `500 / 13 = 13 * 38 + 6`: division with remainder written as an equation."""
    va, vb = value_of(mixed(a, "+")), value_of(mixed(b, "+"))
    if va is None or vb is None or "/" not in a + b:
        return False
    for x, other in ((a, vb), (b, va)):
        num = value_of(x.split("/")[0]) if x.count("/") == 1 and "(" not in x else None
        if num is not None and same_value(num, other):
            return True
    for q, w in ((va, vb), (vb, va)):
        if isinstance(w, Fraction) and w.denominator == 1 and math.floor(q) <= w <= math.ceil(q):
            return True
    return False


def _ends_agree(chain: Chain, texts: list[str]) -> bool:
    """The first computed side and the last side agree: a slip in between is a typo
    (`5!/2! = (5*4*3)/(2*1) = 60`), not a wrong result."""
    sides = [k for k in range(len(texts)) if readable(chain.sides[k])]
    if len(sides) < 3:
        return False
    first, last = value_of(mixed(texts[sides[0]], "+")), value_of(mixed(texts[sides[-1]], "+"))
    return first is not None and last is not None and close(texts[sides[0]], first, texts[sides[-1]], last, False)


def _percent_share(a: str, b: str) -> bool:
    """`48 = 100% + 20% = 120%` (of the actual number): a number matched with a share."""
    for x, y in ((a, b), (b, a)):
        terms = re.split(r"[+-]", x.replace(" ", ""))
        if "%" not in y and plain_decimals(y) is not None and all(t.endswith("%") for t in terms if t):
            return True
    return False


def _converts_units(chain: Chain, i: int) -> bool:
    """`9pi/4 = 180°/pi * 9pi/4` (radians to degrees), `(1 minute)/(60 seconds) = 1`: the
    sides are in different units, so their numbers differ on purpose."""
    ua, ub = chain.units(i), chain.units(i + 1)
    if i + 2 == len(chain.sides) and chain.after[:1] == ["deg"]:
        ub = ub | {"deg"}  # 990° - 720° = 270°: the last side's unit trails it
    if ("deg" in ua) != ("deg" in ub):
        return True
    return bool(ua) and "/" in chain.side_text(i) and chain.side_text(i + 1).strip("() ") == "1"


def moduli(step: str) -> tuple[int, ...]:
    """The moduli a step works with: `mod 25`, `\\pmod{11}`, `units digit` (10), `parity` (2)."""
    found = {int(m.group(1)) for m in _MODULUS.finditer(step[:20_000])}
    found.update(m for rx, m in _DIGITS_MODULUS if rx.search(step[:20_000]))
    return tuple(sorted(m for m in found if m >= 2))


def _residue(a: str, b: str, mods: tuple[int, ...]) -> bool:
    """`7 * 3 = 1` when working with units digits: b is a reduced residue of a."""
    va, vb = value_of(mixed(a, "+")), value_of(mixed(b, "+"))
    if not (isinstance(va, Fraction) and isinstance(vb, Fraction)) or va.denominator != 1 or vb.denominator != 1:
        return False
    return any(0 <= vb < m and (va - vb) % m == 0 for m in mods)


def _rewriting(chain: Chain, i: int) -> bool | None:
    """A later link `... = A = B` of a chain rewrites A; with the same variables on both
    sides (no value substituted) it must be an identity, or, in a chain set equal to 0,
    the same equation times a constant (`0 = -16t^2 + 80t - 36 = 4t^2 - 20t + 9`)."""
    a, b = chain.sides[i], chain.sides[i + 1]
    names = variable_names(a)
    if names != variable_names(b) or len(names) > MAX_IDENTITY_VARIABLES:
        return None
    if any(t.kind == "var" and len(t.text) > 1 and t.text.isupper() for t in a + b):
        return None  # AF^2 = AD * AG: lengths related by geometry, not an algebraic identity
    ta, tb = symbolic_text(a), symbolic_text(b)
    ok = identity(ta, tb)
    if ok is False:
        da, db = degree(ta), degree(tb)
        if da is None or db is None or abs(da - db) > 0.5:
            return None  # x^3 = ... = 35x - 50: a relation substituted lowers the degree
    if ok is False and any(chain.side_text(k).strip("() ") == "0" for k in (0, len(chain.sides) - 1)):
        return proportional(ta, tb)
    return ok


def check_chain(chain: Chain, mods: tuple[int, ...] = ()) -> tuple[bool | None, Value | None]:
    """(verdict, value of the last side) of one chain; verdict None when nothing is checkable.
    `mods`: moduli the step works with; a false link whose right side is the left side's
    residue (`7 * 3 = 1` for a units digit) is modular arithmetic, not an error."""
    texts = [chain.side_text(i) for i in range(len(chain.sides))]
    verdicts = []
    start = 1 if chain.gated or _labelled_number(chain) else 0
    rounded = bool(_ROUNDING & set(chain.after[:8]))
    for i in range(start, len(chain.rels) if not chain.listed else 0):
        a, b = chain.sides[i], chain.sides[i + 1]
        if i >= 1 and symbolic(a) and symbolic(b) and operates(a) and operates(b):
            ok = _rewriting(chain, i)
            if ok is not None:
                verdicts.append(ok)
            continue
        if not (readable(a) and readable(b)) or not (computes(a) or computes(b)):
            continue
        if _converts_units(chain, i) or _percent_share(texts[i], texts[i + 1]):
            continue
        approx = rounded or "≈" in chain.rels[:i + 1]  # after an ≈ the chain is approximate
        ok = link(texts[i], texts[i + 1], approx, i + 1 == len(chain.rels), texts)
        if ok is False and mods and _residue(texts[i], texts[i + 1], mods):
            continue
        if ok is False and _running(value_of(mixed(texts[i], "+")), b):
            continue
        if ok is False and _whole_division(texts[i], texts[i + 1]):
            continue  # 21 ÷ 14 = 1 remainder 7, 36 / 5 = 7 full pens: integer division
        if ok is not None:
            verdicts.append(ok)
    value = value_of(mixed(texts[-1], "+")) if readable(chain.sides[-1]) else None
    if not verdicts:
        return None, value
    if not all(verdicts) and _ends_agree(chain, texts):
        return True, value
    if not all(verdicts) and rejected(chain.after):
        return None, value  # "2 + 8 = 4, which is false": a test the text rejects, judged neither way
    return all(verdicts), value


def _operands(chain: Chain) -> tuple[Value, ...]:
    out = []
    for side in chain.sides[:-1]:
        for t in side:
            if t.kind == "num" and t.text != "pi":
                out.append(Fraction(t.text))
    return tuple(out)


def _name(ch: Chain) -> str | None:
    """The name a two-sided chain defines (`Total earnings = ...`), None for a variable (`x`)."""
    if len(ch.sides) != 2 or readable(ch.sides[0]) or not readable(ch.sides[1]):
        return None
    if any(t.kind == "junk" for t in ch.sides[0]):
        return None
    words = ch.before + [t.text.lower() for t in ch.sides[0]]
    return " ".join(words) if sum(len(w) > 1 for w in words) >= 1 and len(words[-1]) > 1 else None


def _named(chains: list[Chain]) -> list[Claim]:
    """`Total = 3 + 3 + 1.5 + 1.5` (no result) completed by the very next chain `Total = 8`."""
    out = []
    for ch, nxt in zip(chains, chains[1:]):
        key = _name(ch)
        if key is None or key != _name(nxt) or not any(t.text in "+-*" for t in ch.sides[1][1:]):
            continue
        lhs, rhs = ch.side_text(1), nxt.side_text(1)
        if plain_decimals(rhs) is None:
            continue
        ok = link(lhs, rhs, False, True, [lhs, rhs])
        if ok is not None:
            out.append(Claim(f"{key} = {lhs} = {rhs}", ok, value_of(rhs), ()))
    return out


def _annotations(step: str) -> list[Claim]:
    out = []
    for m in _ANNOT.finditer(step):
        lhs, rhs = _DIGIT_COMMA.sub("", m.group(1)), _DIGIT_COMMA.sub("", m.group(2))
        ok = link(lhs, rhs, False, True, [lhs, rhs])
        if ok is not None:
            nums = tuple(Fraction(x) for x in re.findall(r"\d+(?:\.\d+)?|\.\d+", lhs))
            out.append(Claim(m.group(0), ok, value_of(rhs), nums))
    return out


def check_claims(step: str) -> list[Claim]:
    """Every checkable claim of one step, in order (annotations first); never raises."""
    if not isinstance(step, str):
        return []
    try:
        return claims_of(step)
    except (RecursionError, MemoryError):
        return []
    except Exception:  # noqa: BLE001 - a reward never raises on model text; a bug here is a miss
        return []


def claims_of(step: str) -> list[Claim]:
    """`check_claims` without the safety net (tests call this so a bug shows as an error)."""
    step = step[:MAX_STEP_CHARS]
    claims = _annotations(step)[:MAX_CLAIMS]
    chains, toks = chains_and_tokens(rewrite(_ANNOT_ANY.sub(" ", step)))
    chains = chains[:MAX_CLAIMS]
    mods = moduli(step)
    for ch in chains:
        ok, value = check_chain(ch, mods)
        if ok is not None:
            text = " = ".join(ch.side_text(i) for i in range(len(ch.sides)))
            claims.append(Claim(text, ok, value, _operands(ch)))
    claims += [Claim(text, ok, None, ()) for text, ok in equation_claims(chains, toks)]
    return claims + _named(chains)
