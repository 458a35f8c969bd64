"""Fault injection for the tests that check recovery: every hook the production loops carry.

Each hook reads one environment variable and does nothing when it is unset, so a normal run
pays one ``os.environ`` lookup per call.

- ``MATHRL_CRASH_AFTER_STEP=N``: the trainer SIGKILLs itself right after step N (resume tests,
  and a rank dying under torchrun).
- ``MATHRL_CRASH_IN_BROADCAST=N``: the vLLM server client exits (status 17) before sending weight
  bucket N (the server must drop the broken group and keep serving).
- ``MATHRL_WORKER_FAULT=crash:N`` / ``hang:N``: the ``hf_process`` rollout worker exits (status 23)
  or stops answering when its N-th generate request arrives (the trainer must end with one line).
- ``MATHRL_SFT_HELPER_FAULT=raise:N``: every helper process of a data-parallel SFT
  (pipeline/sft_parallel.py) raises at its N-th step (the trainer must end with the helper's error).
"""

from __future__ import annotations

import os
import signal

CRASH_AFTER_STEP = "MATHRL_CRASH_AFTER_STEP"
CRASH_IN_BROADCAST = "MATHRL_CRASH_IN_BROADCAST"
WORKER_FAULT = "MATHRL_WORKER_FAULT"
SFT_HELPER_FAULT = "MATHRL_SFT_HELPER_FAULT"


def after_step(step: int) -> None:
    """Called by the trainer after each step (its checkpoint, if any, is written)."""
    if os.environ.get(CRASH_AFTER_STEP) == str(step):
        os.kill(os.getpid(), signal.SIGKILL)


def broadcast_hook():
    """``on_bucket`` for ``WeightGroup.send``, or None when no crash is asked for."""
    at = os.environ.get(CRASH_IN_BROADCAST)
    if at is None:
        return None

    def hook(bucket: int) -> None:
        if bucket == int(at):
            os._exit(17)
    return hook


def worker_request(n: int) -> None:
    """Called by the rollout worker process as its ``n``-th generate request (1-based) arrives."""
    kind, _, at = os.environ.get(WORKER_FAULT, "").partition(":")
    if at != str(n):
        return
    if kind == "crash":
        os._exit(23)
    if kind == "hang":
        import time
        while True:
            time.sleep(3600)


def sft_helper_step(n: int) -> None:
    """Called by a data-parallel SFT helper at its ``n``-th step (1-based)."""
    kind, _, at = os.environ.get(SFT_HELPER_FAULT, "").partition(":")
    if kind == "raise" and at == str(n):
        raise RuntimeError(f"injected fault at step {n} ({SFT_HELPER_FAULT})")
