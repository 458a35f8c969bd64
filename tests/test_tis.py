"""Truncated importance sampling weights (pipeline/rollout/tis.py): hand-computed cases."""

import math

import pytest
import torch

from pipeline.rollout.tis import pad_logprobs, tis_weights


def test_weights_hand_computed_and_capped():
    trainer = torch.tensor([[-1.0, -2.0, -0.5], [-3.0, -1.0, 0.0]])
    engine = torch.tensor([[-1.5, -2.0, -0.1], [-1.0, -1.0, -9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    w, stats = tis_weights(trainer, engine, mask, cap=1.2)
    expected = torch.tensor([[min(1.2, math.exp(0.5)), 1.0, math.exp(-0.4)],
                             [math.exp(-2.0), 1.0, 0.0]])
    assert torch.allclose(w, expected, atol=1e-6)
    # |delta| over the 5 unmasked tokens: 0.5, 0, 0.4, 2, 0 (the masked 9.0 is ignored)
    assert stats["tis/mean_abs_delta"] == pytest.approx(2.9 / 5, abs=1e-6)
    assert stats["tis/max_abs_delta"] == pytest.approx(2.0, abs=1e-6)
    assert stats["tis/clipped_frac"] == pytest.approx(1 / 5)
    assert stats["tis/mean_weight"] == pytest.approx(float(expected.sum()) / 5, abs=1e-6)


def test_identical_logprobs_give_unit_weights_and_no_grad():
    trainer = torch.randn(4, 7, requires_grad=True)
    mask = (torch.rand(4, 7) > 0.3).long()
    w, stats = tis_weights(trainer, trainer.detach().clone(), mask, cap=2.0)
    assert not w.requires_grad
    assert torch.equal(w, mask.float())
    assert stats["tis/max_abs_delta"] == 0.0


def test_loop_matches_vectorised():
    g = torch.Generator().manual_seed(0)
    trainer, engine = torch.randn(3, 5, generator=g), torch.randn(3, 5, generator=g)
    mask = torch.ones(3, 5)
    w, _ = tis_weights(trainer, engine, mask, cap=1.5)
    for i in range(3):
        for t in range(5):
            assert w[i, t].item() == pytest.approx(min(1.5, math.exp(trainer[i, t] - engine[i, t])), rel=1e-5)


def test_rejects_non_positive_cap():
    with pytest.raises(ValueError):
        tis_weights(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), cap=0.0)


def test_pad_logprobs():
    out = pad_logprobs([[-0.1, -0.2], [-0.3], []], width=3)
    assert torch.allclose(out, torch.tensor([[-0.1, -0.2, 0.0], [-0.3, 0.0, 0.0], [0.0, 0.0, 0.0]]))
