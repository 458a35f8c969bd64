"""Equivalence of two parsed answers, decided on the parsed objects within one deadline.

Shapes first, values second:
- `x = 5`, `f(x) = 2`, `x_1 = 3`: a name (a variable, or a function of variables) on the left
  and not on the right names the value; it equals the bare value, and another named answer only
  with the same name (`f(x) = 2` is not `g(x) = 2`). A left side that is an expression makes an
  equation, compared as an equation: `y = 2x + 3` equals `2x - y + 3 = 0` (the same
  difference of sides, up to sign, or the same sides), never `x = 2x + 3`. `\\frac{28}{4} = 7`
  (no variables on the left) is a claim that must hold; its value is the right side.
- An inequality in one variable is its interval (`-2 \\le x \\le 7` is `[-2, 7]`); `x \\in S` is S.
- Lists are multisets, tuples ordered (a bare list equals a tuple in the same order), sets
  multisets without repeats, intervals need the same brackets, matrices the same shape.
- Units are compared as units (`5.4` dollars is not `5.4` cents); an answer without a unit
  equals the gold's value when the gold has one, and the other way round. A unit belongs to a
  whole value: one inside an expression (`2 + 3 \\text{ cm}`) makes the value equal nothing;
  one after a product's last factor (`8\\sqrt{3} \\text{ in}^2`) is the product's.
- Percent and degree marks (`50\\%`, `50 percent`; `30^\\circ`, `30 \\text{ degrees}`) are decided
  by the gold's own form (`compare(pred, gold)`, mode "gold"): a marked answer is paid only when
  the gold carries the same mark (a percentage is not a count, an angle not a length, so
  `18\\%` and `18^\\circ` never equal a gold of `18`); an answer without the mark equals a
  marked gold (`50` for `50\\%`, `30` for `30^\\circ`: the question asked for the quantity in
  that measure). Two statements of one completion (mode "same") must carry the same marks; the
  lenient reader's second reading (mode "loose") keeps the MATH convention of dropping them.
- Values: exact `Fraction` arithmetic when both sides are rational (logarithms of rationals
  included where the result is rational: `\\log_2 8` is 3, `\\frac{\\ln 8}{\\ln 2}` and
  `\\frac{\\log 8}{\\log 2}` are `\\log_2 8` by change of base); otherwise both are printed
  as plain LaTeX (no words, nothing dropped) and decided by `rewards.equivalence.equiv.equiv_status`
  (numeric rejection, then sympy in the killable worker) with what is left of the deadline.
Every comparison checks the deadline first; the work is linear in the number of items times
the cost of one value comparison.
"""

from __future__ import annotations

import contextvars
import time
from typing import Literal
from fractions import Fraction

from rewards.equivalence.symbolic import EQUAL, NOT_EQUAL, TIMEOUT

MAX_ITEMS = 50
Marks = Literal["gold", "same", "loose"]
_MARKS: contextvars.ContextVar[str] = contextvars.ContextVar("grammar_marks", default="gold")
_EXACT: contextvars.ContextVar[bool] = contextvars.ContextVar("grammar_exact", default=False)


class Timeout(Exception):
    """The completion's deadline passed."""


class _Undecided(Exception):
    """An exact-only comparison met values that need the symbolic path."""


def _check(deadline: float) -> None:
    if time.monotonic() >= deadline:
        raise Timeout


def compare(pred, gold, deadline: float, marks: Marks = "gold") -> str:
    """EQUAL / NOT_EQUAL / TIMEOUT for two parse trees. `marks` (module docstring): "gold" the
    second tree's percent/degree marks decide, "same" both must carry the same, "loose" dropped."""
    token = _MARKS.set(marks)
    try:
        return EQUAL if _answer(pred, gold, deadline) else NOT_EQUAL
    except Timeout:
        return TIMEOUT
    finally:
        _MARKS.reset(token)


# -- shapes --

def _symbols(n, out: set) -> set:
    """Names of variables and functions in a node or a sequence of nodes."""
    if isinstance(n, tuple) and n:
        if not isinstance(n[0], str):  # a sequence of nodes
            for x in n:
                _symbols(x, out)
            return out
        if n[0] in ("sym", "call"):
            out.add(n[1])
        for x in n[1:]:
            _symbols(x, out)
    return out


def _is_name(n) -> bool:
    """A variable, a function of variables (`f(x)`), or a tuple of variables (`(p, q)`)."""
    if n[0] == "sym":
        return True
    if n[0] == "tuple":
        return all(x[0] == "sym" for x in n[1])
    return n[0] == "call" and all(a[0] == "sym" for a in n[2])


def _shape(n, deadline):
    """(kind, payload): ("named", (name, value)), ("eq", (lhs, rhs)), ("value", node)."""
    if n[0] == "in":
        return ("value", n[2]) if n[1][0] == "sym" else ("false", None)
    if n[0] != "rel":
        return "value", n
    ops, parts = n[1], n[2]
    if all(op == "=" for op in ops):
        first = parts[0]
        if _is_name(first) and not (_symbols(first, set()) & _symbols(parts[1:], set())):
            for a, b in zip(parts[1:], parts[2:]):
                if not _link(a, b, deadline):
                    return "false", None
            return "named", (first, parts[-1])
        if len(parts) == 2 and _symbols(first, set()):
            return "eq", (first, parts[1])
        if _symbols(parts[:-1], set()):
            return "rel", n
        for a, b in zip(parts, parts[1:]):
            if not _link(a, b, deadline):
                return "false", None  # a false claim inside the answer states nothing
        return "value", parts[-1]
    interval = _as_interval(ops, parts)
    return ("value", interval) if interval is not None else ("rel", n)


def _link(a, b, deadline) -> bool:
    """One `=` link of a chain holds; inside an equation a percent is a fraction (`0.56 = 56\\%`)."""
    ra, rb = rational(a), rational(b)
    if ra is not None and rb is not None:
        return ra == rb
    return _value(a, b, deadline)


def _as_interval(ops, parts):
    """`x > 5`, `5 < x`, `-2 \\le x < 7`: the interval of one variable, or None."""
    syms = [k for k, p in enumerate(parts) if p[0] == "sym"]
    if len(syms) != 1 or _symbols(tuple(p for k, p in enumerate(parts) if k != syms[0]), set()):
        return None
    k = syms[0]
    lo = hi = None
    lo_closed = hi_closed = False
    if len(parts) == 2:
        op = ops[0]
        other = parts[1 - k]
        var_small = (op in ("<", "le")) == (k == 0)
        closed = op in ("le", "ge")
        if var_small:
            hi, hi_closed = other, closed
        else:
            lo, lo_closed = other, closed
    elif len(parts) == 3 and k == 1 and ops[0] in ("<", "le") and ops[1] in ("<", "le"):
        lo, lo_closed, hi, hi_closed = parts[0], ops[0] == "le", parts[2], ops[1] == "le"
    elif len(parts) == 3 and k == 1 and ops[0] in (">", "ge") and ops[1] in (">", "ge"):
        lo, lo_closed, hi, hi_closed = parts[2], ops[1] == "ge", parts[0], ops[0] == "ge"
    else:
        return None
    return ("interval", lo_closed, lo if lo is not None else ("neg", ("const", "oo")),
            hi if hi is not None else ("const", "oo"), hi_closed)


def _same_name(a, b) -> bool:
    """`x` is `x`; `f(x)` is `f(y)` (one function, its argument's letter aside), not `g(x)`."""
    if a[0] == b[0] == "call":
        return a[1] == b[1] and len(a[2]) == len(b[2])
    return a == b


def _answer(p, g, deadline) -> bool:
    kp, vp = _shape(p, deadline)
    kg, vg = _shape(g, deadline)
    if "false" in (kp, kg):
        return False
    if {kp, kg} == {"named", "eq"}:  # `y = 2x + 3` against `2x - y + 3 = 0`: both equations
        kp = kg = "eq"
    if kp == "named" and kg == "named":
        return _same_name(vp[0], vg[0]) and _value(vp[1], vg[1], deadline)
    if kp == "named" and kg == "value":
        return _value(vp[1], vg, deadline)
    if kg == "named" and kp == "value":
        return _value(vp, vg[1], deadline)
    if kp == "eq" and kg == "eq":
        (a, b), (c, d) = vp, vg
        diff_p = ("add", (a, ("neg", b)))
        diff_g = ("add", (c, ("neg", d)))
        return (_value(diff_p, diff_g, deadline) or _value(diff_p, ("neg", diff_g), deadline))
    if kp == "rel" and kg == "rel":
        return vp[1] == vg[1] and all(_value(a, b, deadline) for a, b in zip(vp[2], vg[2]))
    if kp == "value" and kg == "value":
        return _value(vp, vg, deadline)
    return False


# -- values --

def _strip(n):
    """(node without its top-level unit / percent / degree signs, unit or None, the marks
    {"pct", "deg"} it carried: a degree unit word is the degree sign)."""
    unit, marks = None, set()
    if n[0] == "mul" and n[1] and n[1][-1][0] == "unit":
        # `8\sqrt{3} \text{ in}^2`, `3\pi \text{ cm}`: a unit after a product's last factor is
        # the product's (a product scales its unit); inside a sum it still equals nothing
        n = ("unit", ("mul", n[1][:-1] + (n[1][-1][1],)), n[1][-1][2])
    while n[0] in ("unit", "pct", "deg"):
        if n[0] == "unit":
            if unit is not None:
                break
            unit = n[2]
            if unit == "degree":
                marks.add("deg")
        else:
            marks.add(n[0])
        n = n[1]
    return n, unit, frozenset(marks)


def _marks_ok(ma: frozenset, mb: frozenset) -> bool:
    mode = _MARKS.get()
    if mode == "loose":
        return True
    return ma == mb if mode == "same" else ma <= mb


_LISTS = ("list", "tuple", "set", "union")


def _value(a, b, deadline) -> bool:
    _check(deadline)
    a, ua, ma = _strip(a)
    b, ub, mb = _strip(b)
    if ua and ub and ua != ub:
        return False
    if not _marks_ok(ma, mb):
        return False
    ka, kb = a[0], b[0]
    if ka == "text" or kb == "text":
        return ka == kb and a[1] == b[1]
    if ka == "based" or kb == "based":
        return a == b
    if ka in _LISTS or kb in _LISTS or ka == "interval" or kb == "interval":
        return _collection(a, b, deadline)
    if ka == "matrix" or kb == "matrix":
        return (ka == kb and len(a[1]) == len(b[1]) and len(a[1][0]) == len(b[1][0]) and
                all(_value(x, y, deadline) for ra, rb in zip(a[1], b[1]) for x, y in zip(ra, rb)))
    if ka in ("rel", "in") or kb in ("rel", "in"):
        return _answer(a, b, deadline)  # an item of a list: `x = 1, y = 2` against `1, 2`
    if _inner_unit(a) or _inner_unit(b):
        return False  # `2 + 3 \\text{ cm}`: a unit inside an expression is compared with nothing
    ra, rb = rational(a), rational(b)
    if ra is not None and rb is not None:
        return ra == rb
    if _EXACT.get():
        raise _Undecided
    from rewards.equivalence.equiv import equiv_status  # the value path of the lenient reader, on clean LaTeX

    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise Timeout
    status = equiv_status(_print(a), _print(b), remaining)
    if status == TIMEOUT:
        raise Timeout
    return status == EQUAL


def _inner_unit(n) -> bool:
    """A unit anywhere inside a value's expression (its own top-level unit is already stripped)."""
    if not isinstance(n, tuple) or not n:
        return False
    if not isinstance(n[0], str):  # a sequence of nodes (the terms of an add or mul)
        return any(_inner_unit(x) for x in n)
    if n[0] == "unit":
        return True
    return any(_inner_unit(x) for x in n[1:] if isinstance(x, tuple))


def _collection(a, b, deadline) -> bool:
    ka, kb = a[0], b[0]
    if ka == "interval" or kb == "interval":
        if ka == "tuple" and len(a[1]) == 2:
            a = ("interval", False, a[1][0], a[1][1], False)
        if kb == "tuple" and len(b[1]) == 2:
            b = ("interval", False, b[1][0], b[1][1], False)
        if a[0] != "interval" or b[0] != "interval":
            return False
        return a[1] == b[1] and a[4] == b[4] and _value(a[2], b[2], deadline) and _value(a[3], b[3], deadline)
    if "union" in (ka, kb):
        if ka != kb:
            return False
        return _multiset(a[1], b[1], deadline)
    items_a = a[1] if ka in _LISTS else (a,)
    items_b = b[1] if kb in _LISTS else (b,)
    if len(items_a) > MAX_ITEMS or len(items_b) > MAX_ITEMS:
        return False
    if ka == "tuple" or kb == "tuple":
        if {ka, kb} - {"tuple", "list"} or len(items_a) != len(items_b):
            return False
        return all(_value(x, y, deadline) for x, y in zip(items_a, items_b))
    if ka == "set" or kb == "set":
        items_a, items_b = _unique(items_a, deadline), _unique(items_b, deadline)
    return _multiset(items_a, items_b, deadline)


def _unique(items, deadline):
    out = []
    for x in items:
        if not any(_value(x, y, deadline) for y in out):
            out.append(x)
    return out


def _multiset(xs, ys, deadline) -> bool:
    if len(xs) != len(ys):
        return False
    left = list(ys)
    for x in xs:
        k = next((k for k, y in enumerate(left) if _value(x, y, deadline)), None)
        if k is None:
            return False
        left.pop(k)
    return True


# -- exact rational values --

_MAX_EXP = 64
_MAX_DIGITS = 200
_MAX_LOG_BITS = 200  # exact logarithms of numbers up to about 60 digits


def rational(n) -> Fraction | None:
    """The exact value of a tree that uses only rational arithmetic, or None."""
    try:
        return _rat(n)
    except (ZeroDivisionError, OverflowError, ValueError):
        return None


def _rat(n) -> Fraction | None:
    k = n[0]
    if k == "num":
        return n[1]
    if k == "neg":
        v = _rat(n[1])
        return None if v is None else -v
    if k == "add" or k == "mul":
        acc = Fraction(0 if k == "add" else 1)
        for x in n[1]:
            v = _rat(x)
            if v is None:
                return None
            acc = acc + v if k == "add" else acc * v
        return acc
    if k == "div":
        if _log_arg(n[1]) is not None and _log_arg(n[2]) is not None and n[1][:2] == n[2][:2]:
            return _log_rational(_log_arg(n[1]), _log_arg(n[2]))  # change of base: ln 8 / ln 2 = log_2 8
        a, b = _rat(n[1]), _rat(n[2])
        return None if a is None or b is None or b == 0 else a / b
    if k == "pow":
        a, e = _rat(n[1]), _rat(n[2])
        if a is None or e is None or e.denominator != 1 or abs(e) > _MAX_EXP or (a == 0 and e < 0):
            return None
        if max(len(str(a.numerator)), len(str(a.denominator))) * abs(int(e)) > _MAX_DIGITS:
            return None
        return a ** int(e)
    if k in ("pct", "deg"):
        v = _rat(n[1])
        return None if v is None else (v / 100 if k == "pct" else None)
    if k == "log" and n[1] is not None:
        return _log_rational(n[2], n[1])
    return None


def _log_arg(n):
    """The argument of a logarithm whose base cancels in a quotient (`\\ln x`, `\\log x`), else None."""
    if n[0] == "func" and n[1] == "ln" or n[0] == "log" and n[1] is None:
        return n[2]
    return None


def _log_rational(arg, base) -> Fraction | None:
    """log_base(arg) when it is rational: arg = c^p and base = c^q for one rational c
    (`\\log_2 8` = 3, `\\log_8 2` = 1/3, `\\log_4 \\frac12` = -1/2), else None."""
    a, b = _rat(arg), _rat(base)
    if a is None or b is None or a <= 0 or b <= 0 or b == 1:
        return None
    if a == 1:
        return Fraction(0)
    if max(a.numerator, a.denominator, b.numerator, b.denominator).bit_length() > _MAX_LOG_BITS:
        return None
    (ra, ma), (rb, mb) = _perfect_power(a), _perfect_power(b)
    if ra == rb:
        return Fraction(ma, mb)
    if ra == 1 / rb:
        return Fraction(-ma, mb)
    return None


def _perfect_power(v: Fraction) -> tuple[Fraction, int]:
    """(r, m) with v = r^m and m as large as possible (r is then no perfect power)."""
    n, d = v.numerator, v.denominator
    for m in range(max(n.bit_length(), d.bit_length()), 1, -1):
        rn, rd = _int_root(n, m), _int_root(d, m)
        if rn is not None and rd is not None:
            return Fraction(rn, rd), m
    return v, 1


def _int_root(x: int, m: int) -> int | None:
    """The exact integer m-th root of x >= 1, or None."""
    guess = round(x ** (1.0 / m))
    return next((r for r in (guess - 1, guess, guess + 1) if r >= 1 and r ** m == x), None)


# -- printing for the symbolic path --

_FUNC_LATEX = {"sin", "cos", "tan", "sec", "csc", "cot", "arcsin", "arccos", "arctan", "ln"}


def _print(n) -> str:
    k = n[0]
    if k == "num":
        v = n[1]
        s = str(v.numerator) if v.denominator == 1 else f"\\frac{{{abs(v.numerator)}}}{{{v.denominator}}}"
        if v < 0 and v.denominator != 1:
            s = "-" + s
        return f"({s})" if v < 0 else s
    if k == "sym":
        return n[1]
    if k == "const":
        return "\\pi" if n[1] == "pi" else "\\infty"
    if k == "add":
        return "(" + " + ".join(_print(x) for x in n[1]) + ")"
    if k == "neg":
        return f"(-{_print(n[1])})"
    if k == "mul":
        return "(" + " \\cdot ".join(_print(x) for x in n[1]) + ")"
    if k == "div":
        return f"\\frac{{{_print(n[1])}}}{{{_print(n[2])}}}"
    if k == "pow":
        return f"{{{_print(n[1])}}}^{{{_print(n[2])}}}"
    if k == "sqrt":
        return f"\\sqrt[{_print(n[2])}]{{{_print(n[1])}}}" if n[2] is not None else f"\\sqrt{{{_print(n[1])}}}"
    if k == "func":
        if n[1] == "exp":
            return f"e^{{{_print(n[2])}}}"
        return f"\\{n[1]}({_print(n[2])})"
    if k == "log":
        if n[1] is None:
            return f"\\log({_print(n[2])})"
        return f"\\frac{{\\ln({_print(n[2])})}}{{\\ln({_print(n[1])})}}"
    if k == "call":
        return n[1] + "(" + ", ".join(_print(a) for a in n[2]) + ")"
    if k == "abs":
        return f"|{_print(n[1])}|"
    if k == "fact":
        return f"({_print(n[1])})!"
    if k == "pct":
        return f"\\frac{{{_print(n[1])}}}{{100}}"
    if k == "deg":
        return f"({_print(n[1])} \\cdot \\frac{{\\pi}}{{180}})"
    if k == "unit":
        return _print(n[1])
    if k == "based":
        return f"{n[1]}_{{{n[2]}}}"
    if k in ("list", "set", "tuple", "union", "interval", "matrix", "rel", "in", "text"):
        return _print_other(n)
    return str(n)


def _print_other(n) -> str:
    k = n[0]
    if k == "list":
        return ", ".join(_print(x) for x in n[1])
    if k == "tuple":
        return "(" + ", ".join(_print(x) for x in n[1]) + ")"
    if k == "set":
        return "\\{" + ", ".join(_print(x) for x in n[1]) + "\\}"
    if k == "union":
        return " \\cup ".join(_print(x) for x in n[1])
    if k == "interval":
        return ("[" if n[1] else "(") + _print(n[2]) + ", " + _print(n[3]) + ("]" if n[4] else ")")
    if k == "matrix":
        return "\\begin{pmatrix}" + " \\\\ ".join(" & ".join(_print(x) for x in r) for r in n[1]) + "\\end{pmatrix}"
    if k == "rel":
        ops = {"=": "=", "<": "<", ">": ">", "le": "\\le", "ge": "\\ge"}
        out = _print(n[2][0])
        for op, part in zip(n[1], n[2][1:]):
            out += f" {ops[op]} {_print(part)}"
        return out
    if k == "in":
        return f"{_print(n[1])} \\in {_print(n[2])}"
    return f"\\text{{{n[1]}}}"


_INSIDE = contextvars.ContextVar("grammar_second_reading", default=False)


def second_reading(pred: str, gold: str, deadline: float, only_equations: bool = False,
                   exact: bool = False) -> str | None:
    """The grammar's verdict (EQUAL / NOT_EQUAL) when both answers parse completely in it (forms
    the lenient normaliser misses: `0.\\overline{3}`, `\\log_2 8`, `\\emptyset` vs `\\varnothing`;
    equations it reads as values), else None (the lenient verdict stands). Never re-entered from
    inside itself (its own value path calls the lenient one). `only_equations`: decide only when
    both are equations (`x = 2x + 3` against `y = 2x + 3`; a named value against a bare one,
    `E(2020,1993) = 76` against `76`, keeps the lenient verdict). `exact`: decide only by exact
    arithmetic (None where a value needs the symbolic path), which is cheap enough to try before
    the lenient path's sympy call."""
    if _INSIDE.get():
        return None
    from rewards.equivalence.grammar.lexer import Unrecognized
    from rewards.equivalence.grammar.parser import parse_answer

    token, exact_token = _INSIDE.set(True), _EXACT.set(exact)
    try:
        try:
            p, g = parse_answer(pred), parse_answer(gold)
        except (Unrecognized, RecursionError):
            return None
        if only_equations and not (p[0] == g[0] == "rel" and "=" in p[1] and "=" in g[1]):
            return None
        try:
            status = compare(p, g, deadline, marks="loose")
        except _Undecided:
            return None
        return status if status in (EQUAL, NOT_EQUAL) else None
    finally:
        _INSIDE.reset(token)
        _EXACT.reset(exact_token)


def printed(n) -> str:
    """The answer as plain LaTeX (for logging and for a gold the grammar cannot read)."""
    kind, v = _shape(n, time.monotonic() + 1.0) if n[0] in ("rel", "in") else ("value", n)
    if kind == "named":
        return _print(v[1])
    if kind == "eq":
        return f"{_print(v[0])} = {_print(v[1])}"
    return _print(v) if kind == "value" else _print(n)
