"""One GRPO update moves the policy the right way: completions with positive advantage become
more likely, those with negative advantage less likely. This fails if a sign, the advantage
broadcast, or the loss aggregation were wrong, without relying on a long noisy training run."""

from __future__ import annotations

import torch

from pipeline.config import load_run_config
from pipeline.data.problems import load_problems
from pipeline.grpo import trainer
from pipeline.grpo.batch import all_logprobs, make_batch
from pipeline.grpo.components import QuestionSampler, TrainState, build_optimizer, build_policy
from pipeline.rollout.factory import build_engine


def _seq_logp(cfg, policy, batch):
    with torch.no_grad():
        lp = all_logprobs(cfg, policy, batch.packed, batch.episodes)
    return (lp * batch.packed.completion_mask).sum(dim=1)  # [N]


def test_update_raises_logp_of_positive_advantage(tiny_setup, tmp_path):
    overrides, _ = tiny_setup
    cfg = load_run_config(None, [*overrides, "name=direction", "train.beta=0", "train.lr=3e-4",
                                 "train.questions_per_step=4", "rollout.group_size=6", "rollout.max_new_tokens=16",
                                 "train.micro_batch_size=8", "reward.weights={tests.helpers:digit_fraction: 1.0}"])
    torch.manual_seed(0)
    policy, tok, ref = build_policy(cfg, None)
    opt, sched = build_optimizer(cfg, policy)
    engine = build_engine(cfg, policy, tok)
    sampler = QuestionSampler(load_problems(cfg.data.prepared_dir, cfg.train.task, "train"), cfg.seed)
    state = TrainState(policy, ref, tok, engine, opt, sched, sampler)
    batch = make_batch(cfg, state, {})
    before = _seq_logp(cfg, policy, batch)
    trainer.optimise(cfg, state, batch, 1, tmp_path, {})
    delta = _seq_logp(cfg, policy, batch) - before
    adv = batch.advantages
    assert (adv > 0).any() and (adv < 0).any()
    assert delta[adv > 0].mean() > 0 > delta[adv < 0].mean()
    corr = torch.corrcoef(torch.stack([adv, delta]))[0, 1]
    assert corr > 0.5
