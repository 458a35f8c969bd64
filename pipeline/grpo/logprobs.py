"""Per-token log-probabilities of completions under a causal LM, without [N, T, V] float copies.

The logits of the positions that predict completion tokens are turned into log-probs of the
taken token with ``logsumexp`` row chunks, so memory stays at one chunk of the vocabulary
softmax even for 150k-token vocabularies. With ``entropy=True`` the same chunks also give the
entropy of each position's distribution (at the sampling temperature, without gradients): the
trainer's policy-entropy metric costs no extra forward. ``top`` does the same for DPPO's top-K
divergence (losses.TopK): the log-probs of the K most likely tokens, or of given tokens, per position.
"""

from __future__ import annotations

import torch

from pipeline.grpo.episodes import Packed
from pipeline.grpo.packing import LAYOUTS, shared_prompt_logits, trimmed_logits
from pipeline.masks import forward_mask


def token_logprobs(model, packed: Packed, rows: slice | list | None = None, temperature: float = 1.0,
                   chunk: int = 8, entropy: bool = False, layout: str = "padded",
                   top: int | torch.Tensor | None = None):
    """log pi(o_t | q, o_<t) for every completion column: [n, T] (padding columns included;
    multiply by the completion mask). Logits are divided by the sampling ``temperature`` so the
    trainer scores the same distribution the engine sampled from. ``entropy=True`` returns
    (log-probs, entropies), both [n, T]; the entropies carry no gradient. ``layout``: how the
    forward lays the rows out (packing.py); the columns it does not compute come back as 0.
    ``top``: K, or token ids [n, T, K]; then the return is (log-probs, entropies or None, (ids, their
    log-probs)), ids [n, T, K] the K most likely tokens of each position (or the given ids) and their
    log-probs without gradients (padding columns: id 0, log-prob 0)."""
    rows = rows if rows is not None else slice(None)
    ids = packed.input_ids[rows]
    device = next(model.parameters()).device
    p = packed.prompt_width
    width = ids.shape[1] - p
    if layout == "padded":
        # Only the last T + 1 positions feed the LM head: no logits are built for the prompt.
        attention = forward_mask(model, packed.attention_mask[rows].to(device))  # no fully masked rows
        out = model(input_ids=ids.to(device), attention_mask=attention,
                    position_ids=packed.position_ids[rows].to(device), use_cache=False, logits_to_keep=width + 1)
        logits = out.logits[:, :-1, :]  # [n, T, V]: position p - 1 + t predicts completion token t
    elif layout in LAYOUTS:
        logits = (trimmed_logits if layout == "trimmed" else shared_prompt_logits)(model, packed, rows, device)
    else:
        raise ValueError(f"unknown forward layout {layout!r}; expected one of {LAYOUTS}")
    t = logits.shape[1]
    wanted = top[:, :t].to(device) if isinstance(top, torch.Tensor) else top
    logp, ent, head = _from_logits(logits, ids[:, p:p + t].to(device), temperature, chunk, entropy, wanted)
    pad = width - t
    if pad:
        logp = torch.nn.functional.pad(logp, (0, pad))
        ent = torch.nn.functional.pad(ent, (0, pad)) if ent is not None else None
        head = tuple(torch.nn.functional.pad(x, (0, 0, 0, pad)) for x in head) if head is not None else None
    if top is not None:
        return logp, ent, head
    return (logp, ent) if entropy else logp


def _from_logits(logits, targets, temperature: float, chunk: int, entropy: bool, top=None):
    """(log-probs of ``targets`` [n, t], entropies [n, t] or None, (top ids, their log-probs) [n, t, K]
    or None) from logits [n, t, V]; ``top`` K or ids [n, t, K] (token_logprobs)."""
    result, entropies, top_ids, top_logp = [], [], [], []
    for start in range(0, logits.shape[0], chunk):
        lg = logits[start:start + chunk].float()
        if temperature > 0 and temperature != 1.0:
            lg = lg / temperature
        taken = lg.gather(-1, targets[start:start + chunk].unsqueeze(-1)).squeeze(-1)
        norm = torch.logsumexp(lg, dim=-1)
        result.append(taken - norm)
        if entropy:
            with torch.no_grad():  # H = -sum_v p_v log p_v (0 log 0 = 0 for masked logits)
                lp = lg - norm.unsqueeze(-1)
                entropies.append(-(lp.exp() * lp).nan_to_num(0.0).sum(-1))
        if top is not None:
            with torch.no_grad():
                ids = lg.topk(top, dim=-1).indices if isinstance(top, int) else top[start:start + chunk]
                top_ids.append(ids)
                top_logp.append(lg.gather(-1, ids) - norm.unsqueeze(-1))
    head = (torch.cat(top_ids), torch.cat(top_logp)) if top is not None else None
    return torch.cat(result, dim=0), torch.cat(entropies, dim=0) if entropy else None, head
