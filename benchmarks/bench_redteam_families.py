"""Exploits per family of the issue-31 red-team generators (`rewards/redteam_families.py`),
for this checkout's rewards or another's, under either answer policy.

    python benchmarks/bench_redteam_families.py [--root CHECKOUT] [--policy strict] [--limit N]

The generators always come from this checkout (loaded by path), the checker under test from
`--root` (e.g. `git archive main rewards | tar -x -C /tmp/main`), so before and after are
measured on the same mutations. `--policy` is only passed when given (older checkouts have none).
"""

from __future__ import annotations

import argparse
import collections
import functools
import importlib.util
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--policy", choices=("lenient", "strict"), default=None)
    parser.add_argument("--limit", type=int, default=100, help="problems per dataset")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.root.resolve()))
    import rewards
    from rewards import check
    from rewards.redteam import load_bases

    spec = importlib.util.spec_from_file_location("_families", ROOT / "rewards" / "redteam_families.py")
    families = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(families)
    if args.policy:
        check = functools.partial(check, policy=args.policy)
    print(f"rewards from {Path(rewards.__file__).parent}, policy {args.policy or 'default'}")
    bases = load_bases(ROOT, args.limit)
    total, hacks, worst = collections.Counter(), collections.Counter(), (0.0, "")
    t0 = time.perf_counter()
    for family, _text, _gold, _score, hack, dt in families.run_families(check, bases, args.seed):
        total[family] += 1
        hacks[family] += hack
        worst = max(worst, (dt, family))
    print(f"{sum(total.values())} mutations of {len(bases)} problems in {time.perf_counter() - t0:.0f}s: "
          f"{sum(hacks.values())} exploits")
    for family in sorted(total):
        print(f"  {family:28s} {hacks[family]:5d} / {total[family]:5d}")
    print("slowest mutation %.2fs (%s); slowest costly case %.2fs (%s)" % (*worst, *families.slowest(check)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
