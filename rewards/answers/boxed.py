"""Find ``\\boxed{...}`` / ``\\fbox{...}`` in LaTeX text, with nested braces.

`last_boxed` reads the last box (the MATH convention for gold answers); `boxes` lists every
top-level box; `box_groups` joins boxes written side by side ("$\\boxed{1}$, $\\boxed{2}$ and
$\\boxed{3}$") into one answer, and `final_boxed` is the last such group. Plain string scanning:
one pass matches all braces, so everything here is linear in the text length and safe on
hostile input (no regex backtracking, no rescanning per box).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_COMMANDS = ("\\boxed", "\\fbox")
_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_BRACE = re.compile(r"[{}]")
# What may stand between two boxes that form one answer: spacing, math delimiters, commas,
# "and"/"or" (plain or in \text{}), alignment marks. Anything else (words, "=", ".") ends a group.
_JOIN = re.compile(
    r"(?:\s|\$|\\[()\[\]]|[,;&]|\\\\|\\[,;:! ]|\\q?quad|\\text\{\s*(?:and|or|,)?\s*\}|\band\b|\bor\b)*")


@dataclass(frozen=True)
class Box:
    """One box: `text[start:end]` is the whole command, `text[inner_start:inner_end]` its content."""

    start: int
    end: int
    inner_start: int
    inner_end: int

    def content(self, text: str) -> str:
        return text[self.inner_start:self.inner_end]


def _brace_pairs(text: str) -> dict[int, int]:
    """Index of each unescaped "{" -> index of its matching "}" (one pass, a stack)."""
    pairs, stack = {}, []
    for m in _BRACE.finditer(text):  # only the braces are visited, not every character
        i = m.start()
        if i and text[i - 1] == "\\":
            continue
        if m.group() == "{":
            stack.append(i)
        elif stack:
            pairs[stack.pop()] = i
    return pairs


def boxes(text: str) -> list[Box]:
    """Every top-level box in text order (boxes nested inside another box are skipped; a box
    whose braces never close is dropped)."""
    out: list[Box] = []
    if "\\boxed" not in text and "\\fbox" not in text:
        return out
    pairs = _brace_pairs(text)
    pos = 0
    for m in _BOX.finditer(text):
        if m.start() < pos:
            continue  # inside the previous box
        j = m.end()
        while j < len(text) and text[j] == " ":
            j += 1
        if j >= len(text):
            break
        if text[j] == "{":
            close = pairs.get(j)
            if close is None:
                continue
            box = Box(m.start(), close + 1, j + 1, close)
        else:  # "\boxed 5": the argument runs to the next whitespace or "$"
            k = j
            while k < len(text) and not text[k].isspace() and text[k] != "$":
                k += 1
            if k == j:
                continue
            box = Box(m.start(), k, j, k)
        out.append(box)
        pos = box.end
    return out


def box_groups(text: str, found: list[Box] | None = None) -> list[list[Box]]:
    """Boxes grouped by adjacency: two boxes belong together when only spacing, math
    delimiters, commas or and/or stand between them."""
    groups: list[list[Box]] = []
    for box in boxes(text) if found is None else found:
        if groups:
            prev = groups[-1][-1]
            gap = _JOIN.match(text, prev.end, box.start)
            if gap is not None and gap.end() == box.start:
                groups[-1].append(box)
                continue
        groups.append([box])
    return groups


def group_answer(text: str, group: list[Box]) -> str:
    """The answer a group of boxes states: one box's content, or the contents as a list."""
    parts = [b.content(text).strip() for b in group]
    return parts[0] if len(parts) == 1 else ", ".join(parts)


def final_boxed(text: str) -> str | None:
    """The answer stated by the last group of adjacent boxes (`"1, 2, 3"` for
    `$\\boxed{1}$, $\\boxed{2}$, $\\boxed{3}$`), or None when there is no closed box."""
    groups = box_groups(text)
    return group_answer(text, groups[-1]) if groups else None


def last_boxed_span(text: str) -> tuple[int, int, int, int] | None:
    """(command start, command end, content start, content end) of the last box, or None.

    `text[content start:content end]` is the box content; `command end` is just past the
    closing brace (or the bare argument of ``\\boxed 5``). None when there is no box or its
    braces never close.
    """
    found = boxes(text)
    if not found or unclosed_after(text, found[-1].end):
        return None
    b = found[-1]
    return b.start, b.end, b.inner_start, b.inner_end


def unclosed_after(text: str, pos: int) -> bool:
    """Is there a box command after `pos` (one whose braces never close)?"""
    return any(text.rfind(cmd, pos) >= 0 for cmd in _COMMANDS)


def last_boxed(text: str) -> str | None:
    """Contents of the last ``\\boxed{...}``/``\\fbox{...}`` (``\\boxed 5`` without braces too).

    Returns None when there is no box or its braces never close.
    """
    span = last_boxed_span(text)
    return None if span is None else text[span[2]:span[3]]


def count_boxes(text: str) -> int:
    """Number of ``\\boxed``/``\\fbox`` commands in the text."""
    return sum(text.count(cmd + c) for cmd in _COMMANDS for c in ("{", " "))
