"""Per-token log-probabilities of completions under a causal LM, without [N, T, V] float copies.

The logits of the positions that predict completion tokens are turned into log-probs of the
taken token with ``logsumexp`` row chunks, so memory stays at one chunk of the vocabulary
softmax even for 150k-token vocabularies. With ``entropy=True`` the same chunks also give the
entropy of each position's distribution (at the sampling temperature, without gradients): the
trainer's policy-entropy metric costs no extra forward.
"""

from __future__ import annotations

import torch

from pipeline.grpo.episodes import Packed


def token_logprobs(model, packed: Packed, rows: slice | None = None, temperature: float = 1.0,
                   chunk: int = 8, entropy: bool = False):
    """log pi(o_t | q, o_<t) for every completion column: [n, T] (padding columns included;
    multiply by the completion mask). Logits are divided by the sampling ``temperature`` so the
    trainer scores the same distribution the engine sampled from. ``entropy=True`` returns
    (log-probs, entropies), both [n, T]; the entropies carry no gradient."""
    rows = rows or slice(None)
    ids = packed.input_ids[rows]
    device = next(model.parameters()).device
    p = packed.prompt_width
    t = ids.shape[1] - p
    # Only the last T + 1 positions feed the LM head: no logits are built for the prompt.
    out = model(input_ids=ids.to(device), attention_mask=packed.attention_mask[rows].to(device),
                position_ids=packed.position_ids[rows].to(device), use_cache=False, logits_to_keep=t + 1)
    logits = out.logits[:, :-1, :]  # [n, T, V]: position p - 1 + t predicts completion token t
    targets = ids[:, p:].to(device)  # [n, T]
    result, entropies = [], []
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
    logp = torch.cat(result, dim=0)
    return (logp, torch.cat(entropies, dim=0)) if entropy else logp
