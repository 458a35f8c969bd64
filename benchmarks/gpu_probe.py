"""`make gpu-probe`: the training path at the recipes' real model sizes, random weights, one call.

    python3 benchmarks/gpu_probe.py                  # device auto: the recipes' sizes on a GPU
    python3 benchmarks/gpu_probe.py --device cpu     # what CI runs (--size auto = small on the CPU: tiny shapes)
    make gpu-probe [device=cpu] [size=small|real]

`make gpu-smoke` proves devices and dtypes on a 104k-parameter model; this proves memory and speed
at the sizes the GPU recipes use, without a download: each model is built with random weights from
the architecture snapshot `mathrl plan` reads (pipeline/plan/models/), so it needs only torch,
transformers and peft (no datasets, no vLLM, no network) and runs from the checkout.

Cases (each from its recipe's own config, so micro-batch, lengths, LoRA and dtypes are the recipe's):
- lora-0.5b: configs/gsm8k_qwen2.5_0.5b.yaml (LoRA r=32, micro-batch 8, 512 + 1,024 tokens, the
  reference is the adapter-disabled base);
- full-0.5b-ref: the same recipe with full fine-tuning and a reference copy (train.beta=0.04);
- full-1.5b-3000: configs/math_qwen2.5_math_1.5b.yaml (full fine-tuning, micro-batch 2, 512 + 3,000).

Each case runs what the trainer runs for one micro-batch (pipeline/grpo: left-padded packing,
``token_logprobs`` with entropy under the recipe's autocast, the objective's loss, backward, grad
clipping, AdamW) after one warm-up update (so AdamW's moments exist, as in every step but the
first), and measures per phase the peak of ``torch.cuda.max_memory_allocated`` against the
`mathrl plan` figure of the same phase (without its assumed CUDA context, which the allocator does
not see): rollout (HF generate through the project's HFEngine, with tokens/s), log-probs (the
no-grad reference pass), update (forward and backward, with seconds per micro-batch) and step (grad
clipping and AdamW, with its seconds). It also
checks that log-probs with left padding are finite, both with the project's masks
(pipeline/masks.py) and with the plain 2D padding mask of before, and runs each SDPA backend
on a mask with fully masked rows and on the project's mask. A JSON is written after every case
(a timeout keeps what finished; `--out`, default $OUT/gpu_probe.json or runs/gpu-probe/), and the
last line is `gpu-probe: ok=N/M ...`; the exit code is non-zero when a case fails. Memory above
the plan is reported, not failed: the probe measures, `mathrl plan` is what it checks.

On the CPU (`--size small`, tiny shapes) it proves the probe's code, not memory or speed.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local
os.environ.setdefault("TQDM_DISABLE", "1")

GIB = 1024 ** 3
CASES = {  # name -> (recipe, overrides)
    "lora-0.5b": ("configs/gsm8k_qwen2.5_0.5b.yaml", []),
    "full-0.5b-ref": ("configs/gsm8k_qwen2.5_0.5b.yaml", ["model.lora=false", "train.beta=0.04"]),
    "full-1.5b-3000": ("configs/math_qwen2.5_math_1.5b.yaml", []),
}
PROMPT_TOKENS = 512  # `mathrl plan`'s default prompt length
SIZES = {  # shape changes, lengths and the generate call per size
    "real": {"model": {}, "prompt": PROMPT_TOKENS, "completion": None, "gen_rows": 64, "gen_tokens": 128},
    "small": {"model": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
                        "num_key_value_heads": 1, "vocab_size": 512},
              "prompt": 16, "completion": 24, "gen_rows": 8, "gen_tokens": 8},
}


def case_config(name: str, device: str, size: str):
    from pipeline.config import load_run_config

    recipe, overrides = CASES[name]
    extra = [] if SIZES[size]["completion"] is None else [f"rollout.max_new_tokens={SIZES[size]['completion']}"]
    return load_run_config(ROOT / recipe, [f"device={device}", *overrides, *extra])


def random_policy(cfg, size: str, device: str):
    """(policy, reference or None, transformers config): random weights in the recipe's dtypes."""
    import copy

    import torch
    from transformers import AutoModelForCausalLM

    from pipeline.grpo import precision
    from pipeline.grpo.components import needs_reference
    from pipeline.models import apply_lora
    from pipeline.plan.shapes import load_config

    config, _ = load_config(cfg.model.name_or_path)
    for key, value in SIZES[size]["model"].items():
        setattr(config, key, value)
    config.head_dim = config.hidden_size // config.num_attention_heads
    dtype = getattr(torch, cfg.model.dtype if cfg.model.lora else precision.master_dtype(cfg))
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    ref = None
    if cfg.model.lora:
        model = apply_lora(model, cfg.model)
        ref = model if needs_reference(cfg) else None
    elif needs_reference(cfg):
        ref = copy.deepcopy(model).requires_grad_(False).eval()
    if cfg.model.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    return model.train(), ref, config


def batch(rows: int, prompt: int, completion: int, vocab: int, seed: int):
    """Left-padded episodes: prompt lengths in [prompt / 2, prompt], completions in [completion / 2,
    completion], the longest of each present (the width the planner assumes)."""
    import torch

    from pipeline.grpo.episodes import Episode, pack

    g = torch.Generator().manual_seed(seed)
    out = []
    for r in range(rows):
        lp = prompt if r == 0 else int(torch.randint(max(1, prompt // 2), prompt + 1, (1,), generator=g))
        lc = completion if r == rows - 1 else int(torch.randint(max(1, completion // 2), completion + 1, (1,),
                                                                generator=g))
        out.append(Episode(problem_id=str(r), group=r, sample=0, prompt="", completion="", finish_reason="length",
                           gold="", prompt_ids=torch.randint(2, vocab, (lp,), generator=g).tolist(),
                           completion_ids=torch.randint(2, vocab, (lc,), generator=g).tolist()))
    return pack(out, pad_id=0)


class Meter:
    """Peak allocated bytes and seconds of one phase (memory only on CUDA)."""

    def __init__(self, device: str):
        import torch

        self.torch, self.cuda = torch, device.startswith("cuda")

    def __enter__(self):
        if self.cuda:
            self.torch.cuda.synchronize()
            self.torch.cuda.reset_peak_memory_stats()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            self.torch.cuda.synchronize()
        self.seconds = time.perf_counter() - self.t0
        self.peak = self.torch.cuda.max_memory_allocated() if self.cuda else None


def update(cfg, policy, packed, ref_logp, opt, rows: slice, meter_device: str) -> dict:
    """One micro-batch as trainer._mini_batch_step runs it, then the optimizer step; timings."""
    import torch

    from pipeline.grpo import objective
    from pipeline.grpo.logprobs import token_logprobs
    from pipeline.grpo.precision import autocast_for
    from pipeline.parallel.fsdp import clip_grad_norm

    mask = packed.completion_mask[rows].to(next(policy.parameters()).device)
    advantages = torch.linspace(-1, 1, mask.shape[0], device=mask.device)
    opt.zero_grad(set_to_none=True)
    with Meter(meter_device) as fwd:
        with autocast_for(cfg):
            logp, ent = token_logprobs(policy, packed, rows, cfg.rollout.temperature, entropy=True,
                                       layout=cfg.train.forward_layout)
        loss, _ = objective.loss(cfg, logp, logp.detach(), ref_logp, advantages, mask, None)
        loss.backward()
    with Meter(meter_device) as step:
        params = [p for p in policy.parameters() if p.requires_grad]
        norm = clip_grad_norm(params, cfg.train.max_grad_norm or float("inf"))
        opt.step()
        opt.zero_grad(set_to_none=True)
    return {"loss": float(loss.detach()), "grad_norm": float(norm), "entropy_finite": bool(torch.isfinite(ent).all()),
            "micro_batch_s": fwd.seconds, "optimizer_step_s": step.seconds,
            "peak": fwd.peak, "step_peak": step.peak}


def plain_mask_logprobs(policy, packed, rows, cfg) -> bool:
    """Whether the forward with the plain 2D padding mask (before pipeline/masks.py) gives finite
    log-probs of the real completion tokens."""
    import torch

    from pipeline.grpo.precision import autocast_for

    device = next(policy.parameters()).device
    p = packed.prompt_width
    with torch.no_grad(), autocast_for(cfg):
        logits = policy(input_ids=packed.input_ids[rows].to(device),
                        attention_mask=packed.attention_mask[rows].to(device),
                        position_ids=packed.position_ids[rows].to(device), use_cache=False,
                        logits_to_keep=packed.input_ids.shape[1] - p + 1).logits[:, :-1].float()
    real = packed.completion_mask[rows].bool().to(device)
    return bool(torch.isfinite(logits[real]).all())


def sdpa_backends(config, dtype, device: str) -> dict:
    """Each SDPA backend on a left-padded mask with fully masked rows ("plain") and on the project's
    mask ("ours"): finite / NaN where / not supported here."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from pipeline.masks import causal_mask

    torch.manual_seed(0)
    heads, dim, length = config.num_attention_heads, config.head_dim, 16
    q, k, v = (torch.randn(2, heads, length, dim, dtype=dtype, device=device) for _ in range(3))
    attention = torch.ones(2, length, dtype=torch.long, device=device)
    attention[0, :5] = 0  # row 0: five left-pad positions, whose queries see no key under the plain mask
    plain = (torch.ones(length, length, dtype=torch.bool, device=device).tril()[None] & attention.bool()[:, None, :])
    masks = {"plain": plain[:, None], "ours": causal_mask(attention)}
    pad_rows = ~attention.bool()  # [2, L] query rows that are padding
    out = {}
    for backend in (SDPBackend.MATH, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                    SDPBackend.CUDNN_ATTENTION):
        for kind, mask in masks.items():
            try:
                with sdpa_kernel(backend):
                    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
                finite = torch.isfinite(o.float()).all(dim=(1, 3))  # [2, L] per query row
                verdict = ("finite" if bool(finite.all()) else
                           "NaN/inf in real rows" if bool((~finite & ~pad_rows).any()) else "NaN/inf in pad rows only")
            except RuntimeError as e:
                verdict = "not supported: " + (str(e).strip().splitlines() or [""])[0][:80]
            out[f"{backend.name.lower()}/{kind}"] = verdict
    return out


class ProbeTokenizer:
    """What HFEngine asks of a tokenizer, for prompts that are already token ids ("12 7 99")."""

    pad_token_id, pad_token = 0, "<pad>"

    def __init__(self, vocab: int):
        self.eos_token_id = vocab - 1  # a random model rarely samples it: generation runs to the budget

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        return {"input_ids": [int(t) for t in text.split()]}

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return " ".join(map(str, ids))


def rollout(cfg, policy, vocab: int, size: str, device: str) -> dict:
    """HF generate (the project's HFEngine, seeded sampling) of gen_rows left-padded prompts."""
    from pipeline.grpo.precision import autocast_for
    from pipeline.rollout.base import SamplingParams
    from pipeline.rollout.hf_engine import HFEngine

    s = SIZES[size]
    packed = batch(s["gen_rows"], s["prompt"], 1, vocab - 1, seed=7)
    prompts = [" ".join(map(str, ids[m.bool()].tolist())) for ids, m in
               zip(packed.input_ids[:, :packed.prompt_width], packed.attention_mask[:, :packed.prompt_width])]
    engine = HFEngine(policy, ProbeTokenizer(vocab), batch_size=s["gen_rows"])
    params = SamplingParams(max_new_tokens=s["gen_tokens"], temperature=cfg.rollout.temperature, seed=0)
    with Meter(device) as m, autocast_for(cfg):
        samples = engine.generate(prompts, 1, params)
    tokens = sum(len(g[0].completion_ids) for g in samples)
    del engine
    return {"rows": len(prompts), "new_tokens": tokens, "seconds": m.seconds, "tokens_per_s": tokens / m.seconds,
            "peak": m.peak, "_plan_shape": (len(prompts), s["gen_tokens"])}


def plan_phases(cfg, config, prompt: int, gpu_bytes: float, rollout_shape) -> dict:
    """`mathrl plan`'s bytes per phase for this case's model ``config`` (CUDA context left out) as the
    probe runs it: with the HF engine (no vLLM share in this process), the rollout phase planned for
    the generate call it makes; and the recipe's own peak (with its engine) for reference."""
    from pipeline.plan.memory import estimate
    from pipeline.plan.report import run_shape
    from pipeline.plan.shapes import shape_from_config

    shape = shape_from_config(config)
    run = run_shape(cfg, prompt_tokens=prompt)
    recipe = estimate(shape, run, gpu_bytes, context_bytes=0)
    plan = estimate(shape, dataclasses.replace(run, engine="hf"), gpu_bytes, context_bytes=0)
    hf = estimate(shape, dataclasses.replace(run, engine="hf", hf_batch=rollout_shape[0],
                                             completion_tokens=rollout_shape[1]), gpu_bytes, context_bytes=0)
    return {"update": plan.phase_bytes("update"), "step": plan.phase_bytes("step"),
            "log-probs": plan.phase_bytes("log-probs"),
            "rollout (hf, this call)": hf.phase_bytes("rollout"), "recipe peak": recipe.peak,
            "recipe peak phase": recipe.peak_phase}


def run_case(name: str, device: str, size: str, gpu_bytes: float) -> dict:
    import torch

    from pipeline.grpo.components import build_optimizer, reference_mode
    from pipeline.grpo.logprobs import token_logprobs
    from pipeline.grpo.precision import autocast_for

    cfg = case_config(name, device, size)
    s = SIZES[size]
    policy, ref, config = random_policy(cfg, size, device)
    compute = getattr(torch, cfg.model.dtype)
    result = {"case": name, "recipe": CASES[name][0], "overrides": CASES[name][1],
              "model": cfg.model.name_or_path + ("" if size == "real" else " (small shape)"),
              "params": sum(p.numel() for p in policy.parameters()),
              "trainable": sum(p.numel() for p in policy.parameters() if p.requires_grad),
              "lora": cfg.model.lora, "reference": ref is not None, "micro_batch": cfg.train.micro_batch_size,
              "prompt_tokens": s["prompt"], "completion_tokens": cfg.rollout.max_new_tokens}
    packed = batch(cfg.train.micro_batch_size, s["prompt"], cfg.rollout.max_new_tokens, config.vocab_size, seed=1)
    rows = slice(None)
    opt, _ = build_optimizer(cfg, policy)
    ref_logp = None
    if ref is not None:
        with torch.no_grad(), reference_mode(policy, ref) as r, autocast_for(cfg):
            ref_logp = token_logprobs(r, packed, rows, cfg.rollout.temperature)
    warm = update(cfg, policy, packed, ref_logp, opt, rows, device)  # AdamW state now exists, as at every later step
    phases = {}
    gen = rollout(cfg, policy, config.vocab_size, size, device)
    phases["rollout (hf, this call)"] = gen.pop("peak")
    if ref is not None:
        with Meter(device) as m, torch.no_grad(), reference_mode(policy, ref) as r, autocast_for(cfg):
            ref_logp = token_logprobs(r, packed, rows, cfg.rollout.temperature)
        phases["log-probs"] = m.peak
    timed = update(cfg, policy, packed, ref_logp, opt, rows, device)
    phases["update"] = timed.pop("peak")
    phases["step"] = timed.pop("step_peak")
    real = packed.completion_mask.bool()
    with torch.no_grad(), autocast_for(cfg):
        logp = token_logprobs(policy, packed, rows, cfg.rollout.temperature)
    planned = plan_phases(cfg, config, s["prompt"], gpu_bytes, gen.pop("_plan_shape"))
    result.update({
        "logprobs_finite_left_padded": bool(torch.isfinite(logp[real.to(logp.device)]).all()),
        "plain_mask_logprobs_finite": plain_mask_logprobs(policy, packed, rows, cfg),
        "loss_finite": math.isfinite(warm["loss"]) and math.isfinite(timed["loss"]),
        "grad_norm_finite": math.isfinite(warm["grad_norm"]) and math.isfinite(timed["grad_norm"]),
        "entropy_finite": timed["entropy_finite"],
        "seconds": {"micro_batch_fwd_bwd": timed["micro_batch_s"], "optimizer_step": timed["optimizer_step_s"],
                    "update_one_micro_batch": timed["micro_batch_s"] + timed["optimizer_step_s"]},
        "generate": gen,
        "memory_gib": {phase: {"measured": None if b is None else b / GIB, "plan": planned[phase] / GIB}
                       for phase, b in phases.items()},
        "plan_recipe_peak_gib": {"bytes": planned["recipe peak"] / GIB, "phase": planned["recipe peak phase"]},
        "sdpa_backends": sdpa_backends(config, compute, device),
    })
    del policy, ref, opt, packed, ref_logp, logp
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return result


def problems_of(result: dict) -> list[str]:
    """What makes a case fail (memory above the plan does not: it is reported)."""
    out = [k for k in ("logprobs_finite_left_padded", "loss_finite", "grad_norm_finite", "entropy_finite")
           if not result.get(k)]
    out += [f"sdpa {k}: {v}" for k, v in result.get("sdpa_backends", {}).items()
            if k.endswith("/ours") and v.startswith("NaN")]
    if not result.get("generate", {}).get("new_tokens"):
        out.append("generate made no tokens")
    return out


def summary(result: dict) -> str:
    if "error" in result:
        return f"{result['case']} FAIL {result['error']}"
    mem = result["memory_gib"]
    over = [p for p, v in mem.items() if v["measured"] is not None and v["measured"] > v["plan"]]
    peak = (f"update {mem['update']['measured']:.1f}/{mem['update']['plan']:.1f} GiB measured/plan"
            if mem["update"]["measured"] is not None else "memory n/a on cpu")
    status = "ok" if not result["problems"] else "FAIL " + "; ".join(result["problems"])
    return (f"{result['case']} {status}, {peak}{', over plan: ' + '/'.join(over) if over else ''}, "
            f"{result['seconds']['update_one_micro_batch']:.2f} s/update, "
            f"{result['generate']['tokens_per_s']:.0f} gen tok/s, plain-mask log-probs "
            f"{'finite' if result['plain_mask_logprobs_finite'] else 'NOT finite'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--size", default="auto", choices=("auto", *SIZES), help="auto: small on the CPU, else real")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of " + ", ".join(CASES))
    parser.add_argument("--out", default=None, help="JSON path (default $OUT/gpu_probe.json, else runs/gpu-probe/)")
    parser.add_argument("--budget-s", type=float, default=330.0, help="start no case after this many seconds")
    args = parser.parse_args(argv)
    import torch

    from pipeline.device import DeviceError, resolve_device

    try:
        device = resolve_device(args.device)
    except DeviceError as e:
        print(f"gpu-probe: {e}")
        return 2
    size = args.size if args.size != "auto" else ("small" if device == "cpu" else "real")
    out = Path(args.out or (Path(os.environ["OUT"]) / "gpu_probe.json" if os.environ.get("OUT")
                            else ROOT / "runs" / "gpu-probe" / "gpu_probe.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.get_device_name(0) if device.startswith("cuda") else "no GPU (memory not measured)"
    gpu_bytes = torch.cuda.get_device_properties(0).total_memory if device.startswith("cuda") else 80 * GIB
    report = {"device": device, "gpu": gpu, "torch": torch.__version__, "size": size, "cases": []}
    import transformers

    report["transformers"] = transformers.__version__
    print(f"gpu-probe: device={device} ({gpu}), torch {torch.__version__}, transformers {transformers.__version__}, "
          f"size={size}, JSON {out}", flush=True)
    t0 = time.monotonic()
    for name in [c for c in args.cases.split(",") if c]:
        if name not in CASES:
            print(f"gpu-probe: unknown case {name!r} ({', '.join(CASES)})")
            return 2
        if time.monotonic() - t0 > args.budget_s:
            result = {"case": name, "error": f"skipped: past the {args.budget_s:g} s budget", "problems": ["skipped"]}
        else:
            c0 = time.monotonic()
            try:
                result = run_case(name, device, size, gpu_bytes)
                result["problems"] = problems_of(result)
            except Exception as e:  # noqa: BLE001 - one line per case, whatever broke
                msg = str(e).strip().splitlines()
                result = {"case": name, "error": f"{type(e).__name__}: {msg[0][:300] if msg else ''}",
                          "problems": ["error"]}
                gc.collect()
                if device.startswith("cuda"):
                    torch.cuda.empty_cache()
            result["case_s"] = time.monotonic() - c0
        report["cases"].append(result)
        out.write_text(json.dumps(report, indent=1))  # after every case: a timeout keeps what finished
        print(f"gpu-probe: {summary(result)}, {result.get('case_s', 0):.0f} s", flush=True)
    ok = sum(not r["problems"] for r in report["cases"])
    report["ok"], report["seconds"] = ok, time.monotonic() - t0
    out.write_text(json.dumps(report, indent=1))
    print(f"gpu-probe: ok={ok}/{len(report['cases'])} in {report['seconds']:.0f} s on {device} ({gpu}); {out}")
    return 0 if ok == len(report["cases"]) else 1


if __name__ == "__main__":
    sys.exit(main())
