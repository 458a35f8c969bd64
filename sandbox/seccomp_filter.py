"""A seccomp allowlist every job installs on itself (stdlib only: ctypes + a hand-built BPF).

Namespaces hide the host, but a job still talks to the whole kernel. This filter lets a job
make only the syscalls a CPython program doing math, printing and standard-library work makes
(measured: `benchmarks/seccomp_survey.py` traces the honest workloads of
`tests/sandbox_workloads.py` and the sandbox tests), and refuses every other one with an errno,
never a kill, so the job sees an ordinary `OSError` and its traceback says why:
  - EPERM for a call this list leaves out (ptrace, mount, keyctl, bpf, perf_event_open,
    userfaultfd, io_uring, unshare, inotify, flock, process_vm_readv, ... and anything else);
    among them SysV IPC (shmget, msgget, semget and their calls) and POSIX message queues
    (mq_open ...): objects named by a guessable key in an IPC namespace other jobs share (a
    slot's, or the host's on the process backend), whose id counter also carries a number
    from one job to the next. No honest workload made one (numpy, sympy and multiprocessing
    included: its locks are POSIX semaphores, files in /dev/shm);
  - ENOSYS for a left-out call numbered from clone3 (435, Linux 5.3) on: libc probes such
    newer calls and falls back to the older one on ENOSYS only (clone3 -> clone,
    fchmodat2 -> fchmodat); runc answers syscalls its profile does not know the same way;
  - the non-x86-64 entry points (x32, i386) are refused outright.
Five calls are allowed for listed arguments only: `clone` with the flags glibc's fork, vfork
and pthread_create use (no CLONE_NEW* namespaces, no CLONE_PARENT: a job cannot make a sibling
of itself, a child of the worker), `socket`/`socketpair` for AF_UNIX, AF_INET and AF_INET6 (EAFNOSUPPORT otherwise:
no netlink, no packet sockets), `fcntl` for descriptor flags, duplication, pipe sizes and seals
(no locks, leases or dnotify, which reach the files all slots share), `ioctl` for the few
commands Python's I/O makes on its descriptors (tty probes, non-blocking, close-on-exec).
The syscall numbers are x86-64's (checked against the kernel headers by the tests); elsewhere
`install` returns False and the worker reports no seccomp.
"""

import ctypes
import platform
import struct

AUDIT_ARCH_X86_64 = 0xC000003E
X32_BIT = 0x40000000
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
EPERM, ENOSYS, EAFNOSUPPORT = 1, 38, 97
FIRST_NEW = 435  # clone3: a left-out call from here on answers ENOSYS, so libc falls back

ALLOWED = {  # name -> x86-64 number; what an honest CPython job needs, nothing else
    # memory and the C runtime
    "brk": 12, "mmap": 9, "munmap": 11, "mprotect": 10, "mremap": 25, "madvise": 28, "msync": 26,
    "memfd_create": 319,  # libffi's closures (ctypes callbacks) where writable+exec maps fail
    "arch_prctl": 158, "set_tid_address": 218, "set_robust_list": 273, "rseq": 334,
    "futex": 202, "sched_yield": 24, "sched_getaffinity": 204, "getcpu": 309,
    "exit": 60, "exit_group": 231, "restart_syscall": 219,
    # signals (handlers, alarms, subprocess and threads signal their own)
    "rt_sigaction": 13, "rt_sigprocmask": 14, "rt_sigreturn": 15, "rt_sigpending": 127,
    "rt_sigsuspend": 130, "rt_sigtimedwait": 128, "sigaltstack": 131, "pause": 34,
    "alarm": 37, "setitimer": 38, "getitimer": 36, "kill": 62, "tgkill": 234, "tkill": 200,
    # processes: subprocess, os.fork, multiprocessing's fork start
    "fork": 57, "vfork": 58, "execve": 59, "wait4": 61, "waitid": 247,
    "pidfd_open": 434, "pidfd_send_signal": 424,
    "setsid": 112, "setpgid": 109, "getpgid": 121, "getpgrp": 111, "getsid": 124,
    "getpid": 39, "getppid": 110, "gettid": 186, "getuid": 102, "geteuid": 107, "getgid": 104,
    "getegid": 108, "getgroups": 115, "getresuid": 118, "getresgid": 120,
    # limits, clocks, randomness, system facts
    "prlimit64": 302, "getrlimit": 97, "setrlimit": 160, "getrusage": 98, "times": 100,
    "sysinfo": 99, "uname": 63, "umask": 95, "getrandom": 318,
    "clock_gettime": 228, "clock_getres": 229, "clock_nanosleep": 230, "nanosleep": 35,
    "gettimeofday": 96, "time": 201,
    # descriptors and files (the wall decides which files exist and which are writable)
    "read": 0, "write": 1, "open": 2, "close": 3, "stat": 4, "fstat": 5, "lstat": 6, "lseek": 8,
    "pread64": 17, "pwrite64": 18, "readv": 19, "writev": 20, "preadv": 295, "pwritev": 296,
    "preadv2": 327, "pwritev2": 328, "openat": 257, "newfstatat": 262, "statx": 332,
    "statfs": 137, "fstatfs": 138, "access": 21, "faccessat": 269, "faccessat2": 439,
    "readlink": 89, "readlinkat": 267, "getdents": 78, "getdents64": 217, "getcwd": 79,
    "chdir": 80, "fchdir": 81, "mkdir": 83, "mkdirat": 258, "rmdir": 84, "creat": 85,
    "unlink": 87, "unlinkat": 263, "rename": 82, "renameat": 264, "renameat2": 316,
    "link": 86, "linkat": 265, "symlink": 88, "symlinkat": 266, "chmod": 90, "fchmod": 91,
    "fchmodat": 268, "truncate": 76, "ftruncate": 77, "fsync": 74, "fdatasync": 75,
    "utime": 132, "utimes": 235, "utimensat": 280, "mknod": 133, "mknodat": 259,  # fifos
    "dup": 32, "dup2": 33, "dup3": 292, "pipe": 22, "pipe2": 293, "close_range": 436,
    "sendfile": 40, "copy_file_range": 326,
    # waiting on descriptors: select, selectors, asyncio
    "poll": 7, "ppoll": 271, "select": 23, "pselect6": 270, "epoll_create": 213,
    "epoll_create1": 291, "epoll_ctl": 233, "epoll_wait": 232, "epoll_pwait": 281,
    # sockets of the allowed families (socket/socketpair are checked below); the wall has
    # no network, so these reach only the job's own sockets
    "bind": 49, "connect": 42, "listen": 50, "accept": 43, "accept4": 288, "sendto": 44,
    "recvfrom": 45, "sendmsg": 46, "recvmsg": 47, "shutdown": 48, "getsockname": 51,
    "getpeername": 52, "setsockopt": 54, "getsockopt": 55,
}
# Allowed for the arguments listed below only (the low 32 bits of the argument: the kernel
# takes these as int / unsigned int, and the legacy clone call reads only the low word of its flags).
ARG_CHECKED = {"clone": 56, "socket": 41, "socketpair": 53, "fcntl": 72, "ioctl": 16}
# clone flags a job may pass: the exit signal byte, and what fork (CHILD_SETTID|CHILD_CLEARTID),
# vfork (VM|VFORK) and pthread_create (VM|FS|FILES|SIGHAND|THREAD|SYSVSEM|SETTLS|PARENT_SETTID|
# CHILD_CLEARTID) use; any other bit (CLONE_NEW*, PARENT, PTRACE, PIDFD, IO, ...) is refused
CLONE_FLAGS = (0xFF | 0x100 | 0x200 | 0x400 | 0x800 | 0x4000 | 0x10000 | 0x40000 | 0x80000
               | 0x100000 | 0x200000 | 0x1000000)
SOCKET_FAMILIES = (1, 2, 10)  # AF_UNIX, AF_INET, AF_INET6; never AF_NETLINK (host kernel events), AF_PACKET, ...
# fcntl commands on descriptors the job holds; not record or OFD locks, leases, or F_NOTIFY
# (dnotify), all of which reach files other slots share
FCNTL_CMDS = (0, 1, 2, 3, 4,  # F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL
              1030, 1031, 1032, 1033, 1034)  # F_DUPFD_CLOEXEC, F_{SET,GET}PIPE_SZ, F_{ADD,GET}_SEALS
# ioctls CPython makes on its own descriptors: isatty/termios probes, the terminal size,
# non-blocking and close-on-exec switches, bytes waiting; not TIOCSTI & co., nor any device's
IOCTL_CMDS = (0x5401, 0x5413, 0x541B,  # TCGETS, TIOCGWINSZ, FIONREAD
              0x5421, 0x5450, 0x5451)  # FIONBIO, FIONCLEX, FIOCLEX
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
# BPF opcodes
LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
ARG0, ARG1 = 16, 24  # offsets of the low words of args[0] and args[1] in struct seccomp_data


def action(nr: int) -> str:
    """What the filter does with syscall `nr`: a label of the program below."""
    if nr in ALLOWED.values():
        return "allow"
    for name, num in ARG_CHECKED.items():
        if nr == num:
            return name
    return "eperm" if nr < FIRST_NEW else "enosys"


def _intervals():
    """[(first number, action)] covering every number, adjacent runs merged."""
    top = max(max(ALLOWED.values()), max(ARG_CHECKED.values()), FIRST_NEW) + 1
    out = []
    for nr in range(top + 1):
        act = action(nr)
        if not out or out[-1][1] != act:
            out.append((nr, act))
    return out


def _tree(intervals, asm, names):
    """Emit a binary search over the interval starts (syscall number in A); returns the label
    to jump to for these intervals. A single interval is its action's label: no code."""
    if len(intervals) == 1:
        return intervals[0][1]
    label = f"n{len(names)}"
    names.append(label)
    mid = len(intervals) // 2
    at = len(asm)
    asm.append(None)  # the node's JGE, patched once both children have labels
    asm.insert(at, ("label", label))
    left = _tree(intervals[:mid], asm, names)
    right = _tree(intervals[mid:], asm, names)
    asm[at + 1] = (JGE_K, right, left, intervals[mid][0])
    return label


def _assemble():
    """The filter as (code, jump-if-true, jump-if-false, k) entries and ("label", name) marks;
    jumps name a label or "next"."""
    asm = [(LD_W_ABS, "next", "next", 4),                      # arch
           (JEQ_K, "next", "eperm", AUDIT_ARCH_X86_64),
           (LD_W_ABS, "next", "next", 0),                      # syscall number
           (JGE_K, "eperm", "next", X32_BIT)]                  # x32 entry points
    body = []
    assert _tree(_intervals(), body, []) == "n0"  # the search starts right here
    asm += body
    asm += [("label", "clone"), (LD_W_ABS, "next", "next", ARG0),   # clone flags
            (JSET_K, "eperm", "allow", ~CLONE_FLAGS & 0xFFFFFFFF)]
    asm += [("label", "socket"), ("label", "socketpair"), (LD_W_ABS, "next", "next", ARG0)]  # family
    asm += [(JEQ_K, "allow", "next", fam) for fam in SOCKET_FAMILIES]
    asm += [(RET_K, "next", "next", RET_ERRNO | EAFNOSUPPORT)]
    for name, cmds in (("fcntl", FCNTL_CMDS), ("ioctl", IOCTL_CMDS)):
        asm += [("label", name), (LD_W_ABS, "next", "next", ARG1)]   # command
        asm += [(JEQ_K, "allow", "next", cmd) for cmd in cmds]
        asm += [(RET_K, "next", "next", RET_ERRNO | EPERM)]
    asm += [("label", "allow"), (RET_K, "next", "next", RET_ALLOW),
            ("label", "eperm"), (RET_K, "next", "next", RET_ERRNO | EPERM),
            ("label", "enosys"), (RET_K, "next", "next", RET_ERRNO | ENOSYS)]
    return asm


def program() -> bytes:
    """The filter as raw `struct sock_filter` entries (labels resolved to relative jumps;
    struct.pack refuses a jump over more than 255 entries)."""
    labels, code = {}, []
    for entry in _assemble():
        if entry[0] == "label":
            labels[entry[1]] = len(code)
        else:
            code.append(entry)
    out = []
    for i, (op, jt, jf, k) in enumerate(code):
        off = [0 if t == "next" else labels[t] - i - 1 for t in (jt, jf)]
        out.append(struct.pack("HBBI", op, off[0], off[1], k))
    return b"".join(out)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]


_CODE = program()  # built once: the worker imports this before it forks any job
_PROG = _SockFprog(len(_CODE) // 8, _CODE)
_LIBC = ctypes.CDLL(None, use_errno=True)


def install() -> bool:
    """Apply the filter to the calling process (needs no_new_privs set first)."""
    if platform.machine() != "x86_64":
        return False
    return _LIBC.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(_PROG), 0, 0) == 0
