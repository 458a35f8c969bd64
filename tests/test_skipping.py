"""Leaving zero-gradient rows out of the update (pipeline/grpo/skipping.py): which rows teach,
when skipping is exact, and a GRPO run whose weights match the run that forwards every row."""

from __future__ import annotations

import torch

from pipeline.grpo import trainer
from pipeline.grpo.run_log import read_metrics
from pipeline.grpo.skipping import can_skip, teaching_rows
from pipeline.models import load_policy
from tests.test_trainer import run_cfg

# Half the problems (even gold answers) give every completion reward 0: their groups are flat.
MIXED = ["train.questions_per_step=4", "reward.weights={tests.helpers:digit_fraction_odd_gold: 1.0}"]


def test_teaching_rows_outcome_process_and_masked():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0], [1, 1, 1]], dtype=torch.float32)
    outcome = torch.tensor([0.5, 0.0, 1.0, -0.0])
    assert teaching_rows(outcome, mask).tolist() == [True, False, False, False]  # row 2: no loss token
    process = torch.tensor([[0, 0, 3.0], [0, 2.0, 0], [1.0, 1, 1], [0, 0, -1e-30]])
    # rows 0 and 1: the non-zero advantage sits on a masked token; row 3: tiny but not zero
    assert teaching_rows(process, mask).tolist() == [False, False, False, True]


def test_skipping_only_where_exact():
    assert can_skip("grpo", kl_in_loss=False, sharded=False)
    assert can_skip("dapo", False, False) and can_skip("dr_grpo", False, False)
    assert not can_skip("bnpo", False, False)  # each micro-batch's own token count: membership matters
    assert not can_skip("grpo", kl_in_loss=True, sharded=False)  # the KL has a gradient at A = 0
    assert not can_skip("grpo", False, sharded=True)  # every rank must run the same forwards


def _weights(run_dir):
    model, _ = load_policy(str(run_dir / "final"))  # the weights a run ends with
    return torch.cat([p.flatten() for p in model.state_dict().values()])


def test_skipping_gives_the_weights_of_the_full_update(tiny_setup):
    runs = {}
    for skip in ("false", "true"):
        run_dir = trainer.train(run_cfg(tiny_setup, f"skip-{skip}", "train.steps=2", "train.beta=0",
                                        f"train.skip_zero_advantage={skip}", *MIXED))
        runs[skip] = (_weights(run_dir), read_metrics(run_dir))
    (full, full_rows), (skipped, skip_rows) = runs["false"], runs["true"]
    assert all(r["skipped_frac"] == 0 for r in full_rows)
    assert any(r["skipped_frac"] > 0 for r in skip_rows), "the test batch had no flat group to skip"
    assert [r["reward/mean"] for r in full_rows] == [r["reward/mean"] for r in skip_rows]  # same samples
    for a, b in zip(full_rows, skip_rows):  # the same gradient, summed in another order
        assert abs(a["grad_norm"] - b["grad_norm"]) <= 1e-5 * a["grad_norm"]
    start, _ = load_policy(run_cfg(tiny_setup, "x").model.name_or_path)
    moved = (full - torch.cat([p.flatten() for p in start.state_dict().values()])).abs()
    assert moved.max() > 1e-4  # the update moved the weights, far more than the two runs differ
    assert torch.allclose(full, skipped, rtol=0, atol=5e-5), (full - skipped).abs().max()


def test_nothing_is_skipped_with_the_kl_in_the_loss(tiny_setup):
    runs = [trainer.train(run_cfg(tiny_setup, f"kl-skip-{s}", "train.steps=1", "train.beta=0.1",
                                  f"train.skip_zero_advantage={s}", *MIXED)) for s in ("false", "true")]
    assert read_metrics(runs[1])[0]["skipped_frac"] == 0
    assert torch.equal(_weights(runs[0]), _weights(runs[1]))


def test_a_batch_with_nothing_to_teach_keeps_one_row(tiny_setup):
    """Every group flat (an untrained model never answers correctly): one row per mini-batch is
    still forwarded, so the statistics exist, and the step is the full update's (no movement)."""
    runs = [trainer.train(run_cfg(tiny_setup, f"flat-skip-{s}", "train.steps=1", "train.beta=0",
                                  "reward.weights={correct: 1.0}", f"train.skip_zero_advantage={s}"))
            for s in ("false", "true")]
    full, skipped = read_metrics(runs[0])[0], read_metrics(runs[1])[0]
    assert skipped["skipped_frac"] == 1 - 1 / 12 and full["skipped_frac"] == 0  # 3 questions x G = 4
    assert skipped["grad_norm"] == full["grad_norm"] == 0 and "loss" in skipped
    assert torch.equal(_weights(runs[0]), _weights(runs[1]))
