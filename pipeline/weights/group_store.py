"""The weight group's rendezvous store, reached through the server's authenticated HTTP API.

torch's ``TCPStore`` cannot be the weight group's store on a server that strangers can reach:
its master listens on every interface whatever host it is given (``TCPStore("127.0.0.1", 0,
is_master=True)`` listens on ``*:port``, checked with torch 2.13), it has no authentication,
and anyone who connects can list its keys (``list_keys``), read the gloo/NCCL addresses, write
keys or fill its memory. So the server keeps the store in memory (``dist.HashStore``, one per
weight group) and the trainer reaches it through ``POST /group_store`` on the HTTP API, which
asks for the token like every other mutating endpoint: no extra port, nothing to bind.

``RemoteStore`` is the trainer's side: a ``torch.distributed.Store`` written in Python (torch
calls its methods from C++ through its trampoline) whose operations are HTTP requests. Blocking
operations (``get``, ``wait``) poll ``check`` so the server never blocks a request on a key.
``serve_store_op`` is the server's side: one operation on the group's ``HashStore``, with
limits on keys and values (gloo's rendezvous writes one ~200-byte key per rank; NCCL's unique
id is 128 bytes).
"""

from __future__ import annotations

import base64
import binascii
import time
from datetime import timedelta

import torch.distributed as dist

__all__ = ["RemoteStore", "serve_store_op", "MAX_KEYS", "MAX_KEY_CHARS", "MAX_VALUE_BYTES"]

MAX_KEYS = 64  # keys one group's store may hold
MAX_KEY_CHARS = 256
MAX_VALUE_BYTES = 64 << 10
OPS = ("set", "get", "check", "add", "compare_set", "delete", "num_keys")


def _encode(value: bytes) -> str:
    return base64.b64encode(bytes(value)).decode("ascii")


def _decode(text, what: str) -> bytes:
    if not isinstance(text, str) or len(text) > MAX_VALUE_BYTES * 4 // 3 + 4:
        raise ValueError(f"{what} must be base64 text of at most {MAX_VALUE_BYTES} bytes")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ValueError(f"{what} is not valid base64 ({e})") from e


class RemoteStore(dist.Store):
    """A store whose operations are ``rpc({"op": ..., ...}) -> dict`` calls to the server."""

    POLL_S = 0.02

    def __init__(self, rpc, timeout_s: float):
        super().__init__()
        self.rpc, self.timeout_s = rpc, timeout_s
        self._clones: list[RemoteStore] = []  # torch holds only the C++ half: keep the Python one alive

    def set(self, key, value) -> None:
        self.rpc({"op": "set", "key": key, "value": _encode(value)})

    def get(self, key) -> bytes:
        self.wait([key])
        return _decode(self.rpc({"op": "get", "key": key})["value"], "value")

    def check(self, keys) -> bool:
        return bool(self.rpc({"op": "check", "keys": list(keys)})["found"])

    def wait(self, keys, timeout: timedelta | None = None) -> None:
        limit = timeout.total_seconds() if timeout is not None else self.timeout_s
        deadline = time.monotonic() + limit
        while not self.check(keys):
            if time.monotonic() > deadline:
                raise TimeoutError(f"keys {list(keys)} not set within {limit:.0f} s")
            time.sleep(self.POLL_S)

    def add(self, key, amount) -> int:
        return int(self.rpc({"op": "add", "key": key, "amount": int(amount)})["value"])

    def compare_set(self, key, expected, desired) -> bytes:
        reply = self.rpc({"op": "compare_set", "key": key, "expected": _encode(expected), "desired": _encode(desired)})
        return _decode(reply["value"], "value")

    def deleteKey(self, key) -> bool:  # noqa: N802 (the name torch's trampoline calls)
        return bool(self.rpc({"op": "delete", "key": key})["deleted"])

    def getNumKeys(self) -> int:  # noqa: N802
        return int(self.rpc({"op": "num_keys"})["value"])

    def clone(self) -> "RemoteStore":
        twin = RemoteStore(self.rpc, self.timeout_s)
        self._clones.append(twin)
        return twin


def _key(body: dict, field: str = "key") -> str:
    key = body.get(field)
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_CHARS:
        raise ValueError(f"{field} must be a string of 1 to {MAX_KEY_CHARS} characters")
    return key


def serve_store_op(store: dist.Store, body: dict) -> dict:
    """Apply one ``RemoteStore`` operation to ``store``; ``ValueError`` with the reason if refused.
    Never blocks: ``get`` of a missing key is refused (the client waits with ``check`` first)."""
    op = body.get("op")
    if op not in OPS:
        raise ValueError(f"unknown store op {op!r}; one of {', '.join(OPS)}")
    if op == "num_keys":
        return {"value": store.num_keys()}
    if op == "check":
        keys = body.get("keys")
        if not isinstance(keys, list) or not 1 <= len(keys) <= MAX_KEYS:
            raise ValueError(f"keys must be a list of 1 to {MAX_KEYS} keys")
        return {"found": store.check([_key({"key": k}) for k in keys])}
    key = _key(body)
    if op == "get":
        if not store.check([key]):
            raise ValueError(f"no key {key!r} in the group store")
        return {"value": _encode(store.get(key))}
    if op == "delete":
        return {"deleted": store.delete_key(key)}
    new_key = not store.check([key])
    if new_key and store.num_keys() >= MAX_KEYS:
        raise ValueError(f"the group store is full ({MAX_KEYS} keys)")
    if op == "set":
        store.set(key, _decode(body.get("value"), "value"))
        return {}
    if op == "add":
        amount = body.get("amount")
        if isinstance(amount, bool) or not isinstance(amount, int) or abs(amount) > 2**62:
            raise ValueError("amount must be an integer")
        return {"value": store.add(key, amount)}
    expected, desired = _decode(body.get("expected"), "expected"), _decode(body.get("desired"), "desired")
    return {"value": _encode(store.compare_set(key, expected, desired))}
