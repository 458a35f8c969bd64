"""Host side: one `Slot` per long-lived worker unit, and the `Sandbox` pool over them.

The host never trusts the worker's clock alone: each request has a host deadline
(timeout + grace). A worker that misses it, dies or talks garbage gets its whole unit
killed by the backend and a fresh one on the next job.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import select
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Sequence

from .backends import Backend, SlotSpec, resolve
from .cgroups import SlotCgroup
from .frames import read_exact, read_frame, write_frame
from .residue import wipe
from .result import ExecResult, SandboxUnavailable

log = logging.getLogger(__name__)
GRACE_S = 3.0  # above the worker's budget for clearing a slot after a job (worker.SWEEP_BUDGET_S)
CGROUP_OVERHEAD_MB = 128  # the worker and its helper, on top of the job's memory_mb
START_TIMEOUT_S = 60.0
HOST_WIPE_S = 30.0  # removing a process slot's scratch dir on the host when the unit goes
SECCOMP_LABEL = ("seccomp allowlist (the syscalls stdlib Python needs; others EPERM/ENOSYS; no new "
                 "namespaces, socket families unix/inet/inet6, listed fcntl and ioctl commands)")


_spawner: tuple[int, ThreadPoolExecutor] | None = None  # (pid, its thread): a forked child needs its own
_spawner_lock = threading.Lock()


def spawn(argv: list[str], **kw) -> subprocess.Popen:
    """``subprocess.Popen`` from one thread that lives as long as this process. The kernel's parent-death
    signal (bwrap's --die-with-parent, PR_SET_PDEATHSIG) fires when the *thread* that forked the child
    exits, not the process: a unit started from a short-lived thread (``Sandbox.map``'s, the rollout
    tool runner's per turn) was killed when that thread ended, at times in the middle of its next job
    ("worker unit killed")."""
    global _spawner
    with _spawner_lock:
        if _spawner is None or _spawner[0] != os.getpid():
            _spawner = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix="sandbox-spawn"))
        executor = _spawner[1]
    return executor.submit(subprocess.Popen, argv, **kw).result()


class Slot:
    """One worker unit behind one backend wall; not thread-safe (the pool serialises)."""

    def __init__(self, backend: Backend, memory_mb: int):
        self.backend = backend
        self.memory_mb = memory_mb
        self.proc: subprocess.Popen | None = None
        self.spec: SlotSpec | None = None
        self.cg: SlotCgroup | None = None
        self._wfd = self._rfd = None
        self.isolation = backend.isolation
        self._errlog = None
        self.recycled: list[str] = []  # why the unit was replaced after a job, oldest first

    def start(self) -> None:
        self.spec = SlotSpec(memory_mb=self.memory_mb)
        self._errlog = tempfile.TemporaryFile()
        kw = self.backend.popen_kwargs()
        self.isolation = self.backend.isolation
        if self.backend.own_cgroup:
            self.cg = SlotCgroup.create(self.spec.name, self.memory_mb + CGROUP_OVERHEAD_MB,
                                        self.spec.nproc + 16)
            kw["preexec_fn"] = self.cg.enter if self.cg else None
            self.isolation += "; " + (
                self.cg.label if self.cg else "no cgroup (memory capped per process only)")
        try:
            self._spawn(kw)
        except OSError as e:
            self.close()
            raise SandboxUnavailable(f"{self.backend.name} worker failed to start: {e}") from e
        hello = self._read(time.monotonic() + START_TIMEOUT_S)
        if not (isinstance(hello, dict) and hello.get("ready")):
            detail = self._stderr_tail()
            self.close()
            raise SandboxUnavailable(f"{self.backend.name} worker failed to start: {detail}")
        if hello.get("seccomp"):
            self.isolation += "; " + SECCOMP_LABEL

    def _spawn(self, kw: dict) -> None:
        argv = self.backend.argv(self.spec)
        try:
            self._popen(argv, {**kw, "pass_fds": self.spec.pass_fds} if self.spec.pass_fds else kw)
        finally:
            for fd in self.spec.pass_fds:  # bwrap has read them before it started the worker
                os.close(fd)
            self.spec.pass_fds.clear()

    def _popen(self, argv: list[str], kw: dict) -> None:
        if self.spec.fifo_dir:  # the unit talks over FIFOs in spec.host_dir, not its stdio
            self.proc = spawn(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._errlog, **kw)
            self._wfd = os.open(os.path.join(self.spec.host_dir, "req"), os.O_RDWR)
            self._rfd = os.open(os.path.join(self.spec.host_dir, "resp"),
                                os.O_RDONLY | os.O_NONBLOCK)
            os.set_blocking(self._rfd, True)
        else:
            self.proc = spawn(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._errlog, bufsize=0,
                              **kw)
            self._wfd, self._rfd = self.proc.stdin.fileno(), self.proc.stdout.fileno()

    def run(self, req: dict) -> ExecResult:
        if self.proc is None or self.proc.poll() is not None:
            self.close()
            self.start()
        t0 = time.monotonic()
        ooms = self.cg.oom_kills() if self.cg else 0
        payload = json.dumps({"code": req["code"], "stdin": req.get("stdin", "")}).encode()
        head = {k: v for k, v in req.items() if k not in ("code", "stdin")}
        try:
            write_frame(self._wfd, {**head, "size": len(payload)}, memoryview(payload))
            res = self._read_result(t0 + float(req["timeout_s"]) + GRACE_S)
        except (BrokenPipeError, ValueError, OSError):
            res = None
        if not isinstance(res, dict):
            timed_out = time.monotonic() - t0 >= float(req["timeout_s"])
            why = "" if timed_out else " " + self._stderr_tail()
            self.close()  # kill the whole unit: a job or the worker misbehaved
            res = {"stdout": "", "stderr": f"sandbox: worker unit killed{why}", "exit_code": -9,
                   "timed_out": timed_out, "output_truncated": False,
                   "duration_ms": (time.monotonic() - t0) * 1000.0}
        # The kernel's word, not the job's: a MemoryError is an exception any job can raise.
        res["oom"] = bool(self.cg) and self.cg.oom_kills() > ooms
        if res["oom"]:
            res["stderr"] += (f"\nsandbox: the kernel OOM killer ended this job (slot memory cap "
                              f"{self.memory_mb + CGROUP_OVERHEAD_MB} MB, memory_mb + overhead)")
        recycle = res.pop("recycle", None)
        if recycle:  # the job left something the worker could not remove: replace the unit
            log.warning("sandbox %s slot replaced after a job: %s", self.backend.name, recycle)
            self.recycled.append(recycle)
            self.close()
        return ExecResult(backend=self.backend.name, isolation=self.isolation, **res)

    def _read_result(self, deadline: float) -> dict | None:
        """The response header and the raw stdout/stderr after it, decoded."""
        head = self._read(deadline)
        if not isinstance(head, dict):
            return None
        sizes = head.pop("sizes", [0, 0])
        out, err = (read_exact(self._rfd, n) if n else b"" for n in sizes)
        if out is None or err is None:
            return None
        error = head.pop("error", None)
        head["stdout"] = out.decode("utf-8", "replace")
        head["stderr"] = error or err.decode("utf-8", "replace")
        return head

    def _read(self, deadline: float):
        """One frame, or None at the deadline or once the unit has exited without one."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if select.select([self._rfd], [], [], min(left, 0.5))[0]:
                # The worker (our code, out of the jobs' reach) writes each frame in one
                # go, so once its first byte is here the rest follows.
                return read_frame(self._rfd)
            if self.proc.poll() is not None and not select.select([self._rfd], [], [], 0)[0]:
                return None

    def _stderr_tail(self) -> str:
        if self._errlog is None:
            return ""
        self._errlog.seek(0)
        return self._errlog.read()[-2000:].decode("utf-8", "replace").strip()

    def close(self) -> None:
        if self.proc is not None:
            self.backend.kill(self.spec, self.proc)  # also when it exited: leftovers by uid
            for f in (self.proc.stdin, self.proc.stdout):
                try:
                    f.close() if f is not None else None
                except OSError:
                    pass
            if self.spec.fifo_dir:
                for fd in (self._wfd, self._rfd):
                    if fd is not None:
                        os.close(fd)
            self._wfd = self._rfd = None
            self.proc = None
        if self.cg is not None:
            self.cg.destroy()
            self.cg = None
        if self.spec is not None and self.spec.host_dir:
            # not shutil.rmtree: a job can leave a tree deeper than its recursion allows
            wipe(self.spec.host_dir, time.monotonic() + HOST_WIPE_S)
            try:
                os.rmdir(self.spec.host_dir)
            except OSError:
                pass
            self.spec.host_dir = None
        if self._errlog is not None:
            self._errlog.close()
            self._errlog = None


class Sandbox:
    """A pool of warm worker units. Use as a context manager (or call `close()`).

    `memory_mb` is the per-job default and sizes each slot's cgroup or container (plus
    overhead); a job asking for more still gets at most the slot's cap.
    """

    def __init__(self, backend: str = "auto", workers: int = 2, *, memory_mb: int = 512,
                 allow_process: bool | None = None):
        self.backend = resolve(backend, allow_process)
        self.memory_mb = memory_mb
        self._slots = [Slot(self.backend, memory_mb) for _ in range(max(1, workers))]
        self._free: queue.Queue[Slot] = queue.Queue()
        for s in self._slots:
            self._free.put(s)
        self._closed = False
        self._owner_pid = os.getpid()  # a forked child must not tear down the parent's units
        self._lock = threading.Lock()
        self._slots[0].start()  # fail fast, here, when the backend cannot start a worker

    def warm(self) -> "Sandbox":
        """Start every slot now (slots otherwise start on their first job)."""
        slots = [self._free.get() for _ in self._slots]
        try:
            with ThreadPoolExecutor(len(slots)) as ex:
                list(ex.map(lambda s: s.start() if s.proc is None else None, slots))
        finally:
            for s in slots:
                self._free.put(s)
        return self

    @property
    def workers(self) -> int:
        return len(self._slots)

    def run(self, code: str, *, timeout_s: float = 5.0, memory_mb: int | None = None,
            max_output_bytes: int = 65536, stdin: str = "") -> ExecResult:
        if self._closed:
            raise RuntimeError("Sandbox is closed")
        req = {"code": code, "stdin": stdin, "timeout_s": float(timeout_s),
               "memory_mb": int(memory_mb or self.memory_mb),
               "max_output_bytes": int(max_output_bytes)}
        slot = self._free.get()
        try:
            return slot.run(req)
        finally:
            self._free.put(slot)

    def map(self, codes: Iterable[str], *, stdins: Sequence[str] | None = None,
            progress: bool | None = None, **kw) -> list[ExecResult]:
        """Run many programs over all workers; results come back in input order."""
        codes = list(codes)
        stdins = list(stdins) if stdins is not None else [""] * len(codes)
        if len(stdins) != len(codes):
            raise ValueError("stdins must match codes in length")
        show = len(codes) >= 200 if progress is None else progress
        with ThreadPoolExecutor(self.workers) as ex:
            futs = [ex.submit(self.run, c, stdin=s, **kw) for c, s in zip(codes, stdins)]
            if show:
                from tqdm import tqdm

                for _ in tqdm(futs, total=len(futs), desc=f"sandbox[{self.backend.name}]"):
                    _.result()
            return [f.result() for f in futs]

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if os.getpid() != self._owner_pid:
            return
        for s in self._slots:
            s.close()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))
