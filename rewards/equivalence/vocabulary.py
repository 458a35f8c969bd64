"""The operations a lenient answer may use to state its value, and the rule for every other one.

An answer states a value with arithmetic, fractions, roots and powers, the elementary functions,
constants, sets, intervals, matrices, relations and layout: `VALUE_COMMANDS` and
`VALUE_FUNCTIONS` (an allowlist). Any other LaTeX command or function name - `\\max`, `\\min`,
`\\bmod`, `\\pmod`, `\\lceil`/`\\lfloor`, `\\gcd`, `\\operatorname{...}`, `\\binom`, `\\sum`,
a bare `max(...)` or `round(...)`, an unknown macro - is an operation the answer leaves
undone, often one that picks its value among candidates (`\\max(17, 18)`, `\\min(18, 40)`,
`18 \\bmod 100`, `\\lceil 17.5 \\rceil`). Such an answer is paid only when the gold uses the same
operations: `foreign(pred) == foreign(gold)` (symmetric, so `is_equiv` keeps not depending on
the order of its arguments). A gold written `\\lfloor \\frac{n}{2} \\rfloor` still matches the
same floor; a gold of `18` is never matched by a function of candidates that evaluates to 18.
"""

from __future__ import annotations

import re

VALUE_FUNCTIONS = frozenset({
    "sin", "cos", "tan", "sec", "csc", "cot", "sinh", "cosh", "tanh", "coth", "arcsin", "arccos",
    "arctan", "arcsec", "arccsc", "arccot", "log", "ln", "lg", "exp", "sqrt"})
VALUE_COMMANDS = VALUE_FUNCTIONS | frozenset({
    # numbers, fractions, roots, constants, arithmetic
    "frac", "dfrac", "tfrac", "cfrac", "pi", "infty", "infinity", "cdot", "times", "div", "circ",
    "degree", "overline",
    # relations, sets, intervals
    "le", "leq", "ge", "geq", "lt", "gt", "ne", "neq", "leqslant", "geqslant", "in", "cup", "cap",
    "emptyset", "varnothing", "mathbb", "lbrace", "rbrace", "lvert", "rvert", "vert", "mid", "setminus",
    # matrices, text and layout
    "begin", "end", "text", "textbf", "textrm", "textit", "textnormal", "textsf", "mathrm", "mathbf",
    "mathit", "mbox", "emph", "left", "right", "big", "Big", "bigg", "Bigg", "bigl", "bigr", "Bigl",
    "Bigr", "biggl", "biggr", "displaystyle", "limits", "quad", "qquad", "enspace", "thinspace",
    "dots", "ldots", "cdots", "prime", "angle", "triangle", "dagger", "boxed", "fbox",
    "pm",  # `a \\pm b` writes two values: a list, which never equals one value
    # names: Greek letters and decorations
    "alpha", "beta", "gamma", "delta", "epsilon", "varepsilon", "zeta", "eta", "theta", "vartheta",
    "iota", "kappa", "lambda", "mu", "nu", "xi", "omicron", "rho", "varrho", "sigma", "tau", "upsilon",
    "phi", "varphi", "chi", "psi", "omega", "Gamma", "Delta", "Theta", "Lambda", "Xi", "Pi", "Sigma",
    "Upsilon", "Phi", "Psi", "Omega", "hbar", "ell", "hat", "bar", "vec", "dot", "ddot", "tilde"})
_COMMAND = re.compile(r"\\([A-Za-z]+)")
# a letter run of 3+ called like a function (`max(`, `\text{round}(`); shorter runs are products
_CALL = re.compile(r"(?<![\\A-Za-z])([A-Za-z]{3,})\}?\s*(?:\\left\s*)?\(")


# real commands that are a value command plus one letter: the integral, the infimum, "not"
_NOT_GLUED = frozenset({"int", "inf", "neg"})


def _known(name: str) -> bool:
    """A value command, or one glued to a one-letter variable as space-stripped golds write
    them (`\\cosx`, `\\piG`, `\\cdoti`, `\\omegat`)."""
    return name in VALUE_COMMANDS or (name[:-1] in VALUE_COMMANDS and name not in _NOT_GLUED)


def foreign(s: str) -> frozenset[str]:
    """The commands and called function names of `s` outside the value vocabulary."""
    names = {m.group(1) for m in _COMMAND.finditer(s) if not _known(m.group(1))}
    names |= {m.group(1).lower() for m in _CALL.finditer(s)} - VALUE_FUNCTIONS
    if "\\\\" in s:  # a line break between values (`18 \\\\ 19`): outside a matrix, two answers
        names.add("\\\\")
    return frozenset(names)
