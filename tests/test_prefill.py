"""One prefill per prompt (rollout.shared_prefill, pipeline/rollout/prefill.py): the same samples
as HF generate's own per-row prefill, seeded or greedy, when a chunk cuts a group."""

from __future__ import annotations

import pytest

from pipeline.models import load_policy
from pipeline.rollout.base import SamplingParams
from pipeline.rollout.hf_engine import HFEngine
from tests.test_trainer import run_cfg

PROMPTS = ["user\nWhat is 3 plus 4?\nassistant\n",
           "user\nTom has 12 apples and eats 5. How many are left?\nassistant\n",
           "user\n7 * 8 = ?\nassistant\n"]


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_shared_prefill_gives_the_same_samples(tiny_setup, temperature):
    model, tok = load_policy(run_cfg(tiny_setup, "x").model.name_or_path)
    params = SamplingParams(max_new_tokens=24, temperature=temperature, seed=11)
    samples = {}
    for shared in (False, True):
        engine = HFEngine(model, tok, batch_size=5, shared_prefill=shared)  # chunks of 5 rows cut the groups of 4
        samples[shared] = [[(s.completion_ids, s.finish_reason) for s in group]
                           for group in engine.generate(PROMPTS, 4, params)]
    assert samples[True] == samples[False]
    if temperature > 0:
        assert len({tuple(ids) for ids, _ in samples[True][1]}) > 1  # seeded samples that differ: a real test
