"""ProcessBench table for the rule-based step scorer (first-error identification).

    python benchmarks/bench_processbench.py PATH/processbench.jsonl [--show-flags N] [--show-misses N]

PATH is a JSON-lines file with ProcessBench records: `dataset` (subset), `question`, `steps`
(list of paragraphs) and `first_error_step` (0-based, -1 = all steps correct). Prints, per
subset and on average, accuracy on erroneous and on correct solutions, their F1 (the paper's
metric), the false-alarm rate on correct solutions, and the precision of the flags. With
--show-flags / --show-misses it prints examples of wrong flags / of erroneous solutions the
scorer flags nowhere, for reading by hand.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rewards.steps.scorers import (PUBLISHED, RuleStepScorer, evaluate_step_checker,  # noqa: E402
                                format_table)


def load(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def show(records, scorer, n_flags: int, n_misses: int) -> None:
    for rec in records:
        if n_flags <= 0 and n_misses <= 0:
            return
        res = scorer(rec["question"], rec["steps"])
        label = rec["first_error_step"]
        if res.first_error >= 0 and res.first_error != label and n_flags > 0:
            n_flags -= 1
            j = res.first_error
            print(f"--- wrong flag {rec.get('id')} label {label} flag {j}: {res.reasons[j]}")
            print(rec["steps"][j][:600])
        elif label >= 0 and res.first_error < 0 and n_misses > 0:
            n_misses -= 1
            print(f"--- miss {rec.get('id')} label {label}")
            print(rec["steps"][label][:600])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("--show-flags", type=int, default=0)
    ap.add_argument("--show-misses", type=int, default=0)
    args = ap.parse_args(argv)
    records = [r for r in load(args.path) if r.get("first_error_step") is not None]
    scorer = RuleStepScorer()
    t0 = time.perf_counter()
    results = evaluate_step_checker(records, scorer)
    dt = time.perf_counter() - t0
    print(format_table(results))
    print(f"{len(records)} solutions, {sum(len(r['steps']) for r in records)} steps in {dt:.1f} s")
    print("published average F1: " + ", ".join(f"{n} {f}" for n, f in PUBLISHED))
    show(records, scorer, args.show_flags, args.show_misses)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
