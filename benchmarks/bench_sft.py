"""SFT step time on the CPU default: the padded step, length-sorted micro-batches, and both cores.

The same batches of the CPU default's SFT (``configs/cpu_tiny.yaml``: gsm-synth with the carry
corruption, batch 32, the tiny base model) under each variant, one torch thread per process,
seconds per step after one warm-up step, as ratios to the padded step measured in this one run.
Variants: ``padded`` (one forward padded to the batch's longest, ``sft.micro_batch_tokens=0``),
``micro`` (``sft.micro_batch_tokens=B``: sorted by length, cut into micro-batches of at most B
padded tokens, logits only where a completion token is predicted) and ``micro x2``
(``sft.processes=2``, pipeline/sft_parallel.py; its helper's start-up is timed apart).

    python benchmarks/bench_sft.py [--steps 40] [--budgets 512,1024]

Needs the prepared gsm-synth data and the tiny base (`make data`, `mathrl build-tiny`), both made
by `make train`. Timings depend on the machine's load: run it on an idle box.
"""

from __future__ import annotations

import argparse
import time

import torch

from pipeline import determinism, sft
from pipeline.config import load_run_config
from pipeline.models import load_policy


def time_steps(overrides: list[str], steps: int) -> tuple[float, float]:
    """(seconds per step after the first, seconds of the first step incl. any helper start-up)."""
    cfg = load_run_config("configs/cpu_tiny.yaml", [*overrides, f"sft.steps={steps + 1}", "sft.warmup_steps=1"])
    torch.manual_seed(cfg.seed)
    model, tok = load_policy(cfg.sft.init)
    records, _ = sft.training_records(cfg)
    examples = sft.encode(records, tok, cfg)
    marks = []
    real = sft.lr_at

    def mark(step, *args):  # called once per step by the loop, before the step's forward
        marks.append(time.perf_counter())
        return real(step, *args)

    sft.lr_at = mark
    try:
        start = time.perf_counter()
        sft.train(model, tok, examples, cfg, progress=False)
        end = time.perf_counter()
    finally:
        sft.lr_at = real
    return (end - marks[1]) / steps, marks[1] - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--budgets", default="512,1024")
    args = ap.parse_args()
    determinism.apply(load_run_config("configs/cpu_tiny.yaml"), "bench_sft")
    variants = [("padded", ["sft.micro_batch_tokens=0", "sft.processes=1"])]
    for b in args.budgets.split(","):
        variants.append((f"micro {b}", [f"sft.micro_batch_tokens={b}", "sft.processes=1"]))
    for b in args.budgets.split(","):
        variants.append((f"micro {b} x2", [f"sft.micro_batch_tokens={b}", "sft.processes=2"]))
    rows = []
    for name, overrides in variants:
        per_step, first = time_steps(overrides, args.steps)
        rows.append((name, per_step, first))
        print(f"{name}: {per_step:.3f} s/step (first step {first:.1f} s)", flush=True)
    base = rows[0][1]
    print("\n| variant | s/step | vs padded | first step (s) |\n|---|---|---|---|")
    for name, per_step, first in rows:
        print(f"| {name} | {per_step:.3f} | {base / per_step:.2f}x | {first:.1f} |")


if __name__ == "__main__":
    main()
