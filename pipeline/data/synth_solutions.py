"""Reference solutions with a calculator step per line, parsed and corrupted for the SFT warm start.

A solution (gsm-synth's, ``synth.format_solution``, or GSM8K's) is read line by line: a line holding
a calculator step ``<<a op b=c>>c`` (``synth.format_step``) becomes a step, a gsm-synth distractor
line ``same: <value>`` a value, any other line stays text. Steps are then recomputed in order
(``_replay``) with some results made wrong, every later step continuing from the wrong value, and
written back; a line that is not changed is written back byte for byte.

Two corruptions (``sft.corrupt_mode``, docs/cpu_default.md):
- ``slip``: in about ``sft.corrupt_frac`` of the solutions one step's result is off by 1, 2 or 10
  and the error is carried forward, so the ``#### answer`` is the propagated one. Exactly one step
  is wrong, so process rewards can point at it while the outcome reward only sees a wrong answer.
- ``carry``: each addition with a carry loses it and each subtraction with a borrow keeps the tens
  (``synth.buggy_result``), each with probability ``sft.corrupt_frac``: a systematic error.
"""

from __future__ import annotations

import random
import re

from pipeline.data.synth import STEP_RE, apply, buggy_result, format_step, has_bug_site

# A line holding a step: the text before, the step (STEP_RE's groups), its result again, the text after.
# With a greedy prefix the last step of the line is the one taken.
LINE_RE = re.compile(rf"^(.*){STEP_RE.pattern}(\d+)(.*)$")
SAME_RE = re.compile(r"^same: (\d+)$")  # a gsm-synth distractor line (synth.format_solution)
ANSWER_RE = re.compile(r"####\s*(-?[\d,]*\.?\d+)")  # the final answer line, rewritten to the new result
DELTAS = (1, -1, 2, -2, 10, -10)  # how far a slip is off


def calc(op: str, a: int, b: int) -> int | None:
    """``a op b`` as a solution may write it: None for a negative difference or an inexact division."""
    if op == "-" and a < b or op == "/" and (not b or a % b):
        return None
    return apply(op, a, b)


def _step(line: str) -> list | None:
    """``[prefix, a, op, b, result, suffix]`` when ``line`` holds a step written exactly as
    ``format_step`` writes it (so writing it back gives the same line), else None."""
    m = LINE_RE.match(line)
    if not m:
        return None
    pre, a, op, b, c, again, post = m.groups()
    a, b, c = int(a), int(b), int(c)
    return [pre, a, op, b, c, post] if line == pre + format_step(a, op, b, c) + post and again == str(c) else None


def parse(solution: str) -> list:
    """Per line: ``[prefix, a, op, b, result, suffix]`` for a calculator step, the value of a
    ``same: <value>`` line (gsm-synth distractors), or the line's text."""
    items: list = []
    for line in solution.split("\n"):
        step = _step(line)
        if step is not None:
            items.append(step)
            continue
        m = SAME_RE.match(line)
        items.append(int(m.group(1)) if m else line)
    return items


def _replay(items: list, result_of) -> tuple[list, int] | None:
    """The steps recomputed in order: a step that continued from the previous result continues
    from the new one, and writes ``result_of(k, a, op, b)`` (k: its index among the steps; None =
    impossible, e.g. a negative difference); ``same`` lines follow. (items, last result) or None."""
    out: list = []
    old = new = None  # the previous step's result before and after the replay
    k = 0
    for item in items:
        if isinstance(item, list):
            pre, a, op, b, c, post = item
            a = new if old is not None and a == old else a
            result = result_of(k, a, op, b)
            if result is None or result < 0:
                return None
            out.append([pre, a, op, b, result, post])
            old, new, k = c, result, k + 1
        elif isinstance(item, int):
            out.append(new if old is not None and item == old else item)
        else:
            out.append(item)
    return (out, new) if k else None


def render(items: list, answer: int) -> str:
    """``parse``'s items written back as a solution whose final answer is ``answer``."""
    lines = [f"{i[0]}{format_step(*i[1:5])}{i[5]}" if isinstance(i, list)
             else f"same: {i}" if isinstance(i, int) else i for i in items]
    return ANSWER_RE.sub(f"#### {answer}", "\n".join(lines))


def corrupt_solution(solution: str, rng: random.Random) -> str | None:
    """``solution`` with one step's result wrong (off by 1, 2 or 10) and the error carried
    forward, or None."""
    items = parse(solution)
    n = sum(isinstance(i, list) for i in items)
    for _ in range(10 if n else 0):
        j, delta = rng.randrange(n), rng.choice(DELTAS)
        replayed = _replay(items, lambda k, a, op, b: None if calc(op, a, b) is None
                           else calc(op, a, b) + (delta if k == j else 0))
        if replayed is not None:
            return render(*replayed)
    return None


def buggy_solution(solution: str, rng: random.Random, frac: float) -> str | None:
    """``solution`` as a student with the forgotten-carry / forgotten-borrow bugs writes it: each
    addition with a carry loses it (-10) and each subtraction with a borrow keeps the tens (+10),
    each with probability ``frac``; later steps continue from the buggy values. None if unchanged."""
    def result_of(k, a, op, b):
        right = calc(op, a, b)
        if right is None or not has_bug_site(op, a, b) or rng.random() >= frac:
            return right
        return buggy_result(op, a, b)

    replayed = _replay(parse(solution), result_of)
    if replayed is None:
        return None
    text = render(*replayed)
    return text if text != solution else None


def corrupt_records(records: list[dict], frac: float, seed: int, mode: str = "slip") -> tuple[list[dict], int]:
    """Copies of ``records`` with corrupted solutions; (records, how many were changed). ``slip``:
    about ``frac`` of the solutions get one wrong step; ``carry``: every carry / borrow step is
    done wrong with probability ``frac`` (``buggy_solution``)."""
    rng = random.Random(seed)
    out, count = [], 0
    for r in records:
        bad = None
        if mode == "carry" and frac > 0:
            bad = buggy_solution(r["solution"], rng, frac)
        elif mode == "slip" and frac > 0 and rng.random() < frac:
            bad = corrupt_solution(r["solution"], rng)
        if bad is not None:
            r, count = {**r, "solution": bad, "corrupted": True}, count + 1
        out.append(r)
    return out, count


__all__ = ["buggy_solution", "calc", "corrupt_records", "corrupt_solution", "parse", "render"]
