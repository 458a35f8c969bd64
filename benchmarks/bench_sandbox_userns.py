"""What a fresh pid namespace (and tmpfs) per job would cost inside a bwrap slot's wall.

The pid and tmpfs inode counters carry a number from one job of a slot to the next
(docs/sandbox.md, "what is not protected"); a fresh pid namespace and tmpfs per job would
reset them. The worker holds no CAP_SYS_ADMIN, but a user namespace made per job grants it
inside. This runs, in the same bwrap wall a root pool gives its worker (capabilities SETUID,
SETGID and KILL only), N "jobs" of each kind - a fork whose child forks and waits, the shape
of a job - plain, in a fresh user + pid namespace, and also in a fresh mount namespace with
a tmpfs of its own, and prints per job the median wall time and the CPU time (own and reaped
children's), which waiting for a busy CPU does not inflate. Namespace teardown the kernel
defers to its own threads is not counted. Needs root (unprivileged bwrap runs with
--disable-userns, where the namespaced kinds fail).

    python benchmarks/bench_sandbox_userns.py [--jobs 100]
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from sandbox.backends import BwrapBackend, SlotSpec, wall_python

PROBE = r"""
import ctypes, os, resource, sys, time
libc = ctypes.CDLL(None, use_errno=True)
NEWUSER, NEWPID, NEWNS = 0x10000000, 0x20000000, 0x00020000
MS_REC, MS_PRIVATE = 0x4000, 0x40000

def job(flags, mount):
    pid = os.fork()
    if pid == 0:
        if flags and libc.unshare(flags) != 0:
            os._exit(3)
        if mount and (libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0
                      or libc.mount(b"tmpfs", b"/tmp", b"tmpfs", 0, b"size=1m") != 0):
            os._exit(4)
        c = os.fork()
        if c == 0:
            os._exit(0 if not flags & NEWPID or os.getpid() == 1 else 5)
        os._exit(os.waitstatus_to_exitcode(os.waitpid(c, 0)[1]))
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

def cpu():
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime

n = int(sys.argv[1])
for name, flags, mount in (("plain fork", 0, False), ("user + pid ns", NEWUSER | NEWPID, False),
                           ("user + pid + mount ns, own tmpfs", NEWUSER | NEWPID | NEWNS, True),
                           ("plain fork (again)", 0, False)):
    rc = job(flags, mount)
    if rc:
        print(f"{name:34s} failed here (exit {rc})")
        continue
    walls, c0 = [], cpu()
    for _ in range(n):
        t = time.perf_counter()
        job(flags, mount)
        walls.append(time.perf_counter() - t)
    walls.sort()
    print(f"{name:34s} wall median {walls[n // 2] * 1e3:8.3f} ms   CPU {(cpu() - c0) / n * 1e3:6.3f} ms per job")
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=100)
    args = ap.parse_args()
    ok, why = BwrapBackend().available()
    if not ok:
        print(why)
        return 1
    argv = BwrapBackend().argv(SlotSpec(), [wall_python()[0], "-I", "-c", PROBE, str(args.jobs)])
    return subprocess.run(argv).returncode


if __name__ == "__main__":
    sys.exit(main())
