"""Answer forms that need more than string cleaning: names on a left-hand side, equation
chains, inequalities written for intervals, and clock times. Pure string work on normalised
answers (no spaces except after a command), linear in the length, no eval.

- `is_name("f(x)")`: a left-hand side that only names the quantity (`x`, `a_1`, `f(x)`,
  `E(2020,1993)`, `|AB|`, `\\angle ABC`, `(p,q)`, `\\cos\\theta`), as opposed to an expression
  (`2x`, `x^2`, `x+y`) or a closed value (`\\frac{28}{4}`).
- `split_chain("a=b=c")` -> ["a", "b", "c"] at top-level `=` signs.
- `split_top("1,(2,3)")` -> ["1", "(2,3)"]: split outside (), [], {} nesting.
- `inequality_interval("-2\\le x\\le7")` -> "[-2,7]"; `x>5` -> "(5,\\infty)".
- `clock_time("9:30\\text{p.m.}")` -> "21:30"; times compare as times, never as ratios.
"""

from __future__ import annotations

import re

_NAME_COMMANDS = {
    "\\alpha", "\\beta", "\\gamma", "\\delta", "\\epsilon", "\\varepsilon", "\\zeta", "\\eta",
    "\\theta", "\\vartheta", "\\iota", "\\kappa", "\\lambda", "\\mu", "\\nu", "\\xi", "\\rho",
    "\\sigma", "\\tau", "\\upsilon", "\\phi", "\\varphi", "\\chi", "\\psi", "\\omega",
    "\\Gamma", "\\Delta", "\\Theta", "\\Lambda", "\\Xi", "\\Sigma", "\\Phi", "\\Psi", "\\Omega",
    "\\angle", "\\triangle", "\\overline", "\\overrightarrow", "\\vec", "\\hat", "\\bar",
    "\\tilde", "\\text", "\\mathrm", "\\operatorname", "\\sin", "\\cos", "\\tan", "\\sec",
    "\\csc", "\\cot", "\\log", "\\ln", "\\measuredangle", "\\widehat", "\\mathbf", "\\boldsymbol",
    "\\|", "\\lvert", "\\rvert", "\\lVert", "\\rVert", "\\prime", "\\arcsin", "\\arccos", "\\arctan",
    "\\det", "\\max", "\\min", "\\gcd"}
_NOT_NAME_WORDS = {"not", "no", "never", "or", "maybe", "perhaps", "possibly", "probably", "approx",
                   "approximately", "about", "least", "most", "than", "more", "less", "minus", "plus",
                   "wrong", "false", "isnt", "ne", "neq", "le", "ge", "leq", "geq", "lt", "gt", "sim"}
_CMD = re.compile(r"\\[A-Za-z]+|\\\|")
_CLOSED_COMMANDS = {"\\frac", "\\sqrt", "\\pi", "\\cdot", "\\times", "\\div", "\\sin", "\\cos",
                    "\\tan", "\\sec", "\\csc", "\\cot", "\\ln", "\\log", "\\exp", "\\infty"}


def is_name(s: str) -> bool:
    """Does `s` only name a quantity (see module docstring)? Top-level digits or operators
    make it an expression; digits inside a subscript or a function's parentheses are fine."""
    if not s or len(s) > 60 or not re.search(r"[A-Za-z]", s):
        return False
    if any(cmd not in _NAME_COMMANDS for cmd in _CMD.findall(s)):
        return False
    if {w.lower() for w in re.findall(r"[A-Za-z]{2,}", s)} & _NOT_NAME_WORDS:
        return False  # "\\text{not } x": a claim about x, not a name
    if s[0] == "(" and s[-1] == ")" and _balanced(s[1:-1]):
        parts = split_top(s[1:-1], ",")
        return len(parts) > 1 and all(is_name(p) for p in parts)
    depth = 0
    prev = ""
    for c in s:
        if c in "([{":
            if c == "(" and not (prev.isalpha() or prev in ")}'"):
                return False  # "(x+1)" is an expression; "f(x)" names a value
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and (c.isdigit() and prev not in ("_",) or c in "+-*/^=<>!,"):
            return False
        prev = c if not c.isspace() else prev
    return depth == 0


def is_closed(s: str) -> bool:
    """A value with no variables: numbers, \\frac, \\sqrt, \\pi, functions of those."""
    rest = _CMD.sub(lambda m: "" if m.group() in _CLOSED_COMMANDS else "@", s)
    return "@" not in rest and not re.search(r"[A-DF-HJ-Za-df-hj-z]", rest) and \
        bool(re.search(r"\d|\\pi", s))


def split_chain(s: str) -> list[str]:
    """Parts of `a=b=c` split at top-level `=` (not `\\le`, `<=`, `>=`, `!=`, `==`)."""
    return _split_outside(s, "=", lambda i: s[i - 1:i] not in ("<", ">", "!", "=", ":") and s[i + 1:i + 2] != "=")


def split_top(s: str, sep: str = ",") -> list[str]:
    """Split on `sep` outside (), [], {} nesting."""
    return _split_outside(s, sep)


def _split_outside(s: str, sep: str, keep=None) -> list[str]:
    """Split ``s`` at each ``sep`` outside (), [], {} nesting (where ``keep(i)`` holds, if given)."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(s):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == sep and depth == 0 and (keep is None or keep(i)):
            parts.append(s[start:i])
            start = i + 1
    parts.append(s[start:])
    return parts


def _balanced(s: str) -> bool:
    depth = 0
    for c in s:
        depth += (c in "([{") - (c in ")]}")
        if depth < 0:
            return False
    return depth == 0


_REL_OP = re.compile(r"<=|>=|≤|≥|<|>|\\(?:leqslant|geqslant|leqq|geqq|leq|geq|le|ge|lt|gt)(?![A-Za-z])")
_VAR = re.compile(r"(?:[A-Za-z]|\\[a-z]+)(?:_\{?\w+\}?)?")
_BOUND = re.compile(r"[-+]?(?:[\d.]|\\frac|\\sqrt|\\pi|\\infty|\\cdot|[{}])+")


def inequality_interval(s: str) -> str | None:
    """`a\\le x<b` -> "[a,b)", `x\\ge a` -> "[a,\\infty)", `a<x` -> "(a,\\infty)"; None otherwise.
    Split at the relation signs (no regex backtracking), then each part is checked alone."""
    if len(s) > 200:
        return None
    ops = list(_REL_OP.finditer(s))
    if not 1 <= len(ops) <= 2:
        return None
    parts = [s[:ops[0].start()]] + [s[a.end():b.start()] for a, b in zip(ops, ops[1:])] + [s[ops[-1].end():]]
    parts = [p.strip() for p in parts]
    rels = [m.group() for m in ops]
    if len(parts) == 3:
        lo, var, hi = parts
        if not (_BOUND.fullmatch(lo) and _VAR.fullmatch(var) and _BOUND.fullmatch(hi)):
            return None
        rel1, rel2 = rels
        if _is_lt(rel1) != _is_lt(rel2):
            return None  # "a < x > b" is not an interval
        if not _is_lt(rel1):
            lo, hi, rel1, rel2 = hi, lo, rel2, rel1
        return f"{'(' if _strict(rel1) else '['}{lo},{hi}{')' if _strict(rel2) else ']'}"
    left, right = parts
    if _VAR.fullmatch(left) and _BOUND.fullmatch(right):
        return _one_sided(right, rels[0], var_on_left=True)
    if _BOUND.fullmatch(left) and _VAR.fullmatch(right):
        return _one_sided(left, rels[0], var_on_left=False)
    return None


def _is_lt(rel: str) -> bool:
    return rel in ("<", "<=", "≤") or rel.startswith(("\\le", "\\lt"))


def _strict(rel: str) -> bool:
    return rel in ("<", ">", "\\lt", "\\gt")


def _one_sided(bound: str, rel: str, var_on_left: bool) -> str:
    upper = _is_lt(rel) == var_on_left  # x < b: b is an upper bound; b < x: a lower bound
    if upper:
        return f"(-\\infty,{bound}{')' if _strict(rel) else ']'}"
    return f"{'(' if _strict(rel) else '['}{bound},\\infty)"


_TIME = re.compile(r"^(\d{1,2}):([0-5]\d)(?::([0-5]\d))?(?:\\text\{)?\s*(?:([ap])\.?\s*m\.?)?\}?$", re.I)


def clock_time(s: str) -> str | None:
    """A clock time in a canonical "H:MM" form (24-hour when a.m./p.m. is given), else None."""
    m = _TIME.match(s.replace("\\,", "").replace("~", ""))
    if m is None:
        return None
    hour, minute, second, half = int(m.group(1)), m.group(2), m.group(3), (m.group(4) or "").lower()
    if half and not 1 <= hour <= 12 or hour > 24:
        return None
    if half == "p" and hour != 12:
        hour += 12
    elif half == "a" and hour == 12:
        hour = 0
    return f"{hour}:{minute}" + (f":{second}" if second else "")
