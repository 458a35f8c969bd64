"""`mathrl vllm-serve`: a separate process that samples rollouts for `rollout.engine=vllm_server`.

Runs one vLLM engine (``VLLMEngine``, in-process, tensor parallel 1) for the run config's model
(``model.name_or_path``, ``model.dtype``, ``seed``, the ``rollout.vllm_*`` keys) behind a JSON
API on ``rollout.server_host:server_port`` (FastAPI on uvicorn, see server_http.py). Every
route but ``GET /health`` asks for the shared token (server_auth.py); request bodies are parsed
and bounded by server_limits.py:

    GET  /health               {"status": "ok"}: nothing else, no token needed
    GET  /info                 model, dtype, device, device_id (GPU UUID or "cpu"), weights_hash
                               (names + shapes), weight group, counters, limits, tools (its
                               ToolSettings, or null)
    GET  /weights              [[name, shape], ...] the trainer must send (Hugging Face names)
    POST /generate             {"prompts": [str], "n": int, "params": SamplingParams fields, "tools": bool}
                               -> {"samples": [[Sample fields]]} exactly as VLLMEngine returns them;
                               "tools": true (refused by a server without rollout.tools) runs the
                               multi-turn rollout, the policy's code in this machine's sandbox
    POST /init_weight_group    {"backend": "gloo"|"nccl", "timeout_s"} -> {"generation"}; the trainer
                               then joins through /group_store (see pipeline/weights/group_store.py)
    POST /group_store          {"generation", "op", ...}: the forming group's rendezvous store
    POST /update_weights       {"generation", "update", "specs": [[name, dtype, shape]], "bucket_bytes"}
                               -> checks the specs, starts receiving; the bytes follow over the group
    POST /update_weights_done  {"update"} -> once the weights are loaded into vLLM (or the error)
    POST /close_weight_group   {"generation"}

Threads: the event loop serves HTTP; the engine thread runs every engine call (a batch of
concurrent /generate requests, server_batch.py, or a weight load), so generation never overlaps
a load; the weight thread receives weights; each group forms on a thread of its own. Received
weights are staged on the CPU while generation goes on, then loaded through
``VLLMEngine.sync_weights`` (the same worker functions as the colocated engine; it also resets
the prefix cache). An announced update that has not arrived within ``rollout.server_timeout_s``
(the server's own, whatever the client asks) expires: the group is dropped, the previous
weights stay. A broadcast that fails (the trainer died) does the same; the server keeps
serving, and a restarted trainer (`train.resume=auto`) joins a new group (if the old trainer hung
mid-update, the new one's first update waits for that one to expire: a gloo receive cannot be
interrupted). Update ids only grow
within a group (a replayed or overlapping announcement is refused), and only the group's own
generation can close it. SIGTERM / SIGINT stop the server cleanly (a second signal exits at once).

Tools (``rollout.tools: [python]`` in the server's config): the server runs the multi-turn rollout
itself (VLLMEngine.tool_generate: one vLLM call per turn, the code blocks of a turn concurrently in
its own sandbox pool, with its config's rollout.tool* limits, which /info reports and the trainer
checks against its own). A request with tools runs alone on the engine thread, not batched with
others; its sandbox waits hold the engine meanwhile.

Deviations: one engine, tensor parallel 1 (the receiving end of the group is this process,
not vLLM's workers); prompts are strings tokenised as VLLMEngine does.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict

import torch.distributed as dist

from pipeline.config import RunConfig
from pipeline.device import device_identity
from pipeline.rollout.server_batch import Batcher
from pipeline.rollout.server_http import Route, build_app, make_server
from pipeline.rollout.server_limits import RequestError, ServerLimits, parse_generate, parse_update, require_int
from pipeline.weights.broadcast import BroadcastError, StateView, WeightGroup, weights_hash
from pipeline.weights.export import expected_weights
from pipeline.weights.group_store import serve_store_op

__all__ = ["WeightServer", "build_server", "listen", "log"]

MAX_FORMING = 2  # weight groups waiting for their trainer at once


def log(msg: str) -> None:
    print(f"mathrl vllm-serve: {msg}", flush=True)


class WeightServer:
    """The engine, the weight group, and the threads that keep them apart."""

    def __init__(self, cfg: RunConfig, engine, token: str | None, weights=None, limits: ServerLimits | None = None):
        self.cfg, self.engine, self.token = cfg, engine, token
        self.limits = limits or ServerLimits.from_config(cfg.rollout)
        self.weights = weights if weights is not None else expected_weights(cfg.model.name_or_path)
        self.hash = weights_hash(self.weights)
        runner = getattr(engine, "tools", None)  # rollout.tools: the engine's sandbox runner
        self.tools = None if runner is None else asdict(runner.settings)
        self.engine_thread = ThreadPoolExecutor(1, thread_name_prefix="vllm-engine")
        self.weight_thread = ThreadPoolExecutor(1, thread_name_prefix="weight-group")
        self.batcher = Batcher(self._generate_batch, self.limits.batch_window_s, self.engine_thread)
        self.lock = threading.Lock()  # guards the group state below across the loop and the threads
        self.generation = 0  # the last one handed out
        self.forming: dict[int, tuple[dist.Store, Future]] = {}  # generation -> (store, join) of a forming group
        self.group: WeightGroup | None = None
        self.group_generation = 0
        self.last_update = -1  # update ids only grow within a group
        # (generation, update id, its receive, (specs, bucket bytes) as announced)
        self.pending: tuple[int, int, Future, tuple] | None = None
        self.updates = 0

    def routes(self) -> list[Route]:
        return [Route("GET", "/health", self.health, public=True), Route("GET", "/info", self.info),
                Route("GET", "/weights", self.weight_list), Route("POST", "/generate", self.generate),
                Route("POST", "/init_weight_group", self.init_group), Route("POST", "/group_store", self.group_store),
                Route("POST", "/update_weights", self.update), Route("POST", "/update_weights_done", self.update_done),
                Route("POST", "/close_weight_group", self.close_group)]

    # -- endpoints (coroutines on the event loop; never block it) ---------------------------
    async def health(self, _body) -> dict:
        return {"status": "ok"}

    async def info(self, _body) -> dict:
        return {"status": "ok", "model": self.cfg.model.name_or_path, "dtype": self.cfg.model.dtype,
                "device": "cuda" if self.engine.on_gpu else "cpu", "weights_hash": self.hash,
                "device_id": device_identity("cuda" if self.engine.on_gpu else "cpu"),  # the client's NCCL/gloo choice
                "num_weights": len(self.weights), "weight_group": self.group is not None,
                "generation": self.group_generation, "updates": self.updates,
                "engine_calls": self.batcher.calls, "generate_requests": self.batcher.requests,
                "limits": self.limits.as_json(), "tools": self.tools}

    async def weight_list(self, _body) -> dict:
        return {"weights": [[n, list(s)] for n, s in self.weights]}

    async def generate(self, body: dict) -> dict:
        request = parse_generate(body, self.limits)
        if request[3] and self.tools is None:
            raise RequestError("this server runs no tools: start `mathrl vllm-serve` with rollout.tools=[python] "
                               "(the trainer's config)", 409)
        groups = await self.batcher.submit(request)
        return {"samples": [[asdict(s) for s in g] for g in groups]}

    async def init_group(self, body: dict) -> dict:
        backend, timeout_s = body.get("backend", "gloo"), body.get("timeout_s", self.limits.update_timeout_s)
        if set(body) - {"backend", "timeout_s"} or backend not in ("gloo", "nccl"):
            raise RequestError(f"/init_weight_group takes backend (gloo or nccl) and timeout_s, got {sorted(body)}")
        if backend == "nccl" and not self.engine.on_gpu:
            raise RequestError("this server runs on CPU: use rollout.server_weight_backend=gloo")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise RequestError(f"timeout_s must be a positive number, got {timeout_s!r}")
        timeout_s = min(float(timeout_s), self.limits.update_timeout_s)  # the server's cap, not the client's
        with self.lock:
            if len(self.forming) >= MAX_FORMING:
                raise RequestError(f"{MAX_FORMING} weight groups are already waiting for their trainer", 409)
            self.generation += 1
            generation = self.generation
            self.forming[generation] = (dist.HashStore(), Future())
        threading.Thread(target=self._join, args=(generation, backend, timeout_s), daemon=True,
                         name=f"weight-join-{generation}").start()
        return {"generation": generation}

    async def group_store(self, body: dict) -> dict:
        generation = require_int(body.get("generation"), "generation", 1, 2**62)
        forming = self.forming.get(generation)
        if forming is None:
            raise RequestError(f"weight group {generation} is not forming", 409)
        try:
            return serve_store_op(forming[0], {k: v for k, v in body.items() if k != "generation"})
        except (ValueError, RuntimeError) as e:
            raise RequestError(f"group store: {e}") from None

    async def update(self, body: dict) -> dict:
        update, generation, specs, bucket, total = parse_update(body, self.weights, self.cfg.model.dtype, self.limits)
        await self._formed(generation)
        stale = self.pending
        if stale is not None and stale[0] != generation and not stale[2].done():
            # a previous trainer's update (it hung mid-broadcast): its receive cannot be interrupted,
            # it ends at its deadline; then this trainer's update starts
            await asyncio.wait([asyncio.wrap_future(stale[2])])
        with self.lock:
            if self.group is None or generation != self.group_generation:
                raise RequestError(f"weight group {generation} is gone (current: {self.group_generation or 'none'}); "
                                   "the client must call /init_weight_group again", 409)
            pending = self.pending
            if (pending is not None and pending[:2] == (generation, update) and pending[3] == (specs, bucket)
                    and not pending[2].done()):
                # the same announcement again while its receive waits for the bytes: the trainer's retry
                # after a dropped connection lost the first reply (strangers crowding the port). Answer
                # as the first time; nothing new is started, and a completed update is still a replay.
                return {"ok": True, "bytes": total}
            if update <= self.last_update:
                raise RequestError(f"update {update} is not newer than update {self.last_update} of this group "
                                   "(replayed?)", 409)
            if pending is not None and not pending[2].done():
                raise RequestError(f"update {pending[1]} is still in progress", 409)
            self.last_update = update
            deadline = time.monotonic() + self.limits.update_timeout_s  # the announcement expires
            self.pending = (generation, update,
                            self.weight_thread.submit(self._receive, generation, specs, bucket, deadline),
                            (specs, bucket))
        return {"ok": True, "bytes": total}

    async def update_done(self, body: dict) -> dict:
        update = require_int(body.get("update"), "update", 0, 2**62)
        pending = self.pending
        if pending is None or pending[1] != update:
            raise RequestError(f"no weight update {update} in progress")
        seconds = await asyncio.wrap_future(pending[2])  # raises the receive/load error, reported as HTTP 500
        return {"ok": True, "seconds": seconds}

    async def close_group(self, body: dict) -> dict:
        generation = require_int(body.get("generation"), "generation", 1, 2**62)
        await self._formed(generation)
        if self.group is None or generation != self.group_generation:
            raise RequestError(f"weight group {generation} is not the current one", 409)
        self.weight_thread.submit(self._drop, generation, "closed by the trainer")
        return {"ok": True}

    async def _formed(self, generation: int) -> None:
        """Wait for the server's side of a forming group: the trainer's side may finish first."""
        forming = self.forming.get(generation)
        if forming is not None:
            await asyncio.wrap_future(forming[1])

    # -- threads -----------------------------------------------------------------------------
    def _generate_batch(self, requests: list[tuple]) -> list:
        """The requests without tools in one batched call; each one with tools alone (its own
        multi-turn rollout, whose turns wait on the sandbox)."""
        plain = [r[:3] for r in requests if not r[3]]
        many = getattr(self.engine, "generate_many", None)
        done = iter((many(plain) if many else [self.engine.generate(*r) for r in plain]) if plain else [])
        return [self.engine.tool_generate(*r[:3]) if r[3] else next(done) for r in requests]

    def _join(self, generation: int, backend: str, timeout_s: float) -> None:
        secret = (self.token or "").encode()
        store, done = self.forming[generation]
        try:
            group = WeightGroup.join(store, 1, backend, timeout_s, generation=generation,
                                     secret=secret, host=self.cfg.rollout.server_host)
        except Exception as e:  # BroadcastError, or anything else: the forming slot must be freed
            log(f"weight group {generation}: {e}; waiting for a trainer to connect again")
            group = None
        with self.lock:
            self.forming.pop(generation, None)
            current = group is not None and generation == self.generation  # no newer trainer asked meanwhile
            if current:
                old, self.group, self.group_generation, self.last_update = self.group, group, generation, -1
        done.set_result(current)
        if group is None:
            return
        if not current:
            group.close()
            return
        log(f"weight group {generation} ({backend}) formed with the trainer")
        if old is not None:
            self.weight_thread.submit(old.close)

    def _receive(self, generation: int, specs, bucket: int, deadline: float) -> float:
        start = time.perf_counter()
        group = self.group
        if group is None or generation != self.group_generation:
            raise RuntimeError(f"weight group {generation} is not formed (did the trainer join it?)")
        try:
            named = group.receive(specs, bucket, out_device="cpu", deadline=deadline)
        except BroadcastError as e:
            if time.monotonic() >= deadline - 0.5:
                e = BroadcastError(f"the announced update expired: not received within the server's "
                                   f"rollout.server_timeout_s={self.limits.update_timeout_s:g} ({e})")
            else:
                e = BroadcastError(f"weight update failed ({e})")
            self._drop(generation, f"{e}; kept the previous weights")
            raise e from None
        self.engine_thread.submit(self.engine.sync_weights, StateView(dict(named))).result()
        self.updates += 1
        return time.perf_counter() - start

    def _drop(self, generation: int, why: str) -> None:
        with self.lock:
            group = self.group if generation == self.group_generation else None
            if group is not None:
                self.group = None
        if group is not None:
            group.close()
            log(f"dropped the weight group: {why}; still serving")

    def close(self) -> None:
        self.engine_thread.shutdown(wait=True, cancel_futures=True)
        self._drop(self.group_generation, "shutting down")
        self.weight_thread.shutdown(wait=False, cancel_futures=True)


def build_server(cfg: RunConfig, engine, token: str | None, weights=None, limits: ServerLimits | None = None):
    """(WeightServer, uvicorn server) for ``engine``; ``uvicorn_server.run(sockets=[sock])`` serves."""
    server = WeightServer(cfg, engine, token, weights=weights, limits=limits)
    return server, make_server(build_app(server.routes(), token, server.limits, log), server.limits)


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (bound before the slow engine start: a busy port fails at once)."""
    family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                      flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(addr)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock
