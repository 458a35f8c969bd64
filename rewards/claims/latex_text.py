"""Rewrite the LaTeX and unicode math in a solution step into plain text the claim finder reads.

    rewrite(r"so \\(\\frac{3}{4}\\cdot 8 = 6\\) cups")  ->  "so  ((3)/(4))* 8 = 6  cups"

What comes out: arithmetic in `rewards.claims.arith` syntax (`((a)/(b))`, `sqrt(a)`, `binom(n,k)`,
`^(...)`, `pi`), `=` and `≈` as the only relations, `;` for every other relation or arrow
(`\\le`, `\\ne`, `\\Rightarrow`: they end a chain of equalities), words of `\\text{}` as words,
and `§` for anything we cannot evaluate (`\\cos`, `\\cancel`, `|x|`, `f'`, `\\pm`, `\\dots`,
subscripted numbers such as `52_8`). A `§` poisons the side of an equation it sits in, so
`16 = 13 - 12 \\cos C` is never read as `16 = 13 - 12`. A number written directly before a
fraction (`2\\frac{1}{2}`, a mixed number or a product) is joined by `⊞`, read both ways later.

Bounded: at most MAX_CHARS characters are read and groups nest at most MAX_DEPTH deep (deeper
groups become `§`); the work is linear in the text.
"""

from __future__ import annotations

import re

MAX_CHARS = 20_000
MAX_DEPTH = 12

JUNK = "§"
MIXED = "⊞"
VAR = "ⓥ"  # prefix of a letter written in math mode: a variable, never a unit word
_CMD = re.compile(r"\\([A-Za-z]+|.)", re.S)
_FRACS = {"frac", "dfrac", "tfrac", "cfrac"}
_BINOMS = {"binom", "dbinom", "tbinom"}
_TEXTS = {"text", "textbf", "textit", "textrm", "textnormal", "mbox", "mathrm", "textsf", "texttt",
          "emph", "operatorname"}
_KEEP = {"boxed": "", "fbox": "", "displaystyle": None, "left": None, "right": None,
         "big": None, "Big": None, "bigg": None, "Bigg": None, "bigl": None, "bigr": None,
         "Bigl": None, "Bigr": None, "biggl": None, "biggr": None,
         "limits": None, "nolimits": None, "middle": None}
_SIMPLE = {"times": "*", "cdot": "*", "ast": "*", "div": "/", "pi": " pi ", "approx": " ≈ ",
           "thickapprox": " ≈ ", "simeq": " ≈ ", "approxeq": " ≈ ", "circ": JUNK,
           "degree": " deg ", "%": "%", "$": "", ",": " ", "!": " ", ";": " ", ":": " ",
           " ": " ", "\\": " ; ", "&": JUNK, "#": JUNK, "_": "_"}
_BOUNDS = {"neq", "ne", "leq", "le", "geq", "ge", "lt", "gt", "leqslant", "geqslant", "equiv",
           "implies", "impliedby", "Rightarrow", "rightarrow", "Longrightarrow", "longrightarrow",
           "to", "iff", "Leftrightarrow", "leftrightarrow", "mapsto", "in", "notin", "subset",
           "subseteq", "supset", "cong", "sim", "propto", "ll", "gg", "therefore", "because",
           "Leftarrow", "leftarrow", "nleq", "ngeq", "neg", "land", "lor", "wedge", "vee", "cr",
           "newline", "hline", "item", "quad", "qquad"}
_UNICODE = str.maketrans({"×": "*", "·": "*", "⋅": "*", "∙": "*", "÷": "/", "−": "-", "–": "-",
                          "≠": ";", "≤": ";", "≥": ";", "⇒": ";", "→": ";", "⟹": ";",
                          "⟺": ";", "≡": ";", "<": ";", ">": ";", "∴": ";", "π": " pi ",
                          "²": "^2", "³": "^3", "°": " deg ", "…": JUNK, "|": JUNK, "'": JUNK,
                          "’": JUNK, "&": " ", "{": "{", "}": "}", "$": " ", "∞": JUNK, "±": JUNK,
                          "∓": JUNK, "[": JUNK, "]": JUNK, "\u00a0": " ", "≈": " ≈ ", "√": "√"})
_THOUSANDS = re.compile(r"(?<=\d)(?:\{,\}|,)(?:\\[!,])?(?=\d{3}(?!\d))")  # 2,\!598,\!960
_MATH = re.compile(r"\$\$[^$]{0,3000}\$\$|\\\((?:(?!\\\)).){0,3000}\\\)|\\\[(?:(?!\\\]).){0,3000}\\\]"
                   r"|\$[^$]{0,3000}\$", re.S)
_STAR = re.compile(r"(?<!\*)\*(?!\*)|\\ast\b|\\star\b")
_TEX_POWER_DIGIT = re.compile(r"\^(\d)(?=\d)")
_MATH_WORD = re.compile(r"\\(?:text|textbf|textit|textrm|mathrm|mbox|operatorname|textnormal|emph|"
                        r"texttt|textsf)\s*\{[^{}]*\}|\\[A-Za-z]+|[A-Za-z]+")
_DOTS = re.compile(r"\.\.\.+")
_SQRT_CHAR = re.compile(r"√\s*(\d+(?:\.\d+)?|[A-Za-z])")
_WORD = re.compile(r"[A-Za-z]+")
_APOSTROPHE = re.compile(r"(?<=[A-Za-z])['’](?=[a-z])")  # Sue's, don't: prose, not a prime
# `\\ &= ...`, `\\ &\quad + ...`: the next align line continues the chain
_ALIGN_BREAK = re.compile(r"\\\\\s*(?:&\s*(?:\\q?quad\s*)*(?=[=≈+\-]|\\approx|\\cdot|\\times)"
                          r"|(?=[=≈]|\\approx|[+\-=]\s*&))")
_ENV = re.compile(r"\\(?:begin|end)\{[a-zA-Z*]*\}")
_NTH_ROOT = re.compile(r"\\sqrt\s*\[([^\[\]{}]{1,20})\]")
_INLINE = re.compile(r"\\[()]")
_DISPLAY = re.compile(r"\\[\[\]]|\$\$")
_BULLET = re.compile(r"(?m)^[ \t]*(?:[-*•+][ \t]+|\d{1,2}[.)][ \t]+)")
_INVISIBLE = re.compile(r"\\(?:left|right)\s*\.")


def _arg(s: str, i: int) -> tuple[str | None, int]:
    """The argument starting at s[i] (after spaces): a {group}, a \\command or one character."""
    n = len(s)
    while i < n and s[i] == " ":
        i += 1
    if i >= n:
        return None, i
    if s[i] == "{":
        depth, j = 0, i
        while j < n:
            if s[j] == "\\":
                j += 2
                continue
            if s[j] == "{":
                depth += 1
            elif s[j] == "}":
                depth -= 1
                if depth == 0:
                    return s[i + 1:j], j + 1
            j += 1
        return None, n  # unbalanced
    if s[i] == "\\":
        m = _CMD.match(s, i)
        return m.group(0), m.end()
    return s[i], i + 1


def _words(content: str) -> str:
    """The words of a \\text{} group: units and labels, never variables (one letter -> `txtX`)."""
    words = _WORD.findall(content)
    if "%" in content:
        return " %"
    return " " + " ".join(w if len(w) > 1 else "txt" + w for w in words) + " " if words else " "


class _Rewriter:
    def __init__(self, text: str):
        self.s = text

    def run(self, s: str, depth: int) -> str:
        if depth > MAX_DEPTH:
            return JUNK
        out: list[str] = []
        i, n = 0, len(s)
        while i < n:
            c = s[i]
            if c == "\\":
                i = self.command(s, i, depth, out)
            elif c == "{":
                content, i = _arg(s, i)
                out.append(JUNK if content is None else "(" + self.run(content, depth + 1) + ")")
            elif c in "^_":
                i = self.script(s, i, depth, out)
            elif c == "}":
                out.append(JUNK)
                i += 1
            else:
                out.append(c)
                i += 1
        return "".join(out)

    def script(self, s: str, i: int, depth: int, out: list[str]) -> int:
        arg, j = _arg(s, i + 1)
        if arg is None:
            out.append(JUNK)
            return j
        if s[i] == "^":
            if arg.isdigit() and s[j - 1] == arg:  # 2^10 outside math means 2^{10}
                while j < len(s) and s[j].isdigit():
                    arg, j = arg + s[j], j + 1
            if arg in ("\\circ", "\\degree") or arg.strip() in ("\\circ", "{\\circ}"):
                out.append(" deg ")
            elif arg in ("\\prime", "*", "T", "\\top"):
                out.append(JUNK)
            else:
                out.append("^(" + self.run(arg, depth + 1) + ")")
            return j
        prev = out[-1][-1:] if out and out[-1] else ""
        label = "".join(ch for ch in arg if ch.isalnum())
        if prev.isalpha() and label and len(label) <= 6 and not arg.startswith("\\"):
            out.append("_" + label)  # a_{1} -> a_1, one name
        else:
            out.append(JUNK)  # 52_8 (a base), x_{n+1}: not plain arithmetic
        return j

    def command(self, s: str, i: int, depth: int, out: list[str]) -> int:
        m = _CMD.match(s, i)
        if m is None:  # a lone backslash at the end
            out.append(JUNK)
            return len(s)
        name, j = m.group(1), m.end()
        if name in _FRACS:
            a, j = _arg(s, j)
            b, j = _arg(s, j)
            if a is None or b is None:
                out.append(JUNK)
                return j
            before = "".join(out[-3:]).rstrip()
            glue = MIXED if before[-1:].isdigit() else ""  # 2\frac12: mixed number or product
            out.append(f"{glue}(({self.run(a, depth + 1)})/({self.run(b, depth + 1)}))")
        elif name == "sqrt":
            a, j = _arg(s, j)
            out.append(JUNK if a is None else f" sqrt({self.run(a, depth + 1)})")
        elif name == "rootof":  # \sqrt[n]{a}, renamed before the brackets became junk
            n, j = _arg(s, j)
            a, j = _arg(s, j)
            out.append(JUNK if a is None or n is None
                       else f"(({self.run(a, depth + 1)})^(1/({self.run(n, depth + 1)})))")
        elif name in _BINOMS:
            a, j = _arg(s, j)
            b, j = _arg(s, j)
            out.append(JUNK if a is None or b is None
                       else f" binom({self.run(a, depth + 1)},{self.run(b, depth + 1)})")
        elif name in _TEXTS:
            a, j = _arg(s, j)
            out.append(JUNK if a is None else _words(a))
        elif name in _KEEP:
            if _KEEP[name] == "":  # \boxed{x}: its content
                a, j = _arg(s, j)
                out.append(JUNK if a is None else "(" + self.run(a, depth + 1) + ")")
            else:
                out.append(" ")
        elif name in _SIMPLE:
            out.append(_SIMPLE[name])
        elif name in _BOUNDS:
            out.append(" ; ")
        elif name in ("(", ")", "[", "]"):
            out.append(" ")
        else:
            out.append(JUNK)  # \cos, \cancel, \lfloor, \{, \dots, \pm, \sum ...: not arithmetic
        return j


def _mark_word(w: re.Match) -> str:
    word = w.group(0)
    return word if word.startswith("\\") else VAR + word


def _math_region(m: re.Match) -> str:
    """Inside math: letters are variables (marked `VAR`, except command names and `\\text{}`
    words), a line break is a space, `x^24` is x^{2}4 as LaTeX reads it, and `*`, `\\ast`
    are a defined operation (`a*b = a^2 + b`), not a product. Dollar signs that are money in
    prose (`$5 and $3`: a digit first, no LaTeX inside) are not math."""
    region = m.group(0)
    single = region.startswith("$") and not region.startswith("$$")
    body = region[1:-1] if single else region
    if single and re.match(r"\s*\d", body) and not re.search(r"[\\^{}_]", body):
        return region  # $3.00 (dishwasher) + $: money
    if not (single and not re.search(r"[\\^{]", body)):
        region = _STAR.sub(JUNK, region)
    region = _TEX_POWER_DIGIT.sub(r"^{\1}", region).replace("\n", " ")
    return _MATH_WORD.sub(_mark_word, region)


def rewrite(text: str) -> str:
    """The step text with its math rewritten (see the module docstring)."""
    if not isinstance(text, str):
        return ""
    text = text[:MAX_CHARS]
    text = text.replace("\\&", JUNK).replace("\\#", JUNK)
    text = _MATH.sub(_math_region, text)
    text = _ALIGN_BREAK.sub(" ", text)
    text = _BULLET.sub(" ; ", text)
    text = _INLINE.sub(" ", text)
    text = _DISPLAY.sub(" ; ", text)
    text = _ENV.sub(" ; ", text)
    text = _INVISIBLE.sub(" ", text)
    text = _NTH_ROOT.sub(r"\\rootof{\1}", text)
    text = _APOSTROPHE.sub("", text)
    text = _THOUSANDS.sub("", text)
    text = _DOTS.sub(JUNK, text)
    text = text.translate(_UNICODE)
    text = _SQRT_CHAR.sub(r" sqrt(\1)", text)
    text = text.replace("√", JUNK)
    return _Rewriter(text).run(text, 0)
