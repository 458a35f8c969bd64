"""Check that an equation follows from the one before it (one variable, polynomial).

    "x^2 - 3x = 1. Factoring, we have (x - 1)(x - 3) = 0."   -> refuted
    "Solving 2x + 3 = 7, we get x = 2."                       -> holds (2 is a root)

Two consecutive equations in the same single variable, joined by words that say the second
comes from the first ("so", "we get", "simplifying", "factoring", an arrow), must share a
root: any step a solver takes (moving terms, scaling, expanding, factoring, squaring,
multiplying by a factor, solving) keeps at least one root, while a slip (a wrong factoring,
a sign, a dropped term) almost never does. Each equation lhs = rhs becomes the polynomial
lhs - rhs, recovered exactly by interpolation (Fractions) and confirmed at an extra point;
"no common root" is gcd(p, q) = 1. The solution `x = 2` of the next equation is the same test
(substitution). Rational functions, irrational coefficients and degrees over MAX_DEGREE are
left alone.
"""

from __future__ import annotations

from fractions import Fraction

from rewards.claims.arith import ParseError, evaluate

MAX_DEGREE = 8
Poly = list[Fraction]  # coefficients, constant term first


def polynomial(lhs: str, rhs: str, var: str | tuple[str, ...]) -> Poly | None:
    """Coefficients of lhs - rhs as a polynomial in `var`, None if it is not one (or too big).
    Several variables: the polynomial along a fixed generic line through them (a
    polynomial in several variables is one along every line; a fraction with a variable
    below the bar almost never is)."""
    names = (var,) if isinstance(var, str) else tuple(var)
    line = [(Fraction(3 + 2 * k, 7 + k), Fraction(5 + k, 11 + 3 * k)) for k in range(len(names))]
    xs = [Fraction(k) for k in range(1, MAX_DEGREE + 3)]
    ys = []
    for x in xs:
        env = {n: (x if len(names) == 1 else a + b * x) for n, (a, b) in zip(names, line)}
        try:
            a, b = evaluate(lhs, env), evaluate(rhs, env)
        except ParseError:
            return None
        if not (isinstance(a, Fraction) and isinstance(b, Fraction)):
            return None
        ys.append(a - b)
    coeffs = _interpolate(xs[:-1], ys[:-1])
    if _eval(coeffs, xs[-1]) != ys[-1]:
        return None  # not a polynomial of degree <= MAX_DEGREE
    while coeffs and coeffs[-1] == 0:
        coeffs.pop()
    return coeffs


def _eval(p: Poly, x: Fraction) -> Fraction:
    out = Fraction(0)
    for c in reversed(p):
        out = out * x + c
    return out


def _interpolate(xs: list[Fraction], ys: list[Fraction]) -> Poly:
    """Newton divided differences, returned in the monomial basis."""
    n = len(xs)
    div = list(ys)
    for j in range(1, n):
        for i in range(n - 1, j - 1, -1):
            div[i] = (div[i] - div[i - 1]) / (xs[i] - xs[i - j])
    return _newton_to_monomial(xs, div)


def _newton_to_monomial(xs: list[Fraction], div: list[Fraction]) -> Poly:
    p: Poly = [div[-1]]
    for k in range(len(xs) - 2, -1, -1):
        # p <- p * (x - xs[k]) + div[k]
        q = [Fraction(0)] * (len(p) + 1)
        for i, c in enumerate(p):
            q[i + 1] += c
            q[i] -= c * xs[k]
        q[0] += div[k]
        p = q
    return p


def _rem(a: Poly, b: Poly) -> Poly:
    a = list(a)
    while len(a) >= len(b) and a:
        factor = a[-1] / b[-1]
        shift = len(a) - len(b)
        for i, c in enumerate(b):
            a[i + shift] -= factor * c
        a.pop()
        while a and a[-1] == 0:
            a.pop()
    return a


def common_root(p: Poly, q: Poly) -> bool:
    """Do two non-zero polynomials share a (complex) root? (gcd of degree >= 1)"""
    a, b = p, q
    while b:
        a, b = b, _rem(a, b)
    return len(a) >= 2


def follows(first: tuple[str, str], second: tuple[str, str], var: str) -> bool | None:
    """False when equation `second` shares no root with `first` (it cannot come from it),
    True when it does, None when either is not a usable polynomial equation in `var`."""
    p, q = polynomial(*first, var), polynomial(*second, var)
    if not p or not q or len(p) < 2 or len(q) < 2:
        return None  # not polynomial, an identity (0 = 0) or a contradiction (1 = 0)
    return common_root(p, q)


_CUES = ("so", "thus", "therefore", "hence", "gives", "giving", "get", "gets", "got", "yield",
         "simplif", "rearrang", "factor", "expand", "combin", "subtract", "add", "multipl",
         "divid", "solv", "implies", "becomes", "then", "obtain", "leads", "reduces", "mov",
         "isolat", "collect", "cancel", "which", "⇒")
_BLOCKS = ("or", "case", "cases", "if", "when", "suppose", "assume", "let", "check", "test",
           "try", "alternatively", "another", "other", "second", "but", "not", "also", "where",
           "substitut", "plug", "for", "since", "because", "given")
MAX_GAP = 16
MAX_VARIABLES = 4
_REWRITE_CUES = ("expand", "simplif", "rearrang", "combin", "collect", "distribut", "rewrit",
                 "mov")

def _gap(toks, a_end: int, b_first: int) -> list[str]:
    return [t.text.lower() for t in toks[a_end:b_first] if t.kind in ("word", "bound")]


def _joined(toks, a_end: int, b_first: int) -> bool:
    """Do the words between two equations say the second comes from the first?"""
    if b_first - a_end > MAX_GAP:
        return False
    words = _gap(toks, a_end, b_first)
    if any(w == b or (len(b) > 3 and w.startswith(b)) for w in words for b in _BLOCKS):
        return False
    return any(w == c or (len(c) > 3 and w.startswith(c)) for w in words for c in _CUES)


def _solved(ch) -> bool:
    """`x = 3`, `x = -7/2`: a variable alone on one side, a number on the other."""
    left, right = ch.sides

    def lone(side):
        return len(side) == 1 and side[0].kind == "var"

    def plain(side):
        return side and not any(t.kind in ("var", "junk") for t in side)

    return (lone(left) and plain(right)) or (lone(right) and plain(left))


def _near_root(first: tuple[str, str], solved, var: str) -> bool | None:
    """`0.457x = 21, so x = 45.95`: a decimal answer is a root rounded to its places."""
    from rewards.claims.compare import plain_decimals

    value_side = next(s for s in solved.sides if not (len(s) == 1 and s[0].kind == "var"))
    text = " ".join(t.text for t in value_side)
    places = plain_decimals(text)
    p = polynomial(*first, var)
    if not places or not p:
        return False
    c, h = Fraction(text.replace(" ", "")), Fraction(1, 10 ** places)
    lo, hi = _eval(p, c - h), _eval(p, c + h)
    return lo == 0 or hi == 0 or (lo < 0) != (hi < 0)


def _rewrite_only(toks, a_end: int, b_first: int) -> bool:
    """The words between two equations say the second is the first rewritten (expand,
    simplify, rearrange, combine, collect): the same equation, lhs - rhs up to a factor.
    Two equations with nothing between them are usually a system, not a rewrite."""
    if b_first - a_end > MAX_GAP:
        return False
    words = [w for w in _gap(toks, a_end, b_first) if w != ";"]
    if any(w == b or (len(b) > 3 and w.startswith(b)) for w in words for b in _BLOCKS):
        return False
    return any(w.startswith(c) for w in words for c in _REWRITE_CUES)


def _equations(chains):
    """(chain, variable names) of each plain equation lhs = rhs with variables."""
    from rewards.claims.sides import symbolic, variable_names

    def plain(s):
        return s and not any(t.kind in ("junk", "var") for t in s)

    out = []
    for ch in chains:
        if ch.rels != ["="] or not all(symbolic(s) or plain(s) for s in ch.sides):
            continue
        names = variable_names(ch.sides[0]) | variable_names(ch.sides[1])
        if 1 <= len(names) <= MAX_VARIABLES:
            out.append((ch, names))
    return out


def equation_claims(chains, toks) -> list[tuple[str, bool]]:
    """(text, verdict) for each equation that should follow from the one before it: one
    variable, a shared root; several variables and a bare rewrite, the same polynomial up to
    a constant factor."""
    from rewards.claims.identities import proportional
    from rewards.claims.sides import symbolic_text

    out = []
    equations = _equations(chains)
    for k, ((a, va), (b, vb)) in enumerate(zip(equations, equations[1:])):
        if va != vb or _solved(a) or \
                (k and {"or", "and"} & set(_gap(toks, equations[k - 1][0].end, a.first))):
            continue  # `x = 3` is a solution, `... or x - 9 = 0` one of several cases
        first = (symbolic_text(a.sides[0]), symbolic_text(a.sides[1]))
        second = (symbolic_text(b.sides[0]), symbolic_text(b.sides[1]))
        if len(va) == 1 and _joined(toks, a.end, b.first):
            var = next(iter(va))
            ok = follows(first, second, var)
            if ok is False and _solved(b):
                ok = _near_root(first, b, var)
        elif len(va) > 1 and _rewrite_only(toks, a.end, b.first):
            if polynomial(*first, tuple(sorted(va))) is None or polynomial(*second, tuple(sorted(va))) is None:
                continue  # denominators cleared or a root taken: not a plain rewrite
            ok = proportional(f"({first[0]}) - ({first[1]})", f"({second[0]}) - ({second[1]})")
        else:
            continue
        if ok is not None:
            out.append((f"{' = '.join(first)}  =>  {' = '.join(second)}", ok))
    return out
