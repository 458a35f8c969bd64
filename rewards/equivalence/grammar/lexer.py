"""Tokens of the closed answer grammar: every character of an answer must belong to one of
them, or the answer is unparsed (`Unrecognized` names the first character or command that does
not). Nothing is dropped or mapped silently: a Unicode digit form, a combining mark, a look-alike
separator, an unknown macro all stop the reading.

Number conventions (written down once): ASCII digits only; `.` is the decimal point; a comma
is a thousands separator only between a first group of 1-3 digits that does not start with 0
and groups of exactly three digits (`1,000`, `12,345.5`; also `14{,}916` and `5,\\!460`);
every other comma separates list items (`1,8`, `0,5`), and so does a semicolon (`1; 2`). A
number does not start with 0 unless it is 0 or a decimal below 1 (`007` is unparsed).
`0.\\overline{3}` is a repeating decimal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_LEN = 600  # longer box contents are no answer a model is asked for


class Unrecognized(ValueError):
    """The answer holds something the grammar does not know; str() is the reason."""

    def __init__(self, what: str):
        super().__init__(f"unrecognized: {what[:40]}")


@dataclass(frozen=True)
class Tok:
    kind: str  # num, word, cmd, op, text, ws
    text: str
    space: bool = False  # whitespace (or LaTeX spacing) right before it


_NUMBER = re.compile(r"[1-9]\d{0,2}(?:(?:,|\{,\}|,\\!)\d{3}(?![\d]))+(?:\.\d+)?"
                     r"|\d+\.(?=\\overline)|\d+(?:\.\d+)?|\.\d+", re.A)
_PLAIN = re.compile(r"\d+\.(?=\\overline)|\d+(?:\.\d+)?|\.\d+", re.A)
_DIGIT_RUN = re.compile(r"\d+(?:,\d+)+", re.A)
# the thousands grouping, also the lenient reader's (`rewards.equivalence.normalize`)
THOUSANDS = re.compile(r"[1-9]\d{0,2}(?:,\d{3})+", re.A)
_SPACING = re.compile(r"\\[,;:! ]|\\q?quad(?![A-Za-z])|~|\s+|\\left(?![A-Za-z])|\\right(?![A-Za-z])"
                      r"|\\[Bb]igg?[lr]?(?![A-Za-z])|\\displaystyle(?![A-Za-z])", re.A)
_TEXTCMD = re.compile(r"\\(?:text|textrm|mathrm|textbf|mathbf|mbox|textnormal)\s*\{([^{}\\]{0,80})\}")
_CMD = re.compile(r"\\[A-Za-z]+")
# two-character escapes read as one operator: \\% and \\$ are the characters, the others stay escaped
_ESCAPES = {"\\%": "%", "\\$": "$", "\\{": "\\{", "\\}": "\\}", "\\\\": "\\\\"}
_DEGREE = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\degree(?![A-Za-z])")
_OPS = set("+-*/^_()[]{},|=<>!%")
COMMANDS = {
    "frac", "dfrac", "tfrac", "sqrt", "pi", "infty", "cdot", "times", "div", "le", "leq", "ge",
    "geq", "lt", "gt", "in", "cup", "emptyset", "varnothing", "sin", "cos", "tan", "sec", "csc",
    "cot", "arcsin", "arccos", "arctan", "log", "ln", "exp", "begin", "end", "overline", "infinity",
    "alpha", "beta", "gamma", "delta", "theta", "phi", "lambda", "mu", "omega", "sigma", "tau",
    "rho", "epsilon", "varepsilon", "varphi", "psi", "eta", "xi", "zeta", "kappa", "nu", "chi",
    "boxed",  # only to name it: a box inside the answer is refused by the parser
}
_ENVS = {"pmatrix", "bmatrix", "matrix", "array"}


def tokens(s: str) -> list[Tok]:
    """The answer's tokens (spacing folded into `space` flags); raises Unrecognized."""
    if len(s) > MAX_LEN:
        raise Unrecognized(f"answer longer than {MAX_LEN} characters")
    # one convention per answer: if any comma between digits cannot be a thousands separator
    # (`27,54,108,135`), none is - the answer is a list
    lists = any(not THOUSANDS.fullmatch(m.group()) for m in _DIGIT_RUN.finditer(s))
    out: list[Tok] = []
    i, space, n = 0, False, len(s)
    while i < n:
        c = s[i]
        if not c.isascii():  # before any regex: \s and \d also match Unicode spaces and digits
            raise Unrecognized(f"U+{ord(c):04X} {c!r}")
        m = _SPACING.match(s, i)
        if m:
            if not m.group().startswith(("\\left", "\\right", "\\big", "\\Big", "\\display")):
                space = True
            i = m.end()
            continue
        m = _DEGREE.match(s, i)
        if m:
            out.append(Tok("op", "deg", space))
        elif (m := _TEXTCMD.match(s, i)):
            if not m.group(1).isascii():
                raise Unrecognized(f"non-ASCII text {m.group(1)!r}")
            out.append(Tok("text", m.group(1).strip(), space))
        elif c.isdigit() or (c == "." and i + 1 < n and s[i + 1].isdigit()):
            m = (_PLAIN if lists else _NUMBER).match(s, i)
            text = re.sub(r"\{,\}|,\\!|,", "", m.group())
            if len(text) > 1 and text[0] == "0" and text[1] != ".":
                raise Unrecognized(f"leading zero {m.group()!r}")
            out.append(Tok("num", text, space))
        elif c.isalpha():
            m = re.compile(r"[A-Za-z]+").match(s, i)
            out.append(Tok("word", m.group(), space))
        elif c == "\\":
            if s[i:i + 2] in _ESCAPES:
                out.append(Tok("op", _ESCAPES[s[i:i + 2]], space))
                i += 2
                space = False
                continue
            m = _CMD.match(s, i)
            if m is None:
                raise Unrecognized(s[i:i + 2])
            name = m.group()[1:]
            if name not in COMMANDS:
                raise Unrecognized(m.group())
            if name in ("begin", "end"):
                e = re.compile(r"\{([A-Za-z*]+)\}").match(s, m.end())
                if e is None or e.group(1) not in _ENVS:
                    raise Unrecognized(s[i:i + 20])
                out.append(Tok("cmd", name, space))
                i = e.end()
                space = False
                continue
            out.append(Tok("cmd", name, space))
        elif c == "&":
            out.append(Tok("op", "&", space))
            i += 1
            space = False
            continue
        elif c == "$" and s[i + 1:i + 2].isdigit() and not out:
            out.append(Tok("op", "$", space))
            i += 1
            space = False
            continue
        elif c in _OPS or c == ";":  # a semicolon separates list items like a comma (`1; 2`)
            out.append(Tok("op", "," if c == ";" else c, space))
            i += 1
            space = False
            continue
        else:
            raise Unrecognized(repr(c))
        i = m.end()
        space = False
    return out
