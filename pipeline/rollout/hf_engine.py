"""Rollout with Hugging Face ``generate``: works on any machine, shares the trainer's model.

The engine holds a reference to the policy module itself, so ``sync_weights`` has nothing to
copy. Prompts are left-padded and generated in chunks of ``batch_size`` sequences.

``lockstep=True`` is for an FSDP-sharded module (pipeline/parallel/fsdp.py), where every forward
is a collective: ``generate(synced_gpus=True)`` keeps stepping on a rank whose sequences have ended
until every rank's have, and the full weights are gathered once per call (``fsdp.gathered``)
instead of layer by layer at every token. The caller must give every rank the same number of
``generate`` calls with the same number of prompts, so that the chunks line up too.
"""

from __future__ import annotations

import torch
from tqdm.auto import tqdm

from pipeline.rollout.base import Sample, SamplingParams


class HFEngine:
    def __init__(self, model, tokenizer, batch_size: int = 64, progress: bool = False, lockstep: bool = False):
        self.model = model
        self.lockstep = lockstep  # every rank runs the same generate calls (sharded model)
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.progress = progress
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token

    def sync_weights(self, model) -> None:
        self.model = model

    def sleep(self) -> None:
        pass  # the engine is the policy itself: nothing of its own to free

    def close(self) -> None:
        self.model = None

    def generate(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Sample]]:
        if not self.lockstep:
            return self._generate(prompts, n, params)
        from pipeline.parallel.fsdp import gathered  # sharded: gather each layer once per call, not per token
        with gathered(self.model):
            return self._generate(prompts, n, params)

    @torch.no_grad()
    def _generate(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Sample]]:
        if params.seed is not None:
            torch.manual_seed(params.seed)
        tok = self.tokenizer
        encoded = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
        jobs = [(i, ids) for i, ids in enumerate(encoded) for _ in range(n)]
        results: list[list[Sample]] = [[] for _ in prompts]
        was_training = self.model.training
        self.model.eval()
        device = next(self.model.parameters()).device
        eos_ids = _eos_ids(self.model, tok)
        chunks = range(0, len(jobs), self.batch_size)
        for start in tqdm(chunks, desc="generate", disable=not self.progress, leave=False):
            chunk = jobs[start:start + self.batch_size]
            width = max(len(ids) for _, ids in chunk)
            input_ids = torch.full((len(chunk), width), tok.pad_token_id, dtype=torch.long)
            attention = torch.zeros_like(input_ids)
            for row, (_, ids) in enumerate(chunk):
                input_ids[row, width - len(ids):] = torch.tensor(ids)
                attention[row, width - len(ids):] = 1
            greedy = params.temperature <= 0
            out = self.model.generate(
                input_ids=input_ids.to(device), attention_mask=attention.to(device),
                max_new_tokens=params.max_new_tokens, do_sample=not greedy,
                temperature=None if greedy else params.temperature,
                top_p=None if greedy else params.top_p, top_k=None if greedy else (params.top_k or 0),
                pad_token_id=tok.pad_token_id, eos_token_id=eos_ids, synced_gpus=self.lockstep)
            for row, (i, ids) in enumerate(chunk):
                completion_ids, reason = _trim(out[row, width:].tolist(), eos_ids, tok.pad_token_id)
                results[i].append(Sample(
                    prompt=prompts[i], prompt_ids=ids,
                    completion=tok.decode(completion_ids, skip_special_tokens=True),
                    completion_ids=completion_ids, finish_reason=reason))
        self.model.train(was_training)
        return results


def _eos_ids(model, tok) -> list[int]:
    ids = model.generation_config.eos_token_id if model.generation_config is not None else None
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    if tok.eos_token_id is not None and tok.eos_token_id not in ids:
        ids.append(tok.eos_token_id)
    return ids


def _trim(tokens: list[int], eos_ids: list[int], pad_id: int) -> tuple[list[int], str]:
    """Cut generated tokens after the first EOS (kept); the rest is padding."""
    for k, t in enumerate(tokens):
        if t in eos_ids:
            return tokens[:k + 1], "stop"
    # No EOS: the sequence ran to max_new_tokens (padding only appears after an EOS).
    return tokens, "length"
