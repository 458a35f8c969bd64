"""Benchmark: the rollout cost of world-size-independent sampling (`rollout.seed_block`).

With more than one rank the trainer generates in seeded calls of `seed_block` questions (1 by
default) instead of one call for the whole step. This times, on the same prompts and model in the
same run, one unseeded HF-engine call for all questions against seeded calls of 1 and 4 questions,
interleaved, and prints the best time of each and its ratio to the single call (> 1 = slower).
Usage: python benchmarks/bench_seed_block.py --model DIR --prepared DIR [--questions 16] [--group 8]
       [--tokens 80] [--reps 3]   (DIR: e.g. the tiny model and prepared data of `make data`)
"""
import argparse
import time

import torch

from pipeline.data.problems import load_problems
from pipeline.models import load_policy
from pipeline.rollout.base import SamplingParams
from pipeline.rollout.hf_engine import HFEngine


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--prepared", required=True)
    ap.add_argument("--questions", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=80)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model, tok = load_policy(args.model)
    prompts = [p["question"] for p in load_problems(args.prepared, "gsm-synth", "train")[:args.questions]]
    engine = HFEngine(model, tok, batch_size=args.questions * args.group)
    times: dict[int, list[float]] = {0: [], 1: [], 4: []}
    for _ in range(args.reps):
        for block in times:
            t0 = time.perf_counter()
            if block == 0:
                engine.generate(prompts, args.group, SamplingParams(args.tokens))
            for i in range(0, len(prompts), block or len(prompts)):
                if block:
                    engine.generate(prompts[i:i + block], args.group, SamplingParams(args.tokens, seed=i))
            times[block].append(time.perf_counter() - t0)
    best = {k: min(v) for k, v in times.items()}
    for block, t in best.items():
        label = "one unseeded call" if block == 0 else f"seed_block={block}"
        print(f"{label:>18}: {t:.2f} s  ratio {t / best[0]:.2f}")


if __name__ == "__main__":
    main()
