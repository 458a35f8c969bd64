"""The GPU smoke's first-forward KL check (benchmarks/gpu_smoke.py ``kl_problem``): 0 within 1e-6,
so GPU rounding passes, while the KL of a real policy/reference mismatch, measured here on a small
random model with the trainer's own log-prob and KL code, still fails."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from pipeline.grpo.episodes import pack
from pipeline.grpo.logprobs import token_logprobs
from pipeline.grpo.losses import kl_divergence
from tests.helpers import load_benchmark_script
from tests.test_attention_masks import episodes, random_model


@pytest.fixture(scope="module")
def smoke():
    return load_benchmark_script("gpu_smoke")


def first_forward_kl(policy, reference, ref_temperature: float = 1.0) -> float:
    """The masked mean k3 KL the trainer logs, of ``policy`` against ``reference`` on one batch."""
    packed = pack(episodes(), pad_id=0)
    with torch.no_grad():
        logp = token_logprobs(policy, packed)
        ref = token_logprobs(reference, packed, temperature=ref_temperature).float()
    mask = packed.completion_mask
    return float((kl_divergence(logp, ref) * mask).sum() / mask.sum())


@pytest.mark.parametrize("kl", [0.0, 1e-12, -3e-13, 1e-6])
def test_rounding_passes(smoke, kl):
    assert smoke.kl_problem(kl) is None


@pytest.mark.parametrize("kl", [2e-6, 1e-3, -1e-5, math.nan, math.inf, None])
def test_a_real_kl_fails(smoke, kl):
    assert smoke.kl_problem(kl) is not None


def test_the_same_model_passes_and_real_mismatches_fail(smoke):
    policy = random_model(seed=0)
    same = first_forward_kl(policy, copy.deepcopy(policy))
    assert smoke.kl_problem(same) is None, same
    mismatches = {"reference at temperature 0.9": first_forward_kl(policy, policy, ref_temperature=0.9),
                  "another model": first_forward_kl(policy, random_model(seed=1))}
    for what, kl in mismatches.items():
        assert smoke.kl_problem(kl) is not None, (what, kl)


def test_a_bfloat16_reference_is_below_the_tolerance_on_a_random_model(smoke):
    """What the tolerance gives up: on a near-uniform random model (the smoke's is one too) a
    reference rounded to bfloat16 is ~2e-7 away, nonzero (the exact check saw it) but under 1e-6."""
    policy = random_model(seed=0)
    kl = first_forward_kl(policy, copy.deepcopy(policy).to(torch.bfloat16))
    assert 0 < abs(kl) < smoke.KL_TOL
    assert smoke.kl_problem(kl) is None
