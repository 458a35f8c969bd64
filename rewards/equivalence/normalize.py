"""String normalisation of final answers and the fast exact comparison path.

`clean(s)` does what is safe on a whole answer, lists and equations alike: no `$`/`\\(`,
spacing macros, `\\left`/`\\right`, `\\dfrac`, look-alike unicode operators, `{,}` and `,\\!`
thousands marks, "and"/"or"/";" between items written as commas. What no answer is written
with (`foreign_characters`: a digit other than 0-9, a combining mark, a zero-width character)
is never mapped to what it looks like: `1８` is not 18. `normalize(s)` then brings each
comma-separated item to a canonical form:
- a trailing unit (`7\\text{ cm}^2`, `12 apples`) is dropped, but only when no word in it
  changes the meaning (`18 \\text{ or more}`, `18 minus one` keep their words and so never
  equal 18) and it has the form of a unit (`_unit_form`: words only - no parenthesised remark,
  no "-ly" adverb, no abbreviation that is not a listed unit);
- a trailing `\\%` or degree sign on the whole value is dropped (`50\\%` == 50, `30^\\circ` ==
  30); anywhere else a degree is the angle it names (`\\sin 30^\\circ` == 1/2, `\\sin(90^\\circ-x)`
  != `\\sin(90-x)`) and a `\\%` stays (`1\\%8` is not 18);
- `1 1/2` is the mixed number 3/2, `1 000` one thousand, `2^6 3^5` a product; two plain
  numbers side by side are no number (`2 9`, `2\\,9` are not 18: digit groups split by spacing
  are one number only as a thousands grouping, the strict grammar's `THOUSANDS`, so `0,018` is
  the list 0, 18 and `0 018` nothing);
- inequalities of one variable become intervals (`-2\\le x\\le 7` == `[-2,7]`), `x\\in I` is I,
  clock times become "H:MM" (24-hour when a.m./p.m. is given).
`decimal_comma(s, other)` reads `0,111` as 0.111 when the other answer is a decimal number and
the comma cannot be a thousands separator; `units_differ(a, b)`: two different listed units
never match (`18 dollars` is not `18 \\text{ cents}`).
`fast_equiv(a, b)` decides the common cases exactly without sympy: equal strings, numbers
(integers, decimals, fractions, mixed numbers, scientific notation, infinity) compared as
`fractions.Fraction`, and lists / tuples / intervals / sets of such numbers. It returns None
when the answer needs the symbolic path. Plain string work with simple, non-backtracking
regexes: linear-time on hostile input, no `eval`, nothing that can hang.
"""

from __future__ import annotations

import re
import unicodedata
from fractions import Fraction

from rewards.equivalence.forms import clock_time, inequality_interval, is_name, split_top
from rewards.equivalence.grammar.lexer import THOUSANDS
from rewards.equivalence.grammar.units import unit_name
from rewards.equivalence.words import AFTER_BAD, COMPARISON, MULTIPLIERS

MAX_FAST_LEN = 4000  # longer answers are only compared as strings (no real answer is this long)
_MAX_EXP = 400       # 10^400 is still a cheap Fraction; larger exponents go symbolic

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_DROP = ("\\left", "\\right", "\\!", "\\displaystyle", "\\bigl", "\\bigr", "\\Bigl", "\\Bigr",
         "\\big", "\\Big", "\\limits")
_SPACES = ("\\,", "\\;", "\\:", "\\quad", "\\qquad", "~", "\\enspace", "\\thinspace")
_BACKSLASH_SPACE = re.compile(r"(?<!\\)\\ ")
_REPLACE = (("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\cfrac", "\\frac"), ("\\mbox", "\\text"),
            ("\\textbf", "\\text"), ("\\mathrm", "\\text"), ("\\textrm", "\\text"),
            ("\\textit", "\\text"), ("\\textnormal", "\\text"), ("\\textsf", "\\text"), ("\\mathit", "\\text"),
            ("\\emph", "\\text"),
            ("\\mathbf", "\\text"), ("{,}", ","), ("\\dagger", ""), ("\\$", ""),
            ("\\degree", "^\\circ"), ("^{\\circ}", "^\\circ"), ("°", "^\\circ"),
            ("\\infinity", "\\infty"), ("∞", "\\infty"), ("\\le ", "\\leq "), ("\\ge ", "\\geq "),
            ("\\neq", "\\ne"), ("−", "-"), ("–", "-"), ("×", "\\times "), ("÷", "\\div "), ("·", "\\cdot "),
            ("≤", "\\leq "), ("≥", "\\geq "), ("≠", "\\ne "), ("π", "\\pi "), ("√", "\\sqrt"),
            ("²", "^2"), ("³", "^3"), ("\\lbrace", "\\{"), ("\\rbrace", "\\}"), ("\\lvert", "|"),
            ("\\rvert", "|"), ("\\vert", "|"), ("\\%", "%"), (";", ","))
_TEXT_JOINER = re.compile(r"\\text\{\s*,?\s*(?:and|or|,)\s*,?\s*\}")
_BARE_JOINER = re.compile(r"(?<!\s)\s+(?:and|or)\s+|,\s*(?:and|or)\s+")
# (no pattern here starts with an unanchored \s*: on a run of spaces that is quadratic)
_PERCENT_WORD = re.compile(r"(?:\\text\{\s*)?(?<![A-Za-z])(?:percent|per\s+cent)(?![A-Za-z])\s*\}?", re.I)
_DEGREE_WORD = re.compile(r"(?:\\text\{\s*)?(?<![A-Za-z])degrees?\s*\}?\s*$", re.I)
_TEXT = re.compile(r"\\text\{([^{}]*)\}")
_TEXT_SPACE = re.compile(r"\\text\s+\{")
_UNIT_TAIL = re.compile(
    r"(?:\s*(?:\\text\{[^{}]*\}|(?<=\s)[A-Za-z]{2,}\.?|\^\{?-?\d\}?|/|\.(?=\s|$)))+$")
_CMD_SPACE = re.compile(r"(\\[A-Za-z]+)\s+(?=[A-Za-z])")
_FRAC_SHORT = re.compile(r"\\frac\s*(\d)\s*([\da-zA-Z])")
_FRAC_SHORT1 = re.compile(r"\\frac(\d)\{")
_FRAC_SHORT2 = re.compile(r"\\frac\{([^{}]*)\}(\d)")
_SQRT_SHORT = re.compile(r"\\sqrt(\d+)")
_THIN_THOUSANDS = re.compile(r"(?<=\d),\s*\\!\s*(?=\d{3}(?!\d))")
_BASE_DIGITS = re.compile(r"^(-?(?=[0-9A-Z]*\d)[0-9A-Z]+(?:\.[0-9A-Z]+)?)_\{?(\d{1,2})\}?$")
_BACKSLASH_DIGIT = re.compile(r"(?<!\\)\\(?=\d)")  # "\15" (a dropped "$" of "\$15") is 15
_LHS_IN = re.compile(r"^(?:[A-Za-z]|\\[a-z]+)(?:_\{?\w+\}?)?\\in(?![A-Za-z])")
_THOUSANDS = re.compile(r"^[-+]?(?:" + THOUSANDS.pattern + r")(?:\.\d+)?$", re.A)
_SPACE_THOUSANDS = re.compile(r"^[-+]?(?:" + THOUSANDS.pattern.replace("(?:,", "(?: ") + r")(?:\.\d+)?$", re.A)
# a plain number (not an exponent or subscript) then spacing then a digit: "2 9", "12 34"
_SPLIT_NUMBER = re.compile(r"(?<![\d.^_])\d+(?:\.\d+)?\s+\.?\d", re.A)
_COMMA_NUMBER = re.compile(r"^([-+]?\d+),(\d+)$", re.A)
_DECIMAL = re.compile(r"^[-+]?\d*\.\d+$", re.A)
_MIXED_SPACE = re.compile(r"(?<![\d.])(\d+)\s+(\d+)\s*/\s*(\d+)(?![\d.])")
_JUXTAPOSED = re.compile(r"(?<=[\d}])\s+(?=\d)")
# "\log_2 8", "\log_{2} 8": the number after a logarithm's base is its argument, not a factor
_LOG_BASE = re.compile(r"\\log_(?:\{([^{}]*)\}|(\w))\s*(\d+(?:\.\d+)?)")
_DEGREE = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?|\{[^{}]*\})\s*\^\s*\\circ")
_TRIG = re.compile(r"\\(?:sin|cos|tan|sec|csc|cot|arc)")
_CHOICE = re.compile(r"^(?:\(?([A-Z])\)?|\(([a-e])\))$")
_CHOICE_LABEL = re.compile(r"^\\text\{\(([A-E])\)\}")  # AMC style "\\textbf{(B) } 12" is choice B
# what may follow a choice label: the choice's value written out (digits, fractions, roots, pi),
# never words, "?", "\\pm" or "or" ("\\text{(B)} or more" is not choice B)
_CHOICE_VALUE = re.compile(r"(?:[\d.,{}^/+\-*()\[\]]|\\(?:d?frac|sqrt|pi|cdot|times|\$|[,;!]|circ|%)(?![A-Za-z]))*")
_NUMBER_WORDS = {"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
                 "eleven", "twelve", "twenty", "thirty", "forty", "fifty", "hundredth", "tenth", "th"}
_UNIT_STOP = AFTER_BAD | COMPARISON | MULTIPLIERS | _NUMBER_WORDS | {
    "up", "down", "is", "are", "was", "were", "the", "answer", "and", "it", "this", "that", "be", "a", "an", "of",
    "so", "then", "equals", "equal", "what"}

_NUM = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)$")
_SCI = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:e|E|\\times10\^|\*10\^|\\cdot10\^)\{?([+-]?\d+)\}?$")
_FRAC = re.compile(r"^([+-]?)\\frac\{([+-]?[\d.]+)\}\{([+-]?[\d.]+)\}$")
_SLASH = re.compile(r"^([+-]?\d+)/([+-]?\d+)$")
_MIXED = re.compile(r"^([+-]?)(\d+)\\frac\{(\d+)\}\{(\d+)\}$")
_INF = {"\\infty": "inf", "+\\infty": "inf", "-\\infty": "-inf", "oo": "inf", "-oo": "-inf"}


def clean(s: str) -> str:
    """Light cleaning that is safe on whole answers, lists and equations (module docstring)."""
    s = _CONTROL.sub(" ", str(s)).replace("\\$", "").strip()
    s = _strip_math_delims(s)
    s = _THIN_THOUSANDS.sub(",", s)  # "11,\! 111" is one number
    for tok in _DROP:
        s = s.replace(tok, "")
    for tok in _SPACES:
        s = s.replace(tok, " ")
    s = _BACKSLASH_SPACE.sub(" ", s)
    for old, new in _REPLACE:
        s = s.replace(old, new)
    s = _TEXT_SPACE.sub(r"\\text{", s)
    s = _BACKSLASH_DIGIT.sub("", s)
    s = _PERCENT_WORD.sub("%", s)
    if "degree" in s[-40:].lower():
        s = s[:-40] + _DEGREE_WORD.sub(lambda m: "^\\circ", s[-40:])
    s = s.strip().rstrip(".").strip()
    if _THOUSANDS.match(s):  # before list splitting: "45, 135" is a list, "5,460" one number
        s = s.replace(",", "")
    return _join_items(s) if "and" in s or "or" in s else s


def _join_items(s: str) -> str:
    """ "3 and 4", "x=2 \\text{ or } x=3" -> comma lists; words inside other \\text{} stay."""
    out, pos = [], 0
    for m in _TEXT.finditer(s):
        out.append(_BARE_JOINER.sub(",", s[pos:m.start()]))
        out.append("," if _TEXT_JOINER.fullmatch(m.group()) else m.group())
        pos = m.end()
    out.append(_BARE_JOINER.sub(",", s[pos:]))
    return "".join(out)


def normalize(s: str) -> str:
    """Canonical string form of one final answer (see module docstring)."""
    s = clean(s)
    if len(s) > MAX_FAST_LEN:
        return s
    if s.count("=") == 1:  # "x = 5", "f(x) = 2x+3": the left side only names the answer
        lhs, rhs = s.split("=")
        if rhs.strip() and is_name(_item(lhs)):
            s = rhs
    items = split_top(s)
    if len(items) > 1 and all(p.strip() for p in items):
        done = [_item(p) for p in items]
        if not all(done):
            return ""  # an item that is no value leaves the list unread
        if all(inequality_interval(_item(p, intervals=False)) for p in items):
            return "\\cup".join(done)  # "x < 2 or x > 3" is the union of the two intervals
        return ",".join(done)
    return _item(s)


def _item(s: str, intervals: bool = True) -> str:
    """Canonical form of one list item (or of a whole single answer)."""
    s = _strip_unit(s.strip())
    s = _strip_trailing_marks(s)
    s = _DEGREE.sub(r"(\1\\cdot\\frac{\\pi}{180})", s)  # an angle inside an expression
    if _SPACE_THOUSANDS.match(s):
        s = s.replace(" ", "")
    s = _MIXED_SPACE.sub(r"\1\\frac{\2}{\3}", s)  # "1 1/2" is one and a half, not 11/2
    if _SPLIT_NUMBER.search(s):
        return ""  # "2 9", "2\\,9": neither a product nor one number (module docstring)
    s = _LOG_BASE.sub(r"\\log_{\1\2}{\3}", s)
    if "\\begin" not in s and "&" not in s:
        s = _JUXTAPOSED.sub(r"\\cdot ", s)  # "2^6 3^5" is a product
    if s.count("\\text{") == 1 and s.startswith("\\text{") and s.endswith("}"):
        s = s[6:-1].strip()
    time = clock_time(s.replace(" ", ""))
    if time is not None:
        return time
    s = _CMD_SPACE.sub(lambda m: m.group(1) + "\x01", s)
    s = "".join(s.split()).replace("\x01", " ")
    s = s.rstrip(".").rstrip("\\").rstrip(".")
    s = _FRAC_SHORT.sub(r"\\frac{\1}{\2}", s)
    s = _FRAC_SHORT1.sub(r"\\frac{\1}{", s)
    s = _FRAC_SHORT2.sub(r"\\frac{\1}{\2}", s)
    s = _SQRT_SHORT.sub(r"\\sqrt{\1}", s)
    s = _LHS_IN.sub("", s)
    interval = inequality_interval(s) if intervals else None
    if interval is not None:
        s = interval
    s = _BASE_DIGITS.sub(r"\1_\2", s)  # 52_{8} -> 52_8
    m = _CHOICE_LABEL.match(s)
    if m and _CHOICE_VALUE.fullmatch(s, m.end()):
        return m.group(1)
    m = _CHOICE.match(s)
    if m:
        s = (m.group(1) or m.group(2)).upper()
    return s


def foreign_characters(s: str) -> bool:
    """Does `s` hold a character no answer is written with, after `clean` mapped the look-alike
    operators (`−`, `×`, `²`)? A digit other than 0-9 (fullwidth `８`, other scripts, the
    super- and subscript digits, vulgar fractions), a combining mark (U+0301), or a format
    character (a zero-width space or joiner): such an answer equals only itself, written alike."""
    return not s.isascii() and any(
        not c.isascii() and (unicodedata.category(c)[0] in "NM" or unicodedata.category(c) == "Cf") for c in s)


def decimal_comma(s: str, other: str) -> str:
    """`s` (cleaned) with a decimal comma read as a point, where the other answer (cleaned) is a
    decimal number and the comma cannot be a thousands separator: `0,111` and `3,14` are 0.111
    and 3.14 against `0.111` and `3.14`, `1,800` stays one thousand eight hundred. Anywhere
    else a comma between digits separates list items (`0,1` is the list of MATH golds)."""
    m = _COMMA_NUMBER.match(s)
    if m is None or _THOUSANDS.match(s) or not _DECIMAL.match(other):
        return s
    return m.group(1) + "." + m.group(2)


def trailing_unit(s: str) -> str | None:
    """The listed unit (`rewards.equivalence.grammar.units`, canonical name) that ends the value
    `s` (cleaned), or None: `18 dollars` is "dollar", `7\\text{ cm}^2` "centimeter^2"."""
    m = _UNIT_TAIL.search(s[-80:])
    if m is None or not re.search(r"\d", s[: len(s) - len(m.group())]):
        return None
    unit = re.sub(r"\s*\^\s*", "^", _TEXT.sub(r" \1 ", m.group())).strip(" ./")
    return unit_name(unit, True) if unit else None


def units_differ(a: str, b: str) -> bool:
    """Do two cleaned answers end in different listed units? Compared by the unit named, not
    its power (`5 cm` for `5\\text{ cm}^2` is a sloppy right answer, `18 hours` for `18 minutes`
    a wrong one); the generic "units" names none, and a unit on one side only is allowed."""
    ua, ub = trailing_unit(a), trailing_unit(b)
    if ua is None or ub is None:
        return False
    ua, ub = ua.split("^")[0], ub.split("^")[0]
    return "unit" not in (ua, ub) and ua != ub


def _strip_math_delims(s: str) -> str:
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(left) and s.endswith(right) and len(s) >= len(left) + len(right):
            s = s[len(left): len(s) - len(right)].strip()
    return s.replace("$", "")


def _strip_unit(s: str) -> str:
    """Drop a trailing unit after a value (`7\\text{ cm}^2`, `12 apples`, `5\\text{ p.m.}` kept
    for the clock), unless a word in it changes the meaning ("or more", "minus one")."""
    tail = s[-80:]  # units are short; bounded regex work on long answers
    m = _UNIT_TAIL.search(tail)
    if m is None or m.start() + len(s) - len(tail) == 0:
        return s
    value, unit = s[:m.start() + len(s) - len(tail)].rstrip(), m.group()
    words = re.findall(r"[A-Za-z]+", _TEXT.sub(r" \1 ", unit))
    if (not words or len(words) > 4 or not re.search(r"\d", value)
            or re.search(r"(?:^|[^\\A-Za-z])[A-Za-z]{2,}$", value)):
        return s
    if {_singular(w.lower()) for w in words} & _UNIT_STOP or re.fullmatch(r"[ap]\.?\s*m\.?", " ".join(words).lower()):
        return s
    if not _unit_form(unit, words):
        return s
    if re.search(r"\d", unit):  # "^2" after a word only
        if not re.fullmatch(r"(?:\s*(?:\\text\{[^{}]*\}|[A-Za-z.]+|\^\{?-?\d\}?|/))+", unit):
            return s
    return value


def _singular(w: str) -> str:
    """The word a plural names ("thousands", "halves", "dozens"), so that a word that changes the
    value stops a unit in every number: "18 thousands" is no more 18 than "18 thousand"."""
    if w.endswith("ves"):
        return w[:-3] + "f"
    return w[:-1] if w.endswith("s") and not w.endswith("ss") else w


def _unit_form(unit: str, words: list[str]) -> bool:
    """The allowed form of a unit to drop: words (with `/`, `^2`, spacing), no remark. A
    parenthesis or other punctuation makes the tail a remark on the value (`18 \\text{ (approximately)}`,
    `18 \\text{ (exact?)}`); a word ending in "-ly" is an adverb bearing on the value, not what
    is counted (`18 \\text{ approximately}`, `roughly`); a word cut short with "." must be a
    listed unit (`lbs.`, `ft.`; not `approx.`, `est.`)."""
    if re.search(r"[()\[\]?!:;,'\"]", unit):
        return False
    for w in words:
        if unit_name(w, True) is not None or w.lower() in ("sq", "cu", "per", "square", "cubic"):
            continue
        if w.lower().endswith("ly") or re.search(re.escape(w) + r"\.", unit):
            return False
    return True


def _strip_trailing_marks(s: str) -> str:
    """A trailing percent or degree sign on the whole value (not inside trig functions)."""
    if s.endswith("%") and s.count("%") == 1:
        return s[:-1].rstrip()
    m = re.search(r"\^\s*\\circ$", s)
    if m and "\\circ" not in s[:m.start()] and not _TRIG.search(s):
        return s[:m.start()].rstrip()
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


def _structure(s: str):
    """("num", v) | ("ordered", brackets, items) | ("list", items) | None."""
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
        return ("list", items) if all(items) else None
    parts = split_top(s)
    if len(parts) > 1:
        items = [_structure(p) for p in parts]
        return ("list", items) if all(items) else None
    return None


def _balanced(s: str) -> bool:
    depth = 0
    for c in s:
        depth += c in "([{"
        depth -= c in ")]}"
        if depth < 0:
            return False
    return depth == 0


def _same(sa, sb) -> bool:
    """Structures equal: lists as multisets, a tuple equals a bare list in the same order."""
    if sa[0] == "list" and sb[0] == "list":
        return sorted(map(repr, sa[1])) == sorted(map(repr, sb[1]))
    for x, y in ((sa, sb), (sb, sa)):
        if x[0] == "ordered" and x[1] == "()" and y[0] == "list":
            return x[2] == y[1]
    return sa == sb


def fast_equiv(a: str, b: str) -> bool | None:
    """Exact verdict on two *normalised* answers, or None when the symbolic path must decide."""
    if a == b:
        return True
    if len(a) > MAX_FAST_LEN or len(b) > MAX_FAST_LEN:
        return False
    if ":" in a or ":" in b:
        return False  # clock times and ratios compare as written ("9:30" is not 9/30)
    sa, sb = _structure(a), _structure(b)
    if sa is None or sb is None:
        return None
    return _same(sa, sb)
