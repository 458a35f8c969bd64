"""Tool-integrated rollout throughput (``rollout.tools: [python]``): completions per second of a
rollout whose every completion runs one code block in the sandbox, against the same rollout with
tools off, and the share of the wall time spent waiting on the sandbox.

    python benchmarks/bench_tool_rollout.py [--prompts 16] [--group-size 8] [--repeats 3] [--workers 4]

The policy is the scripted stand-in of the tests (tests/tir_standin.py): a Qwen2 model sized like
the CPU default (4 layers, hidden 128, MLP 512; its extra layers compute and add nothing) whose
bigram weights make it write ```` ```python\\nprint(a * b)\\n``` ```` (a different product per
prompt), then, after the output block, "The answer is 42." and EOS. With tools off the same policy
writes a newline after the fence instead of getting an output: the same text less the output
block, so both rollouts decode the same number of policy tokens (5 vs 4 + the appended block,
which is prefilled, not decoded). The HF engine's decode loop samples both (seeded, temperature 1).
The sandbox pool is started and warmed before the timing (its start is reported apart).

What it measures is the multi-turn machinery and the sandbox on the rollout's critical path; the
share grows as decoding gets cheaper per completion (a real model writing hundreds of tokens per
turn spends relatively less in the sandbox). Numbers are this machine's, at its current load.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.tir_standin from this checkout

from pipeline.rollout.base import SamplingParams  # noqa: E402
from pipeline.rollout.hf_engine import HFEngine  # noqa: E402
from pipeline.rollout.tool_runner import ToolSettings  # noqa: E402
from tests.tir_standin import scripted_policy  # noqa: E402


def timed(engine, prompts, g, params, repeats):
    """(seconds per call, median; completions per call; tokens per call; sandbox wall seconds per call)."""
    seconds, sandbox = [], []
    groups = None
    for _ in range(repeats):
        waited = engine.tools.wall_s if engine.tools else 0.0
        t0 = time.perf_counter()
        groups = engine.generate(prompts, g, params)
        seconds.append(time.perf_counter() - t0)
        sandbox.append((engine.tools.wall_s if engine.tools else 0.0) - waited)
    completions = [s for group in groups for s in group]
    return statistics.median(seconds), len(completions), sum(len(s.completion_ids) for s in completions), \
        statistics.median(sandbox), completions


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workers", type=int, default=4, help="rollout.tool_workers (sandbox slots)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--backend", default="auto")
    args = ap.parse_args()
    pairs = [(1234 + 7 * k, 5678 + 11 * k) for k in range(args.prompts)]
    codes = [f"print({a} * {b})" for a, b in pairs]
    model, tok, prompts = scripted_policy(codes, newline_after_fence=True, layers=4, hidden=128, intermediate=512)
    params = SamplingParams(max_new_tokens=64, temperature=1.0, seed=0)
    tools = HFEngine(model, tok, batch_size=args.batch_size,
                     tools=ToolSettings(workers=args.workers, backend=args.backend))
    t0 = time.perf_counter()
    tools.tools.pool().warm()
    start = time.perf_counter() - t0
    plain = HFEngine(model, tok, batch_size=args.batch_size, decode="loop")
    plain.generate(prompts[:2], 2, params)  # warm-up of both (first forwards, the sandbox's first jobs)
    tools.generate(prompts[:2], 2, params)
    off_s, n_off, tok_off, _, _ = timed(plain, prompts, args.group_size, params, args.repeats)
    on_s, n_on, tok_on, box_s, done = timed(tools, prompts, args.group_size, params, args.repeats)
    tools.close()
    calls = sum(s.tool_stats["calls"] for s in done)
    right = sum(f"```output\n{a * b}\n```" in s.completion
                for (a, b), s in zip([p for p in pairs for _ in range(args.group_size)], done))
    print(f"backend {tools.tools.settings.backend}, {args.workers} sandbox slots (pool start + warm {start:.2f} s); "
          f"{args.prompts} prompts x G={args.group_size}, median of {args.repeats}")
    print(f"tools off: {off_s:.3f} s, {n_off / off_s:.1f} completions/s, {tok_off / off_s:.0f} tokens/s")
    print(f"tools on : {on_s:.3f} s, {n_on / on_s:.1f} completions/s, {tok_on / on_s:.0f} tokens/s "
          f"(tool tokens included), {calls} calls, {right}/{n_on} outputs right")
    print(f"ratio completions/s on/off: {off_s / on_s:.2f}; share of the tools-on wall time waiting on the "
          f"sandbox: {box_s / on_s:.1%} ({box_s:.3f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
