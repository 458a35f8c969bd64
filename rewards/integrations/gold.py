"""What the trainer adapters share: the gold answer in a dataset field, the text of a completion.

Datasets store the gold differently: our prepared data and verl's parquet hold the bare answer
("72", "\\frac{1}{2}"), GSM8K's `answer` column the whole solution ending in `#### 72`, MATH's
`solution` column a solution with the answer in `\\boxed{}`. `gold_answer` reads all three.
TRL hands completions over as text or, for chat datasets, as a list of messages.
"""

from __future__ import annotations

import math

from rewards.answers.extract import reference_answer


def gold_answer(value) -> str | None:
    """The final answer in a gold field; None when the field is empty (no gold for this row).

    Text after the last `####` (thousands commas dropped) if there is one, else the content of
    the last box group (`rewards.answers.extract.reference_answer`: boxes side by side are one answer),
    else the stripped text itself. Numbers become text.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise TypeError(f"a gold answer must be text or a number, got {type(value).__name__}: {value!r:.80}")
    if isinstance(value, float) and not math.isfinite(value):
        return None  # pandas/pyarrow write a missing number as NaN
    text = str(value)
    if "####" in text:
        text = text.rsplit("####", 1)[1].replace(",", "")
    elif "\\boxed" in text or "\\fbox" in text:
        text = reference_answer(text) or ""
    return text.strip() or None


def completion_text(completion) -> str:
    """A completion as text: itself, or for a conversation the last assistant message's content.

    Content given as parts (`[{"type": "text", "text": ...}, ...]`) is joined; anything else
    becomes "" (which every reward scores as having no answer).
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return _content(completion.get("content"))
    if isinstance(completion, (list, tuple)) and completion:
        messages = [m for m in completion if isinstance(m, dict)]
        replies = [m for m in messages if m.get("role") == "assistant"] or messages
        return _content(replies[-1].get("content")) if replies else ""
    return ""


def _content(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        return "".join(p.get("text", "") for p in content
                       if isinstance(p, dict) and isinstance(p.get("text", ""), str))
    return ""
