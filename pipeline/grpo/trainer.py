"""GRPO training (`mathrl train`): outcome- or process-supervised, DeepSeekMath style.

Each step: take `questions_per_step` questions -> sample G = `rollout.group_size` completions
each -> score them with the `rewards` registry -> group-relative advantages (outcome: one per
completion; process: one per token from step rewards) -> `num_iterations` (mu) passes of
`policy_loss` over micro-batches, one optimizer step per pass -> sync the rollout engine.
The math lives in `advantages.py` / `losses.py`; this file only orders the work and records it.

Deviations from the paper (DeepSeekMath, sec. 4.1), all configurable:
1. Rewards are rule-based (`rewards` package) instead of a learned reward model; process
   supervision uses rule-checked step rewards (+1/-1/0) instead of a process reward model.
2. With mu = 1 the old policy is the current one (old = logp.detach()), as in the paper's
   "one policy update per exploration stage"; with mu > 1 old log-probs are computed once.
3. The KL term may be moved into the reward (`train.kl_in=reward`, detached k1 summed per
   completion), which seed 002 argues is right when mu > 1; outcome supervision only.
4. Optional DAPO-style dynamic sampling drops groups whose rewards are all equal.
5. Mixed precision: float32 master weights with bfloat16 forwards under autocast (precision.py).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

import rewards

from pipeline.config import RunConfig, save_config
from pipeline.data.problems import load_problems
from pipeline.grpo import precision
from pipeline.parallel import distributed, fsdp
from pipeline.grpo.advantages import outcome_advantages, process_advantages, reward_with_kl
from pipeline.grpo.checkpoint import (find_resume, list_checkpoints, load_trainer_state, save_checkpoint,
                                      set_rng_state)
from pipeline.grpo.components import (QuestionSampler, build_engine, build_optimizer, build_policy,
                                      reference_mode)
from pipeline.grpo.episodes import Episode, Packed, pack
from pipeline.grpo.logprobs import token_logprobs
from pipeline.grpo.losses import policy_loss
from pipeline.grpo.run_log import NullLog, RunLog, plot_curves
from pipeline.grpo.scoring import add_step_rewards, score_episodes
from pipeline.models import resolve_device
from pipeline.prompts import build_prompt
from pipeline.rollout.base import SamplingParams
from pipeline.rollout.hf_engine import HFEngine

CRASH_ENV = "MATHRL_CRASH_AFTER_STEP"  # fault injection for the resume test: SIGKILL after step N


class TrainingError(RuntimeError):
    """A condition that stops the run (non-finite loss, bad setup); the message says what to do."""


@dataclass
class Batch:
    episodes: list[Episode]
    packed: Packed
    advantages: torch.Tensor  # [N] or [N, T]
    old_logp: torch.Tensor | None  # [N, T], None when mu = 1 (then old = logp.detach())
    ref_logp: torch.Tensor | None  # [N, T], None when the KL is not in the loss
    is_weights: torch.Tensor | None  # [N, T] truncated importance weights (vLLM), or None
    zero_std_frac: float
    mismatch: dict[str, float]


def main(cfg: RunConfig) -> int:
    try:
        run_dir = train(cfg)
    except (TrainingError, distributed.PeerLost) as e:
        print(f"mathrl train: {e}")
        return 1
    distributed.print0(f"run directory: {run_dir}")
    return 0


def train(cfg: RunConfig) -> Path:
    distributed.init(cfg.train.dist_timeout_s)  # no-op outside torchrun; rank 0 alone writes files
    main_rank = distributed.is_main()
    run_dir = Path(cfg.output_dir) / cfg.name
    ckpt = find_resume(run_dir, cfg.train.resume)
    state = load_trainer_state(ckpt) if ckpt is not None else None
    if main_rank:
        save_config(cfg, run_dir / "config.yaml")
    torch.manual_seed(cfg.seed)
    sampler = QuestionSampler(load_problems(cfg.data.prepared_dir, cfg.train.task, "train"), cfg.seed)
    policy, tok, ref = build_policy(cfg, ckpt)
    distributed.broadcast_params(policy)
    policy, ref = fsdp.shard(cfg, policy, ref)  # train.fsdp under torchrun: FSDP2, else unchanged
    opt, sched = build_optimizer(cfg, policy)
    start = 0
    if state is not None:
        fsdp.load_optimizer_state(policy, opt, state["optimizer"])  # opt.load_state_dict unless sharded
        sched.load_state_dict(state["scheduler"])
        sampler.load_state_dict(state["sampler"])
        start = state["step"]
        distributed.print0(f"resuming from {ckpt} (step {start})")
    if not distributed.same_on_all_ranks(start):
        raise TrainingError("the ranks found different checkpoints to resume from: every rank reads the run "
                            "directory, so put output_dir on storage that all nodes share")
    engine = build_engine(cfg, policy, tok)
    rewards.warmup(cfg.reward.workers)  # start the checkers' worker processes outside the timed steps
    log = RunLog(run_dir, resume_step=start) if main_rank else NullLog()
    if state is not None:
        set_rng_state(state["rng"])
    bar = tqdm(range(start + 1, cfg.train.steps + 1), initial=start, total=cfg.train.steps, desc="grpo",
               disable=not main_rank)
    for step in bar:
        timer: dict[str, float] = {}
        batch = make_batch(cfg, policy, ref, tok, engine, sampler, timer)
        update = optimise(cfg, policy, ref, opt, sched, batch, step, run_dir, timer)
        with _timed(timer, "sync"):
            engine.sync_weights(policy)
        if cfg.train.ref_reset_every and step % cfg.train.ref_reset_every == 0:
            ref.load_state_dict(policy.state_dict())
        view, timer = distributed.global_view(batch, timer)  # every rank's episodes (1 process: batch)
        metrics = step_metrics(cfg, view, update, timer)
        # HF engine on an FSDP-sharded policy: every rank runs the same eval in lock-step (its forwards
        # are collectives); rank 0 writes
        if cfg.train.eval_every and (main_rank or getattr(engine, "synced", False)) and (
                step % cfg.train.eval_every == 0 or step == cfg.train.steps):
            out_dir = run_dir / "eval" / f"step_{step}" if main_rank else None
            metrics.update(periodic_eval(cfg, policy, tok, engine, out_dir))
        log.log(step, metrics)
        log.samples(step, [e.record() for e in view.episodes[:cfg.train.log_samples]])
        bar.set_postfix(reward=f"{metrics['reward/mean']:.3f}", kl=f"{metrics.get('kl', 0):.4f}")
        if main_rank:
            _warn_zero_std(cfg, step, view.zero_std_frac)
        if step == cfg.train.steps or (cfg.train.save_every and step % cfg.train.save_every == 0):
            _save(cfg, run_dir, step, policy, ref, tok, opt, sched, sampler)
        if os.environ.get(CRASH_ENV) == str(step):
            os.kill(os.getpid(), signal.SIGKILL)
    log.close()
    final_state = fsdp.full_model_state(policy)  # every rank gathers under FSDP; None otherwise
    if main_rank:
        policy.save_pretrained(run_dir / "final", state_dict=final_state)
        tok.save_pretrained(run_dir / "final")
        plot_curves(run_dir)
    engine.close()
    distributed.barrier("final barrier")  # the job ends once final/ is written
    distributed.close()
    return run_dir


def _save(cfg, run_dir, step, policy, ref, tok, opt, sched, sampler) -> None:
    """Checkpoint on rank 0; under FSDP every rank first gathers the full weights and optimizer state."""
    full = fsdp.gather_for_save(policy, opt, ref if cfg.train.ref_reset_every else None)
    if distributed.is_main():
        trainer_state = {"optimizer": full.optimizer, "scheduler": sched.state_dict(), "sampler": sampler.state_dict()}
        save_checkpoint(run_dir, step, policy, tok, trainer_state, keep=cfg.train.keep_checkpoints,
                        ref_model=ref if cfg.train.ref_reset_every else None, model_state=full.model,
                        ref_state=full.ref)


def make_batch(cfg, policy, ref, tok, engine, sampler, timer) -> Batch:
    """Rollout + rewards (+ dynamic sampling), then log-probs and advantages."""
    episodes, zero_std_frac = collect_groups(cfg, engine, tok, sampler, timer)
    packed = pack(episodes, tok.pad_token_id)
    mask = _loss_mask(cfg, episodes, packed)
    need_old = cfg.train.num_iterations > 1 or cfg.train.kl_in == "reward" or cfg.rollout.tis_cap > 0
    with _timed(timer, "logprobs"), torch.no_grad():
        old = _all_logprobs(cfg, policy, packed) if need_old else None
        ref_logp = None
        if ref is not None:
            with reference_mode(policy, ref) as ref_model:
                ref_logp = _all_logprobs(cfg, ref_model, packed)
    rewards = torch.tensor([e.reward for e in episodes], dtype=torch.float32)
    if cfg.train.kl_in == "reward" and ref_logp is not None:
        rewards = reward_with_kl(rewards, old, ref_logp, mask, cfg.train.beta)
    g = cfg.rollout.group_size
    if cfg.train.advantage == "process":
        add_step_rewards(episodes, cfg.reward.weights, tok)
        adv = process_advantages([e.step_rewards for e in episodes], [e.step_ends for e in episodes],
                                 [len(e.completion_ids) for e in episodes], g, cfg.train.adv_eps)
        adv = torch.nn.functional.pad(adv, (0, packed.completion_mask.shape[1] - adv.shape[1]))
    else:
        # over every rank's rewards, so batch-std scaling sees the global batch; keep this rank's rows
        adv = outcome_advantages(distributed.gather_cat(rewards), g, cfg.train.adv_scale, cfg.train.adv_eps)
        adv = adv[distributed.rank() * len(rewards):][:len(rewards)]
    is_weights, mismatch = _tis(cfg, episodes, old, mask)
    return Batch(episodes, packed, adv, old if cfg.train.num_iterations > 1 else None,
                 ref_logp if cfg.train.kl_in == "loss" else None, is_weights, zero_std_frac, mismatch)


def collect_groups(cfg, engine, tok, sampler, timer) -> tuple[list[Episode], float]:
    """G completions for each of `questions_per_step` questions, scored. With dynamic
    sampling, all-equal-reward groups are dropped and more questions are sampled to refill."""
    want, g = cfg.train.questions_per_step, cfg.rollout.group_size
    kept: list[list[Episode]] = []
    zero_groups = total_groups = 0
    rounds = 1 + (cfg.train.max_resample_rounds if cfg.train.dynamic_sampling else 0)
    spread = cfg.train.dynamic_sampling and distributed.world_size() > 1  # then every rank sees every group
    flat_groups: list[list[Episode]] = []
    for _ in range(rounds):
        first = sampler.drawn  # every rank draws the global list and keeps its own shard
        drawn = sampler.take(want - len(kept))
        mine, offset = distributed.shard(drawn, even=not spread)
        # a sharded HF policy generates in lock-step: every rank needs as many prompts as the largest share
        pad = [drawn[0]] * (-(-len(drawn) // distributed.world_size()) - len(mine)) if getattr(
            engine, "synced", False) else []
        groups = rollout(cfg, engine, tok, mine, timer, first + offset, lockstep_pad=pad)
        groups = distributed.gather_list(groups) if spread else groups
        for group in groups:
            flat = max(e.reward for e in group) == min(e.reward for e in group)
            zero_groups += flat
            total_groups += 1
            if not (cfg.train.dynamic_sampling and flat):
                kept.append(group)
            elif spread:
                flat_groups.append(group)
        if len(kept) >= want:
            break
    if spread:  # equal shares: if the rounds ran out, flat groups fill the batch (1 process: fewer groups)
        kept = distributed.shard((kept + flat_groups)[:want])[0]
    if not kept:  # every group was flat in every round: train on the last round (advantage 0)
        kept = groups
    episodes = [e for gi, group in enumerate(kept) for e in group]
    for gi, group in enumerate(kept):
        for e in group:
            e.group = gi
    return episodes, zero_groups / max(1, total_groups)


def rollout(cfg, engine, tok, problems: list[dict], timer, first_draw: int = 0,
            lockstep_pad: list[dict] = ()) -> list[list[Episode]]:
    """G scored episodes per problem. ``lockstep_pad``: extra problems generated and thrown away, so
    that every rank of a sharded policy makes the same generate calls (dynamic sampling's refill
    rounds give ranks shares that differ by one)."""
    prompts = [build_prompt(p["question"], template=cfg.prompt.template, tokenizer=tok, chat=cfg.prompt.chat)
               for p in [*problems, *lockstep_pad]]
    params = SamplingParams(cfg.rollout.max_new_tokens, cfg.rollout.temperature, cfg.rollout.top_p,
                            cfg.rollout.top_k)
    with _timed(timer, "rollout"), _autocast(cfg, engine):
        block = cfg.rollout.seed_block or (1 if distributed.world_size() > 1 else 0)
        if block:  # seeded calls of `block` questions: samples do not depend on the rank holding them
            samples = [s for i in range(0, len(prompts), block) for s in engine.generate(
                prompts[i:i + block], cfg.rollout.group_size,
                dataclasses.replace(params, seed=distributed.sampling_seed(cfg.seed, first_draw + i)))]
        else:
            samples = engine.generate(prompts, cfg.rollout.group_size, params)
    samples = samples[:len(problems)]
    groups = [[Episode(problem_id=p["id"], group=qi, sample=j, prompt=s.prompt, completion=s.completion,
                       prompt_ids=s.prompt_ids, completion_ids=s.completion_ids, finish_reason=s.finish_reason,
                       gold=p["answer"], engine_logprobs=s.logprobs) for j, s in enumerate(group)]
              for qi, (p, group) in enumerate(zip(problems, samples))]
    with _timed(timer, "reward"):
        score_episodes([e for grp in groups for e in grp], cfg.reward)
    timer["gen_tokens"] = timer.get("gen_tokens", 0) + sum(len(e.completion_ids) for grp in groups for e in grp)
    return groups


def optimise(cfg, policy, ref, opt, sched, batch: Batch, step: int, run_dir: Path, timer) -> dict:
    """mu passes over the batch, one optimizer step each; returns averaged loss statistics."""
    n = len(batch.episodes)
    mask = _loss_mask(cfg, batch.episodes, batch.packed)
    # Scale by GLOBAL counts: the gradients summed over ranks then equal one process's on the whole batch.
    n_all, total_tokens = distributed.all_reduce_sum([n, float(mask.sum())])
    sums: dict[str, float] = {}
    grad_norms = []
    with _timed(timer, "update"):
        for _ in range(cfg.train.num_iterations):
            opt.zero_grad(set_to_none=True)
            for start in range(0, n, cfg.train.micro_batch_size):
                rows = slice(start, min(n, start + cfg.train.micro_batch_size))
                m = rows.stop - rows.start
                with _autocast(cfg):
                    logp = token_logprobs(policy, batch.packed, rows, cfg.rollout.temperature)
                old = batch.old_logp[rows] if batch.old_logp is not None else logp.detach()
                loss, stats = policy_loss(
                    logp, old, None if batch.ref_logp is None else batch.ref_logp[rows],
                    batch.advantages[rows], mask[rows], loss_type=cfg.train.loss_type,
                    clip_low=cfg.train.clip_low, clip_high=cfg.train.clip_high,
                    beta=cfg.train.beta if cfg.train.kl_in == "loss" else 0.0,
                    kl_estimator=cfg.train.kl_estimator, importance_level=cfg.train.importance_level,
                    max_completion_length=cfg.rollout.max_new_tokens,
                    is_weights=None if batch.is_weights is None else batch.is_weights[rows],
                    num_tokens=total_tokens if cfg.train.loss_type == "dapo" else None)
                if not torch.isfinite(loss):
                    _stop_non_finite(run_dir, step, "loss")
                # dapo already divides by the whole batch's tokens; the others (bnpo: the micro-batch's
                # tokens, as TRL) average rows.
                scale = 1.0 if cfg.train.loss_type == "dapo" else m / n_all
                (loss * scale).backward()
                for k, v in stats.items():
                    sums[k] = sums.get(k, 0.0) + float(v) * m / n_all / cfg.train.num_iterations
            params = [p for p in policy.parameters() if p.requires_grad]
            if not fsdp.is_sharded(policy):  # FSDP already reduce-scattered (summed) them in backward
                distributed.all_reduce_grads(params)
            norm = fsdp.clip_grad_norm(params, cfg.train.max_grad_norm or float("inf"))  # global over shards
            if not torch.isfinite(norm):
                _stop_non_finite(run_dir, step, "gradient norm")
            grad_norms.append(float(norm))
            opt.step()
            sched.step()
    sums = dict(zip(sums, distributed.all_reduce_sum(list(sums.values()))))
    return {**sums, "grad_norm": sum(grad_norms) / len(grad_norms), "lr": sched.get_last_lr()[0]}


def step_metrics(cfg, batch: Batch, update: dict, timer: dict) -> dict:
    eps = batch.episodes
    rewards = torch.tensor([e.reward for e in eps])
    lengths = torch.tensor([len(e.completion_ids) for e in eps], dtype=torch.float32)
    metrics = {"reward/mean": float(rewards.mean()), "reward/std": float(rewards.std()) if len(eps) > 1 else 0.0}
    for name in {"correct": 0.0, **cfg.reward.weights}:
        metrics[f"reward/{name}"] = sum(e.rewards.get(name, 0.0) for e in eps) / len(eps)
    metrics.update({
        "zero_std_frac": batch.zero_std_frac, "completion_len/mean": float(lengths.mean()),
        "completion_len/max": float(lengths.max()),
        "truncated_frac": sum(e.finish_reason == "length" for e in eps) / len(eps),
        "groups": len({e.group for e in eps}), **update, **batch.mismatch,
        "tokens_per_s": timer.get("gen_tokens", 0) / max(timer.get("rollout", 1e-9), 1e-9),
    })
    metrics.update({f"time/{k}": v for k, v in timer.items() if k != "gen_tokens"})
    return metrics


def periodic_eval(cfg, policy, tok, engine, out_dir: Path | None) -> dict[str, float]:
    """Greedy accuracy on the task's test split with the live policy (same code as `mathrl eval`)."""
    from evals.run import evaluate_with_config

    with _autocast(cfg, engine):
        summary = evaluate_with_config(policy, tok, cfg, dataset=cfg.train.task, limit=cfg.train.eval_limit,
                                       engine=engine, output_dir=out_dir)
    policy.train()
    if distributed.is_main():
        tqdm.write(f"eval: accuracy {summary['accuracy']:.3f} on {summary['n_problems']} {cfg.train.task} problems")
    return {"eval/accuracy": summary["accuracy"], "eval/extraction_failure_rate": summary["extraction_failure_rate"]}


def _all_logprobs(cfg, model, packed: Packed) -> torch.Tensor:
    n, mb = packed.input_ids.shape[0], cfg.train.micro_batch_size
    with _autocast(cfg):
        return torch.cat([token_logprobs(model, packed, slice(s, min(n, s + mb)), cfg.rollout.temperature).float()
                          for s in range(0, n, mb)])


def _autocast(cfg, engine=None):
    """Mixed precision for the trainer's own forwards (precision.py); vLLM engines run their own model."""
    if engine is not None and not isinstance(engine, HFEngine):
        return nullcontext()
    return precision.autocast(cfg, resolve_device(cfg.device))


def _loss_mask(cfg, episodes: list[Episode], packed: Packed) -> torch.Tensor:
    mask = packed.completion_mask.clone()
    if cfg.train.mask_truncated:
        for i, e in enumerate(episodes):
            if e.finish_reason == "length":
                mask[i] = 0
    return mask


def _tis(cfg, episodes, old, mask) -> tuple[torch.Tensor | None, dict[str, float]]:
    """Truncated importance weights between the trainer's and the engine's log-probs."""
    if cfg.rollout.tis_cap <= 0 or old is None or any(e.engine_logprobs is None for e in episodes):
        return None, {}
    from pipeline.rollout.tis import pad_logprobs, tis_weights

    engine = pad_logprobs([e.engine_logprobs for e in episodes], old.shape[1])
    return tis_weights(old, engine, mask, cfg.rollout.tis_cap)


def _warn_zero_std(cfg, step: int, frac: float) -> None:
    if frac > cfg.train.warn_zero_std_frac:
        tqdm.write(f"WARNING step {step}: {frac:.0%} of groups have identical rewards for all "
                   f"{cfg.rollout.group_size} samples, so they give no learning signal. The task may be "
                   "too easy or too hard for this policy: change the data, raise rollout.group_size or "
                   "rollout.temperature, or turn on train.dynamic_sampling.")


def _stop_non_finite(run_dir: Path, step: int, what: str) -> None:
    found = list_checkpoints(run_dir)
    where = f"the last good checkpoint is {found[-1]}" if found else "no checkpoint was written yet"
    raise TrainingError(f"non-finite {what} at step {step}; stopped before the optimizer step, {where}. "
                        "Lower train.lr, check the rewards, or use model.dtype=float32.")


class _timed:
    def __init__(self, timer: dict, key: str):
        self.timer, self.key = timer, key

    def __enter__(self):
        self.t0 = time.perf_counter()

    def __exit__(self, *exc):
        self.timer[self.key] = self.timer.get(self.key, 0.0) + time.perf_counter() - self.t0
