"""What kind of wrong a gsm-synth completion is: the error breakdown behind an accuracy change.

``python -m evals.synth_errors EVAL_DIR_OR_RESULTS_JSONL ...`` prints, per eval, the share of
completions that are right and of the wrong ones, by the first rule that applies:

- ``carry bug``: a calculator step ``<<a op b = c>>`` where a carry or borrow applies writes the
  forgotten-carry / forgotten-borrow result (``pipeline.data.synth.buggy_result``), the
  systematic error `sft.corrupt_mode=carry` teaches the warm start;
- ``false arithmetic``: some other step's ``c`` is not ``a op b``;
- ``missing line``: every step is true but the solution has fewer lines than the problem has
  sentences (gsm-synth writes one line per sentence, distractors included);
- ``wrong numbers``: every step is true and no line is missing, yet the answer is wrong (an
  operand copied wrong, a step applied to the wrong value).

So "greedy accuracy rose" can be read as "the carry bug went from 22% to 7% of completions", and a
fall on longer problems can be told apart from the bug coming back. Reads the ``results.jsonl``
an eval writes (``evals/evaluate.py``); gsm-synth questions only (one sentence per step).
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

from pipeline.data.synth import STEP_RE, apply, buggy_result, has_bug_site

KINDS = ("right", "carry bug", "false arithmetic", "missing line", "wrong numbers")

__all__ = ["KINDS", "breakdown", "classify", "expected_lines", "main"]


def expected_lines(question: str) -> int:
    """Solution lines a gsm-synth question asks for: one per sentence after the first (which states
    the start) and before the question."""
    return max(0, len(re.findall(r"[.](?:\s|$)", question)) - 1)


def classify(question: str, completion: str, correct: bool) -> str:
    """One of ``KINDS`` for a completion of a gsm-synth question."""
    if correct:
        return "right"
    bug = false = False
    for a, op, b, c in STEP_RE.findall(completion):
        a, b, c = int(a), int(b), int(c)
        if op == "/" and b == 0:
            false = True
            continue
        if c == apply(op, a, b):
            continue
        if has_bug_site(op, a, b) and c == buggy_result(op, a, b):
            bug = True
        else:
            false = True
    if bug:
        return "carry bug"
    if false:
        return "false arithmetic"
    lines = [ln for ln in completion.splitlines() if ln.strip() and not ln.lstrip().startswith("####")]
    return "missing line" if len(lines) < expected_lines(question) else "wrong numbers"


def breakdown(records: list[dict]) -> dict[str, float]:
    """Share of all completions of ``records`` (eval results rows) per kind, plus ``n``."""
    counts: Counter[str] = Counter()
    for r in records:
        for completion, ok in zip(r["completions"], r["correct"], strict=True):
            counts[classify(r["question"], completion, bool(ok))] += 1
    n = sum(counts.values())
    if not n:
        raise ValueError("no completions to classify")
    return {"n": n, **{k: counts[k] / n for k in KINDS}}


def _results_file(path: Path) -> Path:
    return path / "results.jsonl" if path.is_dir() else path


def main(argv: list[str] | None = None) -> int:
    paths = [Path(a) for a in (sys.argv[1:] if argv is None else argv)]
    if not paths:
        print("usage: python -m evals.synth_errors EVAL_DIR_OR_RESULTS_JSONL ...", file=sys.stderr)
        return 2
    print("| eval | completions | " + " | ".join(KINDS) + " |")
    print("|---|---:|" + "---:|" * len(KINDS))
    for path in paths:
        file = _results_file(path)
        try:
            rows = [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
            shares = breakdown(rows)
        except (OSError, ValueError, KeyError) as e:
            print(f"synth_errors: {file}: {e}", file=sys.stderr)
            return 1
        name = path.name if path.is_dir() else path.parent.name
        print(f"| {name} | {shares['n']} | " + " | ".join(f"{100 * shares[k]:.1f}%" for k in KINDS) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
