"""`mathrl sft`: the supervised warm start (placeholder wiring; see pipeline/sft.py)."""

from __future__ import annotations

from pipeline.config import RunConfig


def main(cfg: RunConfig) -> int:
    from pipeline import sft

    return sft.main(cfg)
