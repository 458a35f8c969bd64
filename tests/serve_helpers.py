"""A `mathrl vllm-serve` with a stand-in engine, on loopback, for the server's tests.

The real server code (routes, limits, token, batching, weight group) runs in a thread of the
test process; only the engine is a stand-in (vLLM cannot run in the default suite): it answers
``generate_many`` with samples that name their request (so a test can see which call served
what), counts its calls, and keeps the weights it is sent. ``make test-vllm`` runs the same
server with real vLLM (tests/test_vllm_serve.py).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import urllib.error
import urllib.request

import torch

from pipeline.config import load_run_config
from pipeline.rollout.base import Sample
from pipeline.rollout.server_limits import ServerLimits
from pipeline.rollout.vllm_server import build_server, listen

TOKEN = "stand-in-token-0123456789abcdef"


class StandInEngine:
    """What the server needs of ``VLLMEngine``: ``generate_many``, ``sync_weights``, ``on_gpu``."""

    on_gpu = False

    def __init__(self, delay_s: float = 0.0):
        self.delay_s = delay_s
        self.calls: list[list[tuple]] = []  # the requests of each engine call
        self.loaded: list[dict] = []  # each weight load: name -> tensor

    def generate_many(self, requests):
        self.calls.append(list(requests))
        time.sleep(self.delay_s)
        out = []
        for prompts, n, params in requests:
            out.append([[Sample(prompt=p, prompt_ids=[1, 2], completion=f"{p}#{j} seed={params.seed}",
                                completion_ids=[3, j], finish_reason="stop", logprobs=[-0.5, -0.25])
                         for j in range(n)] for p in prompts])
        return out

    def sync_weights(self, state) -> None:
        self.loaded.append({k: v.clone() for k, v in state.state_dict().items()})


def toy_model() -> torch.nn.Module:
    """The 'policy' the stand-in server serves: names and shapes are all that matter."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Linear(5, 3))


def weights_of(model) -> list[tuple[str, tuple[int, ...]]]:
    return [(n, tuple(t.shape)) for n, t in model.state_dict().items()]


def serve_config(*overrides: str):
    return load_run_config(None, ["rollout.engine=vllm_server", "rollout.server_timeout_s=20", *overrides])


@contextlib.contextmanager
def running_server(cfg, engine=None, token: str | None = TOKEN, model=None, limits: ServerLimits | None = None,
                   host: str = "127.0.0.1"):
    """(WeightServer, url) of a server on ``host``:<free port> until the block ends."""
    engine = engine or StandInEngine()
    server, httpd = build_server(cfg, engine, token, weights=weights_of(model or toy_model()), limits=limits)
    sock = listen(host, 0)
    thread = threading.Thread(target=httpd.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not httpd.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the stand-in server did not start"
        time.sleep(0.02)
    try:
        yield server, f"http://{host}:{sock.getsockname()[1]}"
    finally:
        httpd.should_exit = True
        thread.join(20)
        server.close()
        sock.close()


def call(url: str, method: str, path: str, body=None, token: str | None = TOKEN, headers: dict | None = None,
         timeout: float = 20) -> tuple[int, dict]:
    """(HTTP status, JSON reply) of one request."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    head = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {}),
            **(headers or {})}
    req = urllib.request.Request(url + path, data=data, method=method, headers=head)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        text = e.read()
        try:
            return e.code, json.loads(text)
        except ValueError:
            return e.code, {"raw": text.decode(errors="replace")}


def raw(url: str, data: bytes, timeout: float = 10) -> bytes:
    """Send ``data`` as is on a fresh connection; everything the server answers until it closes
    the connection or ``timeout`` passes."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        with contextlib.suppress(socket.timeout, ConnectionResetError):
            while chunk := s.recv(65536):
                chunks.append(chunk)
    return b"".join(chunks)


def status_of(response: bytes) -> int:
    """The status code of a raw HTTP response (0 if there is none)."""
    parts = response.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[0].startswith(b"HTTP/") else 0
