"""The outer walls around the shared worker: docker, bwrap (bubblewrap) and process.

A backend only knows how to start one worker unit for a slot (an argv), how to kill that
whole unit, and whether it can run here. Everything inside the wall is `worker.py`.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

WORKER = str(Path(__file__).with_name("worker.py"))
# The worker and the modules it imports from its own dir; copied (not bind-mounted) into the
# bwrap and docker walls, so no host path of the checkout shows in /proc/self/mountinfo.
SHIPPED = ("worker.py", "frames.py", "residue.py", "seccomp_filter.py")
IN_DIR = "/opt/sandbox"
IN_WORKER = f"{IN_DIR}/worker.py"
IO_DIR = "/opt/io"
NEUTRAL_PREFIX = "/opt/python"  # where a Python installed outside /usr appears in a wall
MQUEUE_DIR = "/dev/mqueue"
IMAGE = os.environ.get("MATHRL_SANDBOX_IMAGE", "mathrl-sandbox:py3.11")
LABEL = "mathrl.sandbox"
IMAGE_LAYOUT = "2"  # bumped when the image's file layout changes (2: Python at /opt/python)
ALLOW_PROCESS_ENV = "MATHRL_SANDBOX_ALLOW_PROCESS"
PYTHON_ENV = "MATHRL_SANDBOX_PYTHON"  # interpreter jobs run with; default: the host's own


def _interpreter() -> tuple[str, str]:
    """(interpreter path, its install prefix) for the workers; stdlib only is assumed."""
    chosen = os.environ.get(PYTHON_ENV)
    if not chosen:
        return os.path.realpath(getattr(sys, "_base_executable", sys.executable)), sys.base_prefix
    out = subprocess.run([chosen, "-I", "-c", "import sys; print(sys.base_prefix)"],
                         capture_output=True, text=True, check=True, timeout=30)
    return os.path.realpath(chosen), out.stdout.strip()


BASE_PYTHON, BASE_PREFIX = _interpreter()


def wall_python() -> tuple[str, tuple[str, str] | None]:
    """(interpreter path inside a bwrap or docker wall, (host prefix, wall path) to mount).

    An install under /usr comes with /usr and keeps its path. Any other is mounted (bwrap) or
    imaged (docker) at NEUTRAL_PREFIX, so jobs do not learn where it lives on the host (the
    loader is pointed at its lib dir, since builds often carry an absolute RUNPATH).
    """
    if BASE_PREFIX == "/usr" or BASE_PREFIX.startswith("/usr/"):
        return BASE_PYTHON, None
    rel = os.path.relpath(BASE_PYTHON, BASE_PREFIX)
    if rel.startswith(".."):  # the binary lives outside its prefix: keep the host paths
        return BASE_PYTHON, (BASE_PREFIX, BASE_PREFIX)
    return f"{NEUTRAL_PREFIX}/{rel}", (BASE_PREFIX, NEUTRAL_PREFIX)


def wall_env() -> dict[str, str]:
    mount = wall_python()[1]
    return {"LD_LIBRARY_PATH": f"{mount[1]}/lib"} if mount and mount[1] != mount[0] else {}


@dataclass
class SlotSpec:
    """What one worker unit needs: its own unprivileged uid and a scratch path."""

    memory_mb: int = 512
    nproc: int = 64
    tmp_mb: int = 256
    uid: int = field(default_factory=lambda: 1_000_000 + secrets.randbelow(1_000_000))
    name: str = field(default_factory=lambda: "mathrl-sb-" + secrets.token_hex(6))
    host_dir: str | None = None  # process: scratch; docker: protocol FIFOs; removed on close
    fifo_dir: str | None = None  # where the worker finds the FIFOs (inside its wall)
    pass_fds: list[int] = field(default_factory=list)  # bwrap: shipped files; closed after spawn
    sweep_budget_s: float = 1.5  # the worker's time to clear a slot after a job (then: replaced)

    def worker_cfg(self, scratch: str, drop: bool, own_userns: bool = False,
                   private_ipc: bool = True) -> str:
        return json.dumps({"uid": self.uid if drop else None, "gid": self.uid,
                           "scratch": scratch, "nproc": self.nproc, "own_userns": own_userns,
                           "fifo_dir": self.fifo_dir, "private_ipc": private_ipc,
                           "mqueue_dir": MQUEUE_DIR, "sweep_budget_s": self.sweep_budget_s})


class Backend:
    name = ""
    isolation = ""
    own_cgroup = True  # the pool puts each unit in its own cgroup when the host allows it

    def available(self) -> tuple[bool, str]:
        raise NotImplementedError

    def argv(self, spec: SlotSpec) -> list[str]:
        raise NotImplementedError

    def kill(self, spec: SlotSpec, proc: subprocess.Popen) -> None:
        """Kill the whole unit (worker and every job process), then reap the client."""
        _kill_group(proc)

    def popen_kwargs(self) -> dict:
        return {}


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass
    proc.wait()


def _world_reachable(path: str) -> bool:
    """Can an unprivileged uid traverse to `path` (every parent o+x)?"""
    path = os.path.realpath(path)
    while True:
        if not os.stat(path).st_mode & 0o001:
            return False
        if path == "/":
            return True
        path = os.path.dirname(path)


class ProcessBackend(Backend):
    name = "process"

    @property
    def drops_uid(self) -> bool:
        # Jobs run as a per-slot uid only when we are root and that uid can still import
        # the stdlib (a Python under /root, mode 0700, cannot be read by it).
        return os.geteuid() == 0 and _world_reachable(BASE_PREFIX)

    @property
    def isolation(self) -> str:
        who = ("own unprivileged uid (process cap, host 0600 files)" if self.drops_uid
               else "runs as the calling user (no process cap)")
        return ("NOT a security boundary: rlimits (memory, CPU, file size), new session, "
                f"clean env, scratch dir, {who}; host files and network stay reachable")

    def available(self):
        return True, "always (weakest; opt in with %s=1 or backend='process')" % ALLOW_PROCESS_ENV

    def argv(self, spec):
        spec.host_dir = tempfile.mkdtemp(prefix="mathrl-sandbox-")
        if self.drops_uid:
            os.chown(spec.host_dir, spec.uid, spec.uid)
        return [BASE_PYTHON, "-I", WORKER, spec.worker_cfg(spec.host_dir, self.drops_uid,
                                                             private_ipc=False)]

    def popen_kwargs(self):
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/nonexistent"}
        return {"start_new_session": True, "env": env}

    def kill(self, spec, proc):
        _kill_group(proc)
        if self.drops_uid:  # jobs sit in their own sessions; end them by their uid
            _kill_uid(spec.uid)


def _kill_uid(uid: int) -> None:
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def _bind_system(args: list[str]) -> None:
    for d in ("/usr", "/lib", "/lib64", "/bin", "/lib32"):
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    args += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    mount = wall_python()[1]
    if mount:
        # bwrap would copy the mode of private parents (/root is 0700): make them traversable
        parts = mount[1].strip("/").split("/")[:-1]
        for i in range(1, len(parts) + 1):
            args += ["--perms", "0755", "--dir", "/" + "/".join(parts[:i])]
        args += ["--ro-bind", *mount]
    for k, v in wall_env().items():
        args += ["--setenv", k, v]


def _ship_files(args: list[str], fds: list[int]) -> None:
    """Copy the worker's files into the wall from open descriptors (bwrap --ro-bind-data),
    so the mount table names no host path of the checkout."""
    args += ["--perms", "0755", "--dir", IN_DIR]
    for name in SHIPPED:
        fd = os.open(Path(__file__).with_name(name), os.O_RDONLY | os.O_CLOEXEC)
        fds.append(fd)
        args += ["--perms", "0444", "--ro-bind-data", str(fd), f"{IN_DIR}/{name}"]


class BwrapBackend(Backend):
    name = "bwrap"
    isolation = ("bubblewrap namespaces (pid, net, mount, ipc, uts): no network, read-only "
                 "/usr + Python only, private tmpfs, own unprivileged uid, rlimits (memory, "
                 "processes, file size, CPU)")

    def argv(self, spec, command: list[str] | None = None):
        root = os.geteuid() == 0
        args = ["bwrap", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
                "--unshare-cgroup-try", "--die-with-parent", "--as-pid-1", "--new-session",
                "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp",
                "--setenv", "LANG", "C.UTF-8"]
        if root:  # worker keeps only what it needs to switch to the slot uid and kill jobs
            args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
                     "--cap-add", "CAP_KILL"]
        else:
            args += ["--unshare-user", "--disable-userns"]
        _bind_system(args)
        if command is None:
            _ship_files(args, spec.pass_fds)
        args += ["--proc", "/proc", "--dev", "/dev", "--mqueue", MQUEUE_DIR,
                 "--perms", "1777", "--size", str(spec.tmp_mb << 20), "--tmpfs", "/tmp",
                 "--chdir", "/tmp"]
        return args + (command or [wall_python()[0], "-I", IN_WORKER,
                                   spec.worker_cfg("/tmp", root, own_userns=not root)])

    def popen_kwargs(self):
        return {"start_new_session": True}

    def available(self):
        return _bwrap_probe()


@functools.lru_cache(maxsize=1)
def _bwrap_probe() -> tuple[bool, str]:
    if shutil.which("bwrap") is None:
        return False, ("bwrap not installed: `apt-get install bubblewrap` (Debian/Ubuntu) or "
                       "`dnf install bubblewrap`")
    # The version check catches a relocated interpreter that loaded another libpython.
    code = "import sys, ctypes; print(sys.version)"
    argv = BwrapBackend().argv(SlotSpec(), [wall_python()[0], "-I", "-c", code])
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        want = subprocess.run([BASE_PYTHON, "-I", "-c", code], capture_output=True,
                              text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"bwrap failed to start: {e}"
    if out.returncode != 0 or not out.stdout.strip():
        return False, f"bwrap cannot create namespaces here: {out.stderr.strip()[:300]}"
    if out.stdout != want:
        return False, (f"the interpreter mounted at {wall_python()[0]} is not the host's "
                       f"({out.stdout.strip()!r} vs {want.strip()!r})")
    return True, "bwrap works"


class DockerBackend(Backend):
    name = "docker"
    own_cgroup = False  # the engine gives each container its memory and pids cgroup
    isolation = ("docker container: no network, read-only image root, private tmpfs, all caps "
                 "dropped (worker keeps setuid/kill), no-new-privileges, own unprivileged uid, "
                 "memory + pids cgroup limits, 1 CPU quota, rlimits")

    def argv(self, spec):
        # The protocol runs over two FIFOs in a root-only host dir bind-mounted into the
        # container: host and worker talk through kernel pipes, not the docker CLI and engine.
        spec.host_dir = tempfile.mkdtemp(prefix="mathrl-sandbox-")
        for name in ("req", "resp"):
            os.mkfifo(os.path.join(spec.host_dir, name), 0o600)
        code_dir = os.path.join(spec.host_dir, "code")  # a copy: no checkout path in the wall
        os.mkdir(code_dir, 0o755)
        for name in SHIPPED:
            shutil.copyfile(Path(__file__).with_name(name), os.path.join(code_dir, name))
            os.chmod(os.path.join(code_dir, name), 0o444)
        spec.fifo_dir = IO_DIR
        env = [a for k, v in wall_env().items() for a in ("--env", f"{k}={v}")]
        mem = spec.memory_mb + 256
        return ["docker", "run", "--rm", "--name", spec.name, "--label", f"{LABEL}=1",
                "--network", "none", "--ipc", "none", "--read-only", "--tmpfs",
                f"/tmp:rw,exec,size={spec.tmp_mb}m,mode=1777", "--cap-drop", "ALL",
                "--cap-add", "SETUID", "--cap-add", "SETGID", "--cap-add", "KILL",
                "--security-opt", "no-new-privileges", "--memory", f"{mem}m",
                "--memory-swap", f"{mem}m", "--pids-limit", str(spec.nproc * 2 + 16),
                "--cpus", "1",  # the container's CPU quota: as a bwrap slot's (cgroups.py)
                "--user", "0:0", "--workdir", "/tmp", "--env", "LANG=C.UTF-8", *env,
                "--mount", f"type=bind,src={code_dir},dst={IN_DIR},readonly",
                "--mount", f"type=bind,src={spec.host_dir},dst={IO_DIR}",
                IMAGE, wall_python()[0], "-I", IN_WORKER, spec.worker_cfg("/tmp", True)]

    def kill(self, spec, proc):
        # Killing the docker client does not kill the container: remove it through the engine.
        try:
            _docker_client().containers.get(spec.name).remove(force=True)
        except Exception:
            pass
        _kill_group(proc)

    def popen_kwargs(self):
        return {"start_new_session": True}

    def available(self):
        return _docker_probe()


def _docker_client():
    import docker  # optional: only the docker backend needs the SDK

    return docker.from_env(timeout=10)


def _docker_probe() -> tuple[bool, str]:
    if shutil.which("docker") is None:
        return False, "docker CLI not installed (`apt-get install docker.io`)"
    try:
        client = _docker_client()
        client.ping()
    except Exception as e:
        return False, f"no Docker engine reachable ({type(e).__name__}); see `make test-docker`"
    try:
        image = client.images.get(IMAGE)
    except Exception:
        return False, f"engine up but image {IMAGE} missing: run `python -m sandbox build-image`"
    if (image.labels or {}).get(f"{LABEL}.layout") != IMAGE_LAYOUT:
        return False, (f"image {IMAGE} has an older file layout: rebuild it with "
                       "`python -m sandbox build-image`")
    return True, "engine reachable, image present"


BACKENDS: dict[str, Backend] = {b.name: b for b in (DockerBackend(), BwrapBackend(),
                                                     ProcessBackend())}


def resolve(name: str, allow_process: bool | None = None) -> Backend:
    """Pick a backend by name; `auto` tries docker, then bwrap, then (opt-in) process."""
    from .result import SandboxUnavailable

    if name != "auto":
        if name not in BACKENDS:
            raise ValueError(f"unknown sandbox backend {name!r}; valid: auto, {', '.join(BACKENDS)}")
        ok, why = BACKENDS[name].available()
        if not ok:
            raise SandboxUnavailable(f"sandbox backend {name!r} unavailable: {why}")
        return BACKENDS[name]
    reasons = []
    for b in (BACKENDS["docker"], BACKENDS["bwrap"]):
        ok, why = b.available()
        if ok:
            return b
        reasons.append(f"{b.name}: {why}")
    if allow_process is None:
        allow_process = os.environ.get(ALLOW_PROCESS_ENV, "") not in ("", "0")
    if allow_process:
        return BACKENDS["process"]
    raise SandboxUnavailable(
        "no isolating sandbox backend is available (" + "; ".join(reasons) + "). Install "
        "bubblewrap (`apt-get install bubblewrap`), or accept the unisolated process backend "
        f"with {ALLOW_PROCESS_ENV}=1 or backend='process'.")
