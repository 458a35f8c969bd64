"""Less padding in the log-prob forwards: the logits that predict a micro-batch's completion tokens.

``pack`` lays the whole step's batch out at one width, [left-padded prompt P | completion T], P
and T the longest of the batch. A micro-batch forwarded at that width computes every padding
column too. Two layouts compute only real work, with the same logits up to float rounding
(padding is masked out of attention, and positions come from ``Packed.position_ids``, so a real
token sees the same keys at the same positions):

- ``trimmed``: drop the columns where no row of the micro-batch has a token (the left prompt
  padding common to all its rows, the completion columns past its longest completion).
- ``shared_prompt``: the G completions of a question share its prompt, so consecutive rows with
  the same prompt forward it once (with a KV cache, trimmed as above), the cache is repeated to
  their rows (``index_select``: its backward sums the rows' gradients into the one prompt
  forward), and the completions are forwarded on top of it. The last prompt position's logits
  predict the first completion token; the last completion token is never an input.

``padded`` (the default) is the original full-width forward. Both layouts return the logits of
the first ``t`` completion columns only (``t`` the micro-batch's longest completion); the caller
pads the log-probs back to the batch width T. ``shared_prompt`` needs a model that takes a
``past_key_values`` cache with gradients (any transformers causal LM; not with gradient
checkpointing, which turns the cache off: then it falls back to ``trimmed``).
"""

from __future__ import annotations

import torch

from pipeline.grpo.episodes import Packed
from pipeline.masks import forward_mask

LAYOUTS = ("padded", "trimmed", "shared_prompt")


def completion_width(packed: Packed, rows) -> int:
    """The micro-batch's longest completion (>= 1): the completion columns worth computing."""
    return max(int(packed.completion_mask[rows].sum(dim=1).max()), 1)


def _first_column(attention: torch.Tensor) -> int:
    """First column where some row has a token (the rows are left-padded)."""
    real = attention.any(dim=0)
    return int(real.int().argmax()) if bool(real.any()) else attention.shape[1]


def trimmed_logits(model, packed: Packed, rows, device) -> torch.Tensor:
    """[n, t, V] logits predicting completion columns 0..t-1, from a forward over the columns
    that hold a token of some row of ``rows``."""
    p, t = packed.prompt_width, completion_width(packed, rows)
    attention = packed.attention_mask[rows]
    lo = min(_first_column(attention[:, :p]), p - 1)  # keep the column that predicts completion token 0
    cols = slice(lo, p + t)
    out = model(input_ids=packed.input_ids[rows][:, cols].to(device),
                attention_mask=forward_mask(model, attention[:, cols].to(device)),
                position_ids=packed.position_ids[rows][:, cols].to(device), use_cache=False, logits_to_keep=t + 1)
    return out.logits[:, :-1, :]


def shared_prompt_logits(model, packed: Packed, rows, device) -> torch.Tensor:
    """``trimmed_logits`` with each run of identical prompts forwarded once (module notes)."""
    if getattr(model, "is_gradient_checkpointing", False):
        return trimmed_logits(model, packed, rows, device)
    p, t = packed.prompt_width, completion_width(packed, rows)
    ids, attention, positions = (x[rows].to(device) for x in
                                 (packed.input_ids, packed.attention_mask, packed.position_ids))
    prompts, prompt_mask = ids[:, :p], attention[:, :p]
    same = (prompts[1:] == prompts[:-1]).all(dim=1) & (prompt_mask[1:] == prompt_mask[:-1]).all(dim=1)
    starts = torch.cat([torch.ones(1, dtype=torch.bool, device=device), ~same])
    heads = starts.nonzero().squeeze(1)  # the first row of each run
    owner = torch.cumsum(starts.long(), dim=0) - 1  # row -> its run
    lo = min(_first_column(prompt_mask[heads]), p - 1)
    head = model(input_ids=prompts[heads, lo:], attention_mask=forward_mask(model, prompt_mask[heads, lo:]),
                 position_ids=positions[heads, lo:p], use_cache=True, logits_to_keep=1)
    first = head.logits.index_select(0, owner)  # [n, 1, V]: predicts completion token 0
    if t == 1:
        return first
    cache = head.past_key_values
    cache.batch_select_indices(owner)  # one copy of the prompt's keys/values per row (differentiable)
    cols = slice(p, p + t - 1)
    rest = model(input_ids=ids[:, cols], attention_mask=forward_mask(model, attention[:, lo:p + t - 1], queries=t - 1),
                 position_ids=positions[:, cols],
                 past_key_values=cache, use_cache=False)
    return torch.cat([first, rest.logits], dim=1)
