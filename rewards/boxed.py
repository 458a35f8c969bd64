"""Find the last ``\\boxed{...}`` / ``\\fbox{...}`` in LaTeX text, with nested braces.

Used by the data stage to read MATH gold answers and by answer extraction. Plain string
scanning: no regex backtracking, linear in the text length, safe on hostile input.
"""

from __future__ import annotations

_COMMANDS = ("\\boxed", "\\fbox")


def _last_command(text: str) -> tuple[int, str] | None:
    best = None
    for cmd in _COMMANDS:
        start = len(text)
        while True:
            i = text.rfind(cmd, 0, start)
            if i < 0:
                break
            nxt = text[i + len(cmd): i + len(cmd) + 1]
            if nxt.isalpha():  # e.g. \boxedsomething is another macro
                start = i
                continue
            if best is None or i > best[0]:
                best = (i, cmd)
            break
    return best


def last_boxed_span(text: str) -> tuple[int, int, int, int] | None:
    """(command start, command end, content start, content end) of the last box, or None.

    `text[content start:content end]` is the box content; `command end` is just past the
    closing brace (or the bare argument of ``\\boxed 5``). None when there is no box or its
    braces never close.
    """
    found = _last_command(text)
    if found is None:
        return None
    i, cmd = found
    j = i + len(cmd)
    while j < len(text) and text[j] == " ":
        j += 1
    if j >= len(text):
        return None
    if text[j] != "{":
        # "\boxed 5" form: the argument runs to the next whitespace or "$".
        k = j
        while k < len(text) and not text[k].isspace() and text[k] != "$":
            k += 1
        return (i, k, j, k) if k > j else None
    depth = 0
    for k in range(j, len(text)):
        c = text[k]
        if c == "{" and text[k - 1] != "\\":
            depth += 1
        elif c == "}" and text[k - 1] != "\\":
            depth -= 1
            if depth == 0:
                return (i, k + 1, j + 1, k)
    return None


def last_boxed(text: str) -> str | None:
    """Contents of the last ``\\boxed{...}``/``\\fbox{...}`` (``\\boxed 5`` without braces too).

    Returns None when there is no box or its braces never close.
    """
    span = last_boxed_span(text)
    return None if span is None else text[span[2]:span[3]]


def count_boxes(text: str) -> int:
    """Number of ``\\boxed``/``\\fbox`` commands in the text."""
    return sum(text.count(cmd + c) for cmd in _COMMANDS for c in ("{", " "))
