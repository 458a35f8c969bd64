"""`strict_check`: the strict policy's outcome reward, one deadline per completion.

Pays 1.0 only when the completion has exactly one final answer statement at its end
(`rewards.outcome.strict_statement`), its content parses completely in the closed grammar
(`rewards.equivalence.grammar.parser`) and equals the gold (`rewards.equivalence.grammar.compare`). Everything else is
0 with a reason: `no answer found`, `no single answer: ...`, `unrecognized: <token>`,
`not equal`, `timeout` (the completion's budget - every comparison of a box group, every
earlier statement, the gold comparison - is one deadline, `timeout` seconds from the call).
A gold the grammar cannot read (a reference answer is trusted, not attacked) is compared
with the lenient equivalence against the prediction's printed parse, so only what the
grammar read of the completion reaches it.
"""

from __future__ import annotations

import time
from functools import lru_cache

from rewards.equivalence.grammar.compare import EQUAL, TIMEOUT, compare, printed
from rewards.equivalence.grammar.lexer import Unrecognized
from rewards.equivalence.grammar.parser import parse_answer
from rewards.outcome.strict_statement import strict_final

NO_ANSWER = "no answer found"
NO_SINGLE = "no single answer"


def strict_check(completion: str, gold: str, timeout: float = 5.0):
    """RewardResult(score, pred, reason) under the strict policy (module docstring)."""
    from rewards.outcome.answer import RewardResult

    deadline = time.monotonic() + timeout
    try:
        final = strict_final(completion)
        if final.problem:
            reason = final.problem if final.problem == NO_ANSWER else f"{NO_SINGLE}: {final.problem}"
            return RewardResult(0.0, None, reason)
        pred_text = ", ".join(final.contents)
        try:
            items = [_parsed(c) for c in final.contents]
        except Unrecognized as e:
            return RewardResult(0.0, pred_text, str(e))
        if final.joined_by_or:
            for other in items[1:]:  # "\boxed{a} or \boxed{b}": one value written twice, or none
                status = compare(items[0], other, deadline, marks="same")
                if status != EQUAL:
                    return RewardResult(0.0, pred_text, TIMEOUT if status == TIMEOUT else f"{NO_SINGLE}: or")
            items = items[:1]
        pred = items[0] if len(items) == 1 else ("list", tuple(items))
        for other in final.others:
            try:
                node = _parsed(other)
            except Unrecognized:
                return RewardResult(0.0, pred_text, f"{NO_SINGLE}: another statement {other[:40]!r}")
            status = compare(node, pred, deadline, marks="same")
            if status != EQUAL:
                return RewardResult(0.0, pred_text, TIMEOUT if status == TIMEOUT else
                                    f"{NO_SINGLE}: another statement {other[:40]!r}")
        status = _against_gold(pred, gold, deadline)
        if status == EQUAL:
            return RewardResult(1.0, pred_text, "")
        return RewardResult(0.0, pred_text, TIMEOUT if status == TIMEOUT else "not equal")
    except Exception as e:  # noqa: BLE001 - a reward never raises on model text
        if isinstance(e, RecursionError):
            return RewardResult(0.0, None, "unrecognized: nesting")
        return RewardResult(0.0, None, f"parse error: {type(e).__name__}")


@lru_cache(maxsize=4096)
def _parse_or_error(text: str):
    try:
        return parse_answer(text), None
    except Unrecognized as e:
        return None, e.with_traceback(None)  # the cache keeps the message, not the frames


def _parsed(text: str):
    """`parse_answer`, memoised: a group's completions share one gold and often one answer
    (the trees are tuples, so a cached tree is never mutated)."""
    node, error = _parse_or_error(text)
    if error is not None:
        raise error.with_traceback(None)  # one cached exception, its old frames dropped
    return node


def clear_cache() -> None:
    """Forget the memoised parses (benchmarks time a cold pass)."""
    _parse_or_error.cache_clear()


def _against_gold(pred, gold: str, deadline: float) -> str:
    try:
        gold_node = _parsed(str(gold))
    except Unrecognized:
        from rewards.equivalence.equiv import equiv_status

        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return TIMEOUT
        return equiv_status(printed(pred), str(gold), remaining)
    return compare(pred, gold_node, deadline)
