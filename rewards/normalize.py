"""String normalisation of final answers and the fast exact comparison path.

`normalize(s)` rewrites an answer into a canonical LaTeX-ish string (no `$`, spacing macros,
`\\left`/`\\right`, units in `\\text{}`, degree signs, percent signs, thousands separators,
`\\dfrac`/`\\tfrac`, a leading `x =`). `fast_equiv(a, b)` then decides the common cases
exactly without sympy: equal strings, numbers (integers, decimals, fractions, mixed numbers,
scientific notation, infinity) compared as `fractions.Fraction`, and comma lists / tuples /
intervals / sets of such numbers. It returns None when the answer needs the symbolic path.

Everything here is plain string work with simple, non-backtracking regexes: linear-time on
hostile input, no `eval`, nothing that can hang.
"""

from __future__ import annotations

import re
from fractions import Fraction

MAX_FAST_LEN = 4000  # longer answers are only compared as strings (no real answer is this long)
_MAX_EXP = 400       # 10^400 is still a cheap Fraction; larger exponents go symbolic

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_DROP = ("\\left", "\\right", "\\!", "\\,", "\\;", "\\:", "\\displaystyle", "\\quad", "\\qquad",
         "\\bigl", "\\bigr", "\\Bigl", "\\Bigr", "\\big", "\\Big")
_REPLACE = (("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\cfrac", "\\frac"), ("\\mbox", "\\text"),
            ("\\textbf", "\\text"), ("\\mathrm", "\\text"), ("\\textrm", "\\text"),
            ("\\mathbf", "\\text"), ("\\emph", "\\text"), ("{,}", ","), ("\\dagger", ""),
            ("\\%", ""), ("%", ""), ("\\$", ""), ("^{\\circ}", ""), ("^\\circ", ""), ("°", ""),
            ("\\degree", ""), ("\\infinity", "\\infty"), ("\\inf ", "\\infty"), ("∞", "\\infty"),
            ("\\le ", "\\leq "), ("\\ge ", "\\geq "), ("\\neq", "\\ne"), ("−", "-"),
            ("\\lbrace", "\\{"), ("\\rbrace", "\\}"), ("\\{", "\\{"))
_TEXT = re.compile(r"\\text\{([^{}]*)\}")
_UNIT_AFTER_NUMBER = re.compile(r"^(.*?[\d}])\s*\\text\{\s*[A-Za-z][A-Za-z .^0-9/]*\}(?:\^\{?\d\}?)?$")
_CMD_SPACE = re.compile(r"(\\[A-Za-z]+)\s+(?=[A-Za-z])")
_FRAC_SHORT = re.compile(r"\\frac\s*(\d)\s*([\da-zA-Z])")
_FRAC_SHORT1 = re.compile(r"\\frac(\d)\{")
_FRAC_SHORT2 = re.compile(r"\\frac\{([^{}]*)\}(\d)")
_SQRT_SHORT = re.compile(r"\\sqrt(\d+)")
_LHS_VAR = re.compile(r"^[A-Za-z](?:_\{?\w+\}?)?=(?!=)")
_THIN_THOUSANDS = re.compile(r"(?<=\d),\s*\\!\s*(?=\d{3}(?!\d))")
_BASE_DIGITS = re.compile(r"^(-?(?=[0-9A-Z]*\d)[0-9A-Z]+)_\{?(\d{1,2})\}?$")
_LHS_IN = re.compile(r"^[A-Za-z]\\in(?![A-Za-z])")
_THOUSANDS = re.compile(r"^-?\d{1,3}(?:,\d{3})+(?:\.\d+)?$")
_CHOICE = re.compile(r"^(?:\(?([A-Z])\)?|\(([a-e])\))$")
_WORD_UNIT = re.compile(r"^(-?[\d.,/]+)\s*(?:[a-zA-Z]{2,}\.?)(?:\s[a-zA-Z]+)?$")

_NUM = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)$")
_SCI = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:e|E|\\times10\^|\*10\^|\\cdot10\^)\{?([+-]?\d+)\}?$")
_FRAC = re.compile(r"^([+-]?)\\frac\{([+-]?[\d.]+)\}\{([+-]?[\d.]+)\}$")
_SLASH = re.compile(r"^([+-]?\d+)/([+-]?\d+)$")
_MIXED = re.compile(r"^([+-]?)(\d+)\\frac\{(\d+)\}\{(\d+)\}$")
_INF = {"\\infty": "inf", "+\\infty": "inf", "-\\infty": "-inf", "oo": "inf", "-oo": "-inf"}


def normalize(s: str) -> str:
    """Canonical string form of one final answer (see module docstring)."""
    s = _CONTROL.sub(" ", str(s)).replace("\\$", "").strip()
    s = _strip_math_delims(s)
    s = _THIN_THOUSANDS.sub(",", s)  # "11,\! 111" is one number
    for tok in _DROP:
        s = s.replace(tok, " " if tok.startswith("\\q") else "")
    for old, new in _REPLACE:
        s = s.replace(old, new)
    for sep in ("\\text{ and }", "\\text{and}", " and ", "\\text{ or }", "\\text{or}", " or "):
        s = s.replace(sep, ",")
    s = _strip_units(s)
    s = _TEXT.sub(r"\1", s) if s.count("\\text{") == 1 and s.startswith("\\text{") else s
    if _THOUSANDS.match(s):  # before spaces go: "45, 135" is a list, "5,460" one number
        s = s.replace(",", "")
    s = _CMD_SPACE.sub(lambda m: m.group(1) + "\x01", s)
    s = "".join(s.split()).replace("\x01", " ")
    s = s.rstrip(".").rstrip("\\").rstrip(".")
    s = _FRAC_SHORT.sub(r"\\frac{\1}{\2}", s)
    s = _FRAC_SHORT1.sub(r"\\frac{\1}{", s)
    s = _FRAC_SHORT2.sub(r"\\frac{\1}{\2}", s)
    s = _SQRT_SHORT.sub(r"\\sqrt{\1}", s)
    if s.count("=") == 1:
        s = _LHS_VAR.sub("", s)
    s = _LHS_IN.sub("", s)
    s = _BASE_DIGITS.sub(r"\1_\2", s)  # 52_{8} -> 52_8
    m = _CHOICE.match(s)
    if m:
        s = (m.group(1) or m.group(2)).upper()
    return s


def _strip_math_delims(s: str) -> str:
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(left) and s.endswith(right) and len(s) >= len(left) + len(right):
            s = s[len(left): len(s) - len(right)].strip()
    return s.replace("$", "")


def _strip_units(s: str) -> str:
    """Drop a trailing `\\text{ units}` after a number, and plain words after a number."""
    if len(s) > MAX_FAST_LEN:
        return s
    m = _UNIT_AFTER_NUMBER.match(s)
    if m:
        s = m.group(1).strip()
    m = _WORD_UNIT.match(s)
    if m:
        s = m.group(1)
    return s


def parse_number(s: str):
    """An exact value for a number literal: Fraction, "inf"/"-inf", or None if not a number."""
    if s in _INF:
        return _INF[s]
    try:
        if _NUM.match(s):
            return Fraction(s)
        m = _SCI.match(s)
        if m and abs(int(m.group(2))) <= _MAX_EXP:
            return Fraction(m.group(1)) * Fraction(10) ** int(m.group(2))
        m = _FRAC.match(s)
        if m and _NUM.match(m.group(2)) and _NUM.match(m.group(3)):
            val = Fraction(m.group(2)) / Fraction(m.group(3))
            return -val if m.group(1) == "-" else val
        m = _SLASH.match(s)
        if m:
            return Fraction(int(m.group(1)), int(m.group(2)))
        m = _MIXED.match(s)
        if m:
            val = int(m.group(2)) + Fraction(int(m.group(3)), int(m.group(4)))
            return -val if m.group(1) == "-" else val
    except (ZeroDivisionError, ValueError, OverflowError):
        return None
    return None


def split_top(s: str, sep: str = ",") -> list[str]:
    """Split on `sep` outside (), [], {} nesting."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(s):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(s[start:i])
            start = i + 1
    parts.append(s[start:])
    return parts


def _structure(s: str):
    """("num", v) | ("ordered", brackets, items) | ("unordered", items) | None."""
    v = parse_number(s)
    if v is not None:
        return ("num", v)
    if len(s) >= 2 and s[0] in "([" and s[-1] in ")]" and _balanced(s[1:-1]):
        items = [_structure(p) for p in split_top(s[1:-1])]
        if len(items) > 1 and all(items):
            return ("ordered", s[0] + s[-1], items)
        return None
    if s.startswith("\\{") and s.endswith("\\}"):
        items = [_structure(p) for p in split_top(s[2:-2])]
        return ("unordered", sorted(map(repr, items))) if all(items) else None
    parts = split_top(s)
    if len(parts) > 1:
        items = [_structure(p) for p in parts]
        return ("unordered", sorted(map(repr, items))) if all(items) else None
    return None


def _balanced(s: str) -> bool:
    depth = 0
    for c in s:
        depth += c in "([{"
        depth -= c in ")]}"
        if depth < 0:
            return False
    return depth == 0


def fast_equiv(a: str, b: str) -> bool | None:
    """Exact verdict on two *normalised* answers, or None when the symbolic path must decide."""
    if a == b or _BASE_DIGITS.sub(r"\1", a) == b or _BASE_DIGITS.sub(r"\1", b) == a:
        return True  # 52_{8} == 52_8 == 52 (the digits, leniently, without the base)
    if len(a) > MAX_FAST_LEN or len(b) > MAX_FAST_LEN:
        return False
    sa, sb = _structure(a), _structure(b)
    if sa is None or sb is None:
        return None
    return sa == sb
