"""Micro-batches by token budget (pipeline/micro_batches.py): every row once, groups kept
together, the budget kept, and GRPO runs whose weights match the row-count cut."""

from __future__ import annotations

import pytest
import torch

from pipeline.config import ConfigError, load_run_config
from pipeline.grpo import trainer
from pipeline.micro_batches import as_index, micro_batches
from pipeline.grpo.run_log import read_metrics
from pipeline.models import load_policy
from tests.test_skipping import _weights
from tests.test_trainer import run_cfg


def test_row_count_cut_is_consecutive_runs():
    assert micro_batches([0, 1, 2, 3, 4], [9] * 5, [0, 0, 1, 1, 2], size=2) == [[0, 1], [2, 3], [4]]
    assert micro_batches([1, 3, 5], [9] * 6, [0] * 6, size=4) == [[1, 3, 5]]  # a mini-batch's own rows


def test_token_budget_orders_groups_by_their_longest_and_keeps_the_budget():
    # group 0 long (30), group 1 short (5), group 2 middling (12); two rows each
    lengths = [30, 10, 5, 4, 12, 12]
    groups = [0, 0, 1, 1, 2, 2]
    cut = micro_batches(list(range(6)), lengths, groups, size=99, token_budget=30)
    assert sorted(r for mb in cut for r in mb) == list(range(6))  # every row exactly once
    assert cut == [[2, 3], [4, 5], [0], [1]]  # 2 x 5 = 10; with row 4, 3 x 12 > 30; 2 x 12 <= 30; 2 x 30 > 30
    for mb in cut:
        assert len(mb) == 1 or len(mb) * max(lengths[r] for r in mb) <= 30
    # a group's rows are consecutive in the order the forwards see them
    order = [groups[r] for mb in cut for r in mb]
    assert order == sorted(order, key=[1, 2, 0].index)


def test_a_row_longer_than_the_budget_is_alone_and_empty_rows_count_as_one_token():
    assert micro_batches([0, 1, 2], [50, 0, 0], [0, 1, 1], size=1, token_budget=8) == [[1, 2], [0]]


def test_as_index_gives_views_for_consecutive_rows_only():
    assert as_index([3, 4, 5]) == slice(3, 6)
    assert as_index([3, 5]) == [3, 5]
    assert as_index([]) == []


def test_negative_budget_is_a_config_error(tiny_setup):
    overrides, _ = tiny_setup
    with pytest.raises(ConfigError, match="micro_batch_tokens"):
        load_run_config(None, [*overrides, "train.micro_batch_tokens=-1"])


@pytest.mark.parametrize("layout,extra", [
    ("shared_prompt", ["train.beta=0"]),
    # KL in the loss and mu = 2: the old and reference log-probs come from the same cut
    ("trimmed", ["train.beta=0.1", "train.num_iterations=2"]),
])
def test_token_budget_gives_the_weights_of_the_row_count_cut(tiny_setup, layout, extra):
    runs = {}
    for budget in (0, 40):  # 40 tokens: a few rows per micro-batch against 6 by count
        run_dir = trainer.train(run_cfg(tiny_setup, f"mbt-{layout}-{budget}", "train.steps=2",
                                        f"train.forward_layout={layout}", f"train.micro_batch_tokens={budget}",
                                        *extra))
        runs[budget] = (_weights(run_dir), read_metrics(run_dir))
    (rows_w, rows_m), (tok_w, tok_m) = runs[0], runs[40]
    assert [r["reward/mean"] for r in rows_m] == [r["reward/mean"] for r in tok_m]  # same samples
    for a, b in zip(rows_m, tok_m):  # the same gradient, accumulated over other micro-batches
        assert abs(a["grad_norm"] - b["grad_norm"]) <= 1e-5 * max(a["grad_norm"], 1e-8)
        assert abs(a["loss"] - b["loss"]) <= 1e-6 + 1e-5 * abs(a["loss"])  # ~0 on-policy: absolute
    start, _ = load_policy(run_cfg(tiny_setup, "x").model.name_or_path)
    moved = (rows_w - torch.cat([p.flatten() for p in start.state_dict().values()])).abs()
    assert moved.max() > 1e-4  # the update moved the weights, far more than the two cuts differ
    assert torch.allclose(rows_w, tok_w, rtol=0, atol=5e-5), (rows_w - tok_w).abs().max()
