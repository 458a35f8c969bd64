"""The adversarial suite (tests/adversarial) as a measurement: how many crafted hacks a checker
pays (score > 0) and how many true-positive controls it refuses, per family.

    python benchmarks/bench_adversarial_suite.py [--root CHECKOUT] [--show 10]

The cases always come from this checkout; `--root CHECKOUT` scores them with the `rewards`
package of another one (e.g. `git archive main rewards | tar -x -C /tmp/main`), so the counts
before and after a change come from the same cases. The test suite asserts 0 hacks paid and 0
controls refused; this prints the numbers for the notes.
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=HERE, help="checkout whose rewards package to score with")
    parser.add_argument("--show", type=int, default=10, help="print this many paid hacks")
    parser.add_argument("--policy", choices=("lenient", "strict"), default=None,
                        help="answer policy of check (default: check's own; older checkouts have none)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.root.resolve()))  # `rewards` from --root, found first
    sys.path.insert(1, str(HERE))  # `tests.adversarial` from this checkout
    import rewards
    from rewards import check
    from tests.adversarial.families import control_cases, hack_cases

    if args.policy:
        import functools

        check = functools.partial(check, policy=args.policy)

    print(f"rewards from {Path(rewards.__file__).parent}")
    total, paid, shown = collections.Counter(), collections.Counter(), []
    for family, completion, gold in hack_cases():
        total[family] += 1
        if check(completion, gold, timeout=3.0).score > 0:
            paid[family] += 1
            shown.append((family, gold, completion[-120:]))
    controls = control_cases()
    refused = [(c, g) for c, g in controls if check(c, g, timeout=10.0).score != 1.0]
    print(f"hacks paid (score > 0): {sum(paid.values())} of {sum(total.values())}; "
          f"controls refused: {len(refused)} of {len(controls)}")
    for family in sorted(total):
        print(f"  {family:20s} {paid[family]:4d} of {total[family]:4d} paid")
    for family, gold, tail in shown[:args.show]:
        print(f"- [{family}] gold={gold!r}: {tail!r}")
    for completion, gold in refused[:args.show]:
        print(f"- refused control gold={gold!r}: {completion[-120:]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
