"""The plain decode loop (rollout.decode=loop, pipeline/rollout/decode_loop.py): the model's own
samples and log-probs, with ended rows leaving the batch, and clear errors where it cannot match
``generate``."""

from __future__ import annotations

import pytest
import torch

from pipeline.config.checks import ConfigError
from pipeline.config import load_run_config
from pipeline.models import load_policy
from pipeline.rollout.base import SamplingParams
from pipeline.rollout.hf_engine import HFEngine
from tests.test_prefill import PROMPTS
from tests.test_trainer import run_cfg


def _model(tiny_setup):
    model, tok = load_policy(run_cfg(tiny_setup, "x").model.name_or_path)
    # An untrained model rarely samples its EOS: make two tokens it samples mid-way end a row too, so
    # sampled rows end at different steps and the loop really drops rows from the batch. (Its greedy
    # completions repeat one token whatever the prompt, so greedy rows all end together.)
    engine = HFEngine(model, tok, batch_size=12)
    sampled = engine.generate(PROMPTS[1:], 1, SamplingParams(max_new_tokens=24, temperature=1.0, seed=11))
    model.generation_config.eos_token_id = [tok.eos_token_id, sampled[0][0].completion_ids[8],
                                            sampled[1][0].completion_ids[4]]
    return model, tok


def _samples(engine, params):
    return [[(s.completion_ids, s.finish_reason, s.logprobs) for s in group]
            for group in engine.generate(PROMPTS, 4, params)]


@pytest.mark.parametrize("temperature", [1.0, 0.0])
@pytest.mark.parametrize("shared", [False, True])
def test_loop_gives_generates_samples(tiny_setup, temperature, shared):
    model, tok = _model(tiny_setup)
    params = SamplingParams(max_new_tokens=24, temperature=temperature, seed=11, logprobs=True)
    ref = _samples(HFEngine(model, tok, batch_size=5), params)
    got = _samples(HFEngine(model, tok, batch_size=5, decode="loop", shared_prefill=shared), params)
    lengths = {len(ids) for group in got for ids, _, _ in group}
    assert len(lengths) > 1 or temperature == 0  # rows ended at different steps: rows left the batch
    assert [[(ids, reason) for ids, reason, _ in g] for g in got] == [[(ids, r) for ids, r, _ in g] for g in ref]
    for g_ref, g_got in zip(ref, got):
        for (_, _, lp_ref), (_, _, lp_got) in zip(g_ref, g_got):
            assert lp_got == pytest.approx(lp_ref, abs=1e-5)


def test_loop_logprobs_are_the_models(tiny_setup):
    """Each returned log-prob is log softmax(logits / T) of the sampled token in a teacher-forced forward."""
    model, tok = _model(tiny_setup)
    params = SamplingParams(max_new_tokens=20, temperature=0.7, seed=3, logprobs=True)
    samples = HFEngine(model, tok, batch_size=12, decode="loop").generate(PROMPTS, 4, params)
    for group in samples:
        for s in group:
            ids = torch.tensor([s.prompt_ids + s.completion_ids])
            with torch.no_grad():
                logits = model(ids).logits[0, len(s.prompt_ids) - 1:-1].float() / 0.7
            want = logits.log_softmax(-1).gather(-1, torch.tensor(s.completion_ids)[:, None]).squeeze(1)
            assert s.logprobs == pytest.approx(want.tolist(), abs=1e-4)


def test_loop_forwards_fewer_rows(tiny_setup):
    model, tok = _model(tiny_setup)
    rows = []
    hook = model.get_output_embeddings().register_forward_hook(lambda m, i, o: rows.append(o.shape[0]))
    try:
        HFEngine(model, tok, batch_size=12, decode="loop").generate(PROMPTS, 4, SamplingParams(
            max_new_tokens=24, temperature=1.0, seed=11))
    finally:
        hook.remove()
    assert rows[0] == 12 and min(rows) < 12 and rows == sorted(rows, reverse=True)


def test_loop_refuses_what_generate_would_do_differently(tiny_setup):
    model, tok = _model(tiny_setup)
    with pytest.raises(ValueError, match="SamplingParams.seed"):
        HFEngine(model, tok, decode="loop").generate(PROMPTS, 2, SamplingParams(max_new_tokens=4, temperature=1.0))
    model.generation_config.repetition_penalty = 1.1
    with pytest.raises(ValueError, match="repetition_penalty"):
        HFEngine(model, tok, decode="loop")


def test_loop_is_for_hf_engines_only():
    with pytest.raises(ConfigError, match="rollout.decode=loop"):
        load_run_config(None, ["rollout.decode=loop", "rollout.engine=vllm"])
