"""A seccomp denylist every job installs on itself (stdlib only: ctypes + a hand-built BPF).

Namespaces hide the host, but a job still talks to the whole kernel. This filter removes the
syscalls that are the usual way into kernel bugs or out of a sandbox and that model-written
math code never needs: creating namespaces (unshare, setns, clone with CLONE_NEW* flags),
ptrace and cross-process memory access, mount family, keyrings, bpf, perf events,
userfaultfd, io_uring, module and kexec loading, handle-based opens, and the calls that let
one slot see another through the read-only files they share (inotify, fanotify, flock). They
fail with EPERM (clone3 with ENOSYS, so libc falls back to the inspectable clone). Two calls
are allowed for listed arguments only: `socket`/`socketpair` for AF_UNIX, AF_INET and AF_INET6
(EAFNOSUPPORT otherwise: no netlink, no packet sockets), and `fcntl` for descriptor flags,
duplication, pipe sizes and seals (no locks, leases or dnotify). Other architectures'
syscall entries (x32, i386) are denied outright. x86-64 only; elsewhere `install` returns
False and the worker reports no seccomp.
"""

import ctypes
import platform
import struct

AUDIT_ARCH_X86_64 = 0xC000003E
X32_BIT = 0x40000000
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
EPERM, ENOSYS, EAFNOSUPPORT = 1, 38, 97
CLONE_NS_FLAGS = 0x7E020080  # NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME
NR_CLONE, NR_CLONE3, NR_SOCKET, NR_SOCKETPAIR, NR_FCNTL = 56, 435, 41, 53, 72
DENIED = (
    101, 310, 311,            # ptrace, process_vm_readv, process_vm_writev
    272, 308,                 # unshare, setns
    165, 166, 155, 161,       # mount, umount2, pivot_root, chroot
    428, 429, 430, 431, 432, 433, 442,  # open_tree, move_mount, fsopen, fsconfig, fsmount, fspick, mount_setattr
    248, 249, 250,            # add_key, request_key, keyctl
    321, 298, 323,            # bpf, perf_event_open, userfaultfd
    425, 426, 427,            # io_uring_setup, io_uring_enter, io_uring_register
    175, 313, 176, 246, 320,  # init_module, finit_module, delete_module, kexec_load, kexec_file_load
    303, 304,                 # name_to_handle_at, open_by_handle_at
    163, 167, 168, 169, 103,  # acct, swapon, swapoff, reboot, syslog
    300, 301, 212, 179,       # fanotify_init, fanotify_mark, lookup_dcookie, quotactl
    # Channels between slots through the files they share read-only (/usr, the Python
    # install): watches see another slot's reads, locks another slot's locks.
    253, 294, 254,            # inotify_init, inotify_init1, inotify_add_watch
    73,                       # flock
)
# Allowlists for the calls that are fine with some arguments only:
SOCKET_FAMILIES = (1, 2, 10)  # AF_UNIX, AF_INET, AF_INET6; never AF_NETLINK (host kernel events), AF_PACKET, ...
# fcntl commands on descriptors the job holds; not record or OFD locks, leases, or F_NOTIFY
# (dnotify), all of which reach files other slots share
FCNTL_CMDS = (0, 1, 2, 3, 4,  # F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL
              1030, 1031, 1032, 1033, 1034)  # F_DUPFD_CLOEXEC, F_{SET,GET}PIPE_SZ, F_{ADD,GET}_SEALS
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
# BPF opcodes
LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
ARG0, ARG1 = 16, 24  # offsets of the low words of args[0] and args[1] in struct seccomp_data


def _assemble():
    """The filter as (code, jump-if-true, jump-if-false, k) entries and ("label", name) marks;
    jumps name a label or "next"."""
    asm = [(LD_W_ABS, "next", "next", 4),                      # arch
           (JEQ_K, "next", "deny", AUDIT_ARCH_X86_64),
           (LD_W_ABS, "next", "next", 0),                      # syscall number
           (JGE_K, "deny", "next", X32_BIT)]                   # x32 entry points
    asm += [(JEQ_K, "deny", "next", nr) for nr in DENIED]
    asm += [(JEQ_K, "enosys", "next", NR_CLONE3),
            (JEQ_K, "socket", "next", NR_SOCKET),
            (JEQ_K, "socket", "next", NR_SOCKETPAIR),
            (JEQ_K, "fcntl", "next", NR_FCNTL),
            (JEQ_K, "next", "allow", NR_CLONE),
            (LD_W_ABS, "next", "next", ARG0),                  # clone flags
            (JSET_K, "deny", "allow", CLONE_NS_FLAGS),
            ("label", "socket"), (LD_W_ABS, "next", "next", ARG0)]  # address family
    asm += [(JEQ_K, "allow", "next", fam) for fam in SOCKET_FAMILIES]
    asm += [(RET_K, "next", "next", RET_ERRNO | EAFNOSUPPORT),
            ("label", "fcntl"), (LD_W_ABS, "next", "next", ARG1)]   # command
    asm += [(JEQ_K, "allow", "next", cmd) for cmd in FCNTL_CMDS]
    asm += [(RET_K, "next", "next", RET_ERRNO | EPERM),
            ("label", "allow"), (RET_K, "next", "next", RET_ALLOW),
            ("label", "deny"), (RET_K, "next", "next", RET_ERRNO | EPERM),
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
