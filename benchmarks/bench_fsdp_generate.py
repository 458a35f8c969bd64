"""HF ``generate`` on an FSDP2-sharded model, 2 CPU ranks (gloo): weights gathered once per call
(``fsdp.gathered``, what ``HFEngine(lockstep=True)`` does) vs FSDP's default of all-gathering every
layer at every new token. Both sample the same tokens (seeded); the script checks that and
prints the time ratio, best of ``--repeats``.

    .venv/bin/python benchmarks/bench_fsdp_generate.py [--model DIR]

Without ``--model`` it builds the tiny CPU-default model (``build_tiny``, default sizes) in a
temporary directory from a small synthetic corpus.
"""

from __future__ import annotations

import argparse
import os
import socket
import tempfile
import time
from contextlib import nullcontext

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _worker(rank: int, port: int, args, out) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    from pipeline.parallel import fsdp
    from pipeline.models import load_policy
    from pipeline.rollout.base import SamplingParams
    from pipeline.rollout.hf_engine import HFEngine

    model, tok = load_policy(args.model)
    model.generation_config.eos_token_id = []  # every sequence runs to max_new_tokens: same work on both ranks
    model = fsdp.wrap(model)
    engine = HFEngine(model, tok, batch_size=args.batch, lockstep=True)
    prompts = [f"Question {rank}-{i}: what is {i} + {rank}?" for i in range(args.prompts)]
    params = SamplingParams(max_new_tokens=args.tokens, temperature=1.0, seed=rank)
    best, samples = {}, {}
    for mode in ("per_token", "gathered", "per_token", "gathered") * args.repeats:
        dist.barrier()
        t0 = time.perf_counter()
        with fsdp.gathered(model) if mode == "gathered" else nullcontext():
            got = engine._generate(prompts, args.n, params)  # _generate: no gathering of its own
        best[mode] = min(best.get(mode, float("inf")), time.perf_counter() - t0)
        samples[mode] = [[s.completion_ids for s in g] for g in got]
    out[rank] = (best, samples["gathered"] == samples["per_token"])
    dist.destroy_process_group()


def _build_tiny(out_dir: str) -> str:
    from pipeline.config import ModelConfig
    from pipeline.models import build_tiny

    corpus = [f"Tom has {i} apples and buys {j} more. How many apples? {i} + {j} = {i + j}. \\boxed{{{i + j}}}"
              for i in range(40) for j in range(0, 40, 3)]
    build_tiny(ModelConfig(), out_dir, corpus)
    return out_dir


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="model dir (default: a freshly built tiny model)")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = mp.Manager().dict()
    with tempfile.TemporaryDirectory() as tmp:
        args.model = args.model or _build_tiny(tmp)
        mp.start_processes(_worker, args=(port, args, out), nprocs=2, start_method="spawn", join=True)
    for rank in (0, 1):
        best, same = out[rank]
        print(f"rank {rank}: per-token gathers {best['per_token']:.3f} s, gathered once {best['gathered']:.3f} s, "
              f"ratio {best['per_token'] / best['gathered']:.2f}x, same samples: {same}")


if __name__ == "__main__":
    main()
