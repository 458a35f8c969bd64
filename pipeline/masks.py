"""Attention masks with no fully masked query row, for left-padded batches.

A left-padded row's pad positions see, under a causal mask, only keys that are themselves padding:
their query rows are entirely masked. What attention does with such a row depends on the kernel
(a uniform average, zeros, or NaN: PyTorch's SDPA backends have differed here from release to
release), and transformers 5 builds the mask from a 2D padding mask without its former "unmask"
workaround. A NaN in a pad position's value vector then reaches real tokens through
``0 * NaN`` in the attention product (and the backward). So every forward that can have left
padding in its queries takes its mask from ``forward_mask``: the causal padding mask, where a
query row that would see no key at all is allowed its own position. A left-pad query then attends
to itself alone (a finite, ignored output); every other row is unchanged, and a real query never
sees a pad key, so real tokens' outputs are those of the plain mask.

``forward_mask`` gives what the model's attention implementation takes: a 4D boolean mask for
``sdpa`` (what transformers would build, plus the diagonal), a 4D additive float mask for
``eager``, and the 2D mask unchanged for flash-attention kernels (they drop padding before
attending, so they have no pad queries) and for models with sliding-window or other non-causal
layer types (one 4D mask would be wrong for those layers).
"""

from __future__ import annotations

import torch


def causal_mask(attention: torch.Tensor, queries: int | None = None) -> torch.Tensor:
    """[N, 1, Q, K] bool: query q (the last ``queries`` columns of the K = attention.shape[1]
    columns; all of them by default) may attend key k iff k <= q and k is real; a query that would
    then see nothing (a left-pad position) attends to itself (k == q). Every other row is the plain
    mask's, so right-padding queries keep the outputs they had."""
    keys = attention.shape[1]
    queries = keys if queries is None else queries
    k = torch.arange(keys, device=attention.device)
    q = torch.arange(keys - queries, keys, device=attention.device)
    allowed = (k[None, :] <= q[:, None])[None] & attention.bool()[:, None, :]  # [N, Q, K]
    lonely = ~allowed.any(dim=-1, keepdim=True)  # the rows the plain mask leaves empty: left-pad queries
    allowed |= lonely & (k[None, :] == q[:, None])[None]
    return allowed[:, None]


def _full_causal(model) -> bool:
    """Whether every layer of ``model`` attends causally over the whole sequence (no sliding window)."""
    config = getattr(model, "config", None)
    types = getattr(config, "layer_types", None) or ()
    return all(t == "full_attention" for t in types) and not (
        getattr(config, "use_sliding_window", False) and getattr(config, "sliding_window", None))


def forward_mask(model, attention: torch.Tensor, queries: int | None = None):
    """The ``attention_mask`` to hand ``model`` for a forward whose 2D padding mask is ``attention``
    [N, K] and whose queries are its last ``queries`` columns (the rest are in a KV cache)."""
    impl = getattr(getattr(model, "config", None), "_attn_implementation", None) or "sdpa"
    if "flash" in impl or not _full_causal(model) or impl not in ("sdpa", "eager"):
        return attention
    mask = causal_mask(attention, queries)
    if impl == "sdpa":
        return mask
    dtype = next(model.parameters()).dtype
    dtype = dtype if dtype.is_floating_point else torch.float32
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)


def fully_masked_rows(mask: torch.Tensor) -> int:
    """How many query rows of a 4D mask (bool: True = attend; float: additive) attend to nothing."""
    allowed = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
    return int((~allowed.any(dim=-1)).sum())
