"""Run untrusted, model-written Python with real isolation, fast.

    from sandbox import run, Sandbox
    run("print(1+1)").stdout                      # '2\\n'
    with Sandbox(workers=4) as sb:                # warm pool; .map for batches
        results = sb.map(codes, timeout_s=2)

Every backend runs the same fork-per-job worker (`worker.py`) inside a different outer wall;
`auto` picks docker (engine reachable and image built), then bwrap, then - only with
MATHRL_SANDBOX_ALLOW_PROCESS=1 or `allow_process=True` - the plain process backend.

What IS protected (docker and bwrap): wall-clock timeout (the job and everything it spawned is
SIGKILLed), memory (RLIMIT_AS; docker adds a cgroup cap), process count (RLIMIT_NPROC on a
per-slot uid; docker adds pids.max), output size (killed past `max_output_bytes`), the
filesystem (only /usr and the Python install, read-only, plus a private tmpfs scratch that is
emptied after every job), the network (own empty network namespace), other jobs and the
worker (jobs run as an unprivileged uid of their own, no-new-privileges, no inherited fds),
daemons (after each job every process of the slot uid is killed), the next job (a job's
files of any mode and processes are gone before the next job of the slot starts, or the slot
is replaced; jobs are cloned from a forker that never held any job's code, stdin, output or
response), the kernel (a seccomp allowlist of the syscalls stdlib Python needs; anything else
fails with EPERM/ENOSYS: SysV IPC and POSIX message queues among them, so no job reaches
another's or the host's by a guessed key; where no filter is installed the slot's clean-up
removes what a job left there).

Each bwrap/process slot also gets its own memory + pids cgroup when the host allows it (v1,
or delegated v2); docker uses the engine's cgroup.

What is NOT protected: kernel exploits through the syscalls the seccomp allowlist lets through (every
backend installs it; docker stacks the engine's default profile on top; all share the host
kernel), CPU contention between jobs, timing side channels, the pid and tmpfs inode counters
a job can move and the next job read (docs/sandbox.md says why they stay open);
without a cgroup a job forking to its process limit can use up to nproc x memory_mb. The `process`
backend only limits resources: the host's files and network stay reachable, so it is not a
security boundary and its `isolation` label says so.
"""

from __future__ import annotations

import atexit
import threading

from .backends import BACKENDS, ALLOW_PROCESS_ENV
from .pool import Sandbox, default_workers
from .result import ExecResult, SandboxUnavailable

__all__ = ["run", "Sandbox", "ExecResult", "SandboxUnavailable", "available_backends",
           "ALLOW_PROCESS_ENV"]

_pools: dict[tuple[str, int], Sandbox] = {}
_pools_lock = threading.Lock()


def run(code: str, *, timeout_s: float = 5.0, memory_mb: int = 512,
        max_output_bytes: int = 65536, stdin: str = "", backend: str = "auto") -> ExecResult:
    """Run one program in a shared warm pool for (`backend`, `memory_mb`), started on first use
    and closed at interpreter exit."""
    with _pools_lock:
        pool = _pools.get((backend, memory_mb))
        if pool is None:
            pool = _pools[(backend, memory_mb)] = Sandbox(backend, workers=default_workers(),
                                                          memory_mb=memory_mb)
    return pool.run(code, timeout_s=timeout_s, memory_mb=memory_mb,
                    max_output_bytes=max_output_bytes, stdin=stdin)


def available_backends() -> dict[str, tuple[bool, str]]:
    """{name: (usable here, why or why not)} for every backend."""
    return {name: b.available() for name, b in BACKENDS.items()}


@atexit.register
def _close_pools() -> None:
    with _pools_lock:
        for pool in _pools.values():
            pool.close()
        _pools.clear()
