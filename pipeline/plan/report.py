"""The memory table of a run (`mathrl plan`, ``pipeline/stages/plan.py``): the settings the estimate
reads (``run_shape``) and the lines it prints (``render``): every component in GiB (2^30 bytes),
the peak of each phase of a step and whether the peak fits the GPU.
"""

from __future__ import annotations

from pipeline.config import RunConfig
from pipeline.plan.memory import GIB, Plan, RunShape, vllm_startup_free

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
TIGHT = 0.10  # headroom below this fraction of the GPU is reported as tight


def run_shape(cfg: RunConfig, ranks: int = 1, prompt_tokens: int = 512) -> RunShape:
    """The settings of ``cfg`` that the estimate reads."""
    model_bytes = DTYPE_BYTES[cfg.model.dtype]
    t, r = cfg.train, cfg.rollout
    return RunShape(
        model_bytes=model_bytes, master_bytes=4 if t.master_dtype == "float32" else model_bytes,
        micro_batch=t.micro_batch_size, prompt_tokens=prompt_tokens, completion_tokens=r.max_new_tokens,
        lora_rank=cfg.model.lora_r if cfg.model.lora else 0, lora_targets=tuple(cfg.model.lora_target_modules),
        reference=t.beta > 0, old_logprobs=t.updates_per_step > 1 or t.kl_in == "reward" or r.tis_cap > 0,
        gradient_checkpointing=cfg.model.gradient_checkpointing, ranks=ranks, fsdp=t.fsdp, engine=r.engine,
        gpu_memory_utilization=r.gpu_memory_utilization, sleep_mode=r.vllm_sleep_mode, hf_batch=r.batch_size,
        vllm_cuda_graphs=not r.vllm_enforce_eager)


def render(plan: Plan, cfg: RunConfig, run: RunShape, source: str, shape) -> list[str]:
    gib = plan.gpu_bytes / GIB
    trained = ("LoRA r=" + str(run.lora_rank) + " (" + format(plan.trainable, ",") + " parameters)"
               if run.lora_rank else "all weights")
    lines = [
        f"model {cfg.model.name_or_path}: {plan.params:,} parameters ({shape.num_layers} layers, hidden "
        f"{shape.hidden_size}, MLP {shape.intermediate_size}, vocab {shape.vocab_size:,}, "
        f"{'tied' if shape.tie_embeddings else 'untied'} embeddings; from {source})",
        f"training {trained}"
        f", model.dtype {cfg.model.dtype}, master {cfg.train.master_dtype}, {run.ranks} rank(s)"
        f"{', FSDP' if run.shards > 1 else ''}, micro-batch {run.micro_batch}, prompts <= {run.prompt_tokens} tokens "
        f"(--prompt-tokens), completions <= {run.completion_tokens}",
        "",
        f"{'component':<42} {'GiB':>8}  phases / note",
    ]
    for item in plan.items:
        when = ("every step" if set(item.phases) >= {"rollout", "sync", "log-probs", "update", "step"}
                else ", ".join(item.phases))
        lines.append(f"{item.name:<42} {item.bytes / GIB:>8.2f}  {when}; {item.note}")
    if plan.vllm:
        v = plan.vllm
        lines.append(f"  vLLM share: weights {v['weights'] / GIB:.2f} GiB, "
                     f"KV cache at most {v['kv_cache'] / GIB:.2f} GiB "
                     f"= {v['tokens']:,.0f} tokens = {v['sequences']:,.0f} sequences of "
                     f"{run.prompt_tokens + run.completion_tokens} tokens at once (a step samples "
                     f"{cfg.train.questions_per_step // max(run.ranks, 1) * cfg.rollout.group_size} per rank)")
    lines.append("")
    lines.append("phase peaks (GiB): " + ", ".join(f"{k} {b / GIB:.1f}" for k, b in plan.peaks().items()))
    headroom = plan.gpu_bytes - plan.peak
    verdict = "fits" if plan.fits else "does NOT fit"
    if plan.fits and headroom < TIGHT * plan.gpu_bytes:
        verdict += " (tight: under 10% headroom for allocator fragmentation and what this estimate leaves out)"
    lines.append(f"peak {plan.peak / GIB:.1f} GiB ({plan.peak_phase}) on a {gib:g} GiB GPU: {verdict}, "
                 f"headroom {headroom / GIB:.1f} GiB")
    if run.engine == "vllm" and plan.vllm:
        free = vllm_startup_free(plan)
        if plan.vllm["share"] > free:
            lines.append(f"vLLM start-up check fails: it asks for {plan.vllm['share'] / GIB:.1f} GiB but only "
                         f"{free / GIB:.1f} GiB are free after the policy and reference load; lower "
                         "rollout.gpu_memory_utilization")
    if plan.vllm and plan.vllm["kv_cache"] <= 0:
        lines.append("vLLM: gpu_memory_utilization x GPU does not even hold the weights; raise it")
    return lines
