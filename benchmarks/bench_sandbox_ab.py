"""Per-job sandbox latency of two versions of `sandbox/`, interleaved so that a shared machine's
changing load falls on both alike.

`bench_sandbox.py` run before and after a change measures each version minutes apart; on a
machine whose load swings (ours: 2 cores, other sessions' training) that spread dwarfs a
millisecond. Here both versions run at once, each in its own process with a one-worker pool,
and take turns: round r runs `--block` jobs on one, then on the other (the order alternates),
for `--rounds` rounds. Printed: each version's median and p90 over all its jobs, and the
median of the per-round differences of medians (after - before) with its spread, the honest
size of the noise; and the CPU time the slot's whole unit (worker, forker, jobs) spent per job,
from the host's /proc, which waiting for a busy CPU does not inflate.

    python benchmarks/bench_sandbox_ab.py --before main [--after .] [--backend bwrap]

Run it once with the same ref on both sides (an A/A run) to see the noise alone.

`--before`/`--after` take a git ref (exported with `git archive`) or `.` for this checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CODE = "print(1+1)"
CHILD = """
import json, os, sys, time
from sandbox import Sandbox
TICK = os.sysconf("SC_CLK_TCK")

def unit_cpu_s(root):
    # CPU seconds of the slot's unit: every process under `root` (its own time and that of
    # the children it reaped: the jobs), read from the host's /proc
    stats, parent = {}, {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    data = f.read()
            except OSError:
                continue
            fields = data[data.rindex(b")") + 2:].split()
            parent[int(name)] = int(fields[1])
            stats[int(name)] = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    unit, frontier = {root}, {root}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier}
        unit |= frontier
    return sum(stats.get(p, 0) for p in unit) / TICK

with Sandbox(sys.argv[1], workers=1) as sb:
    sb.run("print(0)")
    root = sb._slots[0].proc.pid
    print("ready", flush=True)
    for line in sys.stdin:
        lat, cpu0 = [], unit_cpu_s(root)
        for _ in range(int(line)):
            t = time.perf_counter()
            r = sb.run(%r)
            lat.append((time.perf_counter() - t) * 1000)
            assert r.stdout == "2\\n", r
        print(json.dumps({"lat": lat, "cpu_s": unit_cpu_s(root) - cpu0}), flush=True)
""" % CODE


def checkout(ref: str, tmp: str, side: str) -> str:
    """A directory holding `sandbox/` at `ref` ('.' = this working tree)."""
    if ref == ".":
        return ROOT
    out = os.path.join(tmp, side)
    os.makedirs(out)
    tar = subprocess.run(["git", "-C", ROOT, "archive", ref, "sandbox"], capture_output=True, check=True).stdout
    with tempfile.TemporaryFile() as f:
        f.write(tar)
        f.seek(0)
        with tarfile.open(fileobj=f) as t:
            t.extractall(out)
    return out


def start(path: str, backend: str) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", CHILD, backend], cwd=path, text=True,
                         env={**os.environ, "PYTHONPATH": path},
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert p.stdout.readline().strip() == "ready"
    return p


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", default="main")
    ap.add_argument("--after", default=".")
    ap.add_argument("--backend", default="bwrap")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--block", type=int, default=50)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sides = {side: start(checkout(ref, tmp, side), args.backend)
                 for side, ref in (("before", args.before), ("after", args.after))}
        lat: dict[str, list[float]] = {k: [] for k in sides}
        cpu = {k: 0.0 for k in sides}
        diffs = []
        for r in range(args.rounds):
            medians = {}
            for name in (("before", "after") if r % 2 == 0 else ("after", "before")):
                p = sides[name]
                p.stdin.write(f"{args.block}\n")
                p.stdin.flush()
                got = json.loads(p.stdout.readline())
                lat[name] += got["lat"]
                cpu[name] += got["cpu_s"]
                medians[name] = statistics.median(got["lat"])
            diffs.append(medians["after"] - medians["before"])
            print(f"round {r}: before {medians['before']:.2f} ms, after {medians['after']:.2f} ms", flush=True)
        for p in sides.values():
            p.stdin.close()
            p.wait(timeout=60)
    for name, xs in lat.items():
        xs = sorted(xs)
        print(f"{name:<7} {len(xs)} jobs: median {statistics.median(xs):.2f} ms, p90 {xs[int(0.9 * len(xs))]:.2f} ms, "
              f"CPU of the unit {1000 * cpu[name] / len(xs):.3f} ms per job")
    d = sorted(diffs)
    print(f"after - before, per round: median {statistics.median(d):+.2f} ms "
          f"(min {d[0]:+.2f}, max {d[-1]:+.2f} over {len(d)} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
