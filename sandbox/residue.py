"""What a job can leave behind in its slot for the next job: found cheaply, then removed.

Imported by `worker.py` inside the wall (stdlib only). Past its own processes, which the
worker kills, a job can leave state for the next job of the same slot only as
  - entries in the scratch dir, of any mode and depth (a `chmod 000` directory included),
    or a changed mode of the scratch dir itself;
  - SysV IPC objects (shared memory, message queues, semaphore sets) and POSIX message
    queues in the slot's IPC namespace.
`Residue.find` says what is there in a few cheap reads (the per-job check before the next job
starts); `Residue.remove` empties it: permissions are restored before anything is entered,
and directory trees are flattened by renaming instead of recursed into (a job can nest
directories deeper than any path length or stack allows), all within a deadline.
"""

import ctypes
import errno
import os
import stat
import time

IPC_RMID = 0
MSG_INFO, SHM_INFO, SEM_INFO = 12, 14, 19
# (file under /proc/sysvipc, its id column, how to remove one)
SYSV_KINDS = ("shm", "msg", "sem")
_libc = ctypes.CDLL(None, use_errno=True)


class Residue:
    """The leftovers of one slot.

    `private_ipc`: the slot has its own IPC namespace (bwrap, docker), so every IPC object in
    it is a job's. Otherwise (process backend) only objects created by `job_uid` are the
    jobs'; with no `job_uid` (jobs run as the worker's own user) IPC is not tracked at all.
    """

    def __init__(self, scratch, job_uid=None, private_ipc=False, mqueue_dir=None):
        self.scratch = scratch
        self.job_uid = job_uid
        self.private_ipc = private_ipc
        self.track_ipc = private_ipc or job_uid is not None
        self.mqueue_dir = mqueue_dir if mqueue_dir and os.path.isdir(mqueue_dir) else None
        self.scratch_mode = stat.S_IMODE(os.stat(scratch).st_mode)

    def find(self):
        """None when the slot is clean, else a one-line description of what is left."""
        try:
            names = os.listdir(self.scratch)
            mode = stat.S_IMODE(os.lstat(self.scratch).st_mode)
        except OSError as e:
            return f"scratch dir unusable: {e.strerror}"
        if names:
            return f"{len(names)} entries left in the scratch dir"
        if mode != self.scratch_mode:
            return f"scratch dir mode changed to {mode:o}"
        if self.track_ipc and (not self.private_ipc or any(_sysv_counts())):
            objs = self.sysv()
            if any(objs.values()):
                return "SysV IPC left: " + ", ".join(f"{len(v)} {k}" for k, v in objs.items() if v)
        queues = self.mqueues()
        if queues:
            return f"{len(queues)} POSIX message queues left"
        return None

    def sysv(self):
        """{kind: [ids]} of the jobs' SysV IPC objects."""
        return {kind: _sysv_ids(kind, None if self.private_ipc else self.job_uid)
                for kind in SYSV_KINDS}

    def mqueues(self):
        if not self.track_ipc or self.mqueue_dir is None:
            return []
        try:
            names = os.listdir(self.mqueue_dir)
        except OSError:
            return []
        if self.private_ipc:
            return names
        mine = []
        for n in names:
            try:
                if os.lstat(os.path.join(self.mqueue_dir, n)).st_uid == self.job_uid:
                    mine.append(n)
            except OSError:
                pass
        return mine

    def remove(self, deadline):
        """Empty the slot as far as the deadline allows (run as the job uid where there is
        one: it owns everything a job made). Returns nothing; `find` says what is left."""
        if self.track_ipc:
            for kind, ids in self.sysv().items():
                for i in ids:
                    _sysv_remove(kind, i)
            for n in self.mqueues():
                try:
                    os.unlink(os.path.join(self.mqueue_dir, n))
                except OSError:
                    pass
        try:
            if stat.S_IMODE(os.lstat(self.scratch).st_mode) != self.scratch_mode:
                os.chmod(self.scratch, self.scratch_mode)
        except OSError:
            pass
        wipe(self.scratch, deadline)


class _ShmInfo(ctypes.Structure):
    _fields_ = [("used_ids", ctypes.c_int), ("rest", ctypes.c_ulong * 5)]


class _IpcInfo(ctypes.Structure):  # msginfo / seminfo: ten ints at most
    _fields_ = [("v", ctypes.c_int * 10)]


def _sysv_counts():
    """(shared memory segments, message queues, semaphore sets) in this IPC namespace, by
    three syscalls (SHM_INFO, MSG_INFO, SEM_INFO): far cheaper than reading /proc/sysvipc."""
    shm, msg, sem = _ShmInfo(), _IpcInfo(), _IpcInfo()
    ok = (_libc.shmctl(0, SHM_INFO, ctypes.byref(shm)) >= 0,
          _libc.msgctl(0, MSG_INFO, ctypes.byref(msg)) >= 0,
          _libc.semctl(0, 0, SEM_INFO, ctypes.byref(sem)) >= 0)
    if not all(ok):
        return (1,)  # cannot tell: take the /proc/sysvipc path
    return shm.used_ids, msg.v[0], sem.v[7]  # used_ids, msgpool, semusz


def _sysv_ids(kind, uid):
    """Ids listed in /proc/sysvipc/<kind> (this IPC namespace), only those created by `uid`
    unless it is None."""
    try:
        with open(f"/proc/sysvipc/{kind}", "rb") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    if len(lines) < 2:
        return []
    head = lines[0].split()
    id_col, cuid_col = 1, head.index(b"cuid")
    out = []
    for line in lines[1:]:
        cols = line.split()
        if uid is None or int(cols[cuid_col]) == uid:
            out.append(int(cols[id_col]))
    return out


def _sysv_remove(kind, ident):
    if kind == "sem":
        _libc.semctl(ident, 0, IPC_RMID)
    elif kind == "shm":
        _libc.shmctl(ident, IPC_RMID, None)
    else:
        _libc.msgctl(ident, IPC_RMID, None)


def wipe(root, deadline):
    """Remove everything under `root` (kept itself); True when done before `deadline`.

    No recursion and no long paths: each directory is opened relative to `root`, its files
    unlinked, and its subdirectories renamed up into `root` under fresh names, to be handled
    by a later pass. Modes are restored before a directory is opened or emptied.
    """
    try:
        rootfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    prefix, seq, before = ".wipe-" + os.urandom(6).hex() + "-", 0, None
    try:
        while True:
            names = sorted(os.listdir(rootfd))
            if not names:
                return True
            if names == before:
                return False  # a whole pass removed nothing: stuck
            before = names
            for name in names:
                if time.monotonic() > deadline:
                    return False
                seq = _remove_entry(rootfd, name, prefix, seq)
    except OSError:
        return False
    finally:
        os.close(rootfd)


def _remove_entry(rootfd, name, prefix, seq):
    try:
        st = os.lstat(name, dir_fd=rootfd)
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(name, dir_fd=rootfd)
            return seq
        if stat.S_IMODE(st.st_mode) & 0o700 != 0o700:
            # no job process is alive any more, so the checked dir cannot be swapped for a link
            os.chmod(name, 0o700, dir_fd=rootfd)
        try:
            os.rmdir(name, dir_fd=rootfd)
            return seq
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=rootfd)
        try:
            for child in os.listdir(fd):
                cst = os.lstat(child, dir_fd=fd)
                if stat.S_ISDIR(cst.st_mode):
                    if stat.S_IMODE(cst.st_mode) & 0o700 != 0o700:
                        os.chmod(child, 0o700, dir_fd=fd)
                    os.rename(child, prefix + str(seq), src_dir_fd=fd, dst_dir_fd=rootfd)
                    seq += 1
                else:
                    os.unlink(child, dir_fd=fd)
        finally:
            os.close(fd)
        os.rmdir(name, dir_fd=rootfd)
    except OSError:
        pass  # left for `find` to report; the worker then sweeps again or gives up the unit
    return seq
