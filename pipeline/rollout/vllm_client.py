"""The trainer's side of server mode (`rollout.engine=vllm_server`): rollouts from `mathrl vllm-serve`.

``VLLMServerEngine`` implements the ``RolloutEngine`` protocol over HTTP (stdlib ``urllib``, so the
trainer needs nothing beyond its own environment; no vllm). Every rank sends its own prompts to
the server (``POST /generate``); the samples come back exactly as ``VLLMEngine`` builds them
(completion ids, text, finish reason, per-token log-probs; with ``rollout.tools`` the server runs
the multi-turn rollout and the tool, and its tool settings must be the trainer's: checked at
connect). After each optimizer step every rank
calls ``sync_weights(model)``: rank 0 streams the full weights in Hugging Face names (merged LoRA
included, ``hf_weights``; each tensor made, gathered under FSDP and cast when its bucket fills)
through a two-member process group with the server (``pipeline.weights.broadcast``), then all
ranks wait at a barrier, so no rank samples from stale weights.

Channel choice (``rollout.server_weight_backend=auto``): NCCL when the policy's parameters are
on a GPU and the server runs on a different physical GPU (``/info`` reports its GPU's UUID,
``device_id``); gloo otherwise, including two processes on the same GPU, which NCCL refuses
("Duplicate GPU detected"). The choice follows the model's device, not that of the tensors being
sent (under FSDP a gather may land anywhere).

Every request carries the shared token (``Authorization: Bearer``; server_auth.py: the
environment variable ``MATHRL_SERVER_TOKEN`` or ``rollout.server_token_file``). Prompt lists
longer than the server's ``rollout.server_max_prompts`` are sent in several requests.

Weight update protocol (rank 0): ``POST /init_weight_group`` once (the server answers with a
group generation number; both sides join, the trainer reaching the server's rendezvous store
through ``POST /group_store``, and the trainer proves the token to the server over the group),
then per sync ``POST /update_weights`` with the specs (name, dtype, shape; the server checks them
against its model), the bytes over the group, and ``POST /update_weights_done``, which returns
once vLLM has loaded them (or with the server's error).

Failures end the run with one line naming the server, never a hang: a server that is not
running, or no longer running, fails the request at once (connection refused); one that hangs
fails the next request or broadcast within ``rollout.server_timeout_s``. Connection-level
failures of a server that is there (503 when its connection pools are full, a connection it
closed or reset) are retried with backoff until that
budget (``CONNECT_TIMEOUT_S`` for the first contact) is spent: strangers holding connections
slow a request down, they do not end the run. ``ServerLost`` is a
``distributed.PeerLost``, which the trainer's ``main`` prints before exiting 1.
"""

from __future__ import annotations

import http.client
import itertools
import json
import random
import time
import urllib.error
import urllib.request
from dataclasses import asdict

import torch

from pipeline import faults
from pipeline.config import RunConfig
from pipeline.device import device_identity
from pipeline.parallel import distributed
from pipeline.rollout.base import RolloutEngine, Sample, SamplingParams
from pipeline.rollout.factory import tool_settings
from pipeline.rollout.server_auth import HOW, TokenError, bearer, server_token
from pipeline.weights.broadcast import (BUCKET_BYTES, BroadcastError, Spec, WeightGroup, dtype_name, local_address,
                                        weights_hash)
from pipeline.weights.export import hf_specs, hf_weights
from pipeline.weights.group_store import RemoteStore

__all__ = ["VLLMServerEngine", "ServerLost", "ServerError", "CONNECT_TIMEOUT_S"]

# ToolSettings fields that change what a completion gets back from its tool -> their config keys (the
# sandbox pool's size and backend are the server machine's own business)
TOOL_KEYS = {"max_calls": "max_tool_calls", "output_chars": "tool_output_chars", "timeout_s": "tool_timeout_s"}
CONNECT_TIMEOUT_S = 10.0  # first contact: a server that is not there fails this fast
RETRY_FIRST_S, RETRY_MAX_S = 0.05, 1.0  # backoff between retries of a connection-level failure
# Failures where the server (or a stranger crowding it) dropped the connection before answering:
_RETRIED = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError, http.client.RemoteDisconnected)


class ServerLost(distributed.PeerLost):
    """The vLLM server is unreachable, died, or stopped answering."""


class ServerError(distributed.PeerLost):
    """The vLLM server answered but refused (wrong model, bad request, failed weight load)."""


class VLLMServerEngine(RolloutEngine):
    def __init__(self, cfg: RunConfig, model):
        r = cfg.rollout
        self.url = f"http://{r.server_host}:{r.server_port}"
        self.host, self.timeout_s = r.server_host, r.server_timeout_s
        self.backend_choice = r.server_weight_backend
        try:
            self.token = server_token(r)
        except TokenError as e:
            raise ServerError(f"vLLM server {self.url}: {e}") from None
        self.group: WeightGroup | None = None
        self.generation = None
        self._updates = itertools.count()
        self.last_sync_s = 0.0
        self._call("GET", "/health", timeout=CONNECT_TIMEOUT_S, first=True)
        self.health = self._call("GET", "/info", timeout=CONNECT_TIMEOUT_S)
        self.max_prompts = int(self.health.get("limits", {}).get("max_prompts", 1 << 30))
        self._check_architecture(model)
        self.tools = tool_settings(cfg)
        self._check_tools()

    # -- HTTP ------------------------------------------------------------------------------
    def _call(self, method: str, path: str, body: dict | None = None, timeout: float | None = None,
              first: bool = False) -> dict:
        """One request, retried with backoff while it fails at the connection level (see the module
        docstring) and ``timeout`` (default ``rollout.server_timeout_s``) is not spent."""
        budget = timeout or self.timeout_s
        deadline, pause = time.monotonic() + budget, RETRY_FIRST_S
        while True:
            try:
                return self._call_once(method, path, body, min(budget, max(0.1, deadline - time.monotonic())), first)
            except _Retry as e:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise e.final from e.__cause__
            time.sleep(min(left, pause * random.uniform(0.5, 1.0)))
            pause = min(2 * pause, RETRY_MAX_S)

    def _call_once(self, method: str, path: str, body: dict | None, timeout: float, first: bool) -> dict:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", **bearer(self.token)})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            try:
                detail = json.loads(e.read()).get("error", "")
            except Exception:
                detail = ""
            if e.code == 401:
                detail = (f"{detail}. {'This trainer sent no token' if self.token is None else 'The token differs'}: "
                          f"{HOW}")
            error = ServerError(f"vLLM server {self.url} refused {method} {path}: {detail or e}")
            if e.code == 503:  # its connection pools are full (strangers, or many ranks at once)
                raise _Retry(error) from e
            raise error from e
        except (OSError, ValueError) as e:  # refused, reset, timed out, truncated reply
            reason = getattr(e, "reason", e)
            if first:
                lost = ServerLost(f"no vLLM server at {self.url} ({reason}); start it with `mathrl vllm-serve "
                                  "--config <the same config>` (or wait until it logs 'serving'), and check "
                                  "rollout.server_host / rollout.server_port")
            else:
                lost = ServerLost(f"vLLM server {self.url}: {method} {path} failed ({type(reason).__name__}: "
                                  f"{reason}); the server died or stopped answering within rollout.server_timeout_s="
                                  f"{self.timeout_s:g} (its log says why). Restart it and rerun with "
                                  "train.resume=auto")
            # refused means nothing listens (a full server still queues connections in its backlog):
            # fail at once, first contact or later; a reset or a dropped reply is a server that is there
            if isinstance(reason, _RETRIED):
                raise _Retry(lost) from e
            raise lost from e

    def _check_architecture(self, model) -> None:
        mine = [(n, shape) for n, _, shape in hf_specs(model)]  # no tensor made, gathered or merged
        if weights_hash(mine) == self.health.get("weights_hash"):
            return
        theirs = {n: tuple(s) for n, s in self._call("GET", "/weights")["weights"]}
        ours = dict(mine)
        diff = sorted(set(ours) ^ set(theirs)) or [n for n in ours if ours[n] != theirs[n]]
        name = diff[0] if diff else "?"
        raise ServerError(f"vLLM server {self.url} serves {self.health.get('model')!r}, whose weights differ from "
                          f"the trainer's model ({len(theirs)} vs {len(ours)} tensors; first difference: {name} "
                          f"{theirs.get(name)} vs {ours.get(name)}); start the server with the trainer's "
                          "model.name_or_path (`mathrl vllm-serve --config <the same config>`)")

    def _check_tools(self) -> None:
        """With rollout.tools the server runs the tool: its settings must be the trainer's."""
        if self.tools is None:
            return
        theirs, mine = self.health.get("tools"), asdict(self.tools)
        if theirs is None:
            raise ServerError(f"vLLM server {self.url} runs no tools, and this run has rollout.tools=[python]: "
                              "start the server with the trainer's config (`mathrl vllm-serve --config <the same "
                              "config>`)")
        diff = [k for k in TOOL_KEYS if theirs.get(k) != mine[k]]
        if diff:
            show = ", ".join(f"rollout.{TOOL_KEYS[k]}={theirs.get(k)} (this run: {mine[k]})" for k in diff)
            raise ServerError(f"vLLM server {self.url} runs the tool with {show}; start the server with the "
                              "trainer's rollout.tool* settings (`mathrl vllm-serve --config <the same config>`)")

    # -- RolloutEngine ---------------------------------------------------------------------
    def generate(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Sample]]:
        out = []
        for start in range(0, len(prompts), self.max_prompts):  # the server's rollout.server_max_prompts
            chunk = list(prompts[start:start + self.max_prompts])
            # seeds stay those of the whole list: prompt i of the list draws from seed + i * n
            seed = None if params.seed is None else params.seed + start * n
            reply = self._call("POST", "/generate", {"prompts": chunk, "n": n, "tools": self.tools is not None,
                                                     "params": {**asdict(params), "seed": seed}})
            out += [[_sample(s) for s in group] for group in reply["samples"]]
        return out

    @torch.no_grad()
    def sync_weights(self, model) -> None:
        """Every rank calls this; rank 0 pushes the weights, the others wait for it. Under FSDP
        every rank takes part in each tensor's gather as rank 0's stream reaches it (collectives,
        the same order everywhere); the other ranks throw their copies away."""
        from pipeline.parallel import fsdp

        stream = hf_weights(model)  # lazy: under FSDP each tensor's gather happens as it is reached
        try:
            if distributed.rank() == 0:
                self._push(model, stream)
        finally:  # all gathers done on every rank, also when rank 0 failed: the others then reach the barrier
            if fsdp.is_sharded(model):
                _drain(stream)
        distributed.barrier("wait for rank 0's weight sync to the vLLM server")

    def _push(self, model, stream) -> None:
        start = time.perf_counter()
        dtype = getattr(torch, self.health.get("dtype", "float32"))  # float32 master weights go in the server's dtype
        if self.group is None:
            self._join(next(model.parameters()).device)
        update = next(self._updates)
        specs = [Spec(n, dtype_name(dtype), shape) for n, _, shape in hf_specs(model)]
        self._call("POST", "/update_weights", {"generation": self.generation, "update": update,
                                               "specs": [s.as_json() for s in specs], "bucket_bytes": BUCKET_BYTES})
        named = ((n, t.to(dtype)) for n, t in stream)  # made (gathered, merged, cast) one at a time
        try:
            self.group.send(named, BUCKET_BYTES, on_bucket=faults.broadcast_hook(), specs=specs)
        except BroadcastError as e:
            self._drop_group()
            raise ServerLost(f"vLLM server {self.url}: weight broadcast failed ({e}); the server died or hung. "
                             "Restart it and rerun with train.resume=auto") from e
        self._call("POST", "/update_weights_done", {"update": update})
        self.last_sync_s = time.perf_counter() - start

    def _join(self, device: torch.device) -> None:
        """Open the weight group; ``device``: where the policy's parameters are."""
        backend = choose_backend(self.backend_choice, device, self.health, self.url)
        reply = self._call("POST", "/init_weight_group", {"backend": backend, "timeout_s": self.timeout_s})
        self.generation = generation = reply["generation"]
        store = RemoteStore(lambda op: self._call("POST", "/group_store", {"generation": generation, **op}),
                            self.timeout_s)
        try:
            self.group = WeightGroup.join(store, 0, backend, self.timeout_s, generation=generation, device=None,
                                          secret=(self.token or "").encode(), host=local_address(self.host))
        except BroadcastError as e:
            raise ServerLost(f"vLLM server {self.url}: could not build the weight group with it ({e}); the "
                             "server's gloo/NCCL ports on rollout.server_host must be reachable from trainer "
                             "rank 0 (docs/vllm_serve.md)") from e

    def _drop_group(self) -> None:
        if self.group is not None:
            self.group.close()
        self.group = None

    def close(self) -> None:
        if self.group is not None:
            try:
                self._call("POST", "/close_weight_group", {"generation": self.generation}, timeout=CONNECT_TIMEOUT_S)
            except distributed.PeerLost:
                pass  # the server is gone or busy; it drops the group when the next trainer joins
        self._drop_group()


class _Retry(Exception):
    """A connection-level failure worth another try; ``final`` is the error if none is left."""

    def __init__(self, final: Exception):
        super().__init__(str(final))
        self.final = final


def choose_backend(choice: str, device: torch.device, health: dict, url: str) -> str:
    """The weight group's backend: ``choice`` (``rollout.server_weight_backend``) for the policy on
    ``device`` and the server that answered ``health``. NCCL needs both on GPUs and, as NCCL
    refuses two ranks on one GPU, on different ones: ``auto`` then falls back to gloo (one line),
    an explicit ``nccl`` is refused."""
    theirs = health.get("device_id")
    mine = device_identity(device) if device.type == "cuda" else "cpu"
    same_gpu = mine != "cpu" and theirs == mine
    if choice == "nccl" and same_gpu:
        raise ServerError(f"rollout.server_weight_backend=nccl, but the vLLM server {url} runs on the trainer's "
                          f"own GPU ({mine}) and NCCL refuses two ranks on one GPU; use server_weight_backend=gloo "
                          "or auto, or give the server its own GPU (CUDA_VISIBLE_DEVICES)")
    if choice != "auto":
        return choice
    if mine == "cpu" or health.get("device") != "cuda":
        return "gloo"
    if same_gpu or theirs is None:
        why = "runs on the trainer's GPU (NCCL refuses two ranks on one GPU)" if same_gpu else "reports no GPU identity"
        print(f"vLLM server {url} {why}: weights go over gloo (through the CPU)", flush=True)
        return "gloo"
    return "nccl"


def _sample(fields: dict) -> Sample:
    """A Sample from its JSON fields (a tool span comes back as a list)."""
    return Sample(**{**fields, "tool_spans": [tuple(span) for span in fields.get("tool_spans", [])]})


def _drain(stream) -> None:
    for _ in stream:
        pass
