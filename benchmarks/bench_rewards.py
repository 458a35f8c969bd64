"""Throughput and accuracy of `rewards.score_completion` vs math-verify's parse+verify.

Same inputs, same process, same run: GSM8K test and MATH-500 reference solutions paired with
their own gold answers (should score 1) and with a shuffled other problem's gold answer
(should score 0). math-verify is called the way its README shows:
`verify(parse("$" + gold + "$"), parse(solution))`, single-threaded in the main thread (its
signal.alarm timeouts only work there). Both sides are warmed up first; our symbolic worker
pool start-up is excluded. Prints checks/s, accuracy on each half, and the throughput ratio
(goal: >= 5x).

    python benchmarks/bench_rewards.py [--limit N]   # N problems per dataset (default: all)
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rewards import last_boxed, score_completion  # noqa: E402


def load(limit: int | None) -> list[tuple[str, str, str]]:
    """(dataset, solution, gold) rows."""
    rows = []
    with gzip.open(ROOT / "data/raw/gsm8k/test.jsonl.gz", "rt") as f:
        for line in list(f)[:limit]:
            r = json.loads(line)
            rows.append(("gsm8k", r["answer"], r["answer"].rsplit("####", 1)[1].strip().replace(",", "")))
    with gzip.open(ROOT / "data/raw/math/math500/test.jsonl.gz", "rt") as f:
        for line in list(f)[:limit]:
            r = json.loads(line)
            rows.append(("math500", r["solution"], last_boxed(r["solution"])))
    return rows


def cases(rows) -> list[tuple[str, str, str, float]]:
    """(dataset, solution, gold, expected): each row with its gold (1) and a shuffled gold (0)."""
    rng = random.Random(0)
    out = [(d, s, g, 1.0) for d, s, g in rows]
    for name in ("gsm8k", "math500"):
        sub = [r for r in rows if r[0] == name]
        golds = [g for _, _, g in sub]
        rng.shuffle(golds)
        out += [(d, s, g2, 0.0) for (d, s, g), g2 in zip(sub, golds) if g2 != g]
    return out


def ours(solution: str, gold: str) -> float:
    return score_completion(solution, gold)


def math_verify_direct(solution: str, gold: str) -> float:
    from math_verify import parse, verify

    return float(verify(parse("$" + gold + "$"), parse(solution)))


def run(fn, data) -> tuple[float, dict]:
    t0 = time.perf_counter()
    scores = [fn(s, g) for _, s, g, _ in data]
    elapsed = time.perf_counter() - t0
    acc = {}
    for exp, label in ((1.0, "own gold"), (0.0, "shuffled gold")):
        idx = [i for i, c in enumerate(data) if c[3] == exp]
        acc[label] = sum(scores[i] == exp for i in idx) / len(idx)
    return len(data) / elapsed, acc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=None)
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # math-verify logs every timeout/parse failure
    data = cases(load(args.limit))
    for fn in (ours, math_verify_direct):  # warm-up: imports, worker pool, antlr parser
        for _, s, g, _ in data[:5] + data[-5:]:
            fn(s, g)
    print(f"{len(data)} checks: {sum(c[3] for c in data):.0f} own-gold pairs, "
          f"{sum(1 - c[3] for c in data):.0f} shuffled pairs (GSM8K test + MATH-500)")
    results = {}
    for name, fn in (("rewards.score_completion", ours), ("math-verify parse+verify", math_verify_direct)):
        for dataset in ("gsm8k", "math500", "all"):
            subset = [c for c in data if dataset in ("all", c[0])]
            results[name, dataset] = run(fn, subset)
    print(f"{'checker':26s} {'set':8s} {'checks/s':>9s} {'acc own':>8s} {'acc shuf':>9s}")
    for (name, dataset), (rate, acc) in results.items():
        print(f"{name:26s} {dataset:8s} {rate:9.1f} {acc['own gold']:8.4f} {acc['shuffled gold']:9.4f}")
    for dataset in ("gsm8k", "math500", "all"):
        ratio = results["rewards.score_completion", dataset][0] / results["math-verify parse+verify", dataset][0]
        print(f"throughput ratio ({dataset}): {ratio:.1f}x")
    ratio = results["rewards.score_completion", "all"][0] / results["math-verify parse+verify", "all"][0]
    print(f"RATIO {ratio:.1f}x (goal >= 5x): {'met' if ratio >= 5 else 'NOT met'}")


if __name__ == "__main__":
    main()
