"""No job reaches an IPC object it did not make, nor learns a number from the IPC id counter
(issue 29).

SysV IPC (message queues, shared memory, semaphore sets) and POSIX message queues are named
by keys and names any process can guess, in the IPC namespace the process runs in. A bwrap
slot or docker container has one of its own, but every job of a slot shares it, and the
process backend's jobs share the host's. A stranger's tries, on every backend here:
  - a job plants a queue with a known key and a message while a job in the other slot looks
    it up and reads it;
  - a job looks up a queue the host made (readable by everyone, as many are);
  - a job creates and removes 37 queues; the next job of the slot creates one and reads the
    id the kernel gave it, which counts every queue ever made in that namespace.
Each must find nothing and learn nothing. Objects planted on the host's namespace (the test's
own, and the process backend's jobs') are removed by the test, by their random key or name.
"""

from __future__ import annotations

import ctypes
import json
import secrets
import threading
import time

import pytest

from tests.sandbox_helpers import BACKEND_PARAMS, open_pool

_libc = ctypes.CDLL(None, use_errno=True)
IPC_CREAT, IPC_EXCL, IPC_NOWAIT, IPC_RMID = 0o1000, 0o2000, 0o4000, 0
O_RDONLY, O_RDWR, O_CREAT, O_EXCL, O_NONBLOCK = 0, 2, 0o100, 0o200, 0o4000

HEAD = ("import ctypes, errno, json, os, time\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "def err():\n    return errno.errorcode.get(ctypes.get_errno(), '?')\n")

# Plants a SysV message queue and a POSIX queue, each holding {secret}, then holds them.
PLANT = HEAD + """
out = {{}}
q = libc.msgget({key}, 0o666 | {creat})
if q < 0:
    out['msg'] = err()
else:
    m = ctypes.create_string_buffer(b'\\x01' + b'\\0' * 7 + {secret!r})
    out['msg'] = 'planted' if libc.msgsnd(q, m, {n}, 0) == 0 else err()
mq = libc.mq_open({name!r}, {mq_flags}, 0o666, None)
if mq < 0:
    out['mq'] = err()
else:
    out['mq'] = 'planted' if libc.mq_send(mq, {secret!r}, {n}, 0) == 0 else err()
print(json.dumps(out), flush=True)
time.sleep({hold})
"""

# Looks both up for `wait` seconds and prints what it read: {} when it reached neither.
READ = HEAD + """
found = {{}}
end = time.monotonic() + {wait}
while len(found) < 2 and time.monotonic() < end:
    q = libc.msgget({key}, 0)
    if 'msg' not in found and q >= 0:
        buf = ctypes.create_string_buffer(8 + 256)
        n = libc.msgrcv(q, buf, 256, 0, {nowait})
        found['msg'] = buf.raw[8:8 + n].decode() if n > 0 else 'opened'
    mq = libc.mq_open({name!r}, {ro}, 0, None)
    if 'mq' not in found and mq >= 0:
        buf = ctypes.create_string_buffer(1 << 16)
        n = libc.mq_receive(mq, buf, 1 << 16, None)
        found['mq'] = buf.raw[:n].decode() if n > 0 else 'opened'
    time.sleep(0.05)
print(json.dumps(found))
"""

# Creates and removes `n` private queues, then prints the id of one more and its errno.
COUNTER = HEAD + """
for _ in range({n}):
    i = libc.msgget(0, 0o600)
    if i >= 0:
        libc.msgctl(i, 0, None)
i = libc.msgget(0, 0o600)
print(i, err() if i < 0 else '')
if i >= 0:
    libc.msgctl(i, 0, None)
"""


@pytest.fixture(scope="module", params=BACKEND_PARAMS)
def sb(request):
    pool = open_pool(request.param, workers=2)
    pool.warm()
    yield pool
    pool.close()


@pytest.fixture
def names():
    """A fresh SysV key and POSIX queue name; whatever exists under them afterwards in the
    host's IPC namespace (the test's own objects, a process-backend job's) is removed."""
    key, name = 0x5EC10000 + secrets.randbelow(0xFFFF), "/mathrl-ipc-" + secrets.token_hex(6)
    yield key, name
    with open("/proc/sysvipc/msg") as f:
        for row in f.read().splitlines()[1:]:
            k, ident = (int(x) for x in row.split()[:2])
            if k == key:
                _libc.msgctl(ident, IPC_RMID, None)
    _libc.mq_unlink(name.encode())


def run_in(slot, code: str, timeout_s: float = 10.0):
    """Run one job in this very slot (a pool's `run` takes whichever slot is free)."""
    return slot.run({"code": code, "stdin": "", "timeout_s": timeout_s, "memory_mb": 256,
                     "max_output_bytes": 65536})


def plant_code(key: int, name: str, secret: bytes, hold: float) -> str:
    return PLANT.format(key=key, creat=IPC_CREAT | IPC_EXCL, secret=secret, n=len(secret),
                        name=name.encode(), mq_flags=O_CREAT | O_EXCL | O_RDWR, hold=hold)


def read_code(key: int, name: str, wait: float) -> str:
    return READ.format(key=key, nowait=IPC_NOWAIT, name=name.encode(), ro=O_RDONLY | O_NONBLOCK,
                       wait=wait)


def test_a_job_cannot_reach_the_other_slots_ipc_objects(sb, names):
    key, name = names
    secret = b"SLOTLEAK" + secrets.token_hex(4).encode()
    a_slot, b_slot = sb._slots[:2]
    got = {}
    planter = threading.Thread(
        target=lambda: got.update(a=run_in(a_slot, plant_code(key, name, secret, hold=4.0))))
    planter.start()
    time.sleep(0.3)
    b = run_in(b_slot, read_code(key, name, wait=3.5))
    planter.join()
    a = got["a"]
    assert a.exit_code == 0 and b.exit_code == 0, (a.stderr, b.stderr)
    assert set(json.loads(a.stdout)) == {"msg", "mq"}, a.stdout  # planted, or refused
    assert json.loads(b.stdout) == {}, (a.stdout, b.stdout)


def test_a_job_cannot_reach_the_hosts_ipc_objects(sb, names):
    key, name = names
    secret = b"HOSTLEAK" + secrets.token_hex(4).encode()
    q = _libc.msgget(key, 0o666 | IPC_CREAT | IPC_EXCL)  # readable by everyone, as many are
    assert q >= 0, ctypes.get_errno()
    m = ctypes.create_string_buffer(b"\x01" + b"\0" * 7 + secret)
    assert _libc.msgsnd(q, m, len(secret), 0) == 0
    mq = _libc.mq_open(name.encode(), O_CREAT | O_EXCL | O_RDWR, 0o666, None)
    assert mq >= 0, ctypes.get_errno()
    try:
        assert _libc.mq_send(mq, secret, len(secret), 0) == 0
        r = sb.run(read_code(key, name, wait=0.2), timeout_s=10)
    finally:
        _libc.mq_close(mq)
    assert r.exit_code == 0 and json.loads(r.stdout) == {}, (r.stdout, r.stderr)


def test_the_ipc_id_counter_carries_no_number_to_the_next_job(sb):
    # the id of a new queue counts the queues made before it in the namespace: with the same
    # job before and after, an honest slot answers the same both times
    slot = sb._slots[0]
    before = run_in(slot, COUNTER.format(n=0))
    middle = run_in(slot, COUNTER.format(n=37))
    after = run_in(slot, COUNTER.format(n=0))
    assert all(r.exit_code == 0 for r in (before, middle, after)), after.stderr
    assert before.stdout == after.stdout, (before.stdout, middle.stdout, after.stdout)
