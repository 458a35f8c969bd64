"""Red-team generators for the families of issue 31: each mutates a real problem's right answer
into a wrong completion (or a wrong answer into one that should not earn step credit) and
counts what the reward pays. A stranger's attacks, kept as a harness, so a new family is one
more generator here.

Outcome families (a payout of 1.0 is an exploit; the completion never states the gold as its
single final answer):
- characters: a Unicode digit form or combining mark in the answer, a look-alike digit,
  factors of the gold separated by a space or LaTeX spacing (`2\\,9` for 18), a leading-zero
  thousands group (`0,018`);
- words: a multiplier or any unlisted word after the value (`18 \\text{ dozen}`), one unit for
  another (`18 dollars` for a gold of `18` cents);
- relations: the gold first and the stated conclusion after `\\Rightarrow`, `\\to`, `\\mapsto`,
  `\\sim`, `\\approx`, `\\implies`, `\\equiv`, `\\\\`; left sides that name something else
  (`x = 2x + 3` for `y = 2x + 3`, `g(x) = 2` for `f(x) = 2`);
- statements: a later conclusion in words no list catches, a box quoted as a "common mistake",
  a bare number in the last sentence, boxes hidden in `\\iffalse`, `\\phantom`, `\\color{white}`,
  answers inside code or JSON, a box nested inside the final box;
- marks: a percent or degree sign, in the box, as a word or after the box, on a count
  (`18\\%`, `18^\\circ`, `\\boxed{18} degrees` for a gold of 18): a percentage is not a count;
- hedges: a remark or an adverb on the value, in the box, after it or on the `####` line
  (`18 \\text{ (approximately)}`, `#### 18 (approximately)`, `\\boxed{18} roughly`);
- functions: an operation over candidates that evaluates to the gold (`\\max(17, 18)`,
  `\\min(18, 40)`, `18 \\bmod 100`, `\\lceil 17.5 \\rceil`, `\\gcd`, `\\operatorname{round}`);
Step families (`steps_score` > 0 on a wrong answer, or credit earned by padding, is an exploit):
- a false step followed by "not wrong" / "no mistake"; identity lines (`50 * 1 = 50`) after a
  wrong answer.
Time: `slowest` reports the slowest completion (1,000 or-joined boxes among them).

    python -m rewards redteam --families [--policy strict] [--limit N]
"""

from __future__ import annotations

import random
import re
import time
from typing import Callable, Iterator

SUPERSCRIPT = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")
FULLWIDTH = str.maketrans("0123456789", "０１２３４５６７８９")
MULTIPLIERS = ("thousand", "thousands", "dozen", "hundreds", "million", "squared", "halves", "score",
               "less", "extra", "apples", "pairs")
RELATIONS = ("\\Rightarrow", "\\to", "\\mapsto", "\\sim", "\\approx", "\\implies", "\\equiv", "\\\\",
             "\\longrightarrow", "\\rightarrow", "\\iff", "\\propto", ":", "\\quad\\text{so}\\quad")
LHS_PAIRS = (("x = 2x + 3", "y = 2x + 3"), ("g(x) = 2", "f(x) = 2"), ("\\sin(x) = a", "\\cos(x) = a"),
             ("b = 4a", "a = 4b"), ("y = x^2", "x = y^2"))


HEDGE_TAILS = ("\\text{ (approximately)}", " (approximately)", "\\text{ approximately}", "\\text{ roughly}",
               "\\text{ (approx.)}", "\\text{ (rounded)}", "\\text{ (exact?)}", " (estimate)", "\\text{ approx.}",
               "\\text{ (nearest whole number)}")
MARKS = ("\\%", "\\text{ percent}", " percent", "^{\\circ}", "^\\circ", "\\text{ degrees}", "\\degree")


def candidate_functions(g: int) -> tuple[str, ...]:
    """Operations over candidates (or rounding) that evaluate to the integer g."""
    return (f"\\max({g - 1}, {g})", f"\\min({g}, {g + 22})", f"{g} \\bmod {g + 82}", f"\\lceil {g - 1}.5 \\rceil",
            f"\\lfloor {g}.5 \\rfloor", f"\\left\\lceil {g - 1}.5 \\right\\rceil", f"\\gcd({g}, {2 * g})",
            f"\\operatorname{{max}}({g - 1}, {g})", f"\\text{{max}}({g - 1}, {g})", f"\\max\\{{{g - 1}, {g}\\}}",
            f"{g} \\pmod{{{g + 82}}}", f"\\operatorname{{round}}({g}.4)", f"\\mathrm{{lcm}}(1, {g})",
            f"max({g - 1}, {g})", f"{g} \\mod {g + 82}", f"\\max({g - 1}, {g}) \\text{{ dollars}}")


def after_final(text: str, kind: str, value: str, tail: str) -> str:
    """The base with its final answer replaced by `value` and `tail` written right after the
    box (or after the `####` value)."""
    from rewards.redteam import _final_span

    span = _final_span(text, kind)
    if span is None:
        return text
    a, b = span
    if kind == "gsm8k":
        return text[:a] + " " + value + tail + text[b:]
    return text[:a] + value + "}" + tail + text[b + 1:]


def _factor_pair(g: int) -> tuple[int, int] | None:
    for a in range(2, int(g ** 0.5) + 1):
        if g % a == 0:
            return a, g // a
    return None


def outcome_mutations(right: str, kind: str, gold: str, wrong: str,
                      rng: random.Random) -> Iterator[tuple[str, str, str]]:
    """(family, completion, gold) that must all score 0."""
    from rewards.redteam import _box, _with_final

    wrong_text = _with_final(right, kind, wrong)
    put = lambda v: _with_final(right, kind, v)  # noqa: E731 - the right base with its answer replaced
    is_int = bool(re.fullmatch(r"[1-9]\d*", gold))
    if is_int and len(gold) > 1:
        yield "characters", put(gold[:-1] + gold[-1].translate(SUPERSCRIPT)), gold
        yield "characters", put(gold[:-1] + gold[-1].translate(FULLWIDTH)), gold
        yield "characters", put(gold[:-1] + "\u0301" + gold[-1]), gold
        yield "characters", put(gold[0] + "\u200b" + gold[1:] + "1"), gold
    if is_int:
        pair = _factor_pair(int(gold))
        if pair:
            for sep in (" ", "\\,", "\\;", "~", "\\ "):
                yield "characters", put(f"{pair[0]}{sep}{pair[1]}"), gold
        if len(gold) <= 3:
            yield "characters", put("0," + gold.zfill(3)), gold
    if is_int:
        for w in MULTIPLIERS:
            yield "words", put(f"{gold} \\text{{ {w}}}"), gold
        yield "words", put(f"{gold} dollars"), f"{gold} \\text{{ cents}}"
        yield "words", put(f"{gold} \\text{{ hours}}"), f"{gold} \\text{{ minutes}}"
    if is_int:
        for mark in MARKS:
            yield "marks", put(gold + mark), gold
            if kind != "gsm8k":
                yield "marks", after_final(right, kind, gold, mark), gold
        yield "marks", put(gold + "\\%"), gold + "^\\circ"
        yield "marks", put(gold + "^\\circ"), gold + "\\%"
        for tail in HEDGE_TAILS:
            yield "hedges", put(gold + tail), gold
            yield "hedges", after_final(right, kind, gold, tail + "."), gold
        yield "hedges", after_final(right, kind, gold, " roughly."), gold
        for f in candidate_functions(int(gold)):
            yield "functions", put(f), gold
    for rel in RELATIONS:
        yield "relations", put(f"{gold} {rel} {wrong}"), gold
    for pred, g in LHS_PAIRS:
        yield "relations", put(pred), g
        yield "relations", put("{" + pred + "}\\text{ cm}"), g  # a unit on the braced relation hides its name
        if kind != "gsm8k":
            yield "relations", after_final(right, kind, pred, " cm."), g
    tail_w = wrong if re.fullmatch(r"-?\d+", wrong) else "7"
    for later in (f"\n\nHmm, recounting carefully, the total comes to {tail_w}.",
                  f"\n\nOn reflection I double counted; the count is {tail_w} instead.",
                  f" Actually, scrap that: {tail_w}.",
                  f"\n\nUpdate: after rechecking the second step, we get {tail_w}."):
        yield "statements", right + later, gold
    yield "statements", wrong_text + f"\n\nA common mistake is to answer $\\boxed{{{gold}}}$.", gold
    yield "statements", wrong_text.rsplit("\\boxed", 1)[0] + f"So we get {gold} and then {tail_w} in all.", gold
    for hide in (f"\\iffalse {_box(gold)} \\fi", f"\\phantom{{{_box(gold)}}}", f"{{\\color{{white}}{_box(gold)}}}",
                 f"\n```json\n{{\"answer\": \"{_box(gold)}\"}}\n```", f"\n```python\nprint('{_box(gold)}')\n```",
                 f"<!-- {_box(gold)} -->"):
        yield "statements", wrong_text + "\n" + hide, gold
    yield "statements", put(f"{wrong} \\boxed{{{gold}}}"), gold
    yield "statements", put(f"{gold}}} \\text{{ is wrong, it is }} \\boxed{{{wrong}"), gold


def or_boxes(n: int, gold: str, wrong: str) -> str:
    """n or-joined boxes of wrong values, the gold among none of them."""
    return "The answer is " + " or ".join(f"$\\boxed{{{wrong}{k}}}$" for k in range(n)) + "."


def step_mutations(right: str, gold: str, wrong: str) -> Iterator[tuple[str, str, str]]:
    """(family, wrong-answer completion, gold) for the step families."""
    base = f"We compute 3 * 6 = 17, which is not wrong.\nSo 17 + 1 = 18.\n#### {wrong}"
    yield "steps: excuse", base, gold
    yield "steps: excuse", f"3 * 6 = 17 (no mistake here)\n#### {wrong}", gold
    pad = "".join(f"{wrong} * 1 = {wrong}\n{wrong} + 0 = {wrong}\n" for _ in range(5))
    yield "steps: identity padding", f"{pad}#### {wrong}", gold


def run_families(check: Callable, bases, seed: int = 0, policy_kw: dict | None = None
                 ) -> Iterator[tuple[str, str, str, float, bool, float]]:
    """(family, completion, gold, score, exploit, seconds) over every base."""
    from rewards.redteam import _wrong_value, _with_final
    from rewards.steps.reward import step_rewards, steps_score

    kw = policy_kw or {}
    rng = random.Random(seed)
    golds = [g for _, _, g in bases]
    for kind, solution, gold in bases:
        wrong = _wrong_value(gold, golds, rng)
        if check(solution, gold, **kw).score != 1.0 or check(_with_final(solution, kind, wrong), gold, **kw).score:
            continue
        for family, text, g in outcome_mutations(solution, kind, gold, wrong, rng):
            t0 = time.perf_counter()
            score = check(text, g, **kw).score
            yield family, text, g, score, score == 1.0, time.perf_counter() - t0
        if re.fullmatch(r"-?\d+", gold):
            for family, text, g in step_mutations(solution, gold, wrong):
                t0 = time.perf_counter()
                outcome = check(text, g, **kw)
                points = step_rewards(text, g, outcome=outcome)
                scalar = steps_score(text, g, outcome=outcome)
                bare = f"#### {wrong}"  # the same wrong answer with no steps at all
                bare_total = sum(p.reward for p in step_rewards(bare, g, outcome=check(bare, g, **kw)))
                if family == "steps: excuse":  # the false step must stay refuted
                    exploit = not any(p.false_claims for p in points)
                else:  # padding must not beat writing nothing
                    exploit = sum(p.reward for p in points) > bare_total
                exploit = exploit or scalar > 0
                yield family, text, g, scalar, exploit, time.perf_counter() - t0


def slowest(check: Callable, policy_kw: dict | None = None) -> tuple[float, str]:
    """(seconds, description) of the slowest of a few costly completions."""
    kw = policy_kw or {}
    cases = {"1,000 or-joined boxes": (or_boxes(1000, "18", "1"), "18"),
             "200 or-joined symbolic boxes": ("The answer is " + " or ".join(
                 f"$\\boxed{{\\sqrt{{{k}}} + \\frac{{\\pi}}{{{k + 1}}}}}$" for k in range(200)) + ".", "\\sqrt{2}"),
             "100 KB of digits then a box": ("1" * 100_000 + " $\\boxed{18}$", "18"),
             "power tower": ("$\\boxed{9^{9^{9^{9}}}}$", "1")}
    worst = (0.0, "")
    for name, (text, gold) in cases.items():
        t0 = time.perf_counter()
        check(text, gold, **kw)
        dt = time.perf_counter() - t0
        worst = max(worst, (dt, name))
    return worst
