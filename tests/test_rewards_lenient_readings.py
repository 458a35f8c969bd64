"""What the lenient reader reads into a number (issue 31, the characters and words families), by
rule rather than by block list (rewards/equivalence/normalize.py, rewards/answers/span.py):
- only 0-9 are digits: a fullwidth or other Unicode digit, a combining mark or a zero-width
  character is never read as what it looks like;
- digit groups split by spacing are one number only as a thousands grouping (`1\\,000`), never a
  product (`2\\,9` is not 18); a thousands grouping has no leading zero (`0,018` is not 18);
- two different listed units never match (`18 dollars` is not 18 cents);
and the right answers of other graders' suites it now pays: a decimal comma against a decimal
gold, lists joined by ";", "could be" in the answer's own sentence stating one value."""

from __future__ import annotations

import pytest

from rewards import check, extract_answer, is_equiv


def lenient(text, gold):
    return check(text, gold, policy="lenient")


# each paid 1.0 before this change
WRONG_READINGS = [
    ("#### 1８", "18"),
    ("So $\\boxed{1８}$.", "18"),
    ("So $\\boxed{2 9}$.", "18"),
    ("So $\\boxed{2\\;9}$.", "18"),
    ("So $\\boxed{2~9}$.", "18"),
    ("So $\\boxed{2\\,9}$.", "18"),
    ("So $\\boxed{2\\ 9}$.", "18"),
    ("#### 2 9", "18"),
    ("#### 0,018", "18"),
    ("So $\\boxed{0,018}$.", "18"),
    ("#### 18 dollars", "18 \\text{ cents}"),
    ("So $\\boxed{18 \\text{ hours}}$.", "18 \\text{ minutes}"),
]


@pytest.mark.parametrize("text,gold", WRONG_READINGS)
def test_wrong_readings_of_characters_and_units_score_zero(text, gold):
    assert lenient(text, gold).score == 0.0, lenient(text, gold)


@pytest.mark.parametrize("pred,gold", [
    ("1\u03018", "18"),  # a combining mark
    ("1\u200b8", "18"),  # a zero-width space
    ("1⁸", "18"),
    ("١٨", "18"),  # Arabic-Indic digits
    ("2 9", "29"),  # split digits are no number, not the digits run together either
    ("0 018", "18"),
    ("12 34", "1234"),
    ("x = 2\\,9", "18"),
    ("18 \\text{ cm}", "18 \\text{ dollars}"),
    ("1,800", "1.8"),  # a comma before exactly three digits is a thousands separator
])
def test_not_equal_by_rule(pred, gold):
    assert not is_equiv(pred, gold) and not is_equiv(gold, pred)


@pytest.mark.parametrize("pred,gold", [
    ("1８", "1８"),  # the same characters are the same answer
    ("1\\,000", "1000"),
    ("1 000 000", "1000000"),
    ("\\$1\\,500", "1500"),
    ("1 1/2", "\\frac32"),
    ("0,1", "0, 1"),  # MATH golds write lists without spaces
    ("5 \\text{ cm}", "5\\text{ cm}^2"),  # the unit's power is not compared, only the unit named
    ("24 \\text{ units}", "24\\text{ square units}"),
    ("18 \\text{ dollars}", "\\$18"),
    ("18 \\text{ hrs}", "18 \\text{ hours}"),
    # right answers of other graders' suites
    ("0,111", "0.111"),
    ("0,5", "0.5"),
    ("3,14", "3.14"),
    ("1; 2", "1, 2"),
    ("-1; 2; 3", "3, 2, -1"),
])
def test_equal_by_rule(pred, gold):
    assert is_equiv(pred, gold) and is_equiv(gold, pred)


@pytest.mark.parametrize("text,gold", [
    ("The answer is 0,111.", "0.111"),
    ("So $\\boxed{0,5}$.", "0.5"),
    ("So $\\boxed{1; 2}$.", "1, 2"),
    ("The solutions are $x = 1$ and $x = 2$.", "1, 2"),
    ("The final answer could be 18.", "18"),
    ("So the final answer could be $\\boxed{18}$.", "18"),
    ("#### 18 dollars", "18"),
    ("The answer is 18 in total.", "18"),
    ("So $\\boxed{1\\,000}$.", "1000"),
])
def test_right_answers_in_these_forms_are_paid(text, gold):
    assert lenient(text, gold).score == 1.0, lenient(text, gold)


@pytest.mark.parametrize("text", [
    "The answer could be 17 or 18.",  # alternatives stay alternatives
    "It could be 18.",  # no answer sentence: a doubt
    "The answer might be $\\boxed{18}$.",
    "The answer could be 18, or maybe 17.",
])
def test_could_be_with_alternatives_or_doubt_stays_hedged(text):
    assert lenient(text, "18").score == 0.0, lenient(text, "18")


def test_the_unit_after_a_value_is_read_with_it():
    assert extract_answer("#### 18 dollars") == "18 dollars"
    assert extract_answer("The answer is 0,111.") == "0,111"  # no thousands comma to drop
    assert extract_answer("#### 1,234") == "1234"


EQUIVALENCES = [  # decided by exact arithmetic in the closed grammar, no sympy call
    ("0.\\overline{3}", "\\frac13"), ("0.1\\overline{6}", "\\frac16"), ("0.\\overline{36}", "\\frac{4}{11}"),
    ("\\log_2 8", "3"), ("\\log_{2} 8", "3"), ("\\log_8 2", "\\frac13"), ("\\log_4 \\frac12", "-\\frac12"),
    ("\\frac{\\ln 8}{\\ln 2}", "3"), ("\\frac{\\log 8}{\\log 2}", "\\log_2 8"), ("\\log_3 9", "\\frac{\\ln 9}{\\ln 3}"),
    ("\\emptyset", "\\varnothing"), ("\\{\\}", "\\emptyset"),
]


@pytest.mark.parametrize("pred,gold", EQUIVALENCES)
def test_equivalences_are_exact_and_need_no_symbolic_worker(pred, gold, monkeypatch):
    import rewards.equivalence.equiv as equiv

    monkeypatch.setattr(equiv, "get_pool", lambda: pytest.fail("reached the symbolic worker"))
    assert is_equiv(pred, gold) and is_equiv(gold, pred)


@pytest.mark.parametrize("pred,gold", EQUIVALENCES)
@pytest.mark.parametrize("policy", ["lenient", "strict"])
def test_both_policies_pay_the_equivalences(pred, gold, policy):
    assert check(f"So $\\boxed{{{pred}}}$.", gold, policy=policy).score == 1.0


@pytest.mark.parametrize("pred,gold", [("\\log_2 8", "4"), ("\\log_2 6", "3"), ("\\frac{\\ln 8}{\\ln 3}", "3"),
                                       ("\\log_2 8", "\\log_3 8")])
def test_logarithms_that_differ_are_not_equal(pred, gold):
    assert not is_equiv(pred, gold) and not is_equiv(gold, pred)


@pytest.mark.parametrize("policy", ["lenient", "strict"])
def test_both_policies_read_a_semicolon_list(policy):
    assert check("So $\\boxed{1; 2}$.", "2, 1", policy=policy).score == 1.0
    assert check("So $\\boxed{17; 18}$.", "18", policy=policy).score == 0.0


@pytest.mark.parametrize("word", ["thousands", "hundreds", "halves", "dozens", "millions"])
def test_a_plural_multiplier_is_no_unit_to_drop(word):
    """Each paid 1.0 before: the singular stopped the unit rule, its plural did not."""
    assert lenient(f"So $\\boxed{{18 \\text{{ {word}}}}}$.", "18").score == 0.0


@pytest.mark.parametrize("word", ["apples", "days", "glasses", "inches", "pairs"])
def test_a_plural_noun_is_still_a_unit(word):
    assert is_equiv(f"18 \\text{{ {word}}}", "18")
