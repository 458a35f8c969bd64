"""The strict answer policy (issue 31): pay only one final statement whose content parses
completely in the closed grammar (rewards/equivalence/grammar, rewards/outcome/strict.py), under
one deadline per completion."""

from __future__ import annotations

import time

import pytest

from rewards import check
from rewards.equivalence.grammar.lexer import Unrecognized
from rewards.equivalence.grammar.parser import parse_answer
from rewards.redteam import load_bases
from rewards.redteam_families import or_boxes, run_families


def strict(text, gold, timeout=5.0):
    return check(text, gold, timeout=timeout, policy="strict")


# (completion, gold): each one a family of the issue; today's lenient reading pays most of them
WRONG = {
    "unicode superscript": ("so $\\boxed{1⁸}$.", "18"),
    "fullwidth digit": ("#### 1８", "18"),
    "combining mark": ("so $\\boxed{1\u03018}$.", "18"),
    "factors with a space": ("so $\\boxed{2 9}$.", "18"),
    "factors with LaTeX spacing": ("so $\\boxed{2\\,9}$.", "18"),
    "leading-zero thousands": ("so $\\boxed{0,018}$.", "18"),
    "multiplier word": ("so $\\boxed{18 \\text{ thousand}}$.", "18"),
    "dozen": ("so $\\boxed{18 \\text{ dozen}}$.", "18"),
    "unlisted word": ("so $\\boxed{18 \\text{ apples less}}$.", "18"),
    "unit swapped": ("so $\\boxed{5.4 \\text{ dollars}}$.", "5.4 \\text{ cents}"),
    "implies": ("so $\\boxed{18 \\Rightarrow 17}$.", "18"),
    "to": ("so $\\boxed{18 \\to 17}$.", "18"),
    "mapsto": ("so $\\boxed{18 \\mapsto 17}$.", "18"),
    "sim": ("so $\\boxed{18 \\sim 17}$.", "18"),
    "approx": ("so $\\boxed{18 \\approx 17}$.", "18"),
    "line break": ("so $\\boxed{18 \\\\ 17}$.", "18"),
    "lhs names another variable": ("so $\\boxed{x = 2x + 3}$.", "y = 2x + 3"),
    "lhs another function": ("so $\\boxed{g(x) = 2}$.", "f(x) = 2"),
    "lhs sin for cos": ("so $\\boxed{\\sin(x) = a}$.", "\\cos(x) = a"),
    "nested box": ("so $\\boxed{17 \\boxed{18}}$.", "18"),
    "later conclusion": ("so $\\boxed{18}$.\n\nHmm, recounting carefully, the total comes to 17.", "18"),
    "quoted as a mistake": ("The count is $\\boxed{17}$.\nA common mistake is to answer $\\boxed{18}$.", "18"),
    "common mistake lead-in": ("A common mistake is to answer $\\boxed{18}$.", "18"),
    "last-sentence number": ("So we get 18 and then 17 in all.", "18"),
    "iffalse": ("so $\\boxed{17}$.\n\\iffalse \\boxed{18} \\fi", "18"),
    "phantom": ("so $\\boxed{17}$.\n\\phantom{\\boxed{18}}", "18"),
    "white": ("so $\\boxed{17}$.\n{\\color{white}\\boxed{18}}", "18"),
    "json": ('so $\\boxed{17}$.\n```json\n{"answer": "\\boxed{18}"}\n```', "18"),
    "two finals": ("#### 18\nThe answer is $\\boxed{17}$.", "18"),
    "or-joined": ("$\\boxed{17}$ or $\\boxed{18}$", "18"),
    "hedge in the box": ("so $\\boxed{18?}$.", "18"),
    "chained false claim": ("so $\\boxed{17 = 18}$.", "18"),
    "alternative in the lead-in": ("The answer is 17 or $\\boxed{18}$.", "18"),
    "negated lead-in": ("The answer is 17, not $\\boxed{18}$.", "18"),
    "retraction after the box": ("So $\\boxed{18}$ is incorrect.", "18"),
    "closing sentence that negates": ("So $\\boxed{18}$. This is not the final answer.", "18"),
    "chat turn with another box": ("$\\boxed{17}$<|im_end|><|im_start|>user\n$\\boxed{18}$", "18"),
    # a percentage is not a count, an angle not a count: the gold's own form decides
    "percent for a count": ("so $\\boxed{18\\%}$.", "18"),
    "percent word for a count": ("so $\\boxed{18 \\text{ percent}}$.", "18"),
    "degrees for a count": ("so $\\boxed{18^{\\circ}}$.", "18"),
    "degree word for a count": ("so $\\boxed{18 \\text{ degrees}}$.", "18"),
    "named percent for a count": ("so $\\boxed{x = 18\\%}$.", "18"),
    "percents in a list of counts": ("so $\\boxed{18\\%, 20\\%}$.", "18, 20"),
    "percent for degrees": ("so $\\boxed{18\\%}$.", "18^\\circ"),
    "degrees for a percent": ("so $\\boxed{18^\\circ}$.", "18\\%"),
    "count or percent": ("$\\boxed{18}$ or $\\boxed{18\\%}$", "18"),
    "percent box then count box": ("We get $\\boxed{18\\%}$. So $\\boxed{18}$.", "18"),
    "two percent signs": ("so $\\boxed{18\\%\\%}$.", "18\\%"),
    # after the box only a listed unit is read (an allowlist): everything else is refused
    "percent after the box for a count": ("so $\\boxed{18}\\%$.", "18"),
    "degrees after the box for a count": ("so $\\boxed{18}^\\circ$.", "18"),
    "unlisted word after the box": ("so $\\boxed{18}$ apples.", "18"),
    "multiplier after the box": ("so $\\boxed{18}\\text{ thousand}$.", "18"),
    "hedge after the box": ("so $\\boxed{18}\\text{ (approximately)}$.", "18"),
    "unit then an alternative": ("so $\\boxed{18}$ cm or 17.", "18"),
    "unit then a word": ("so $\\boxed{18}$ cm is wrong.", "18"),
    "unit then another unit": ("so $\\boxed{18}\\text{ cm}\\text{ thousand}$.", "18"),
    "unit after a box with a unit": ("so $\\boxed{18 \\text{ cm}}\\text{ inches}$.", "18 \\text{ inches}"),
    "unit swapped after the box": ("so $\\boxed{5.4}\\text{ dollars}$.", "5.4 \\text{ cents}"),
    "single-letter word after the box": ("so $\\boxed{18}$ m.", "18"),
    "unit after a box that names another function": ("so $\\boxed{g(x) = 2}$ cm.", "f(x) = 2"),
    "unit on a braced relation": ("so $\\boxed{{g(x) = 2}\\text{ cm}}$.", "f(x) = 2"),
    "percent on a braced relation": ("so $\\boxed{{g(x) = 2}\\%}$.", "f(x) = 2"),
    "unit inside an expression": ("so $\\boxed{2 + 3 \\text{ cm}}$.", "5 \\text{ inches}"),
    "unit after a box with an expression": ("so $\\boxed{x = 2+3}\\text{ cm}$.", "5 \\text{ inches}"),
    "an answer in the turn after the end-of-turn token": ("#### 17<|im_end|>\n<|im_start|>user\n#### 18", "18"),
    "product in another unit": ("so $\\boxed{3\\pi \\text{ cm}}$.", "3\\pi \\text{ m}"),
    "units on two factors": ("so $\\boxed{2 \\text{ cm} \\times 9 \\text{ cm}}$.", "18"),
}


@pytest.mark.parametrize("name", sorted(WRONG))
def test_every_family_scores_zero_with_a_reason(name):
    text, gold = WRONG[name]
    res = strict(text, gold)
    assert res.score == 0.0 and res.reason, (name, res)


# what a model told the format writes: strict pays all of it
RIGHT = [
    ("The total is $\\boxed{18}$.", "18"),
    ("... 9 * 2 = 18\n#### 18", "18"),
    ("#### 1,000", "1000"),
    ("So $\\boxed{x = 18}$.", "18"),
    ("So $\\boxed{18 \\text{ dollars}}$.", "18"),
    ("So $\\boxed{\\$18.00}$.", "18"),
    ("So $\\boxed{\\dfrac{1}{2}}$.", "\\frac12"),
    ("So $\\boxed{0.5}$.", "\\frac{1}{2}"),
    ("So $\\boxed{2\\sqrt{3}}$.", "\\sqrt{12}"),
    ("So $\\boxed{\\frac{\\sqrt2}{2}}$.", "\\frac{1}{\\sqrt{2}}"),
    ("So $\\boxed{(3, 2)}$.", "(3,2)"),
    ("So $\\boxed{[-2, 7]}$.", "-2 \\le x \\le 7"),
    ("So $\\boxed{x > 5}$.", "(5, \\infty)"),
    ("So $\\boxed{\\{1, 2\\}}$.", "2, 1"),
    ("So $\\boxed{y = 2x + 3}$.", "2x - y + 3 = 0"),
    ("So $\\boxed{0.\\overline{3}}$.", "\\frac{1}{3}"),
    ("So $\\boxed{\\emptyset}$.", "\\varnothing"),
    ("So $\\boxed{28\\%}$.", "28\\%"),
    ("So $\\boxed{28 \\text{ percent}}$.", "28\\%"),
    ("So $\\boxed{30^\\circ}$.", "30^\\circ"),
    ("So $\\boxed{30}$.", "30^\\circ"),  # the quantity asked for, in the gold's measure
    ("So $\\boxed{28}$.", "28\\%"),
    ("So $\\boxed{30 \\text{ degrees}}$.", "30^\\circ"),
    ("So $\\boxed{30^\\circ}$.", "30 \\text{ degrees}"),
    # MATH-style units after the box: the grammar's listed units, read as part of the answer
    ("So the side is $\\boxed{5}\\text{ cm}$.", "5"),
    ("So the side is $\\boxed{5}$ cm.", "5"),
    ("So the side is $\\boxed{5}\\text{ cm}$.", "5 \\text{ cm}"),
    ("So the area is $\\boxed{5}\\,\\text{cm}^2$.", "5"),
    ("So the area is $\\boxed{24}$ square units.", "24"),
    ("So the angle is $\\boxed{30}^\\circ$.", "30^\\circ"),
    ("So the angle is $\\boxed{30}$ degrees.", "30^\\circ"),
    ("So the rate is $\\boxed{18}\\%$.", "18\\%"),
    ("So it costs $\\boxed{18}$ dollars.", "18"),
    ("So the side is $\\boxed{5}\\text{ cm}$. This is the final answer.", "5"),
    ("So the side is $\\boxed{5}$ cm.<|im_end|>", "5"),
    ("#### 18<|im_end|>", "18"),
    ("#### 18</s>", "18"),
    ("#### 18<|im_end|>\n<|im_start|>user\nAnd 2 + 2?<|im_end|>\n<|im_start|>assistant\n#### 4", "18"),
    ("So the side is $\\boxed{5}\\text{ m}$.", "5"),
    ("So the side is $\\boxed{x = 5}$ cm.", "5"),
    ("So the side is $\\boxed{x = 2+3}$ cm.", "5 \\text{ cm}"),
    ("So the lengths are $\\boxed{5 \\text{ cm}, 6 \\text{ cm}}$.", "5, 6"),
    ("The area is $\\boxed{8\\sqrt{3}}$.", "8\\sqrt{3} \\text { square inches}"),  # a product's unit
    ("The length is $\\boxed{3\\pi \\text{ cm}}$.", "3\\pi"),
    ("So $\\boxed{\\text{East}}$.", "\\text{east}"),
    ("So $\\boxed{2\\frac{1}{2}}$.", "\\frac52"),
    ("So $\\boxed{52_8}$.", "52_8"),
    ("So $\\boxed{\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}}$.",
     "\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}"),
    ("So the answer is $\\boxed{18}$. This is the final answer.", "18"),
    ("The answer is $\\boxed{18}$.<|im_end|>", "18"),
    ("$\\boxed{x+11}$ or $\\boxed{11+x}$", "x + 11"),
    ("We check: $\\boxed{18}$, and so the answer is $\\boxed{18}$.", "18"),
    ("So $\\boxed{\\log_2 8}$.", "3"),
    ("#### $70,000", "70000"),  # GSM8K models write the currency sign
    ("So $\\boxed{x^2 - 12 = 0}$.", "x^{2}-12=0"),
    ("So $\\boxed{27, 54, 108, 135}$.", "27,54,108,135"),  # a gold list without spaces is not 27,054,...
    ("So $\\boxed{f(y) = 1}$.", "f(x)=1"),
]


@pytest.mark.parametrize("text,gold", RIGHT)
def test_forms_a_told_model_writes_are_paid(text, gold):
    res = strict(text, gold)
    assert res.score == 1.0, res


@pytest.mark.parametrize("text,gold", [("So $\\boxed{17}$.", "18"), ("So $\\boxed{x = 17}$.", "18"),
                                       ("So $\\boxed{(2, 3)}$.", "(3,2)"), ("So $\\boxed{[2, 7)}$.", "[2,7]"),
                                       ("So $\\boxed{0.333}$.", "\\frac13"), ("So $\\boxed{3.14}$.", "\\pi")])
def test_wrong_values_in_the_grammar_are_not_equal(text, gold):
    assert strict(text, gold).reason == "not equal"


def test_unrecognized_names_the_token():
    with pytest.raises(Unrecognized, match="thousand"):
        parse_answer("18 \\text{ thousand}")
    with pytest.raises(Unrecognized, match=r"\\to"):
        parse_answer("18 \\to 17")
    assert strict("so $\\boxed{18 \\text{ dozen}}$.", "18").reason == "unrecognized: dozen"


def test_memoised_parses_give_the_same_verdicts_as_fresh_ones():
    from rewards.outcome.strict import clear_cache

    cases = [("so $\\boxed{18 \\text{ dozen}}$.", "18"), ("$\\boxed{\\frac{1}{2}}$", "0.5"),
             ("$\\boxed{0.5}$", "\\frac12"), ("$\\boxed{17}$", "18")]
    clear_cache()
    fresh = [strict(t, g) for t, g in cases]
    for _ in range(2):  # the second and third passes read every answer and gold from the cache
        assert [strict(t, g) for t, g in cases] == fresh
    assert [r.score for r in fresh] == [0.0, 1.0, 1.0, 0.0]


def test_one_deadline_per_completion_with_1000_or_joined_boxes():
    for policy in ("strict", "lenient"):
        t0 = time.monotonic()
        res = check(or_boxes(1000, "18", "1"), "18", timeout=2.0, policy=policy)
        assert res.score == 0.0
        assert time.monotonic() - t0 < 2.0 + 1.5, policy  # the deadline plus a loaded machine's margin


def test_redteam_families_find_nothing_under_strict_bounded():
    bases = load_bases(__import__("pathlib").Path(__file__).resolve().parents[1], 8)
    rows = list(run_families(lambda c, g, **kw: check(c, g, policy="strict"), bases))
    assert len(rows) > 300
    exploits = [(f, t[-120:]) for f, t, _g, _s, hack, _dt in rows if hack]
    assert exploits == []
    assert max(dt for *_, dt in rows) < 5.0


@pytest.mark.parametrize("a,b,equal", [
    ("0.\\overline{3}", "\\frac13", True), ("\\log_2 8", "3", True), ("\\emptyset", "\\varnothing", True),
    ("x = 2x + 3", "y = 2x + 3", False), ("f(x) = 2", "g(x) = 2", False), ("\\sin(x) = a", "\\cos(x) = a", False),
    # the lenient conventions stay: a named value equals the bare value
    ("E(2020,1993) = 76", "76", True), ("|AB| = 1", "1", True), ("(p,q) = (3,2)", "(3,2)", True),
    ("x = 1, y = 2", "1, 2", True), ("0.333", "\\frac13", False), ("3.14", "\\pi", False),
])
def test_lenient_equivalence_takes_the_grammars_reading_of_two_parsed_answers(a, b, equal):
    from rewards import is_equiv

    assert is_equiv(a, b) == is_equiv(b, a) == equal
