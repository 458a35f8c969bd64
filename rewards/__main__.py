"""Command line for the reward checkers.

    python -m rewards equiv PRED GOLD            # prints True/False and the reason; exit 0/1
    python -m rewards extract FILE [--style S]   # the final answer written in FILE ("-" = stdin)
    python -m rewards score FILE.jsonl [--style S] [--out OUT.jsonl] [--workers N]
        # records need "completion" and "answer" (or "gold"); prints accuracy and failure
        # reasons, writes one result per line to OUT (default FILE.scored.jsonl)
    python -m rewards to-verl data/prepared/gsm8k/train.jsonl ... [--out-dir DIR]
        # prepared JSONL -> verl parquet next to it (or DIR/<dataset>/<split>.parquet); needs pyarrow
    python -m rewards redteam [--limit N] [--per-base K]   # the hack-finding loop (rewards.redteam)
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

from rewards.equivalence.equiv import EQUAL, equiv_status
from rewards.answers.extract import STYLES, extract_answer
from rewards.jsonl import JSONLError, read_jsonl
from rewards.registry import score_batch


def _equiv(args) -> int:
    status = equiv_status(args.pred, args.gold, args.timeout)
    print(f"{status == EQUAL}\t{status}")
    return 0 if status == EQUAL else 1


def _extract(args) -> int:
    text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
    answer = extract_answer(text, args.style)
    print("" if answer is None else answer)
    return 0 if answer is not None else 1


def _score(args) -> int:
    try:
        records = read_jsonl(args.file)
    except (OSError, JSONLError) as e:
        print(f"score: {e}", file=sys.stderr)
        return 2
    golds = [str(r.get("answer", r.get("gold", ""))) for r in records]
    completions = [str(r.get("completion", "")) for r in records]
    results = score_batch(completions, golds, args.style, workers=args.workers)
    out = Path(args.out or str(Path(args.file).with_suffix("")) + ".scored.jsonl")
    with out.open("w") as f:
        for i, (rec, res) in enumerate(zip(records, results)):
            row = {"line": i, "id": rec.get("id"), "score": res.score, "pred": res.pred,
                   "gold": golds[i], "reason": res.reason}
            f.write(json.dumps(row) + "\n")
    n = len(results)
    acc = sum(r.score for r in results) / n if n else 0.0
    print(f"accuracy {acc:.4f} ({int(sum(r.score for r in results))}/{n})")
    for reason, count in collections.Counter(r.reason for r in results if r.reason).most_common():
        print(f"  {reason}: {count}")
    print(f"per-line results: {out}")
    return 0


def _to_verl(args) -> int:
    from rewards.integrations import verl as verl_reward
    from rewards.integrations.verl_data import convert

    for src in map(Path, args.files):
        dst = (src.with_suffix(".parquet") if args.out_dir is None
               else Path(args.out_dir) / src.parent.name / (src.stem + ".parquet"))
        try:
            n = convert(src, dst, args.instruction)
        except (ImportError, OSError, ValueError) as e:
            print(f"to-verl: {e}", file=sys.stderr)
            return 1
        print(f"{src} -> {dst} ({n} rows)")
    print(f"verl reward: custom_reward_function.path={verl_reward.__file__} "
          "custom_reward_function.name=compute_score")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["redteam"]:
        from rewards.redteam import main as redteam

        return redteam(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m rewards", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("equiv", help="are two final answers equivalent?")
    p.add_argument("pred")
    p.add_argument("gold")
    p.add_argument("--timeout", type=float, default=5.0)
    p.set_defaults(fn=_equiv)
    p = sub.add_parser("extract", help="print the final answer in a text file")
    p.add_argument("file")
    p.add_argument("--style", choices=STYLES, default="auto")
    p.set_defaults(fn=_extract)
    p = sub.add_parser("score", help="score a JSONL of completions against gold answers")
    p.add_argument("file")
    p.add_argument("--style", choices=STYLES, default="auto")
    p.add_argument("--out", default=None)
    p.add_argument("--workers", type=int, default=2)
    p.set_defaults(fn=_score)
    p = sub.add_parser("to-verl", help="write prepared JSONL files as verl's parquet layout")
    p.add_argument("files", nargs="+", help="data/prepared/<dataset>/<split>.jsonl")
    p.add_argument("--out-dir", default=None,
                   help="write OUT_DIR/<dataset>/<split>.parquet (default: next to each input)")
    p.add_argument("--instruction", default=None,
                   help="text after each question (default: mathrl's template for the answer style)")
    p.set_defaults(fn=_to_verl)
    sub.add_parser("redteam", help="mutate completions and report rewards paid without the gold (rewards.redteam)")
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
