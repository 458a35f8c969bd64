"""The HTTP side of `mathrl vllm-serve`: FastAPI routes on uvicorn, plus the limits uvicorn leaves out.

uvicorn (its h11 protocol) parses HTTP and refuses malformed requests with 400: a negative or
non-numeric Content-Length, broken chunked encoding, request heads over 16 KiB that arrive in
pieces (one that arrives at once is refused with 431 here, so the limit holds either way). It does
not bound how long a client may take to send a request (a connection that sends one byte a
second stays open for ever), nor how many connections stay open. ``GuardedH11`` adds both: a
client has ``read_timeout_s`` to send each whole request (head and body), counted from the
connection or from the previous reply, not restarted by each byte; and ``ConnectionPool`` keeps
two pools. A new connection is unauthenticated until a request on it carries the token: it has
``auth_timeout_s`` for that, and beyond ``max_unauth`` such connections the oldest is answered
503 and closed, so idle strangers cannot keep a trainer's connection out (it sends its token
the moment it connects). Authenticated connections are capped at ``max_connections`` (503
past it). Without a token (loopback opt-out) every connection counts as authenticated.
The application adds the rest:

- the token (``Authorization: Bearer``) on every route but ``GET /health``, checked before the
  body is read; a refused request gets 401 and its connection is closed;
- the body limit: a Content-Length over ``max_body_bytes`` gets 413 without reading, a chunked
  body is counted as it arrives and cut off at the limit;
- strict JSON (``server_limits.parse_json``); every refusal is ``{"error": reason}``.

Handlers are coroutines on one event loop: a connection costs a socket, not a thread. The engine
and the weight group run on the server's own threads (vllm_server.py), never on the loop.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from contextlib import contextmanager

import h11
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect
from uvicorn.protocols.http.h11_impl import H11Protocol

from pipeline.rollout.server_auth import authorized
from pipeline.rollout.server_limits import RequestError, ServerLimits, parse_json

__all__ = ["GuardedH11", "ConnectionPool", "build_app", "make_server", "Route", "MAX_HEAD_BYTES"]

MAX_HEAD_BYTES = 16 << 10  # h11's limit for a head that arrives in pieces; also one that arrives at once

BUSY_REASON = "too many open connections (rollout.server_max_connections)"
UNAUTH_REASON = "too many connections without a token (rollout.server_max_unauth_connections)"


def _busy(reason: str) -> bytes:
    body = b'{"error": "%s"}' % reason.encode()
    return (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(body), body))


class ConnectionPool:
    """The server's open connections: unauthenticated ones oldest first, and authenticated ones."""

    def __init__(self, max_connections: int, max_unauth: int, needs_token: bool):
        self.max_connections, self.max_unauth, self.needs_token = max_connections, max_unauth, needs_token
        self.unauth: dict = {}  # protocol -> None, in connection order
        self.authed: set = set()
        self.by_peer: dict = {}  # (host, port) of the client -> protocol

    def opened(self, proto) -> None:
        if not self.needs_token:
            self.authed.add(proto)
            if len(self.authed) > self.max_connections:
                proto.refuse(BUSY_REASON)
            return
        self.unauth[proto] = None
        self.by_peer[proto.client] = proto
        while len(self.unauth) > self.max_unauth:  # the oldest stranger makes room for the newcomer
            next(iter(self.unauth)).refuse(UNAUTH_REASON)

    def promote(self, client) -> bool:
        """The connection from ``client`` sent the token: False when the authenticated pool is full."""
        proto = self.by_peer.get(tuple(client) if client else None)
        if proto is None or proto in self.authed:
            return True
        if len(self.authed) >= self.max_connections:
            return False
        self.unauth.pop(proto, None)
        self.authed.add(proto)
        proto.authenticated()
        return True

    def closed(self, proto) -> None:
        self.unauth.pop(proto, None)
        self.authed.discard(proto)
        if self.by_peer.get(proto.client) is proto:
            del self.by_peer[proto.client]


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with a deadline per request, a deadline for the token, and the pools."""

    read_timeout_s = 30.0
    auth_timeout_s = 2.0
    pool: ConnectionPool = None  # one per server, set by make_server

    def connection_made(self, transport) -> None:
        self._read_timer = self._auth_timer = None
        super().connection_made(transport)
        if self.pool.needs_token:
            self._auth_timer = self.loop.call_later(self.auth_timeout_s, self._auth_expired)
        self.pool.opened(self)
        if not transport.is_closing():
            self._arm()

    def refuse(self, reason: str) -> None:
        self.pool.closed(self)
        if not self.transport.is_closing():
            self.transport.write(_busy(reason))
            self.transport.close()

    def authenticated(self) -> None:
        if self._auth_timer is not None:
            self._auth_timer.cancel()
            self._auth_timer = None

    def _auth_expired(self) -> None:
        self._auth_timer = None
        if not self.transport.is_closing():
            self.transport.close()  # no token within auth_timeout_s: a stranger's idle connection

    def _arm(self) -> None:
        self._disarm()
        self._read_timer = self.loop.call_later(self.read_timeout_s, self._read_expired)

    def _disarm(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _read_expired(self) -> None:
        self._read_timer = None
        if not self.transport.is_closing():
            self.transport.close()  # the handler waiting for the body sees a disconnect

    def _update_timer(self, restart: bool) -> None:
        waiting = self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not self.transport.is_closing()
        if not waiting:
            self._disarm()
        elif restart or self._read_timer is None:
            self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._update_timer(restart=False)  # the deadline runs on while the request is incomplete

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._update_timer(restart=True)  # a new deadline for the next request

    def connection_lost(self, exc) -> None:
        self._disarm()
        self.authenticated()  # only stops the token deadline
        self.pool.closed(self)
        super().connection_lost(exc)


class Route:
    """One endpoint: ``handler(body) -> dict`` (a coroutine); ``public`` routes need no token."""

    def __init__(self, method: str, path: str, handler, public: bool = False):
        self.method, self.path, self.handler, self.public = method, path, handler, public


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestError(f"the body is {declared} bytes; the limit is {limit} (rollout.server_max_body_mb)", 413)
    data = bytearray()
    async for chunk in request.stream():
        data += chunk
        if len(data) > limit:
            raise RequestError(f"the body exceeds {limit} bytes (rollout.server_max_body_mb)", 413)
    return bytes(data)


def _error(e: RequestError) -> JSONResponse:
    headers = {"connection": "close"}  # the rest of a refused body is not read: end the connection
    if e.status == 401:
        headers["www-authenticate"] = "Bearer"
    return JSONResponse({"error": str(e)}, status_code=e.status, headers=headers)


def build_app(routes: list[Route], token: str | None, limits: ServerLimits, log) -> FastAPI:
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)  # no schema pages for strangers
    app.state.pool = pool = ConnectionPool(limits.max_connections, limits.max_unauth_connections, token is not None)

    def endpoint(route: Route):
        async def handle(request: Request):
            try:
                if sum(len(k) + len(v) for k, v in request.scope["headers"]) > MAX_HEAD_BYTES:
                    raise RequestError(f"the request head exceeds {MAX_HEAD_BYTES} bytes", 431)
                header = request.headers.get("authorization")
                if token is not None and header is not None and authorized(header, token):
                    if not pool.promote(request.scope.get("client")):
                        raise RequestError(BUSY_REASON, 503)
                elif not route.public and not authorized(header, token):
                    raise RequestError("missing or wrong token (send Authorization: Bearer <token>; "
                                       "see docs/vllm_serve.md)", 401)
                body = parse_json(await _read_body(request, limits.max_body_bytes)) if route.method == "POST" else {}
                return JSONResponse(await route.handler(body))
            except RequestError as e:
                return _error(e)
            except ClientDisconnect:
                return JSONResponse({"error": "client disconnected"}, status_code=400)
            except Exception as e:  # engine or weight-group failure: tell the client, keep serving
                log(f"{route.method} {route.path} failed: {type(e).__name__}: {e}")
                return JSONResponse({"error": f"{type(e).__name__}: {e}"}, status_code=500)

        return handle

    for route in routes:
        app.add_api_route(route.path, endpoint(route), methods=[route.method])
    return app


class _Server(uvicorn.Server):
    """uvicorn's server with this command's signals: the first SIGTERM/SIGINT stops it cleanly
    (exit 0), a second exits at once. (uvicorn's own handler re-raises the signal afterwards,
    which would end the process with -15 instead of 0.)"""

    @contextmanager
    def capture_signals(self):
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def handle(signum, _frame):
            if self.should_exit:
                sys.stderr.flush()
                os._exit(128 + signum)
            self.should_exit = True

        old = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)


def make_server(app: FastAPI, limits: ServerLimits) -> uvicorn.Server:
    """A uvicorn server for ``app`` with ``limits``; run it with ``.run(sockets=[sock])``."""
    protocol = type("GuardedH11", (GuardedH11,), {"read_timeout_s": limits.read_timeout_s,
                                                  "auth_timeout_s": limits.auth_timeout_s,
                                                  "pool": app.state.pool})
    # ws="none": no WebSocket upgrades; log_level="error": a stranger's malformed requests do not fill the log
    config = uvicorn.Config(app, http=protocol, ws="none", loop="asyncio", lifespan="off", log_level="error",
                            h11_max_incomplete_event_size=MAX_HEAD_BYTES,
                            access_log=False, server_header=False, date_header=False, timeout_keep_alive=5,
                            timeout_graceful_shutdown=5)
    return _Server(config)
