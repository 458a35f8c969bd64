"""Text rules of tool-integrated reasoning (``rollout.tools: [python]``): where a policy turn ends,
which code it asks to run, and the ```` ```output ```` block that is appended for it.

The format is Qwen2.5-Math's TIR format (Qwen2.5-Math report, arXiv:2409.12122; ToRA,
arXiv:2309.17452): the policy writes a fenced block

    ```python
    print(17 * 23)
    ```

generation stops right after its closing fence, the sandbox runs the code, and the completion goes
on after

    ```output
    391
    ```

The output block holds what the code printed on stdout, exactly, up to ``output_chars`` characters
(then a marker says how much was cut); a failing program adds its traceback's last line (the
exception and its message), a program stopped at its time limit or memory cap adds a message saying
so. Everything here is pure string work: the engine tokenises the block once and appends those ids
(pipeline/rollout/multi_turn.py), it never re-encodes the joined text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A ```python fence, then the code, then the first line that starts with ``` (the closing fence).
_BLOCK = re.compile(r"```python[ \t]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
MAX_MESSAGE_CHARS = 300  # a traceback line is the program's own text: it is capped like its stdout


@dataclass(frozen=True)
class ToolCall:
    """One executed code block: what goes back to the policy and what the statistics count."""

    output: str  # the body of the ```output block
    error: bool  # the program failed (an exception, a non-zero exit, the memory cap, a sandbox failure)
    timed_out: bool
    seconds: float  # wall time of this call in the sandbox, as the host measured it


def closed_code(turn_text: str) -> str | None:
    """The code of the first ```python block that is closed in ``turn_text`` (the text the policy wrote
    since its last tool output), or None while there is none."""
    match = _BLOCK.search(turn_text)
    return None if match is None else match.group(1)


def output_body(stdout: str, *, error_line: str | None = None, timeout_s: float | None = None,
                oom: bool = False, killed_for_output: bool = False, output_chars: int = 512) -> str:
    """The ```output body for one run: stdout as printed (one trailing newline dropped: the fence adds
    it back), cut at ``output_chars``, then at most one line saying why the run failed or stopped."""
    text = stdout[:-1] if stdout.endswith("\n") else stdout
    notes = []
    if killed_for_output:  # the sandbox stopped it at its byte limit: what it would have printed is unknown
        notes.append("[output truncated: the program printed past the output limit and was stopped]")
    elif len(text) > output_chars:
        notes.append(f"[output truncated: {len(text) - output_chars} more characters]")
    text = text[:output_chars]
    if timeout_s is not None:
        notes.append(f"TimeoutError: the code ran longer than {timeout_s:g} s and was stopped")
    elif oom:
        notes.append("MemoryError: the code ran out of memory and was stopped")
    elif error_line is not None:
        notes.append(error_line[:MAX_MESSAGE_CHARS])
    return "\n".join(([text] if text else []) + notes)


def last_error_line(stderr: str, exit_code: int) -> str:
    """A failed program's traceback's last line ("ZeroDivisionError: division by zero"), or its exit
    status when it wrote nothing to stderr."""
    lines = [ln.strip() for ln in (stderr or "").splitlines() if ln.strip()]
    return lines[-1] if lines else f"Error: the program exited with status {exit_code}"


def output_block(body: str, turn_text: str) -> str:
    """The text appended after a turn that ends with a code block: a newline first when the turn does
    not end with one (the closing fence was the last thing sampled), then the ```output block."""
    lead = "" if turn_text.endswith("\n") else "\n"
    return f"{lead}```output\n{body}\n```\n"
