"""Tokens of a rewritten step (`rewards.claims.latex_text.rewrite`) for the chain finder.

Kinds: num, word, op (`+ - * / ^ ( ) % ! ** ⊞`), rel (`=`, `≈`), bound (`;`), punct, junk
(`§` and anything unreadable). `glued` says no space came before the token. A few spellings
are settled here, once: `5:55` and `1:2` (a time, a ratio) are junk, `x := 5` is `=`, `==` is
junk, `6-8-10` (numbers joined by bare hyphens) is a name, `0.\\overline{7}` is not 0, `3!!`
is a double factorial.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rewards.claims.latex_text import JUNK, MIXED, VAR

MAX_TOKENS = 20_000

_TOK = re.compile(r"(?P<num>\d+(?:\.\d+)?|\.\d+)"
                  r"|(?P<word>" + VAR + r"?[A-Za-z]+(?:_[A-Za-z0-9]+|\d+(?![\d.]))?)"
                  r"|(?P<op>\*\*|[-+*/^()%!" + MIXED + r"])|(?P<rel>[=≈])|(?P<space>[ \t]+)"
                  r"|(?P<other>.)", re.S)
_PUNCT = set(".,?\"“”‘’`")


@dataclass
class Tok:
    kind: str  # num word op rel punct junk bound
    text: str
    glued: bool  # no space before it


def tokenize(text: str) -> list[Tok]:
    toks: list[Tok] = []
    glued = True
    for m in _TOK.finditer(text):
        kind = m.lastgroup
        if kind == "space":
            glued = False
            continue
        s = m.group(0)
        if kind == "other":
            kind = ("bound" if s == ";" else "colon" if s == ":" else
                    "punct" if s in _PUNCT or s.isspace() else "junk")  # @ # & ~ _: junk
        toks.append(Tok(kind, s, glued))
        glued = True
        if len(toks) >= MAX_TOKENS:
            break
    _fix_colons_and_rels(toks)
    _hyphen_lists(toks)
    _repeating_decimals(toks)
    _double_factorials(toks)
    return toks


def _double_factorials(toks: list[Tok]) -> None:
    """`3!!` is a double factorial, not (3!)!."""
    for a, b in zip(toks, toks[1:]):
        if a.text == b.text == "!" and b.glued:
            a.kind = b.kind = "junk"
            a.text = b.text = JUNK


def _repeating_decimals(toks: list[Tok]) -> None:
    """`0.\\overline{7}` arrives as `0` `.` `§`: the number is not 0."""
    for a, b, c in zip(toks, toks[1:], toks[2:]):
        if a.kind == "num" and b.text == "." and b.glued and c.kind == "junk" and c.glued:
            a.kind, a.text = "junk", JUNK


def _hyphen_lists(toks: list[Tok]) -> None:
    """`6-8-10`, `2023-01-05`: numbers joined by bare hyphens are a name, not a subtraction."""
    for i in range(len(toks) - 4):
        w = toks[i:i + 5]
        if [t.kind for t in w] == ["num", "op", "num", "op", "num"] and w[1].text == w[3].text == "-" \
                and all(t.glued for t in w[1:]):
            for t in w:
                t.kind, t.text = "junk", JUNK


def _fix_colons_and_rels(toks: list[Tok]) -> None:
    for i, t in enumerate(toks):
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        prev = toks[i - 1] if i else None
        if t.kind == "colon":  # 5:55, 1:2 is a time or a ratio; "Step 1: 2+3" is punctuation
            ratio = prev and nxt and prev.kind == "num" and nxt.kind == "num" and nxt.glued
            t.kind = "junk" if ratio else "punct"
            if nxt and nxt.kind == "rel" and nxt.glued:  # x := 5
                t.kind = "skip"
        elif t.kind == "rel" and nxt is not None and nxt.kind == "rel" and nxt.glued:
            t.kind = nxt.kind = "junk"  # ==
