"""Fork-per-job worker: the one protocol every sandbox backend runs inside its outer wall.

Started once per pool slot (inside bwrap, inside a container, or as a plain process), it
imports nothing outside the standard library, answers one framed JSON request at a time on
its stdin/stdout, and runs each job in a forked child so a job costs a fork, not a Python start.

Per job, the child (cloned from the forker, see below):
  - reads its request from a pipe;
  - drops to the slot's own unprivileged uid/gid (when the worker is root), in a new session;
  - gets rlimits: address space (memory_mb), processes (nproc, counted per slot uid), file
    size, CPU seconds, no core dumps;
  - runs in a fresh scratch dir with stdin from a file and stdout/stderr into pipes;
  - sees no inherited descriptor but its stdin file and the two output pipes: nothing it holds
    reports about it, so it cannot write to the worker's protocol or forge a result field;
  - is the OOM killer's first choice in its slot (`oom_score_adj` 1000; it cannot lower it).
The worker enforces wall time and the output cap itself and SIGKILLs on breach. It decides
`timed_out` from its own clock and the job's CPU time (`wait4` rusage), never from how the job
died; `oom` is the host's, from the slot cgroup's OOM-kill counter (pool.py).

Nothing of one job reaches the next job of the slot:
  - after every job a cheap check (`residue.Residue.find`: no child left, empty scratch dir,
    no IPC object) runs; when it finds anything, a helper forked with the slot uid calls
    kill(-1, SIGKILL) - atomic against forks, so it also ends fork bombs and double-forked
    daemons - and removes what the job left (files of any mode and depth, SysV IPC objects,
    POSIX message queues). If the slot is still not clean after two sweeps, the response
    carries `recycle` with the reason and the host replaces the whole unit.
  - jobs are not forks of this worker, whose freed memory holds what it learnt about earlier
    jobs (response headers, byte counts, clock readings): they are cloned, as the worker's
    children, from a forker taken before the first job that never learns anything about a
    job (`Forker`); the request goes straight from the worker to the job through a pipe. The
    worker still keeps job bytes only in `frames.Buf`s that are zeroed after use.
Without root (process backend run by a normal user) the uid drop and kill(-1) are
impossible; the worker then kills its descendant tree found through /proc (it is a child
subreaper, so orphans come back to it). That mode is not a security boundary.

The wire format (frames after a JSON header) is in `frames.py`.
"""

import ctypes
import json
import os
import platform
import resource
import select
import signal
import socket
import sys
import time

# Imported here so that forked jobs find them already loaded (a fork copies them for free).
import builtins, collections, fractions, functools, io, itertools, math, random, re, string  # noqa: E401,F401
import traceback
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I dropped the script dir
from frames import Buf, read_frame, write_frame  # noqa: E402  (shipped next to this file)
from residue import Residue  # noqa: E402

try:
    import seccomp_filter
except ImportError:  # the wall did not provide it: jobs run without the allowlist
    seccomp_filter = None

PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
PR_SET_PDEATHSIG = 1
CLONE_PARENT = 0x8000
WALL = 0x40000000  # __WALL: wait for children whatever their exit signal (jobs have none)
NR_CLONE = {"x86_64": 56, "aarch64": 220}.get(platform.machine())
_libc = ctypes.CDLL(None, use_errno=True)
_pylibc = ctypes.PyDLL(None, use_errno=True)  # calls that keep the GIL: a raw clone must
_pylibc.syscall.restype = ctypes.c_long       # not happen while another thread could run
OOM_SCORE_ADJ = b"1000"  # the job, not the worker, dies when the slot runs out of memory
CHUNK = 4096  # first size of an output buffer; it doubles up to the job's output cap
SWEEP_BUDGET_S = 1.5  # default for killing and removing leftovers; below the host's grace


class Worker:
    def __init__(self, cfg):
        self.uid = cfg.get("uid")  # job uid; None = cannot switch (not root)
        self.gid = cfg.get("gid", self.uid)
        self.scratch = cfg["scratch"]
        self.nproc = cfg.get("nproc", 64)
        self.fsize_mb = cfg.get("fsize_mb", 64)
        self.can_drop = self.uid is not None and os.getuid() == 0
        # In a fresh user namespace (unprivileged bwrap) RLIMIT_NPROC counts that namespace.
        self.nproc_always = bool(cfg.get("own_userns"))
        self.sweep_budget_s = float(cfg.get("sweep_budget_s", SWEEP_BUDGET_S))
        self.residue = Residue(self.scratch, self.uid if self.can_drop else None,
                               bool(cfg.get("private_ipc")), cfg.get("mqueue_dir"))
        _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        self.seccomp = _probe_seccomp()
        # Last, before any job: the process jobs are forked from (None: plain forks, see Forker)
        self.forker = None
        self.forker = Forker(self) if NR_CLONE else None

    def run_job(self, head, payload):
        """Run one job; returns (response header, stdout Buf, stderr Buf)."""
        t0 = time.monotonic()
        req_r, req_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            pid = self._spawn(req_r, out_w, err_w, (req_w, out_r, err_r))
        except BaseException:
            for fd in (req_w, out_r, err_r):
                os.close(fd)
            raise
        finally:
            for fd in (req_r, out_w, err_w):
                os.close(fd)
        try:  # the job reads its own request; we keep only the buffer, zeroed below
            with payload.view() as view:
                write_frame(req_w, head, view)
        except BrokenPipeError:  # it died before reading: reported as it ended
            pass
        finally:
            os.close(req_w)
            payload.scrub()
        res, out, err = self._supervise(pid, head, out_r, err_r, t0)
        res["duration_ms"] = (time.monotonic() - t0) * 1000.0
        return res, out, err

    def _spawn(self, req_r, out_w, err_w, ours):
        """Start a job reading its request from req_r; returns its pid (a child of ours)."""
        if self.forker is not None:
            return self.forker.start(req_r, out_w, err_w)
        pid = os.fork()  # no raw clone on this architecture: the job is a fork of us
        if pid == 0:
            for fd in ours:
                os.close(fd)
            _child(self, req_r, out_w, err_w)
        return pid

    def _supervise(self, pid, head, out_r, err_r, t0):
        cap = int(head.get("max_output_bytes", 65536))
        deadline = t0 + float(head.get("timeout_s", 5.0))
        bufs = {out_r: Buf(CHUNK, cap), err_r: Buf(CHUNK, cap)}
        pidfd = os.pidfd_open(pid)
        open_fds, timed_out, truncated, status, usage = {out_r, err_r}, False, False, None, None
        while status is None:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([*open_fds, pidfd], [], [], left)
            for fd in ready:
                if fd == pidfd:
                    status, usage = os.wait4(pid, WALL)[1:]
                    continue
                truncated |= _drain(fd, bufs[fd], open_fds)
            if truncated:
                break
        if status is None:
            os.kill(pid, signal.SIGKILL)
            status, usage = os.wait4(pid, WALL)[1:]
        recycle = self._clear_slot()  # also closes pipes held by leftovers, so draining ends
        end = time.monotonic() + 1.0
        while open_fds and time.monotonic() < end:
            ready, _, _ = select.select(list(open_fds), [], [], max(0.0, end - time.monotonic()))
            for fd in ready:
                truncated |= _drain(fd, bufs[fd], open_fds)
        for fd in (out_r, err_r, pidfd):
            os.close(fd)
        # Threads can burn the CPU-seconds rlimit before the wall clock runs out: that is a
        # timeout too, told by the CPU time the kernel counted, not by the signal it died of.
        timed_out |= usage.ru_utime + usage.ru_stime >= _cpu_seconds(head)
        res = {"exit_code": os.waitstatus_to_exitcode(status), "timed_out": timed_out,
               "output_truncated": truncated}
        if recycle:
            res["recycle"] = recycle
        return res, bufs[out_r], bufs[err_r]

    def _clear_slot(self):
        """End every process the job left and remove what it left in the slot. None when the
        slot is clean again (checked cheaply after every job), else why it is not."""
        if not _reap() and self.residue.find() is None:
            return None  # the common case: a few reads, no fork
        end = time.monotonic() + self.sweep_budget_s
        for _ in range(2):
            self._sweep(end)
            left = "job processes left" if _reap() else self.residue.find()
            if left is None or time.monotonic() >= end:
                break
        return left

    def _sweep(self, end):
        """Kill the job's leftover processes and remove its files and IPC objects."""
        if not self.can_drop:  # same uid as the jobs (or root without a slot uid)
            self._kill_tree(end)
            self.residue.remove(end)
            return
        pid = os.fork()
        if pid == 0:  # as the slot uid: kill(-1) ends every process of it, atomically
            try:
                _drop(self.uid, self.gid)
                try:
                    os.kill(-1, signal.SIGKILL)
                except ProcessLookupError:  # nothing left to kill
                    pass
                self.residue.remove(end)
            except BaseException:
                os._exit(1)
            os._exit(0)
        pidfd = os.pidfd_open(pid)
        if not select.select([pidfd], [], [], max(0.0, end - time.monotonic()))[0]:
            os.kill(pid, signal.SIGKILL)  # over budget: the host will replace the unit
        os.close(pidfd)
        os.waitpid(pid, 0)
        while _reap() and time.monotonic() < end:  # the killed jobs, as they die
            time.sleep(0.0005)

    def _kill_tree(self, end):
        """Without a slot uid: kill the worker's descendants, found through /proc."""
        spare = self.forker.pid if self.forker is not None else None
        while _reap() and time.monotonic() < end:
            for k in _descendants(os.getpid(), spare):
                try:
                    os.kill(k, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.001)


def _probe_seccomp():
    """Can a job install the seccomp filter here? Tried once, in a throwaway child."""
    if seccomp_filter is None:
        return False
    pid = os.fork()
    if pid == 0:
        _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        os._exit(0 if seccomp_filter.install() else 1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def _drain(fd, buf, open_fds):
    """Read what is available; return True when the cap is exceeded."""
    if not buf.fill(fd):
        open_fds.discard(fd)
    if buf.n > buf.cap:
        open_fds.discard(fd)
        return True
    return False


def _drop(uid, gid):
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)


class Forker:
    """The process every job is forked from: a clone of the worker taken before its first job.

    A job is a fork, so it starts with a copy of its parent's memory. The worker's memory holds
    what it learnt about earlier jobs in ordinary Python objects, freed but never zeroed (the
    response header, the stderr byte count as an int, its clock readings); a job forked from
    it found them. The forker never learns anything about a job: per job it gets three
    descriptors (the request pipe the job reads, its stdout and stderr pipes) and answers the
    pid. It clones each job with CLONE_PARENT, so the job is the worker's child, waited for,
    timed and cleaned up by the worker as before, and the request travels from the worker to
    the job without passing through the forker. The forker itself is cloned with no exit
    signal (and so are its jobs: CLONE_PARENT copies it): `waitpid(-1)` does not see it, and
    "no child left" still means no job process is left (jobs cannot make such children: the
    seccomp filter refuses CLONE_PARENT; their other children get SIGCHLD when they come to us).
    One clone per job, as one fork was before; the extra cost is two messages on a socket.
    """

    def __init__(self, w):
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = _clone(0)
        if pid == 0:
            _forker_main(w, theirs)  # never returns
        theirs.close()
        self.pid = pid

    def start(self, req_r, out_w, err_w):
        try:  # failing, this job reports a worker error and the host replaces the unit
            socket.send_fds(self.sock, [b"j"], [req_r, out_w, err_w])
            got = self.sock.recv(4)
        except OSError as e:
            raise OSError(f"the job forker is gone ({e!r})") from None
        if len(got) != 4:
            raise OSError("the job forker is gone (closed)")
        return int.from_bytes(got, "little")


def _forker_main(w, sock):
    try:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # it goes with the worker
        _close_fds_from(3, keep=sock.fileno())  # the protocol pipes are the worker's alone
        while True:
            msg, fds, _, _ = socket.recv_fds(sock, 1, 3)
            if not msg or len(fds) != 3:
                os._exit(0)  # the worker closed its end
            pid = _clone(CLONE_PARENT)
            if pid == 0:  # the job: never returns
                _child(w, *fds)
            for fd in fds:
                os.close(fd)
            sock.send(pid.to_bytes(4, "little"))
    except BaseException:
        os._exit(1)


def _clone(flags):
    """fork(2) as a raw clone(2) with these flags, keeping CPython's fork bookkeeping (the
    GIL, the import lock, `os.register_at_fork` hooks such as `random`'s reseed)."""
    ctypes.pythonapi.PyOS_BeforeFork()
    pid = _pylibc.syscall(ctypes.c_long(NR_CLONE), ctypes.c_long(flags), *[ctypes.c_long(0)] * 4)
    if pid == 0:
        ctypes.pythonapi.PyOS_AfterFork_Child()
        return 0
    err = ctypes.get_errno()
    ctypes.pythonapi.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(err, f"clone: {os.strerror(err)}")
    return pid


def _child(w, req_r, out_w, err_w):
    try:
        head = read_frame(req_r)
        payload = Buf(int(head["size"]))
        if not payload.fill_exact(req_r):
            raise OSError("request cut short")
        req = json.loads(payload.data)
        stdin_path = os.path.join(w.scratch, ".stdin")
        os.setsid()
        with open("/proc/self/oom_score_adj", "wb", buffering=0) as f:
            f.write(OOM_SCORE_ADJ)  # raising needs no privilege; lowering needs CAP_SYS_RESOURCE
        _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # setuid binaries grant nothing
        if w.can_drop:
            _drop(w.uid, w.gid)
        os.chdir(w.scratch)
        with open(stdin_path, "w", encoding="utf-8") as f:
            f.write(req.get("stdin", ""))
        in_fd = os.open(stdin_path, os.O_RDONLY)
        os.unlink(stdin_path)
        for src, dst in ((in_fd, 0), (out_w, 1), (err_w, 2)):
            os.dup2(src, dst)
        _close_fds_from(3)
        _limits(head, w)
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8")
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                      errors="backslashreplace", line_buffering=True)
        sys.argv = ["<sandbox>"]
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        if w.seccomp and not seccomp_filter.install():  # promised by the label: never skip it
            raise OSError("seccomp filter failed to install")
    except BaseException as e:
        os.write(err_w, f"sandbox: job setup failed: {e!r}\n".encode())
        os._exit(120)
    os._exit(_exec_user(req.get("code", "")))


def _close_fds_from(low, keep=-1):
    """Close every fd >= low but `keep`. Lists /proc/self/fd: a 64k-call closerange fallback
    is slow where seccomp denies close_range (docker's default profile on older engines)."""
    try:
        fds = [int(x) for x in os.listdir("/proc/self/fd")]
    except OSError:
        if keep >= low:
            os.closerange(low, keep)
        os.closerange(max(low, keep + 1), 65536)
        return
    for fd in fds:
        if fd >= low and fd != keep:
            try:
                os.close(fd)
            except OSError:
                pass  # the listing's own descriptor, already closed


def _limits(head, w):
    mem = int(head["memory_mb"]) * 1024 * 1024
    cpu = _cpu_seconds(head)
    fsize = int(w.fsize_mb) * 1024 * 1024
    for lim, val in ((resource.RLIMIT_AS, mem), (resource.RLIMIT_CORE, 0),
                     (resource.RLIMIT_FSIZE, fsize), (resource.RLIMIT_CPU, cpu),
                     (resource.RLIMIT_NOFILE, 256)):
        resource.setrlimit(lim, (val, val))
    if w.can_drop or w.nproc_always:  # NPROC counts per uid; root is exempt
        resource.setrlimit(resource.RLIMIT_NPROC, (w.nproc, w.nproc))


def _cpu_seconds(head):
    """The job's CPU-seconds rlimit: its wall timeout, rounded up by at least a second."""
    return int(float(head["timeout_s"])) + 1


def _exec_user(code):
    main_mod = types.ModuleType("__main__")  # so pickle/dataclasses find top-level names
    sys.modules["__main__"] = main_mod
    g = main_mod.__dict__
    g["__builtins__"] = builtins
    status = 0
    try:
        exec(compile(code, "<sandbox>", "exec"), g)
    except SystemExit as e:
        status = _exit_status(e.code)
    except BaseException as e:
        try:  # drop this function's own frame from the traceback
            traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        except BaseException:
            pass
        status = 1
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except BaseException:
            pass
    return status


def _exit_status(code):
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        print(code, file=sys.stderr)
    except BaseException:
        pass
    return 1


def _descendants(root, spare=None):
    parent = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    data = f.read()
                parent[int(name)] = int(data[data.rindex(b")") + 2:].split()[1])
            except (OSError, ValueError):
                pass
    found, frontier = [], {root}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier and p != spare}
        found.extend(frontier)
    return found


def _reap():
    """Collect exited children; return False when no child is left at all."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def main():
    cfg = json.loads(sys.argv[1])
    if cfg.get("fifo_dir"):  # docker: FIFOs bind-mounted from the host, no relay in between
        rin = os.open(os.path.join(cfg["fifo_dir"], "req"), os.O_RDONLY)
        rout = os.open(os.path.join(cfg["fifo_dir"], "resp"), os.O_WRONLY)
    else:
        rin, rout = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # stray prints must never reach the protocol pipe
    worker = Worker(cfg)
    write_frame(rout, {"ready": True, "pid": os.getpid(), "root": worker.can_drop,
                       "seccomp": worker.seccomp})
    while True:
        head = read_frame(rin)
        if head is None:
            return
        payload = Buf(int(head["size"]))
        if not payload.fill_exact(rin):
            return
        out = err = None
        try:
            res, out, err = worker.run_job(head, payload)
        except Exception as e:  # a worker bug must not hang the host
            res = {"error": f"sandbox worker error: {e!r}", "exit_code": -1, "timed_out": False,
                   "output_truncated": False, "duration_ms": 0.0,
                   "recycle": "worker error"}
        views = [b.view() for b in (out, err) if b is not None]
        res["sizes"] = [len(v) for v in views] or [0, 0]
        write_frame(rout, res, *views)
        for v in views:
            v.release()
        for b in (payload, out, err):
            if b is not None:
                b.scrub()


if __name__ == "__main__":
    main()
