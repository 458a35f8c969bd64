"""Test-only helpers shared by several test files."""


def digit_fraction(completion: str, gold: str, style: str = "auto") -> float:
    """A reward with variance even on an untrained model: the share of digits in the text.
    Used where a test needs a learning signal without first teaching the model the task."""
    return sum(c.isdigit() for c in completion) / max(1, len(completion))
