"""Fast numeric REJECTION of non-equivalent answers, before the symbolic path.

Most wrong answers are plainly wrong: `\\frac{9}{16}` vs `8\\sqrt{3}`. Rather than paying for
a sympy round trip, both normalised answers are evaluated as complex floats with a small
LaTeX parser (numbers, single-letter variables at fixed generic values, `\\pi`, `i`, `\\frac`,
`\\sqrt`, `^`, `+ - * / \\cdot \\times`, implicit multiplication, parentheses/braces, and
comma lists/tuples of those). If the values differ clearly, the answers are not equivalent -
a proof by evaluation. Equal values prove nothing here (approximations, rounding), so those go
on to the exact/symbolic path. Answers of different kinds are also told apart here: one value
vs several (list, tuple, interval, union, set, matrix, `\\pm`), an equation vs a value, a
word vs a number, a number in another base (`52_8`) vs anything but its own digits (`52`
is accepted; `42`, its decimal value, is not: the question asked for base 8).

The parser is deliberately conservative: anything ambiguous or unknown (`2^10` without
braces, `a/bc`, trig and log functions, `e`, subscripts, factorials, `\\infty`, intervals,
matrices, huge exponents) raises Undecided and the caller falls back to sympy. Never `eval`.
"""

from __future__ import annotations

import cmath
import re

from rewards.normalize import split_top

MAX_LEN = 300
_REL_TOL = 1e-7
_TOKEN = re.compile(r"\d+\.\d+|\d+|\.\d+|\\[A-Za-z]+|[A-Za-z]|[-+*/^(){}\[\]]")
_VARS = {c: 1.1 + 0.1 * k + 0.0137 * k * k for k, c in enumerate("abcdfghjklmnopqrstuvwxyz"
                                                                    "ABCDEFGHJKLMNOPQRSTUVWXYZ")}
_ALLOWED = set("0123456789.+-*/^(){}[], ") | set(_VARS) | {"i", "\\"}
_COMMANDS = {"\\frac", "\\sqrt", "\\pi", "\\cdot", "\\times"}


class Undecided(ValueError):
    """Not something this evaluator reads unambiguously."""


class _Eval:
    def __init__(self, text: str):
        self.toks = _TOKEN.findall(text)
        if "".join(self.toks) != text.replace(" ", ""):
            raise Undecided("unknown characters")
        if "e" in self.toks:  # a variable or Euler's number: only sympy knows which
            raise Undecided("e")
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
            val = val + self.term() if self.take() == "+" else val - self.term()
        return val

    def _starts_factor(self, tok: str) -> bool:
        return bool(tok) and (tok[0].isdigit() or tok[0] == "." or tok[0].isalpha() or tok in ("(", "{")
                              or tok in ("\\frac", "\\sqrt", "\\pi"))

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
        if self.peek() == "^" or abs(exp) > 64:
            raise Undecided("tower or huge exponent")
        base = complex(base.real + 0.0, base.imag + 0.0)  # no -0.0 imag: stay off the branch cut
        if exp != round(exp.real) and _negative_real(base):
            raise Undecided("fractional power of a negative number")  # real or principal root?
        return base ** exp

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
        if tok in _VARS:
            return complex(_VARS[tok])
        if tok == "\\pi":
            return complex(cmath.pi)
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


def evaluate(text: str) -> complex:
    """Complex value of one expression; raises Undecided when it cannot be read safely."""
    if len(text) > MAX_LEN or not set(text) <= _ALLOWED:
        raise Undecided("not a plain expression")
    if any(cmd not in _COMMANDS for cmd in re.findall(r"\\[A-Za-z]+", text)):
        raise Undecided("unknown command")
    try:
        val = _Eval(text).run()
    except (ZeroDivisionError, OverflowError, ValueError) as err:
        raise Undecided(str(err)) from err
    if not (cmath.isfinite(val) and abs(val) < 1e12):
        raise Undecided("not finite")
    return val


def _values(text: str) -> tuple[str, list[complex]]:
    """(shape, values): shape is "" for one value, the bracket pair for a tuple, "," for a list."""
    if len(text) > 2 and text[0] == "(" and text[-1] == ")" and "," in text:
        parts = split_top(text[1:-1])
        if len(parts) > 1:
            return "()", [evaluate(p) for p in parts]
    parts = split_top(text)
    if len(parts) > 1:
        return ",", [evaluate(p) for p in parts]
    if "," in text or "[" in text or "]" in text:
        raise Undecided("brackets")
    return "", [evaluate(text)]


def _close(a: complex, b: complex) -> bool:
    return abs(a - b) <= _REL_TOL * max(1.0, abs(a), abs(b))


_WORD = re.compile(r"^[A-Za-z]{2,}$")
_BASE_NUM = re.compile(r"^(\d+)_\{?(\d{1,2})\}?$")  # 52_8: digits in base 8


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
    vs a value, a word vs a number."""
    for x, y in ((a, b), (b, a)):
        if _WORD.match(x) and any(c.isdigit() for c in y):
            return True
        m = _BASE_NUM.match(x)
        if m and y != m.group(1) and (_BASE_NUM.match(y) or _is_scalar(y)):
            return True  # 52_8 is only written 52_8 or, leniently, 52
        if ("=" in x) != ("=" in y) and "=" not in y and _is_scalar(y):
            return True
        if _is_multi(x) and not _is_multi(y) and _is_scalar(y):
            return True
    return False


def clearly_different(a: str, b: str) -> bool:
    """True only when evaluation proves the two normalised answers differ."""
    if kinds_differ(a, b):
        return True
    try:
        shape_a, va = _values(a)
        shape_b, vb = _values(b)
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
