"""The one reader of JSON-lines data files: one JSON object per line, blank lines skipped.

Every data file a user hands the project goes through ``read_jsonl``: the problems of
``train.task`` / ``sft.task`` / ``eval.dataset`` (pipeline/data/problems.py), the completions of
``python -m rewards score``, the files ``to-verl`` converts and `mathrl eval-prm`'s
ProcessBench records. A line that is not a JSON object stops the read with a ``JSONLError``
whose message is one line: the file, the line number (1-based, blank lines counted) and what is
wrong, e.g. ``data/mine.jsonl line 3: not valid JSON (Expecting ',' delimiter at column 17)``.
Lines are split on ``\\n`` only: ``str.splitlines`` would also break at U+2028 inside JSON strings.
Torch-free and standalone, like the rest of ``rewards``.
"""

from __future__ import annotations

import json
from pathlib import Path


class JSONLError(ValueError):
    """A data file that is not JSON lines; the message names the file and the line."""


def read_jsonl(path: str | Path) -> list[dict]:
    """The records of ``path``, one dict per non-blank line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise JSONLError(f"{path}: not UTF-8 text (byte {e.start})") from None
    records = []
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise JSONLError(f"{path} line {number}: not valid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(record, dict):
            raise JSONLError(f"{path} line {number}: expected a JSON object {{...}}, got {type(record).__name__}")
        records.append(record)
    return records
