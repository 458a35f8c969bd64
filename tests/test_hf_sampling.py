"""Seeded sampling in the HF engine: each sample has its own random stream (seed + i * n + j), so a
completion does not depend on the rest of the call, the chunking or torch's global RNG; and the
Gumbel-max sampler draws from the warped softmax."""

from __future__ import annotations

import math

import pytest
import torch

from pipeline.models import load_policy
from pipeline.rollout.base import SamplingParams
from pipeline.rollout.hf_engine import HFEngine, SeededSampler

PROMPTS = ["Tom has 3 pens. He buys 2 more.", "Ana has 9 cards.", "Ben has 12 coins. He loses 4 coins.",
           "Mia has 5 books."]


@pytest.fixture(scope="module")
def model(tiny_setup):
    _, root = tiny_setup
    return load_policy(str(root / "tiny"))


def _ids(result):
    return [[s.completion_ids for s in group] for group in result]


def test_samples_do_not_depend_on_the_call_chunking_or_global_rng(model):
    m, tok = model
    params = SamplingParams(max_new_tokens=10, temperature=1.0, seed=1234)
    whole = _ids(HFEngine(m, tok, batch_size=64).generate(PROMPTS, 3, params))
    torch.manual_seed(0)
    before = torch.rand(3)
    torch.manual_seed(0)
    chunked = _ids(HFEngine(m, tok, batch_size=2).generate(PROMPTS, 3, params))  # other chunks and widths
    assert torch.equal(torch.rand(3), before)  # the global RNG was not touched
    assert chunked == whole
    # prompt 2 alone, with its seed offset: the same samples as inside the call of four
    alone = _ids(HFEngine(m, tok).generate(PROMPTS[2:3], 3, SamplingParams(10, 1.0, seed=1234 + 2 * 3)))
    assert alone == whole[2:3]
    other = _ids(HFEngine(m, tok).generate(PROMPTS, 3, SamplingParams(10, 1.0, seed=99)))
    assert other != whole
    flat = [tuple(ids) for group in whole for ids in group]
    assert len(set(flat)) > len(flat) // 2  # the samples of a prompt differ from each other


def test_gumbel_sampler_matches_the_warped_softmax():
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, 0.0]])
    n = 20000
    for params, expect in [
        (SamplingParams(temperature=1.0), torch.softmax(logits[0], -1)),
        (SamplingParams(temperature=0.5), torch.softmax(logits[0] / 0.5, -1)),
        (SamplingParams(temperature=1.0, top_k=2), torch.softmax(torch.tensor([2.0, 1.0]), -1)),
    ]:
        sampler = SeededSampler(list(range(n)), params)
        picks = sampler(None, logits.expand(n, -1).clone()).argmax(-1)
        freq = torch.bincount(picks, minlength=5).float() / n
        expect = torch.nn.functional.pad(expect, (0, 5 - len(expect)))
        tol = 4 * math.sqrt(0.25 / n)  # 4 standard errors
        assert torch.allclose(freq, expect, atol=tol), (params, freq, expect)
