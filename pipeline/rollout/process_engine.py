"""Rollout with Hugging Face ``generate`` in a worker process of its own (``rollout.engine=hf_process``).

Why a process: the pipelined trainer (``pipeline/grpo/pipelined.py``) updates the policy while the
next batch is generated. In one Python process the two would take turns on the interpreter and on
torch's thread pool; in two, each gets its own CPU threads and both really run at once. torch's
threads are split: the worker takes ``rollout.worker_threads`` (0 = half of the trainer's), the
trainer keeps the rest (at least one).

Protocol, the vLLM server's in miniature: one request queue, served in order, and one reply queue.
- ``("weights", version, bytes)``: a ``torch.save`` of the policy's state dict, loaded before the
  next request; ``version`` is the optimizer step the weights come from. The trainer pushes between
  batches: a push made while a batch is being generated waits behind it (no in-flight update).
- ``("generate", id, prompts, n, params)``: answered ``("done", id, version, samples, seconds)``
  with the version the samples were generated with, or ``("error", id, reason)``.
- ``("close",)``.
Because the queue is served in order, which weights generate which batch depends only on the order
of the trainer's calls, never on timing: a pipelined run is as reproducible as a synchronous one.

The worker exits by itself within seconds of the trainer's death (a SIGKILLed trainer cannot close it),
even mid-batch or inside a sandbox call: a watcher thread closes the sandbox pool (bounded) and ends the
process without the interpreter's exit, which would wait forever to flush replies nobody reads.
Failures end the run with one line (``EngineError``): a worker that exits, or gives no reply within
``rollout.worker_timeout_s`` (it is then killed), or raises (its exception's last line is passed on).
"""

from __future__ import annotations

import io
import os
import queue
import time

import torch
import torch.multiprocessing as mp

from pipeline import faults
from pipeline.orphans import exit_with_parent
from pipeline.rollout.base import EngineError, Pending, RolloutEngine, Sample, SamplingParams

NAME = "the hf_process rollout worker"
ORPHAN_CLOSE_S = 5.0  # what an orphaned worker gives its sandbox pool to close before it exits anyway


def state_bytes(model) -> bytes:
    """The model's weights as one ``torch.save`` blob (a snapshot: the trainer goes on updating)."""
    buf = io.BytesIO()
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, buf)
    return buf.getvalue()


class ProcessEngine(RolloutEngine):
    """The client side: submits requests, pushes weights, waits for replies with a deadline."""

    def __init__(self, model, tokenizer, *, batch_size: int = 64, threads: int = 0, timeout_s: float = 600.0,
                 autocast_dtype: str | None = None, version: int = 0, shared_prefill: bool = False,
                 decode: str = "generate", tools=None):
        total = torch.get_num_threads()
        mine = threads or max(1, total // 2)
        torch.set_num_threads(max(1, total - mine))  # the trainer's share
        self.batch_size, self.timeout_s, self.policy_version = batch_size, timeout_s, version
        ctx = mp.get_context("spawn")  # a fresh interpreter: no fork of the trainer's threads
        self._requests, self._replies = ctx.Queue(), ctx.Queue()
        # a dead worker never drains its pipe: exiting must not wait for queued weights to be written
        self._requests.cancel_join_thread()
        spec = {"config": model.config, "tokenizer": tokenizer, "weights": state_bytes(model), "version": version,
                "batch_size": batch_size, "threads": mine, "device": str(next(model.parameters()).device),
                "autocast": autocast_dtype, "parent": os.getpid(),
                "engine": {"shared_prefill": shared_prefill, "decode": decode, "tools": tools}}
        self._proc = ctx.Process(target=worker_main, args=(spec, self._requests, self._replies), daemon=True,
                                 name="mathrl-rollout-worker")
        self._proc.start()
        self._next_id = 0
        self._arrived: dict[int, tuple] = {}  # replies read while waiting for an earlier request

    def submit(self, prompts: list[str], n: int, params: SamplingParams) -> Pending:
        self._next_id += 1
        rid = self._next_id
        self._requests.put(("generate", rid, prompts, n, params))
        return Pending(wait=lambda timeout: self._wait(rid, timeout))

    def generate(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Sample]]:
        return self.submit(prompts, n, params).result(self.timeout_s)

    def push(self, model, version: int) -> None:
        self._requests.put(("weights", version, state_bytes(model)))
        self.policy_version = version

    def sync_weights(self, model) -> None:
        self.push(model, self.policy_version)

    def close(self) -> None:
        if self._proc.is_alive():
            self._requests.put(("close",))
            self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)

    def _wait(self, rid: int, timeout: float | None) -> tuple[list[list[Sample]], int]:
        limit = self.timeout_s if timeout is None else timeout
        deadline = time.monotonic() + limit
        while rid not in self._arrived:
            if not self._proc.is_alive():
                self._drain()
                if rid in self._arrived:
                    break
                raise EngineError(f"{NAME} (pid {self._proc.pid}) exited with code {self._proc.exitcode} before "
                                  f"answering request {rid}; its stderr is above")
            left = deadline - time.monotonic()
            if left <= 0:
                self._proc.kill()
                raise EngineError(f"{NAME} (pid {self._proc.pid}) gave no batch within rollout.worker_timeout_s="
                                  f"{limit:g} s, so it was stopped; raise the timeout if generation is that slow")
            try:
                reply = self._replies.get(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            self._arrived[reply[1]] = reply
        reply = self._arrived.pop(rid)
        if reply[0] == "error":
            raise EngineError(f"{NAME} failed on request {rid}: {reply[2]}")
        return reply[3], reply[2], reply[4]

    def _drain(self) -> None:
        while True:
            try:
                reply = self._replies.get(timeout=0.1)
            except queue.Empty:
                return
            self._arrived[reply[1]] = reply


def worker_main(spec: dict, requests, replies) -> None:
    """The worker process: load the model once, then serve requests in order until ``close``."""
    from transformers import AutoModelForCausalLM

    from pipeline.rollout.hf_engine import HFEngine

    torch.set_num_threads(spec["threads"])
    model = AutoModelForCausalLM.from_config(spec["config"]).to(spec["device"])
    model.load_state_dict(torch.load(io.BytesIO(spec["weights"]), weights_only=True))
    model.eval()
    engine = HFEngine(model, spec["tokenizer"], batch_size=spec["batch_size"], **spec["engine"])
    exit_with_parent(spec["parent"], engine.close, ORPHAN_CLOSE_S)  # the trainer was killed: nobody will ask
    try:
        _serve(engine, model, spec, requests, replies)
    finally:
        engine.close()  # the sandbox pool of rollout.tools, if it started one


def _serve(engine, model, spec: dict, requests, replies) -> None:
    version, served = spec["version"], 0
    dtype = spec["autocast"]
    device_type = torch.device(spec["device"]).type
    while True:
        try:
            msg = requests.get(timeout=1.0)
        except queue.Empty:
            continue
        if msg[0] == "close":
            return
        if msg[0] == "weights":
            model.load_state_dict(torch.load(io.BytesIO(msg[2]), weights_only=True))
            version = msg[1]
            continue
        _, rid, prompts, n, params = msg
        served += 1
        faults.worker_request(served)
        try:
            t0 = time.perf_counter()
            with torch.autocast(device_type, dtype=getattr(torch, dtype)) if dtype else torch.no_grad():
                samples = engine.generate(prompts, n, params)
            replies.put(("done", rid, version, samples, time.perf_counter() - t0))
        except Exception as e:  # the trainer ends the run with this line
            replies.put(("error", rid, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"))
