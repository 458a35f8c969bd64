"""Optional per-slot cgroup (memory + pids caps, CPU share) for the bwrap and process backends.

Rlimits cap each process; a cgroup caps the slot as a whole, so a job that forks to its
process limit cannot multiply its memory. Used when this host lets us create one: cgroup v1
(memory and pids hierarchies writable, as on our dev machine) or v2 (a writable subtree with
the memory and pids controllers delegated). Otherwise `SlotCgroup.create` returns None and the
slot runs on rlimits alone; its isolation label says which.

Where the cpu controller is there too, each slot also gets an equal CPU weight and a quota of
`cpus` CPUs. The weight is counted per slot, not per process or session: the scheduler's
autogroups (one per `setsid`) apply only to tasks in the root cgroup, so 60 forked `setsid`
children weigh as one slot; the quota caps what the slot takes from everything else.
"""

from __future__ import annotations

import os
import signal
import time

ROOT = "/sys/fs/cgroup"
CPU_PERIOD_US = 10_000  # a short period: a throttled slot waits at most this long, not 100 ms
CPU_WEIGHT_V1, CPU_WEIGHT_V2 = 1024, 100  # the defaults, written so no inherited value counts


def _own_paths() -> dict[str, str]:
    """{controller or '' for v2: cgroup path of this process}."""
    out = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            for c in ctrls.split(",") if ctrls else [""]:
                out[c] = path
    return out


class SlotCgroup:
    def __init__(self, dirs: list[str], version: int):
        self.dirs = dirs  # v1: [memory dir, pids dir, cpu dir if any]; v2: [unified dir]
        self.version = version
        self.cpus: float | None = None  # the slot's CPU quota, when the cpu controller is here

    @classmethod
    def create(cls, name: str, memory_mb: int, pids: int, cpus: float = 1.0) -> "SlotCgroup | None":
        try:
            if os.path.exists(f"{ROOT}/cgroup.controllers"):
                return cls._create_v2(name, memory_mb, pids, cpus)
            return cls._create_v1(name, memory_mb, pids, cpus)
        except OSError:
            return None

    @classmethod
    def _create_v1(cls, name, memory_mb, pids, cpus):
        own = _own_paths()
        mem = os.path.join(ROOT, "memory", own.get("memory", "/").lstrip("/"), name)
        pid = os.path.join(ROOT, "pids", own.get("pids", "/").lstrip("/"), name)
        cg = cls([], 1)
        try:
            for d in (mem, pid):
                os.mkdir(d)
                cg.dirs.append(d)
            _write(mem, "memory.limit_in_bytes", memory_mb << 20)
            _write(pid, "pids.max", pids)
        except OSError:
            cg.destroy()
            raise
        cpu = os.path.join(ROOT, "cpu", own.get("cpu", "/").lstrip("/"), name)
        try:  # optional: without it the slot still has its memory and pids caps
            os.mkdir(cpu)
            cg.dirs.append(cpu)
            _write(cpu, "cpu.shares", CPU_WEIGHT_V1)
            _write(cpu, "cpu.cfs_period_us", CPU_PERIOD_US)
            _write(cpu, "cpu.cfs_quota_us", int(cpus * CPU_PERIOD_US))
            cg.cpus = cpus
        except OSError:
            if cg.dirs[-1] == cpu:
                cg.dirs.pop()
                os.rmdir(cpu)
        return cg

    @classmethod
    def _create_v2(cls, name, memory_mb, pids, cpus):
        parent = os.path.join(ROOT, _own_paths().get("", "/").lstrip("/"))
        with open(os.path.join(parent, "cgroup.subtree_control")) as f:
            delegated = set(f.read().split())
        if not {"memory", "pids"} <= delegated:
            raise OSError("memory/pids controllers not delegated here")
        d = os.path.join(parent, name)
        os.mkdir(d)
        cg = cls([d], 2)
        try:
            _write(d, "memory.max", memory_mb << 20)
            _write(d, "memory.swap.max", 0)
            _write(d, "pids.max", pids)
            if "cpu" in delegated:
                _write(d, "cpu.weight", CPU_WEIGHT_V2)
                _write(d, "cpu.max", f"{int(cpus * CPU_PERIOD_US)} {CPU_PERIOD_US}")
                cg.cpus = cpus
        except OSError:
            cg.destroy()
            raise
        return cg

    @property
    def label(self) -> str:
        cpu = f", {self.cpus:g} CPU quota" if self.cpus else ", no CPU share (cpu controller missing)"
        return f"cgroup v{self.version} memory + pids cap{cpu} per slot"

    def enter(self) -> None:
        """Move the calling process in (call from the child before exec: preexec_fn)."""
        for d in self.dirs:
            _write(d, "cgroup.procs", 0)

    def oom_kills(self) -> int:
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        try:
            with open(os.path.join(self.dirs[0], name)) as f:
                for line in f:
                    if line.startswith("oom_kill "):
                        return int(line.split()[1])
        except (OSError, IndexError, ValueError):
            pass
        return 0

    def destroy(self) -> None:
        """Kill what is left inside, then remove the directories (retrying while busy)."""
        for d in reversed(self.dirs):
            for _ in range(200):
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    _kill_members(d)
                    time.sleep(0.005)
        self.dirs = []


def _kill_members(d: str) -> None:
    try:
        with open(os.path.join(d, "cgroup.procs")) as f:
            pids = [int(x) for x in f.read().split()]
    except OSError:
        return
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


def _write(d: str, name: str, value) -> None:
    with open(os.path.join(d, name), "w") as f:
        f.write(str(value))
