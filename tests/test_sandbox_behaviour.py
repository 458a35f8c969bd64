"""Ordinary behaviour of the sandbox on every available backend: I/O, exit codes, batches,
cleanup, backend selection."""

from __future__ import annotations

import glob
import os
import secrets
import subprocess
import sys
import time

import pytest

import sandbox
from sandbox import Sandbox, SandboxUnavailable
import sandbox.pool as pool_mod
from sandbox.backends import ALLOW_PROCESS_ENV, ProcessBackend, resolve
from tests.sandbox_helpers import (BACKEND_PARAMS, daemon_code, open_pool, procs_of_uids,
                                   procs_with_token, require, slot_uids)


@pytest.fixture(scope="module", params=BACKEND_PARAMS)
def sb(request):
    pool = open_pool(request.param)
    yield pool
    pool.close()


def test_stdin_is_fed_to_the_program(sb):
    r = sb.run("import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))",
               stdin="1 2 3\n4\n")
    assert r.stdout == "10\n" and r.exit_code == 0


def test_stdlib_modules_import(sb):
    mods = "socket, subprocess, decimal, statistics, json, sqlite3, hashlib, zlib, ctypes, ssl"
    r = sb.run(f"import sys, {mods}\nprint(subprocess.run([sys.executable, '-c', "
               "'print(\"hi\")'], capture_output=True, text=True).stdout, end='')")
    assert r.stdout == "hi\n" and r.exit_code == 0, r.stderr


def test_large_legit_output_is_returned_whole(sb):
    r = sb.run("print('ab' * 30000, end='')", max_output_bytes=65536)
    assert r.stdout == "ab" * 30000 and not r.output_truncated


def test_unicode_round_trips(sb):
    text = "π ≈ 3.14159, ∑ 你好 🎉"
    r = sb.run("import sys\nprint(sys.stdin.read().upper())", stdin=text)
    assert r.stdout == text.upper() + "\n"


def test_sys_exit_code_is_kept(sb):
    r = sb.run("import sys\nprint('bye')\nsys.exit(3)")
    assert r.exit_code == 3 and r.stdout == "bye\n" and not r.timed_out


def test_syntax_error_is_reported(sb):
    r = sb.run("def f(:\n    pass")
    assert r.exit_code == 1 and "SyntaxError" in r.stderr and r.stdout == ""


def test_50_parallel_jobs_match_their_inputs(sb):
    codes = [f"import sys\nprint({i} * int(sys.stdin.read()))" for i in range(50)]
    stdins = [str(i + 1) for i in range(50)]
    results = sb.map(codes, stdins=stdins)
    assert [r.stdout for r in results] == [f"{i * (i + 1)}\n" for i in range(50)]
    assert all(r.backend == sb.backend.name for r in results)


def test_scratch_is_empty_for_each_job(sb):
    sb.run("open('left_behind', 'w').write('x')")
    rs = [sb.run("import os\nprint(os.listdir('.'))") for _ in range(sb.workers)]
    assert all(r.stdout == "[]\n" for r in rs)


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_close_leaves_nothing_behind(backend):
    before = set(glob.glob("/tmp/mathrl-sandbox-*"))
    token = "mathrl-close-" + secrets.token_hex(8)
    pool = open_pool(backend)
    pool.map([daemon_code(token) + "\nopen('f', 'w').write('x')"] * 4)
    uids, procs = slot_uids(pool), [s.proc for s in pool._slots if s.proc]
    names = [s.spec.name for s in pool._slots if s.spec]
    cgroup_dirs = [d for s in pool._slots if s.cg for d in s.cg.dirs]
    pool.close()
    assert not [d for d in cgroup_dirs if os.path.exists(d)]
    assert procs and all(p.poll() is not None for p in procs)
    assert procs_of_uids(uids) == [] and procs_with_token(token) == []
    assert set(glob.glob("/tmp/mathrl-sandbox-*")) <= before
    if backend == "docker":
        out = subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}"],
                             capture_output=True, text=True, check=True)
        assert not set(names) & set(out.stdout.split())


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_a_unit_outlives_the_thread_that_started_it(backend):
    """A unit started lazily by ``map``'s short-lived thread stays up after that thread ends: the
    kernel's parent-death signal (bwrap --die-with-parent) follows the forking *thread*, and used to
    kill such a unit, at times in the middle of its next job ("worker unit killed")."""
    pool = open_pool(backend)  # slot 0 starts here, slot 1 on its first job, in map's thread
    try:
        first = pool.map(["import time; time.sleep(0.3); print(1)"] * 2)
        procs = [s.proc for s in pool._slots]
        assert [r.stdout for r in first] == ["1\n", "1\n"] and all(procs)
        time.sleep(1.0)  # map's threads have exited
        assert [p.poll() for p in procs] == [None, None]
        again = pool.map(["print(2)"] * 2)
        assert [r.stdout for r in again] == ["2\n", "2\n"]
        assert [s.proc for s in pool._slots] == procs  # the same units served: none was restarted
    finally:
        pool.close()


def test_run_uses_a_shared_pool_and_reports_isolation():
    require("bwrap")
    r = sandbox.run("print(1+1)", backend="bwrap")
    assert r.stdout == "2\n" and r.backend == "bwrap" and "no network" in r.isolation


def test_auto_refuses_process_without_opt_in(monkeypatch):
    from sandbox import backends

    monkeypatch.delenv(ALLOW_PROCESS_ENV, raising=False)
    for name in ("docker", "bwrap"):
        monkeypatch.setattr(backends.BACKENDS[name], "available",
                            lambda: (False, "disabled for this test"))
    with pytest.raises(SandboxUnavailable, match="bubblewrap"):
        resolve("auto")
    monkeypatch.setenv(ALLOW_PROCESS_ENV, "1")
    assert resolve("auto").name == "process"


def test_process_label_says_it_is_not_a_boundary():
    with Sandbox("process", workers=1) as sb:
        assert "NOT a security boundary" in sb.run("pass").isolation


def test_unknown_backend_lists_valid_names():
    with pytest.raises(ValueError, match="bwrap"):
        Sandbox("firecracker")


def test_sandbox_imports_no_heavy_packages():
    out = subprocess.run(
        [os.sys.executable, "-c", "import sys, sandbox, sandbox.pool; "
         "print([m for m in ('torch', 'pipeline', 'rewards') if m in sys.modules])"],
        capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


class _MuteBackend(ProcessBackend):
    """A unit that says ready and then never answers: the host must kill it at its deadline."""

    def argv(self, spec):
        hello = "import os, struct, time; b = b'{\"ready\": true}'; "
        hello += "os.write(1, struct.pack('>I', len(b)) + b); time.sleep(3600)"
        return [sys.executable, "-c", hello]


def test_unresponsive_unit_is_killed_at_host_deadline(monkeypatch):
    monkeypatch.setattr(pool_mod, "GRACE_S", 0.5)
    slot = pool_mod.Slot(_MuteBackend(), 256)
    slot.start()
    proc = slot.proc
    r = slot.run({"code": "print(1)", "timeout_s": 0.5})
    assert r.timed_out and r.exit_code == -9 and 900 <= r.duration_ms < 5000
    assert proc.poll() is not None and slot.proc is None


def test_forked_child_exit_does_not_close_parent_pool():
    require("bwrap")
    with Sandbox("bwrap", workers=1) as sb:
        pid = os.fork()
        if pid == 0:
            sb.close()  # what atexit would do in a child that exits normally
            os._exit(0)
        os.waitpid(pid, 0)
        assert sb.run("print('still here')").stdout == "still here\n"


def test_jobs_do_not_share_random_state(sb):
    draws = [sb.run("import random\nprint(random.random())").stdout for _ in range(3)]
    assert len(set(draws)) == 3


def test_job_gets_the_limits_it_asked_for(sb):
    code = ("import resource\nprint(resource.getrlimit(resource.RLIMIT_AS)[0] >> 20, "
            "resource.getrlimit(resource.RLIMIT_CPU)[0])")
    assert sb.run(code, memory_mb=300, timeout_s=7.5).stdout == "300 8\n"
    assert sb.run(code, memory_mb=200, timeout_s=2).stdout == "200 3\n"
