"""Strangers without the token cannot stall `mathrl vllm-serve` for its trainer (issue 29).

Before: 70 idle connections made the trainer's next request fail with 503 ("too many open
connections"), the client never retried, and the training run died. Now unauthenticated
connections have their own pool (the oldest is dropped for a newcomer) and a token deadline,
the client retries connection-level failures with backoff within rollout.server_timeout_s,
and a token file others can read is refused. The real server on loopback with a stand-in
engine (tests/serve_helpers.py); every loop is bounded.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time

import pytest
import torch

from pipeline.config import load_run_config
from pipeline.rollout.base import SamplingParams
from pipeline.rollout.server_auth import TOKEN_ENV, TokenError, server_token
from pipeline.rollout.server_http import ConnectionPool
from pipeline.rollout.server_limits import ServerLimits
from pipeline.rollout.vllm_client import ServerError, VLLMServerEngine
from tests.serve_helpers import TOKEN, StandInEngine, call, running_server, serve_config, toy_model

LIMITS = ServerLimits(max_unauth_connections=16, auth_timeout_s=2.0, batch_window_s=0.0)


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


class Crowd:
    """Keeps `size` idle connections without a token open, reopening each one the server drops."""

    def __init__(self, url: str, size: int):
        self.addr, self.size, self.stop, self.opened = _address(url), size, threading.Event(), 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        socks: list[socket.socket] = []
        try:
            while not self.stop.is_set():
                kept = [s for s in socks if _alive(s)]
                for s in set(socks) - set(kept):
                    s.close()
                socks = kept
                while len(socks) < self.size and not self.stop.is_set():
                    s = socket.create_connection(self.addr, timeout=2)
                    s.sendall(b"GET /health HTTP/1.1\r\n")  # never finished, never a token
                    socks.append(s)
                    self.opened += 1
                time.sleep(0.005)
        finally:
            for s in socks:
                s.close()

    def __enter__(self) -> "Crowd":
        self.thread.start()
        deadline = time.monotonic() + 10
        while self.opened < self.size:
            assert time.monotonic() < deadline, "the crowd could not connect"
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(10)


def _alive(s: socket.socket) -> bool:
    """Still held open by the server. The crowd's requests are never complete, so anything the server
    sends is its 503 before it drops the connection, and an empty read is the drop itself."""
    s.setblocking(False)
    try:
        s.recv(1, socket.MSG_PEEK)
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        s.setblocking(True)


def test_a_training_step_completes_while_strangers_crowd_the_port(monkeypatch):
    # the attack, and worse: 70 idle connections, reopened as soon as they are dropped
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    engine = StandInEngine()
    with running_server(serve_config(), engine, limits=LIMITS) as (server, url):
        with Crowd(url, 70) as crowd:
            trainer = VLLMServerEngine(serve_config(f"rollout.server_port={_address(url)[1]}"), toy_model())
            model = toy_model()
            for step in range(3):  # rollouts, then the weights back: what one GRPO step asks of it
                groups = trainer.generate(["a", "b"], 2, SamplingParams(seed=step))
                assert [len(g) for g in groups] == [2, 2]
                with torch.no_grad():
                    for p in model.parameters():
                        p.add_(1.0)
                trainer.sync_weights(model)
            trainer.close()
            assert crowd.opened > 70  # the server kept dropping strangers for the trainer
        assert len(engine.loaded) == 3 and server.updates == 3
        assert all(torch.equal(engine.loaded[-1][k], v) for k, v in model.state_dict().items())


def test_a_stranger_is_dropped_at_the_token_deadline_but_a_trainer_keeps_its_connection():
    with running_server(serve_config(), limits=ServerLimits(auth_timeout_s=0.5, read_timeout_s=5)) as (_, url):
        with socket.create_connection(_address(url), timeout=5) as stranger:
            stranger.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")  # answered, but no token
            start = time.monotonic()
            data = b""
            while chunk := stranger.recv(4096):
                data += chunk
            assert b" 200 " in data and time.monotonic() - start < 3
        with socket.create_connection(_address(url), timeout=5) as trainer:
            head = f"GET /info HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode()
            trainer.sendall(head)
            assert _status(trainer) == 200
            time.sleep(1.0)  # past the token deadline: an authenticated connection stays
            trainer.sendall(head)
            assert _status(trainer) == 200


def _status(sock: socket.socket) -> int:
    """The status of one whole response read from ``sock`` (head, then Content-Length bytes)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536) or b"!"
        assert not data.endswith(b"!"), "closed before a whole head"
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(65536)
    return int(head.split(b" ")[1])


def test_the_authenticated_pool_is_capped_and_strangers_make_room():
    class Proto:
        def __init__(self, port):
            self.client, self.refused, self.ok = ("127.0.0.1", port), None, False

        def refuse(self, reason):
            self.refused = reason
            pool.closed(self)

        def authenticated(self):
            self.ok = True

    pool = ConnectionPool(max_connections=2, max_unauth=3, needs_token=True)
    protos = [Proto(p) for p in range(5)]
    for p in protos:
        pool.opened(p)
    assert [bool(p.refused) for p in protos] == [True, True, False, False, False]  # the oldest strangers went
    assert "server_max_unauth_connections" in protos[0].refused
    assert pool.promote(protos[2].client) and pool.promote(protos[3].client) and protos[2].ok
    assert not pool.promote(protos[4].client)  # two authenticated already: 503 for the third
    pool.closed(protos[2])
    assert pool.promote(protos[4].client)


class _Flaky(http.server.BaseHTTPRequestHandler):
    """Answers 503 to the first `busy` requests, then 200 with the request count."""

    busy, seen = 0, 0

    def do_GET(self):
        type(self).seen += 1
        code = 503 if self.seen <= self.busy else 200
        body = json.dumps({"error": "too many open connections"} if code == 503 else {"seen": self.seen}).encode()
        self.send_response(code)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("busy,timeout_s,ok", [(3, 10.0, True), (10**6, 1.0, False)])
def test_the_client_retries_a_busy_server_within_its_timeout(busy, timeout_s, ok):
    handler = type("Flaky", (_Flaky,), {"busy": busy, "seen": 0})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    client = object.__new__(VLLMServerEngine)  # only its HTTP side, without the handshake
    client.url, client.token, client.timeout_s = f"http://127.0.0.1:{httpd.server_port}", None, timeout_s
    start = time.monotonic()
    try:
        if ok:
            assert client._call("GET", "/x") == {"seen": busy + 1}
        else:
            with pytest.raises(ServerError, match="refused GET /x: too many open connections"):
                client._call("GET", "/x")
            assert handler.seen > 3  # it did retry, with backoff
            assert timeout_s - 0.5 < time.monotonic() - start < timeout_s + 2
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("mode,ok", [(0o600, True), (0o400, True), (0o640, False), (0o644, False), (0o604, False)])
def test_a_token_file_others_can_read_is_refused(monkeypatch, tmp_path, mode, ok):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(mode)
    r = load_run_config(None, [f"rollout.server_token_file={path}"]).rollout
    if ok:
        assert server_token(r) == TOKEN
    else:
        with pytest.raises(TokenError, match=rf"mode {mode:o} lets .* read the token; .*chmod 600"):
            server_token(r)


@pytest.mark.parametrize("key", ["server_max_unauth_connections", "server_auth_timeout_s"])
def test_the_new_pool_limits_are_checked_and_reach_the_server(key):
    from pipeline.config import ConfigError

    with pytest.raises(ConfigError, match=rf"rollout.{key} must be > 0"):
        load_run_config(None, [f"rollout.{key}=0"])
    limits = ServerLimits.from_config(load_run_config(None, ["rollout.server_max_unauth_connections=5",
                                                             "rollout.server_auth_timeout_s=0.7"]).rollout)
    assert (limits.max_unauth_connections, limits.auth_timeout_s) == (5, 0.7)


def test_health_still_answers_strangers():
    with running_server(serve_config(), limits=LIMITS) as (_, url):
        assert call(url, "GET", "/health", token=None) == (200, {"status": "ok"})
