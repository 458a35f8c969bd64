"""Data-parallel GRPO on torch.distributed: `torchrun --nproc_per_node N -m pipeline train ...`.

Every rank holds a full replica of the policy (and reference), draws the same global list of
questions from an identical ``QuestionSampler`` and keeps a contiguous shard of it, so each
group of G completions lives on one rank and its statistics stay local and exact. Gradients
are summed across ranks with explicit bucketed all-reduces after the last micro-batch
(not DDP: the HF engine calls ``generate`` on the same module, LoRA swaps adapters for the
reference, and mu > 1 needs accumulation without sync; one all-reduce per optimizer step is
simpler and has no hooks to fight with, at the cost of not overlapping communication with the
backward pass). The loss is scaled with GLOBAL counts (``policy_loss``'s ``num_rows`` and
``num_tokens``: rows for grpo / dr_grpo / bnpo, tokens for dapo), so the summed gradient equals
the one a single process computes on the whole batch. Rank 0 alone writes metrics, samples,
checkpoints and the final model.

Sampling under more than one rank is seeded per block of ``rollout.seed_block`` questions (1 by
default) from (seed, draw index of the block's first question in the run), so which rank
generates a question does not change its completions; a 1-process run with the same
``rollout.seed_block`` samples the same completions (its default, 0, seeds one call per step).

The backend follows the run's device (``init``): gloo when ``device`` resolves to cpu, even on a
machine with GPUs; NCCL for cuda, each rank on GPU ``LOCAL_RANK``, refused in one line when a node
has fewer GPUs than ranks.

Outside torchrun (no WORLD_SIZE, or WORLD_SIZE=1 without torchrun's agent) there is no process
group, every helper is a no-op and the trainer runs exactly as a single process. Under torchrun
the group exists even for one rank (``TORCHELASTIC_RUN_ID`` is set), so a 1-rank run uses the
backend, and FSDP with ``train.fsdp=true``, as N ranks do: what `make gpu-smoke` checks on one
GPU. The helpers still short-circuit on one rank.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from pipeline.device import DeviceError

BUCKET_ELEMENTS = 1 << 24  # gradient elements per all-reduce (64 MiB in float32)


class PeerLost(RuntimeError):
    """A collective failed or timed out: another rank died or hangs. The message says what to do."""


def init(timeout_s: float, device: str = "cpu") -> bool:
    """Join the process group torchrun described in the environment; False outside torchrun.
    ``device``: the run's resolved device (``pipeline.device.resolve_device``): gloo on ``cpu``;
    on ``cuda`` NCCL, with this rank on GPU ``LOCAL_RANK`` (one GPU per local rank)."""
    under_torchrun = "TORCHELASTIC_RUN_ID" in os.environ  # torchrun's agent sets it, for any number of ranks
    if (int(os.environ.get("WORLD_SIZE", "1")) <= 1 and not under_torchrun) or dist.is_initialized():
        return dist.is_initialized()
    backend = backend_for(device)
    if backend == "nccl":
        torch.cuda.set_device(_local_gpu())
    try:
        dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))
    except Exception as e:  # rendezvous never completed: a peer did not start
        raise PeerLost(f"could not join the process group within {timeout_s:.0f} s ({e}); check "
                       "MASTER_ADDR/MASTER_PORT and that every rank started") from e
    return True


def backend_for(device: str) -> str:
    """The collective backend for a resolved device: NCCL for cuda, gloo for cpu."""
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be resolved to cpu or cuda before torchrun starts, got {device!r}")
    return "nccl" if device == "cuda" else "gloo"


def _local_gpu() -> int:
    """This rank's GPU: LOCAL_RANK, refused in one line when the node has fewer GPUs than ranks."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", local_rank + 1))
    gpus = torch.cuda.device_count()
    if max(local_ranks, local_rank + 1) > gpus:
        raise DeviceError(f"torchrun started {max(local_ranks, local_rank + 1)} ranks on this node but torch sees "
                          f"{gpus} GPU(s) (one rank per GPU): use --nproc_per_node={gpus} (make train-dist "
                          f"NPROC={gpus}), or device=cpu for gloo on the CPU")
    return local_rank


def device_type() -> str:
    """'cuda' under NCCL, else 'cpu': the device of collectives and of FSDP's device mesh."""
    return "cuda" if dist.is_initialized() and dist.get_backend() == "nccl" else "cpu"


def close() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def initialized() -> bool:
    """A process group exists (torchrun, any number of ranks)."""
    return dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def is_main() -> bool:
    return rank() == 0


def print0(*args, **kwargs) -> None:
    """print on rank 0 only (also before the process group exists or after it is closed)."""
    if (rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))) == 0:
        print(*args, **kwargs)


def sampling_seed(seed: int, draw: int) -> int:
    """Seed for the ``draw``-th question drawn in the run: the same on any rank and world size."""
    digest = hashlib.sha256(f"{seed}:{draw}".encode()).digest()
    return int.from_bytes(digest[:7], "little")


def shard(items: list, even: bool = True, what: str = "train.questions_per_step") -> tuple[list, int]:
    """(this rank's contiguous share of ``items``, index of its first item in ``items``).
    ``even=False`` allows shares that differ by one item (dynamic-sampling refills)."""
    n, w, r = len(items), world_size(), rank()
    if even and n % w:
        raise ValueError(f"{what}={n} is not divisible by the {w} ranks; use a multiple of {w}")
    return items[r * n // w:(r + 1) * n // w], r * n // w


def gather_list(items: list) -> list:
    """Every rank's ``items`` concatenated in rank order, on every rank (picklable objects)."""
    if world_size() == 1:
        return items
    parts: list = [None] * world_size()
    _collective("all_gather of sampled groups", dist.all_gather_object, parts, items)
    return [x for part in parts for x in part]


def _collective(what: str, fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except Exception as e:
        raise PeerLost(f"rank {rank()}/{world_size()}: {what} failed ({type(e).__name__}: {e}). Another rank "
                       "probably died or stopped responding; its log says why. The job stops here; restart it "
                       "with train.resume=auto to continue from the last checkpoint (any number of ranks).") from e


def same_on_all_ranks(value) -> bool:
    """Whether every rank holds an equal ``value`` (e.g. the step it resumes from)."""
    if world_size() == 1:
        return True
    got: list = [None] * world_size()
    _collective("all_gather of a value every rank must agree on", dist.all_gather_object, got, value)
    return all(v == got[0] for v in got)


def all_reduce_sum(values: list[float]) -> list[float]:
    """Sum a few floats over ranks (float64, so counts stay exact)."""
    if world_size() == 1:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=_comm_device())
    _collective("all_reduce of step statistics", dist.all_reduce, t)
    return t.tolist()


def gather_cat(t: torch.Tensor) -> torch.Tensor:
    """Concatenate equally shaped tensors of all ranks in rank order (on every rank)."""
    if world_size() == 1:
        return t
    parts = [torch.empty_like(t, device=_comm_device()) for _ in range(world_size())]
    _collective("all_gather of rewards", dist.all_gather, parts, t.to(_comm_device()))
    return torch.cat(parts).to(t.device)


def all_reduce_grads(params: list[torch.Tensor]) -> None:
    """Sum the gradients of ``params`` over ranks in place (buckets of flattened grads)."""
    if world_size() == 1:
        return
    grads = [p.grad for p in params if p.grad is not None]
    if len(grads) != len(params):  # a parameter unused on one rank would desynchronise the buckets
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        grads = [p.grad for p in params]
    for bucket in _buckets(grads):
        flat = torch.cat([g.reshape(-1) for g in bucket])
        _collective("all_reduce of gradients", dist.all_reduce, flat)
        offset = 0
        for g in bucket:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()


def _buckets(grads: list[torch.Tensor]):
    bucket: list[torch.Tensor] = []
    size = 0
    for g in grads:
        if bucket and size + g.numel() > BUCKET_ELEMENTS:
            yield bucket
            bucket, size = [], 0
        bucket.append(g)
        size += g.numel()
    if bucket:
        yield bucket


def broadcast_params(model) -> None:
    """Make every rank start from rank 0's weights (guards against divergent initialisation)."""
    if world_size() == 1:
        return
    for p in model.parameters():
        _collective("broadcast of initial weights", dist.broadcast, p.data, 0)


def global_view(batch, timer: dict):
    """(batch with every rank's episodes, merged timer) for metrics and samples on rank 0.
    Episodes arrive in rank order, i.e. in the order a single process would hold them."""
    if world_size() == 1:
        return batch, timer
    gathered: list = [None] * world_size()
    local = (batch.episodes, batch.zero_std_frac, batch.mismatch, timer)
    _collective("gather of step metrics", dist.all_gather_object, gathered, local)
    episodes = [e for part in gathered for e in part[0]]
    offset = 0
    for part in gathered:  # renumber groups globally so `groups` counts the whole batch
        count = len({e.group for e in part[0]})
        for e in part[0]:
            e.group += offset
        offset += count
    zero = sum(p[1] for p in gathered) / len(gathered)
    mismatch = {k: sum(p[2].get(k, 0.0) for p in gathered) / len(gathered) for k in gathered[0][2]}
    merged: dict[str, float] = {}
    for _, _, _, t in gathered:
        for k, v in t.items():  # tokens add up; a phase takes as long as its slowest rank
            merged[k] = merged.get(k, 0.0) + v if k == "gen_tokens" else max(merged.get(k, 0.0), v)
    return dataclasses.replace(batch, episodes=episodes, zero_std_frac=zero, mismatch=mismatch), merged


def barrier(what: str = "barrier") -> None:
    if world_size() > 1:
        _collective(what, dist.barrier)


def _comm_device() -> torch.device:
    if device_type() == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
