"""A small bounded evaluator for the claims in solution steps.

Grammar (a hand-written recursive-descent parser, never `eval`):

    expr    := term (('+' | '-') term)*
    term    := unary (('*' | '/') unary | implicit)*     implicit: `2(3)`, `(1.5)^2(6)`
    unary   := ('-' | '+') unary | power
    power   := postfix ('^' | '**') unary                (right associative)
    postfix := atom ('%' | '!')*
    atom    := number [power] | '(' expr ')' | 'pi' | sqrt(expr) | binom(expr, expr) | variable

A number directly followed by a name is a coefficient and binds first (`4sqrt(3) / 6sqrt(3)`
is 2/3, `2pi^2` is 2 pi^2).

Values are exact `Fraction`s while the arithmetic stays rational, and floats once something
irrational enters (`sqrt(2)`, `pi`, a fractional power). Variables are single letters (or a
letter with a `_` subscript) looked up in `env`; without one they are a ParseError, as is
anything else (calls, attribute access). Sizes are bounded (expression length, nesting depth,
exponent, factorial argument, result magnitude) so hostile text cannot hang or exhaust memory.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Mapping, Union

MAX_LEN = 500
MAX_DEPTH = 40
MAX_EXPONENT = 64
MAX_FACTORIAL = 30
MAX_BINOM = 200
MAX_BITS = 4096

Value = Union[Fraction, float]

_TOKEN = re.compile(r"\s*(?:(\d+\.?\d*|\.\d+)|(\*\*|[-+*/^()%!,])|([A-Za-z]+(?:_[A-Za-z0-9]+)?))")
_FUNCS = ("sqrt", "binom")


class ParseError(ValueError):
    """The text is not an expression we can evaluate."""


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ParseError(f"unexpected {text[pos:pos + 10]!r}")
        if m.group(1):
            tokens.append(("num", m.group(1)))
        elif m.group(2):
            tokens.append(("op", m.group(2)))
        else:
            tokens.append(("name", m.group(3)))
        pos = m.end()
    return tokens


def _check_size(val: Value) -> Value:
    if isinstance(val, Fraction):
        if max(val.numerator.bit_length(), val.denominator.bit_length()) > MAX_BITS:
            raise ParseError("number too large")
    elif not math.isfinite(val) or abs(val) > 1e300:
        raise ParseError("number too large")
    return val


def _power(base: Value, exp: Value) -> Value:
    if isinstance(exp, Fraction) and exp.denominator == 1:
        if abs(exp) > MAX_EXPONENT or (base == 0 and exp < 0):
            raise ParseError("exponent out of range")
        return _check_size(base ** int(exp))
    if base < 0 or abs(float(exp)) > MAX_EXPONENT or (base == 0 and exp < 0):
        raise ParseError("power out of range")  # a complex value, or too big
    exact = _exact_root(base, exp)
    return exact if exact is not None else _check_size(float(base) ** float(exp))


def _exact_root(base: Value, exp: Value) -> Fraction | None:
    """base ** exp exactly when exp = p/q and base is a perfect q-th power (sqrt(9/4) = 3/2)."""
    if not (isinstance(base, Fraction) and isinstance(exp, Fraction)) or exp.denominator > 12:
        return None
    q = exp.denominator
    roots = []
    for part in (base.numerator, base.denominator):
        if part.bit_length() > 256:
            return None
        r = round(part ** (1.0 / q))
        hit = next((c for c in (r - 1, r, r + 1) if c >= 0 and c ** q == part), None)
        if hit is None:
            return None
        roots.append(hit)
    return _power(Fraction(roots[0], roots[1]), Fraction(exp.numerator))  # type: ignore[return-value]


class _Parser:
    def __init__(self, tokens, env: Mapping[str, Value]):
        self.t, self.i, self.depth, self.env = tokens, 0, 0, env

    def peek(self):
        return self.t[self.i] if self.i < len(self.t) else ("end", "")

    def take(self, op=None):
        tok = self.peek()
        if op is not None and tok != ("op", op):
            raise ParseError(f"expected {op!r}")
        self.i += 1
        return tok

    def nest(self, delta: int) -> None:
        self.depth += delta
        if self.depth > MAX_DEPTH:
            raise ParseError("too deep")

    def expr(self) -> Value:
        self.nest(1)
        val = self.term()
        while self.peek() in (("op", "+"), ("op", "-")):
            op = self.take()[1]
            rhs = self.term()
            val = _check_size(val + rhs if op == "+" else val - rhs)
        self.nest(-1)
        return val

    def _implicit(self, prev) -> bool:
        """Juxtaposition multiplies: `2(3)`, `2pi`, `)(`, `)2`, but never `2 3` (a mixed number?)."""
        kind, text = self.peek()
        if kind == "name" or (kind, text) == ("op", "("):
            return True
        return kind == "num" and prev == ("op", ")")

    def term(self) -> Value:
        val = self.unary()
        while True:
            tok = self.peek()
            if tok in (("op", "*"), ("op", "/")):
                op = self.take()[1]
                rhs = self.unary()
            elif self._implicit(self.t[self.i - 1]):
                op, rhs = "*", self.power()
            else:
                return val
            if op == "/" and rhs == 0:
                raise ParseError("division by zero")
            val = _check_size(val * rhs if op == "*" else val / rhs)

    def unary(self) -> Value:
        if self.peek() in (("op", "-"), ("op", "+")):
            self.nest(1)
            sign = -1 if self.take()[1] == "-" else 1
            val = sign * self.unary()
            self.nest(-1)
            return val
        return self.power()

    def power(self) -> Value:
        base = self.postfix()
        if self.peek() in (("op", "^"), ("op", "**")):
            self.take()
            self.nest(1)
            base = _power(base, self.unary())
            self.nest(-1)
        return base

    def postfix(self) -> Value:
        val = self.atom()
        while self.peek() in (("op", "%"), ("op", "!")):
            if self.take()[1] == "%":
                val = val / 100
            elif isinstance(val, Fraction) and val.denominator == 1 and 0 <= val <= MAX_FACTORIAL:
                val = Fraction(math.factorial(int(val)))
            else:
                raise ParseError("factorial of a non-integer or a large number")
        return val

    def atom(self) -> Value:
        kind, text = self.take()
        if kind == "num":
            if self.peek()[0] == "name":  # a coefficient binds first: 4sqrt(3) / 6sqrt(3)
                return Fraction(text) * self.power()
            return Fraction(text)
        if (kind, text) == ("op", "("):
            val = self.expr()
            self.take(")")
            return val
        if kind == "name":
            return self.name(text)
        raise ParseError(f"unexpected {text!r}")

    def name(self, text: str) -> Value:
        if text == "pi":
            return math.pi
        if text in _FUNCS:
            self.take("(")
            args = [self.expr()]
            while self.peek() == ("op", ","):
                self.take()
                args.append(self.expr())
            self.take(")")
            return _call(text, args)
        if text in self.env:
            return self.env[text]
        raise ParseError(f"unknown name {text!r}")


def _call(func: str, args: list[Value]) -> Value:
    if func == "sqrt" and len(args) == 1:
        return _power(args[0], Fraction(1, 2))
    if func == "binom" and len(args) == 2:
        n, k = args
        if not all(isinstance(v, Fraction) and v.denominator == 1 for v in (n, k)):
            raise ParseError("binom of non-integers")
        if not 0 <= n <= MAX_BINOM:
            raise ParseError("binom out of range")
        return Fraction(math.comb(int(n), int(k))) if 0 <= k <= n else Fraction(0)
    raise ParseError(f"bad call {func}")


def evaluate(text: str, env: Mapping[str, Value] | None = None) -> Value:
    """Value of an expression (exact Fraction where possible); raises ParseError on anything else."""
    if len(text) > MAX_LEN:
        raise ParseError("too long")
    tokens = _tokenize(text)
    if not tokens:
        raise ParseError("empty")
    p = _Parser(tokens, env or {})
    try:
        val = p.expr()
    except (ZeroDivisionError, OverflowError, ValueError) as e:
        if isinstance(e, ParseError):
            raise
        raise ParseError(str(e)) from None
    if p.i != len(tokens):
        raise ParseError("trailing tokens")
    return val


def variables(text: str) -> set[str]:
    """Names in an expression that are not functions or constants (its free variables)."""
    try:
        tokens = _tokenize(text)
    except ParseError:
        return set()
    return {t for kind, t in tokens if kind == "name" and t not in _FUNCS and t != "pi"}
