"""pipeline/orphans.py: a process pool's workers end by themselves when the process that started
them is killed, where a plain ProcessPoolExecutor's worker trains on unseen (the seed grid's and
the experiment's runs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers import process_running

KILLED_PARENT = """
import os, signal, sys, time
from concurrent.futures import ProcessPoolExecutor
import multiprocessing
from pipeline.orphans import process_pool

if __name__ == "__main__":
    plain = sys.argv[1] == "plain"
    pool = (ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) if plain
            else process_pool(1, initializer=os.getpid))
    pool.submit(time.sleep, 600)
    while not pool._processes:
        time.sleep(0.05)
    time.sleep(2.0)  # the worker is in its task
    with open(sys.argv[2], "w") as f:
        f.write(" ".join(map(str, pool._processes)))
    os.kill(os.getpid(), signal.{signal})
"""


def _orphan(kind: str, kill_with: str, tmp_path) -> int:
    """The pid of the pool worker of a parent killed with ``kill_with``. No pipes: an orphaned worker
    would hold them open and the run would wait for it."""
    pid_file = tmp_path / f"{kind}-{kill_with}"
    proc = subprocess.run([sys.executable, "-c", KILLED_PARENT.replace("{signal}", kill_with), kind, str(pid_file)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    assert proc.returncode < 0
    (worker,) = map(int, pid_file.read_text().split())
    return worker


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not process_running(pid):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("kill_with", ["SIGKILL", "SIGTERM"])
def test_a_pool_worker_ends_when_its_parent_is_killed(kill_with, tmp_path):
    assert _gone_within(_orphan("watched", kill_with, tmp_path), 10.0)


def test_a_plain_pool_worker_outlives_its_parent(tmp_path):
    """Why the watcher is needed: the same kill leaves a plain pool's worker in its task."""
    worker = _orphan("plain", "SIGKILL", tmp_path)
    try:
        assert not _gone_within(worker, 3.0)
    finally:
        os.kill(worker, signal.SIGKILL)
