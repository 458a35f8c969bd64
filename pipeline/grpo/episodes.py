"""The record that flows rollout -> reward -> update, and its packing into padded tensors.

One ``Episode`` per sampled completion: the prompt and completion (text and token ids), the
engine's per-token log-probs, each reward component, the scalar reward, and (for process
supervision) the token index where each step ends with that step's reward. The advantage is
kept apart from the reward and filled in by the trainer.

``pack`` lays a list of episodes out as ``[left-padded prompt | completion | right padding]``
so every completion starts in the same column; position ids follow the attention mask, the way
``generate`` numbers positions, so training log-probs match sampling log-probs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch


@dataclass
class Episode:
    problem_id: str
    group: int  # index of the question within the step's batch
    sample: int  # index within the group
    prompt: str
    completion: str
    prompt_ids: list[int]
    completion_ids: list[int]
    finish_reason: str
    gold: str
    engine_logprobs: list[float] | None = None
    rewards: dict[str, float] = field(default_factory=dict)
    reward: float = 0.0
    step_rewards: list[float] = field(default_factory=list)
    step_ends: list[int] = field(default_factory=list)  # token index of each step's last token
    question: str = ""  # the problem text without the prompt template (a process reward model reads it)
    solution: str = ""  # the reference solution (process supervision counts the calculations it makes)
    tool_spans: list[tuple[int, int]] = field(default_factory=list)  # rollout.tools: tool-output tokens [start, end)
    tool_stats: dict[str, float] = field(default_factory=dict)  # rollout.tools: calls, errors, timeouts, sandbox_s
    turns: list[str] = field(default_factory=list)  # rollout.tools: the text of each policy turn

    def record(self) -> dict:
        """The rollout record written to samples.jsonl (one JSON line)."""
        return {"problem_id": self.problem_id, "sample": self.sample, "prompt": self.prompt,
                "completion": self.completion, "rewards": self.rewards, "reward": self.reward,
                "num_tokens": len(self.completion_ids), "finish_reason": self.finish_reason,
                **({"tool": self.tool_stats, "tool_tokens": sum(b - a for a, b in self.tool_spans)}
                   if self.tool_stats else {})}


@dataclass
class Packed:
    input_ids: torch.Tensor  # [N, P + T]
    attention_mask: torch.Tensor  # [N, P + T]
    position_ids: torch.Tensor  # [N, P + T]
    completion_mask: torch.Tensor  # [N, T] float, 1 on real completion tokens
    prompt_width: int  # P: column where completions start

    def to(self, device) -> "Packed":
        """The same batch with every tensor on ``device`` (a no-op for those already there)."""
        return dataclasses.replace(self, input_ids=self.input_ids.to(device),
                                   attention_mask=self.attention_mask.to(device),
                                   position_ids=self.position_ids.to(device),
                                   completion_mask=self.completion_mask.to(device))


def pack(episodes: list[Episode], pad_id: int) -> Packed:
    n = len(episodes)
    p = max(len(e.prompt_ids) for e in episodes)
    t = max(max(len(e.completion_ids) for e in episodes), 1)
    input_ids = torch.full((n, p + t), pad_id, dtype=torch.long)
    attention = torch.zeros((n, p + t), dtype=torch.long)
    comp_mask = torch.zeros((n, t))
    for i, e in enumerate(episodes):
        lp, lc = len(e.prompt_ids), len(e.completion_ids)
        input_ids[i, p - lp:p] = torch.tensor(e.prompt_ids, dtype=torch.long)
        input_ids[i, p:p + lc] = torch.tensor(e.completion_ids, dtype=torch.long)
        attention[i, p - lp:p + lc] = 1
        comp_mask[i, :lc] = 1.0
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    return Packed(input_ids, attention, positions, comp_mask, p)


def char_to_token_ends(tokenizer, completion_ids: list[int], char_ends: list[int]) -> list[int]:
    """For each character offset (exclusive end of a step in the decoded completion), the
    index of the first token whose decoded prefix reaches it. Binary search over prefix
    decodes: exact for any tokenizer, O(steps * log T) decodes."""
    lengths: dict[int, int] = {}

    def prefix_len(k: int) -> int:
        if k not in lengths:
            lengths[k] = len(tokenizer.decode(completion_ids[:k + 1], skip_special_tokens=True))
        return lengths[k]

    last = len(completion_ids) - 1
    out = []
    for end in char_ends:
        lo, hi = 0, last
        while lo < hi:
            mid = (lo + hi) // 2
            if prefix_len(mid) >= end:
                hi = mid
            else:
                lo = mid + 1
        out.append(max(lo, 0))
    return out


def mini_batch_rows(groups: list[int], k: int) -> list[list[int]]:
    """Row indices of ``k`` mini-batches of whole groups: the j-th takes every k-th group, starting
    at group j (in order of appearance; ``groups`` holds each row's group, a group's rows together).
    Strided rather than contiguous so that the split does not depend on the number of ranks: each
    rank holds a contiguous share of the global groups whose size is a multiple of k (the config
    check), so its j-th mini-batch is the global j-th mini-batch's part on that rank."""
    order = list(dict.fromkeys(groups))
    members = {g: i % k for i, g in enumerate(order)}
    return [[row for row, g in enumerate(groups) if members[g] == j] for j in range(k)]
