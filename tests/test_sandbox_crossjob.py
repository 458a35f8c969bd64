"""No job can touch the next: job A plants state in a slot, job B in the same slot must not
see it (one test per kind of state), and job A cannot leave the slot exhausted for job B.

Every case runs on docker (marker `docker`, under `make test-docker`), bwrap and process, on
a one-worker pool so that A and B share the slot. The IPC cases: where the job's seccomp
allowlist is on (x86-64) A's SysV and POSIX-queue calls are refused, so A plants nothing
(`refused`; tests/test_sandbox_ipc.py has the cross-slot and host attacks); where it is not,
the slot's clean-up must remove what A made, and what the process backend cannot contain
then (it shares the host's IPC namespace; without a per-slot uid its jobs are root and their
IPC objects cannot be told from the host's) runs as a strict xfail. Host objects a case may
leave are removed by the test itself.
"""

from __future__ import annotations

import ctypes
import secrets

import pytest

from sandbox.backends import BACKENDS
from tests.sandbox_helpers import BACKEND_PARAMS, open_pool

IPC_KINDS = {"sysv_msg", "sysv_shm", "sysv_sem", "posix_mq", "dos_shm", "dos_mqueue"}
_libc = ctypes.CDLL(None, use_errno=True)


@pytest.fixture(scope="module", params=BACKEND_PARAMS)
def sb(request):
    pool = open_pool(request.param, workers=1)
    yield pool
    pool.close()


@pytest.fixture
def ipc_keys():
    """Fresh SysV keys and a POSIX queue name; whatever a job left under them on the host's
    IPC namespace (process backend) is removed afterwards."""
    keys = [0x5EC00000 + secrets.randbelow(0xFFFF) * 4 + i for i in range(4)]
    mq = "/mathrl-" + secrets.token_hex(6)
    yield keys, mq
    for kind in ("shm", "msg", "sem"):
        with open(f"/proc/sysvipc/{kind}") as f:
            rows = [line.split() for line in f.read().splitlines()[1:]]
        for key, ident in ((int(r[0]), int(r[1])) for r in rows):
            if key in keys:
                getattr(_libc, kind + "ctl")(ident, *((0,) if kind == "sem" else ()), 0, None)
    _libc.mq_unlink(mq.encode())


def gap(request, sb, kind: str) -> None:
    """Strict xfail for what the process backend cannot contain here."""
    if (sb.backend.name == "process" and kind in IPC_KINDS and not BACKENDS["process"].drops_uid
            and "seccomp" not in sb._slots[0].isolation):
        request.node.add_marker(pytest.mark.xfail(strict=True, reason=(
            "process backend: jobs run as root in the host's IPC namespace; their IPC objects "
            "cannot be told from the host's")))


def plant_then_probe(sb, plant: str, probe: str, *, stdin: str = "", timeout_s: float = 5.0):
    a = sb.run(plant, stdin=stdin, timeout_s=timeout_s)
    assert "planted" in a.stdout or "refused" in a.stdout or a.timed_out, (a.stdout, a.stderr)
    return sb.run(probe, timeout_s=10)


def assert_clean(r) -> None:
    assert r.exit_code == 0 and r.stdout.splitlines()[-1:] == ["clean"], (r.stdout, r.stderr)


LIBC = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
# An IPC object A makes: made(libc.msgget(...)). Refused by the allowlist (EPERM), A says so
# and ends: there is nothing to carry over.
MADE = LIBC + ("def made(r):\n    if r == -1 and ctypes.get_errno() == 1:\n"
               "        print('refused')\n        raise SystemExit(0)\n"
               "    assert r >= 0, ctypes.get_errno()\n    return r\n")


# --- state that must not carry over ---------------------------------------------------------

def test_files_of_any_kind(sb):
    plant = ("import os, socket\nopen('f', 'w').write('LEAK')\nopen('.hidden', 'w').write('LEAK')\n"
             "os.makedirs('d/e')\nopen('d/e/g', 'w').write('LEAK')\nos.symlink('/etc', 'link')\n"
             "os.mkfifo('fifo')\ns = socket.socket(socket.AF_UNIX)\ns.bind('sock')\n"
             "print('planted')")
    probe = "import os\nprint(os.listdir('.'))\nprint('clean' if not os.listdir('.') else 'LEAK')"
    assert_clean(plant_then_probe(sb, plant, probe))


def test_unreadable_directories(sb):
    # the reproduction: a chmod-000 tree the old cleanup could not enter
    plant = ("import os\nos.makedirs('L/x')\nopen('L/x/s', 'w').write('LEAK')\n"
             "os.chmod('L/x', 0)\nos.chmod('L', 0)\nprint('planted')")
    probe = ("import os\ntry:\n    os.chmod('L', 0o700)\n    os.chmod('L/x', 0o700)\n"
             "    print(open('L/x/s').read())\nexcept OSError as e:\n    print(type(e).__name__)\n"
             "print('clean' if not os.listdir('.') else 'LEAK')")
    r = plant_then_probe(sb, plant, probe)
    assert_clean(r)
    assert "LEAK\n" not in r.stdout


SYSV = {  # kind: (create and fill one with {key}, look it up by {key} in the next job)
    # the message queue is the reproduction, plus a message waiting in it
    "msg": ("q = made(libc.msgget({key}, 0o1666))\n"
            "msg = ctypes.create_string_buffer(b'\\x01\\0\\0\\0\\0\\0\\0\\0LEAK')\n"
            "assert libc.msgsnd(q, msg, 4, 0) == 0\n", "libc.msgget({key}, 0)"),
    "shm": ("i = made(libc.shmget({key}, 4096, 0o1666))\n"
            "libc.shmat.restype = ctypes.c_void_p\np = libc.shmat(i, None, 0)\n"
            "ctypes.memmove(p, b'LEAK', 4)\n", "libc.shmget({key}, 0, 0)"),
    "sem": ("made(libc.semget({key}, 3, 0o1666))\n",
            "libc.semget({key}, 0, 0)"),
}


@pytest.mark.parametrize("kind", SYSV)
def test_sysv_ipc_object(sb, request, ipc_keys, kind):
    gap(request, sb, "sysv_" + kind)
    create, lookup = (c.format(key=ipc_keys[0][0]) for c in SYSV[kind])
    probe = LIBC + f"print('clean' if {lookup} == -1 else 'LEAK')"
    assert_clean(plant_then_probe(sb, MADE + create + "print('planted')", probe))


def test_posix_message_queue(sb, request, ipc_keys):
    gap(request, sb, "posix_mq")
    name = ipc_keys[1].encode()
    plant = MADE + (f"q = made(libc.mq_open({name!r}, os.O_CREAT | os.O_RDWR, 0o666, None))\n"
                    "assert libc.mq_send(q, b'LEAK', 4, 0) == 0\nprint('planted')")
    probe = LIBC + f"print('clean' if libc.mq_open({name!r}, os.O_RDONLY) == -1 else 'LEAK')"
    assert_clean(plant_then_probe(sb, plant, probe))


def _tokens():
    return {k: f"MLEAK{k}{secrets.token_hex(12)}" for k in "CIOE"}


def test_memory_holds_nothing_of_the_previous_job(sb):
    """Each job is a fork of the slot's worker: the worker must not keep the previous job's
    code, stdin or output anywhere in its memory. B searches every anonymous mapping it has,
    in place (memmem), for needles it unmasks into one buffer whose own address it skips."""
    t = _tokens()
    plant = (f"import sys\ncode_token = {t['C']!r}\nx = sys.stdin.read()\n"
             f"print({t['O'][:8]!r} + {t['O'][8:]!r})\n"
             f"print({t['E'][:8]!r} + {t['E'][8:]!r}, file=sys.stderr)\nprint('planted')")
    masked = [bytes(c ^ 0x5A for c in t[k].encode()).hex() for k in "CIOE"]
    probe = (LIBC + "libc.memmem.restype = ctypes.c_void_p\n"
             "libc.memmem.argtypes = [ctypes.c_void_p, ctypes.c_size_t] * 2\nbufs = []\n"
             f"for h in {masked!r}:\n    m = bytes.fromhex(h)\n"
             "    b = ctypes.create_string_buffer(len(m))\n"
             "    for i, c in enumerate(m):\n        b[i] = bytes([c ^ 0x5A])\n    bufs.append(b)\n"
             "own = {ctypes.addressof(b) for b in bufs}\nhits, scanned = set(), 0\n"
             "for line in open('/proc/self/maps').read().splitlines():\n    f = line.split()\n"
             "    lo, hi = (int(x, 16) for x in f[0].split('-'))\n"
             "    if f[1][0] != 'r' or (len(f) > 5 and f[5] not in ('[heap]', '[stack]')):\n"
             "        continue\n    scanned += hi - lo\n"
             "    for k, b in zip('CIOE', bufs):\n        p = lo\n        while p < hi:\n"
             "            q = libc.memmem(p, hi - p, ctypes.addressof(b), len(b))\n"
             "            if not q:\n                break\n"
             "            if q not in own:\n                hits.add(k)\n            p = q + 1\n"
             "print(scanned > 1 << 20, sorted(hits))\nprint('clean' if not hits else 'LEAK')")
    a = sb.run(plant, stdin=t["I"])
    assert t["O"] in a.stdout and t["E"] in a.stderr
    r = sb.run(probe, timeout_s=20)
    assert r.stdout.startswith("True"), (r.stdout, r.stderr)  # it really read its memory
    assert_clean(r)


# Needles for the previous job's response: the worker's JSON header (`"sizes": [0, 54321]`)
# and the int object 54321 itself (CPython 3.11 layout: refcount, type, size 1, one 30-bit
# digit; a freed object keeps all but its first word). The probe builds them from masked hex,
# never as a Python int 54321 of its own, and skips its own buffers.
RESPONSE_NEEDLES = {"json": '"sizes": [', "json_size": ', 54321]', "int": None}
RESPONSE_PROBE = LIBC + """
import struct, sys
libc.memmem.restype = ctypes.c_void_p
libc.memmem.argtypes = [ctypes.c_void_p, ctypes.c_size_t] * 2
needles = {k: bytes(c ^ 0x5A for c in bytes.fromhex(h)) for k, h in MASKED.items()}
needles["int"] = struct.pack("<Qq", id(int), 1) + bytes.fromhex("31d40000")
bufs = {k: ctypes.create_string_buffer(v, len(v)) for k, v in needles.items()}
del needles
own = {ctypes.addressof(b) for b in bufs.values()}
hits, scanned = set(), 0
for line in open('/proc/self/maps').read().splitlines():
    f = line.split()
    lo, hi = (int(x, 16) for x in f[0].split('-'))
    if f[1][0] != 'r' or (len(f) > 5 and f[5] not in ('[heap]', '[stack]')):
        continue
    scanned += hi - lo
    for k, b in bufs.items():
        p = lo
        while p < hi:
            q = libc.memmem(p, hi - p, ctypes.addressof(b), len(b))
            if not q:
                break
            if q not in own:
                hits.add(k)
            p = q + 1
print(scanned > 1 << 20, sorted(hits))
"""


def previous_response_found(sb, tries: int = 4) -> set[str]:
    """Run a job with 54321 bytes of stderr, then a probe in the same slot; what it found."""
    masked = {k: bytes(c ^ 0x5A for c in v.encode()).hex() for k, v in RESPONSE_NEEDLES.items() if v}
    found: set[str] = set()
    for _ in range(tries):  # the issue saw the JSON header 1 time in 4
        a = sb.run("import sys\nsys.stderr.write('e' * 54321)")
        assert len(a.stderr) == 54321
        r = sb.run(f"MASKED = {masked!r}\n" + RESPONSE_PROBE, timeout_s=20)
        assert r.stdout.startswith("True "), (r.stdout, r.stderr)  # it really read its memory
        found |= set(eval(r.stdout.split(" ", 1)[1]))
    return found


def test_memory_holds_nothing_of_the_previous_jobs_response(sb):
    """Issue 29: the worker builds each response in ordinary Python objects, freed but not
    zeroed, and the next job (a fork of the worker) found the previous job's stderr byte count
    in its memory: the int 54321 in 4 of 4 tries, the JSON header in 2 of 4. Jobs are now
    forked from a process that never learns anything about a job (worker.Forker)."""
    assert previous_response_found(sb, tries=6) == set()


def test_processes_and_what_they_would_do(sb):
    token = "mathrl-xjob-" + secrets.token_hex(8)
    # a setsid daemon that outlives A would write into B's scratch and keep the token
    plant = ("import os, sys\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
             "        os.execv(sys.executable, [sys.executable, '-c', 'import time\\n"
             "while True:\\n    time.sleep(0.02)\\n    open(\"daemon\", \"w\").write(\"x\")', "
             f"{token!r}])\n    os._exit(0)\nos.wait()\nprint('planted')")
    probe = ("import os, time\ntime.sleep(0.3)\nfound = []\nfor p in os.listdir('/proc'):\n"
             "    if p.isdigit():\n        try:\n"
             "            if b'mathrl-xjob-' in open(f'/proc/{p}/cmdline', 'rb').read():\n"
             "                found.append(p)\n        except OSError:\n            pass\n"
             "print(found, os.listdir('.'))\n"
             "print('clean' if not found and not os.listdir('.') else 'LEAK')")
    assert_clean(plant_then_probe(sb, plant, probe))


def test_environment_and_process_attributes(sb):
    plant = ("import os\nos.environ['MATHRL_LEAK'] = 'x'\nos.putenv('MATHRL_LEAK2', 'x')\n"
             "os.umask(0)\nos.chdir('/')\nprint('planted')")
    probe = (LIBC + "libc.getenv.restype = ctypes.c_char_p\n"
             "ok = 'MATHRL_LEAK' not in os.environ and libc.getenv(b'MATHRL_LEAK2') is None\n"
             "ok &= os.umask(0o22) == 0o22 and os.getcwd() != '/'\nprint('clean' if ok else 'LEAK')")
    assert_clean(plant_then_probe(sb, plant, probe))


def test_module_globals(sb):
    plant = ("import math, sys, json, random, builtins\nmath.pi = 3\nsys.modules['json'] = None\n"
             "sys.path.insert(0, '/tmp/evil')\nbuiltins.leaked = 1\nrandom.seed(7)\n"
             "sys.setrecursionlimit(50)\nprint('planted')")
    probe = ("import math, sys, json, builtins\nok = math.pi > 3.14 and json.dumps(1) == '1'\n"
             "ok &= '/tmp/evil' not in sys.path and not hasattr(builtins, 'leaked')\n"
             "ok &= sys.getrecursionlimit() >= 1000\nprint('clean' if ok else 'LEAK')")
    assert_clean(plant_then_probe(sb, plant, probe))


# --- A cannot leave the slot exhausted ------------------------------------------------------

FULL_LIMITS = ("import os\nopen('w', 'wb').write(b'x' * (1 << 20))\n"
               "assert os.path.getsize('w') == 1 << 20\nb = bytearray(400 << 20)\n"
               "for j in range(0, len(b), 4096):\n    b[j] = 1\ndel b\nkids = []\nfor _ in range(40):\n"
               "    pid = os.fork()\n    if pid == 0:\n        import time; time.sleep(0.5); os._exit(0)\n"
               "    kids.append(pid)\nfor k in kids:\n    os.waitpid(k, 0)\nprint('clean')")

FILL_000 = ("import os\nos.makedirs('L/x')\n"
            "for i in range(5):\n    with open(f'L/x/{i}', 'wb') as f:\n"
            "        try:\n            f.write(b'x' * (63 << 20))\n        except OSError:\n"
            "            break\nos.chmod('L/x', 0)\nos.chmod('L', 0)\nprint('planted')\n")


def big_shm(key: int) -> str:
    """A SysV segment of 360 MB, touched: with B's 400 MB it passes the slot's memory cap
    (bwrap: 512 + 128 MB cgroup; docker: 512 + 256 MB container). The issue's 200 MB fits
    next to 400 MB in a bwrap slot here, so it could not show the leak."""
    return MADE + (f"i = made(libc.shmget({key}, 360 << 20, 0o1600))\n"
                   "libc.shmat.restype = ctypes.c_void_p\np = libc.shmat(i, None, 0)\n"
                   "ctypes.memset(p, 1, 360 << 20)\nprint('planted')\n")


def test_full_disk_in_unreadable_dirs_is_freed(sb):
    assert_clean(plant_then_probe(sb, FILL_000, FULL_LIMITS, timeout_s=20))


def test_large_shared_memory_segment_is_freed(sb, request, ipc_keys):
    gap(request, sb, "dos_shm")
    assert_clean(plant_then_probe(sb, big_shm(ipc_keys[0][3]), FULL_LIMITS))


def test_leftover_processes_do_not_eat_the_limits(sb):
    plant = ("import os, time\nfor _ in range(50):\n    if os.fork() == 0:\n        os.setsid()\n"
             "        b = b'x' * (8 << 20)\n        time.sleep(60)\n        os._exit(0)\n"
             "print('planted')")
    assert_clean(plant_then_probe(sb, plant, FULL_LIMITS))


def test_a_timed_out_job_leaves_nothing_either(sb, request, ipc_keys):
    gap(request, sb, "dos_shm")
    plant = FILL_000 + big_shm(ipc_keys[0][3]) + "import sys\nsys.stdout.flush()\nwhile True:\n    pass"
    a = sb.run(plant, timeout_s=4)
    assert (a.timed_out or "refused" in a.stdout) and "planted" in a.stdout, a.stderr
    assert_clean(sb.run(FULL_LIMITS, timeout_s=10))


def test_message_queue_quota_is_given_back(sb, request, ipc_keys):
    gap(request, sb, "dos_mqueue")
    # RLIMIT_MSGQUEUE (800 KB by default) is per uid: A takes it all, B needs one queue
    name = ipc_keys[1]
    plant = MADE + ("n = 0\nfor i in range(64):\n"
                    f"    q = libc.mq_open(f'{name}-{{i}}'.encode(), os.O_CREAT | os.O_RDWR, 0o600, None)\n"
                    "    if q < 0:\n        made(q) if i == 0 else None\n        break\n"
                    "    n += 1\nprint('planted', n)")
    probe = LIBC + (f"q = libc.mq_open({name!r}.encode() + b'-b', os.O_CREAT | os.O_RDWR, 0o600, None)\n"
                    "e = ctypes.get_errno()\n"
                    f"libc.mq_unlink({name!r}.encode() + b'-b')\n"
                    # EPERM: the allowlist refuses queues to every job alike, so A took none;
                    # A's leftovers show as EMFILE or ENOMEM (the uid's quota used up)
                    "print('clean' if q >= 0 or e == 1 else 'LEAK')")
    try:
        assert_clean(plant_then_probe(sb, plant, probe))
    finally:
        for i in range(64):
            _libc.mq_unlink(f"{name}-{i}".encode())
