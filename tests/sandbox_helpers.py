"""Helpers for the sandbox tests and checks: backend params, host-side process checks.

A backend that cannot run here is skipped with its reason (shown by `-ra` in the summary);
docker tests carry the `docker` marker and run under `make test-docker`.
"""

from __future__ import annotations

import os

import pytest

from sandbox import Sandbox
from sandbox.backends import BACKENDS

BACKEND_PARAMS = [pytest.param("docker", marks=pytest.mark.docker), "bwrap", "process"]

# What the process backend does NOT contain (it is not a security boundary); the tests
# still run there and are expected to fail (strict xfail), which is the attack matrix.
PROCESS_GAPS = {"write_outside", "read_passwd", "socket"}
# Without a per-slot uid (not root, or a Python the uid cannot read) root may read every
# file, and only a cgroup caps processes; without either the process-count attacks would
# hit the host, so they are skipped there rather than run.
NO_UID_GAPS = {"read_secret"}
NO_UID_UNSAFE = {"fork_bomb", "process_cap"}

# Tries to fork 2000 sleeping children and prints how many it got: the process-cap attack.
FORK_2000 = ("import os, time\nn = 0\n"
             "for _ in range(2000):\n"
             "    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
             "    if pid == 0:\n        time.sleep(30)\n        os._exit(0)\n    n += 1\n"
             "print(n)")


def require(backend: str) -> None:
    ok, why = BACKENDS[backend].available()
    if not ok:
        pytest.skip(f"{backend} backend unavailable here: {why}")


def has_cgroup(sb: Sandbox) -> bool:
    """Docker always caps the container; bwrap/process slots only when the host allowed one."""
    return sb.backend.name == "docker" or all(s.cg is not None for s in sb._slots if s.proc)


def mark_gap(request, sb: Sandbox, attack: str) -> None:
    """Turn an attack this backend cannot contain here into a strict xfail (or a skip when
    running it would hit the host); the outcomes are the attack matrix."""
    if attack == "fork_alloc" and not has_cgroup(sb):
        request.node.add_marker(pytest.mark.xfail(
            strict=True, reason="no cgroup here: memory is capped per process only"))
    if sb.backend.name != "process":
        return
    no_uid = not BACKENDS["process"].drops_uid
    if no_uid and attack in NO_UID_UNSAFE and not has_cgroup(sb):
        pytest.skip(f"process backend without a per-slot uid or cgroup cannot cap processes; "
                    f"{attack} would hit the host")
    if attack in PROCESS_GAPS or (no_uid and attack in NO_UID_GAPS):
        request.node.add_marker(pytest.mark.xfail(
            strict=True, reason=f"process backend does not contain {attack}"))


def open_pool(backend: str, workers: int = 2) -> Sandbox:
    require(backend)
    return Sandbox(backend, workers=workers)


def slot_uids(sb: Sandbox) -> list[int]:
    return [s.spec.uid for s in sb._slots if s.spec is not None]


def procs_of_uids(uids) -> list[int]:
    """Host pids whose real uid is one of `uids` (job uids are unique per slot)."""
    uids, found = set(uids), []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) in uids:
                            found.append(int(name))
                        break
        except OSError:
            pass
    return found


def procs_with_token(token: str) -> list[int]:
    """Host pids whose command line contains `token` (seen across pid namespaces)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if token.encode() in f.read():
                        found.append(int(name))
            except OSError:
                pass
    return found


def daemon_code(token: str) -> str:
    """A job that leaves a double-forked, setsid daemon carrying `token` in its argv."""
    return ("import os, sys\n"
            "if os.fork() == 0:\n    os.setsid()\n"
            "    if os.fork() == 0:\n"
            "        os.execv(sys.executable, [sys.executable, '-c', "
            f"'import time; time.sleep(60)', {token!r}])\n"
            "    os._exit(0)\n"
            "print('spawned')")


def unit_members(sb: Sandbox) -> set[int]:
    """Host pids in the slots' cgroups (bwrap/process with a cgroup), else an empty set."""
    pids: set[int] = set()
    for s in sb._slots:
        if s.cg is not None:
            with open(os.path.join(s.cg.dirs[-1], "cgroup.procs")) as f:
                pids |= {int(x) for x in f.read().split()}
    return pids


def leftovers(sb: Sandbox, baseline: set[int]) -> list[int]:
    """Job processes still alive: any process of a slot uid, or a cgroup member that was
    not there before the job (catches jobs that run under the worker's own uid)."""
    return sorted(set(procs_of_uids(slot_uids(sb))) | (unit_members(sb) - baseline))
