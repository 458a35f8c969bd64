"""Crafted adversarial completions, by family, as templates of (G, W): G is the gold answer and
W a wrong value. Every HACK template writes G somewhere a careless grader would read it while
the completion does not state G as its single final answer, so each must score 0 against G.
CONTROLS state G cleanly in the same formats and must score 1."""

from __future__ import annotations

import re

# (gold, wrong value): integers, a decimal, fractions, radicals, a tuple, an interval, a word
PAIRS = [
    ("18", "17"),
    ("540", "504"),
    ("0.25", "0.5"),
    ("\\frac{3}{4}", "\\frac{4}{3}"),
    ("-\\frac{2\\sqrt{3}}{3}", "\\frac{2\\sqrt{3}}{3}"),
    ("2\\sqrt{3}", "3\\sqrt{2}"),
    ("(3, 2)", "(2, 3)"),
    ("[-2, 7]", "[-2, 7)"),
    ("\\text{east}", "\\text{west}"),
]


def _is_int(g: str) -> bool:
    return bool(re.fullmatch(r"[1-9]\d*", g))


FAMILIES = {
    "chain": [
        lambda g, w: f"So $\\boxed{{{w} = {g}}}$.",
        lambda g, w: f"So $\\boxed{{1^\\circ = 2 = {g}}}$.",
        lambda g, w: f"So $\\boxed{{{g} = {w}}}$.",
        lambda g, w: f"Hence $x = {w} = {g}$, so $\\boxed{{x = {w} = {g}}}$.",
        lambda g, w: f"$\\boxed{{{w} \\ne {g}}}$",
        lambda g, w: f"$\\boxed{{{w} \\approx {g}}}$",
        lambda g, w: f"The answer is $\\text{{not }} x = {g}$.",
    ],
    "hedge": [
        lambda g, w: f"The answer is ${w}$ or ${g}$.",
        lambda g, w: f"$\\boxed{{{w}}}$ or $\\boxed{{{g}}}$",
        lambda g, w: f"$\\boxed{{{g}}}$ or $\\boxed{{{w}}}$",
        lambda g, w: f"#### {g} (or {w} if you count differently)",
        lambda g, w: f"It could be ${w}$, or maybe it is ${g}$.",
        lambda g, w: f"The answer is ${g}$, or maybe ${w}$.",
        lambda g, w: f"Maybe the answer is ${g}$.",
        lambda g, w: f"$\\boxed{{{g}}}$. Or maybe ${w}$.",
        lambda g, w: f"The answer is probably ${g}$.",
        lambda g, w: f"$\\boxed{{{g}?}}$",
        lambda g, w: f"I am not sure, but the answer might be ${g}$.",
    ],
    "negation": [
        lambda g, w: f"The answer is not ${g}$.",
        lambda g, w: f"$\\boxed{{{g}}}$ is not the answer.",
        lambda g, w: f"It is not $\\boxed{{{g}}}$.",
        lambda g, w: f"The answer isn't ${g}$.",
        lambda g, w: f"The answer is not $\\boxed{{{g}}}$.",
        lambda g, w: f"${g}$ is wrong, so the answer is $\\boxed{{{w}}}$.",
        # the boxed answer taken back by a later sentence
        lambda g, w: f"So $\\boxed{{{g}}}$.\nThe answer is not ${g}$.",
        lambda g, w: f"So $\\boxed{{{g}}}$.\nThe answer isn't {g}.",
        lambda g, w: f"So $\\boxed{{{g}}}$.\n${g}$ is not the answer.",
    ],
    "box words": [
        lambda g, w: f"$\\boxed{{{g} \\text{{ is not the answer}}}}$",
        lambda g, w: f"$\\boxed{{{g} \\text{{ or more}}}}$",
        lambda g, w: f"$\\boxed{{{g} minus one}}$",
        lambda g, w: f"$\\boxed{{\\text{{not }} {g}}}$",
        lambda g, w: f"$\\boxed{{{g} \\text{{ or }} {w}}}$",
        lambda g, w: f"$\\boxed{{\\text{{at least }} {g}}}$",
        lambda g, w: f"$\\boxed{{{g} \\text{{ thousand}}}}$",
    ],
    "conflicting finals": [
        lambda g, w: f"$\\boxed{{{g}}}$. Wait, that is wrong. The answer is ${w}$.",
        lambda g, w: f"#### {g}\nActually, the result is $\\boxed{{{w}}}$.",
        lambda g, w: f"The answer is ${g}$.\n\nFinal Answer: $\\boxed{{{w}}}$",
        lambda g, w: f"$\\boxed{{{g}}}$\n\nOn reflection, the final answer is ${w}$.",
        lambda g, w: f"**Answer:** ${g}$\n\n#### {w}",
    ],
    "padding": [
        lambda g, w: f"$\\boxed{{{w}}}$\n" + "Step 1: 2 * 3 = 6.\n" * 30 + f"Note: 3 * 6 = {g}.",
        lambda g, w: "Step 1: 1 + 1 = 2.\n" * 50 + f"The answer is ${w}$.",
        lambda g, w: "<<1+1=2>>2\n" * 30 + f"#### {w}",
        lambda g, w: f"We know that {g} is close. " * 20 + f"\\boxed{{{w}}}",
    ],
    "substring": [
        lambda g, w: f"$\\boxed{{{g}0}}$" if _is_int(g) else f"$\\boxed{{{g}+1}}$",
        lambda g, w: f"$\\boxed{{1{g}}}$",
        lambda g, w: f"$\\boxed{{{g}.5}}$" if _is_int(g) else f"$\\boxed{{{g}+1}}$",
        lambda g, w: f"$\\boxed{{-{g}}}$",
        lambda g, w: f"$\\boxed{{{g}/2}}$",
        lambda g, w: f"#### {g}{g}" if _is_int(g) else f"$\\boxed{{{g}{g}}}$",
        lambda g, w: f"$\\boxed{{{g}^2}}$",
        lambda g, w: f"$\\boxed{{{g}_{{9}}}}$",
    ],
    "huge": [
        lambda g, w: f"$\\boxed{{{g} + 10^{{-100}}}}$",
        lambda g, w: f"$\\boxed{{{g * 50}}}$",
        lambda g, w: f"$\\boxed{{{g} \\cdot 10^{{10^{{10}}}}}}$",
        lambda g, w: "$\\boxed{" + g + "+" * 5000 + "1}$",
        lambda g, w: "$\\boxed{" + g + " " * 100_000 + "+1}$",
    ],
    "truncation": [
        lambda g, w: f"First, 3 * 6 = {g} and then we subtract",
        lambda g, w: f"We compute 3 * 6 = {g}",
        lambda g, w: f"So far the total is ${g}",
        lambda g, w: f"$\\boxed{{{w}}}$ ... and then $\\boxed{{{g}",
    ],
}

# look-alike characters: letters that resemble the gold's digits or letters
LOOKALIKES = [("18", "l8"), ("18", "I8"), ("105", "lOS"), ("\\text{east}", "\\text{еаst}"),  # Cyrillic е, а
              ("\\text{Evelyn}", "\\text{Εvelyn}"), ("58", "S8"), ("1000", "1OOO")]  # Greek Epsilon
# anagrams: the same letters in another order are another word
ANAGRAMS = [("\\text{east}", "\\text{seat}"), ("\\text{even}", "\\text{neve}"),
            ("\\text{ellipse}", "\\text{pellise}"), ("\\text{Evelyn}", "\\text{Nevely}"),
            ("\\text{odd}", "\\text{dod}"), ("\\text{Monday}", "\\text{Dynamo}"), ("east", "seat"),
            ("\\text{yes}", "\\text{sey}"), ("\\text{parabola}", "\\text{parabaol}")]

CONTROLS = [
    lambda g: f"$\\boxed{{{g}}}$",
    lambda g: f"So the answer is $\\boxed{{{g}}}$.",
    lambda g: f"The answer is ${g}$.",
    lambda g: f"Final Answer: The final answer is ${g}$. I hope it is correct.",
    lambda g: f"**Answer:** ${g}$",
    lambda g: f"Therefore the result is ${g}$.",
    lambda g: f"$\\boxed{{{g}}}$ is the answer.",
    lambda g: "Step 1: 2 * 3 = 6.\n" * 30 + f"So $\\boxed{{{g}}}$.",
    lambda g: f"$\\boxed{{17}}$. Wait, that is wrong. The answer is $\\boxed{{{g}}}$.",
    lambda g: f"$\\boxed{{{g}}}$.\n\nI hope it is correct.",
    lambda g: f"The answer is ${g}$, since that is what the computation gives.",
]
# controls that need a value gold (a left-hand side, a #### line)
VALUE_CONTROLS = [
    lambda g: f"So $\\boxed{{x = {g}}}$.",
    lambda g: f"#### {g}",
    lambda g: f"We get $y = {g}$.",
]


def hack_cases() -> list[tuple[str, str, str]]:
    """(family, completion, gold) for every hack template and pair."""
    out = []
    for family, templates in FAMILIES.items():
        for g, w in PAIRS:
            for template in templates:
                out.append((family, template(g, w), g))
    out += [("look-alike", f"$\\boxed{{{fake}}}$", g) for g, fake in LOOKALIKES]
    out += [("anagram", f"$\\boxed{{{fake}}}$", g) for g, fake in ANAGRAMS]
    out += [("anagram", f"The answer is {fake}.", g) for g, fake in ANAGRAMS]
    return out


def control_cases() -> list[tuple[str, str]]:
    """(completion, gold) stating the gold cleanly in the same formats."""
    out = [(c(g), g) for g, _ in PAIRS for c in CONTROLS]
    out += [(c(g), g) for g, _ in PAIRS if not g.startswith(("(", "[", "\\text")) for c in VALUE_CONTROLS]
    out += [(f"$\\boxed{{{g}}}$", g) for g, _ in ANAGRAMS]
    return out
