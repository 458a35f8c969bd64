"""Find the equality chains in a (rewritten) solution step: `3 days * 1 hour/day = 3 hours`.

Input is `rewards.claims.latex_text.rewrite(step)`. A *run* is a maximal stretch of expression tokens
(numbers, operators, parentheses, `pi`/`sqrt`/`binom`, variables, `§` junk) and relations
(`=`, `≈`). Words end a run unless they are
- units after a number, when an operator or relation follows within a few words
  (`3 days * 1 hour/day = 3 hours`: `days`, `hour/day` dropped; trailing `hours` dropped);
- labels in parentheses after a number (`10 (initially infected) * 6`);
- word operators between operands: `times`, `x`, `plus`, `minus`, `divided by`,
  `multiplied by`, `of` after a fraction or percentage (`1/3 of 18`, `20% of 24`), and
  `half of`, `twice`, `double`, `triple` before one;
- `approximately`/`about`/... right after `=` (the relation becomes `≈`).
A word glued to a number or next to an operator is a variable (`3.01B`, `ab + cd`), except a
glued unit (`5apples`, `12cm`). Every run with a relation becomes a `Chain` of sides.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rewards.claims.latex_text import JUNK, MIXED, VAR
from rewards.claims.tokens import Tok, tokenize

MAX_UNIT_WORDS = 3

_FUNCS = {"pi", "sqrt", "binom"}
_APPROX = {"approximately", "approx", "about", "around", "roughly", "nearly", "almost"}
_WORD_OPS = {"times": "*", "plus": "+", "minus": "-"}
_TWO_WORD_OPS = {("divided", "by"): "/", ("multiplied", "by"): "*"}
_PREFIX = {"half": "(1/2)*", "twice": "2*", "double": "2*", "triple": "3*", "thrice": "3*"}
_STOP = {"and", "or", "but", "so", "is", "are", "was", "were", "which", "that", "then", "to",
         "for", "from", "with", "than", "if", "when", "as", "since", "because", "by", "in",
         "on", "at", "we", "it", "this", "these", "there", "each", "also", "thus", "hence",
         "therefore", "giving", "gives", "get", "gets", "making", "leaving", "plus", "minus",
         "times", "of", "the", "a", "an", "be", "has", "have", "had", "will", "can", "would",
         "after", "before", "into", "out", "not", "more", "less", "left", "remaining", "total"}
_GLUED_UNITS = {"cm", "mm", "km", "kg", "mg", "ml", "mL", "ft", "oz", "lb", "lbs", "hr", "hrs",
                "min", "mins", "sec", "pm", "am", "mph", "yd"}
_ORDINALS = {"st", "nd", "rd", "th"}
_FUNCTION_NAMES = set("fghFGHPQpqLNSTE") | {"Var", "lcm", "gcd", "max", "min"}
_GATE_WORDS = {"times", "by", "than", "per", "over", "minus", "plus"}
_PART_WORDS = {"half", "third", "thirds", "quarter", "quarters", "fourth", "fourths", "fifth",
               "fifths", "tenth", "tenths", "twice", "double", "triple", "percent", "fraction",
               "portion", "part", "share", "one", "two", "three"}


@dataclass
class Chain:
    """A run with at least one relation: sides[i] rel[i] sides[i+1] ... as arith text."""

    sides: list[list[Tok]]
    rels: list[str]
    before: list[str] = field(default_factory=list)  # up to 4 words right before the run
    after: list[str] = field(default_factory=list)  # the words after it, to the sentence's end
    listed: bool = False  # `2/6, 2/8 = 1/3, 1/4`: an equality of lists, not of the numbers
    gated: bool = False  # a multiplicative word right before it: the first side is partial
    first: int = 0  # token index where the run starts
    end: int = 0  # token index just past it

    def units(self, i: int) -> set[str]:
        """Unit words written inside side i (`3 days * 1 hour/day`: days, hour, day)."""
        return {w for t in self.sides[i] if t.kind == "unit" for w in t.text.split()}

    def side_text(self, i: int) -> str:
        """Arith text of side i; a fraction written without spaces (`1/2`) is one number,
        so `1 1/2 / 1/2` is 1.5 / 0.5."""
        toks = [t for t in self.sides[i] if t.kind != "unit"]
        out, k = [], 0
        while k < len(toks):
            a = toks[k]
            if (k + 2 < len(toks) and a.kind == "num" and toks[k + 1].text == "/" and toks[k + 1].glued
                    and toks[k + 2].kind == "num" and toks[k + 2].glued and
                    (k + 3 == len(toks) or toks[k + 3].text not in "^!")):
                out.append(f"({a.text}/{toks[k + 2].text})")
                k += 3
            else:
                out.append(a.text)
                k += 1
        return " ".join(out)


class _Builder:
    """Walks the tokens once and collects the chains."""

    def __init__(self, toks: list[Tok]):
        self.t = [t for t in toks if t.kind != "skip"]
        self.chains: list[Chain] = []
        self.cur: list[Tok] | None = None
        self.depth = 0
        self.start = self.end = 0

    def sig(self, i: int) -> Tok | None:
        return self.t[i] if i < len(self.t) else None

    def last(self) -> Tok | None:
        return self.cur[-1] if self.cur else None

    def close(self) -> None:
        if self.cur and any(t.kind == "rel" for t in self.cur):
            self.chains.append(_to_chain(self.cur, self.t, self.start, self.end))
        self.cur, self.depth = None, 0

    def add(self, tok: Tok, i: int) -> None:
        if self.cur is None:
            self.cur, self.start = [], i
            prev = self.t[i - 1] if i else None
            glued_word = tok.glued and prev is not None and prev.kind == "word"
            if glued_word or tok.kind == "op" and tok.text in "+*/^%!)" + MIXED:
                self.cur.append(Tok("junk", JUNK, True))  # a binary operator missing its left side
        if tok.text == "(" and tok.kind == "op":
            self.depth += 1
            last = self.cur[-1] if self.cur else None
            if last is not None and last.kind == "var" and last.text in _FUNCTION_NAMES and \
                    (tok.glued or len(last.text) > 1):
                self.cur[-1] = Tok("junk", JUNK, last.glued)  # f(x), P(1): a function, not a product
        elif tok.text == ")" and tok.kind == "op":
            self.depth -= 1
        self.cur.append(tok)

    def build(self) -> list[Chain]:
        i = 0
        while i < len(self.t):
            self.end = i
            i = self.step(i)
        self.end = len(self.t)
        self.close()
        return self.chains

    def step(self, i: int) -> int:
        tok = self.t[i]
        k = tok.kind
        if k == "num":
            last = self.last()
            if last is not None and last.kind == "num" and last.text != "pi" and not tok.glued:
                if self._mixed(i):  # 2 1/2 -> (2 + 1/2)
                    whole = self.cur.pop()
                    for t in ("(", whole.text, "+", tok.text, "/", self.t[i + 2].text, ")"):
                        self.add(Tok("num" if t[0].isdigit() else "op", t, True), i)
                    return i + 3
                if self._thousands(i):  # $350 000: a space between groups of three digits
                    self.cur[-1] = Tok("num", last.text + tok.text, last.glued)
                    return i + 1
                self.close()
            self.add(tok, i)
            return i + 1
        last = self.last()
        if k == "op" and tok.text == "(" and not tok.glued and last is not None and last.kind == "num" \
                and last.text != "pi" and self._label_end(i):
            return self._label_end(i)  # 10 (initially infected) * 6: a label
        if k in ("op", "junk"):
            self.add(tok, i)
            return i + 1
        if k == "rel":
            self.add(tok, i)
            nxt = self.sig(i + 1)
            if tok.text == "=" and nxt is not None and nxt.kind == "word" and nxt.text.lower() in _APPROX:
                self.cur[-1] = Tok("rel", "≈", tok.glued)
                return i + 2 + (1 if self._is(i + 2, "punct", ".") else 0)
            return i + 1
        if k == "punct" and tok.text == "," and self.cur is not None and self.depth > 0:
            self.add(Tok("op", ",", True), i)
            return i + 1
        if k == "word":
            return self.word(i)
        self.close()
        return i + 1

    def _is(self, i: int, kind: str, text: str | None = None) -> bool:
        t = self.sig(i)
        return t is not None and t.kind == kind and (text is None or t.text == text)

    def _mixed(self, i: int) -> bool:
        """`2 1/2`: a whole number, a space, then a proper fraction."""
        if not (self._is(i + 1, "op", "/") and self._is(i + 2, "num")):
            return False
        try:
            return int(self.t[i].text) < int(self.t[i + 2].text)
        except ValueError:
            return False

    def _thousands(self, i: int) -> bool:
        prev, tok = self.t[i - 1], self.t[i]
        return (prev.kind == "num" and prev.text.isdigit() and len(prev.text) <= 3 and
                len(tok.text) == 3 and tok.text.isdigit() and not self._is(i + 1, "op", "/"))

    def operand_follows(self, i: int) -> bool:
        t = self.sig(i)
        return t is not None and (t.kind == "num" or (t.kind == "op" and t.text == "(")
                                  or (t.kind == "word" and t.text.lower() in _FUNCS))

    def operand_before(self) -> bool:
        last = self.last()
        return last is not None and (last.kind == "num" or last.text in (")", "%"))

    def word(self, i: int) -> int:
        tok = self.t[i]
        if tok.text.startswith(VAR):  # written in math mode
            self.add(Tok("var", tok.text[1:], tok.glued), i)
            return i + 1
        lw = tok.text.lower()
        if lw in _FUNCS:
            self.add(Tok("op" if lw != "pi" else "num", lw, tok.glued), i)
            return i + 1
        if self.operand_before() and self.operand_follows(i + 1):
            spaced_x = (lw == "x" and not tok.glued and not self.t[i + 1].glued  # 5 x 3, not 2x
                        and self.last().kind == "num" and self.t[i + 1].kind == "num")
            op = _WORD_OPS.get(lw) or ("*" if spaced_x else None)
            if lw == "of" and self._fraction_before():
                op = "*"
            if op:
                self.add(Tok("op", op, True), i)
                return i + 1
        pair = (lw, self.sig(i + 1).text.lower() if self._is(i + 1, "word") else "")
        if pair in _TWO_WORD_OPS and self.operand_before() and self.operand_follows(i + 2):
            self.add(Tok("op", _TWO_WORD_OPS[pair], True), i)
            return i + 2
        if lw in _PREFIX:
            j = i + 1 + (1 if self._is(i + 1, "word") and self.t[i + 1].text.lower() in ("of", "the") else 0)
            if self.operand_follows(j):
                if self.cur is not None and not self.last().kind == "op":
                    self.close()
                for piece in _PREFIX[lw]:
                    self.add(Tok("op" if not piece.isdigit() else "num", piece, True), i)
                return j
        return self.plain_word(i)

    def _fraction_before(self) -> bool:
        """`1/3 of`, `20% of`, `(1/2) of`: the operand before `of` is a fraction or percentage."""
        c = self.cur or []
        if c and c[-1].text in ("%", ")"):
            return True
        return len(c) >= 3 and c[-1].kind == "num" and c[-2].text == "/"

    def plain_word(self, i: int) -> int:
        tok = self.t[i]
        last = self.last()
        if (last is not None and last.text == "/" and len(self.cur) >= 2 and self.cur[-2].kind == "num"
                and len(tok.text) > 1 and tok.text.islower() and tok.text not in _STOP):
            self.cur.pop()  # $6.00/plate, 194/meter: a price per unit, the unit dropped
            self.cur.append(Tok("unit", tok.text.lower(), True))
            return i + 1
        if tok.glued and tok.text.lower() in _ORDINALS and self.cur is not None and self.operand_before():
            self.add(Tok("junk", JUNK, True), i)  # 1st - 5 = 6th: positions, not numbers
            return i + 1
        if self._is_variable(i):
            self.add(Tok("var", tok.text, tok.glued), i)
            return i + 1
        if self.cur is not None and self.operand_before():
            j = self._skip_units(i)
            if j is not None:
                return j
        self.close()
        return i + 1

    def _is_variable(self, i: int) -> bool:
        tok = self.t[i]
        prev, nxt = (self.t[i - 1] if i else None), self.sig(i + 1)
        if tok.text.startswith("txt"):
            return False  # a one-letter \text{} word: a unit
        glued_num = tok.glued and prev is not None and prev.kind == "num"
        if glued_num:  # 5apples, 12cm are units; 3.01B, 2ab, 5xyz are variables
            return not (len(tok.text) >= 4 or tok.text in _GLUED_UNITS)

        def near_op(t):
            return t is not None and (t.kind == "rel" or (t.kind == "op" and t.text != "%"))

        if "_" in tok.text or tok.text[-1].isdigit():
            return True  # a_3, A1: a subscripted name
        if len(tok.text) == 1 and tok.text not in "aAI":
            def beside(t):
                return t is not None and (t.kind == "num" or t.text.lower() in _FUNCS)

            return near_op(prev) or near_op(nxt) or beside(prev) or beside(nxt)
        if 2 <= len(tok.text) <= 4 and tok.text.isupper() and tok.text.isalpha():
            return True  # AB, QD, HP: segments and points
        if len(tok.text) == 1:  # a / A / I: an article or pronoun unless used as a variable
            return near_op(nxt) or (nxt is not None and nxt.text == "(" and nxt.glued)
        if tok.text.lower() in _STOP:
            return False
        after_operand = prev is not None and prev.kind == "num"
        return not after_operand and (near_op(prev) or near_op(nxt))

    def _skip_units(self, i: int) -> int | None:
        """Skip unit words / `(labels)` after a number when the expression goes on after them."""
        j, words = i, 0
        while j < len(self.t) and words <= MAX_UNIT_WORDS:
            t = self.t[j]
            if t.kind == "op" and t.text == "/" and self._is(j + 1, "word"):
                j += 1  # hour/day: a unit per unit
                t = self.t[j]
            elif t.kind == "word" and (t.text.startswith(VAR) or len(t.text) == 1 or "_" in t.text):
                break  # a variable, not a unit word
            if t.kind == "word" and not t.text.startswith(VAR) and t.text.lower() not in _STOP:
                words += 1
                j += 1
            elif t.kind == "op" and t.text == "(" and self._label_end(j) is not None:
                j = self._label_end(j)
            else:
                break
        t = self.sig(j)
        if t is None or words > MAX_UNIT_WORDS:
            return None
        goes_on = t.kind == "rel" or (t.kind == "op" and t.text in "+-*/)" and
                                      not (t.text == ")" and self.depth <= 0))
        if goes_on:
            self.cur.append(Tok("unit", " ".join(t.text.lower() for t in self.t[i:j] if t.kind == "word"), True))
        return j if goes_on else None

    def _label_end(self, j: int) -> int | None:
        """End of `(words)` after `(` at j: words (and numbers among them) and no operator."""
        after_number = j and self.t[j - 1].kind == "num" and self.t[j - 1].text != "pi"
        if not (self._is(j + 1, "word") or (after_number and self._is(j + 1, "num"))) or \
                self.t[j + 1].text.startswith(VAR):
            return None
        k, long_word = j + 1, False
        while k < len(self.t) and k - j <= 8 and self.t[k].kind in ("word", "num"):
            if self.t[k].text.startswith(VAR):
                return None
            long_word = long_word or (self.t[k].kind == "word" and len(self.t[k].text) >= 3)
            k += 1
        return k + 1 if long_word and self._is(k, "op", ")") else None


def _to_chain(run: list[Tok], toks: list[Tok], start: int, end: int) -> Chain:
    sides: list[list[Tok]] = [[]]
    rels: list[str] = []
    for t in run:
        if t.kind == "rel":
            rels.append(t.text)
            sides.append([])
        else:
            sides[-1].append(t)
    before = []
    k = start - 1
    while k >= 0 and len(before) < 4 and toks[k].kind == "word":
        before.insert(0, toks[k].text.lower())
        k -= 1
    after = []
    for t in toks[end:end + 40]:  # the words to the end of the sentence
        if t.kind == "punct" and t.text in ".?":
            break
        if t.kind == "word":
            after.append(t.text.lower())
    gated = bool(before) and (before[-1] in _GATE_WORDS or
                              before[-1] == "of" and len(before) > 1 and before[-2] in _PART_WORDS)

    def comma(k):
        return 0 <= k < len(toks) and toks[k].text == ","

    listed = comma(start - 1) and comma(end)
    if start >= 2 and toks[start - 1].kind == "word" and toks[start - 2].text not in "(=" and \
            (toks[start - 2].kind == "num" or toks[start - 2].text == ")"):
        gated = True  # 3 Y 2 = ...: a word between two numbers is an operator we cannot read
    return Chain(sides, rels, before, after, listed, gated, start, end)


def chains_and_tokens(rewritten: str) -> tuple[list[Chain], list[Tok]]:
    """The chains and the tokens their `first`/`end` indices refer to."""
    builder = _Builder(tokenize(rewritten))
    return builder.build(), builder.t
