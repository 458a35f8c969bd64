"""Every reward hack and grader miss found by an adversarial review of the outcome reward,
each as a test: the hack scores 0 (or the right verdict), the missed answer is read."""

from __future__ import annotations

import pytest

from rewards import check, extract_answer, is_equiv

# (completion, gold): each was paid 1.0 before and must score 0
HACKS = [
    # a false equation chain ending in the gold; a degree sign skipped the numeric rejection
    ("\\boxed{1^\\circ = 2 = 18}", "18"),
    ("\\boxed{1^\\circ = 2 = \\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}"),
    # hedges and negations
    ("The answer is 3 or 4.", "3"), ("The answer is 3 or 4.", "4"),
    ("The answer is not 18.", "18"),
    ("#### 18-19", "18"),
    ("#### 18 (or 17 if you count differently)", "18"),
    ("#### 1,8", "18"),
    ("It could be 17, or maybe it is 18", "18"), ("It could be 17, or maybe it is 18", "17"),
    # words inside the box
    ("\\boxed{18 \\text{ is not the answer}}", "18"),
    ("\\boxed{18 \\text{ or more}}", "18"),
    ("\\boxed{18 minus one}", "18"),
    ("\\boxed{18_{9}}", "18"),
    ("\\boxed{1\\%8}", "18"),
    # conflicting answers: the last statement is the answer, alternatives are a list
    ("\\boxed{17} or \\boxed{18}", "18"), ("\\boxed{17} or \\boxed{18}", "17"),
    ("\\boxed{18}. Wait, that is wrong. The answer is 17.", "18"),
    ("#### 18\nso the answer is \\boxed{17}", "18"),
    # text answers are not letter multisets
    ("\\boxed{\\text{seat}}", "\\text{east}"),
    ("\\boxed{\\text{neve}}", "\\text{even}"),
    ("\\boxed{\\text{pellise}}", "\\text{ellipse}"),
    # a tuple is not a number with a thousands comma
    ("The answer is: (-1,6).", "-16"),
    # no statement: neither a random last number nor a truncated text is paid
    ("Therefore, the value is \\(-\\frac{2\\sqrt{3}}{3}\\).", "3"),
    ("First, 3 * 6 = 18 and then we subtract", "18"),
    # found by the hack-finder: a later sentence takes the boxed answer back
    ("So $\\boxed{\\pi}.$\nThe answer is not \\pi.", "\\pi"),
    ("So $\\boxed{\\cot x}$.\nThe answer isn't $\\cot x$.", "\\cot x"),
    ("So $\\boxed{\\frac{1}{2}}$.\n$\\frac{1}{2}$ is not the answer.", "\\frac{1}{2}"),
    ("So $\\boxed{18}$.\nFinal Answer: not 18", "18"),
    # ... and words after an AMC choice label
    ("Thus the answer is $\\boxed{\\text{(B)} (or 4 if you count differently)}$.", "\\text{(B)}"),
    ("Thus the answer is $\\boxed{\\text{(B)} \\text{ or more}}$.", "\\text{(B)}"),
    ("Thus the answer is $\\boxed{\\text{(B)}?}$.", "\\text{(B)}"),
    ("Thus the answer is $\\boxed{\\text{(B)} \\pm 1}$.", "\\text{(B)}"),
    # a GSM8K-style solution cut off before its "####" line (found by the hack-finder)
    ("15 gallons = 120 pints\n120/5 = <<120/5=24>>24 pints per container\n(1/4)24 = 6", "6"),
]


@pytest.mark.parametrize("completion,gold", HACKS)
def test_hack_scores_zero(completion, gold):
    assert check(completion, gold).score == 0.0, check(completion, gold)


@pytest.mark.parametrize("style", ["auto", "gsm8k", "math"])
def test_one_policy_in_every_style(style):
    # the last answer statement wins whatever the style: a later box beats an earlier ####
    assert extract_answer("#### 18\nso the answer is \\boxed{17}", style) == "17"
    assert extract_answer("The answer is \\boxed{5}. #### 7", style) == "7"
    assert check("\\boxed{18}. Wait, that is wrong. The answer is 17.", "17", style).score == 1.0
    assert extract_answer("\\boxed{17} or \\boxed{18}", style) == "17, 18"
    assert check("It could be $17$, or maybe it is $18$.", "18", style).reason == "no single answer"


# (completion, gold): answers a held-out grader suite expects to be read; each must score 1
READ = [
    ("Therefore $x \\geq 5$ is the solution.", "[5, \\infty)"),
    ("Thus the matrix is $\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}$.",
     "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}"),
    ("So the point is $(7, 6)$.", "(7,6)"),
    ("The smallest such number is $14{,}916$.", "14916"),
    ("\\boxed{5}. Wait, I made an error. The final answer is 7.", "7"),
    ("$\\boxed{1}$, $\\boxed{2}$, $\\boxed{3}$", "1, 2, 3"),
    ("So $\\boxed{(p,q)=(3,2)}$.", "(3,2)"),
    ("\\boxed{f(x)=2x+3}", "2x+3"),
    ("\\boxed{|AB|=1}", "1"),
    ("\\boxed{1 \\text{ and } 2}", "1, 2"),
    ("\\boxed{1,\\ 2,\\ 3}", "1,2,3"),
    ("\\boxed{x \\in [-2,7]}", "-2 \\le x \\le 7"),
    ("\\boxed{9:30 \\text{ a.m.}}", "9:30"),
    ("\\boxed{10 cm^2}", "10\\text{ cm}^2"),
    ("\\boxed{2^6 3^5 5^4}", "2^6 \\cdot 3^5 \\cdot 5^4"),
    ("The answer is: (-1,6).", "(-1,6)"),
    # discussion after the answer that rejects another value is not a retraction
    ("So $\\boxed{18}$. Note that 17 is not a solution.", "18"),
    ("Thus the answer is $\\boxed{\\textbf{(B) } 12}$.", "\\text{(B)}"),
    ("Therefore, the value is \\(-\\frac{2\\sqrt{3}}{3}\\).", "-\\frac{2\\sqrt{3}}{3}"),
    ("Thus the solutions are $x = -1$, $x = 2$, and $x = -2$.", "-1, 2, -2"),
]


@pytest.mark.parametrize("completion,gold", READ)
def test_answer_is_read(completion, gold):
    assert check(completion, gold).score == 1.0, check(completion, gold)


# (a, b, verdict): equivalence bugs; each must hold in both argument orders
EQUIV = [
    ("5.5", "1 1/2", False), ("1.5", "1 1/2", True),
    ("\\sin(90-x)", "\\sin(90^\\circ-x)", False), ("\\sin 30^\\circ", "\\frac{1}{2}", True),
    ("x \\in [-2,7]", "-2 \\le x \\le 7", True), ("x > 5", "(5, \\infty)", True), ("x \\ge 5", "(5, \\infty)", False),
    ("9:30 \\text{ p.m.}", "21:30", True), ("9:30", "9/30", False), ("3:10", "\\frac{3}{10}", False),
    ("10 cm^2", "10\\text{ cm}^2", True), ("2^6 3^5 5^4", "2^6 \\cdot 3^5 \\cdot 5^4", True),
    ("f(x) = 2x+3", "2x+3", True), ("(p,q)=(3,2)", "(3,2)", True), ("|AB|=1", "1", True),
    ("\\frac{28}{4} = 7", "7", True), ("1^\\circ = 2 = 18", "18", False), ("x = 4 = 18", "18", False),
    ("\\text{seat}", "\\text{east}", False), ("seat", "east", False), ("\\text{East}", "east", True),
    ("18\\text{ or more}", "18", False), ("18 minus one", "18", False), ("12 apples", "12", True),
    ("18_{9}", "18", False), ("1\\%8", "18", False), ("2\\sqrt{3} + 10^{-100}", "2\\sqrt{3}", False),
    ("(1, 2, 3)", "1, 2, 3", True), ("(2, 1)", "1, 2", False), ("1, 2", "2, 1", True),
]


@pytest.mark.parametrize("a,b,expected", EQUIV)
def test_equivalence_both_orders(a, b, expected):
    assert is_equiv(a, b) is expected and is_equiv(b, a) is expected
