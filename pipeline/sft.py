"""Supervised warm start, the library: teach a (tiny) model the task's solution format.

Fine-tunes with the exact prompt the GRPO trainer uses (``build_prompt`` + solution + EOS, loss on
the completion tokens only) on the task's training split, a fraction of whose solutions
``training_records`` corrupts (``pipeline.data.synth_solutions``: the model learns to make
occasional slips, or a systematic carry bug, which RL can then remove), and with ``sft.tool_frac`` a
share of which computes with a python block and its output (tool-integrated reasoning, docs/tir.md).
AdamW, linear warmup then cosine decay to 10% of the peak, gradient clip 1.0. `mathrl sft`
(``pipeline/stages/sft.py``) loads the model, runs ``train``, saves it and has the evals grade it.
"""

from __future__ import annotations

import math

import torch
from tqdm.auto import tqdm

from pipeline.config import RunConfig
from pipeline.data.problems import load_problems
from pipeline.data.synth_solutions import corrupt_records
from pipeline.data.tir_solutions import tool_records
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


def lr_at(step: int, total: int, warmup: int, peak: float) -> float:
    """Linear warmup, then cosine decay to 10% of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train(model, tok, examples, cfg: RunConfig, progress: bool = True) -> list[float]:
    """Run cfg.sft.steps AdamW steps on ``examples``; returns the loss of every step."""
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
        ids, mask, labels = (t.to(device) for t in collate(batch, tok.pad_token_id))
        for group in opt.param_groups:
            group["lr"] = lr_at(step, s.steps, s.warmup_steps, s.lr)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if step % 10 == 0:
            bar.set_postfix(loss=f"{sum(losses[-10:]) / len(losses[-10:]):.3f}")
    return losses


__all__ = ["collate", "encode", "lr_at", "train", "training_records"]
