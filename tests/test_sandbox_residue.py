"""The slot clean-up finds and removes IPC objects a job left (sandbox/residue.py).

On x86-64 the job's seccomp allowlist refuses SysV IPC and POSIX message queues, so no job
there can leave one and the cross-job tests see only the refusal; the clean-up is what stands
where the filter is not installed (other architectures). It is tested here directly, in a
child in an IPC and mount namespace of its own (and a user namespace when not root), so it
sees, and removes, only objects the child made itself, never the host's.
"""

from __future__ import annotations

import ctypes
import os
import tempfile
import time

from sandbox.residue import Residue

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
MS_REC, MS_PRIVATE = 0x4000, 0x40000
_libc = ctypes.CDLL(None, use_errno=True)


def _enter_private_namespaces():
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWIPC | CLONE_NEWNS | (0 if uid == 0 else CLONE_NEWUSER)
    if _libc.unshare(flags) != 0:
        raise OSError(ctypes.get_errno(), "unshare")
    if uid != 0:
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"),
                           ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    # our mounts must not propagate to the host's namespace
    if _libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "mount --make-rprivate /")


def _leave_and_clean(scratch: str, mq_dir: str) -> str:
    """In the child: mount a queue fs, leave one object of each kind, clean; what was seen."""
    _enter_private_namespaces()
    if _libc.mount(b"mqueue", mq_dir.encode(), b"mqueue", 0, None) != 0:
        raise OSError(ctypes.get_errno(), "mount mqueue")
    res = Residue(scratch, private_ipc=True, mqueue_dir=mq_dir)
    clean = res.find()
    assert _libc.msgget(0, 0o600) >= 0 and _libc.semget(0, 2, 0o600) >= 0
    assert _libc.shmget(0, 4096, 0o600) >= 0
    assert _libc.mq_open(b"/left", os.O_CREAT | os.O_RDWR, 0o600, None) >= 0
    left, queues = res.find(), res.mqueues()
    res.remove(time.monotonic() + 5)
    after = [len(v) for v in res.sysv().values()] + [len(res.mqueues())]
    return f"{clean}|{left}|{queues}|{res.find()}|{after}"


def test_left_sysv_objects_and_queues_are_found_and_removed():
    with tempfile.TemporaryDirectory() as scratch, tempfile.TemporaryDirectory() as mq_dir:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through the pipe
            try:
                os.close(r)
                os.write(w, _leave_and_clean(scratch, mq_dir).encode())
                os._exit(0)
            except BaseException as e:
                os.write(w, f"child failed: {e!r}".encode())
                os._exit(1)
        os.close(w)
        with os.fdopen(r) as f:
            got = f.read()
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, got
    clean, left, queues, after, counts = got.split("|")
    assert clean == "None"
    assert left == "SysV IPC left: 1 shm, 1 msg, 1 sem" and queues == "['left']"
    assert after == "None" and counts == "[0, 0, 0, 0]"
