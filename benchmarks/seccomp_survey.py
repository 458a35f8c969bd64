"""Which syscalls do jobs make once their seccomp filter is on? Measured, not guessed.

Runs the honest workloads of `tests/sandbox_workloads.py` (and, with `--pytest`, any test files
given) through a real sandbox pool under `strace -f`, then counts, per syscall, how often a
process made it after it installed the job filter (a job is traced from its
`prctl(PR_SET_SECCOMP)` on, and every process it forks from birth). It prints the calls the
allowlist in `sandbox/seccomp_filter.py` lacks (these are the ones to look at: a workload needed
them, or an attack test tried them) and the allowed calls nobody made.

    python benchmarks/seccomp_survey.py [--backend bwrap] [--pytest tests/test_sandbox_behaviour.py ...]

Needs `strace` and root (or ptrace rights over the pool's processes).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from sandbox import seccomp_filter  # noqa: E402

LINE = re.compile(r"^(\d+)\s+(?:<\.\.\. (\w+) resumed>|(\w+)\()(.*)$")
RET = re.compile(r"\)\s+=\s+(-?\d+)(?: /\* (\d+) in strace's PID NS \*/)?")
FORKS = {"clone", "clone3", "fork", "vfork"}

RUN_WORKLOADS = """
import sys
from sandbox import Sandbox
from tests.sandbox_workloads import STDIN, WORKLOADS
with Sandbox(sys.argv[1], workers=1) as sb:
    for name, (code, want) in WORKLOADS.items():
        r = sb.run(code, stdin=STDIN.get(name, ""), timeout_s=20)
        print(name, "ok" if r.stdout == want and r.exit_code == 0 else f"FAILED {r.exit_code} {r.stderr[-300:]!r}")
"""


def filtered_calls(trace_path: str) -> collections.Counter:
    """syscall name -> calls made under a job filter, from one `strace -f` output file.

    Two passes: a forked child's first calls (a vfork child's execve, a thread's rseq) are
    logged before its parent's call returns the child's pid."""
    calls, since, births = [], {}, []  # since: pid -> index from which it runs filtered
    with open(trace_path, errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            pid, name, rest = int(m.group(1)), m.group(2) or m.group(3), m.group(4)
            ret = RET.search(rest)
            if m.group(2) is None:
                calls.append((pid, name))
            if name == "prctl" and "PR_SET_SECCOMP" in rest and ret and ret.group(1) == "0":
                since.setdefault(pid, len(calls))
            elif name in FORKS and ret and int(ret.group(1)) > 0:
                births.append((len(calls), pid, int(ret.group(2) or ret.group(1))))
    for at, parent, child in births:  # in log order, so grandchildren follow their parents
        if since.get(parent, len(calls) + 1) <= at:
            since.setdefault(child, 0)
    counts: collections.Counter = collections.Counter()
    for i, (pid, name) in enumerate(calls):
        if since.get(pid, len(calls) + 1) <= i:
            counts[name] += 1
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", default="bwrap")
    ap.add_argument("--pytest", nargs="*", default=[], help="test files to trace as well")
    args = ap.parse_args()
    total: collections.Counter = collections.Counter()
    env = {**os.environ, "PYTHONPATH": ROOT}
    runs = [[sys.executable, "-c", RUN_WORKLOADS, args.backend]]
    if args.pytest:
        runs.append([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                     "-k", args.backend, *args.pytest])
    with tempfile.TemporaryDirectory() as tmp:
        for i, cmd in enumerate(runs):
            out = os.path.join(tmp, f"trace{i}")
            strace = ["strace", "-f", "-qq", "--decode-pids=pidns", "-s", "0", "-o", out]
            p = subprocess.run([*strace, *cmd], cwd=ROOT, env=env, capture_output=True, text=True)
            print(p.stdout[-3000:], p.stderr[-2000:], sep="\n")
            total += filtered_calls(out)
    allowed = set(seccomp_filter.ALLOWED) | set(seccomp_filter.ARG_CHECKED)
    print("made under the filter, not allowed:",
          {k: v for k, v in sorted(total.items()) if k not in allowed})
    print("allowed, never made:", sorted(allowed - set(total)))
    print("made under the filter (all):", dict(sorted(total.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
