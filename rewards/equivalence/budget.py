"""One deadline per completion: the budget that every check of a completion shares.

`check` opens `with budget(deadline):` around reading a completion; code deep in the reader
(`rewards.answers.statements`, comparing or-joined boxes) asks `current_deadline()` instead of taking a
fresh timeout per comparison, so the cost of a completion is bounded by one timeout whatever it
holds. Per thread (a ContextVar), so concurrent checks keep their own budgets.
"""

from __future__ import annotations

import contextlib
import contextvars
import math

_DEADLINE: contextvars.ContextVar[float] = contextvars.ContextVar("rewards_deadline", default=math.inf)


@contextlib.contextmanager
def budget(deadline: float):
    """Checks inside the block end by `deadline` (time.monotonic() seconds)."""
    token = _DEADLINE.set(min(deadline, _DEADLINE.get()))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def current_deadline() -> float:
    """The deadline of the completion being checked (inf outside any `budget`)."""
    return _DEADLINE.get()
