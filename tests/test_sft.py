"""SFT warm start, the library: corrupted training records, completion-only labels, a short run lowers the loss."""

from __future__ import annotations

import pytest

from pipeline import sft
from pipeline.data.problems import load_problems
from pipeline.models import load_policy
from tests.helpers import sft_cfg


def test_training_records_are_the_task_with_the_configured_corruption(tiny_setup, tmp_path):
    clean = load_problems(f"{tiny_setup[1]}/prepared", "gsm-synth", "train")
    records, n = sft.training_records(sft_cfg(tiny_setup, tmp_path, "sft.corrupt_frac=0.5", "sft.corrupt_mode=slip"))
    assert [r["question"] for r in records] == [r["question"] for r in clean]
    assert 0 < n == sum(a["solution"] != b["solution"] for a, b in zip(records, clean)) < len(clean)
    assert sft.training_records(sft_cfg(tiny_setup, tmp_path, "sft.corrupt_frac=0")) == (clean, 0)


def test_collate_puts_labels_only_on_the_completion():
    ids, mask, labels = sft.collate([([5, 6, 7], [8, 9]), ([5], [8, 9, 10])], pad_id=0)
    assert ids.tolist() == [[5, 6, 7, 8, 9], [5, 8, 9, 10, 0]]
    assert mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    assert labels.tolist() == [[-100, -100, -100, 8, 9], [-100, 8, 9, 10, -100]]


def test_lr_warms_up_then_decays_to_a_tenth():
    lrs = [sft.lr_at(s, 100, 10, 1.0) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(lrs[9:], lrs[10:])) and lrs[-1] == pytest.approx(0.1, abs=0.01)


def test_short_sft_lowers_the_loss(tiny_setup, tmp_path):
    cfg = sft_cfg(tiny_setup, tmp_path, "sft.steps=40")
    model, tok = load_policy(cfg.sft.init)
    records = load_problems(cfg.data.prepared_dir, "gsm-synth", "train")
    losses = sft.train(model, tok, sft.encode(records, tok, cfg), cfg, progress=False)
    assert len(losses) == 40
    assert sum(losses[-5:]) / 5 < 0.7 * sum(losses[:5]) / 5
