"""Per-rank training-state memory with and without FSDP2 on 2 CPU ranks (gloo).

Builds a ~50M-parameter Qwen2-architecture model the way ``pipeline/models.py`` builds the tiny
one (random init, float32), then in two fresh pairs of processes (one replicated, one with
``pipeline.parallel.fsdp.wrap``) runs one forward/backward/AdamW step and reports, per rank:
- bytes of the parameters, gradients and optimizer state the rank holds after the step
  (the local shards under FSDP: ``DTensor.to_local()``),
- the process's resident memory before building the model (Python + torch), after the step
  (``VmRSS``; freed memory the allocator keeps still counts) and at its peak (``ru_maxrss``, which
  includes the full model built before sharding, activations and FSDP's all-gather buffers).

    .venv/bin/python benchmarks/bench_fsdp_memory.py [--hidden 512 --layers 8 --vocab 32000]

The state ratio (FSDP / replicated) is the number to compare with the 1/N in docs/fsdp.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _model(args):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=args.layers,
                      num_attention_heads=args.hidden // 64, num_key_value_heads=args.hidden // 64,
                      intermediate_size=4 * args.hidden, max_position_embeddings=512, tie_word_embeddings=True)
    return Qwen2ForCausalLM(cfg)


def _bytes(tensors) -> int:
    total = 0
    for t in tensors:
        t = t.to_local() if hasattr(t, "to_local") else t
        total += t.numel() * t.element_size()
    return total


def _rss() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _worker(rank: int, world: int, port: int, sharded: bool, args, out) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    from pipeline.parallel import fsdp

    base_rss = _rss()
    model = _model(args)
    n_params = sum(p.numel() for p in model.parameters())
    if sharded:
        model = fsdp.wrap(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=torch.Generator().manual_seed(rank))
    model(input_ids=ids, labels=ids).loss.backward()
    if not sharded:
        for p in model.parameters():
            dist.all_reduce(p.grad)
    opt.step()
    del ids
    import gc
    gc.collect()
    params = list(model.parameters())
    state = [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
    out[(sharded, rank)] = {"params": n_params, "weights": _bytes(params),
                            "grads": _bytes(p.grad for p in params if p.grad is not None),
                            "optim": _bytes(state), "base_rss": base_rss, "rss": _rss(),
                            "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=64)
    args = ap.parse_args()
    world = 2
    out = mp.Manager().dict()
    for sharded in (False, True):  # fresh processes per mode, so peak RSS is not shared
        mp.start_processes(_worker, args=(world, _free_port(), sharded, args, out), nprocs=world,
                           start_method="spawn", join=True)
    gib = 1 / 2**20
    print(f"model: {out[(False, 0)]['params'] / 1e6:.1f} M parameters, float32, AdamW, {world} ranks (gloo, CPU); "
          "MiB per rank")
    print(f"{'mode':<11}{'rank':>5}{'weights':>13}{'grads':>11}{'optim':>11}{'state':>11}"
          f"{'RSS before':>12}{'RSS after':>11}{'peak RSS':>10}")
    totals = {}
    for sharded in (False, True):
        for rank in range(world):
            r = out[(sharded, rank)]
            state = r["weights"] + r["grads"] + r["optim"]
            totals.setdefault(sharded, []).append(state)
            print(f"{'fsdp' if sharded else 'replicated':<11}{rank:>5}{r['weights'] * gib:>13.1f}"
                  f"{r['grads'] * gib:>11.1f}"
                  f"{r['optim'] * gib:>11.1f}{state * gib:>11.1f}{r['base_rss'] * gib:>12.0f}{r['rss'] * gib:>11.0f}"
                  f"{r['peak_rss'] * gib:>10.0f}")
    ratio = max(totals[True]) / max(totals[False])
    print(f"per-rank state, fsdp / replicated: {ratio:.3f} (ideal 1/{world} = {1 / world:.3f})")


if __name__ == "__main__":
    main()
