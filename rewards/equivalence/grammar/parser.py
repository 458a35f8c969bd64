"""Parse an answer completely in the closed grammar, or say what it does not know.

    parse_answer("\\frac{3}{4}")        # ('div', ('num', 3), ('num', 4))
    parse_answer("18 \\text{ thousand}") # raises Unrecognized('unrecognized: thousand')

What an answer may be (nothing else parses):
- numbers (conventions in `rewards.equivalence.grammar.lexer`), `\\pi`, `\\infty`, single-letter variables
  (with subscripts, `x_1`), Greek letters, runs of two or three letters as products of variables
  (`2xy`); a longer word only as a listed unit (`rewards.equivalence.grammar.units`) after a value, or a
  whole answer of words (`\\text{East}`), which is compared as text;
- `+ - * / ^`, `\\cdot \\times \\div`, implicit products (`2\\sqrt3`, `3x`) but never a number
  right after another value (`2 3`, `1\\,000` and `(2)3` are unparsed: a space between digits is
  not a product), `\\frac \\dfrac \\tfrac`, `\\sqrt[n]{}`, `|x|`, `!`, `%`/`\\%`/"percent",
  degrees (`^\\circ`) - at most one unit, percent or degree sign per value -,
  `\\sin ... \\arctan`, `\\ln`, `\\exp`, `\\log_b`, a number in a base (`52_8`),
  a mixed number (`2\\frac{1}{2}`), a repeating decimal (`0.\\overline{3}`);
- lists `a, b`, tuples `(a, b)`, intervals `[a, b)`, sets `\\{a, b\\}`, `\\emptyset`, unions
  `\\cup`, matrices (`pmatrix`/`bmatrix`), relations `=`, `<`, `>`, `\\le`, `\\ge`, and `x \\in S`.
Any other relation (`\\to`, `\\approx`, `\\Rightarrow`, `\\ne`...), macro, word or character
raises `Unrecognized` naming it. Recursive descent over at most 600 characters, nesting capped
at 40: linear time, no backtracking.
"""

from __future__ import annotations

import re
from fractions import Fraction

from rewards.equivalence.grammar.lexer import Tok, Unrecognized, tokens
from rewards.equivalence.grammar.units import unit_name

MAX_DEPTH = 40
_FUNCS = {"sin", "cos", "tan", "sec", "csc", "cot", "arcsin", "arccos", "arctan", "ln", "exp"}
_GREEK = {"alpha", "beta", "gamma", "delta", "theta", "phi", "lambda", "mu", "omega", "sigma", "tau",
          "rho", "epsilon", "varepsilon", "varphi", "psi", "eta", "xi", "zeta", "kappa", "nu", "chi"}
_RELS = {"=": "=", "<": "<", ">": ">", "le": "le", "leq": "le", "ge": "ge", "geq": "ge", "lt": "<", "gt": ">"}
# short letter runs that are English, not products of variables
_STOPWORDS = {"or", "and", "not", "is", "no", "the", "of", "to", "if", "are", "was", "any", "all",
              "but", "nor", "yes", "so", "be", "it", "as", "at", "by", "an", "on", "we", "get", "has",
              "had", "its", "one", "two", "six", "ten", "for", "per", "off", "let", "say", "now", "too",
              "may", "can", "set", "out", "sum", "max", "min", "mod", "gcd", "lcm", "det", "lim", "log",
              "sin", "cos", "tan", "sec", "csc", "cot", "ln", "exp", "pi", "e", "inf", "nan", "hence"}
_TEXT_ANSWER = re.compile(r"(?:\\text(?:bf|rm)?\{\s*)?([A-Za-z][A-Za-z' -]*[A-Za-z]|[A-Za-z]{2,})(?:\s*\})?\.?")
_CHOICE = re.compile(r"\(?([A-E])\)?")
_MARKED = ("unit", "pct", "deg")  # a value carries at most one unit, percent or degree sign


def parse_answer(s: str):
    """The answer's syntax tree (tuples, see module docstring); raises Unrecognized."""
    s = s.strip()
    while s.startswith("$") and s.endswith("$") and len(s) > 1:
        s = s[1:-1].strip()
    s = s[:-1].rstrip() if s.endswith(".") and not s[-2:-1].isdigit() else s
    if not s:
        raise Unrecognized("empty answer")
    m = _TEXT_ANSWER.fullmatch(s)
    if m and not unit_name(m.group(1), True) and any(len(w) > 3 or w.lower() not in _STOPWORDS
                                                     for w in re.findall(r"[A-Za-z]{2,}", m.group(1))) \
            and len(re.findall(r"[A-Za-z]{2,}", m.group(1))[0]) > 3:
        return ("text", re.sub(r"[^a-z]", "", m.group(1).lower()))
    p = _Parser(tokens(s))
    node = p.top()
    if p.i < len(p.t):
        raise Unrecognized(p.t[p.i].text)
    return node


class _Parser:
    def __init__(self, toks: list[Tok]):
        self.t = toks
        self.i = 0
        self.depth = 0

    # -- helpers --
    def peek(self, k: int = 0) -> Tok | None:
        j = self.i + k
        return self.t[j] if j < len(self.t) else None

    def at(self, kind: str, *texts: str) -> bool:
        t = self.peek()
        return t is not None and t.kind == kind and (not texts or t.text in texts)

    def take(self) -> Tok:
        t = self.peek()
        if t is None:
            raise Unrecognized("end of answer")
        self.i += 1
        return t

    def expect(self, kind: str, text: str) -> None:
        t = self.take()
        if t.kind != kind or t.text != text:
            raise Unrecognized(t.text)

    def enter(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise Unrecognized("nesting deeper than 40")

    # -- grammar --
    def top(self):
        items = [self.item()]
        while self.at("op", ","):
            self.take()
            items.append(self.item())
        return items[0] if len(items) == 1 else ("list", tuple(items))

    def item(self):
        parts = [self.rel()]
        while self.at("cmd", "cup"):
            self.take()
            parts.append(self.rel())
        return parts[0] if len(parts) == 1 else ("union", tuple(parts))

    def relop(self) -> str | None:
        t = self.peek()
        if t is None:
            return None
        if t.kind == "op" and t.text in "<>" and self.peek(1) is not None and self.peek(1).text == "=" \
                and not self.peek(1).space:
            self.take()
            return "le" if t.text == "<" else "ge"
        if (t.kind == "op" and t.text in ("=", "<", ">")) or (t.kind == "cmd" and t.text in _RELS):
            return _RELS[t.text]
        return None

    def rel(self):
        first = self.expr()
        if self.at("cmd", "in"):
            self.take()
            return ("in", first, self.item())
        parts, ops = [first], []
        while (op := self.relop()) is not None:
            self.take()
            ops.append(op)
            parts.append(self.expr())
        return first if not ops else ("rel", tuple(ops), tuple(parts))

    def expr(self):
        self.enter()
        sign = None
        if self.at("op", "+", "-"):
            sign = self.take().text
        terms = [self.term()]
        if sign == "-":
            terms[0] = ("neg", terms[0])
        while self.at("op", "+", "-"):
            op = self.take().text
            t = self.term()
            terms.append(("neg", t) if op == "-" else t)
        self.depth -= 1
        return terms[0] if len(terms) == 1 else ("add", tuple(terms))

    def starts_atom(self) -> bool:
        t = self.peek()
        if t is None:
            return False
        if t.kind in ("num", "word", "text"):
            return True
        if t.kind == "cmd":
            return t.text in _FUNCS or t.text in _GREEK or t.text in (
                "frac", "dfrac", "tfrac", "sqrt", "pi", "infty", "infinity", "log", "begin", "boxed")
        return t.kind == "op" and t.text in ("(", "[", "\\{", "{", "$")

    def term(self):
        node = self.power()
        while True:
            if self.at("op", "*") or self.at("cmd", "cdot", "times"):
                self.take()
                node = ("mul", (node, self.power()))
            elif self.at("op", "/") or self.at("cmd", "div"):
                self.take()
                node = ("div", node, self.power())
            elif self.starts_atom() and not self._unit_next():
                if self.at("num") or (self.at("op", "$")):
                    raise Unrecognized(f"number after a value: {self.peek().text}")
                node = ("mul", (node, self.power()))
            else:
                return node

    def power(self):
        base = self.postfix(self.atom())
        if base[0] == "sym" and self.at("op", "(") and not self.peek().space:
            self.take()  # f(x): a function of named variables, or a product; kept as written
            base = self.postfix(("call", base[1], tuple(self._items())))
            self.expect("op", ")")
        if self.at("op", "^"):
            self.take()
            base = self.postfix(("pow", base, self.exponent()))
        return base

    def exponent(self):
        t = self.peek()
        if t is not None and t.kind == "op" and t.text == "{":
            return self.group()
        if t is not None and t.kind == "num":
            if len(t.text) > 1:
                raise Unrecognized(f"exponent without braces: ^{t.text}")
            self.take()
            return ("num", Fraction(t.text))
        if t is not None and t.kind == "word" and len(t.text) == 1:
            self.take()
            return ("sym", t.text)
        if t is not None and t.kind == "cmd" and t.text in ("pi",) | _GREEK:
            return self.atom()
        raise Unrecognized("^" + (t.text if t else ""))

    def _unit_next(self) -> bool:
        t = self.peek()
        if t is None:
            return False
        if t.kind == "text":
            return unit_name(t.text, True) is not None or t.text.lower() == "percent"
        return t.kind == "word" and len(t.text) > 1 and (unit_name(t.text, False) is not None or
                                                         t.text.lower() == "percent")

    def postfix(self, node):
        while True:
            if node[0] in _MARKED and (self.at("op", "%", "deg") or self._unit_next()):
                raise Unrecognized(f"second unit: {self.peek().text}")  # `5\\%\\%`, `{5 cm} inches`
            if node[0] in ("rel", "in") and (self.at("op", "%", "deg") or self._unit_next()):
                raise Unrecognized(f"unit on a relation: {self.peek().text}")  # `{g(x) = 2} cm` hides the name
            if self.at("op", "!"):
                self.take()
                node = ("fact", node)
            elif self.at("op", "%"):
                self.take()
                node = ("pct", node)
            elif self.at("op", "deg"):
                self.take()
                node = ("deg", node)
            elif self._unit_next():
                t = self.take()
                name = unit_name(t.text, t.kind == "text")
                if name is None:  # "percent"
                    node = ("pct", node)
                    continue
                if self.at("op", "^") and self.peek(1) is not None and self.peek(1).text in ("2", "3"):
                    self.take()
                    name += "^" + self.take().text
                node = ("unit", node, name)
            else:
                return node

    def group(self):
        self.expect("op", "{")
        node = self.top()
        self.expect("op", "}")
        return node

    def arg(self):
        """One argument of \\frac / \\sqrt: a {group}, or one digit / letter / command."""
        t = self.peek()
        if t is None:
            raise Unrecognized("end of answer")
        if t.kind == "op" and t.text == "{":
            return self.group()
        if t.kind == "num" and re.fullmatch(r"\d+", t.text):
            if len(t.text) > 1:
                self.t[self.i] = Tok("num", t.text[1:])
            else:
                self.i += 1
            return ("num", Fraction(t.text[0]))
        if t.kind == "word":
            if len(t.text) > 1:
                self.t[self.i] = Tok("word", t.text[1:])
            else:
                self.i += 1
            return ("sym", t.text[0])
        if t.kind == "cmd" and t.text in ("pi",) | _GREEK:
            return self.atom()
        raise Unrecognized(t.text)

    def func_arg(self):
        if self.at("op", "("):
            self.take()
            node = self.top()
            self.expect("op", ")")
            return node
        if self.at("op", "{"):
            return self.group()
        return self.power()

    def atom(self):
        t = self.take()
        self.enter()
        try:
            return self._atom(t)
        finally:
            self.depth -= 1

    def _atom(self, t: Tok):
        if t.kind == "num":
            value = Fraction(t.text.rstrip(".") or "0")
            if self.at("cmd", "overline") and not self.peek().space and "." in t.text:
                self.take()
                self.expect("op", "{")
                rep = self.take()
                if rep.kind != "num" or not rep.text.isdigit():
                    raise Unrecognized("\\overline")
                self.expect("op", "}")
                decimals = len(t.text.split(".")[1])
                value += Fraction(int(rep.text), (10 ** len(rep.text) - 1) * 10 ** decimals)
                return ("num", value)
            if self.at("cmd", "frac", "dfrac", "tfrac") and value.denominator == 1:
                self.take()
                a, b = self.arg(), self.arg()
                if a[0] != "num" or b[0] != "num" or b[1] == 0:
                    raise Unrecognized("mixed number")
                return ("num", value + a[1] / b[1])
            if self.at("op", "_") and value.denominator == 1:
                self.take()
                base = self.take() if not self.at("op", "{") else None
                if base is None:
                    self.take()
                    base = self.take()
                    self.expect("op", "}")
                if base.kind != "num":
                    raise Unrecognized("_" + base.text)
                return ("based", t.text, base.text)
            return ("num", value)
        if t.kind == "word":
            return self._word(t.text)
        if t.kind == "text":
            m = _CHOICE.fullmatch(t.text)
            if m:
                return ("sym", m.group(1))
            raise Unrecognized(t.text)
        if t.kind == "cmd":
            return self._command(t.text)
        if t.kind == "op":
            if t.text in ("(", "["):
                return self._bracketed(t.text)
            if t.text == "\\{":
                items = [] if self.at("op", "\\}") else list(self._items())
                self.expect("op", "\\}")
                return ("set", tuple(items))
            if t.text == "{":
                node = self.top()
                self.expect("op", "}")
                return node
            if t.text == "|":
                node = self.expr()
                self.expect("op", "|")
                return ("abs", node)
            if t.text == "$":
                if not self.at("num"):
                    raise Unrecognized("\\$")
                return ("unit", self.postfix(self._atom(self.take())), "dollar")
        raise Unrecognized(t.text)

    def _items(self):
        items = [self.item()]
        while self.at("op", ","):
            self.take()
            items.append(self.item())
        return items

    def _bracketed(self, opener: str):
        items = self._items()
        close = self.take()
        if close.kind != "op" or close.text not in (")", "]"):
            raise Unrecognized(close.text)
        if len(items) == 2 and (opener == "[" or close.text == "]"):
            return ("interval", opener == "[", items[0], items[1], close.text == "]")
        if opener == "[" or close.text == "]":
            raise Unrecognized(opener + "..." + close.text)
        return items[0] if len(items) == 1 else ("tuple", tuple(items))

    def _word(self, w: str):
        if len(w) == 1:
            name = w
            if self.at("op", "_"):
                self.take()
                sub = self.take()
                if sub.kind == "op" and sub.text == "{":
                    sub = self.take()
                    self.expect("op", "}")
                if sub.kind not in ("num", "word") or len(sub.text) > 3:
                    raise Unrecognized("_" + sub.text)
                name = f"{w}_{{{sub.text}}}"
            return ("sym", name)
        if len(w) > 3 or w.lower() in _STOPWORDS:
            raise Unrecognized(w)
        return ("mul", tuple(("sym", c) for c in w))

    def _command(self, name: str):
        if name == "pi":
            return ("const", "pi")
        if name in ("infty", "infinity"):
            return ("const", "oo")
        if name in _GREEK:
            return ("sym", "\\" + name)
        if name in ("emptyset", "varnothing"):
            return ("set", ())
        if name in ("frac", "dfrac", "tfrac"):
            return ("div", self.arg(), self.arg())
        if name == "sqrt":
            index = None
            if self.at("op", "["):
                self.take()
                index = self.expr()
                self.expect("op", "]")
            return ("sqrt", self.arg(), index)
        if name in _FUNCS:
            exp = None
            if self.at("op", "^"):
                self.take()
                exp = self.exponent()
            node = ("func", name, self.func_arg())
            return node if exp is None else ("pow", node, exp)
        if name == "log":
            base = None
            if self.at("op", "_"):
                self.take()
                base = self.arg()
            return ("log", base, self.func_arg())
        if name == "begin":
            return self._matrix()
        if name == "boxed":
            raise Unrecognized("\\boxed inside the answer")
        raise Unrecognized("\\" + name)

    def _matrix(self):
        rows, row = [], [self.expr()]
        while True:
            t = self.take()
            if t.kind == "op" and t.text == "&":
                row.append(self.expr())
            elif t.kind == "op" and t.text == "\\\\":
                rows.append(tuple(row))
                if self.at("cmd", "end"):
                    self.take()
                    break
                row = [self.expr()]
            elif t.kind == "cmd" and t.text == "end":
                rows.append(tuple(row))
                break
            else:
                raise Unrecognized(t.text)
        if len({len(r) for r in rows}) != 1:
            raise Unrecognized("ragged matrix")
        return ("matrix", tuple(rows))
