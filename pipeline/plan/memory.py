"""GPU memory of one GRPO run, per component and per phase: pure arithmetic, no torch, no I/O.

The single source of the memory formulas the docs quote (docs/fsdp.md, docs/distributed.md,
docs/recipes.md). Inputs: a model's shape (``ModelShape``, from its config) and the run's
settings (``RunShape``, from the run config). Output: a ``Plan`` of byte counts.

What lives where, following the trainer's code (``pipeline/grpo``):
- Training state, resident all run: the policy's parameters in the master dtype (full fine-tuning
  with ``train.master_dtype=float32`` keeps float32 parameters and runs the forwards under bf16
  autocast: there is no separate bf16 copy at rest); their gradients, during the update only
  (``zero_grad(set_to_none=True)`` right after each optimizer step frees them, so they do not sit
  through the rollout);
  AdamW's two moments in the parameters' dtype; the full-FT reference copy when ``train.beta`` > 0
  (same dtype as the policy; under LoRA the reference is the adapter-disabled base: no copy). LoRA:
  the frozen base in ``model.dtype``, the adapter in float32 (peft), gradients and moments for the
  adapter only. Under FSDP every one of these is divided by the number of ranks.
- Update (log-probs with gradients, one micro-batch): the logits (only the completion positions
  reach the LM head) in the compute dtype, the float32 copy ``token_logprobs`` makes of them (kept
  for the backward of ``logsumexp``), backward temporaries of one 8-row chunk, the layer
  activations (with gradient checkpointing: each layer's float32 input plus one layer recomputed),
  autocast's bf16 copies of the float32 weights (cached for the whole forward), the LM head's
  weight gradient in the compute dtype, and the float32 temporaries of the policy entropy that the
  first update pass of a step computes (one chunk).
- Step (the optimizer step, after the backward: the activations are gone): the gradients and
  AdamW's ``foreach`` temporaries, one copy of the trainable parameters.
- Old/reference log-probs (no gradients): the logits and one chunk's float32 temporaries.
- Rollout: a colocated vLLM engine takes ``gpu_memory_utilization`` x the GPU (weights + KV cache),
  all run long unless sleep mode frees it outside ``generate``, plus an assumed allowance for what
  vLLM allocates outside that share (CUDA graphs, sampler and profiling buffers); the HF engine needs its KV cache
  and, under FSDP, the gathered full weights. The weight sync streams (``weights/export.py``): one
  bucket of weights in ``model.dtype`` (``SYNC_BUCKET_BYTES``, or the largest tensor when bigger)
  when it casts or merges, plus under FSDP the one full tensor being gathered (the largest: the
  embedding matrix, in the master dtype; gather temporaries are not counted).
- Under FSDP: the units being run are all-gathered (the root with the embeddings and LM head for
  the whole forward, about two decoder layers at a time), and at start-up every rank loads the full
  model (and builds the reference) before sharding.

Activation constants were measured on CPU with the tiny Qwen2 architecture (``tests/test_plan.py``
checks the estimate against a profiler measurement): per token and layer about ``30 h + 4.5 c I``
bytes (c = compute-dtype bytes), the logits pass with gradients ``6 E + 8 E_chunk`` bytes for E
bf16 logit elements (``12 E + 4 E_chunk`` in float32, where the float32 "copies" are views that keep
the logits alive and the backward builds full-size float32 gradient buffers).
"""

from __future__ import annotations

from dataclasses import dataclass, field

GIB = 1024 ** 3
LOGPROB_CHUNK = 8  # rows per float32 chunk in pipeline/grpo/logprobs.py::token_logprobs
LAYER_H_BYTES = 30  # saved bytes per token per layer per hidden unit (norms in float32, projections)
LAYER_I_FACTOR = 4.5  # saved elements per token per layer per MLP unit, times the compute-dtype bytes
RECOMPUTE_FACTOR = 1.5  # one checkpointed layer: its activations plus backward temporaries
CUDA_CONTEXT_BYTES = GIB // 2  # CUDA context + kernels of one process (an assumption, stated in output)
ENTROPY_CHUNK_BYTES = 4  # per element of one 8-row chunk: the entropy's float32 temporaries (first update pass)
# vLLM memory outside gpu_memory_utilization x GPU (CUDA graphs, sampler and profiling buffers): an
# assumption, not measured (no vLLM has run on a GPU here); with enforce_eager there are no graphs.
VLLM_ALLOWANCE_BYTES = {"graphs": GIB, "eager": GIB // 4}
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer of the Llama / Qwen2 family, as its config describes it."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    tie_embeddings: bool
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False

    def linears(self) -> dict[str, tuple[int, int, bool]]:
        """Per decoder layer: projection name -> (in features, out features, has bias)."""
        h, q, kv, i = self.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim, \
            self.intermediate_size
        return {"q_proj": (h, q, self.qkv_bias), "k_proj": (h, kv, self.qkv_bias), "v_proj": (h, kv, self.qkv_bias),
                "o_proj": (q, h, self.o_bias), "gate_proj": (h, i, self.mlp_bias),
                "up_proj": (h, i, self.mlp_bias), "down_proj": (i, h, self.mlp_bias)}

    def layer_params(self) -> int:
        """One decoder layer: the seven projections and two RMSNorm weights."""
        return sum(i * o + (o if b else 0) for i, o, b in self.linears().values()) + 2 * self.hidden_size

    def params(self) -> int:
        """All parameters: embeddings (shared with the LM head when tied), layers, final norm."""
        embed = self.vocab_size * self.hidden_size
        return embed * (1 if self.tie_embeddings else 2) + self.num_layers * self.layer_params() + self.hidden_size

    def lora_params(self, rank: int, targets: tuple[str, ...]) -> int:
        """peft LoRA parameters: r x in (lora_A) + out x r (lora_B) per targeted projection per layer."""
        unknown = sorted(set(targets) - set(LINEARS))
        if unknown:
            raise ValueError(f"LoRA target modules {unknown} are not projections of this architecture "
                             f"({', '.join(LINEARS)})")
        shapes = self.linears()
        return self.num_layers * sum(rank * (shapes[t][0] + shapes[t][1]) for t in set(targets))

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """Key + value cache of one token over all layers."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * dtype_bytes


@dataclass(frozen=True)
class RunShape:
    """The run settings the estimate depends on (built from a RunConfig by ``pipeline/plan/report.py``)."""

    model_bytes: int  # model.dtype: 2 (bf16/fp16) or 4
    master_bytes: int  # full-FT parameter dtype: 4 with master_dtype=float32, else model_bytes
    micro_batch: int
    prompt_tokens: int  # longest prompt in a micro-batch (the packed prompt width)
    completion_tokens: int  # rollout.max_new_tokens
    lora_rank: int = 0  # 0 = full fine-tuning
    lora_targets: tuple[str, ...] = LINEARS
    reference: bool = False  # train.beta > 0
    old_logprobs: bool = False  # a no-grad pass of the policy (mu > 1, KL in the reward, TIS)
    gradient_checkpointing: bool = True
    ranks: int = 1
    fsdp: bool = False
    engine: str = "hf"  # hf | vllm | vllm_server
    gpu_memory_utilization: float = 0.3
    sleep_mode: bool = False
    hf_batch: int = 64  # rollout.batch_size: sequences per HF generate chunk
    entropy: bool = True  # the first update pass also computes the policy entropy (the trainer always does)
    vllm_cuda_graphs: bool = True  # not rollout.vllm_enforce_eager

    @property
    def mixed(self) -> bool:
        """Float32 parameters with lower-precision forwards under autocast (precision.py)."""
        return self.lora_rank == 0 and self.master_bytes > self.model_bytes

    @property
    def compute_bytes(self) -> int:
        return self.model_bytes

    @property
    def shards(self) -> int:
        return self.ranks if self.fsdp and self.ranks > 1 else 1


@dataclass
class Item:
    name: str
    bytes: float
    phases: tuple[str, ...]  # the PHASES in which it is allocated
    note: str = ""


PHASES = ("start-up", "rollout", "sync", "log-probs", "update", "step")  # step: the optimizer step
SYNC_BUCKET_BYTES = 256 << 20  # weights/broadcast.py BUCKET_BYTES (not imported: no torch here; a test compares)
STEADY = PHASES[1:]  # every phase of a training step (start-up is before the first one)


@dataclass
class Plan:
    gpu_bytes: float
    params: int
    trainable: int
    items: list[Item] = field(default_factory=list)
    vllm: dict[str, float] = field(default_factory=dict)  # engine share, weights, kv cache, tokens

    def phase_bytes(self, phase: str) -> float:
        return sum(i.bytes for i in self.items if phase in i.phases)

    def peaks(self) -> dict[str, float]:
        return {p: self.phase_bytes(p) for p in PHASES if any(p in i.phases for i in self.items)}

    @property
    def peak(self) -> float:
        return max(self.peaks().values())

    @property
    def peak_phase(self) -> str:
        peaks = self.peaks()
        return max(peaks, key=peaks.get)

    @property
    def fits(self) -> bool:
        return self.peak <= self.gpu_bytes


def training_state(shape: ModelShape, run: RunShape) -> list[Item]:
    """Resident all run: parameters, gradients, AdamW moments, reference (sharded under FSDP)."""
    p, n = shape.params(), run.shards
    split = f" / {n} ranks" if n > 1 else ""
    if run.lora_rank:
        a = shape.lora_params(run.lora_rank, run.lora_targets)
        return [
            Item("policy weights (frozen base)", p * run.model_bytes / n, STEADY,
                 f"{p:,} x {run.model_bytes} B{split}"),
            Item("LoRA adapter (float32)", a * 4 / n, STEADY, f"{a:,} x 4 B{split}"),
            Item("gradients (adapter, float32)", a * 4 / n, ("update", "step"), "freed after each optimizer step"),
            Item("AdamW moments (adapter)", 2 * a * 4 / n, STEADY, "exp_avg + exp_avg_sq"),
            Item("reference model", 0, STEADY,
                 "none: the adapter-disabled base" if run.reference else "none: beta = 0"),
        ]
    w = run.master_bytes
    dtype = "float32 master" if run.mixed else f"{w} B"
    return [
        Item(f"policy weights ({dtype})", p * w / n, STEADY, f"{p:,} x {w} B{split}"),
        Item("gradients", p * w / n, ("update", "step"), "freed after each optimizer step"),
        Item("AdamW moments", 2 * p * w / n, STEADY, f"exp_avg + exp_avg_sq, 2 x {w} B{split}"),
        Item("reference model", p * w / n if run.reference else 0, STEADY,
             f"full-FT copy, {w} B{split}" if run.reference else "none: beta = 0"),
    ]


def logits_bytes(shape: ModelShape, run: RunShape, grad: bool) -> float:
    """The log-prob pass over the vocabulary for one micro-batch (pipeline/grpo/logprobs.py)."""
    c = 4 if (run.model_bytes == 4 and not run.mixed) else run.compute_bytes
    elems = run.micro_batch * run.completion_tokens * shape.vocab_size
    chunk = min(run.micro_batch, LOGPROB_CHUNK) * run.completion_tokens * shape.vocab_size
    if not grad:  # logits + one float32 chunk and the logsumexp temporary
        return elems * c + chunk * 4 * (1 if c == 4 else 2)
    if c == 4:  # float32: the chunks are views that keep the logits alive; full-size gradient buffers
        return elems * 12 + chunk * 4
    return elems * (c + 4) + chunk * 8


def entropy_bytes(shape: ModelShape, run: RunShape) -> float:
    """The entropy the first update pass computes (logprobs.py, no gradients): float32 temporaries of
    one chunk during the forward, beyond what the backward holds. Measured on CPU (tests/test_plan.py):
    +2.4 (one chunk) and +4.4 (two chunks) bytes per chunk element in bf16, nothing in float32, whose
    full-size float32 gradient buffers (12 E) outweigh the forward's chunk."""
    c = 4 if (run.model_bytes == 4 and not run.mixed) else run.compute_bytes
    if not run.entropy or c == 4:
        return 0
    return ENTROPY_CHUNK_BYTES * min(run.micro_batch, LOGPROB_CHUNK) * run.completion_tokens * shape.vocab_size


def optimizer_step_items(shape: ModelShape, run: RunShape) -> list[Item]:
    """AdamW's step with ``foreach`` (PyTorch's default on CUDA): its list of sqrt(exp_avg_sq) is
    one copy of the trainable parameters (measured on CPU: the step's peak is 1.00x their bytes)."""
    n = run.shards
    if run.lora_rank:
        trainable = shape.lora_params(run.lora_rank, run.lora_targets) * 4
    else:
        trainable = shape.params() * run.master_bytes
    return [Item("AdamW foreach temporaries", trainable / n, ("step",), "one trainable-size copy at the step")]


def layer_activation_bytes(shape: ModelShape, run: RunShape) -> float:
    """Saved activations of the decoder layers for one micro-batch with gradients."""
    tokens = run.micro_batch * (run.prompt_tokens + run.completion_tokens)
    c = run.compute_bytes if (run.mixed or run.lora_rank or run.model_bytes < 4) else 4
    per_layer = tokens * (LAYER_H_BYTES * shape.hidden_size + LAYER_I_FACTOR * c * shape.intermediate_size)
    if not run.gradient_checkpointing:
        return shape.num_layers * per_layer
    residual = run.master_bytes if run.lora_rank == 0 else run.model_bytes
    return shape.num_layers * tokens * shape.hidden_size * residual + RECOMPUTE_FACTOR * per_layer


def activation_items(shape: ModelShape, run: RunShape) -> list[Item]:
    p = shape.params()
    mb, t, v = run.micro_batch, run.completion_tokens, shape.vocab_size
    items = [
        Item("logits + float32 copies (grad)", logits_bytes(shape, run, grad=True), ("update",),
             f"{mb} x {t} x {v:,}: compute dtype + float32, 8-row chunk temporaries"),
        Item("layer activations", layer_activation_bytes(shape, run), ("update",),
             f"{mb} x {run.prompt_tokens + t} tokens, "
             + ("checkpointed" if run.gradient_checkpointing else "no gradient checkpointing")),
        Item("LM-head weight gradient (compute dtype)", v * shape.hidden_size * run.compute_bytes
             if run.mixed else 0, ("update",), "cast back to the float32 .grad"),
        Item("entropy temporaries (first update pass)", entropy_bytes(shape, run), ("update",),
             "float32, one 8-row chunk" if run.entropy else "entropy not computed"),
        Item("logits, no-grad pass", logits_bytes(shape, run, grad=False)
             if (run.reference or run.old_logprobs) else 0, ("log-probs",),
             "old / reference log-probs" if (run.reference or run.old_logprobs) else "not needed"),
    ]
    if run.mixed:  # autocast caches a bf16 copy of every float32 leaf weight until the forward ends
        phases = ("update", "log-probs") + (("rollout",) if run.engine == "hf" else ())
        items.append(Item("autocast bf16 weight copies", p * run.compute_bytes, phases,
                          "whole model, not sharded: cached per forward"))
    return items


def rollout_items(shape: ModelShape, run: RunShape, gpu_bytes: float) -> tuple[list[Item], dict[str, float]]:
    p, n = shape.params(), run.shards
    seq = run.prompt_tokens + run.completion_tokens
    kv_token = shape.kv_bytes_per_token(run.model_bytes)
    items, vllm = [], {}
    if run.engine == "vllm":
        share = run.gpu_memory_utilization * gpu_bytes
        weights = p * run.model_bytes
        kv = max(0.0, share - weights)
        vllm = {"share": share, "weights": weights, "kv_cache": kv, "tokens": kv / kv_token,
                "sequences": kv / kv_token / seq}
        items.append(Item(f"vLLM engine ({run.gpu_memory_utilization:g} x GPU)", share,
                          ("rollout",) if run.sleep_mode else STEADY,
                          "weights + KV cache; " + ("sleeps outside generate" if run.sleep_mode else "held all run")))
        graphs = "graphs" if run.vllm_cuda_graphs else "eager"
        items.append(Item("vLLM outside its share (assumed)", VLLM_ALLOWANCE_BYTES[graphs], STEADY,
                          ("CUDA graphs, " if run.vllm_cuda_graphs else "enforce_eager, ")
                          + "sampler and profiling buffers"))
        if run.sleep_mode:
            items.append(Item("vLLM weights woken for the sync", weights, ("sync",),
                              "sleep mode: KV cache stays freed"))
    elif run.engine == "hf":
        items.append(Item("HF generate KV cache", run.hf_batch * seq * kv_token, ("rollout",),
                          f"{run.hf_batch} sequences x {seq} tokens x {kv_token:,} B"))
        if n > 1:
            items.append(Item("gathered full weights (FSDP generate)", p * run.master_bytes, ("rollout",),
                              "fsdp.gathered around each generate call"))
    if run.engine in ("vllm", "vllm_server"):
        # streamed: every rank gathers one full tensor at a time under FSDP (also for vllm_server,
        # whose other ranks drop theirs); a bucket of cast or merged tensors is alive at a time
        largest = shape.vocab_size * shape.hidden_size
        gathered = largest * (run.model_bytes if run.lora_rank else run.master_bytes) if n > 1 else 0
        copies = run.lora_rank or run.mixed or n > 1
        bucket = max(min(SYNC_BUCKET_BYTES, p * run.model_bytes), largest * run.model_bytes) if copies else 0
        if gathered + bucket:
            items.append(Item("weight sync bucket (streamed)", gathered + bucket, ("sync",),
                              "one bucket" + (" + one gathered tensor" if gathered else "")))
    return items, vllm


def fsdp_gather_items(shape: ModelShape, run: RunShape) -> list[Item]:
    """FSDP2 all-gathers a unit's full weights while it runs: the root (embeddings, LM head, final
    norm) for the whole forward, and about two decoder layers (the current one and the prefetched)."""
    if run.shards == 1:
        return []
    w = run.model_bytes if run.lora_rank else run.master_bytes
    root = shape.vocab_size * shape.hidden_size * (1 if shape.tie_embeddings else 2) + shape.hidden_size
    return [Item("FSDP gathered weights (root + 2 layers)", (root + 2 * shape.layer_params()) * w,
                 ("update", "log-probs"), "unsharded while a unit runs")]


def startup_items(shape: ModelShape, run: RunShape) -> list[Item]:
    """FSDP: each rank loads the full model (and builds the reference) before sharding."""
    if run.shards == 1:
        return []
    p = shape.params()
    w = run.model_bytes if run.lora_rank else run.master_bytes
    full = p * w * (2 if (run.reference and not run.lora_rank) else 1)
    return [Item("full model before sharding", full, ("start-up",), "every rank loads it, then shards")]


def estimate(shape: ModelShape, run: RunShape, gpu_bytes: float, context_bytes: float = CUDA_CONTEXT_BYTES) -> Plan:
    """Every component's bytes and the phases it is allocated in."""
    if run.micro_batch < 1 or run.completion_tokens < 1 or run.prompt_tokens < 0:
        raise ValueError("micro_batch and completion_tokens must be >= 1, prompt_tokens >= 0")
    if run.engine not in ("hf", "vllm", "vllm_server"):
        raise ValueError(f"unknown engine {run.engine!r}")
    p = shape.params()
    trainable = shape.lora_params(run.lora_rank, run.lora_targets) if run.lora_rank else p
    plan = Plan(gpu_bytes=gpu_bytes, params=p, trainable=trainable)
    plan.items += training_state(shape, run)
    startup = startup_items(shape, run)
    plan.items.append(Item("CUDA context (assumed)", context_bytes, PHASES if startup else STEADY,
                           "per process, outside PyTorch's allocator"))
    plan.items += activation_items(shape, run) + optimizer_step_items(shape, run) + fsdp_gather_items(shape, run)
    rollout, plan.vllm = rollout_items(shape, run, gpu_bytes)
    plan.items += rollout + startup
    return plan


def vllm_startup_free(plan: Plan) -> float:
    """GPU memory free when the colocated engine starts (after the policy and reference load, before
    the first step allocates gradients and AdamW state): vLLM refuses to start if
    gpu_memory_utilization x GPU is more than this."""
    loaded = sum(i.bytes for i in plan.items if i.name.startswith(("policy weights", "LoRA adapter", "reference",
                                                                      "CUDA context")))
    return plan.gpu_bytes - loaded
