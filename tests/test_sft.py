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


def test_cut_sorts_by_length_and_keeps_rows_times_longest_within_the_budget():
    batch = [([1] * 5, [2] * 5), ([1] * 2, [2]), ([1] * 4, [2] * 4), ([1] * 9, [2] * 9), ([1] * 3, [2] * 3)]
    cuts = sft.cut(batch, token_budget=16)
    lengths = [[len(batch[i][0]) + len(batch[i][1]) for i in rows] for rows in cuts]
    assert sorted(i for rows in cuts for i in rows) == list(range(5))
    assert sum(lengths, []) == sorted(sum(lengths, []))  # shortest first
    assert lengths == [[3, 6], [8], [10], [18]]  # 3 rows x 8 > 16; 18 alone: longer than the budget
    assert sft.cut(batch, token_budget=10**6) == [[1, 4, 2, 0, 3]]


@pytest.mark.parametrize("budget", [1, 300, 10**6])
def test_micro_batched_step_is_the_padded_step(tiny_setup, tmp_path, budget):
    """Same loss and same gradient as one forward padded to the batch's longest, with the
    model's own loss (up to float summation order), whatever the cut."""
    import torch

    cfg = sft_cfg(tiny_setup, tmp_path)
    model, tok = load_policy(cfg.sft.init)
    records = load_problems(cfg.data.prepared_dir, "gsm-synth", "train")[:12]
    batch = sft.encode(records, tok, cfg)
    assert len({len(p) for p, _ in batch}) > 1 and len({len(c) for _, c in batch}) > 1  # ragged both ways
    grads = {}
    for b in (0, budget):
        model.zero_grad(set_to_none=True)
        loss = sft.step_loss(model, batch, tok.pad_token_id, torch.device("cpu"), b)
        grads[b] = (loss, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    (loss0, g0), (loss1, g1) = grads[0], grads[budget]
    n_cuts = len(sft.cut(batch, budget))
    assert n_cuts == 12 if budget == 1 else (1 < n_cuts < 12 if budget == 300 else n_cuts == 1)
    assert loss1 == pytest.approx(loss0, rel=1e-5)
    assert g0.keys() == g1.keys() and len(g0) > 0
    for n in g0:
        torch.testing.assert_close(g1[n], g0[n], rtol=1e-4, atol=1e-6)
