"""`mathrl vllm-serve` at the HTTP level, with raw sockets: slow clients, too many connections,
huge / negative / chunked bodies, oversized heads, odd paths; and the batching of concurrent
/generate requests into one engine call. The real server on loopback with a stand-in engine
(tests/serve_helpers.py); every loop is bounded by a deadline.
"""

from __future__ import annotations

import json
import socket
import threading
import time

from pipeline.rollout.server_limits import ServerLimits
from tests.serve_helpers import TOKEN, StandInEngine, call, raw, running_server, serve_config, status_of

FAST = ServerLimits(read_timeout_s=1.0, max_connections=8, max_unauth_connections=8, auth_timeout_s=1.0,
                    max_body_bytes=4096, batch_window_s=0.0)
AUTH = f"Authorization: Bearer {TOKEN}\r\n".encode()


def _post(path: str, body: bytes, *head: bytes) -> bytes:
    return (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" % path.encode() + b"".join(head)
            + b"Content-Length: %d\r\n\r\n" % len(body) + body)


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def _closed_within(sock: socket.socket, limit_s: float, drip: bytes | None = None) -> float:
    """Seconds until the server closes ``sock`` (sending ``drip`` every 0.2 s meanwhile);
    fails if it stays open past ``limit_s``."""
    start = time.monotonic()
    sock.settimeout(0.2)
    while time.monotonic() - start < limit_s:
        try:
            if drip is not None:
                sock.sendall(drip)
            if sock.recv(65536) == b"":
                return time.monotonic() - start
        except socket.timeout:
            continue
        except (BrokenPipeError, ConnectionResetError):
            return time.monotonic() - start
    raise AssertionError(f"the server kept the connection open for {limit_s} s")


def test_slowloris_heads_and_slow_bodies_are_cut_at_the_read_timeout():
    """One header byte every 0.2 s does not keep a connection alive past read_timeout_s (1 s),
    nor does a body that stops halfway; each costs the server no thread."""
    with running_server(serve_config(), limits=FAST) as (_, url):
        threads = threading.active_count()
        with socket.create_connection(_address(url)) as head:
            head.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\n")
            assert _closed_within(head, 5, drip=b"X") < 3  # dripping bytes do not restart the deadline
        with socket.create_connection(_address(url)) as body:
            body.sendall(_post("/generate", b"", AUTH).replace(b"Content-Length: 0", b"Content-Length: 100") + b'{"pro')
            assert _closed_within(body, 5) < 3
        assert threading.active_count() <= threads + 1
        assert call(url, "GET", "/health") == (200, {"status": "ok"})


def test_too_many_connections_get_503_and_idle_ones_expire():
    """200 half-sent requests without a token (the issue's attack): the server keeps the newest
    max_unauth_connections (8) of them, answers the older ones 503 as newer ones come, adds no
    thread per connection, and serves again once the idle ones hit the token deadline."""
    with running_server(serve_config(), limits=FAST) as (_, url):
        threads = threading.active_count()
        socks = []
        try:
            for _ in range(200):
                s = socket.create_connection(_address(url))
                s.sendall(b"GET /health HTTP/1.1\r\n")  # never finished
                socks.append(s)
            time.sleep(0.3)
            refused = 0
            for s in socks:
                s.settimeout(0.05)
                try:
                    refused += status_of(s.recv(4096)) == 503
                except socket.timeout:
                    pass
            assert refused >= 190, refused
            socks[-1].settimeout(5)
            assert socks[-1].recv(4096) == b""  # the newest were kept, until the token deadline
            assert threading.active_count() <= threads + 1
        finally:
            for s in socks:
                s.close()
        deadline = time.monotonic() + 10
        while True:  # the half-sent ones are gone within the read timeout
            try:
                if call(url, "GET", "/health", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline
            time.sleep(0.2)


def test_body_size_and_framing_attacks():
    engine = StandInEngine()
    with running_server(serve_config(), engine, limits=FAST) as (_, url):
        huge = raw(url, b"POST /generate HTTP/1.1\r\nHost: x\r\n" + AUTH + b"Content-Length: 1000000000000000\r\n\r\n{")
        assert status_of(huge) == 413 and b"the limit is 4096" in huge
        stranger = raw(url, b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000000000\r\n\r\n{")
        assert status_of(stranger) == 401  # the token is checked before any body is read
        assert status_of(raw(url, b"POST /generate HTTP/1.1\r\nHost: x\r\n" + AUTH
                             + b"Content-Length: -1\r\n\r\n")) == 400
        assert status_of(raw(url, b"POST /generate HTTP/1.1\r\nHost: x\r\n" + AUTH
                             + b"Content-Length: abc\r\n\r\n")) == 400
        assert status_of(raw(url, b"POST /generate HTTP/1.1\r\nHost: x\r\n" + AUTH
                             + b"Content-Length: 5\r\nContent-Length: 9\r\n\r\n{}")) == 400
        good = json.dumps({"prompts": ["c"], "n": 1}).encode()
        chunked = (b"POST /generate HTTP/1.1\r\nHost: x\r\n" + AUTH
                   + b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
        ok = raw(url, chunked + b"%x\r\n%s\r\n0\r\n\r\n" % (len(good), good))
        assert status_of(ok) == 200 and b"c#0" in ok
        flood = b"".join(b"400\r\n" + b" " * 1024 + b"\r\n" for _ in range(10)) + b"0\r\n\r\n"  # 10 KiB > 4 KiB
        assert status_of(raw(url, chunked + flood)) == 413
        assert status_of(raw(url, chunked + b"zz\r\nnot hex\r\n")) == 400
        head = raw(url, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n")
        assert status_of(head) == 431  # 16 KiB on a request head, sent at once
        with socket.create_connection(_address(url)) as s:  # or in pieces (h11's own limit)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            try:
                for _ in range(20):
                    s.sendall(b"X-Big: " + b"a" * 2000 + b"\r\n")
                    time.sleep(0.01)
                s.sendall(b"\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server already refused and closed
            s.settimeout(5)
            try:
                reply = s.recv(4096)
            except ConnectionResetError:
                reply = b""  # closed before its 400 could be read
            assert status_of(reply) in (400, 0), reply[:100]
        bomb = b"[" * 100_000 + b"]" * 100_000
        assert status_of(raw(url, _post("/generate", bomb[:4000], AUTH))) == 400  # cut at the limit, not parsed
        deep = raw(url, _post("/generate", b'{"prompts": ' + b"[" * 2000 + b"]" * 2000 + b', "n": 1}', AUTH))
        assert status_of(deep) == 400
        nan = raw(url, _post("/generate", b'{"prompts": ["a"], "n": 1, "params": {"temperature": NaN}}', AUTH))
        assert status_of(nan) == 400 and b"not valid JSON" in nan
        assert engine.calls == [[(["c"], 1, engine.calls[0][0][2])]]  # only the well-formed request ran


def test_smuggled_pipelined_and_upgraded_requests_are_each_authenticated():
    """The token is checked per request, not per connection: a request hidden behind a chunked
    body with a conflicting Content-Length, or pipelined behind an allowed one, gets 401; a
    WebSocket upgrade is not performed."""
    with running_server(serve_config(), limits=FAST) as (_, url):
        good = json.dumps({"prompts": ["c"], "n": 1}).encode()
        smuggled = raw(url, b"POST /generate HTTP/1.1\r\nHost: x\r\n" + AUTH
                       + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"%x\r\n%s\r\n0\r\n\r\n" % (len(good), good)
                       + b"GET /info HTTP/1.1\r\nHost: x\r\n\r\n")
        assert smuggled.count(b"HTTP/1.1 ") == 2 and b"HTTP/1.1 401" in smuggled and b"weights_hash" not in smuggled
        pipelined = raw(url, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /weights HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b'{"status":"ok"}' in pipelined and b"HTTP/1.1 401" in pipelined and b"0.weight" not in pipelined
        upgrade = raw(url, b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                      b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", timeout=3)
        assert status_of(upgrade) == 200 and b"101" not in upgrade.split(b"\r\n")[0]


def test_odd_paths_and_methods_reveal_nothing():
    with running_server(serve_config(), limits=FAST) as (_, url):
        for path in ("/../info", "/info/../weights", "/%2e%2e/info", "/weights?x=../../etc/passwd", "/docs",
                     "/openapi.json", "/info%00"):
            status, reply = call(url, "GET", path, token=None)
            assert status in (401, 404) and "weights_hash" not in reply and "weights" not in reply, (path, reply)
        assert call(url, "DELETE", "/generate")[0] == 405
        assert call(url, "GET", "/generate")[0] == 405


def _generate_concurrently(url: str, bodies: list[dict]) -> list:
    results = [None] * len(bodies)

    def run(i):
        results[i] = call(url, "POST", "/generate", bodies[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_two_concurrent_requests_are_one_engine_call():
    """Two ranks asking at once: one engine call holds both requests, each with its own n and
    seed, and each rank gets exactly its own samples back."""
    engine = StandInEngine()
    limits = ServerLimits(batch_window_s=0.3)
    with running_server(serve_config(), engine, limits=limits) as (_, url):
        bodies = [{"prompts": ["r0a", "r0b"], "n": 2, "params": {"seed": 10}},
                  {"prompts": ["r1a"], "n": 3, "params": {"seed": 20}}]
        (s0, r0), (s1, r1) = _generate_concurrently(url, bodies)
        assert s0 == s1 == 200
        assert len(engine.calls) == 1 and sorted(len(r[0]) for r in engine.calls[0]) == [1, 2]
        assert [[s["completion"] for s in g] for g in r0["samples"]] == [["r0a#0 seed=10", "r0a#1 seed=10"],
                                                                        ["r0b#0 seed=10", "r0b#1 seed=10"]]
        assert [[s["completion"] for s in g] for g in r1["samples"]] == [["r1a#0 seed=20", "r1a#1 seed=20",
                                                                         "r1a#2 seed=20"]]
        info = call(url, "GET", "/info")[1]
        assert (info["engine_calls"], info["generate_requests"]) == (1, 2)


def test_requests_arriving_during_an_engine_call_form_the_next_batch():
    engine = StandInEngine(delay_s=0.5)
    with running_server(serve_config(), engine, limits=ServerLimits(batch_window_s=0.0)) as (_, url):
        first = threading.Thread(target=call, args=(url, "POST", "/generate", {"prompts": ["first"], "n": 1}))
        first.start()
        time.sleep(0.2)  # the engine is busy with the first request
        results = _generate_concurrently(url, [{"prompts": [f"later{i}"], "n": 1} for i in range(3)])
        first.join(30)
        assert all(status == 200 for status, _ in results)
        assert [len(c) for c in engine.calls] == [1, 3]


def test_a_failing_request_in_a_batch_fails_alone():
    class Picky(StandInEngine):
        def generate_many(self, requests):
            if any("boom" in p for prompts, _, _ in requests for p in prompts):
                self.calls.append(list(requests))
                raise ValueError("prompt too long")
            return super().generate_many(requests)

    engine = Picky()
    with running_server(serve_config(), engine, limits=ServerLimits(batch_window_s=0.3)) as (_, url):
        (s_bad, r_bad), (s_ok, r_ok) = _generate_concurrently(url, [{"prompts": ["boom"], "n": 1},
                                                                    {"prompts": ["fine"], "n": 1}])
        assert s_bad == 500 and "prompt too long" in r_bad["error"]
        assert s_ok == 200 and r_ok["samples"][0][0]["completion"] == "fine#0 seed=None"
        assert [len(c) for c in engine.calls] == [2, 1, 1]  # the batch, then each alone
