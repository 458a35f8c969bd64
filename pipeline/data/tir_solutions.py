"""Reference solutions that compute with the tool, for the SFT warm start of tool-integrated reasoning.

A solution whose calculator steps form one chain (each step continues from the previous result, as in
every gsm-synth solution, ``synth.format_solution``) is rewritten as a short ```` ```python ```` block
that replays the chain, the ```` ```output ```` block with what that code prints, and the final answer:

    ```python
    x = 1234
    x = x * 56
    x = x + 789
    print(x)
    ```
    ```output
    69893
    ```
    #### 69893

The output is the chain's true value computed here, exactly what the sandbox prints for that code, and
the text is what the multi-turn rollout builds (``rollout.tool_format.output_block`` after a closing
fence), so SFT teaches the format the rollout runs (docs/tir.md). ``tool_records`` rewrites a seeded
``frac`` of the records; the others keep their calculator lines (computed "in the head"), and so do
corrupted solutions (their wrong values have no true output) and solutions that are not one chain.
The SFT loss covers the output block too (the rollout's loss mask does not): a model asked to go on
without the tool then writes the output itself, which is how the with-vs-without comparison of the
CPU demonstration measures the same model computing in its head.
"""

from __future__ import annotations

import random

from pipeline.data.synth_solutions import ANSWER_RE, calc, parse

PY_OP = {"+": "+", "-": "-", "*": "*", "/": "//"}  # gsm-synth divides exactly: floor division prints an int


def tool_solution(solution: str) -> str | None:
    """``solution`` computed with one python block and its true output (module notes), or None when its
    steps are not one chain or a step is impossible."""
    steps = [item for item in parse(solution) if isinstance(item, list)]
    if not steps:
        return None
    value = steps[0][1]
    lines = [f"x = {value}"]
    for _, a, op, b, _, _ in steps:
        if a != value:
            return None
        value = calc(op, a, b)
        if value is None:
            return None
        lines.append(f"x = x {PY_OP[op]} {b}")
    code = "\n".join(lines + ["print(x)"])
    answer = f"#### {value}" if ANSWER_RE.search(solution) else f"The answer is {value}."
    return f"```python\n{code}\n```\n```output\n{value}\n```\n{answer}"


def tool_records(records: list[dict], frac: float, seed: int) -> tuple[list[dict], int]:
    """Copies of ``records`` with a seeded ``frac`` of the uncorrupted solutions written with the tool
    (``tool_solution``); (records, how many were rewritten)."""
    rng = random.Random(f"{seed}:tool")
    out, count = [], 0
    for r in records:
        pick = rng.random() < frac
        text = tool_solution(r["solution"]) if pick and frac > 0 and not r.get("corrupted") else None
        if text is not None:
            r, count = {**r, "solution": text, "tool": True}, count + 1
        out.append(r)
    return out, count


__all__ = ["tool_records", "tool_solution"]
