"""The process backend's per-slot uid mode (root + an interpreter other uids can read).

On our dev machine the venv's Python lives under /root (0700), so the process backend runs
jobs as root there; this module points the sandbox at a system Python under /usr instead to
exercise the uid drop: process cap, 0600 host files and job cleanup by uid.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from sandbox import Sandbox, backends
from tests.sandbox_helpers import FORK_2000, daemon_code, procs_of_uids, procs_with_token, slot_uids

SYSTEM_PYTHON = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3")
                      if os.path.exists(p) and backends._world_reachable(p)), None)


@pytest.fixture(scope="module")
def sb():
    if os.geteuid() != 0 or SYSTEM_PYTHON is None:
        pytest.skip("needs root and a Python install other uids can read")
    mp = pytest.MonkeyPatch()
    mp.setenv(backends.PYTHON_ENV, SYSTEM_PYTHON)
    python, prefix = backends._interpreter()
    mp.setattr(backends, "BASE_PYTHON", python)
    mp.setattr(backends, "BASE_PREFIX", prefix)
    pool = Sandbox("process", workers=1)
    yield pool
    pool.close()
    mp.undo()


def test_jobs_run_under_the_slot_uid(sb):
    r = sb.run("import os\nprint(os.getuid())")
    assert backends.BACKENDS["process"].drops_uid
    assert r.stdout == f"{slot_uids(sb)[0]}\n" and "own unprivileged uid" in r.isolation


def test_process_count_is_capped_by_uid(sb):
    r = sb.run(FORK_2000, timeout_s=10)
    assert int(r.stdout) < 200
    assert procs_of_uids(slot_uids(sb)) == []


def test_0600_root_file_is_unreadable(sb):
    d = Path(tempfile.mkdtemp(prefix="mathrl-attack-", dir="/tmp"))
    try:
        os.chmod(d, 0o755)
        token = secrets.token_hex(16)
        (d / "secret").write_text(token)
        os.chmod(d / "secret", 0o600)
        r = sb.run(f"print(open({str(d / 'secret')!r}).read())")
        assert token not in r.stdout and "PermissionError" in r.stderr
    finally:
        shutil.rmtree(d)


def test_daemon_is_killed_by_uid(sb):
    token = "mathrl-uid-daemon-" + secrets.token_hex(8)
    assert sb.run(daemon_code(token)).stdout == "spawned\n"
    time.sleep(0.3)
    assert procs_with_token(token) == []
