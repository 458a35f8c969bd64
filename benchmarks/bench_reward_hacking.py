"""Hack-finding loop over the outcome reward (`rewards.redteam`): thousands of mutations of
right and wrong GSM8K/MATH-500 completions, and how many of them are paid although they do not
state the gold as their single final answer.

    python benchmarks/bench_reward_hacking.py [--limit N] [--per-base K] [--root PATH]

`--root PATH` scores with the `rewards` package of another checkout (e.g. an older commit in
a `git worktree`) so the count before and after a change comes from the same mutations.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def main() -> int:
    argv = sys.argv[1:]
    root = HERE
    if "--root" in argv:
        k = argv.index("--root")
        root = Path(argv[k + 1]).resolve()
        del argv[k:k + 2]
    sys.path.insert(0, str(root))  # `rewards` (the checker under test) from that checkout
    import importlib.util

    spec = importlib.util.spec_from_file_location("_redteam", HERE / "rewards" / "redteam.py")
    redteam = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(redteam)  # the mutations always come from this checkout
    return redteam.main(argv, root=HERE)


if __name__ == "__main__":
    sys.exit(main())
