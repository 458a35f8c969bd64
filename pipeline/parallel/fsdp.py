"""Sharded data parallelism (FSDP2) for GRPO: `torchrun ... -m pipeline train train.fsdp=true`.

With ``train.fsdp=true`` and more than one rank, each decoder layer and the root module are
wrapped with ``torch.distributed.fsdp.fully_shard``: every rank keeps 1/N of each parameter, of
its gradient and of the AdamW moments, and all-gathers a layer's full weights only while that
layer runs. The rest of the data-parallel scheme is the one in ``distributed.py`` (questions
sharded, groups local, losses scaled with GLOBAL counts); what changes:

1. Gradients are reduce-scattered by FSDP in every backward instead of all-reduced once per
   step. FSDP averages by default; the trainer's losses are scaled so that the SUM over ranks is
   the single-process gradient, so every FSDP module is set to sum (divide factor 1, plain SUM
   reduction, which every backend including gloo supports). Micro-batches are reduced one by one
   (no ``set_requires_gradient_sync(False)``): it keeps only sharded gradients between backward
   passes, which is the point when the model does not fit one device.
2. Gradient clipping: ``clip_grad_norm_`` on the sharded (DTensor) gradients computes the norm
   over all shards; ``clip_grad_norm`` returns it as a plain tensor.
3. Every forward of a sharded module is a collective, so all ranks must run the same number of
   forwards: same micro-batch count (equal shares), same number of ``generate`` calls and chunks
   (the HF engine runs with ``synced_gpus=True``, so ranks whose sequences ended keep stepping
   until every rank is done, and holds the gathered weights for a whole call, ``gathered``), and
   the periodic eval runs on every rank. Dynamic sampling's refill rounds give ranks shares that
   differ by one question: the trainer pads the smaller shares with thrown-away prompts.
4. Checkpoints and ``final/`` hold FULL weights (``get_model_state_dict(full_state_dict=True,
   cpu_offload=True)``, gathered by every rank, written by rank 0) and the full optimizer state
   in the plain ``optimizer.state_dict()`` layout (integer parameter ids), so a checkpoint
   resumes on any world size, with or without FSDP.
5. vLLM weight syncs gather the full weights after every optimizer step (every rank joins): on
   every rank for the colocated engines, on rank 0 for the server; LoRA is merged from the
   gathered tensors (``hf_weights(model, state)`` in ``pipeline/weights/export.py``).

Outside torchrun ``train.fsdp=true`` does nothing (there is nothing to shard); ``shard`` prints so.
Under a 1-rank torchrun it wraps the model over a mesh of one (every "shard" is whole).
Not built: meta-device initialisation (every rank loads the full model, and builds the full
reference copy, before sharding), CPU offload, a mixed-precision policy (the model's dtype is used).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch

from pipeline.parallel import distributed


def enabled(cfg) -> bool:
    """FSDP is on: asked for, under torchrun (one rank included: a mesh of one shards nothing, but
    runs FSDP's code on the device, which is how `make gpu-smoke` checks it on one GPU)."""
    return bool(cfg.train.fsdp) and distributed.initialized()


def shard(cfg, policy, ref):
    """(policy, ref) wrapped with FSDP2 when ``enabled(cfg)``; unchanged otherwise. A full
    fine-tuning reference is sharded too; under LoRA the reference IS the policy."""
    if not enabled(cfg):
        if cfg.train.fsdp:
            print("train.fsdp=true outside torchrun: nothing to shard, training unsharded")
        return policy, ref
    policy = wrap(policy)
    if ref is not None and ref is not policy:
        ref = wrap(ref)
    local = sum(p.to_local().numel() for p in policy.parameters())
    total = sum(p.numel() for p in policy.parameters())
    what = "policy and reference" if ref is not None and ref is not policy else "policy"
    distributed.print0(f"train.fsdp: {what} sharded over {distributed.world_size()} ranks "
                       f"({local:,} of {total:,} policy parameters on rank 0)")
    return policy, ref


def _hf_model(model):
    """The transformers model: ``model`` itself, or the one inside a peft wrapper."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def wrap(model):
    """``fully_shard`` every decoder layer (the model's ``_no_split_modules`` classes), then the
    transformers model as the root. Under LoRA the root is the model inside the peft wrapper, not
    the wrapper: ``PeftModel.generate`` calls the inner model directly, which would bypass a
    wrapper root's hooks and leave the embeddings sharded."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, fully_shard

    mesh = init_device_mesh(distributed.device_type(), (distributed.world_size(),))  # the backend's device
    root = _hf_model(model)
    layer_classes = set(getattr(root, "_no_split_modules", None) or [])
    layers = [m for m in root.modules() if type(m).__name__ in layer_classes]
    if not layers:
        raise ValueError(f"{type(root).__name__} names no decoder layer class (_no_split_modules); "
                         "cannot shard it layer by layer")
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(root, mesh=mesh)
    for m in model.modules():
        if isinstance(m, FSDPModule):  # SUM the per-rank gradients (the losses use global counts)
            m.set_gradient_divide_factor(1.0)
            m.set_force_sum_reduction_for_comms(True)
    return model


@contextmanager
def gathered(model):
    """Hold every sharded module's full weights for the whole block (one all-gather per module),
    then reshard. For ``generate``: without it FSDP all-gathers every layer at every new token.
    Costs the full weights' memory on each rank meanwhile. No-op for an unsharded model."""
    from torch.distributed.fsdp import FSDPModule

    mods = [m for m in model.modules() if isinstance(m, FSDPModule)]
    layers = mods[1:]  # mods[0] is the root, which FSDP already keeps unsharded after its forward
    for m in layers:
        m.set_reshard_after_forward(False, recurse=False)
    for m in mods:
        m.unshard()
    try:
        yield
    finally:
        for m in mods:
            m.reshard()
        for m in layers:
            m.set_reshard_after_forward(True, recurse=False)


def is_sharded(model) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return model is not None and isinstance(_hf_model(model), FSDPModule)


def clip_grad_norm(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """``clip_grad_norm_`` whose returned total norm is a plain tensor (global over shards)."""
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    return norm.full_tensor() if hasattr(norm, "full_tensor") else norm


def _options(cpu_offload: bool = True):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=cpu_offload)


def full_model_state(model, everywhere: bool = False) -> dict | None:
    """The full state dict on rank 0, in CPU memory ({} on the others); with ``everywhere``, full
    tensors on every rank, on the model's device (what a per-rank rollout engine would load).
    None when ``model`` is not sharded (its own ``state_dict()`` is full). Collective under FSDP:
    every rank must call it."""
    if not is_sharded(model):
        return None
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(model, options=_options(cpu_offload=not everywhere))


def meta_state(model) -> dict:
    """Names, full shapes and dtypes of ``model``'s state dict as meta tensors (no gather, no
    memory): what a consumer checks an architecture with."""
    return {k: torch.empty(v.shape, dtype=v.dtype, device="meta") for k, v in model.state_dict().items()}


def _param_names(model, opt) -> list[str]:
    """Name of each optimizer parameter in ``optimizer.state_dict()`` id order."""
    names = {id(p): n for n, p in model.named_parameters()}
    return [names[id(p)] for group in opt.param_groups for p in group["params"]]


def full_optimizer_state(model, opt) -> dict:
    """The whole optimizer state in ``opt.state_dict()`` layout (parameter ids, full tensors on
    rank 0), whatever the sharding. Collective under FSDP."""
    if not is_sharded(model):
        return opt.state_dict()
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    by_name = get_optimizer_state_dict(model, opt, options=_options())
    if not distributed.is_main():
        return {}
    index = {n: i for i, n in enumerate(_param_names(model, opt))}
    return {"state": {index[n]: v for n, v in by_name["state"].items()},
            "param_groups": [{**g, "params": [index[n] for n in g["params"]]} for g in by_name["param_groups"]]}


def load_optimizer_state(model, opt, state: dict) -> None:
    """Load a ``full_optimizer_state`` / ``opt.state_dict()`` (any world size) into ``opt``;
    under FSDP every rank passes the full state and keeps its own shard."""
    if not is_sharded(model):
        opt.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    names = _param_names(model, opt)
    by_name = {"state": {names[i]: v for i, v in state["state"].items()},
               "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]]}
    set_optimizer_state_dict(model, opt, by_name, options=_options(cpu_offload=False))


@dataclass
class FullState:
    """What a checkpoint needs, gathered: ``model`` / ``ref`` are None when not sharded (their
    own state dicts are full) and ``optimizer`` is in ``opt.state_dict()`` layout."""
    model: dict | None
    ref: dict | None
    optimizer: dict


def gather_for_save(model, opt, ref=None) -> FullState:
    """Collective under FSDP (every rank calls it; rank 0 gets the tensors); free otherwise."""
    return FullState(full_model_state(model), full_model_state(ref), full_optimizer_state(model, opt))
