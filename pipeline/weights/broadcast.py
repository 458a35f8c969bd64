"""A two-member weight channel between trainer rank 0 and a `mathrl vllm-serve` process.

The channel is a torch.distributed process group of its own, built directly from a store and
``ProcessGroupGloo`` (CPU) or ``ProcessGroupNCCL`` (GPU), so it is independent of torchrun's
default world: the trainer may or may not be inside torchrun, and the server never is. The
store is the server's in-memory one, which the trainer reaches through the server's
authenticated HTTP API (``group_store.RemoteStore``), so the group adds no unauthenticated
listener of its own (the same topology as TRL's ``vllm-serve``, the server hosts and the
trainer connects; here only torch is needed, so the trainer's environment does not need vllm).

Gloo's own sockets (its listener for the pair connections) are bound to ``host``: the server
passes the address its HTTP API listens on, the trainer the local address that faces the
server, so a loopback server opens nothing beyond loopback. Once the group is formed, the
server (rank 1) checks that its peer holds the shared token, whatever reached gloo's port: it
broadcasts a random nonce, the trainer answers with HMAC-SHA256(token, generation, nonce), the
server compares in constant time and tells the trainer the verdict; a wrong answer ends the
group before any weight moves (``join(..., secret=...)``).

Tensors travel as raw bytes: each bucket is one flat ``uint8`` buffer holding several tensors of
any dtypes, each at a 16-byte aligned offset, so a transfer is bit-exact for every dtype and
costs one collective per bucket. Both sides compute the same bucket plan from the same list of
(name, dtype, shape) specs, which travels over HTTP.

Beside the channel: ``weights_hash`` (the identity of an architecture, from its (name, shape)
pairs, which both sides compare before any transfer) and ``StateView`` (received tensors in the
shape of a model's ``state_dict()``, so the server loads them with the same ``hf_weights`` path
as a trainer's model).

Every blocking call has a timeout: a peer that dies closes its sockets (error within seconds),
a peer that hangs is caught by the group's timeout (gloo), and ``receive`` also takes a
deadline for the whole transfer (the server's announcement expiry). With NCCL the timeout is
handed to the communicator and enforced by torch's NCCL watchdog, which by default ends the
process; the server sets ``TORCH_NCCL_ASYNC_ERROR_HANDLING=2`` (abort the communicator, keep
the process) so that it survives a dead trainer. NCCL's own bootstrap sockets follow
``NCCL_SOCKET_IFNAME``, not ``host`` (NCCL paths not exercised here: no GPU).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import time
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

__all__ = ["BroadcastError", "WeightGroup", "Spec", "StateView", "plan_buckets", "dtype_name", "parse_dtype",
           "weights_hash", "local_address", "BUCKET_BYTES"]

BUCKET_BYTES = 256 << 20  # bytes per broadcast (one flat buffer)
_ALIGN = 16


class BroadcastError(RuntimeError):
    """The weight channel could not be built or a transfer failed or timed out."""


@dataclass(frozen=True)
class Spec:
    """What one tensor is, sent ahead of its bytes."""

    name: str
    dtype: str  # e.g. "float32", see dtype_name
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        numel = 1
        for d in self.shape:
            numel *= d
        return numel * parse_dtype(self.dtype).itemsize

    def as_json(self) -> list:
        return [self.name, self.dtype, list(self.shape)]

    @classmethod
    def of(cls, name: str, t: torch.Tensor) -> "Spec":
        return cls(name, dtype_name(t.dtype), tuple(t.shape))


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def parse_dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dtype


def _aligned(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def plan_buckets(specs: list[Spec], bucket_bytes: int = BUCKET_BYTES) -> list[list[int]]:
    """Indices of ``specs`` per bucket, in order; a tensor larger than a bucket gets its own."""
    buckets: list[list[int]] = []
    size = 0
    for i, spec in enumerate(specs):
        n = _aligned(spec.nbytes)
        if buckets and size + n <= bucket_bytes:
            buckets[-1].append(i)
            size += n
        else:
            buckets.append([i])
            size = n
    return buckets


_WILDCARDS = ("", "0.0.0.0", "::")


def local_address(host: str) -> str:
    """The local address this machine uses to reach ``host`` (no packet is sent)."""
    family, _, _, _, addr = socket.getaddrinfo(host, 9, type=socket.SOCK_DGRAM)[0]
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        s.connect(addr)
        return s.getsockname()[0]


def _gloo_options(timeout: timedelta, host: str | None):
    opts = dist.ProcessGroupGloo._Options()
    opts._timeout = timeout
    if (host is None or host in _WILDCARDS) and os.environ.get("GLOO_SOCKET_IFNAME"):
        opts._devices = [dist.ProcessGroupGloo.create_device(interface=os.environ["GLOO_SOCKET_IFNAME"])]
    elif host is None or host in _WILDCARDS:  # no address to bind to: the one the hostname resolves to
        opts._devices = [dist.ProcessGroupGloo.create_default_device()]
    else:
        opts._devices = [dist.ProcessGroupGloo.create_device(hostname=host)]
    return opts


def _mac(secret: bytes, generation: int, nonce: bytes) -> bytes:
    return hmac.new(secret, b"mathrl weight group %d " % generation + nonce, hashlib.sha256).digest()


class WeightGroup:
    """Rank 0 (the trainer) sends, rank 1 (the server) receives; world size 2."""

    SRC = 0

    def __init__(self, store, pg, rank: int, device: torch.device, timeout_s: float):
        self.store, self.pg, self.rank, self.device, self.timeout_s = store, pg, rank, device, timeout_s

    @classmethod
    def join(cls, store, rank: int, backend: str, timeout_s: float, generation: int = 0,
             device: torch.device | None = None, secret: bytes = b"", host: str | None = None) -> "WeightGroup":
        """Build the group on ``store`` (the server's ``HashStore``, or the trainer's
        ``RemoteStore`` of it). ``generation`` keys this group in the store; ``host`` is the
        address gloo listens on (None or a wildcard: gloo's default interface); ``secret`` is the
        server token both sides prove before any transfer. Blocks until both members joined, at
        most ``timeout_s``."""
        timeout = timedelta(seconds=timeout_s)
        group = None
        try:
            store = dist.PrefixStore(f"weights/{generation}/", store)
            if backend == "nccl":
                opts = dist.ProcessGroupNCCL.Options()
                opts._timeout = timeout
                pg = dist.ProcessGroupNCCL(store, rank, 2, opts)
                device = device or torch.device("cuda", torch.cuda.current_device())
            elif backend == "gloo":
                pg = dist.ProcessGroupGloo(store, rank, 2, _gloo_options(timeout, host))
                device = torch.device("cpu")
            else:
                raise ValueError(f"unknown weight-group backend {backend!r} (gloo or nccl)")
            group = cls(store, pg, rank, device, timeout_s)
            group.barrier()  # NCCL connects lazily: connect now, so join fails here, not mid-update
        except Exception as e:
            if group is not None:
                group.close()
            raise BroadcastError(f"could not form the weight group within {timeout_s:.0f} s "
                                 f"({type(e).__name__}: {e})") from e
        group._prove(secret, generation)
        return group

    def _prove(self, secret: bytes, generation: int) -> None:
        """The server's nonce, the trainer's HMAC of it, the server's verdict (see the module doc)."""
        nonce = bytearray(os.urandom(32) if self.rank == 1 else bytes(32))
        answer = bytearray(32)
        try:
            nonce = self._exchange(nonce, 1)
            if self.rank == 0:
                answer = bytearray(_mac(secret, generation, bytes(nonce)))
            answer = self._exchange(answer, 0)
            ok = self.rank == 0 or hmac.compare_digest(bytes(answer), _mac(secret, generation, bytes(nonce)))
            verdict = self._exchange(bytearray([int(ok)]), 1)
        except BroadcastError:
            self.close()
            raise
        if not verdict[0]:
            self.close()
            who = "the trainer did not prove the server's token" if self.rank == 1 else \
                "the server refused this trainer's token"
            raise BroadcastError(f"weight group {generation}: {who}; closed it before any transfer")

    def _exchange(self, data: bytearray, root: int) -> bytes:
        buf = torch.frombuffer(data, dtype=torch.uint8).to(self.device)
        self._broadcast(buf, "weight group token check", root)
        return bytes(buf.cpu().numpy().tobytes())

    def _run(self, what: str, fn, *args, timeout_s: float | None = None) -> None:
        limit = self.timeout_s if timeout_s is None else min(timeout_s, self.timeout_s)
        try:
            work = fn(*args)
            if not work.wait(timedelta(seconds=limit)):
                raise TimeoutError(f"no progress within {limit:.0f} s")
        except Exception as e:
            raise BroadcastError(f"{what} failed ({type(e).__name__}: {e})") from e

    def _broadcast(self, buf: torch.Tensor, what: str, root: int = SRC, timeout_s: float | None = None) -> None:
        opts = dist.BroadcastOptions()
        opts.rootRank, opts.rootTensor = root, 0
        self._run(what, self.pg.broadcast, [buf], opts, timeout_s=timeout_s)

    def send(self, named, bucket_bytes: int = BUCKET_BYTES, on_bucket=None,
             specs: list[Spec] | None = None) -> None:
        """Rank 0: broadcast ``named`` (name, tensor) pairs in the order of the announced ``specs``
        (default: those of ``named``, then a list). With ``specs``, ``named`` may be a lazy stream:
        each bucket pulls its tensors as it fills, so one bucket's buffer and one tensor exist at a
        time. ``on_bucket(i)`` is called before bucket i goes out (fault injection in tests)."""
        if specs is None:
            named = list(named)
            specs = [Spec.of(n, t) for n, t in named]
        stream = iter(named)
        for b, idx in enumerate(plan_buckets(specs, bucket_bytes)):
            if on_bucket is not None:
                on_bucket(b)
            # zeros: the alignment padding carries no stale memory, the same bytes every time
            buf = torch.zeros(sum(_aligned(specs[i].nbytes) for i in idx), dtype=torch.uint8, device=self.device)
            offset = 0
            for i in idx:
                name, t = next(stream, (None, None))
                if t is None or Spec.of(name, t) != specs[i]:
                    got = "the end of the stream" if t is None else Spec.of(name, t)
                    raise ValueError(f"weight stream out of step with its announced specs: {got} where "
                                     f"{specs[i]} was due")
                t = t.detach().contiguous()
                n = specs[i].nbytes
                if n:
                    buf[offset:offset + n].copy_(t.reshape(-1).view(torch.uint8), non_blocking=True)
                offset += _aligned(n)
            self._broadcast(buf, f"sending weight bucket {b}")

    def receive(self, specs: list[Spec], bucket_bytes: int = BUCKET_BYTES,
                out_device: torch.device | str = "cpu",
                deadline: float | None = None) -> list[tuple[str, torch.Tensor]]:
        """Rank 1: the tensors rank 0 sends for ``specs``, bit-exact, on ``out_device``; all of
        them by ``deadline`` (``time.monotonic()``), if given, besides the per-bucket timeout."""
        out: list[tuple[str, torch.Tensor]] = []
        for b, idx in enumerate(plan_buckets(specs, bucket_bytes)):
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise BroadcastError(f"receiving weight bucket {b} failed (the update's deadline passed)")
            buf = torch.empty(sum(_aligned(specs[i].nbytes) for i in idx), dtype=torch.uint8, device=self.device)
            shorter = left is not None and left < self.timeout_s
            if shorter:  # the op's own timeout: gloo's work.wait(timeout) does not end a receive early
                self._op_timeout(left)
            try:
                self._broadcast(buf, f"receiving weight bucket {b}", timeout_s=left)
            finally:
                if shorter:
                    self._op_timeout(self.timeout_s)
            buf = buf.to(out_device)
            offset = 0
            for i in idx:
                s = specs[i]
                dtype = parse_dtype(s.dtype)
                out.append((s.name, buf[offset:offset + s.nbytes].view(dtype).view(s.shape)))
                offset += _aligned(s.nbytes)
        return out

    def set_timeout(self, timeout_s: float) -> None:
        """Timeout of every later transfer (joining used the one given to ``join``)."""
        self.timeout_s = timeout_s
        self._op_timeout(timeout_s)

    def _op_timeout(self, timeout_s: float) -> None:
        fn = getattr(self.pg, "set_timeout", None)  # gloo; NCCL's work.wait honours its timeout
        if fn is not None:
            fn(timedelta(seconds=timeout_s))

    def barrier(self) -> None:
        """Both members reach this point. A one-byte broadcast on the group's device, not
        ``pg.barrier()``, which on NCCL guesses the device from the rank (cuda:1 on the server)."""
        self._broadcast(torch.zeros(1, dtype=torch.uint8, device=self.device), "weight group handshake")

    def close(self) -> None:
        """Drop the group (the peer may already be gone); never raises."""
        pg, self.pg, self.store = self.pg, None, None
        if pg is None:
            return
        for method in ("abort", "shutdown"):
            fn = getattr(pg, method, None)
            if fn is not None:
                try:
                    fn()
                    break
                except Exception:
                    continue


def weights_hash(specs) -> str:
    """Identity of an architecture: sha256 of the sorted (name, shape) pairs."""
    items = sorted((name, [int(d) for d in shape]) for name, shape in specs)
    return hashlib.sha256(json.dumps(items).encode()).hexdigest()[:16]


class StateView:
    """A state dict received by the server (Hugging Face names, LoRA already merged by the
    trainer) in the shape ``hf_weights`` reads from a plain model."""

    def __init__(self, state: dict):
        self._state = state

    def state_dict(self) -> dict:
        return self._state
