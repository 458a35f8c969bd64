"""Supervised warm start, the library: teach a (tiny) model the task's solution format.

Fine-tunes with the exact prompt the GRPO trainer uses (``build_prompt`` + solution + EOS, loss on
the completion tokens only) on the task's training split, a fraction of whose solutions
``training_records`` corrupts (``pipeline.data.synth_solutions``: the model learns to make
occasional slips, or a systematic carry bug, which RL can then remove), and with ``sft.tool_frac`` a
share of which computes with a python block and its output (tool-integrated reasoning, docs/tir.md).
AdamW, linear warmup then cosine decay to 10% of the peak, gradient clip 1.0. `mathrl sft`
(``pipeline/stages/sft.py``) loads the model, runs ``train``, saves it and has the evals grade it.

``sft.micro_batch_tokens`` > 0 computes a step's loss with less padding, the same math: the step's
examples are sorted by length and cut into micro-batches of at most that many padded tokens
(``pipeline.micro_batches``, each example its own group), each padded only to its own longest,
and only the columns that predict some completion token get logits (the common prompt prefix gets
none). Each micro-batch adds its summed token loss over the step's completion-token count, so the
gradient is that of the one padded batch up to float summation order (tests/test_sft.py). 0 is
the single padded forward with the model's own loss.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from pipeline.config import RunConfig
from pipeline.data.problems import load_problems
from pipeline.data.synth_solutions import corrupt_records
from pipeline.data.tir_solutions import tool_records
from pipeline.micro_batches import micro_batches
from pipeline.prompts import build_prompt


def training_records(cfg: RunConfig) -> tuple[list[dict], int]:
    """The training split of ``sft.task`` with the configured corruption, then ``sft.tool_frac`` of the
    uncorrupted solutions written with the python tool (tir_solutions.py); (records, how many corrupted)."""
    s = cfg.sft
    records = load_problems(cfg.data.prepared_dir, s.task, "train", synth=cfg.data)
    records, n_bad = corrupt_records(records, s.corrupt_frac, cfg.seed, s.corrupt_mode)
    return tool_records(records, s.tool_frac, cfg.seed)[0], n_bad


def encode(records: list[dict], tok, cfg: RunConfig) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, completion ids + EOS) per record, with the prompt the trainer uses."""
    out = []
    for r in records:
        prompt = build_prompt(r["question"], template=cfg.prompt.template, tokenizer=tok, chat=cfg.prompt.chat)
        p = tok(prompt, add_special_tokens=False)["input_ids"]
        c = tok(r["solution"], add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        out.append((p, c))
    return out


def collate(batch: list[tuple[list[int], list[int]]], pad_id: int):
    """Right-padded input ids, attention mask and labels (-100 on prompt and padding)."""
    width = max(len(p) + len(c) for p, c in batch)
    ids = torch.full((len(batch), width), pad_id, dtype=torch.long)  # [B, T]
    labels = torch.full_like(ids, -100)
    mask = torch.zeros_like(ids)
    for row, (p, c) in enumerate(batch):
        n = len(p) + len(c)
        ids[row, :n] = torch.tensor(p + c)
        labels[row, len(p):n] = torch.tensor(c)
        mask[row, :n] = 1
    return ids, mask, labels


def cut(batch: list[tuple[list[int], list[int]]], token_budget: int) -> list[list[int]]:
    """Indices of ``batch`` sorted by length, cut so that rows x longest stays within ``token_budget``."""
    lengths = [len(p) + len(c) for p, c in batch]
    return micro_batches(list(range(len(batch))), lengths, list(range(len(batch))), len(batch), token_budget)


def summed_loss(model, batch: list[tuple[list[int], list[int]]], pad_id: int, device) -> torch.Tensor:
    """Summed cross-entropy of ``batch``'s completion tokens, logits only from the first column
    that predicts one (rows are right-padded, so that is the shortest prompt's last token)."""
    ids, mask, labels = (t.to(device) for t in collate(batch, pad_id))
    first = min(len(p) for p, _ in batch) - 1
    logits = model(input_ids=ids, attention_mask=mask, logits_to_keep=ids.shape[1] - first).logits[:, :-1]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels[:, first + 1:].reshape(-1),
                           ignore_index=-100, reduction="sum")


def step_loss(model, batch: list[tuple[list[int], list[int]]], pad_id: int, device, token_budget: int,
              team=None) -> float:
    """Forward and backward of one step's ``batch``; its mean completion-token loss. With a ``team``
    (pipeline/sft_parallel.py) this process computes its share of the micro-batches, and the team
    sums the shares' gradients and losses."""
    if token_budget <= 0:
        ids, mask, labels = (t.to(device) for t in collate(batch, pad_id))
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        return loss.item()
    tokens = sum(len(c) for _, c in batch)
    cuts = cut(batch, token_budget)
    total = 0.0
    for rows in (cuts if team is None else team.share(cuts, batch)):
        loss = summed_loss(model, [batch[i] for i in rows], pad_id, device)
        (loss / tokens).backward()
        total += loss.item()
    if team is not None:
        total = team.sum_gradients(model, total)
    return total / tokens


def lr_at(step: int, total: int, warmup: int, peak: float) -> float:
    """Linear warmup, then cosine decay to 10% of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train(model, tok, examples, cfg: RunConfig, progress: bool = True) -> list[float]:
    """Run cfg.sft.steps AdamW steps on ``examples``; returns the loss of every step. With
    ``sft.processes`` > 1 helper processes share every step's work (pipeline/sft_parallel.py)."""
    if cfg.sft.processes <= 1:
        return run_steps(model, tok.pad_token_id, examples, cfg, progress)
    from pipeline.sft_parallel import Team

    with Team(model, tok.pad_token_id, examples, cfg) as team:
        return run_steps(model, tok.pad_token_id, examples, cfg, progress, team)


def run_steps(model, pad_id: int, examples, cfg: RunConfig, progress: bool = True, team=None) -> list[float]:
    """The training loop, the same in every process of a team: same batches (the seed), same updates."""
    s = cfg.sft
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=s.lr, betas=(0.9, 0.95), weight_decay=0.0)
    gen = torch.Generator().manual_seed(cfg.seed)
    order: list[int] = []
    losses = []
    model.train()
    bar = tqdm(range(s.steps), desc="sft", disable=not progress)
    for step in bar:
        if len(order) < s.batch_size:
            order += torch.randperm(len(examples), generator=gen).tolist()
        batch, order = [examples[i] for i in order[:s.batch_size]], order[s.batch_size:]
        for group in opt.param_groups:
            group["lr"] = lr_at(step, s.steps, s.warmup_steps, s.lr)
        opt.zero_grad(set_to_none=True)
        losses.append(step_loss(model, batch, pad_id, device, s.micro_batch_tokens, team))
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 10 == 0:
            bar.set_postfix(loss=f"{sum(losses[-10:]) / len(losses[-10:]):.3f}")
    return losses


__all__ = ["collate", "cut", "encode", "lr_at", "run_steps", "step_loss", "summed_loss", "train", "training_records"]
