"""Check the arithmetic claims of one solution step, in prose, LaTeX or GSM8K annotations.

    check_claims(r"so \\(1/3 \\times 18 = 6\\) and \\(18 - 6 = 12\\)")   # two true claims

A claim is an equality chain (`rewards.claim_runs`) with at least one checkable link: two
adjacent sides that both evaluate (`rewards.arith`, exact where possible) and at least one of
which computes something (an operator or function; `5 = 5` is not a claim). GSM8K calculator
annotations `<<48/2=24>>` are claims too. A link is judged under every reading of what is
ambiguous in writing, and it is false only if no reading holds:
- `⊞` (a number before a fraction, `2\\frac12`): mixed number or product;
- a `!` ending the chain: factorial or an exclamation mark (`2+2=5!` is false both ways);
- `%`: always `/100`; also a label (dropped) when it sits only on the right-hand side(s) or on
  every side (`0.25 * 100 = 25%`), never when only the left side has it (`50% = 50` is false);
- a running computation: `20 - 5 = 15 - 3 = 12` (the second side starts with the value of the
  first) is two steps, not a false `15 = 12`.
Tolerance: exact values must match exactly, except that a side written as a decimal with d
places may be rounded or truncated (|error| < 10^-d), decimals on the computing side that look
rounded (`0.33`, two or more places) widen that by their own rounding, and `≈` allows 2%.
Chains whose first side is a name (`Total = 3 + 3 + 1.5`) with no result are completed by a
later `Total = 8` in the same step. Claims with a variable or `§` on either side of every link
are not claims here (see `rewards.step_check` for the symbolic ones).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

from rewards.arith import ParseError, Value, evaluate
from rewards.claim_runs import Chain, Tok, find_chains
from rewards.identities import degree, identity, proportional
from rewards.latex_text import MIXED, rewrite

MAX_CLAIMS = 200
MAX_IDENTITY_VARIABLES = 1  # multivariate "rewrites" are too often conditions (x = a^2 - bc = b^2 - ac)
_ANNOT = re.compile(r"<<([^<>=]{1,300})=([^<>=]{1,100})>>")
_ANNOT_ANY = re.compile(r"<<[^<>]{0,400}>>")
_DIGIT_COMMA = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_DECIMAL = re.compile(r"^-?\d*\.(\d+)$")
_COMPUTES = set("+-*/^!" + MIXED) | {"sqrt", "binom", "**"}
_FALSITY = {"false", "not", "contradiction", "impossible", "incorrect", "wrong", "invalid",
            "fails", "isn", "doesn", "never", "untrue", "neq", "mistake", "error"}
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


def _plain_decimals(side: str) -> int | None:
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
    if _plain_decimals(side) is not None:
        return 0.0  # a written result: its own rounding is judged by the places it shows
    for m in re.finditer(r"(\d*)\.(\d{2,})", side):
        x = float(m.group(0))
        if x and not m.group(2).endswith("0"):
            slack += 10 ** -len(m.group(2)) / x
    return slack * abs(float(value))


def _close(a_txt: str, a: Value, b_txt: str, b: Value, approx: bool) -> bool:
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
        d = _plain_decimals(txt)
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
        pairs = [(_mixed(x, op), _mixed(y, op)) for op in "+*" for x, y in pairs]
    if last and b.rstrip().endswith("!"):
        pairs += [(x, y.rstrip()[:-1]) for x, y in pairs]
    if "%" in b and ("%" not in sides[0] or all("%" in s for s in sides if s.strip())):
        pairs += [(x.replace("%", ""), y.replace("%", "")) for x, y in pairs]
    return pairs


def _mixed(s: str, op: str) -> str:
    """`2 ⊞ ((1)/(2))` read as (2 + 1/2) or as 2 * (1/2): the number binds to the group after it."""
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


def _eval(s: str) -> Value | None:
    try:
        return evaluate(s)
    except ParseError:
        return None


def _link(a: str, b: str, approx: bool, last: bool, sides: list[str]) -> bool | None:
    """True / False for the claim a = b (or a ≈ b), None when it cannot be evaluated."""
    verdict = None
    for x, y in _readings(a, b, last, sides):
        va, vb = _eval(x), _eval(y)
        if va is None or vb is None:
            continue
        if _close(x, va, y, vb, approx):
            return True
        verdict = False
    return verdict


def _computes(side: list[Tok]) -> bool:
    body = [t for t in side if t.kind != "unit"]
    body = body[1:] if body and body[0].text == "-" else body
    return any(t.text in _COMPUTES or t.text == "%" and len(body) > 2 for t in body)


def _readable(side: list[Tok]) -> bool:
    return any(t.kind != "unit" for t in side) and not any(t.kind in ("var", "junk") for t in side)


def _symbolic(side: list[Tok]) -> bool:
    """An expression with variables and nothing unreadable (`x^2 + 2 x + 1`, `2 (a + b)`)."""
    return any(t.kind == "var" for t in side) and not any(t.kind == "junk" for t in side)


def _symbolic_text(side: list[Tok]) -> str:
    """Side text with multi-letter math names split into letters (`xy` is x times y)."""
    out = []
    for t in side:
        if t.kind == "unit":
            continue
        if t.kind == "var" and "_" not in t.text and not t.text[-1].isdigit() and len(t.text) > 1:
            out.append(" ".join(t.text))
        else:
            out.append(t.text)
    return " ".join(out)


def _operates(side: list[Tok]) -> bool:
    """More than one term: an operator, a function, or a product written by juxtaposition."""
    body = [t for t in side if t.kind != "unit"]
    return _computes(side) or len(body) > 1


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
    for k, t in enumerate(texts):
        depth += {"(": 1, ")": -1}.get(t, 0)
        if depth == 0 and k > 0 and t in ("+", "-", "*", "/") and texts[k - 1] not in "+-*/(":
            v = _eval(_mixed(" ".join(texts[:k]), "+"))
            if v is not None and abs(float(v) - float(a_val)) <= 1e-9 * max(1.0, abs(float(v))):
                return True
    return False


def _same_value(a: Value, b: Value) -> bool:
    return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(a)))


def _whole_division(a: str, b: str) -> bool:
    """`36 / 5 = 7` (whole boxes), `13 / 4 = 4` (boxes needed): a quotient rounded to a whole;
    `500 / 13 = 13 * 38 + 6`: division with remainder written as an equation."""
    va, vb = _eval(_mixed(a, "+")), _eval(_mixed(b, "+"))
    if va is None or vb is None or "/" not in a + b:
        return False
    for x, other in ((a, vb), (b, va)):
        num = _eval(x.split("/")[0]) if x.count("/") == 1 and "(" not in x else None
        if num is not None and _same_value(num, other):
            return True
    for q, w in ((va, vb), (vb, va)):
        if isinstance(w, Fraction) and w.denominator == 1 and math.floor(q) <= w <= math.ceil(q):
            return True
    return False


def _ends_agree(chain: Chain, texts: list[str]) -> bool:
    """The first computed side and the last side agree: a slip in between is a typo
    (`5!/2! = (5*4*3)/(2*1) = 60`), not a wrong result."""
    sides = [k for k in range(len(texts)) if _readable(chain.sides[k])]
    if len(sides) < 3:
        return False
    first, last = _eval(_mixed(texts[sides[0]], "+")), _eval(_mixed(texts[sides[-1]], "+"))
    return first is not None and last is not None and _close(texts[sides[0]], first, texts[sides[-1]], last, False)


def _converts_units(chain: Chain, i: int) -> bool:
    """`9pi/4 = 180°/pi * 9pi/4` (radians to degrees), `(1 minute)/(60 seconds) = 1`: the
    sides are in different units, so their numbers differ on purpose."""
    ua, ub = chain.units(i), chain.units(i + 1)
    if i + 2 == len(chain.sides) and chain.after[:1] == ["deg"]:
        ub = ub | {"deg"}  # 990° - 720° = 270°: the last side's unit trails it
    if ("deg" in ua) != ("deg" in ub):
        return True
    return bool(ua) and chain.side_text(i + 1).strip("() ") == "1"


def moduli(step: str) -> tuple[int, ...]:
    """The moduli a step works with: `mod 25`, `\\pmod{11}`, `units digit` (10), `parity` (2)."""
    found = {int(m.group(1)) for m in _MODULUS.finditer(step[:20_000])}
    found.update(m for rx, m in _DIGITS_MODULUS if rx.search(step[:20_000]))
    return tuple(sorted(m for m in found if m >= 2))


def _residue(a: str, b: str, mods: tuple[int, ...]) -> bool:
    """`7 * 3 = 1` when working with units digits: b is a reduced residue of a."""
    va, vb = _eval(_mixed(a, "+")), _eval(_mixed(b, "+"))
    if not (isinstance(va, Fraction) and isinstance(vb, Fraction)) or va.denominator != 1 or vb.denominator != 1:
        return False
    return any(0 <= vb < m and (va - vb) % m == 0 for m in mods)


def _names(side: list[Tok]) -> set[str]:
    return set(_symbolic_text([t for t in side if t.kind == "var"]).split())


def _rewriting(chain: Chain, i: int) -> bool | None:
    """A later link `... = A = B` of a chain rewrites A; with the same variables on both
    sides (no value substituted) it must be an identity, or, in a chain set equal to 0,
    the same equation times a constant (`0 = -16t^2 + 80t - 36 = 4t^2 - 20t + 9`)."""
    a, b = chain.sides[i], chain.sides[i + 1]
    names = _names(a)
    if names != _names(b) or len(names) > MAX_IDENTITY_VARIABLES:
        return None
    if any(t.kind == "var" and len(t.text) > 1 and t.text.isupper() for t in a + b):
        return None  # AF^2 = AD * AG: lengths related by geometry, not an algebraic identity
    ta, tb = _symbolic_text(a), _symbolic_text(b)
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
    rounded = bool(_ROUNDING & set(chain.after))
    for i in range(start, len(chain.rels) if not chain.listed else 0):
        a, b = chain.sides[i], chain.sides[i + 1]
        if i >= 1 and _symbolic(a) and _symbolic(b) and _operates(a) and _operates(b):
            ok = _rewriting(chain, i)
            if ok is not None:
                verdicts.append(ok)
            continue
        if not (_readable(a) and _readable(b)) or not (_computes(a) or _computes(b)):
            continue
        if _converts_units(chain, i):
            continue
        approx = rounded or "≈" in chain.rels[:i + 1]  # after an ≈ the chain is approximate
        ok = _link(texts[i], texts[i + 1], approx, i + 1 == len(chain.rels), texts)
        if ok is False and mods and _residue(texts[i], texts[i + 1], mods):
            continue
        if ok is False and _running(_eval(_mixed(texts[i], "+")), b):
            continue
        if ok is False and _whole_division(texts[i], texts[i + 1]):
            continue  # 21 ÷ 14 = 1 remainder 7, 36 / 5 = 7 full pens: integer division
        if ok is not None:
            verdicts.append(ok)
    value = _eval(_mixed(texts[-1], "+")) if _readable(chain.sides[-1]) else None
    if not verdicts:
        return None, value
    if not all(verdicts) and (_FALSITY & set(chain.after) or _ends_agree(chain, texts)):
        return True, value  # "2 + 8 = 4, which is false": a test, not a claim
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
    if len(ch.sides) != 2 or _readable(ch.sides[0]) or not _readable(ch.sides[1]):
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
        if _plain_decimals(rhs) is None:
            continue
        ok = _link(lhs, rhs, False, True, [lhs, rhs])
        if ok is not None:
            out.append(Claim(f"{key} = {lhs} = {rhs}", ok, _eval(rhs), ()))
    return out


def _annotations(step: str) -> list[Claim]:
    out = []
    for m in _ANNOT.finditer(step):
        lhs, rhs = _DIGIT_COMMA.sub("", m.group(1)), _DIGIT_COMMA.sub("", m.group(2))
        ok = _link(lhs, rhs, False, True, [lhs, rhs])
        if ok is not None:
            nums = tuple(Fraction(x) for x in re.findall(r"\d+(?:\.\d+)?|\.\d+", lhs))
            out.append(Claim(m.group(0), ok, _eval(rhs), nums))
    return out


def check_claims(step: str) -> list[Claim]:
    """Every checkable claim of one step, in order (annotations first); never raises."""
    if not isinstance(step, str):
        return []
    try:
        claims = _annotations(step)
        chains = find_chains(rewrite(_ANNOT_ANY.sub(" ", step)))
        mods = moduli(step)
        for ch in chains[:MAX_CLAIMS]:
            ok, value = check_chain(ch, mods)
            if ok is not None:
                text = " = ".join(ch.side_text(i) for i in range(len(ch.sides)))
                claims.append(Claim(text, ok, value, _operands(ch)))
        return claims + _named(chains[:MAX_CLAIMS])
    except (RecursionError, MemoryError):
        return []
    except Exception:  # noqa: BLE001 - a reward never raises on model text; a bug here is a miss
        return []
