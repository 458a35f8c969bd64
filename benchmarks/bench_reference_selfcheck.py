"""Self-consistency of the outcome reward: every GSM8K and MATH reference solution (train + test)
scored against its own gold answer must score 1.0. Prints the count and every failure.

    python benchmarks/bench_reference_selfcheck.py [DATA_DIR] [--root CHECKOUT]

DATA_DIR holds `gsm8k/{train,test}.jsonl.gz` and `math/full/{train,test}.jsonl.gz` (default:
the repo's data/raw). Golds are read as the data stage reads them: the text after GSM8K's
last `####` (thousands commas dropped), MATH's shipped `answer` or else the last box group of
the solution (`rewards.answers.extract.reference_answer`). `--root` scores with another checkout's
`rewards` package.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def _records(path: Path) -> list[dict]:
    """JSONL rows of `path` (.jsonl.gz, or the same name without .gz)."""
    if not path.exists() and path.with_suffix("").exists():
        path = path.with_suffix("")
    if not path.exists():
        raise SystemExit(f"missing {path}: pass the directory that holds gsm8k/ and math/full/")
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def load(data: Path, reference_answer) -> list[tuple[str, str, str, str | None]]:
    """(dataset, id, solution, gold) for every GSM8K and MATH train/test row."""
    rows = []
    for split in ("train", "test"):
        for i, r in enumerate(_records(data / "gsm8k" / f"{split}.jsonl.gz")):
            gold = r["answer"].rsplit("####", 1)[1].strip().replace(",", "")
            rows.append(("gsm8k", f"gsm8k/{split}/{i}", r["answer"], gold))
    for split in ("train", "test"):
        for i, r in enumerate(_records(data / "math" / "full" / f"{split}.jsonl.gz")):
            gold = r.get("answer") or reference_answer(r["solution"])
            rows.append(("math", r.get("unique_id") or f"math/{split}/{i}", r["solution"], gold))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("data", type=Path, nargs="?", default=HERE / "data" / "raw")
    parser.add_argument("--root", type=Path, default=HERE, help="checkout whose rewards package to score with")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.root.resolve()))
    import rewards
    from rewards import check
    from rewards.answers.boxed import last_boxed

    try:
        from rewards.answers.extract import reference_answer
    except ImportError:  # an older checkout: the MATH convention, the last box
        reference_answer = last_boxed
    print(f"rewards from {Path(rewards.__file__).parent}; data from {args.data}")
    rows = load(args.data, reference_answer)
    t0 = time.perf_counter()
    per_set, fails = collections.Counter(), []
    for dataset, rid, solution, gold in rows:
        per_set[dataset] += 1
        if not gold:
            fails.append((rid, gold, None, "no gold in the solution"))
            continue
        result = check(solution, gold)
        if result.score != 1.0:
            fails.append((rid, gold, result.pred, result.reason))
    n = len(rows)
    print(f"{n} reference solutions ({dict(per_set)}) in {time.perf_counter() - t0:.0f}s: "
          f"{n - len(fails)} score 1.0 ({(n - len(fails)) / n:.6f}), {len(fails)} do not")
    for rid, gold, pred, reason in fails:
        print(f"- {rid}: gold={gold!r} pred={pred!r} {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
