"""Final-answer extraction from a completion (`extract_answer`).

Styles:
- "math": the last `\\boxed{...}`/`\\fbox{...}` (nested braces), else the last explicit
  answer marker ("The answer is", "Final Answer:", "**Answer:**", "Answer:"), else None.
- "gsm8k": the last `#### x` line, else an explicit marker, else the last number in the text.
  The whole text is scanned (no "last 300 characters" window) and `####` is not required.
- "auto": "math" when the text has a box, else "gsm8k".
All scanning is linear-time string work; nothing here can hang on hostile input.
"""

from __future__ import annotations

import re

from rewards.boxed import last_boxed

STYLES = ("auto", "gsm8k", "math")

_MARKER = re.compile(r"answer(?:\s+is\b|\s*:|\*\*\s*:)[ \t]*(?:\*\*)?[ \t]*:?", re.IGNORECASE)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")
_MAX_MARKER_ANSWER = 300


def extract_answer(text: str, style: str = "auto") -> str | None:
    """The final answer written in `text`, or None when there is none (see module docstring)."""
    if not isinstance(text, str) or not text:
        return None
    if style not in STYLES:
        raise ValueError(f"unknown style {style!r}; valid: {', '.join(STYLES)}")
    text = text.replace("\x00", "")
    if style == "auto":
        style = "math" if ("\\boxed" in text or "\\fbox" in text) else "gsm8k"
    if style == "math":
        boxed = last_boxed(text)
        return boxed.strip() if boxed is not None else _marker_answer(text)
    hashes = _hash_answer(text)
    if hashes is not None:
        return hashes
    marked = _marker_answer(text)
    if marked is not None:
        return marked if "\\" in marked else (_clean_number(marked) or marked)
    return _last_number(text)


def _hash_answer(text: str) -> str | None:
    i = text.rfind("####")
    if i < 0:
        return None
    line = text[i + 4:].split("\n", 1)[0].strip()
    if not line:
        return None
    return line if "\\" in line else (_clean_number(line) or line)


def _clean_number(s: str) -> str | None:
    """The first number in a short answer line, with thousands commas and '$' dropped."""
    return _number_text(_NUMBER.search(s.replace("$", "")))


def _last_number(text: str) -> str | None:
    last = None
    for last in _NUMBER.finditer(text):
        pass
    return _number_text(last)


def _number_text(m) -> str | None:
    return None if m is None else m.group(0).replace(",", "").rstrip(".")


def _marker_answer(text: str) -> str | None:
    """Text after the last "answer is"/"answer:" marker, up to the end of its line/sentence."""
    last = None
    for last in _MARKER.finditer(text):
        pass
    if last is None:
        return None
    rest = text[last.end(): last.end() + _MAX_MARKER_ANSWER].split("\n", 1)[0]
    rest = rest.strip().strip("*").strip()
    if rest.startswith("$"):
        close = rest.find("$", 1)
        rest = rest[1:close] if close > 0 else rest[1:]
    else:
        rest = re.split(r"\.(?:\s|$)", rest, maxsplit=1)[0]
    rest = rest.strip().rstrip(".").strip()
    return rest or None
