"""Agreement of `rewards.score_completion` with correctness labels made by others on real
model-written solutions, compared with math-verify on the same records.

Reads a directory of JSONL records with `completion`, `gold` (str or null) and `label_correct`
(bool) per line, e.g. RealCritic (labels from the Qwen2.5-Math evaluation grader), OpenAI's
grade-school-math model samples (labels from OpenAI's final-answer check) and ProcessBench
(`final_answer_correct`, human-checked solutions). Records without a gold are skipped.
math-verify is called as its README shows: `verify(parse("$" + gold + "$"), parse(completion))`,
in the main thread (its signal.alarm timeouts only work there).

Labels are themselves noisy (graders that refuse `5.89e-7` == `5.89\\times10^{-7}`), so 100%
agreement is not the goal; the disagreements are written to `--out` for reading by hand.

    python benchmarks/bench_real_completions.py DIR [--files a.jsonl,b.jsonl] [--limit N]
        [--out disagreements.jsonl] [--no-math-verify] [--root CHECKOUT]

`--root CHECKOUT` scores with the `rewards` package of another checkout (e.g. `git archive main
rewards | tar -x -C /tmp/main`) so agreement before and after a change comes from one script.
The last columns give how often ours and math-verify agree with each other.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_FILES = ("realcritic.jsonl", "openai_gsm8k_samples.jsonl", "processbench.jsonl")


def load(directory: Path, files: list[str], limit: int | None) -> list[dict]:
    rows = []
    for name in files:
        path = directory / name
        if not path.exists():
            raise SystemExit(f"missing {path}: pass the directory that holds {', '.join(files)}")
        recs = [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]
        recs = [r for r in recs if r.get("gold") is not None and r.get("label_correct") is not None]
        rows += [dict(r, _file=name) for r in recs[:limit]]
    return rows


def math_verify_score(completion: str, gold: str) -> float:
    from math_verify import parse, verify

    try:
        return float(verify(parse("$" + gold + "$"), parse(completion)))
    except Exception:  # noqa: BLE001 - count a crash as "not verified"
        return 0.0


def _table(rows: list[dict], key: str) -> list[tuple[str, int, int, int, int]]:
    """(group, n, agree, false_pos, false_neg) per file/dataset group and overall."""
    groups = collections.defaultdict(list)
    for r in rows:
        groups[f"{r['_file'].split('.')[0]}/{r['dataset']}"].append(r)
    groups["ALL"] = rows
    out = []
    for name, rs in sorted(groups.items(), key=lambda kv: (kv[0] == "ALL", kv[0])):
        fp = sum(r[key] == 1.0 and not r["label_correct"] for r in rs)
        fn = sum(r[key] == 0.0 and r["label_correct"] for r in rs)
        out.append((name, len(rs), len(rs) - fp - fn, fp, fn))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--files", default=",".join(DEFAULT_FILES))
    parser.add_argument("--limit", type=int, default=None, help="records per file")
    parser.add_argument("--out", type=Path, default=None, help="write disagreements here (JSONL)")
    parser.add_argument("--no-math-verify", action="store_true")
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout whose rewards package to score with")
    parser.add_argument("--policy", choices=("lenient", "strict"), default="lenient",
                        help="answer policy of `check` (strict: the closed grammar, rewards/outcome/strict.py)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.root.resolve()))
    import rewards
    from rewards import check  # the checker under test, from --root

    print(f"rewards from {Path(rewards.__file__).parent}")
    logging.disable(logging.WARNING)
    rows = load(args.directory, args.files.split(","), args.limit)
    policy = {} if args.policy == "lenient" else {"policy": args.policy}  # older checkouts have no policy
    checkers = {"ours": lambda c, g: check(c, g, **policy).score}
    if not args.no_math_verify:
        checkers["math_verify"] = math_verify_score
    for name, fn in checkers.items():
        t0 = time.perf_counter()
        for r in rows:
            r[name] = fn(r["completion"], r["gold"])
        print(f"{name}: {len(rows)} records in {time.perf_counter() - t0:.1f}s")
    for r in rows:
        res = check(r["completion"], r["gold"], **policy)
        r["pred"], r["reason"] = res.pred, res.reason
    print(f"{'group':34s} {'n':>5s} " + " ".join(f"{n + ' agree':>17s} {'FP':>4s} {'FN':>4s}" for n in checkers))
    tables = {name: _table(rows, name) for name in checkers}
    for i, (group, n, *_rest) in enumerate(tables["ours"]):
        cells = []
        for name in checkers:
            _, _, agree, fp, fn = tables[name][i]
            cells.append(f"{agree:6d} ({agree / n:6.1%}) {fp:4d} {fn:4d}")
        if "math_verify" in checkers:
            rs = rows if group == "ALL" else [r for r in rows if f"{r['_file'].split('.')[0]}/{r['dataset']}" == group]
            same = sum(r["ours"] == r["math_verify"] for r in rs)
            cells.append(f"  ours=mv {same:5d} ({same / n:6.1%})")
        print(f"{group:34s} {n:5d} " + " ".join(cells))
    if args.out:
        with args.out.open("w", encoding="utf-8") as f:
            for r in rows:
                if any(r[name] != float(r["label_correct"]) for name in checkers):
                    keep = {k: r[k] for k in ("id", "gold", "label_correct", "pred", "reason", *checkers)}
                    keep["tail"] = r["completion"][-400:]
                    f.write(json.dumps(keep, ensure_ascii=False) + "\n")
        print(f"disagreements: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
