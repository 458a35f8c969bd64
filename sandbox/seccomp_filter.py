"""A seccomp denylist every job installs on itself (stdlib only: ctypes + a hand-built BPF).

Namespaces hide the host, but a job still talks to the whole kernel. This filter removes the
syscalls that are the usual way into kernel bugs or out of a sandbox and that model-written
math code never needs: creating namespaces (unshare, setns, clone with CLONE_NEW* flags),
ptrace and cross-process memory access, mount family, keyrings, bpf, perf events,
userfaultfd, io_uring, module and kexec loading, handle-based opens. They fail with EPERM
(clone3 with ENOSYS, so libc falls back to the inspectable clone). Other architectures'
syscall entries (x32, i386) are denied outright. x86-64 only; elsewhere `install` returns
False and the worker reports no seccomp.
"""

import ctypes
import platform
import struct

AUDIT_ARCH_X86_64 = 0xC000003E
X32_BIT = 0x40000000
RET_ALLOW = 0x7FFF0000
RET_EPERM = 0x00050000 | 1
RET_ENOSYS = 0x00050000 | 38
CLONE_NS_FLAGS = 0x7E020080  # NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME
NR_CLONE, NR_CLONE3 = 56, 435
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
    300, 212, 179,            # fanotify_init, lookup_dcookie, quotactl
)
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
# BPF opcodes
LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06


def program() -> bytes:
    """The filter as raw `struct sock_filter` entries (labels resolved to relative jumps)."""
    nxt = "next"
    asm = [(LD_W_ABS, nxt, nxt, 4),                          # arch
           (JEQ_K, nxt, "deny", AUDIT_ARCH_X86_64),
           (LD_W_ABS, nxt, nxt, 0),                          # syscall number
           (JGE_K, "deny", nxt, X32_BIT)]                    # x32 entry points
    asm += [(JEQ_K, "deny", nxt, nr) for nr in DENIED]
    asm += [(JEQ_K, "enosys", nxt, NR_CLONE3),
            (JEQ_K, nxt, "allow", NR_CLONE),
            (LD_W_ABS, nxt, nxt, 16),                        # clone flags: args[0], low word
            (JSET_K, "deny", "allow", CLONE_NS_FLAGS)]
    labels = {"allow": len(asm), "deny": len(asm) + 1, "enosys": len(asm) + 2}
    asm += [(RET_K, nxt, nxt, RET_ALLOW), (RET_K, nxt, nxt, RET_EPERM),
            (RET_K, nxt, nxt, RET_ENOSYS)]
    out = []
    for i, (code, jt, jf, k) in enumerate(asm):
        off = [0 if t == nxt else labels[t] - i - 1 for t in (jt, jf)]
        out.append(struct.pack("HBBI", code, off[0], off[1], k))
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
