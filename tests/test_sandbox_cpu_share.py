"""Each bwrap/process slot has its own CPU weight and a 1-CPU quota, which no fork or `setsid`
of a job escapes (issue 29). The slowdown itself is measured by
benchmarks/bench_sandbox_fairness.py, not timed here."""

from __future__ import annotations

import os
import secrets
import threading
import time

import pytest

from sandbox.cgroups import CPU_PERIOD_US
from tests.sandbox_helpers import open_pool, procs_with_token


@pytest.fixture(scope="module", params=["bwrap", "process"])
def sb(request):
    pool = open_pool(request.param, workers=2)
    pool.warm()
    cg = pool._slots[0].cg
    if cg is None or not cg.cpus:
        pool.close()
        pytest.skip(f"{request.param}: no cpu controller for the slot cgroup here")
    yield pool
    pool.close()


def cpu_dir(slot) -> str:
    return slot.cg.dirs[-1]


def test_each_slot_has_its_own_cpu_quota_of_one_cpu(sb):
    dirs = {cpu_dir(s) for s in sb._slots}
    assert len(dirs) == len(sb._slots)
    for d in dirs:
        if sb._slots[0].cg.version == 1:
            quota = int(open(os.path.join(d, "cpu.cfs_quota_us")).read())
            period = int(open(os.path.join(d, "cpu.cfs_period_us")).read())
        else:
            quota, period = (int(x) for x in open(os.path.join(d, "cpu.max")).read().split())
        assert (quota, period) == (CPU_PERIOD_US, CPU_PERIOD_US)
    assert "1 CPU quota per slot" in sb._slots[0].isolation


def test_a_setsid_grandchild_stays_in_the_slots_cpu_cgroup(sb):
    token = "mathrl-cpu-" + secrets.token_hex(6)
    code = ("import os, sys\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            f"        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(2)', {token!r}])\n"
            "    os._exit(0)\nimport time\ntime.sleep(0.5)\nprint('ok')")
    result = {}
    t = threading.Thread(target=lambda: result.update(r=sb.run(code, timeout_s=5)))
    t.start()
    deadline = time.monotonic() + 5
    found = []
    while not found and time.monotonic() < deadline:
        found = procs_with_token(token)
        time.sleep(0.02)
    members = set()
    for s in sb._slots:
        members |= {int(x) for x in open(os.path.join(cpu_dir(s), "cgroup.procs")).read().split()}
    t.join()
    assert found and set(found) <= members, (found, members)
    assert result["r"].stdout == "ok\n" and procs_with_token(token) == []
