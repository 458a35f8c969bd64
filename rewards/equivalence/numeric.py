"""Fast numeric REJECTION of non-equivalent answers, before the symbolic path.

Most wrong answers are plainly wrong: `\\frac{9}{16}` vs `8\\sqrt{3}`. Rather than paying for
a sympy round trip, both normalised answers are evaluated as complex floats with a small
LaTeX parser (numbers, single-letter variables at fixed generic values, `\\pi`, `i`, `\\frac`,
`\\sqrt`, `^`, `+ - * / \\cdot \\times`, implicit multiplication, parentheses/braces, and
comma lists/tuples of those). If the values differ clearly, the answers are not equivalent -
a proof by evaluation. Equal values prove nothing here (approximations, rounding), so those go
on to the exact/symbolic path. Answers of different kinds are also told apart here: one value
vs several (list, tuple, interval, union, set, matrix, `\\pm`), an equation vs a value, a
word vs a number, a number in another base (`52_8`) vs anything else (`52` and `42` alike: the
question asked for base 8, and `18_9` is not 18).

The parser is deliberately conservative: anything ambiguous or unknown (`2^10` without
braces, `a/bc`, trig and log functions, `e`, subscripts, factorials, `\\infty`, intervals,
matrices, huge exponents) raises Undecided and the caller falls back to sympy. Never `eval`.
"""

from __future__ import annotations

import cmath
import re

from rewards.equivalence.normalize import split_top

MAX_LEN = 300
_REL_TOL = 1e-7
_TOKEN = re.compile(r"\d+\.\d+|\d+|\.\d+|\\[A-Za-z]+|[A-Za-z]|[-+*/^(){}\[\]]")
_LETTERS = "abcdfghjklmnopqrstuvwxyzABCDEFGHJKLMNOPQRSTUVWXYZ"  # not e (Euler?) or i (unit)
_GREEK = ("\\alpha", "\\beta", "\\gamma", "\\theta", "\\phi", "\\lambda", "\\mu", "\\omega")
# Two generic points (positive reals, away from branch cuts): a difference at either proves
# inequivalence, and an expression that changes between them is not a constant.
# Letters are case-blind, as math-verify reads them ("Monday" == "monday").
_NAMES = list(_LETTERS) + list(_GREEK)
_POINTS = [{v: 1.1 + 0.1 * k + 0.0137 * k * k for k, v in enumerate(n.lower() for n in _NAMES)},
           {v: 2.3 + 0.07 * k - 0.0031 * k * k for k, v in enumerate(n.lower() for n in _NAMES)}]
_POINTS = [{n: p[n.lower()] for n in _NAMES} for p in _POINTS]
_FUNCS = {"\\sin": cmath.sin, "\\cos": cmath.cos, "\\tan": cmath.tan, "\\ln": cmath.log,
          "\\exp": cmath.exp, "\\sec": lambda z: 1 / cmath.cos(z),
          "\\csc": lambda z: 1 / cmath.sin(z), "\\cot": lambda z: 1 / cmath.tan(z)}
_ALLOWED = set("0123456789.+-*/^(){}[], ") | set(_LETTERS) | {"i", "\\"}
_COMMANDS = {"\\frac", "\\sqrt", "\\pi", "\\cdot", "\\times", *_FUNCS, *_GREEK}
_MAX_EXP = 300


class Undecided(ValueError):
    """Not something this evaluator reads unambiguously."""


class _Eval:
    def __init__(self, text: str, point: int = 0):
        self.vars = _POINTS[point]
        self.scale = 1.0  # largest magnitude met: float error in a sum is relative to it
        self.toks = _TOKEN.findall(text)
        if "".join(self.toks) != text.replace(" ", ""):
            raise Undecided("unknown characters")
        if "e" in self.toks:  # a variable or Euler's number: only sympy knows which
            raise Undecided("e")
        if any(a[0].isdigit() and b == "\\frac" for a, b in zip(self.toks, self.toks[1:])):
            raise Undecided("2\\frac{1}{2}: mixed number or product?")
        self.i = 0

    def peek(self) -> str:
        return self.toks[self.i] if self.i < len(self.toks) else ""

    def take(self, want: str | None = None) -> str:
        tok = self.peek()
        if not tok or (want is not None and tok != want):
            raise Undecided(f"expected {want!r}")
        self.i += 1
        return tok

    def run(self) -> complex:
        val = self.expr()
        if self.i != len(self.toks):
            raise Undecided("trailing tokens")
        return val

    def expr(self) -> complex:
        val = self.term()
        while self.peek() in ("+", "-"):
            sign = self.take()
            rhs = self.term()
            self.scale = max(self.scale, abs(val), abs(rhs))
            val = val + rhs if sign == "+" else val - rhs
        return val

    def _starts_factor(self, tok: str) -> bool:
        return bool(tok) and (tok[0].isdigit() or tok[0] == "." or tok[0].isalpha() or tok in ("(", "{")
                              or tok in _COMMANDS and tok not in ("\\cdot", "\\times"))

    def term(self) -> complex:
        val = self.unary()
        while True:
            tok = self.peek()
            if tok in ("*", "\\cdot", "\\times"):
                self.take()
                val *= self.unary()
            elif tok == "/":
                self.take()
                den = self.power()
                if self._starts_factor(self.peek()):
                    raise Undecided("a/bc is ambiguous")
                val /= den
            elif self._starts_factor(tok):
                val *= self.power()
            else:
                return val

    def unary(self) -> complex:
        if self.peek() in ("+", "-"):
            return -self.unary() if self.take() == "-" else self.unary()
        return self.power()

    def power(self) -> complex:
        base = self.atom()
        if self.peek() != "^":
            return base
        self.take()
        tok = self.peek()
        if tok == "{":
            exp = self.group("{", "}")
        elif tok.isdigit() and len(tok) == 1:
            exp = complex(int(self.take()))
        elif tok.isalpha() and len(tok) == 1 or tok == "\\pi":
            exp = self.atom()
        else:
            raise Undecided("exponent form")
        if self.peek() == "^" or abs(exp) > _MAX_EXP:
            raise Undecided("tower or huge exponent")
        base = complex(base.real + 0.0, base.imag + 0.0)  # no -0.0 imag: stay off the branch cut
        if exp != round(exp.real) and _negative_real(base):
            raise Undecided("fractional power of a negative number")  # real or principal root?
        return base ** exp

    def function(self, fn) -> complex:
        """`\\sin^2 x`, `\\cos(2x)`, `\\tan{x}`; `\\sin 2x` (whose argument?) is Undecided."""
        power = 1
        if self.peek() == "^":
            self.take()
            power = self.group("{", "}") if self.peek() == "{" else complex(int(self.take()))
        if self.peek() in ("(", "{"):
            arg = self.group(self.peek(), ")" if self.peek() == "(" else "}")
        else:
            arg = self.atom()
            if self._starts_factor(self.peek()):
                raise Undecided("function argument runs on")
        return fn(arg) ** power

    def group(self, open_: str, close: str) -> complex:
        self.take(open_)
        val = self.expr()
        self.take(close)
        return val

    def atom(self) -> complex:
        tok = self.peek()
        if tok in ("(", "{"):
            return self.group(tok, ")" if tok == "(" else "}")
        self.take()
        if tok[0].isdigit() or tok[0] == ".":
            return complex(float(tok))
        if tok == "i":
            return 1j
        if tok in self.vars:
            return complex(self.vars[tok])
        if tok == "\\pi":
            return complex(cmath.pi)
        if tok in _FUNCS:
            return self.function(_FUNCS[tok])
        if tok == "\\frac":
            num = self.group("{", "}")
            return num / self.group("{", "}")
        if tok == "\\sqrt":
            index = self.group("[", "]") if self.peek() == "[" else 2
            radicand = self.group("{", "}")
            radicand = complex(radicand.real + 0.0, radicand.imag + 0.0)
            if _negative_real(radicand) and index != 2:
                if index.imag or index.real % 2 != 1:
                    raise Undecided("even root of a negative number")
                return -((-radicand.real) ** (1 / index.real)) + 0j  # the real odd root
            return radicand ** (1 / index)
        raise Undecided(f"unknown token {tok!r}")


def _negative_real(z: complex) -> bool:
    return z.real < 0 and abs(z.imag) <= 1e-12 * max(1.0, abs(z.real))


def evaluate(text: str, point: int = 0) -> complex:
    """Complex value of one expression (variables at generic point 0 or 1); raises Undecided
    when it cannot be read safely."""
    return _evaluate(text, point)[0]


def _evaluate(text: str, point: int) -> tuple[complex, float]:
    """(value, scale): scale is the largest magnitude summed on the way (cancellation bound)."""
    if len(text) > MAX_LEN or not set(text) <= _ALLOWED:
        raise Undecided("not a plain expression")
    if any(cmd not in _COMMANDS for cmd in re.findall(r"\\[A-Za-z]+", text)):
        raise Undecided("unknown command")
    try:
        ev = _Eval(text, point)
        val = ev.run()
    except (ZeroDivisionError, OverflowError, ValueError) as err:
        raise Undecided(str(err)) from err
    if not (cmath.isfinite(val) and ev.scale < 1e250):
        raise Undecided("not finite")
    return val, max(ev.scale, abs(val))


def _values(text: str, point: int) -> tuple[str, list[tuple[complex, float]]]:
    """(shape, [(value, scale)]): shape "" for one value, "()" for a tuple, "," for a list."""
    if len(text) > 2 and text[0] == "(" and text[-1] == ")" and "," in text:
        parts = split_top(text[1:-1])
        if len(parts) > 1:
            return "()", [_evaluate(p, point) for p in parts]
    parts = split_top(text)
    if len(parts) > 1:
        return ",", [_evaluate(p, point) for p in parts]
    bare = re.sub(r"\\sqrt\[[^\]]*\]", "", text)
    if "," in bare or "[" in bare or "]" in bare:
        raise Undecided("brackets")
    return "", [_evaluate(text, point)]


def _close(a: tuple[complex, float], b: tuple[complex, float]) -> bool:
    return abs(a[0] - b[0]) <= _REL_TOL * max(1.0, a[1], b[1])


_WORD = re.compile(r"^[A-Za-z]{2,}$")
_BASE_NUM = re.compile(r"^(-?(?=[0-9A-Z]*\d)[0-9A-Z]+)_\{?(\d{1,2})\}?$")  # 52_8, 152A_{11}


def _is_scalar(s: str) -> bool:
    try:
        evaluate(s)
        return True
    except Undecided:
        return False


def _is_multi(s: str) -> bool:
    """Several values: a list, tuple, interval, union, set, matrix or a +- pair."""
    if any(tok in s for tok in ("\\cup", "\\pm", "\\begin{", "\\{")) or len(split_top(s)) > 1:
        return True
    return len(s) > 2 and s[0] in "([" and s[-1] in ")]" and len(split_top(s[1:-1])) > 1


def kinds_differ(a: str, b: str) -> bool:
    """Answers of different kinds: a single value vs several values (or a matrix), an equation
    vs a value, a word vs a number or another word, a number in another base vs anything but
    the same base-number."""
    for x, y in ((a, b), (b, a)):
        if _WORD.match(x) and (any(c.isdigit() for c in y) or _WORD.match(y) and x.lower() != y.lower()):
            return True  # words are words, not products of letters: "seat" != "east"
        if _BASE_NUM.match(x) and x != y:
            return True  # 52_8 is only written 52_8 (52_{8} normalises to it)
        if ("=" in x) != ("=" in y) and "=" not in y and _is_scalar(y):
            return True
        if _is_multi(x) and not _is_multi(y) and (_is_scalar(y) or _BASE_NUM.match(y) or _WORD.match(y)):
            return True
    return False


def clearly_different(a: str, b: str) -> bool:
    """True only when evaluation proves the two normalised answers differ."""
    if kinds_differ(a, b):
        return True
    return any(_differ_at(a, b, point) for point in range(len(_POINTS)))


def _differ_at(a: str, b: str, point: int) -> bool:
    try:
        shape_a, va = _values(a, point)
        shape_b, vb = _values(b, point)
    except Undecided:
        return False
    if shape_a != shape_b or len(va) != len(vb):
        return False  # structure differs: let the symbolic path judge lists vs sets etc.
    if shape_a == ",":  # order-free
        rest = list(vb)
        for x in va:
            match = next((k for k, y in enumerate(rest) if _close(x, y)), None)
            if match is None:
                return True
            rest.pop(match)
        return False
    return any(not _close(x, y) for x, y in zip(va, vb))
