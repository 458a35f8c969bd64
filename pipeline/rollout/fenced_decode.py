"""``decode_rows`` (multi_turn.py) for an engine that decodes whole requests and can stop only at a
fixed string (vLLM): the turn must end right after the closing fence of a ```` ```python ```` block,
and no stop string can say "a fence that closes a python block".

``FencedDecode(send, backticks, eos_ids)`` is that ``decode_rows``. Each row of a call is decoded by
one or more engine requests (``Request``), sent together for all rows still going (``send``: one
batched engine call, returning one ``Reply`` per request, in order):

- a row that may still call the tool (``stop.armed(job)``) is decoded with the stop string ``FENCE``
  (```` ``` ````): its request ends at an EOS, at its budget, or right after the first token whose
  text completes a fence. Its new tokens are then scanned for the first point where
  ``stop(job, tokens)`` is true (only after tokens that hold a backtick) and cut there: the turn is
  over. A request that stopped at a fence that closes no python block (the opening fence, a fence
  of another language, a fence in the prose) is followed by another request with the context
  extended by the tokens so far and the budget less them, until stop() is true, an EOS or the budget;
- a row that may not (``max_tool_calls`` reached) is one request without the stop string.

The scan, not the stop string, decides where a turn ends, so a row ends exactly where the HF decode
loop would end it (the first token where stop() is true), also when a fence spans two requests
("``" ending one, "`" starting the next: the engine's stop string sees only its own request's text).
Tokens sampled after the cut in the same request are dropped: a prefix of a sample is a sample of
that prefix. The engine's token ids are what was sampled; its text may stop inside a token.

Each request has an index ``nth`` (how many requests the job had before it in this rollout), which
the engine turns into a seed: a job's turns and continuations each draw fresh randomness,
deterministically.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

FENCE = "```"


@dataclass(frozen=True)
class Request:
    """Continue ``context`` by at most ``max_tokens`` tokens; with ``fence``, stop after a ``FENCE``."""

    job: int
    nth: int  # the job's earlier requests in this rollout (all turns): the engine seeds from (job, nth)
    context: list[int]
    max_tokens: int
    fence: bool


@dataclass(frozen=True)
class Reply:
    tokens: list[int]  # the sampled ids (EOS kept)
    logprobs: list[float] | None
    at_fence: bool  # the request ended at its stop string (not at an EOS or its max_tokens)


@dataclass
class _Row:
    job: int
    context: list[int]
    budget: int
    fence: bool
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    done: bool = False


def first_stop(tokens: list[int], start: int, backticks: Callable[[int], bool],
               stop: Callable[[list[int]], bool]) -> int | None:
    """The smallest k > ``start`` with ``stop(tokens[:k])``, trying only prefixes that end in a token
    with a backtick (a closing fence ends in one); None when there is none. The prefixes up to
    ``start`` were tried before."""
    for k in range(start + 1, len(tokens) + 1):
        if backticks(tokens[k - 1]) and stop(tokens[:k]):
            return k
    return None


def absorb(row: _Row, reply: Reply, eos_ids: list[int], backticks, stop) -> None:
    """Add ``reply`` to ``row``; mark it done at stop(), an EOS or the budget, else it needs another
    request (only after a fence: anything else that ends a request early is an engine error)."""
    start = len(row.tokens)
    row.tokens += reply.tokens
    if reply.logprobs is not None:
        row.logprobs += reply.logprobs
    cut = first_stop(row.tokens, start, backticks, lambda t: stop(row.job, t)) if row.fence else None
    if cut is not None:
        del row.tokens[cut:], row.logprobs[cut:]
        row.done = True
    elif (row.tokens and row.tokens[-1] in eos_ids) or len(row.tokens) >= row.budget:
        row.done = True
    elif not reply.at_fence:
        raise RuntimeError(f"the engine ended a request after {len(reply.tokens)} tokens, before an EOS, its "
                           f"max_tokens or its stop string (context {len(row.context) + start} tokens)")


class FencedDecode:
    """``decode_rows`` over ``send`` (module notes). One instance per rollout: it counts each job's
    requests across turns for the seeds."""

    def __init__(self, send: Callable[[list[Request]], list[Reply]], backticks: Callable[[int], bool],
                 eos_ids: list[int], logprobs: bool):
        self.send, self.backticks, self.eos_ids, self.logprobs = send, backticks, eos_ids, logprobs
        self.sent: Counter[int] = Counter()  # job -> requests sent so far

    def __call__(self, jobs, contexts, budgets, stop):
        rows = [_Row(j, c, b, stop.armed(j)) for j, c, b in zip(jobs, contexts, budgets)]
        going = [r for r in rows if r.budget > 0]  # multi_turn gives every row room; a 0 would be no request
        while going:
            replies = self.send([self._request(r) for r in going])
            for r, reply in zip(going, replies):
                absorb(r, reply, self.eos_ids, self.backticks, stop)
            going = [r for r in going if not r.done]
        return [r.tokens for r in rows], ([r.logprobs for r in rows] if self.logprobs else None)

    def _request(self, row: _Row) -> Request:
        nth = self.sent[row.job]
        self.sent[row.job] += 1
        return Request(row.job, nth, row.context + row.tokens, row.budget - len(row.tokens), row.fence)
