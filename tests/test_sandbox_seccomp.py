"""The job filter is an allowlist (issue 29): honest work runs, everything else is refused.

Three parts. The program itself, decoded by a small classic-BPF interpreter here, does for
every syscall number what `seccomp_filter.action` says (no kernel needed). The numbers are
x86-64's, checked against the kernel headers where they are installed. And on every backend:
the honest workloads of `tests/sandbox_workloads.py` (what the list was measured from) print
what they should, while unusual syscalls - the classic ways into kernel bugs and out of
sandboxes, and calls the old denylist never named - fail with EPERM (or ENOSYS for calls
newer than clone3), with arguments that would have succeeded or failed otherwise, and a job
that hits one sees the reason in its own traceback.
"""

from __future__ import annotations

import json
import os
import re
import struct

import pytest

from sandbox import seccomp_filter as sf
from tests.sandbox_helpers import BACKEND_PARAMS, open_pool
from tests.sandbox_workloads import STDIN, WORKLOADS

HEADER = "/usr/include/x86_64-linux-gnu/asm/unistd_64.h"


# --- the program, decoded --------------------------------------------------------------------

def run_bpf(prog: bytes, nr: int, args=(0, 0), arch: int = sf.AUDIT_ARCH_X86_64) -> int:
    """Classic BPF over a struct seccomp_data (nr, arch, ip, args[6]); the return value."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *args, *[0] * (6 - len(args)))
    ins = [struct.unpack("HBBI", prog[i:i + 8]) for i in range(0, len(prog), 8)]
    pc, a = 0, 0
    for _ in range(len(ins) + 1):  # forward jumps only: at most one visit per instruction
        op, jt, jf, k = ins[pc]
        if op == sf.LD_W_ABS:
            a = struct.unpack_from("<I", data, k)[0]
        elif op == sf.RET_K:
            return k
        elif op in (sf.JEQ_K, sf.JGE_K, sf.JSET_K):
            hit = a == k if op == sf.JEQ_K else a >= k if op == sf.JGE_K else bool(a & k)
            pc += jt if hit else jf
        else:
            raise AssertionError(f"opcode {op:#x} not expected")
        pc += 1
    raise AssertionError("fell off the program")


ERR = sf.RET_ERRNO
EXPECT = {"allow": sf.RET_ALLOW, "eperm": ERR | sf.EPERM, "enosys": ERR | sf.ENOSYS}


def test_every_number_gets_the_listed_action():
    prog = sf.program()
    assert len(prog) // 8 < 256  # every jump fits
    for nr in range(0, 1100):
        act = sf.action(nr)
        if act in EXPECT:
            assert run_bpf(prog, nr) == EXPECT[act], (nr, act)
    for nr in (sf.X32_BIT | 39, sf.X32_BIT | 0, 0x7FFFFFFF, -1):  # x32 entries, garbage
        assert run_bpf(prog, nr) == ERR | sf.EPERM
    assert run_bpf(prog, 39, arch=0x40000003) == ERR | sf.EPERM  # i386 getpid


def test_argument_checked_calls():
    prog = sf.program()
    assert run_bpf(prog, 41, (2, 1)) == sf.RET_ALLOW  # socket(AF_INET)
    assert run_bpf(prog, 53, (1, 1)) == sf.RET_ALLOW  # socketpair(AF_UNIX)
    assert run_bpf(prog, 41, (16, 3)) == ERR | sf.EAFNOSUPPORT  # AF_NETLINK
    assert run_bpf(prog, 41, ((1 << 32) | 16, 3)) == ERR | sf.EAFNOSUPPORT  # the kernel reads an int
    assert run_bpf(prog, 72, (3, 1030)) == sf.RET_ALLOW  # F_DUPFD_CLOEXEC
    assert run_bpf(prog, 72, (3, 6)) == ERR | sf.EPERM  # F_SETLK
    assert run_bpf(prog, 16, (1, 0x5401)) == sf.RET_ALLOW  # TCGETS
    assert run_bpf(prog, 16, (1, 0x5412)) == ERR | sf.EPERM  # TIOCSTI
    assert run_bpf(prog, 56, (0x11,)) == sf.RET_ALLOW  # clone(SIGCHLD)
    assert run_bpf(prog, 56, (0x01200011,)) == sf.RET_ALLOW  # glibc fork
    assert run_bpf(prog, 56, (0x004111,)) == sf.RET_ALLOW  # vfork (posix_spawn)
    assert run_bpf(prog, 56, (0x3D0F00,)) == sf.RET_ALLOW  # pthread_create
    for flag in (0x10000000, 0x20000, 0x8000, 0x2000, 0x1000, 0x80000000):  # NEWUSER, NEWNS,
        assert run_bpf(prog, 56, (flag | 0x11,)) == ERR | sf.EPERM  # PARENT, PTRACE, PIDFD, IO
    assert run_bpf(prog, 435) == ERR | sf.ENOSYS  # clone3: glibc falls back to clone


def test_listed_numbers_are_the_kernels():
    if not os.path.exists(HEADER):
        pytest.skip(f"no kernel headers here ({HEADER})")
    with open(HEADER) as f:
        table = {m.group(1): int(m.group(2)) for m in re.finditer(r"#define __NR_(\w+) (\d+)", f.read())}
    listed = {**sf.ALLOWED, **sf.ARG_CHECKED}
    wrong = {n: (v, table.get(n)) for n, v in listed.items() if table.get(n) != v}
    assert not wrong
    assert len(set(listed.values())) == len(listed)


# --- in a real job ---------------------------------------------------------------------------

@pytest.fixture(scope="module", params=BACKEND_PARAMS)
def sb(request):
    pool = open_pool(request.param, workers=1)
    if "seccomp" not in pool._slots[0].isolation:
        pool.close()
        pytest.skip(f"{request.param}: no seccomp filter here")
    yield pool
    pool.close()


@pytest.mark.parametrize("name", WORKLOADS)
def test_honest_workloads_run_under_the_allowlist(sb, name):
    code, want = WORKLOADS[name]
    r = sb.run(code, stdin=STDIN.get(name, ""), timeout_s=20, memory_mb=512)
    assert (r.stdout, r.exit_code) == (want, 0), r.stderr


# name -> (number, arguments, what the old denylist let the call answer (measured on bwrap:
# 'ok' = it ran), the errno the job must get now)
REFUSED = {
    "ptrace": (101, (0,), "EPERM", "EPERM"),
    "process_vm_readv": (310, ("pid", 0, 1, 0, 1, 0), "EPERM", "EPERM"),
    "keyctl": (250, (0, -3, 0), "EPERM", "EPERM"),
    "add_key": (248, (0, 0, 0, 0, -3), "EPERM", "EPERM"),
    "bpf": (321, (999, 0, 0), "EPERM", "EPERM"),
    "userfaultfd": (323, (0,), "EPERM", "EPERM"),
    "io_uring_setup": (425, (1, 0), "EPERM", "EPERM"),
    "perf_event_open": (298, (0, 0, -1, -1, 0), "EPERM", "EPERM"),
    "mount": (165, (0, 0, 0, 0, 0), "EPERM", "EPERM"),
    "unshare": (272, (0x10000000,), "EPERM", "EPERM"),
    # never named by the old denylist: all of these ran or reached the kernel's own checks
    "kcmp": (312, ("pid", "pid", 0, 0, 0), "ok", "EPERM"),
    "personality": (135, (0xFFFFFFFF,), "ok", "EPERM"),
    "sched_setaffinity": (203, (0, 0, 0), "EINVAL", "EPERM"),
    "vmsplice": (278, (-1, 0, 0, 0), "EBADF", "EPERM"),
    "get_robust_list": (274, (0, 0, 0), "EFAULT", "EPERM"),
    "timerfd_create": (283, (1, 0), "ok", "EPERM"),
    "prctl": (157, (3,), "ok", "EPERM"),
    "setuid": (105, ("uid",), "ok", "EPERM"),
    "ioctl_TIOCSTI": (16, (1, 0x5412, 0), "ENOTTY", "EPERM"),
    # the kernel reads an unsigned int command: high bits must not hide one from the filter
    "ioctl_TIOCSTI_high_bits": (16, (1, (1 << 32) | 0x5412, 0), "ENOTTY", "EPERM"),
    "fcntl_F_SETLK_high_bits": (72, (0, (1 << 32) | 6, 0), "EPERM", "EPERM"),
    "pidfd_getfd": (438, ("pid", 0, 0), "EBADF", "ENOSYS"),
    "landlock_create_ruleset": (444, (0, 0, 1), "ok", "ENOSYS"),
    "clone3": (435, (0, 0), "ENOSYS", "ENOSYS"),
    # a sibling of the job is a child of the worker: it must not be able to make one
    "clone_parent": (56, (0x8000 | 17, 0, 0, 0, 0), "ok", "EPERM"),
    # SysV IPC and POSIX queues: guessable names in a namespace other jobs share (issue 29)
    "msgget": (68, (0, 0o1600), "ok", "EPERM"),
    "shmget": (29, (0, 4096, 0o1600), "ok", "EPERM"),
    "semget": (64, (0, 1, 0o1600), "ok", "EPERM"),
    "msgctl": (71, (0, 3, 0), "EFAULT", "EPERM"),  # IPC_INFO (the namespace's limits)
    "mq_open": (240, (0, 0, 0, 0), "EFAULT", "EPERM"),
    "number_999": (999, (), "ENOSYS", "ENOSYS"),
    "x32_getpid": (0x40000000 | 39, (), "EPERM", "EPERM"),
}

PROBE = """
import ctypes, errno, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
subst = {"pid": os.getpid(), "uid": os.getuid()}
out = {}
for name, (nr, args) in json.loads(CASES).items():
    args = [ctypes.c_long(subst.get(a, a)) for a in args]
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(nr), *args)
    out[name] = errno.errorcode.get(ctypes.get_errno(), "?") if rc == -1 else "ok"
print(json.dumps(out))
"""


def test_calls_outside_the_list_are_refused_with_an_errno(sb):
    cases = {k: (nr, args) for k, (nr, args, _, _) in REFUSED.items()}
    r = sb.run(f"CASES = {json.dumps(cases)!r}" + PROBE)
    assert r.exit_code == 0, r.stderr  # refused, never killed
    got = json.loads(r.stdout)
    assert got == {k: v[3] for k, v in REFUSED.items()}


def test_a_refused_call_shows_its_reason_in_the_jobs_traceback(sb):
    r = sb.run("import os\nos.sched_setaffinity(0, {0})\nprint('unreachable')")
    assert r.exit_code == 1 and r.stdout == "" and not r.timed_out
    assert "PermissionError: [Errno 1] Operation not permitted" in r.stderr, r.stderr


def test_a_subprocess_inherits_the_filter(sb):
    # the filter survives execve: a fresh interpreter started by the job is as refused
    inner = "import ctypes; l = ctypes.CDLL(None, use_errno=True); print(l.syscall(101, 0), ctypes.get_errno())"
    r = sb.run(f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {inner!r}])")
    assert r.stdout == "-1 1\n", r.stderr


def test_the_i386_entry_point_is_refused(sb):
    # int 0x80 from machine code the job maps itself: the i386 table, where every number means
    # another call (getpid is 20 there); the filter refuses any arch but x86-64 (EPERM = -1),
    # on the host the same bytes return the pid
    code = ("import ctypes, mmap, os\n"
            "m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
            "m.write(bytes([0xB8, 20, 0, 0, 0, 0xCD, 0x80, 0xC3]))  # mov eax, 20; int 0x80; ret\n"
            "f = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(m)))\n"
            "print(f() == -1, os.getpid() > 0)")
    r = sb.run(code)
    assert (r.stdout, r.exit_code) == ("True True\n", 0), r.stderr
