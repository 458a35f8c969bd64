"""Each choice of the objective is listed once, as a Literal of pipeline/config/schema.py; the
registries that implement the choices are keyed by exactly those names (typing.get_args), and the
config reaches every entry."""

from __future__ import annotations

import inspect
import typing
from typing import get_args

import pytest
import torch

import pipeline.grpo
from pipeline.config import load_run_config, schema
from pipeline.grpo import objective
from pipeline.grpo.advantages import ADV_NORMS, SCALES
from pipeline.grpo.losses import AGGREGATIONS, DPPO_DIVERGENCES, KL_ESTIMATORS, LEVELS, SURROGATES
from pipeline.rollout.tis import CORRECTIONS, IS_LEVELS

PAIRS = [
    (AGGREGATIONS, schema.LossType, "loss_type"),
    (SURROGATES, schema.Surrogate, "surrogate"),
    (DPPO_DIVERGENCES, schema.DppoDivergence, "dppo_divergence"),
    (KL_ESTIMATORS, schema.KLEstimator, "kl_estimator"),
    (LEVELS, schema.ImportanceLevel, "importance_level"),
    (SCALES, schema.AdvScale, "adv_scale"),
    (ADV_NORMS, schema.AdvNorm, "adv_norm"),
]


@pytest.mark.parametrize("registry,literal,key", PAIRS, ids=[p[2] for p in PAIRS])
def test_registry_keys_are_the_schema_literal(registry, literal, key):
    assert tuple(registry) == get_args(literal)


def test_train_fields_use_the_named_literals():
    hints = typing.get_type_hints(schema.TrainConfig)
    for _, literal, key in PAIRS:
        assert hints[key] == literal, key


def test_importance_correction_registries_are_the_rollout_literals():
    hints = typing.get_type_hints(schema.RolloutConfig)
    assert tuple(CORRECTIONS) == get_args(hints["is_correction"]) == get_args(schema.ISCorrection)
    assert IS_LEVELS == get_args(hints["is_level"]) == get_args(schema.ImportanceLevel)


def test_the_old_duplicate_lists_are_gone():
    import pipeline.grpo.losses as losses

    for name in ("LOSS_TYPES", "_LEVELS"):
        assert not hasattr(losses, name) and not hasattr(pipeline.grpo, name)
    assert not hasattr(pipeline.grpo, "KL_ESTIMATORS")


def test_every_surrogate_has_its_config_parameters():
    for name in get_args(schema.Surrogate):
        cfg = load_run_config(None, [f"train.surrogate={name}"])
        params = objective.surrogate_params(cfg.train)
        wanted = {p.name for p in inspect.signature(SURROGATES[name]).parameters.values() if p.kind == p.KEYWORD_ONLY}
        assert set(params) == (wanted if name != "clip" else set()), name  # clip takes train.clip_low/high
        for key, value in params.items():  # each parameter comes from a train.<surrogate>_<key> field
            field = f"{name}_{key}"
            assert getattr(cfg.train, field) == value, field


@pytest.mark.parametrize("surrogate", get_args(schema.Surrogate))
@pytest.mark.parametrize("loss_type", get_args(schema.LossType))
def test_the_config_reaches_every_surrogate_and_aggregation(surrogate, loss_type):
    cfg = load_run_config(None, [f"train.surrogate={surrogate}", f"train.loss_type={loss_type}"])
    gen = torch.Generator().manual_seed(0)
    logp = (-torch.rand(4, 5, generator=gen, dtype=torch.float64) * 2).requires_grad_()
    old = logp.detach() + (torch.rand(4, 5, generator=gen, dtype=torch.float64) - 0.5)
    mask = torch.arange(5) < torch.tensor([[5], [3], [1], [4]])
    adv = torch.tensor([1.0, -0.5, 0.0, 2.0], dtype=torch.float64)
    loss, stats = objective.loss(cfg, logp, old, logp.detach(), adv, mask, None)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp.grad).all()
    assert logp.grad.abs().sum() > 0  # every variant moves the policy on this batch
    assert (logp.grad[~mask] == 0).all()  # and never through padding
