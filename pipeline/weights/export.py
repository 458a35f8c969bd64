"""The policy's weights as a rollout engine loads them: Hugging Face names, LoRA merged in, streamed.

``hf_weights(model)`` yields (name, tensor) pairs in the names of a Hugging Face checkpoint of
the model's architecture, which is what vLLM's ``load_weights`` maps onto its fused layers. A
peft LoRA model yields the *merged* weights W + (alpha/r) B A, computed without touching the
model, so an engine needs no LoRA support.

Every path streams: a tensor is made when it is yielded (a LoRA merge, an FSDP gather, a cast)
and nothing keeps it afterwards, so a consumer that groups the stream into ``weight_buckets``
holds at most one bucket of extra memory, not a copy of the model (TRL and verl sync one
``full_tensor()`` at a time). An FSDP-sharded model (DTensor parameters) is gathered one tensor
at a time, its LoRA merges from the gathered A and B: each gather is a collective, so every rank
iterates the whole stream in the same order, also ranks that throw the tensors away.
``hf_specs(model)`` gives the names and shapes without making any tensor, and
``expected_weights(path)`` the same for a model that is not loaded (built on the meta device),
which is how the vLLM server knows what a trainer must send.

Used by the colocated vLLM engine, the vLLM server client and the server; imports no engine.
"""

from __future__ import annotations

import torch

__all__ = ["hf_weights", "hf_specs", "weight_buckets", "expected_weights"]


def hf_weights(model, state: dict | None = None):
    """(name, tensor) pairs in Hugging Face checkpoint names, made one at a time; peft LoRA layers
    come merged.

    ``state``: read names and tensors from this state dict instead of ``model.state_dict()``
    (meta tensors give names and shapes only; a gathered full state works too). Sharded (DTensor)
    tensors are gathered when yielded, and LoRA merges W + scaling * B A of a sharded model or of a
    given ``state`` read its A and B (``_gathered_merges``; the module's own are shards). peft
    ``modules_to_save`` copies replace their original module; DoRA is refused (its merge is not
    W + delta)."""
    from peft import PeftModel
    from peft.tuners.lora import LoraLayer

    source = model.state_dict() if state is None else state  # FSDP2: the shards, nothing gathered yet
    if not isinstance(model, PeftModel):
        yield from ((n, _full(t)) for n, t in source.items())
        return
    if state is not None or _is_sharded(source):
        yield from _peft_names(model, source, _gathered_merges(model, source))
        return
    merges = {}
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer):
            # Embedding LoRA layers keep their adapters in lora_embedding_A/B
            active = [a for a in module.active_adapters
                      if a in module.lora_A or a in getattr(module, "lora_embedding_A", {})]
            if any(module.use_dora.get(a, False) for a in active):
                raise NotImplementedError("vLLM weight sync: DoRA adapters are not supported")
            if active and not module.merged and not module.disable_adapters:  # computed when yielded
                merges[name + ".base_layer.weight"] = lambda module=module, active=active: sum(
                    module.get_delta_weight(a) for a in active)
    yield from _peft_names(model, source, merges)


def hf_specs(model) -> list[tuple[str, torch.dtype, tuple[int, ...]]]:
    """(name, dtype, shape) of what ``hf_weights(model)`` yields, in its order, without making,
    gathering or merging any tensor (a merge keeps its base weight's shape and dtype)."""
    from peft import PeftModel

    state = {k: torch.empty(v.shape, dtype=v.dtype, device="meta") for k, v in model.state_dict().items()}
    named = _peft_names(model, state, {}) if isinstance(model, PeftModel) else state.items()
    return [(n, t.dtype, tuple(t.shape)) for n, t in named]


def weight_buckets(named, bucket_bytes: int, dtype: torch.dtype | None = None):
    """``named`` (name, tensor) pairs, each cast to ``dtype`` (if given) as it arrives, grouped into
    lists of at most ``bucket_bytes`` (a larger tensor gets a list of its own). Lazy: while the
    consumer holds one list, nothing else of the stream exists, so a sync's extra memory is one
    bucket (plus the source tensor being cast), not a model."""
    bucket, size = [], 0
    for name, tensor in named:
        n = tensor.numel() * (dtype or tensor.dtype).itemsize
        if bucket and size + n > bucket_bytes:
            yield bucket  # before this tensor is cast: the consumer never holds a full bucket and the next copy
            bucket, size = [], 0
        tensor = tensor.detach()
        bucket.append((name, tensor if dtype is None else tensor.to(dtype)))
        size += n
    if bucket:
        yield bucket


def _is_sharded(state: dict) -> bool:
    from torch.distributed.tensor import DTensor

    return any(isinstance(t, DTensor) for t in state.values())


def _full(t: torch.Tensor) -> torch.Tensor:
    """A sharded (FSDP2 DTensor) tensor gathered in full on its device (a collective); others as they are."""
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


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
        tensor = _full(tensor)
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
            _delta(_full(state[f"{name}.lora_A.{a}.weight"]), _full(state[f"{name}.lora_B.{a}.weight"]), module, a)
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


def expected_weights(model_path: str) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every tensor in the model's Hugging Face state dict, built on the meta
    device (no memory): what ``hf_weights`` yields for the same architecture."""
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_path))
    return [(n, tuple(t.shape)) for n, t in model.state_dict().items()]
