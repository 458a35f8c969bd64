"""A tiny exact arithmetic evaluator for step checks: + - * / ^ ** % and parentheses over
`fractions.Fraction`. It is a hand-written recursive-descent parser, never `eval`: anything
else (names, calls, attribute access) is a ParseError. Sizes are bounded (expression length,
nesting depth, exponent and result magnitude) so hostile text cannot hang or exhaust memory.
"""

from __future__ import annotations

import re
from fractions import Fraction

MAX_LEN = 500
MAX_DEPTH = 40
MAX_EXPONENT = 64
MAX_BITS = 4096

_TOKEN = re.compile(r"\s*(?:(\d+\.?\d*|\.\d+)|(\*\*|[-+*/^()%]))")


class ParseError(ValueError):
    """The text is not a plain arithmetic expression we can evaluate exactly."""


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ParseError(f"unexpected {text[pos:pos + 10]!r}")
        tokens.append(("num", m.group(1)) if m.group(1) else ("op", m.group(2)))
        pos = m.end()
    return tokens


class _Parser:
    def __init__(self, tokens):
        self.t, self.i, self.depth = tokens, 0, 0

    def peek(self):
        return self.t[self.i] if self.i < len(self.t) else ("end", "")

    def take(self, op=None):
        tok = self.peek()
        if op is not None and tok != ("op", op):
            raise ParseError(f"expected {op!r}")
        self.i += 1
        return tok

    def expr(self) -> Fraction:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise ParseError("too deep")
        val = self.term()
        while self.peek() in (("op", "+"), ("op", "-")):
            op = self.take()[1]
            rhs = self.term()
            val = val + rhs if op == "+" else val - rhs
        self.depth -= 1
        return val

    def term(self) -> Fraction:
        val = self.unary()
        while self.peek() in (("op", "*"), ("op", "/")):
            op = self.take()[1]
            rhs = self.unary()
            if op == "/" and rhs == 0:
                raise ParseError("division by zero")
            val = val * rhs if op == "*" else val / rhs
        return val

    def unary(self) -> Fraction:
        if self.peek() in (("op", "-"), ("op", "+")):
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise ParseError("too deep")
            sign = -1 if self.take()[1] == "-" else 1
            val = sign * self.unary()
            self.depth -= 1
            return val
        return self.power()

    def power(self) -> Fraction:
        base = self.atom()
        if self.peek() in (("op", "^"), ("op", "**")):
            self.take()
            exp = self.unary()
            if exp.denominator != 1 or abs(exp) > MAX_EXPONENT or (base == 0 and exp < 0):
                raise ParseError("exponent out of range")
            base = base ** int(exp)
        if max(base.numerator.bit_length(), base.denominator.bit_length()) > MAX_BITS:
            raise ParseError("number too large")
        return base

    def atom(self) -> Fraction:
        kind, text = self.take()
        if kind == "num":
            val = Fraction(text)
        elif (kind, text) == ("op", "("):
            val = self.expr()
            self.take(")")
        else:
            raise ParseError(f"unexpected {text!r}")
        if self.peek() == ("op", "%"):
            self.take()
            val = val / 100
        return val


def evaluate(text: str) -> Fraction:
    """Exact value of an arithmetic expression; raises ParseError on anything else."""
    if len(text) > MAX_LEN:
        raise ParseError("too long")
    tokens = _tokenize(text)
    if not tokens:
        raise ParseError("empty")
    p = _Parser(tokens)
    val = p.expr()
    if p.i != len(tokens):
        raise ParseError("trailing tokens")
    return val
