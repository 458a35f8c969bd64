"""Each bwrap/process slot has its own CPU weight and a 1-CPU quota, which no fork or `setsid`
of a job escapes (issue 29). The slowdown itself is measured by
benchmarks/bench_sandbox_fairness.py, not timed here."""

from __future__ import annotations

import os
import secrets
import signal
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


# The grandchild waits for the test's SIGUSR1 (20 s at most) and the job until the grandchild
# has ended (EOF on a pipe only it still holds), so the test looks at a live process however
# slowly it gets scheduled. Before, the job ended after 0.5 s wall time and the worker killed
# the grandchild: on a loaded machine the test's /proc scans missed it or saw it die between
# finding it and reading the cgroup's member list. SIGUSR1 is blocked before the exec (the
# mask survives it): a signal sent as soon as the token shows waits for sigtimedwait.
GRANDCHILD = "import signal\nprint('released' if signal.sigtimedwait({signal.SIGUSR1}, 20) else 'late')"


def test_a_setsid_grandchild_stays_in_the_slots_cpu_cgroup(sb):
    token = "mathrl-cpu-" + secrets.token_hex(6)
    code = ("import os, sys\nr, w = os.pipe()\nif os.fork() == 0:\n    os.setsid()\n"
            "    if os.fork() == 0:\n        os.set_inheritable(w, True)\n"
            "        import signal\n        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})\n"
            f"        os.execv(sys.executable, [sys.executable, '-c', {GRANDCHILD!r}, {token!r}])\n"
            "    os._exit(0)\nos.close(w)\nos.read(r, 1)\nprint('ok')")
    result = {}
    t = threading.Thread(target=lambda: result.update(r=sb.run(code, timeout_s=30)))
    t.start()
    deadline = time.monotonic() + 25
    found = []
    while not found and time.monotonic() < deadline:
        found = procs_with_token(token)
        time.sleep(0.02)
    assert len(found) == 1, found
    pidfd = os.pidfd_open(found[0])  # pins the process that has this pid now...
    try:
        with open(f"/proc/{found[0]}/cmdline", "rb") as f:
            assert token.encode() in f.read()  # ...which is still ours, so we signal only it
        members = set()
        for s in sb._slots:
            members |= {int(x) for x in open(os.path.join(cpu_dir(s), "cgroup.procs")).read().split()}
    finally:
        signal.pidfd_send_signal(pidfd, signal.SIGUSR1)
        os.close(pidfd)
        t.join()
    assert found[0] in members, (found, members)
    assert result["r"].stdout == "released\nok\n", result["r"].stderr
    assert procs_with_token(token) == []
