"""Supervised warm start (`mathrl sft`): teach a (tiny) model the task's solution format.

Reads the task's training split, corrupts the arithmetic of a fraction of the solutions, and
fine-tunes with the exact prompt the GRPO trainer uses (``build_prompt`` + solution + EOS, loss
on the completion tokens only). Saves model and tokenizer with ``save_pretrained`` and prints
greedy accuracy on a slice of the test split, overall and by number of solution steps.

Corruption (``sft.corrupt_frac``): in a chosen solution one calculator step gets a wrong result
(off by 1, 2 or 10) and the error is propagated consistently, i.e. every later step computes
correctly from the wrong value and the ``#### answer`` is the propagated one. Exactly one step
is wrong, so process rewards can point at it while the outcome reward only sees a wrong answer.
The model thus learns to make occasional slips, which RL can then remove.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import time
from dataclasses import asdict
from pathlib import Path

import torch
from tqdm.auto import tqdm

from pipeline import determinism
from pipeline.config import RunConfig
from pipeline.data.problems import load_problems
from pipeline.data.synth import buggy_result, has_bug_site
from pipeline.prompts import build_prompt

STEP_RE = re.compile(r"^(.*)<<(\d+)([-+*/])(\d+)=(\d+)>>(\d+)(.*)$")
SAME_RE = re.compile(r"^same: (\d+)$")
ANSWER_RE = re.compile(r"####\s*(-?[\d,]*\.?\d+)")
DELTAS = (1, -1, 2, -2, 10, -10)


def _calc(op: str, a: int, b: int) -> int | None:
    if op == "+":
        return a + b
    if op == "-":
        return a - b if a >= b else None
    if op == "*":
        return a * b
    return a // b if b and a % b == 0 else None


def _parse(solution: str) -> list:
    """Per line: ``[prefix, a, op, b, result, suffix]`` for a calculator step, the value of a
    ``same: <value>`` line (gsm-synth distractors), or the line's text."""
    items: list = []
    for line in solution.split("\n"):
        m = STEP_RE.match(line)
        if m and m.group(5) == m.group(6):
            pre, a, op, b, c, _, post = m.groups()
            items.append([pre, int(a), op, int(b), int(c), post])
            continue
        m = SAME_RE.match(line)
        items.append(int(m.group(1)) if m else line)
    return items


def _replay(items: list, result_of) -> tuple[list, int] | None:
    """The steps recomputed in order: a step that continued from the previous result continues
    from the new one, and writes ``result_of(k, a, op, b)`` (k: its index among the steps; None =
    impossible, e.g. a negative difference); ``same`` lines follow. (items, last result) or None."""
    out: list = []
    old = new = None  # the previous step's result before and after the replay
    k = 0
    for item in items:
        if isinstance(item, list):
            pre, a, op, b, c, post = item
            a = new if old is not None and a == old else a
            result = result_of(k, a, op, b)
            if result is None or result < 0:
                return None
            out.append([pre, a, op, b, result, post])
            old, new, k = c, result, k + 1
        elif isinstance(item, int):
            out.append(new if old is not None and item == old else item)
        else:
            out.append(item)
    return (out, new) if k else None


def _render(items: list, answer: int) -> str:
    lines = [f"{i[0]}<<{i[1]}{i[2]}{i[3]}={i[4]}>>{i[4]}{i[5]}" if isinstance(i, list)
             else f"same: {i}" if isinstance(i, int) else i for i in items]
    return ANSWER_RE.sub(f"#### {answer}", "\n".join(lines))


def corrupt_solution(solution: str, rng: random.Random) -> str | None:
    """``solution`` with one step's result wrong (off by 1, 2 or 10) and the error carried
    forward, or None."""
    items = _parse(solution)
    n = sum(isinstance(i, list) for i in items)
    for _ in range(10 if n else 0):
        j, delta = rng.randrange(n), rng.choice(DELTAS)
        replayed = _replay(items, lambda k, a, op, b: None if _calc(op, a, b) is None
                           else _calc(op, a, b) + (delta if k == j else 0))
        if replayed is not None:
            return _render(*replayed)
    return None


def buggy_solution(solution: str, rng: random.Random, frac: float) -> str | None:
    """``solution`` as a student with the forgotten-carry / forgotten-borrow bugs writes it: each
    addition with a carry loses it (-10) and each subtraction with a borrow keeps the tens (+10),
    each with probability ``frac``; later steps continue from the buggy values. None if unchanged."""
    def result_of(k, a, op, b):
        right = _calc(op, a, b)
        if right is None or not has_bug_site(op, a, b) or rng.random() >= frac:
            return right
        return buggy_result(op, a, b)

    replayed = _replay(_parse(solution), result_of)
    if replayed is None:
        return None
    text = _render(*replayed)
    return text if text != solution else None


def corrupt_records(records: list[dict], frac: float, seed: int, mode: str = "slip") -> tuple[list[dict], int]:
    """Copies of ``records`` with corrupted solutions; (records, how many were changed). ``slip``:
    about ``frac`` of the solutions get one wrong step; ``carry``: every carry / borrow step is
    done wrong with probability ``frac`` (``buggy_solution``)."""
    rng = random.Random(seed)
    out, count = [], 0
    for r in records:
        bad = None
        if mode == "carry" and frac > 0:
            bad = buggy_solution(r["solution"], rng, frac)
        elif mode == "slip" and frac > 0 and rng.random() < frac:
            bad = corrupt_solution(r["solution"], rng)
        if bad is not None:
            r, count = {**r, "solution": bad, "corrupted": True}, count + 1
        out.append(r)
    return out, count


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


def extract_answer(text: str) -> str | None:
    m = ANSWER_RE.findall(text)
    return m[-1].replace(",", "") if m else None


def evaluate(model, tok, records: list[dict], cfg: RunConfig, n: int = 1, temperature: float = 0.0,
             max_new_tokens: int = 128) -> list[int]:
    """Number of correct answers among ``n`` samples for each record (greedy when temperature 0)."""
    from pipeline.rollout.base import SamplingParams
    from pipeline.rollout.hf_engine import HFEngine

    engine = HFEngine(model, tok, batch_size=64)
    prompts = [build_prompt(r["question"], template=cfg.prompt.template, tokenizer=tok, chat=cfg.prompt.chat)
               for r in records]
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, seed=cfg.seed)
    samples = engine.generate(prompts, n, params)
    return [sum(extract_answer(s.completion) == r["answer"] for s in group)
            for r, group in zip(records, samples)]


def accuracy_report(records: list[dict], correct: list[int]) -> dict:
    """Overall and per-number-of-steps accuracy of greedy answers."""
    by: dict[int, list[int]] = {}
    for r, c in zip(records, correct):
        by.setdefault(r["solution"].count("<<"), []).append(c)
    return {"accuracy": sum(correct) / max(1, len(correct)), "n": len(correct),
            "by_steps": {k: round(sum(v) / len(v), 4) for k, v in sorted(by.items())}}


def _test_problems(cfg: RunConfig) -> list[dict]:
    """The task's test split; for a JSONL task the ``test.jsonl`` beside it, if there is one."""
    task = cfg.sft.task
    if task.endswith(".jsonl"):
        task = str(Path(task).with_name("test.jsonl"))
        if not Path(task).is_file():
            return []
    return load_problems(cfg.data.prepared_dir, task, "test", synth=cfg.data)


def _stamp(cfg: RunConfig) -> str:
    """What the SFT output depends on: settings, seed, prompt, data and the initial weights."""
    h = hashlib.sha256(json.dumps([asdict(cfg.sft), asdict(cfg.prompt), asdict(cfg.data), cfg.seed],
                                  sort_keys=True).encode())
    for name in ("tiny_build.json", "config.json", "model.safetensors"):
        path = Path(cfg.sft.init) / name
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()[:16]


def main(cfg: RunConfig) -> int:
    """`mathrl sft`: corrupt, fine-tune, save, report greedy test accuracy."""
    from pipeline.models import load_policy

    s = cfg.sft
    stamp = _stamp(cfg)
    report_path = Path(s.output) / "sft_report.json"
    if report_path.is_file() and json.loads(report_path.read_text()).get("stamp") == stamp:
        print(f"sft: {s.output} is up to date (same init, data and settings); skipping")
        return 0
    determinism.apply(cfg, "sft")
    torch.manual_seed(cfg.seed)
    t0 = time.time()
    model, tok = load_policy(s.init, dtype="float32", device=cfg.device)
    train_records = load_problems(cfg.data.prepared_dir, s.task, "train", synth=cfg.data)
    train_records, n_bad = corrupt_records(train_records, s.corrupt_frac, cfg.seed, s.corrupt_mode)
    print(f"sft: {len(train_records)} training solutions, {n_bad} corrupted; "
          f"{sum(p.numel() for p in model.parameters()):,} params")
    losses = train(model, tok, encode(train_records, tok, cfg), cfg)
    out = Path(s.output)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    train_minutes = (time.time() - t0) / 60
    test = _test_problems(cfg)[:s.eval_limit]
    report = {"train_minutes": round(train_minutes, 2), "final_loss": sum(losses[-20:]) / len(losses[-20:]),
              "corrupted": n_bad, "steps": s.steps}
    if test:
        report.update(accuracy_report(test, evaluate(model, tok, test, cfg)))
        print(f"sft: greedy accuracy on {len(test)} test problems: {report['accuracy']:.3f} "
              f"(by steps: {report['by_steps']})")
    report["stamp"] = stamp
    (out / "sft_report.json").write_text(json.dumps(report, indent=1))
    print(f"sft: saved {out} after {train_minutes:.1f} min of training (final loss {report['final_loss']:.3f})")
    return 0


__all__ = ["accuracy_report", "buggy_solution", "corrupt_records", "corrupt_solution", "encode", "evaluate", "extract_answer",
           "main", "train"]
