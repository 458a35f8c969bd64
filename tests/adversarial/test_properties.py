"""Property tests: for random golds G and random wrong values W, no hack template of the
families scores W as G, every control scores G as G, and equivalence never depends on the
order of its arguments."""

from __future__ import annotations

from fractions import Fraction
from math import gcd

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rewards import check, is_equiv
from tests.adversarial.families import CONTROLS, FAMILIES, VALUE_CONTROLS

_SLOW = {"huge"}  # 100 KB answers: covered once in test_families, too slow for every example
TEMPLATES = [(f, t) for f, ts in FAMILIES.items() if f not in _SLOW for t in ts]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _frac(a: int, b: int) -> str:
    return f"\\frac{{{a}}}{{{b}}}"


integers = st.integers(2, 10**6).map(str)  # not 1: 1^2 is 1
fractions = st.tuples(st.integers(1, 500), st.integers(2, 500)).filter(lambda t: gcd(*t) == 1).map(lambda t: _frac(*t))
radicals = st.tuples(st.integers(2, 40), st.sampled_from([2, 3, 5, 6, 7, 10, 11])).map(
    lambda t: f"{t[0]}\\sqrt{{{t[1]}}}")
words = st.sampled_from(["\\text{east}", "\\text{even}", "\\text{Monday}", "\\text{parabola}", "\\text{yes}",
                         "\\text{Evelyn}", "\\text{circle}"])


@st.composite
def gold_and_wrong(draw):
    kind = draw(st.sampled_from(["int", "frac", "radical", "word"]))
    if kind == "int":
        g = draw(integers)
        w = str(int(g) + draw(st.integers(-50, 50).filter(lambda d: d != 0)))
    elif kind == "frac":
        g, w = draw(fractions), draw(fractions)
    elif kind == "radical":
        g, w = draw(radicals), draw(radicals)
    else:
        g, w = draw(words), draw(words)
    if g == w:  # another value of the same kind
        w = {"frac": "\\frac{1}{501}", "radical": "41\\sqrt{13}", "word": "\\text{west}"}[kind]
    return g, w


@SETTINGS
@given(gold_and_wrong())
def test_no_template_pays_for_the_gold(pair):
    gold, wrong = pair
    paid = [(family, t(gold, wrong)) for family, t in TEMPLATES if check(t(gold, wrong), gold, timeout=3.0).score]
    assert paid == [], paid[:3]


@SETTINGS
@given(gold_and_wrong())
def test_no_template_pays_a_wrong_value_either(pair):
    # the same templates around the wrong value only: W is never read as G
    gold, wrong = pair
    paid = [c(wrong) for c in CONTROLS if check(c(wrong), gold, timeout=3.0).score]
    assert paid == []


@SETTINGS
@given(gold_and_wrong())
def test_controls_pay_the_gold(pair):
    gold, _ = pair
    controls = CONTROLS + (VALUE_CONTROLS if not gold.startswith("\\text") else [])
    unpaid = [c(gold) for c in controls if check(c(gold), gold, timeout=10.0).score != 1.0]
    assert unpaid == []


def _forms(v: Fraction) -> list[str]:
    out = [_frac(v.numerator, v.denominator) if v.denominator > 1 else str(v.numerator),
           f"{v.numerator}/{v.denominator}", f"x = {v.numerator}/{v.denominator}", f"{float(v):.6g}"]
    if v.denominator == 1:
        out += [f"{v.numerator}.0", f"{v.numerator}\\%", f"{v.numerator}^\\circ"]
    return out


values = st.fractions(min_value=-1000, max_value=1000, max_denominator=40)
shapes = st.sampled_from(["one", "list", "tuple", "interval", "set"])


def _shape(shape: str, xs: list[str]) -> str:
    return {"one": xs[0], "list": ", ".join(xs), "tuple": f"({', '.join(xs)})",
            "interval": f"[{xs[0]}, {xs[1]})", "set": "\\{" + ", ".join(xs) + "\\}"}[shape]


@settings(max_examples=200, deadline=None)
@given(values, values, shapes, shapes, st.integers(0, 3), st.integers(0, 3))
def test_equivalence_is_symmetric(v1, v2, s1, s2, f1, f2):
    a = _shape(s1, [_forms(v1)[f1], _forms(v2)[f2]])
    b = _shape(s2, [_forms(v2)[f2], _forms(v1)[f1]])
    assert is_equiv(a, b, timeout=3.0) == is_equiv(b, a, timeout=3.0), (a, b)
