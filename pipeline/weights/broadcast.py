"""A two-member weight channel between trainer rank 0 and a `mathrl vllm-serve` process.

The channel is a torch.distributed process group of its own, built directly from a ``TCPStore``
and ``ProcessGroupGloo`` (CPU) or ``ProcessGroupNCCL`` (GPU), so it is independent of torchrun's
default world: the trainer may or may not be inside torchrun, and the server never is. The
server hosts the store (``is_master``) on a port it announces over HTTP; the trainer connects to
it, so only the server's address has to be reachable (the same topology as TRL's
``vllm-serve``, which builds vLLM's ``StatelessProcessGroup`` + ``PyNcclCommunicator``; here
only torch is needed, so the trainer's environment does not need vllm).

Tensors travel as raw bytes: each bucket is one flat ``uint8`` buffer holding several tensors of
any dtypes, each at a 16-byte aligned offset, so a transfer is bit-exact for every dtype and
costs one collective per bucket. Both sides compute the same bucket plan from the same list of
(name, dtype, shape) specs, which travels over HTTP.

Beside the channel: ``weights_hash`` (the identity of an architecture, from its (name, shape)
pairs, which both sides compare before any transfer) and ``StateView`` (received tensors in the
shape of a model's ``state_dict()``, so the server loads them with the same ``hf_weights`` path
as a trainer's model).

Every blocking call has a timeout: a peer that dies closes its sockets (error within seconds),
a peer that hangs is caught by the group's timeout (gloo). With NCCL the timeout is handed to
the communicator and enforced by torch's NCCL watchdog, which by default ends the process; the
server sets ``TORCH_NCCL_ASYNC_ERROR_HANDLING=2`` (abort the communicator, keep the process) so
that it survives a dead trainer (NCCL paths not exercised here: no GPU).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

__all__ = ["BroadcastError", "WeightGroup", "Spec", "StateView", "plan_buckets", "dtype_name", "parse_dtype",
           "weights_hash", "BUCKET_BYTES"]

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
    def from_json(cls, item) -> "Spec":
        name, dtype, shape = item
        parse_dtype(dtype)  # reject unknown dtypes early
        return cls(str(name), str(dtype), tuple(int(d) for d in shape))

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


class WeightGroup:
    """Rank 0 (the trainer) sends, rank 1 (the server) receives; world size 2."""

    SRC = 0

    def __init__(self, store, pg, rank: int, device: torch.device, timeout_s: float):
        self.store, self.pg, self.rank, self.device, self.timeout_s = store, pg, rank, device, timeout_s

    @classmethod
    def host_store(cls, port: int, timeout_s: float):
        """The server side's store, listening on ``port`` (0 = a free port; see ``store.port``)."""
        try:
            return dist.TCPStore("0.0.0.0", port, None, True, timedelta(seconds=timeout_s), wait_for_workers=False)
        except Exception as e:
            raise BroadcastError(f"could not listen for the weight group on port {port} ({e})") from e

    @classmethod
    def join(cls, store_or_addr, rank: int, backend: str, timeout_s: float, generation: int = 0,
             device: torch.device | None = None) -> "WeightGroup":
        """Build the group: ``store_or_addr`` is the server's own store or ``(host, port)``.
        ``generation`` keys this group in the store, so one server store serves a group per
        trainer that connects. Blocks until both members joined, at most ``timeout_s``."""
        timeout = timedelta(seconds=timeout_s)
        try:
            store = store_or_addr
            if isinstance(store_or_addr, tuple):
                host, port = store_or_addr
                store = dist.TCPStore(host, int(port), None, False, timeout)
            store = dist.PrefixStore(f"weights/{generation}/", store)
            if backend == "nccl":
                opts = dist.ProcessGroupNCCL.Options()
                opts._timeout = timeout
                pg = dist.ProcessGroupNCCL(store, rank, 2, opts)
                device = device or torch.device("cuda", torch.cuda.current_device())
            elif backend == "gloo":
                pg = dist.ProcessGroupGloo(store, rank, 2, timeout)
                device = torch.device("cpu")
            else:
                raise ValueError(f"unknown weight-group backend {backend!r} (gloo or nccl)")
            group = cls(store, pg, rank, device, timeout_s)
            group.barrier()  # NCCL connects lazily: connect now, so join fails here, not mid-update
            return group
        except BroadcastError:
            raise
        except Exception as e:
            raise BroadcastError(f"could not form the weight group within {timeout_s:.0f} s "
                                 f"({type(e).__name__}: {e})") from e

    def _run(self, what: str, fn, *args) -> None:
        try:
            work = fn(*args)
            if not work.wait(timedelta(seconds=self.timeout_s)):
                raise TimeoutError(f"no progress within {self.timeout_s:.0f} s")
        except Exception as e:
            raise BroadcastError(f"{what} failed ({type(e).__name__}: {e})") from e

    def _broadcast(self, buf: torch.Tensor, what: str) -> None:
        opts = dist.BroadcastOptions()
        opts.rootRank, opts.rootTensor = self.SRC, 0
        self._run(what, self.pg.broadcast, [buf], opts)

    def send(self, named: list[tuple[str, torch.Tensor]], bucket_bytes: int = BUCKET_BYTES,
             on_bucket=None) -> None:
        """Rank 0: broadcast ``named`` tensors (in the order their specs were announced).
        ``on_bucket(i)`` is called before bucket i goes out (fault injection in tests)."""
        specs = [Spec.of(n, t) for n, t in named]
        for b, idx in enumerate(plan_buckets(specs, bucket_bytes)):
            if on_bucket is not None:
                on_bucket(b)
            buf = torch.empty(sum(_aligned(specs[i].nbytes) for i in idx), dtype=torch.uint8, device=self.device)
            offset = 0
            for i in idx:
                t = named[i][1].detach().contiguous()
                n = specs[i].nbytes
                if n:
                    buf[offset:offset + n].copy_(t.reshape(-1).view(torch.uint8), non_blocking=True)
                offset += _aligned(n)
            self._broadcast(buf, f"sending weight bucket {b}")

    def receive(self, specs: list[Spec], bucket_bytes: int = BUCKET_BYTES,
                out_device: torch.device | str = "cpu") -> list[tuple[str, torch.Tensor]]:
        """Rank 1: the tensors rank 0 sends for ``specs``, bit-exact, on ``out_device``."""
        out: list[tuple[str, torch.Tensor]] = []
        for b, idx in enumerate(plan_buckets(specs, bucket_bytes)):
            buf = torch.empty(sum(_aligned(specs[i].nbytes) for i in idx), dtype=torch.uint8, device=self.device)
            self._broadcast(buf, f"receiving weight bucket {b}")
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
        self.pg.set_timeout(timedelta(seconds=timeout_s))

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
