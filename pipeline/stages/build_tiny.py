"""`mathrl build-tiny`: the tiny Qwen2-architecture model and its BPE tokenizer, built offline into
``model.tiny_dir`` (``pipeline.models.build_tiny``), unless the same build is already there."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline import freshness
from pipeline.config import RunConfig


def main(cfg: RunConfig) -> int:
    from pipeline.models import BUILD_INFO, build_tiny, corpus_sha, tiny_corpus, tiny_fields

    out = Path(cfg.model.tiny_dir)
    corpus = tiny_corpus(cfg)
    fp = freshness.fingerprint({"fields": tiny_fields(cfg.model), "seed": cfg.seed, "corpus_sha": corpus_sha(corpus)})
    if freshness.is_current(out, fp):
        params = json.loads((out / BUILD_INFO).read_text())["params"]
        print(f"build-tiny: {out} already built with this config ({params:,} params); skipping")
        return 0
    build_tiny(cfg.model, str(out), corpus, seed=cfg.seed)
    freshness.mark_current(out, fp)
    params = json.loads((out / BUILD_INFO).read_text())["params"]
    print(f"build-tiny: wrote {out} ({params:,} params, vocab {cfg.model.tiny_vocab_size})")
    return 0
