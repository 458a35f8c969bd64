"""The GPU sleep-mode choreography of VLLMEngine, with a recording stand-in for ``vllm.LLM``.

Sleep mode does not exist on the CPU backend, so this checks the order of calls only: sleep after
every generate (level 1), wake the weights before loading new ones, wake the KV cache before the
next generate, never touch the prefix cache while the KV cache sleeps.
"""

from types import SimpleNamespace

import pytest
import torch

from pipeline.rollout.base import SamplingParams
from pipeline.rollout.vllm_engine import VLLMEngine

pytestmark = pytest.mark.vllm


class RecordingLLM:
    def __init__(self):
        self.calls = []

    def generate(self, prompts, params, use_tqdm=False):
        self.calls.append("generate")
        done = SimpleNamespace(index=0, token_ids=[5, 2], logprobs=[{5: SimpleNamespace(logprob=-0.5)},
                                                                    {2: SimpleNamespace(logprob=-0.1)}],
                               finish_reason="stop")
        return [SimpleNamespace(outputs=[done]) for _ in prompts]

    def sleep(self, level):
        self.calls.append(f"sleep{level}")

    def wake_up(self, tags=None):
        self.calls.append("wake:" + ",".join(tags))

    def collective_rpc(self, fn, args=()):
        self.calls.append(f"rpc:{fn.__name__}")

    def reset_prefix_cache(self):
        self.calls.append("reset_prefix")


class Tok:
    eos_token_id = 2

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [1, 3]}

    def decode(self, ids, skip_special_tokens=True):
        return "x"


def _engine(sleep_mode: bool) -> VLLMEngine:
    engine = object.__new__(VLLMEngine)  # skip starting a real engine
    engine.llm, engine.tokenizer, engine.on_gpu, engine.dtype = RecordingLLM(), Tok(), True, torch.bfloat16
    engine.sleep_mode, engine._sleeping, engine.last_sync_s = sleep_mode, set(), 0.0
    engine._eos_ids = lambda: [2]
    return engine


def test_sleep_wake_order_around_generate_and_sync():
    engine = _engine(sleep_mode=True)
    model = torch.nn.Linear(2, 2)
    out = engine.generate(["p"], 1, SamplingParams(max_new_tokens=4))
    assert out[0][0].completion_ids == [5, 2] and out[0][0].logprobs == [-0.5, -0.1]
    engine.sync_weights(model)
    engine.generate(["p"], 1, SamplingParams(max_new_tokens=4))
    engine.generate(["p"], 1, SamplingParams(max_new_tokens=4))  # no sync in between (eval)
    assert engine.llm.calls == [
        "generate", "sleep1",
        "wake:weights", "rpc:_load_weights_gpu",  # prefix cache already dropped by sleep
        "wake:kv_cache", "generate", "sleep1",
        "wake:weights,kv_cache", "generate", "sleep1"]


def test_without_sleep_mode_sync_resets_the_prefix_cache():
    engine = _engine(sleep_mode=False)
    engine.generate(["p"], 1, SamplingParams(max_new_tokens=4))
    engine.sync_weights(torch.nn.Linear(2, 2))
    assert engine.llm.calls == ["generate", "rpc:_load_weights_gpu", "reset_prefix"]
