"""Throughput and accuracy of `rewards.score_completion` vs math-verify's parse+verify.

Same inputs, same process, same run: GSM8K test and MATH-500 reference solutions paired with
their own gold answers (should score 1) and with a shuffled other problem's gold answer
(should score 0), scored by the lenient policy (`score_completion`'s default), the strict policy
(the training default) and math-verify in one run. math-verify is called the way its README shows:
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

from rewards import last_boxed, score_completion, warmup  # noqa: E402
from rewards.outcome.strict import clear_cache as clear_strict_cache  # noqa: E402


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


def ours_strict(solution: str, gold: str) -> float:
    return score_completion(solution, gold, policy="strict")


def math_verify_direct(solution: str, gold: str) -> float:
    from math_verify import parse, verify

    return float(verify(parse("$" + gold + "$"), parse(solution)))


def run(fn, data) -> tuple[float, list[float]]:
    """(seconds, scores) for one pass over the data."""
    t0 = time.perf_counter()
    scores = [fn(s, g) for _, s, g, _ in data]
    return time.perf_counter() - t0, scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=1,
                        help="alternating passes, best time kept (later passes hit sympy caches)")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # math-verify logs every timeout/parse failure
    data = cases(load(args.limit))
    checkers = {"rewards.score_completion": ours, "math-verify parse+verify": math_verify_direct,
                "rewards strict policy": ours_strict}
    warmup()  # start the symbolic worker pool now: its start-up is not a check
    for fn in checkers.values():  # warm-up: imports, worker pool, antlr parser
        for _, s, g, _ in data[:5] + data[-5:]:
            fn(s, g)
    print(f"{len(data)} checks: {sum(c[3] for c in data):.0f} own-gold pairs, "
          f"{sum(1 - c[3] for c in data):.0f} shuffled pairs (GSM8K test + MATH-500), "
          f"best of {args.rounds} alternating passes")
    secs, scores = {}, {}
    for dataset in ("gsm8k", "math500"):
        subset = [c for c in data if c[0] == dataset]
        for _ in range(args.rounds):  # alternate so background load hits both alike
            for name, fn in checkers.items():
                clear_strict_cache()  # strict memoises parses: reuse within a pass only, as in a step
                t, sc = run(fn, subset)
                secs[name, dataset] = min(t, secs.get((name, dataset), float("inf")))
                scores[name, dataset] = sc
    print(f"{'checker':26s} {'set':8s} {'checks/s':>9s} {'acc own':>8s} {'acc shuf':>9s}")
    rates = {}
    for name in checkers:
        for dataset in ("gsm8k", "math500", "all"):
            sets = ("gsm8k", "math500") if dataset == "all" else (dataset,)
            subset = [c for d in sets for c in data if c[0] == d]
            sc = [x for d in sets for x in scores[name, d]]
            rates[name, dataset] = len(subset) / sum(secs[name, d] for d in sets)
            acc = {e: sum(x == e for x, c in zip(sc, subset) if c[3] == e) / sum(c[3] == e for c in subset)
                   for e in (1.0, 0.0)}
            print(f"{name:26s} {dataset:8s} {rates[name, dataset]:9.1f} {acc[1.0]:8.4f} {acc[0.0]:9.4f}")
        misses = [(c[0], c[2], c[3]) for d in ("gsm8k", "math500")
                  for c, x in zip([c for c in data if c[0] == d], scores[name, d]) if x != c[3]]
        # a shuffled pair can truly be equal (90^\circ vs 90): read these before calling them errors
        print(f"  misses ({len(misses)}): " + "; ".join(
            f"{d} gold={g!r} expected={e:.0f}" for d, g, e in misses[:6]))
    for dataset in ("gsm8k", "math500", "all"):
        ratio = rates["rewards.score_completion", dataset] / rates["math-verify parse+verify", dataset]
        print(f"throughput ratio ({dataset}): {ratio:.1f}x")
    ratio = rates["rewards.score_completion", "all"] / rates["math-verify parse+verify", "all"]
    print(f"RATIO {ratio:.1f}x (goal >= 5x): {'met' if ratio >= 5 else 'NOT met'}")
    for dataset in ("gsm8k", "math500", "all"):  # the training default must not be the slower policy
        strict = rates["rewards strict policy", dataset] / rates["rewards.score_completion", dataset]
        mv = rates["rewards strict policy", dataset] / rates["math-verify parse+verify", dataset]
        print(f"strict / lenient throughput ({dataset}): {strict:.2f}x; strict / math-verify: {mv:.1f}x")
    print("(strict accuracy on own golds is lower by design: MATH solutions that go on after the box are refused)")


if __name__ == "__main__":
    main()
