"""`mathrl sft`: the supervised warm start (``pipeline.sft``); on a fresh clone whose ``sft.init`` is
the missing tiny base, that base is built first (``pipeline.stages.build_tiny``)."""

from __future__ import annotations

from pathlib import Path

from pipeline.config import RunConfig


def main(cfg: RunConfig) -> int:
    from pipeline import sft
    from pipeline.stages import build_tiny

    init = Path(cfg.sft.init)
    if init.resolve() == Path(cfg.model.tiny_dir).resolve() and not init.is_dir():
        build_tiny.main(cfg)
    return sft.main(cfg)
