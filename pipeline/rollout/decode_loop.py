"""A plain decode loop for ``HFEngine`` (``rollout.decode: loop``): the same samples as ``generate``
with less work, because a row that has ended leaves the batch.

``generate`` keeps every row of a chunk in the batch until the last one ends: on the CPU default
(128 rows, completions of ~37 tokens against a budget of 80) most decode steps forward rows that
are only padding. Here a row that samples an EOS is dropped from the batch, its KV cache rows with
it (``Cache.batch_select_indices``), so each step forwards only the rows still being written.

What is kept from ``generate`` so the samples are the model's: the prefill (left-padded prompts,
positions numbered from the attention mask, only the last position's logits), float32 logits,
greedy = argmax, seeded sampling = the same per-row Gumbel-max sampler (``SeededSampler``: each
row's generator draws once per step whatever the other rows do, so row r's noise at step s is the
same here and in ``generate``), EOS kept as the last token. Until the first row ends the forwards
have the same shapes as generate's, so the tokens are the same bit for bit; after it, the smaller
batch can round differently (float level, like any change of batch size).

Only greedy and seeded sampling are supported (``generate``'s unseeded ``multinomial`` draws from
the global RNG in a batch-dependent order), and only when the model's generation config adds no
logits processor of its own (a repetition penalty, say): ``check_plain`` raises instead of
silently sampling from a different distribution than ``generate`` would.
"""

from __future__ import annotations

import torch

from pipeline.masks import forward_mask

# generation_config fields that make generate add a logits processor even when greedy.
_PROCESSOR_FIELDS = {"repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "encoder_repetition_penalty": 1.0,
                     "bad_words_ids": None, "suppress_tokens": None, "begin_suppress_tokens": None,
                     "forced_bos_token_id": None, "forced_eos_token_id": None, "min_length": 0,
                     "min_new_tokens": None, "sequence_bias": None}


def check_plain(model) -> None:
    """Raise ValueError if the model's generation config would make ``generate`` change the logits."""
    config = getattr(model, "generation_config", None)
    if config is None:
        return
    for field, neutral in _PROCESSOR_FIELDS.items():
        value = getattr(config, field, neutral)
        if value not in (neutral, None) and not (field == "min_length" and value == 0):
            raise ValueError(f"rollout.decode=loop: the model's generation config sets {field}={value!r}, which "
                             "generate would apply to the logits; use rollout.decode=generate")


@torch.no_grad()
def decode(model, input_ids: torch.Tensor, attention: torch.Tensor, *, max_new_tokens: int, eos_ids: list[int],
           sampler=None, cache=None, want_logprobs: bool = False, temperature: float = 1.0,
           budgets: list[int] | None = None, stop=None) -> tuple[list[list[int]], list[list[float]] | None]:
    """Generate up to ``max_new_tokens`` per row of left-padded ``input_ids`` [N, W].

    ``sampler``: a ``SeededSampler`` for these rows (None = greedy). ``cache``: a KV cache holding
    ``input_ids[:, :-1]`` (``prefill.shared_prefill``), so only the last prompt token is forwarded.
    Returns each row's tokens (ending at its EOS, kept, or at the budget) and, with
    ``want_logprobs``, each token's log-prob under softmax(raw logits / temperature).
    ``budgets``: a budget per row (at most ``max_new_tokens``); ``stop(row, row's tokens) -> bool``: the
    row ends after this token (the multi-turn rollout's closed code block, multi_turn.py)."""
    rows = input_ids.shape[0]
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    if cache is None:
        out = model(input_ids=input_ids, attention_mask=forward_mask(model, attention), position_ids=positions,
                    use_cache=True,
                    logits_to_keep=1)
    else:
        out = model(input_ids=input_ids[:, -1:], attention_mask=attention, position_ids=positions[:, -1:],
                    past_key_values=cache, use_cache=True)
    cache = out.past_key_values
    last_position = positions[:, -1:]
    live = torch.arange(rows, device=input_ids.device)  # original row of each batch row
    tokens: list[list[int]] = [[] for _ in range(rows)]
    logprobs: list[list[float]] | None = [[] for _ in range(rows)] if want_logprobs else None
    eos = torch.tensor(eos_ids, device=input_ids.device)
    scale = temperature if temperature > 0 else 1.0
    for step in range(max_new_tokens):
        logits = out.logits[:, -1, :].to(dtype=torch.float32)
        scores = logits if sampler is None else sampler.scores(live, logits)
        chosen = scores.argmax(-1)
        taken = logits.div(scale).log_softmax(-1).gather(-1, chosen[:, None]).squeeze(1) if want_logprobs else None
        for k, row in enumerate(live.tolist()):
            tokens[row].append(int(chosen[k]))
            if taken is not None:
                logprobs[row].append(float(taken[k]))
        going = ~torch.isin(chosen, eos)
        if budgets is not None or stop is not None:
            ends = [k for k, row in enumerate(live.tolist()) if budgets is not None and len(tokens[row]) >= budgets[row]
                    or stop is not None and stop(row, tokens[row])]
            if ends:
                going[ends] = False
        if step == max_new_tokens - 1 or not bool(going.any()):
            break
        if not bool(going.all()):
            keep = going.nonzero().squeeze(1)
            cache.batch_select_indices(keep)
            live, attention, last_position, chosen = live[keep], attention[keep], last_position[keep], chosen[keep]
        attention = torch.cat([attention, attention.new_ones((attention.shape[0], 1))], dim=1)
        last_position = last_position + 1
        out = model(input_ids=chosen[:, None], attention_mask=attention, position_ids=last_position,
                    past_key_values=cache, use_cache=True)
    return tokens, logprobs
