"""Rollout with Hugging Face ``generate``: works on any machine, shares the trainer's model.

The engine holds a reference to the policy module itself, so ``sync_weights`` has nothing to
copy. Prompts are left-padded and generated in chunks of ``batch_size`` sequences.

Seeded sampling (``SamplingParams.seed``) gives sample j of prompt i its own random stream, seeded
``seed + i * n + j`` as vLLM seeds its requests: a completion then depends on its prompt, the
weights and that seed, not on the other prompts of the call, the chunking, or anything else that
draws from torch's global RNG (an eval between two steps). Sampling is Gumbel-max: the logits
go through transformers' own temperature / top-k / top-p warpers, each row adds Gumbel noise from
its own generator, and generate's greedy path takes the argmax, which is an exact sample of the
warped softmax. Without a seed generate samples from the global RNG as usual.

With ``SamplingParams.logprobs`` each sample also carries the log-prob of each sampled token under
softmax(logits / temperature) (temperature 1 when greedy), the distribution the trainer's
``token_logprobs`` scores: the behaviour policy of a pipelined trainer. The logits are generate's
raw ones (``output_logits``), before the warpers and the Gumbel noise.

A chunk whose prompts differ in length is prefilled by ``prefill.shared_prefill`` (one forward per
row, or per prompt with ``shared_prefill``) with a mask where no pad query row is fully masked
(pipeline/masks.py); ``generate`` then continues from that cache. Not for a lock-step policy.

With ``tools`` (``rollout.tools: [python]``) a completion is written in turns: decoding stops where
a ```python block closes, the sandbox runs it, its output block is appended and decoding goes on
(multi_turn.py). Every turn uses the decode loop (decode_loop.py; each job keeps its own seeded
sampler across turns, so a completion that never writes code is the one the loop gives without
tools), hence seeded or greedy sampling only, and not on a lock-step (sharded) policy.

``lockstep=True`` is for an FSDP-sharded module (pipeline/parallel/fsdp.py), where every forward
is a collective: ``generate(synced_gpus=True)`` keeps stepping on a rank whose sequences have ended
until every rank's have, and the full weights are gathered once per call (``fsdp.gathered``)
instead of layer by layer at every token. The caller must give every rank the same number of
``generate`` calls with the same number of prompts, so that the chunks line up too.
"""

from __future__ import annotations

import torch
from tqdm.auto import tqdm
from transformers import (LogitsProcessor, LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper,
                          TopPLogitsWarper)

from pipeline.rollout.base import RolloutEngine, Sample, SamplingParams
from pipeline.rollout.decode_loop import check_plain, decode
from pipeline.rollout.multi_turn import multi_turn, to_samples
from pipeline.rollout.prefill import shared_prefill
from pipeline.rollout.tool_runner import ToolRunner, ToolSettings


class HFEngine(RolloutEngine):
    runs_policy = True  # generates with the trainer's own module

    def __init__(self, model, tokenizer, batch_size: int = 64, progress: bool = False, lockstep: bool = False,
                 shared_prefill: bool = False, decode: str = "generate", tools: ToolSettings | None = None):
        self.model = model
        self.decode = decode  # "generate" or "loop" (decode_loop.py: ended rows leave the batch)
        self.tools = ToolRunner(tools) if tools is not None else None  # rollout.tools: multi-turn (module notes)
        if tools is not None and lockstep:
            raise ValueError("rollout.tools: not for a sharded (lock-step) policy")
        if decode == "loop" or tools is not None:
            if lockstep:
                raise ValueError("rollout.decode=loop: not for a sharded (lock-step) policy")
            check_plain(model)
        self.shared_prefill = shared_prefill and not lockstep  # prefill.py: one prefill per prompt
        self.lockstep = lockstep  # every rank runs the same generate calls (sharded model)
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.progress = progress
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token

    def sync_weights(self, model) -> None:
        self.model = model

    def close(self) -> None:
        self.model = None
        if self.tools is not None:
            self.tools.close()

    def generate(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Sample]]:
        if not self.lockstep:
            return self._generate(prompts, n, params)
        from pipeline.parallel.fsdp import gathered  # sharded: gather each layer once per call, not per token
        with gathered(self.model):
            return self._generate(prompts, n, params)

    @torch.no_grad()
    def _generate(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Sample]]:
        tok = self.tokenizer
        encoded = [tok(p, add_special_tokens=False)["input_ids"] for p in prompts]
        jobs = [(i, ids) for i, ids in enumerate(encoded) for _ in range(n)]
        results: list[list[Sample]] = [[] for _ in prompts]
        was_training = self.model.training
        self.model.eval()
        device = next(self.model.parameters()).device
        eos_ids = _eos_ids(self.model, tok)
        if self.tools is not None:
            try:
                return self._tool_rollout(prompts, jobs, params, eos_ids, device)
            finally:
                self.model.train(was_training)
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
            seeded = not greedy and params.seed is not None  # then greedy over Gumbel-perturbed logits
            processors = LogitsProcessorList([SeededSampler(
                [params.seed + k for k in range(start, start + len(chunk))], params)] if seeded else [])
            plain = greedy or seeded
            # A padded chunk is prefilled here, not by generate: its pad queries need a mask that is never
            # fully masked (pipeline/masks.py). Not for a sharded policy (every rank must run the same forwards).
            share = self.shared_prefill and n > 1
            padded = not self.lockstep and not bool(attention.all())
            prefix = {"past_key_values": shared_prefill(self.model, input_ids.to(device), attention.to(device),
                                                        share=share)} if (share or padded) and width > 1 else {}
            if self.decode == "loop":
                if not plain:
                    raise ValueError("rollout.decode=loop samples with per-row seeds: give SamplingParams.seed")
                rows, taken = decode(self.model, input_ids.to(device), attention.to(device),
                                     max_new_tokens=params.max_new_tokens, eos_ids=eos_ids,
                                     sampler=processors[0] if seeded else None, cache=prefix.get("past_key_values"),
                                     want_logprobs=params.logprobs, temperature=params.temperature)
                for row, (i, ids) in enumerate(chunk):
                    reason = "stop" if rows[row] and rows[row][-1] in eos_ids else "length"
                    results[i].append(Sample(
                        prompt=prompts[i], prompt_ids=ids,
                        completion=tok.decode(rows[row], skip_special_tokens=True),
                        completion_ids=rows[row], finish_reason=reason,
                        logprobs=None if taken is None else taken[row]))
                continue
            out = self.model.generate(
                input_ids=input_ids.to(device), attention_mask=attention.to(device),
                max_new_tokens=params.max_new_tokens, do_sample=not plain,
                temperature=None if plain else params.temperature,
                top_p=None if plain else params.top_p, top_k=None if plain else (params.top_k or 0),
                logits_processor=processors, return_dict_in_generate=True, output_logits=params.logprobs,
                pad_token_id=tok.pad_token_id, eos_token_id=eos_ids, synced_gpus=self.lockstep, **prefix)
            tokens = out.sequences[:, width:]
            taken = _taken_logprobs(out.logits, tokens, params.temperature) if params.logprobs else None
            for row, (i, ids) in enumerate(chunk):
                completion_ids, reason = _trim(tokens[row].tolist(), eos_ids, tok.pad_token_id)
                results[i].append(Sample(
                    prompt=prompts[i], prompt_ids=ids,
                    completion=tok.decode(completion_ids, skip_special_tokens=True),
                    completion_ids=completion_ids, finish_reason=reason,
                    logprobs=None if taken is None else taken[row, :len(completion_ids)].tolist()))
        self.model.train(was_training)
        return results


    def _tool_rollout(self, prompts: list[str], jobs: list[tuple[int, list[int]]], params: SamplingParams,
                      eos_ids: list[int], device) -> list[list[Sample]]:
        """The multi-turn rollout (multi_turn.py) with this engine's decode loop, ``batch_size`` rows at a time."""
        greedy = params.temperature <= 0
        if not greedy and params.seed is None:
            raise ValueError("rollout.tools samples with per-row seeds: give SamplingParams.seed (or sample greedily)")
        sampler = None if greedy else SeededSampler([params.seed + k for k in range(len(jobs))], params)
        pad = self.tokenizer.pad_token_id

        def decode_rows(rows, contexts, budgets, stop):
            tokens, logprobs = [], [] if params.logprobs else None
            for start in range(0, len(rows), self.batch_size):
                part, ctx = rows[start:start + self.batch_size], contexts[start:start + self.batch_size]
                width = max(len(c) for c in ctx)
                input_ids = torch.full((len(part), width), pad, dtype=torch.long)
                attention = torch.zeros_like(input_ids)
                for r, c in enumerate(ctx):
                    input_ids[r, width - len(c):] = torch.tensor(c)
                    attention[r, width - len(c):] = 1
                got, taken = decode(self.model, input_ids.to(device), attention.to(device),
                                    max_new_tokens=max(budgets[start:start + len(part)]), eos_ids=eos_ids,
                                    sampler=None if sampler is None else _JobRows(sampler, part),
                                    want_logprobs=params.logprobs, temperature=params.temperature,
                                    budgets=budgets[start:start + len(part)],
                                    stop=lambda r, toks, part=part: stop(part[r], toks))
                tokens += got
                if logprobs is not None:
                    logprobs += taken
            return tokens, logprobs

        done = multi_turn(decode_rows, [ids for _, ids in jobs], self.tokenizer, max_new_tokens=params.max_new_tokens,
                          runner=self.tools, eos_ids=eos_ids)
        return to_samples(prompts, jobs, done, self.tokenizer, params.logprobs)


class _JobRows:
    """A ``SeededSampler`` over every job of a call, seen by a decode of some of them: batch row r is
    job ``jobs[r]``, whose generator goes on drawing where its previous turn left off."""

    def __init__(self, sampler: "SeededSampler", jobs: list[int]):
        self.sampler, self.jobs = sampler, jobs

    def scores(self, rows, scores: torch.FloatTensor) -> torch.FloatTensor:
        rows = rows.tolist() if isinstance(rows, torch.Tensor) else rows
        return self.sampler.scores([self.jobs[r] for r in rows], scores)


class SeededSampler(LogitsProcessor):
    """Gumbel-max sampling with one generator per row (row r seeded ``seeds[r]``): returns the
    warped scores plus Gumbel noise, whose argmax is a sample of softmax(warped scores)."""

    def __init__(self, seeds: list[int], params: SamplingParams):
        self.seeds = seeds
        self.generators: list[torch.Generator] | None = None  # made on the scores' device
        warpers = [TemperatureLogitsWarper(params.temperature)] if params.temperature != 1.0 else []
        if params.top_k:
            warpers.append(TopKLogitsWarper(params.top_k))
        if params.top_p < 1.0:
            warpers.append(TopPLogitsWarper(params.top_p))
        self.warpers = LogitsProcessorList(warpers)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        return self.scores(range(len(self.seeds)), scores, input_ids)

    def scores(self, rows, scores: torch.FloatTensor, input_ids=None) -> torch.FloatTensor:
        """Warped ``scores`` plus Gumbel noise; batch row k is sampler row ``rows[k]`` (decode_loop.py
        drops ended rows, so its batch is a subset), whose generator draws once per call."""
        if self.generators is None:
            self.generators = [torch.Generator(scores.device).manual_seed(s) for s in self.seeds]
        scores = self.warpers(input_ids, scores)
        rows = rows.tolist() if isinstance(rows, torch.Tensor) else rows
        u = torch.stack([torch.rand(scores.shape[-1], generator=self.generators[r], device=scores.device)
                         for r in rows])
        gumbel = -torch.log(-torch.log(u.clamp_min(torch.finfo(u.dtype).tiny)))
        return scores + gumbel.to(scores.dtype)


def _taken_logprobs(logits: tuple, tokens: torch.Tensor, temperature: float) -> torch.Tensor:
    """[rows, steps] log-prob of each generated token under softmax(logits / temperature)."""
    steps = torch.stack(logits, dim=1).float()  # [rows, steps, V]
    if temperature > 0 and temperature != 1.0:
        steps = steps / temperature
    return steps.log_softmax(-1).gather(-1, tokens[:, :steps.shape[1]].unsqueeze(-1)).squeeze(-1)


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
