"""The engine contract as docs/architecture.md's "Where to add: an engine" recipe states it: a class
that subclasses ``RolloutEngine`` and writes only ``generate`` and ``sync_weights`` runs GRPO."""

from __future__ import annotations

import pytest
import torch

from pipeline.config import load_run_config
from pipeline.grpo import trainer
from pipeline.grpo.run_log import read_metrics
from pipeline.models import load_policy
from pipeline.rollout.base import RolloutEngine, Sample, SamplingParams


class EchoDigitsEngine(RolloutEngine):
    """The recipe's minimal engine: the j-th sample of each prompt is j words then ``#### j`` (so a
    digit-share reward varies within a group); it records every weight sync it is given."""

    def __init__(self, tokenizer):
        self.tok = tokenizer
        self.synced = 0

    def generate(self, prompts: list[str], n: int, params: SamplingParams) -> list[list[Sample]]:
        out = []
        for prompt in prompts:
            prompt_ids = self.tok(prompt, add_special_tokens=False)["input_ids"]
            group = []
            for j in range(n):
                ids = self.tok(f"{'so ' * j}#### {j}", add_special_tokens=False)["input_ids"][:params.max_new_tokens]
                group.append(Sample(prompt=prompt, prompt_ids=prompt_ids, completion=self.tok.decode(ids),
                                    completion_ids=ids, finish_reason="stop"))
            out.append(group)
        return out

    def sync_weights(self, model) -> None:
        self.synced += 1


def test_the_base_class_gives_every_other_part_of_the_contract():
    class Bare(RolloutEngine):
        pass

    engine = Bare()
    assert (engine.lockstep, engine.batch_size, engine.runs_policy) == (False, None, False)
    engine.sleep()
    engine.close()  # defaults: nothing to free
    with pytest.raises(NotImplementedError, match="Bare must implement generate"):
        engine.generate(["q"], 1, SamplingParams())
    with pytest.raises(NotImplementedError, match="Bare must implement sync_weights"):
        engine.sync_weights(None)


def test_a_minimal_engine_from_the_recipe_runs_two_grpo_steps(tiny_setup, monkeypatch):
    overrides, _ = tiny_setup
    cfg = load_run_config(None, [*overrides, "name=minimal-engine", "train.steps=2", "train.questions_per_step=2",
                                 "rollout.group_size=4", "rollout.max_new_tokens=8", "train.lr=1e-3",
                                 "train.save_every=0", "reward.weights={tests.helpers:digit_fraction: 1.0}"])
    engines = []

    def build(cfg, model, tokenizer, **kwargs):
        engines.append(EchoDigitsEngine(tokenizer))
        return engines[-1]

    monkeypatch.setattr(trainer, "build_engine", build)
    run_dir = trainer.train(cfg)
    assert len(engines) == 1 and engines[0].synced == 2  # one weight sync after each step
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["completion_len/mean"] > 0 for r in rows)
    before, _ = load_policy(cfg.model.name_or_path)
    after, _ = load_policy(str(run_dir / "final"))
    changed = [k for k, v in before.state_dict().items() if not torch.equal(v, after.state_dict()[k])]
    assert changed, "two steps on the minimal engine's completions changed no weight"
