"""`mathrl config`: every config key with its type, default and documentation (the text written under
each field of ``pipeline/config/schema.py``)."""

from __future__ import annotations

from pipeline.config import RunConfig, describe


def main() -> int:
    print("\n".join(describe(RunConfig)))
    return 0
