"""Predicates on the sides of an equality chain (lists of `chains.Tok`)."""

from __future__ import annotations

from rewards.claims.chains import Tok
from rewards.claims.latex_text import MIXED

COMPUTES = set("+-*/^!" + MIXED) | {"sqrt", "binom", "**"}


def computes(side: list[Tok]) -> bool:
    body = [t for t in side if t.kind != "unit"]
    body = body[1:] if body and body[0].text == "-" else body
    return any(t.text in COMPUTES or t.text == "%" and len(body) > 2 for t in body)


def readable(side: list[Tok]) -> bool:
    return any(t.kind != "unit" for t in side) and not any(t.kind in ("var", "junk") for t in side)


def symbolic(side: list[Tok]) -> bool:
    """An expression with variables and nothing unreadable (`x^2 + 2 x + 1`, `2 (a + b)`)."""
    return any(t.kind == "var" for t in side) and not any(t.kind == "junk" for t in side)


def symbolic_text(side: list[Tok]) -> str:
    """Side text with lowercase multi-letter math names split into letters (`xy` is x times
    y); `AB` (a segment), `a_1`, `A1` stay one name."""
    out = []
    for t in side:
        if t.kind == "unit":
            continue
        if t.kind == "var" and t.text.islower() and t.text.isalpha() and len(t.text) > 1:
            out.append(" ".join(t.text))
        else:
            out.append(t.text)
    return " ".join(out)


def operates(side: list[Tok]) -> bool:
    """More than one term: an operator, a function, or a product written by juxtaposition."""
    body = [t for t in side if t.kind != "unit"]
    return computes(side) or len(body) > 1


def variable_names(side: list[Tok]) -> set[str]:
    return set(symbolic_text([t for t in side if t.kind == "var"]).split())
