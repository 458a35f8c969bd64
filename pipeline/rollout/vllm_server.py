"""`mathrl vllm-serve`: a separate process that samples rollouts for `rollout.engine=vllm_server`.

Runs one vLLM engine (``VLLMEngine``, in-process, tensor parallel 1) for the run config's model
(``model.name_or_path``, ``model.dtype``, ``seed``, the ``rollout.vllm_*`` keys) behind a small
JSON-over-HTTP API (stdlib ``ThreadingHTTPServer`` on ``rollout.server_host:server_port``):

    GET  /health               model, dtype, device, weights_hash (names + shapes), weight group state
    GET  /weights              [[name, shape], ...] the trainer must send (Hugging Face names)
    POST /generate             {"prompts": [str], "n": int, "params": SamplingParams fields}
                               -> {"samples": [[Sample fields]]} exactly as VLLMEngine returns them
    POST /init_weight_group    {"backend": "gloo"|"nccl", "timeout_s"} -> {"port", "generation"};
                               the trainer then joins the group (see pipeline/weights/broadcast.py)
    POST /update_weights       {"generation", "update", "specs": [[name, dtype, shape]], "bucket_bytes"}
                               -> checks the specs, starts receiving; the bytes follow over the group
    POST /update_weights_done  {"update"} -> once the weights are loaded into vLLM (or the error)
    POST /close_weight_group   {"generation"}

Every engine call and every group operation runs on one worker thread, in arrival order, so
generation never overlaps a weight load. Weights are staged on the CPU and loaded only when all
have arrived, through ``VLLMEngine.sync_weights`` (the same worker functions as the colocated
engine; it also resets the prefix cache). A broadcast that fails (the trainer died) or stalls
past its timeout drops the group, logs one line and leaves the previous weights in place; the
server keeps serving, and a restarted trainer (`train.resume=auto`) joins a new group.
SIGTERM / SIGINT stop the server cleanly (a second signal exits at once).

Deviations: one engine, tensor parallel 1 (the receiving end of the group is this process,
not vLLM's workers); concurrent /generate requests are served one after another, not batched
together; prompts are strings tokenised as VLLMEngine does.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from pipeline.config import RunConfig
from pipeline.rollout.base import SamplingParams
from pipeline.weights.broadcast import BroadcastError, Spec, StateView, WeightGroup, weights_hash
from pipeline.weights.export import expected_weights

__all__ = ["main", "WeightServer"]


def log(msg: str) -> None:
    print(f"mathrl vllm-serve: {msg}", flush=True)


class RequestError(ValueError):
    """A request the server refuses; the message goes back to the client (HTTP 400)."""


class WeightServer:
    """The engine, the weight group and the single worker thread that serialises them."""

    def __init__(self, cfg: RunConfig, engine):
        self.cfg, self.engine = cfg, engine
        self.weights = expected_weights(cfg.model.name_or_path)
        self.hash = weights_hash(self.weights)
        self.worker = ThreadPoolExecutor(1, thread_name_prefix="vllm-engine")
        self.store = None  # created on the first /init_weight_group, kept for the server's life
        self.group: WeightGroup | None = None
        self.generation = 0
        self.pending: dict[int, Future] = {}
        self.updates = 0
        self.lock = threading.Lock()  # guards generation / pending across HTTP threads

    # -- endpoints -------------------------------------------------------------------------
    def health(self, _body=None) -> dict:
        return {"status": "ok", "model": self.cfg.model.name_or_path, "dtype": self.cfg.model.dtype,
                "device": "cuda" if self.engine.on_gpu else "cpu", "weights_hash": self.hash,
                "num_weights": len(self.weights), "weight_group": self.group is not None,
                "generation": self.generation, "updates": self.updates}

    def weight_list(self, _body=None) -> dict:
        return {"weights": [[n, list(s)] for n, s in self.weights]}

    def generate(self, body: dict) -> dict:
        try:
            prompts, n = [str(p) for p in body["prompts"]], int(body["n"])
            params = SamplingParams(**body.get("params", {}))
        except (KeyError, TypeError, ValueError) as e:
            raise RequestError(f"bad /generate request ({e})") from e
        groups = self.worker.submit(self.engine.generate, prompts, n, params).result()
        return {"samples": [[asdict(s) for s in g] for g in groups]}

    def init_group(self, body: dict) -> dict:
        backend, timeout_s = body.get("backend", "gloo"), float(body.get("timeout_s", 600))
        if backend not in ("gloo", "nccl"):
            raise RequestError(f"unknown backend {backend!r}")
        if backend == "nccl" and not self.engine.on_gpu:
            raise RequestError("this server runs on CPU: use rollout.server_weight_backend=gloo")
        with self.lock:
            if self.store is None:
                self.store = WeightGroup.host_store(self.cfg.rollout.server_group_port, timeout_s)
            self.generation += 1
            generation = self.generation
        self.worker.submit(self._join, generation, backend, timeout_s)
        return {"port": self.store.port, "generation": generation}

    def update(self, body: dict) -> dict:
        try:
            specs = [Spec.from_json(s) for s in body["specs"]]
            update, generation, bucket = int(body["update"]), body["generation"], int(body["bucket_bytes"])
        except (KeyError, TypeError, ValueError) as e:
            raise RequestError(f"bad /update_weights request ({e})") from e
        if generation != self.generation:
            raise RequestError(f"weight group {generation} is gone (current: {self.generation}); "
                               "the client must call /init_weight_group again")
        sent = {s.name: s.shape for s in specs}
        if len(sent) != len(specs) or sent != dict(self.weights):
            missing = sorted(set(dict(self.weights)) ^ set(sent)) or sorted(
                n for n, s in self.weights if sent[n] != s)
            raise RequestError(f"the weights sent do not match the served model {self.cfg.model.name_or_path!r} "
                               f"(first difference: {missing[:1]})")
        with self.lock:
            self.pending = {update: self.worker.submit(self._receive, generation, specs, bucket)}
        return {"ok": True}

    def update_done(self, body: dict) -> dict:
        future = self.pending.get(int(body.get("update", -1)))
        if future is None:
            raise RequestError(f"no weight update {body.get('update')} in progress")
        seconds = future.result()  # raises the receive/load error, reported as HTTP 500
        return {"ok": True, "seconds": seconds}

    def close_group(self, body: dict) -> dict:
        self.worker.submit(self._drop, body.get("generation"), "closed by the trainer")
        return {"ok": True}

    # -- worker-thread jobs ----------------------------------------------------------------
    def _join(self, generation: int, backend: str, timeout_s: float) -> None:
        self._drop(None, "a new trainer joins")
        if generation != self.generation:
            return  # superseded by a later /init_weight_group
        try:
            self.group = WeightGroup.join(self.store, 1, backend, timeout_s, generation=generation)
            log(f"weight group {generation} ({backend}) formed with the trainer")
        except BroadcastError as e:
            log(f"weight group {generation}: {e}; waiting for a trainer to connect again")

    def _receive(self, generation: int, specs: list[Spec], bucket: int) -> float:
        start = time.perf_counter()
        if self.group is None or generation != self.generation:
            raise RuntimeError(f"weight group {generation} is not formed (did the trainer join it?)")
        try:
            named = self.group.receive(specs, bucket, out_device="cpu")
        except BroadcastError as e:
            self._drop(None, f"weight update failed ({e}); kept the previous weights")
            raise
        self.engine.sync_weights(StateView(dict(named)))
        self.updates += 1
        return time.perf_counter() - start

    def _drop(self, generation, why: str) -> None:
        if self.group is not None and generation in (None, self.generation):
            self.group.close()
            self.group = None
            log(f"dropped the weight group: {why}; still serving")

    def close(self) -> None:
        self.worker.shutdown(wait=True, cancel_futures=True)
        self._drop(None, "shutting down")


ROUTES = {("GET", "/health"): "health", ("GET", "/weights"): "weight_list", ("POST", "/generate"): "generate",
          ("POST", "/init_weight_group"): "init_group", ("POST", "/update_weights"): "update",
          ("POST", "/update_weights_done"): "update_done", ("POST", "/close_weight_group"): "close_group"}


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        err = sys.exc_info()[1]
        if not isinstance(err, (BrokenPipeError, ConnectionResetError)):  # a client gave up: not ours
            log(f"request from {client_address[0]} failed: {type(err).__name__}: {err}")


def make_handler(server: WeightServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _dispatch(self, method: str) -> None:
            name = ROUTES.get((method, self.path.split("?")[0]))
            if name is None:
                return self._reply(404, {"error": f"no endpoint {method} {self.path}"})
            try:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else {}
                self._reply(200, getattr(server, name)(body))
            except (RequestError, json.JSONDecodeError) as e:
                self._reply(400, {"error": str(e)})
            except Exception as e:  # engine or broadcast failure: tell the client, keep serving
                self._reply(500, {"error": f"{type(e).__name__}: {e}"})

        def _reply(self, code: int, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802 (http.server's naming)
            self._dispatch("GET")

        def do_POST(self):  # noqa: N802
            self._dispatch("POST")

        def log_message(self, *args):  # one line per request is noise; errors go back to the client
            pass

    return Handler


def main(cfg: RunConfig) -> int:
    from pipeline.rollout.factory import colocated_vllm

    r = cfg.rollout
    # NCCL weight group: on a timed-out or broken broadcast abort the communicator but keep this
    # process serving (torch's default, 3, ends the process). Read when the group is created.
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2")
    try:
        httpd = _HTTPServer((r.server_host, r.server_port), None)
    except OSError as e:  # bind before the slow engine start: a busy port fails at once
        print(f"mathrl vllm-serve: cannot listen on {r.server_host}:{r.server_port} ({e}); "
              "pick another rollout.server_port", file=sys.stderr)
        return 1
    log(f"loading {cfg.model.name_or_path} ({cfg.model.dtype}) into vLLM")
    engine = colocated_vllm(cfg, cfg.model.name_or_path, sleep_mode=False)
    server = WeightServer(cfg, engine)
    httpd.RequestHandlerClass = make_handler(server)
    _on_signals(httpd)
    log(f"serving {cfg.model.name_or_path} at http://{r.server_host}:{r.server_port} (pid {os.getpid()})")
    try:
        httpd.serve_forever(poll_interval=0.5)
    finally:
        httpd.server_close()
        server.close()
        engine.close()
    log("stopped")
    return 0


def _on_signals(httpd) -> None:
    stopping = threading.Event()

    def handle(signum, _frame):
        if stopping.is_set():
            os._exit(128 + signum)
        stopping.set()
        log(f"{signal.Signals(signum).name}: stopping")
        threading.Thread(target=httpd.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
