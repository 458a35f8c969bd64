"""Program-of-thought reward: run the completion's last ```python block, compare its output.

`code_reward(completion, gold, runner)` takes the last fenced Python block (```python, ```py
or a bare ``` fence), runs it with `runner(code)` - anything returning an object with
`.stdout`, `.exit_code` and `.timed_out`, by default `sandbox.run` (imported lazily, so the
rest of `rewards` works without the sandbox) - and scores 1.0 when the last non-blank line it
printed is `is_equiv` to `gold`. No block, a crash, a timeout or no output score 0.0.
A runner that cannot run at all (no sandbox backend here) raises: that is a setup error, and
turning it into silent zero rewards is the failure this package exists to avoid.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from rewards.equivalence.equiv import is_equiv

_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
MAX_ANSWER_CHARS = 500

Runner = Callable[[str], Any]


def last_code_block(completion: str) -> str | None:
    """The body of the last fenced code block, or None."""
    last = None
    for match in _FENCE.finditer(completion):
        last = match
    return last.group(1) if last is not None else None


def default_runner(code: str, timeout_s: float = 5.0, backend: str = "auto"):
    """`sandbox.run` with the reward's limits (imported here so `rewards` works without it)."""
    import sandbox

    return sandbox.run(code, timeout_s=timeout_s, memory_mb=512, max_output_bytes=65536,
                       backend=backend)


def printed_answer(stdout: str) -> str | None:
    """The last non-blank line a program printed (its answer), or None."""
    lines = [ln.strip() for ln in (stdout or "").splitlines() if ln.strip()]
    return lines[-1][:MAX_ANSWER_CHARS] if lines else None


def code_reward(completion: str, gold: str, runner: Runner | None = None) -> float:
    """1.0 if the last ```python block prints an answer equivalent to `gold`, else 0.0."""
    code = last_code_block(completion) if isinstance(completion, str) else None
    if code is None or not code.strip():
        return 0.0
    result = (runner or default_runner)(code)
    if getattr(result, "timed_out", False) or getattr(result, "exit_code", 1) != 0:
        return 0.0
    answer = printed_answer(getattr(result, "stdout", ""))
    return 1.0 if answer is not None and is_equiv(answer, gold) else 0.0
