"""`mathrl data` / `make data`: raw GSM8K, MATH, MATH-500 and gsm-synth -> ``data/prepared/<dataset>/<split>.jsonl``
(``pipeline.data.prepare``; the datasets of ``data.datasets``)."""

from __future__ import annotations

from pipeline.config import RunConfig
from pipeline.data.prepare import prepare
from pipeline.data.problems import DataError


def main(cfg: RunConfig) -> int:
    try:
        prepare(cfg.data)
    except DataError as e:
        print(f"mathrl data: {e}")
        return 1
    return 0
