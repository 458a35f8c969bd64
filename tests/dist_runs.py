"""Helpers shared by the multi-process tests (torchrun, bare ranks, a vLLM server): launching,
free ports, and comparing an N-rank run with a 1-process run (metrics, completions, weights)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pipeline.grpo.run_log import read_metrics
from pipeline.models import load_policy

ROOT = Path(__file__).resolve().parents[1]
NOT_COMPARED = ("time/", "tokens_per_s")  # wall-clock numbers differ between any two runs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env(**extra) -> dict:
    """The test process's environment for a child rank: one thread each, this checkout importable."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), **extra}


def torchrun(args: list[str], nproc: int = 2, timeout: float = 400) -> str:
    """`torchrun --standalone -m pipeline train ARGS` on ``nproc`` ranks; its stdout, after
    checking that every rank exited 0 (the final barrier included)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "-m", "pipeline", "train", *args]
    proc = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def flat_weights(path) -> torch.Tensor:
    model, _ = load_policy(str(path))
    return torch.cat([p.flatten() for p in model.state_dict().values()])


def assert_same_weights(got_dir, want_dir, base=None) -> None:
    """Two runs' weights equal within float tolerance; with ``base``, ``want_dir``'s also moved
    away from it (so the comparison is not between two untrained copies)."""
    want = flat_weights(want_dir)
    if base is not None:
        assert not torch.allclose(flat_weights(base), want)
    torch.testing.assert_close(flat_weights(got_dir), want, rtol=1e-4, atol=1e-5)


def start_bare_ranks(args: list[str], rank1_env: dict | None = None) -> list[subprocess.Popen]:
    """`python -m pipeline train ARGS` as ranks 0 and 1 of a 2-rank world without torchrun's agent
    (nothing restarts or stops them for us); ``rank1_env`` goes to rank 1 only. Output is piped."""
    port = str(free_port())
    return [subprocess.Popen([sys.executable, "-m", "pipeline", "train", *args], cwd=ROOT,
                             env=env(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, WORLD_SIZE="2", RANK=str(rank),
                                     LOCAL_RANK=str(rank), **((rank1_env or {}) if rank == 1 else {})),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for rank in (0, 1)]


def completions(run_dir: Path, step: int | None = None) -> list[tuple]:
    """(step, problem id, sample index, completion) of the logged samples, in logged order."""
    rows = [json.loads(line) for line in (Path(run_dir) / "samples.jsonl").read_text().splitlines()]
    return [(r["step"], r["problem_id"], r["sample"], r["completion"]) for r in rows
            if step is None or r["step"] == step]


def assert_rows_close(got: dict, want: dict, skip: tuple[str, ...] = NOT_COMPARED) -> None:
    """Every metric of ``want`` (but those starting with ``skip``) equal in ``got``, floats within rel 1e-4."""
    keys = [k for k in want if not k.startswith(skip)]
    assert set(keys) <= set(got)
    for k in keys:
        if isinstance(want[k], float):
            assert got[k] == pytest.approx(want[k], rel=1e-4, abs=1e-6), k
        else:
            assert got[k] == want[k], k


def assert_killed_rank_ends_the_job(args: list[str], run_dir: Path, crash_env: str) -> None:
    """Bare ranks (no torchrun agent to clean up): rank 1 is SIGKILLed after step 1 (``crash_env``);
    rank 0 must stop by itself with exit code 1 and say what happened, well before the
    collective timeout (the args set train.dist_timeout_s=300)."""
    procs = start_bare_ranks(args, {crash_env: "1"})
    try:
        out1, _ = procs[1].communicate(timeout=280)
        killed_at = time.monotonic()
        out0, _ = procs[0].communicate(timeout=120)
        waited = time.monotonic() - killed_at
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert procs[1].returncode == -9, out1[-2000:]
    assert procs[0].returncode == 1, out0[-3000:]
    assert "Another rank probably died" in out0 and "train.resume=auto" in out0
    assert waited < 120  # far below train.dist_timeout_s=300: a dead peer is noticed, not waited out
    assert [r["step"] for r in read_metrics(run_dir)] == [1]
