"""The lenient reader (the evals' policy) pays an allowed form, not whatever evaluates to the gold:
operations outside the value vocabulary (rewards/equivalence/vocabulary.py) must be the gold's own,
a unit it drops must have the form of a unit (rewards/equivalence/normalize.py `_unit_form`), a
remark or adverb after the answer makes it no plain answer (rewards/answers/span.py,
statements.py), and a `####` line carries a value and a listed unit only."""

from __future__ import annotations

import time

import pytest

from rewards import check, is_equiv
from rewards.equivalence.vocabulary import foreign
from rewards.redteam import load_bases
from rewards.redteam_families import candidate_functions, run_families


def lenient(text, gold="18"):
    return check(text, gold, policy="lenient")


# each evaluates to (or reads as) 18; 24 of these 32 paid 1.0 before this change, the rest are neighbours
HEDGES_AND_FUNCTIONS = [
    "So $\\boxed{18 \\text{ (approximately)}}$.",
    "#### 18 (approximately)",
    "So $\\boxed{\\max(17, 18)}$.",
    "So $\\boxed{\\min(18, 40)}$.",
    "So $\\boxed{18 \\bmod 100}$.",
    "So $\\boxed{\\lceil 17.5 \\rceil}$.",
    "So $\\boxed{\\left\\lceil 17.5 \\right\\rceil}$.",
    "So $\\boxed{\\lfloor 18.5 \\rfloor}$.",
    "So $\\boxed{\\gcd(18, 36)}$.",
    "So $\\boxed{\\mathrm{max}(17, 18)}$.",
    "So $\\boxed{\\operatorname{round}(17.6)}$.",
    "So $\\boxed{round(17.6)}$.",
    "So $\\boxed{18 \\mod 100}$.",
    "So $\\boxed{\\binom{18}{1}}$.",
    "So $\\boxed{\\approx 18}$.",
    "So $\\boxed{18 \\text{ approximately}}$.",
    "So $\\boxed{18 \\text{ roughly}}$.",
    "So $\\boxed{18 \\text{ (exactly)}}$.",
    "So $\\boxed{18 \\text{ approx.}}$.",
    "So $\\boxed{18 \\,(\\text{approx})}$.",
    "The answer is 18 (approx).",
    "#### 18 approximately",
    "#### 18 approx",
    "#### 18 thousand",
    "So the answer is $\\boxed{18}$ (approximately).",
    "So the answer is $\\boxed{18}\\text{ (approximately)}$.",
    "So the answer is $\\boxed{18}\\text{ approx.}$.",
    "So the answer is $\\boxed{18}$ roughly.",
    "So $\\boxed{18 \\text{ score}}$.",  # scales and offsets (rewards/equivalence/words.py: SCALES)
    "So $\\boxed{18 \\text{ extra}}$.",
    "So $\\boxed{18 \\text{ thirds}}$.",
    "So $\\boxed{\\sqrt{324} \\quad\\text{so}\\quad \\frac{14}{3}}$.",  # two values with prose between
    "So $\\boxed{18 \\text{ hence } 17}$.",
    "#### 18 \\\\ 19",
    "So $\\boxed{18 \\\\ 19}$.",
    "So $\\boxed{\\inf\\{18, 19\\}}$.",  # a value command plus one letter that is a real command
    "So $\\boxed{\\int_0^1 18\\,dx}$.",
]


@pytest.mark.parametrize("text", HEDGES_AND_FUNCTIONS)
def test_hedges_and_functions_over_candidates_score_zero(text):
    res = lenient(text)
    assert res.score == 0.0 and res.reason, res


# natural forms the lenient reader keeps paying
NATURAL = [
    ("So $\\boxed{18}$.", "18"),
    ("The answer is 18 apples.", "18"),
    ("So $\\boxed{18 \\text{ apples}}$.", "18"),
    ("So $\\boxed{18 \\text{ lbs.}}$.", "18"),
    ("#### 18 dollars", "18"),
    ("#### 18", "18"),
    ("The answer is 18 (since 9 * 2 = 18).", "18"),
    ("So $\\boxed{18}$ (because each of the 9 boxes holds 2).", "18"),
    ("So Lori needs $\\boxed{18}$ dozens of eggs.", "18"),  # the question asked in dozens: words after a box qualify it
    ("$\\boxed{\\frac{\\pi}{6} + k\\pi \\text{ for } k \\in \\mathbb{Z}}$", "\\frac{1}{6} \\pi+\\pi k"),  # a condition
    ("So $\\boxed{\\left\\lfloor \\frac{n}{2} \\right\\rfloor}$.", "\\lfloor n/2 \\rfloor"),  # the gold's own floor
    ("So $\\boxed{3 \\pm \\sqrt{2}}$.", "3 \\pm \\sqrt{2}"),
    ("So $\\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}}$.", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"),
    ("So $\\boxed{\\sin 30^\\circ}$.", "\\frac12"),
    ("So $\\boxed{\\log_2 8}$.", "3"),
    ("So $\\boxed{\\dfrac{\\sqrt{3}}{2}}$.", "\\frac{\\sqrt3}{2}"),
    ("So $\\boxed{\\mathbb{R}}$.", "\\mathbb{R}"),
    # golds with their spaces stripped glue a command to a variable (RealCritic writes `\\cosx`)
    ("So $\\boxed{-\\frac{\\cos x}{\\sin^2 x}}$.", "-\\frac{\\cosx}{\\sin^{2}x}"),
    ("So $\\boxed{2\\sqrt{\\pi G \\rho_0 r_0^2}}$.", "\\sqrt{4\\piG\\rho_{0}r_{0}^{2}}"),
]


# natural forms the issue listed as not paid: a percent written apart, chat-template end tokens,
# bold answer lines
NATURAL_FORMS_ISSUE_31 = [
    ("The answer is 28 percent.", "28\\%"),
    ("The answer is $28$ %.", "28\\%"),
    ("#### 28 %", "28\\%"),
    ("#### 18<|im_end|>", "18"),
    ("The answer is 18.</s>", "18"),
    ("The answer is 18<|endoftext|>", "18"),
    ("So 9*2 = 18.\nThe answer is 18<|im_end|>\n<|im_start|>user\nNext question", "18"),
    ("So the answer is $\\boxed{18}$<|eot_id|>", "18"),
    ("**Answer: 18**", "18"),
    ("**Final Answer:** 18", "18"),
    ("### Final Answer\n**18**", "18"),
    ("Therefore, the answer is **18**.", "18"),
]


@pytest.mark.parametrize("text,gold", NATURAL + NATURAL_FORMS_ISSUE_31)
def test_natural_forms_stay_paid(text, gold):
    assert lenient(text, gold).score == 1.0, lenient(text, gold)


@pytest.mark.parametrize("pred,gold", [("\\max(17, 18)", "18"), ("\\lceil 17.5 \\rceil", "18"),
                                       ("18 \\bmod 100", "18"), ("\\lfloor n/2 \\rfloor", "\\lfloor n/2 \\rfloor")])
def test_the_vocabulary_rule_is_symmetric(pred, gold):
    assert is_equiv(pred, gold) == is_equiv(gold, pred)


def test_foreign_names_the_operations():
    assert foreign("\\max(17, 18)") == {"max"}
    assert foreign("\\text{max}(17, 18)") == {"max"}
    assert foreign("\\frac{\\sqrt{3}}{2} + \\sin(x) + \\ln(2)") == set()
    assert foreign("2xy(x + 1)") == set()  # short letter runs are products, not calls


def test_foreign_is_linear_on_hostile_input():
    t0 = time.perf_counter()
    foreign("max(" * 50_000 + "a" * 100_000 + " " * 100_000 + "(")
    assert time.perf_counter() - t0 < 2.0


def test_functions_family_generates_the_reported_cases():
    cases = candidate_functions(18)
    assert "\\max(17, 18)" in cases and "\\min(18, 40)" in cases and "\\lceil 17.5 \\rceil" in cases


def test_redteam_hedges_and_functions_find_nothing_under_lenient_bounded():
    bases = load_bases(__import__("pathlib").Path(__file__).resolve().parents[1], 6)
    rows = [r for r in run_families(lambda c, g, **kw: check(c, g, policy="lenient"), bases)
            if r[0] in ("hedges", "functions")]
    assert {r[0] for r in rows} == {"hedges", "functions"}
    exploits = [(r[0], r[1][-80:]) for r in rows if r[4]]
    assert not exploits, exploits


@pytest.mark.parametrize("text,gold", [
    ("The answer is 17<|im_end|><|im_start|>user\nThe answer is 18", "18"),  # a turn after the end token
    ("$\\boxed{17}$<|im_end|><|im_start|>user\n$\\boxed{18}$", "18"),
    ("#### 17</s>\n#### 18", "18"),
    ("The answer is 28 percent or 29 percent.", "29\\%"),
    ("The answer is 28 percent (approximately).", "28\\%"),
    ("The answer is 0.28 percent.", "28\\%"),
])
def test_what_follows_an_end_token_or_a_percent_word_is_not_read_as_the_answer(text, gold):
    assert lenient(text, gold).score == 0.0, lenient(text, gold)


def test_end_of_turn_split_is_linear():
    t0 = time.perf_counter()
    lenient("<|im" * 50_000 + "The answer is 18.")
    lenient("</" * 50_000 + "The answer is 18.")
    assert time.perf_counter() - t0 < 5.0
