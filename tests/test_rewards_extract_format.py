"""Answer extraction per style and the format bonus, including the answer-repeating hacks."""

from __future__ import annotations

import pytest

from rewards import check, extract_answer, format_reward, score_completion

SYNTH = "12 + 5 = <<12+5=17>>17\n17 * 3 = <<17*3=51>>51\n#### 51"

EXTRACT = [
    (SYNTH, "gsm8k", "51"),
    (SYNTH, "auto", "51"),
    ("so the total is 1,234 dollars.\n#### 1,234", "gsm8k", "1234"),
    ("#### $1,000", "gsm8k", "1000"),
    ("The answer is 42.", "gsm8k", "42"),
    ("The answer is: -3", "auto", "-3"),
    ("She has 5 apples and then buys 7 more, so 12.", "gsm8k", "12"),  # no marker: last sentence
    ("She has 5 apples and then buys 7 more, so 12", "gsm8k", None),   # cut off mid-sentence
    ("no numbers at all", "gsm8k", None),
    ("So the area is $\\frac{8\\pi}{5}$ square units.", "math", "\\frac{8\\pi}{5}"),  # not "5"
    ("Thus the solutions are $x = -1$, $x = 2$, and $x = -2$.", "auto", "x = -1, x = 2, x = -2"),
    ("Therefore, $x \\geq 5$ is the solution.", "auto", "x \\geq 5"),
    ("We get $14{,}916$.", "auto", "14{,}916"),
    ("The answer is: (-1,6).", "auto", "(-1,6)"),                       # a pair, not -16
    ("A: 90,000", "gsm8k", "90000"),
    # the last answer statement wins, in every style
    ("\\boxed{18}. Wait, that is wrong. The answer is 17.", "math", "17"),
    ("#### 18\nActually \\boxed{17}", "gsm8k", "17"),
    ("The answer is $\\boxed{5}$. #### 7", "gsm8k", "7"),
    ("The answer is $\\boxed{5}$. #### 7", "math", "7"),
    # several boxes side by side are one answer; "or" between equal forms counts once
    ("$\\boxed{1}$, $\\boxed{2}$ and $\\boxed{3}$", "auto", "1, 2, 3"),
    ("$\\boxed{x+11}$ or $\\boxed{11+x}$", "auto", "x+11"),
    # hedges, negations, alternatives: no single answer
    ("The answer is not 18.", "auto", None),
    ("#### 18 (or 17 if you count differently)", "gsm8k", None),
    ("It could be 17, or maybe it is 18.", "gsm8k", None),
    ("\\boxed{18} is not the answer.", "math", None),
    ("\\boxed{18}. Or maybe 17.", "math", None),
    ("Maybe the answer is 18.", "auto", None),
    ("\\boxed{17} \\boxed{18", "math", None),                          # the final box never closes
    ("so $x = \\boxed{\\frac{1}{2}}$.", "math", "\\frac{1}{2}"),
    ("\\boxed{1} then \\boxed{\\{1, \\{2\\}\\}}", "math", "\\{1, \\{2\\}\\}"),
    ("\\fbox{7}", "auto", "7"),
    ("Final Answer: The final answer is $\\frac{3}{4}$. I hope it is correct.", "math", "\\frac{3}{4}"),
    ("**Answer:** $\\sqrt{2}$", "math", "\\sqrt{2}"),
    ("the result is 5", "math", None),  # math style needs a box or a marker
    ("\\boxed{unclosed", "math", None),
]


@pytest.mark.parametrize("text,style,expected", EXTRACT)
def test_extract(text, style, expected):
    assert extract_answer(text, style) == expected


def test_extract_reads_the_whole_text():
    # answers far from the end are found (some checkers read only the last 300 characters)
    text = "The answer is 17.\n" + "Let me double-check the work above. " * 50
    assert extract_answer(text, "gsm8k") == "17"


def test_unknown_style_raises():
    with pytest.raises(ValueError, match="gsm8k"):
        extract_answer("#### 1", "latex")


def test_check_reasons():
    assert check(SYNTH, "51", "gsm8k").reason == ""
    assert check("nothing here", "51", "math").reason == "no answer found"
    assert check("#### 50", "51").reason == "not equal"
    assert check("#### 50", "51").pred == "50"
    assert score_completion("\\boxed{\\dfrac{1}{2}}", "0.5") == 1.0


FORMAT = [
    (SYNTH, "gsm8k", 1.0),
    (SYNTH + "\n\n", "gsm8k", 1.0),
    ("#### 1,234", "gsm8k", 1.0),
    (SYNTH + "\n#### 51", "gsm8k", 0.0),            # repeated answer block
    ("\n".join([SYNTH] * 20), "gsm8k", 0.0),        # hack: repeat everything
    (SYNTH + "\nso that is it", "gsm8k", 0.0),      # text after the answer
    ("#### 51 apples", "gsm8k", 0.0),
    ("the answer is 51", "gsm8k", 0.0),
    ("so the answer is $\\boxed{51}$.", "math", 1.0),
    ("\\[\\boxed{\\frac{1}{2}}\\]", "math", 1.0),
    ("\\boxed{51} \\boxed{51}", "math", 0.0),
    ("\\boxed{51}\nand more words", "math", 0.0),
    ("\\boxed{}", "math", 0.0),
    ("\\boxed{51", "math", 0.0),
    ("\\boxed{51}", "auto", 1.0),
    ("#### 51", "auto", 1.0),
]


@pytest.mark.parametrize("text,style,expected", FORMAT)
def test_format_reward(text, style, expected):
    assert format_reward(text, style) == expected
