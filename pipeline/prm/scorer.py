"""Step probabilities from a process reward model, batched, in the Qwen2.5-Math-PRM protocol.

Input (as the Qwen2.5-Math-PRM model card shows it): a chat with the system prompt below, the
question as the user turn, and the steps joined by `<extra_0>` with one after the last step as
the assistant turn (plain text when the tokenizer has no chat template). The model's two logits
at the k-th separator give P(step k good) = softmax(logits)[1].

Model text is hostile: a step or question that writes `<extra_0>` itself would shift every
later step onto the wrong separator, so the separator string is removed from them first.
Inputs longer than `max_tokens` are cut; the steps whose separator was cut get no score (None)
and the rules alone judge them. Sequences are sorted by length before batching (less padding)
and the results put back in order.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from pipeline.prm.model import SEPARATOR
from rewards.steps.scorers import StepScores, first_below

SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."


class PRMScorer:
    """P(step good) per step for (question, steps) pairs; also a step scorer (`__call__`)."""

    def __init__(self, model, tokenizer, sep_id: int, *, batch_size: int = 8, max_tokens: int = 4096,
                 threshold: float = 0.5):
        self.model, self.tokenizer, self.sep_id = model, tokenizer, sep_id
        self.batch_size, self.max_tokens, self.threshold = batch_size, max_tokens, threshold
        self.device = next(model.parameters()).device
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    def text(self, question: str, steps: Sequence[str]) -> str:
        """The PRM's input text for one solution."""
        clean = [str(s).replace(SEPARATOR, "") for s in steps]
        answer = SEPARATOR.join(clean) + SEPARATOR if clean else ""
        question = str(question).replace(SEPARATOR, "")
        if getattr(self.tokenizer, "chat_template", None):
            messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question},
                        {"role": "assistant", "content": answer}]
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
        return f"{SYSTEM}\n\n{question}\n\n{answer}"

    def encode(self, question: str, steps: Sequence[str]) -> list[int]:
        ids = self.tokenizer(self.text(question, steps), add_special_tokens=False)["input_ids"]
        return ids[:self.max_tokens]

    def probabilities(self, items: Sequence[tuple[str, Sequence[str]]]) -> list[list[float | None]]:
        """For each (question, steps): P(good) per step, None for steps cut off by max_tokens."""
        encoded = [self.encode(q, s) for q, s in items]
        out: list[list[float | None]] = [[] for _ in items]
        order = sorted(range(len(items)), key=lambda i: len(encoded[i]))
        for start in range(0, len(order), self.batch_size):
            rows = order[start:start + self.batch_size]
            for i, probs in zip(rows, self._forward([encoded[i] for i in rows])):
                n = len(items[i][1])
                if len(probs) > n:  # cannot happen after the separator is removed from the text
                    raise RuntimeError(f"PRM input {i}: {len(probs)} separators for {n} steps")
                out[i] = probs + [None] * (n - len(probs))
        return out

    @torch.no_grad()
    def _forward(self, batch: list[list[int]]) -> list[list[float]]:
        """P(good) at each separator of each right-padded sequence."""
        width = max(len(ids) for ids in batch)
        input_ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for r, ids in enumerate(batch):
            input_ids[r, :len(ids)] = torch.tensor(ids, dtype=torch.long)
            mask[r, :len(ids)] = 1
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        logits = self.model(input_ids=input_ids, attention_mask=mask)
        logits = getattr(logits, "logits", logits)  # a token-classification model returns an output object
        good = torch.softmax(logits.float(), dim=-1)[..., 1]  # [B, T]
        at_sep = (input_ids == self.sep_id) & mask.bool()
        return [good[r][at_sep[r]].tolist() for r in range(len(batch))]

    def __call__(self, question: str, steps: Sequence[str]) -> StepScores:
        probs = self.probabilities([(question, steps)])[0]
        scores = tuple(math.nan if p is None else p for p in probs)
        reasons = tuple("no PRM score: past reward.prm_max_tokens" if p is None else "" for p in probs)
        return StepScores(scores, first_below(scores, self.threshold), reasons)


class CachedScorer:
    """A step scorer that answers from probabilities computed beforehand in batches (eval-prm)."""

    def __init__(self, scorer: PRMScorer, records: Sequence[dict]):
        items = [(r.get("question", ""), list(r["steps"])) for r in records]
        self.threshold = scorer.threshold
        self.table = {(q, tuple(s)): p for (q, s), p in zip(items, scorer.probabilities(items))}

    def __call__(self, question: str, steps: Sequence[str]) -> StepScores:
        probs = self.table[(question, tuple(steps))]
        scores = tuple(math.nan if p is None else p for p in probs)
        return StepScores(scores, first_below(scores, self.threshold), ("",) * len(scores))
