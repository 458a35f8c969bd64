"""Shared fixtures: a small gsm-synth dataset and a tiny Qwen2 model built locally, once per session."""

from __future__ import annotations

import pytest

from pipeline.config import load_run_config

TINY = ["model.tiny_hidden_size=64", "model.tiny_layers=2", "model.tiny_heads=2", "model.tiny_kv_heads=1",
        "model.tiny_intermediate_size=128", "model.tiny_vocab_size=512"]


@pytest.fixture(scope="session")
def tiny_setup(tmp_path_factory):
    """(overrides, root): prepared gsm-synth data and an untrained tiny model under ``root``."""
    from pipeline.stages import build_tiny
    from pipeline.data.prepare import prepare

    root = tmp_path_factory.mktemp("tiny")
    overrides = [f"data.prepared_dir={root}/prepared", "data.datasets=gsm-synth", "data.synth_train_size=300",
                 "data.synth_test_size=40", f"model.tiny_dir={root}/tiny", f"model.name_or_path={root}/tiny",
                 f"output_dir={root}/runs", "device=cpu", *TINY]  # CPU and gloo, also on a GPU box
    cfg = load_run_config(None, overrides)
    prepare(cfg.data)
    build_tiny.main(cfg)
    return overrides, root

