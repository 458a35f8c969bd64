"""The multi-turn rollout of tool-integrated reasoning: decode until a code block closes, run every
waiting block at once in the sandbox, append the outputs, decode on; an engine supplies the decoding.

``multi_turn(decode_rows, prompt_ids, ...)`` drives all the completions of one ``generate`` call in
turns. Each turn decodes every completion still going (``decode_rows``: the engine's batched decode
of the given contexts, each row ending at an EOS, at its token budget, or where ``stop`` says its
code block has closed). The completions that stopped at a closed ```` ```python ```` block then run
their code together (``ToolRunner.run_all``: concurrently through the sandbox pool), and each gets
its ```` ```output ```` block appended; those go on to the next turn, the others are done.

Token ids end to end: a completion's ids are the ids the policy sampled, then the output block's ids
from one tokenisation of that block alone, then the next turn's sampled ids, and so on; the joined
text is never re-encoded (re-encoding can merge tokens across the boundary and change what the
policy is trained on). ``tool_spans`` records the [start, end) of every appended block in the
completion's ids: those are tool tokens, the rest policy tokens (the loss mask drops the former,
pipeline/grpo/batch.py: loss_mask).

Limits: ``max_calls`` code blocks are run per completion; after that a code block no longer stops
the decode (the policy writes on without an output). The token budget ``max_new_tokens`` counts
every token, tool tokens included; an output block that does not fit is cut to the room left and
the completion ends there with finish_reason ``length``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from pipeline.rollout.base import Sample
from pipeline.rollout.tool_format import ToolCall, closed_code, output_block
from pipeline.rollout.tool_runner import ToolRunner

# decode_rows(jobs, contexts, budgets, stop) -> (tokens per row, log-probs per row or None): row k
# continues ``contexts[k]`` (prompt + completion so far) of completion ``jobs[k]`` by at most
# ``budgets[k]`` tokens, ending early at an EOS (kept) or once ``stop(jobs[k], row's new tokens)``
# (a ``TurnStop``: ``stop.armed(job)`` is False when stop can never be true for that job)
DecodeRows = Callable[[list[int], list[list[int]], list[int], "TurnStop"],
                      tuple[list[list[int]], list[list[float]] | None]]


@dataclass
class Transcript:
    """One completion as it is built."""

    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)  # 0.0 at tool tokens (the engine did not sample them)
    tool_spans: list[tuple[int, int]] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    turns: list[str] = field(default_factory=list)  # the text of each policy turn (SimpleTIR's void-turn filter)
    finish_reason: str = "stop"
    wait_s: float = 0.0  # this completion's share of the rollout's wall time waiting on the tool

    def stats(self) -> dict[str, float]:
        """Per-completion tool statistics (samples.jsonl; their means go to metrics.jsonl). ``sandbox_s``:
        its calls' own seconds (calls of one turn overlap); ``wait_s``: each turn's wall time waiting
        on the tool, split evenly over that turn's calls, so the ``wait_s`` of a rollout's completions
        sum to the wall time it waited."""
        return {"calls": len(self.calls), "errors": sum(c.error for c in self.calls),
                "timeouts": sum(c.timed_out for c in self.calls),
                "sandbox_s": round(sum(c.seconds for c in self.calls), 6), "wait_s": round(self.wait_s, 6)}


class Backticks:
    """``backticks(token_id)``: the token's text holds a backtick (memoised per id)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self._tick: dict[int, bool] = {}

    def __call__(self, token: int) -> bool:
        if token not in self._tick:
            self._tick[token] = "`" in self.tokenizer.decode([token])
        return self._tick[token]


class CodeStop:
    """A row's new tokens hold a closed ```python block. Decodes only after a token that contains a
    backtick (the closing fence's), so a turn costs one decode per fence."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.backticks = Backticks(tokenizer)

    def __call__(self, tokens: list[int]) -> bool:
        return self.backticks(tokens[-1]) and \
            closed_code(self.tokenizer.decode(tokens, skip_special_tokens=True)) is not None


class TurnStop:
    """``stop`` for ``decode_rows``: ``stop(job, new_tokens)`` is true once a job that may still call
    the tool has closed a code block; ``armed(job)`` says whether it may (fewer than ``max_calls`` calls)."""

    def __init__(self, transcripts: list[Transcript], max_calls: int, code_stop: CodeStop):
        self.transcripts, self.max_calls, self.code_stop = transcripts, max_calls, code_stop

    def armed(self, job: int) -> bool:
        return len(self.transcripts[job].calls) < self.max_calls

    def __call__(self, job: int, tokens: list[int]) -> bool:
        return self.armed(job) and self.code_stop(tokens)


def multi_turn(decode_rows: DecodeRows, prompt_ids: list[list[int]], tokenizer, *, max_new_tokens: int,
               runner: ToolRunner, eos_ids: list[int]) -> list[Transcript]:
    """One ``Transcript`` per prompt of ``prompt_ids`` (module notes)."""
    max_calls = runner.settings.max_calls
    out = [Transcript() for _ in prompt_ids]
    stop = TurnStop(out, max_calls, CodeStop(tokenizer))
    active = list(range(len(prompt_ids)))
    while active:
        contexts = [prompt_ids[j] + out[j].ids for j in active]
        budgets = [max_new_tokens - len(out[j].ids) for j in active]
        tokens, logprobs = decode_rows(active, contexts, budgets, stop)
        waiting: list[tuple[int, str, str]] = []  # (job, code, the turn's text)
        for k, j in enumerate(active):
            t, new = out[j], tokens[k]
            t.ids += new
            t.logprobs += logprobs[k] if logprobs is not None else [0.0] * len(new)
            ended = bool(new) and new[-1] in eos_ids
            text = tokenizer.decode(new, skip_special_tokens=True)
            t.turns.append(text)
            code = closed_code(text) if not ended and len(t.calls) < max_calls else None
            if code is not None and len(t.ids) < max_new_tokens:
                waiting.append((j, code, text))
            else:
                t.finish_reason = "stop" if ended or len(t.ids) < max_new_tokens else "length"
        before = runner.wall_s
        calls = runner.run_all([code for _, code, _ in waiting])
        share = (runner.wall_s - before) / max(1, len(waiting))  # the pool's one-off start is not counted
        active = []
        for (j, _, text), call in zip(waiting, calls):
            t = out[j]
            t.wait_s += share
            appended = tokenizer(output_block(call.output, text), add_special_tokens=False)["input_ids"]
            appended = appended[:max_new_tokens - len(t.ids)]
            t.tool_spans.append((len(t.ids), len(t.ids) + len(appended)))
            t.ids += appended
            t.logprobs += [0.0] * len(appended)
            t.calls.append(call)
            if len(t.ids) < max_new_tokens:
                active.append(j)
            else:
                t.finish_reason = "length"
    return out


def to_samples(prompts: list[str], jobs: list[tuple[int, list[int]]], done: list[Transcript], tokenizer,
               logprobs: bool) -> list[list[Sample]]:
    """The engine's answer for a ``multi_turn`` over ``jobs`` ((prompt index, prompt ids), in order):
    one ``Sample`` per transcript, grouped by prompt; log-probs only when the caller asked for them."""
    results: list[list[Sample]] = [[] for _ in prompts]
    for (i, ids), t in zip(jobs, done):
        results[i].append(Sample(
            prompt=prompts[i], prompt_ids=ids, completion=tokenizer.decode(t.ids, skip_special_tokens=True),
            completion_ids=t.ids, finish_reason=t.finish_reason, logprobs=t.logprobs if logprobs else None,
            tool_spans=t.tool_spans, tool_stats=t.stats(), turns=t.turns))
    return results
