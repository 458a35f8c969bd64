"""Can one job slow the other slot's job? A forking `setsid` CPU hog beside a timed victim.

Two workers. The victim (a pure-Python CPU loop, ~0.3 s alone) runs in one slot, first with
the other slot idle, then while the other slot runs the issue-29 hog: 60 children, each
calling `setsid` (before per-slot cgroups, each session was its own scheduler autogroup, so
the hog weighed 60 times the victim) and spinning. Prints the victim's median wall time
alone and beside the hog, and their ratio (the slowdown; issue 29's goal: <= 1.5x).

    python benchmarks/bench_sandbox_fairness.py [--backend bwrap] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time

from sandbox import Sandbox

VICTIM = ("import time\nt = time.perf_counter()\nx = 0\nfor i in range(3_000_000):\n    x += i * i\n"
          "print(time.perf_counter() - t)")
HOG = ("import os, time\nfor _ in range(60):\n    if os.fork() == 0:\n        os.setsid()\n"
       "        end = time.monotonic() + {secs}\n        while time.monotonic() < end:\n            pass\n"
       "        os._exit(0)\nfor _ in range(60):\n    os.wait()")


HOG_S = 300.0


def _quiet(run, code):
    try:
        run(code, timeout_s=HOG_S + 20)
    except Exception:  # the pool closed under it: that is how it ends
        pass


def victim_times(sb: Sandbox, rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        r = sb.run(VICTIM, timeout_s=30)
        assert r.exit_code == 0, r.stderr
        out.append(float(r.stdout))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="bwrap")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with Sandbox(args.backend, workers=2).warm() as sb:
        print(f"backend {args.backend}: {sb._slots[0].isolation}")
        print(f"load average before: {os.getloadavg()[0]:.2f}")
        victim_times(sb, 1)  # warm both caches
        alone = victim_times(sb, args.rounds)
        # the hog spins far longer than the victims need; closing the pool ends it
        hog = threading.Thread(target=_quiet, args=(sb.run, HOG.format(secs=HOG_S)), daemon=True)
        hog.start()
        time.sleep(1.0)  # the hog's 60 children are running
        beside = victim_times(sb, args.rounds)
    hog.join(30)
    a, b = statistics.median(alone), statistics.median(beside)
    print(f"victim alone:       median {a * 1000:.0f} ms  {[round(x * 1000) for x in alone]}")
    print(f"victim beside hog:  median {b * 1000:.0f} ms  {[round(x * 1000) for x in beside]}")
    print(f"slowdown {b / a:.2f}x (goal <= 1.5x); load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
