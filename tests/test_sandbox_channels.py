"""Channels between jobs and slots (issue 29), on every backend available.

Closed by the seccomp filter's argument allowlists and denials: netlink and every socket
family but AF_UNIX/INET/INET6 (a job could bind NETLINK_KOBJECT_UEVENT and hear the host's
kernel events), inotify/fanotify watches and flock/record/OFD locks/leases/dnotify on the
files all slots share read-only (one slot saw another's reads and locks). What math code
needs stays: unix socketpairs, an inet socket object, pipes, sqlite in memory.

Not closed, measured and listed in docs/sandbox.md: the pid counter and the tmpfs inode
counter of a slot carry a number from one job to the next (a fresh pid namespace or tmpfs
per job needs CAP_SYS_ADMIN in the worker, which would let a compromised worker remount the
read-only binds writable). The two `test_*_counter_*` tests assert the leak as it is, so a
change that closes it shows up here.
"""

from __future__ import annotations

import socket

import pytest

from tests.sandbox_helpers import BACKEND_PARAMS, open_pool

# read-only and shared by every slot (and the host): a file of the Python install, an
# expression evaluated in the job (the docker image has no /usr/lib/os-release, nor /usr)
SHARED_FILE = "os.__file__"
SHARED_DIR = "os.path.dirname(os.__file__)"


def _seccomp_pool(backend: str):
    pool = open_pool(backend, workers=1)
    if "seccomp" not in pool._slots[0].isolation:
        pool.close()
        pytest.skip(f"{backend}: no seccomp filter here")
    return pool


@pytest.fixture(scope="module", params=BACKEND_PARAMS)
def sb(request):
    pool = _seccomp_pool(request.param)
    yield pool
    pool.close()


# the backends whose slot scratch is a tmpfs of its own (the process backend's is a host dir)
@pytest.fixture(scope="module", params=[p for p in BACKEND_PARAMS if p != "process"])
def tmpfs_sb(request):
    pool = _seccomp_pool(request.param)
    yield pool
    pool.close()


def outcome(sb, call: str) -> str:
    """'ok' or the errno name the job got from `call` (a Python expression)."""
    code = ("import errno, fcntl, os, socket, ctypes\ntry:\n"
            f"    {call}\n    print('ok')\nexcept OSError as e:\n    print(errno.errorcode[e.errno])")
    r = sb.run(code)
    assert r.exit_code == 0, r.stderr
    return r.stdout.strip()


@pytest.mark.parametrize("family", ["AF_NETLINK", "AF_PACKET", "AF_ALG", "AF_VSOCK", "AF_KEY"])
def test_socket_families_outside_the_allowlist_are_refused(sb, family):
    if not hasattr(socket, family):
        pytest.skip(f"{family} unknown to this Python")
    num = int(getattr(socket, family))
    assert outcome(sb, f"socket.socket({num}, socket.SOCK_RAW, 15)") == "EAFNOSUPPORT"
    assert outcome(sb, f"socket.socketpair({num}, socket.SOCK_DGRAM)") == "EAFNOSUPPORT"


def test_kobject_uevent_listener_cannot_bind(sb):
    # the reproduction: NETLINK_KOBJECT_UEVENT (15), group 1
    call = "s = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 15); s.bind((0, 1))"
    assert outcome(sb, call) == "EAFNOSUPPORT"


def test_allowed_sockets_still_work(sb):
    assert outcome(sb, "a, b = socket.socketpair(); a.send(b'x'); assert b.recv(1) == b'x'") == "ok"
    assert outcome(sb, "socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()") == "ok"
    assert outcome(sb, "socket.socket(socket.AF_INET6, socket.SOCK_DGRAM).close()") == "ok"


@pytest.mark.parametrize("call", [
    "ctypes.CDLL(None, use_errno=True).inotify_init() >= 0 or (_ for _ in ()).throw(OSError(ctypes.get_errno(), ''))",
    "ctypes.CDLL(None, use_errno=True).inotify_init1(0) >= 0 or (_ for _ in ()).throw(OSError(ctypes.get_errno(), ''))",
    f"fcntl.flock(os.open({SHARED_FILE}, os.O_RDONLY), fcntl.LOCK_SH)",
    f"fcntl.lockf(os.open({SHARED_FILE}, os.O_RDONLY), fcntl.LOCK_SH)",
    f"fcntl.fcntl(os.open({SHARED_FILE}, os.O_RDONLY), fcntl.F_GETLK, bytes(32))",
    f"fcntl.fcntl(os.open({SHARED_FILE}, os.O_RDONLY), 36, bytes(32))",  # F_OFD_GETLK
    f"fcntl.fcntl(os.open({SHARED_DIR}, os.O_RDONLY), fcntl.F_NOTIFY, fcntl.DN_ACCESS)",  # dnotify
    f"fcntl.fcntl(os.open({SHARED_FILE}, os.O_RDONLY), fcntl.F_SETLEASE, fcntl.F_RDLCK)",
], ids=["inotify_init", "inotify_init1", "flock", "lockf", "getlk", "ofd_getlk", "dnotify", "lease"])
def test_watches_and_locks_on_shared_files_are_refused(sb, call):
    assert outcome(sb, call) == "EPERM"


def test_descriptor_fcntls_and_sqlite_in_memory_still_work(sb):
    call = ("r, w = os.pipe(); os.set_blocking(r, False); fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 1 << 16); "
            "os.set_inheritable(r, True); os.dup(r); fcntl.fcntl(r, fcntl.F_DUPFD_CLOEXEC, 10)")
    assert outcome(sb, call) == "ok"
    r = sb.run("import sqlite3\nc = sqlite3.connect(':memory:')\nprint(c.execute('select 6*7').fetchone()[0])")
    assert r.stdout == "42\n", r.stderr


def test_pid_counter_carries_a_number_to_the_next_job(sb):
    # documented leak: job A advances the slot's pid counter by 50, job B sees it
    burn = "import os\nfor _ in range(50):\n    if os.fork() == 0:\n        os._exit(0)\n    os.wait()\n"
    first = int(sb.run("import os\nprint(os.getpid())").stdout)
    sb.run(burn)
    second = int(sb.run("import os\nprint(os.getpid())").stdout)
    assert second - first >= 50


def test_tmpfs_inode_counter_carries_a_number_to_the_next_job(tmpfs_sb):
    # documented leak: job A creates 50 files, job B's first file has a later inode number
    probe = "import os\nprint(os.stat(open('probe', 'w').name).st_ino)"
    first = int(tmpfs_sb.run(probe).stdout)
    tmpfs_sb.run("for i in range(50):\n    open(f'f{i}', 'w').close()")
    second = int(tmpfs_sb.run(probe).stdout)
    assert second - first >= 50
