"""GPU sleep mode of VLLMEngine against a recording stand-in for ``vllm`` (tests/vllm_standin.py).

Sleep mode does not exist on vLLM's CPU backend, so this checks the order of calls and vLLM's
one-sleep-mode-engine-per-process rule, which the stand-in enforces as vLLM 0.32 does:
- the trainer puts the engine to sleep once per step, after the rollouts, not after each
  ``generate`` (several seeded generate calls per step under torchrun);
- every wake empties torch's CUDA cache first; the sync wakes the weights only, the next
  ``generate`` the KV cache; the prefix cache is not touched while the KV cache sleeps;
- eval engines never use sleep mode, and a second sleep-mode engine in a process runs without it.
"""

import dataclasses

import pytest
import torch

from pipeline.config import load_run_config
from pipeline.grpo import trainer
from pipeline.rollout import factory, vllm_engine
from pipeline.rollout.base import SamplingParams
from tests.vllm_standin import ONE_INSTANCE, Allocator, StandInLLM, install


class Tok:
    eos_token_id = 2

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [1, 3]}

    def decode(self, ids, skip_special_tokens=True):
        return "x"


@pytest.fixture
def standin(monkeypatch):
    monkeypatch.setattr(vllm_engine, "_max_len", lambda path, wanted: wanted)
    monkeypatch.setattr(vllm_engine, "_SLEEPERS", set())
    return install(monkeypatch, Tok())


def _cfg(sleep: bool = True, **rollout):
    cfg = load_run_config(None, ["rollout.engine=vllm", f"rollout.vllm_sleep_mode={str(sleep).lower()}"])
    return dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, **rollout))


P = SamplingParams(max_new_tokens=4)


def test_sleep_once_per_rollout_phase_and_empty_cache_before_every_wake(standin):
    engine = factory.colocated_vllm(_cfg(), "m")
    model = torch.nn.Linear(2, 2)
    out = engine.generate(["p"], 2, P)
    assert [s.completion_ids for s in out[0]] == [[5, 2], [5, 2]] and out[0][0].logprobs == [-0.5, -0.1]
    engine.generate(["q"], 2, P)  # a second seeded block of the same step: no sleep in between
    engine.sleep()  # the trainer, after the step's rollouts
    engine.sleep()  # idempotent
    engine.sync_weights(model)
    engine.generate(["p"], 1, P)
    engine.generate(["p"], 1, P)  # periodic eval on the trainer's engine: still awake
    assert standin == [
        "init(sleep=True)", "generate", "generate", "sleep1",
        "empty_cache", "wake:weights", "rpc:_load_weights_gpu:2",  # the prefix cache went with the KV cache
        "empty_cache", "wake:kv_cache", "generate", "generate"]


def test_without_sleep_mode_sleep_does_nothing_and_sync_resets_the_prefix_cache(standin):
    engine = factory.colocated_vllm(_cfg(sleep=False), "m")
    engine.generate(["p"], 1, P)
    engine.sleep()
    engine.sync_weights(torch.nn.Linear(2, 2))
    assert standin == ["init(sleep=False)", "generate", "rpc:_load_weights_gpu:2", "reset_prefix"]


def test_standin_enforces_vllms_one_instance_rule(standin):
    first = StandInLLM(model="m", enable_sleep_mode=True)
    with pytest.raises(AssertionError, match=ONE_INSTANCE):
        StandInLLM(model="m", enable_sleep_mode=True)
    StandInLLM(model="m")  # engines without sleep mode do not use the allocator
    first.llm_engine.engine_core.shutdown()
    StandInLLM(model="m", enable_sleep_mode=True)  # released: allowed again


def test_make_train_sequence_keeps_one_sleep_mode_engine(standin, capsys):
    """`mathrl run`: eval engine before, the trainer's engine, an eval engine while it lives (or after),
    all in one process. Only the trainer's engine sleeps; a second training engine runs without."""
    cfg, model = _cfg(), torch.nn.Linear(2, 2)
    before = factory.build_engine(cfg, model, Tok(), load_path="m", holds_weights=True)
    assert not before.sleep_mode
    before.close()
    train = factory.build_engine(cfg, model, Tok(), load_path="m", training=True)
    assert train.sleep_mode
    during = factory.build_engine(cfg, model, Tok(), load_path="m", holds_weights=True)
    assert not during.sleep_mode
    during.close()
    second = factory.build_engine(cfg, model, Tok(), load_path="m", training=True)
    assert not second.sleep_mode and "vllm_sleep_mode ignored" in capsys.readouterr().out
    second.close()
    train.close()
    again = factory.build_engine(cfg, model, Tok(), load_path="m", training=True)  # the first is gone
    assert again.sleep_mode
    assert [c for c in standin if c.startswith("init")] == [
        "init(sleep=False)", "init(sleep=True)", "init(sleep=False)", "init(sleep=False)", "init(sleep=True)"]


def test_memory_left_in_the_allocator_turns_sleep_mode_off(standin, capsys):
    leftover = StandInLLM(model="m", enable_sleep_mode=True)  # an engine this code did not build, never shut down
    engine = factory.colocated_vllm(_cfg(), "m")
    assert not engine.sleep_mode and "left 1048576 bytes" in capsys.readouterr().out
    assert Allocator.instance.held == {id(leftover): 1 << 20}


def test_trainer_sleeps_once_per_step(standin, tiny_setup, monkeypatch):
    """Two GRPO steps with four seeded generate calls each (seed_block=1): one sleep per step,
    after the last rollout and before the update; the sync wakes the weights, the rollout the KV cache."""
    overrides, _ = tiny_setup
    cfg = load_run_config(None, [*overrides, "device=cpu", "name=sleep", "train.steps=2", "train.questions_per_step=4",
                                 "rollout.group_size=2", "rollout.seed_block=1", "rollout.engine=vllm",
                                 "rollout.vllm_sleep_mode=true", "reward.workers=1", "train.save_every=0"])
    state, _ = trainer._build_state(cfg, None, None)
    monkeypatch.setattr(trainer, "_build_state", lambda *a: (state, 0))
    real = trainer.optimise
    monkeypatch.setattr(trainer, "optimise", lambda *a: (standin.append("update"), real(*a))[1])
    trainer.train(cfg)
    calls = [c.split(":")[0] if c.startswith("rpc") else c for c in standin]
    step = ["generate"] * 4 + ["sleep1", "update", "empty_cache", "wake:weights", "rpc"]
    assert calls == ["init(sleep=True)", "rpc", "reset_prefix", *step,
                     "empty_cache", "wake:kv_cache", *step, "shutdown"]
