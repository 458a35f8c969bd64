"""GRPO training (`mathrl train`): outcome- or process-supervised, DeepSeekMath style.

Each step: take `questions_per_step` questions -> sample G = `rollout.group_size` completions
each -> score them with the `rewards` package -> group-relative advantages (outcome: one per
completion; process: one per token from step rewards) -> `num_iterations` (mu) passes of
`policy_loss` over micro-batches, each pass split into `mini_batches` mini-batches of whole groups
with one optimizer step each (verl's ppo_mini_batch_size) -> sync the rollout engine.
The first half is `batch.make_batch` (or, with `train.async_staleness` > 0, a batch generated
while the previous step trained: pipelined.py), the second `optimise` below; the math lives in
`advantages.py` / `losses.py`; this file orders the work and records it. docs/architecture.md
follows one step through the files.

Deviations from the paper (DeepSeekMath, sec. 4.1), all configurable:
1. Rewards are rule-based (`rewards` package) instead of a learned reward model; process
   supervision uses rule-checked steps, or a process reward model (`reward.prm`, loaded in
   `pipeline/prm/`) combined with the rule checks (`reward.prm_mix`).
2. With mu = 1 the old policy is the current one (old = logp.detach()), as in the paper's
   "one policy update per exploration stage"; with mu > 1 (or several mini-batches) old
   log-probs are computed once.
3. The KL term may be moved into the reward (`train.kl_in=reward`, detached k1 summed per
   completion), as PPO-based RLHF does. Liu et al. 2025 ("Rethinking KL Regularization in
   RLHF", arXiv:2510.01555) show this is the principled reverse-KL gradient and that a KL in
   the loss is biased off-policy, i.e. when mu > 1 reuses a batch. Outcome supervision only.
4. Optional DAPO-style dynamic sampling drops groups whose rewards are all equal.
5. Mixed precision: float32 master weights with bfloat16 forwards under autocast (precision.py).

Devices: the policy (and reference) live on ``resolve_device(cfg.device)`` (``pipeline/device.py``;
``auto`` warns loudly when it falls back to the CPU); under torchrun the backend follows it (gloo
on cpu, NCCL on cuda). ``make_batch`` moves each step's packed episodes to the policy's device in
one place and builds every other batch tensor there (batch.py), so the losses never see a host
tensor. The loss statistics stay on the device as tensors and are read back once per step, at
the end of ``optimise``; ``step_metrics`` works on host values only (rewards, lengths, those reads).

The periodic eval (`train.eval_every`) is a function the caller passes in (the `mathrl train` and
`mathrl run` stages pass `evals.evaluate.periodic_eval(cfg)`), so this package never imports evals.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import torch
from tqdm.auto import tqdm

import rewards
from pipeline import determinism, faults, layout
from pipeline.config import RunConfig, save_config, to_dict
from pipeline.data.problems import load_problems
from pipeline.device import resolve_device
from pipeline.grpo import objective
from pipeline.grpo.batch import Batch, loss_mask, timed
from pipeline.grpo.checkpoint import find_resume, list_checkpoints, load_trainer_state, save_checkpoint, set_rng_state
from pipeline.grpo.components import TrainState, build_optimizer, build_policy
from pipeline.grpo.episodes import mini_batch_rows
from pipeline.grpo.logprobs import token_logprobs
from pipeline.micro_batches import as_index, micro_batches
from pipeline.grpo.losses import TopK
from pipeline.grpo.pipelined import batch_source
from pipeline.grpo.precision import autocast_for
from pipeline.grpo.reward_audit import RewardAudit
from pipeline.grpo.run_log import NullLog, RunLog, plot_curves
from pipeline.grpo.sampling import build_sampler
from pipeline.grpo.skipping import can_skip, teaching_rows
from pipeline.grpo.trackers import open_trackers, resolve
from pipeline.grpo.tool_stats import tool_metrics
from pipeline.parallel import distributed, fsdp
from pipeline.prm import load_scorer
from pipeline.rollout.factory import build_engine
from pipeline.rollout.tis import tis_weights

# fn(model, tokenizer, engine, out_dir or None, step=N) -> eval summary (accuracy, extraction_failure_rate,
# n_problems, and optionally "metrics": more {name: value} to log)
EvalFn = Callable[..., dict]


class TrainingError(RuntimeError):
    """A condition that stops the run (non-finite loss, bad setup); the message says what to do."""


def train(cfg: RunConfig, evaluate: EvalFn | None = None) -> Path:
    """Run GRPO as ``cfg`` says; returns the run directory. ``evaluate``: the periodic eval, needed
    when ``train.eval_every`` > 0."""
    if cfg.train.eval_every and evaluate is None:
        raise TrainingError("train.eval_every is set but no eval function was given: run GRPO through "
                            "`mathrl train` / `mathrl run`, or pass evaluate=evals.evaluate.periodic_eval(cfg)")
    report_to = resolve(cfg.train.report_to)  # a tracker that is not installed stops every rank here
    determinism.apply(cfg, "train")  # threads, deterministic algorithms (printed)
    # no-op outside torchrun; rank 0 alone writes files; gloo or NCCL after the run's device
    distributed.init(cfg.train.dist_timeout_s, resolve_device(cfg.device))
    main_rank = distributed.is_main()
    run_dir = layout.run_dir(cfg)
    ckpt = find_resume(run_dir, cfg.train.resume)
    saved = load_trainer_state(ckpt) if ckpt is not None else None
    log = NullLog()
    if main_rank:
        save_config(cfg, run_dir / "config.yaml")
        resume_step = saved["step"] if saved is not None else None
        log = RunLog(run_dir, resume_step, open_trackers(report_to, run_dir, to_dict(cfg), cfg.train.tracker_project,
                                                          cfg.name, resume_step or 0),
                     history_from=layout.run_of(ckpt))
    try:
        state, start = _build_state(cfg, ckpt, saved)
    except BaseException:
        log.close()  # trackers end their run (started first so that a login problem shows before loading)
        raise
    rewards.warmup(cfg.reward.workers)  # start the checkers' worker processes outside the timed steps
    if saved is not None:
        set_rng_state(saved["rng"])
    bar = tqdm(range(start + 1, cfg.train.steps + 1), initial=start, total=cfg.train.steps, desc="grpo",
               disable=not main_rank)
    if cfg.train.eval_every and cfg.train.eval_on_start and start == 0 and _evaluates_here(state, main_rank):
        log.log(0, _periodic_eval(cfg, state, evaluate, layout.eval_dir(run_dir, "step_0") if main_rank else None, 0))
    reward_audit = RewardAudit(cfg.reward, run_dir if main_rank else None)
    batches = batch_source(cfg, state, start, saved.get("in_flight") if saved is not None else None)
    for step in bar:
        if budget_spent(cfg, state.sampler):  # a resumed run that had stopped on train.max_questions
            break
        step_began = time.perf_counter()
        timer: dict[str, float] = {}
        batch = batches.take(step, timer)  # make_batch, or a batch generated while the last step trained
        update = optimise(cfg, state, batch, step, run_dir, timer)
        with timed(timer, "sync"):
            batches.updated(step)  # sync (or push) the weights
        if cfg.train.ref_reset_every and step % cfg.train.ref_reset_every == 0:
            state.ref.load_state_dict(state.policy.state_dict())
        view, timer = distributed.global_view(batch, timer)  # every rank's episodes (1 process: batch)
        metrics = {**step_metrics(cfg, view, update, timer), **state.sampler.stats(),
                   "sampling/drawn": float(state.sampler.drawn)}  # rollout compute: G completions per question
        if main_rank:
            metrics.update(reward_audit.step(step, view.episodes))
        last = step == cfg.train.steps or budget_spent(cfg, state.sampler)
        if cfg.train.eval_every and _evaluates_here(state, main_rank) and (
                step % cfg.train.eval_every == 0 or last):
            out_dir = layout.eval_dir(run_dir, f"step_{step}") if main_rank else None
            metrics.update(_periodic_eval(cfg, state, evaluate, out_dir, step))
        # the whole step's wall time (its eval included): summed over rows, the time a run took to reach a step
        metrics["time/step"] = time.perf_counter() - step_began
        log.log(step, metrics)
        log.samples(step, [e.record() for e in view.episodes[:cfg.train.log_samples]])
        bar.set_postfix(reward=f"{metrics['reward/mean']:.3f}", entropy=f"{metrics['entropy']:.3f}")
        if main_rank:
            _warn_zero_std(cfg, step, view.zero_std_frac)
        if last or (cfg.train.save_every and step % cfg.train.save_every == 0):
            _save(cfg, run_dir, step, state, batches.in_flight())
        faults.after_step(step)
        if last:
            break
    log.close()
    final_state = fsdp.full_model_state(state.policy)  # every rank gathers under FSDP; None otherwise
    if main_rank:
        state.policy.save_pretrained(layout.final_dir(run_dir), state_dict=final_state)
        state.tokenizer.save_pretrained(layout.final_dir(run_dir))
        plot_curves(run_dir)
    state.engine.close()
    distributed.barrier("final barrier")  # the job ends once final/ is written
    distributed.close()
    return run_dir


def budget_spent(cfg: RunConfig, sampler) -> bool:
    """Whether the run has drawn its ``train.max_questions`` (never with the budget off)."""
    return 0 < cfg.train.max_questions <= sampler.drawn


def _build_state(cfg: RunConfig, ckpt: Path | None, saved: dict | None) -> tuple[TrainState, int]:
    """(the models, optimizer, sampler and engine, the step to continue after), restored from the
    checkpoint ``ckpt`` (``saved``: its trainer state) when resuming."""
    torch.manual_seed(cfg.seed)
    sampler = build_sampler(cfg, load_problems(cfg.data.prepared_dir, cfg.train.task, "train"))
    policy, tok, ref = build_policy(cfg, ckpt)
    distributed.broadcast_params(policy)
    policy, ref = fsdp.shard(cfg, policy, ref)  # train.fsdp under torchrun: FSDP2, else unchanged
    opt, sched = build_optimizer(cfg, policy)
    start = 0
    if saved is not None:
        fsdp.load_optimizer_state(policy, opt, saved["optimizer"])  # opt.load_state_dict unless sharded
        sched.load_state_dict(saved["scheduler"])
        sampler.load_state_dict(saved["sampler"])
        start = saved["step"]
        distributed.print0(f"resuming from {ckpt} (step {start})")
    if not distributed.same_on_all_ranks(start):
        raise TrainingError("the ranks found different checkpoints to resume from: every rank reads the run "
                            "directory, so put output_dir on storage that all nodes share")
    engine = build_engine(cfg, policy, tok, training=True)
    prm = load_scorer(cfg) if cfg.reward.prm and cfg.train.advantage == "process" else None
    return TrainState(policy, ref, tok, engine, opt, sched, sampler, prm), start


def _save(cfg: RunConfig, run_dir: Path, step: int, state: TrainState, in_flight: list[dict] | None = None) -> None:
    """Checkpoint on rank 0; under FSDP every rank first gathers the full weights and optimizer state.
    ``in_flight``: the pipelined loop's batches generated ahead (pipelined.py), kept for resume."""
    ref = state.ref if cfg.train.ref_reset_every else None
    full = fsdp.gather_for_save(state.policy, state.optimizer, ref)
    if distributed.is_main():
        trainer_state = {"optimizer": full.optimizer, "scheduler": state.scheduler.state_dict(),
                         "sampler": state.sampler.state_dict(),
                         **({"in_flight": in_flight} if in_flight is not None else {})}
        save_checkpoint(run_dir, step, state.policy, state.tokenizer, trainer_state, keep=cfg.train.keep_checkpoints,
                        ref_model=ref, model_state=full.model, ref_state=full.ref)


def optimise(cfg: RunConfig, state: TrainState, batch: Batch, step: int, run_dir: Path, timer: dict) -> dict:
    """mu passes over the batch; each pass takes one optimizer step per mini-batch (whole groups,
    `train.mini_batches` of them, episodes.mini_batch_rows). Returns loss statistics averaged over
    the batch and the passes."""
    mask = batch.mask if batch.mask is not None else loss_mask(cfg, batch.episodes, batch.packed)
    parts = mini_batch_rows([e.group for e in batch.episodes], cfg.train.mini_batches)
    trained = _trained_rows(cfg, state, batch, mask, parts)  # without the rows that cannot move the weights
    # GLOBAL counts of each mini-batch: policy_loss scales each micro-batch's loss by them, so the
    # gradients summed over micro-batches and ranks are one process's on that whole mini-batch
    # (each mini-batch is normalised as a batch of its own, as verl's ppo_mini_batch_size).
    counts = distributed.all_reduce_sum([c for rows, kept in zip(parts, trained)
                                         for c in (len(rows), float(mask[rows].sum()), len(kept))])
    sizes = list(zip(counts[0::3], counts[1::3]))
    n_trained = sum(counts[2::3])
    weight = 1.0 / (n_trained * cfg.train.num_iterations)  # statistics: row-weighted means over the trained rows
    sums: dict[str, torch.Tensor] = {}  # on the device until the one read below
    grad_norms = []
    # the first pass's token-entropy sum and token count (device tensors once a mini-batch has added to them)
    entropy: list = [0.0, 0.0]
    with timed(timer, "update"):
        for it in range(cfg.train.num_iterations):
            for rows, (n_all, total_tokens) in zip(trained, sizes):
                if n_all == 0:  # empty on every rank (dynamic sampling kept fewer groups than mini-batches)
                    continue
                grad_norms.append(_mini_batch_step(cfg, state, batch, mask, rows, n_all, total_tokens,
                                                   sums, weight, step, run_dir, entropy if it == 0 else None))
    if batch.ref_logp is None:  # no KL in the loss: the statistic would be a constant 0, not a measurement
        sums.pop("kl", None)
    read = torch.stack([*sums.values(), *entropy]).tolist()  # the step's one read of the statistics
    *values, ent_sum, ent_tokens = distributed.all_reduce_sum(read)
    sums = dict(zip(sums, values))
    return {**sums, "entropy": ent_sum / max(ent_tokens, 1.0), "grad_norm": sum(grad_norms) / len(grad_norms),
            "lr": state.scheduler.get_last_lr()[0], "skipped_frac": 1.0 - n_trained / sum(counts[0::3])}


def _trained_rows(cfg, state: TrainState, batch: Batch, mask, parts: list[list[int]]) -> list[list[int]]:
    """Each mini-batch's rows less those whose gradient is exactly zero (skipping.py), under
    ``train.skip_zero_advantage`` where that is exact; else ``parts`` itself."""
    kl_in_loss = cfg.train.kl_in == "loss" and cfg.train.beta != 0
    if not (cfg.train.skip_zero_advantage and can_skip(cfg.train.loss_type, kl_in_loss, fsdp.is_sharded(state.policy))):
        return parts
    teaches = teaching_rows(batch.advantages, mask).tolist()  # one read for the whole batch
    # a part with nothing to teach keeps one row (gradient 0): every rank still has its statistics
    return [[r for r in rows if teaches[r]] or rows[:1] for rows in parts]


def _mini_batch_step(cfg, state: TrainState, batch: Batch, mask, part: list[int], n_all: float, total_tokens: float,
                     sums: dict, weight: float, step: int, run_dir: Path, entropy: list | None = None) -> float:
    """Gradient accumulation over the micro-batches of the rows ``part``, then one optimizer step;
    returns the gradient norm. ``entropy``: [token-entropy sum, tokens] to add this mini-batch's
    completion tokens to (from the logits of the same forward; None = skip)."""
    policy, opt = state.policy, state.optimizer
    opt.zero_grad(set_to_none=True)
    lengths, groups = [len(e.completion_ids) for e in batch.episodes], [e.group for e in batch.episodes]
    for chunk in micro_batches(part, lengths, groups, cfg.train.micro_batch_size, cfg.train.micro_batch_tokens):
        rows = as_index(chunk)
        k = cfg.train.dppo_topk
        top = None if not k else batch.old_topk[0][rows] if batch.old_topk is not None else k
        with autocast_for(cfg):
            out = token_logprobs(policy, batch.packed, rows, cfg.rollout.temperature, entropy=entropy is not None,
                                 layout=cfg.train.forward_layout, top=top)
        if top is not None:
            logp, ent, head = out
        else:
            logp, ent = out if entropy is not None else (out, None)
        if entropy is not None:
            m = mask[rows].to(ent.device, torch.float32)
            entropy[0] = entropy[0] + (ent.float() * m).sum()  # stays on the device: read once per step
            entropy[1] = entropy[1] + m.sum()
        old = batch.old_logp[rows] if batch.old_logp is not None else logp.detach()
        is_weights, tis_stats = None if batch.importance_weights is None else batch.importance_weights[rows], {}
        if batch.behaviour_logp is not None:  # pipelined: weights against this forward's (proximal) log-probs
            is_weights, tis_stats = tis_weights(old, batch.behaviour_logp[rows], mask[rows], cfg.rollout.tis_cap,
                                                cfg.rollout.is_correction, cfg.rollout.is_level)
            tis_stats.pop("tis/max_abs_delta")  # a mean over micro-batches of their maxima would mislead
        topk = None if top is None else _top_k(batch, rows, head)
        loss, stats = objective.loss(
            cfg, logp, old, None if batch.ref_logp is None else batch.ref_logp[rows], batch.advantages[rows],
            mask[rows], is_weights, num_tokens=total_tokens, num_rows=n_all, topk=topk)
        if not torch.isfinite(loss):
            _stop_non_finite(run_dir, step, "loss")
        loss.backward()
        for k, v in {**stats, **tis_stats}.items():  # row-weighted means of the micro-batch statistics (device tensors)
            sums[k] = sums.get(k, 0.0) + v * (len(chunk) * weight)
    params = [p for p in policy.parameters() if p.requires_grad]
    if not fsdp.is_sharded(policy):  # FSDP already reduce-scattered (summed) them in backward
        distributed.all_reduce_grads(params)
    norm = fsdp.clip_grad_norm(params, cfg.train.max_grad_norm or float("inf"))  # global over shards
    if not torch.isfinite(norm):
        _stop_non_finite(run_dir, step, "gradient norm")
    opt.step()
    opt.zero_grad(set_to_none=True)  # free the gradients now, not at the next update: not held through the rollout
    state.scheduler.step()
    return float(norm)


def _top_k(batch: Batch, rows, head: tuple[torch.Tensor, torch.Tensor]) -> TopK:
    """DPPO's top-K tokens of ``rows``: the old policy's (the batch's old forward) with this forward's
    log-probs of them, or, when the old policy is this forward's own (no old log-probs kept), its top-K twice."""
    ids, logp = head
    old = batch.old_topk[1][rows] if batch.old_topk is not None else logp
    p = batch.packed.prompt_width
    sampled = ids == batch.packed.input_ids[rows][:, p:p + ids.shape[1]].to(ids.device).unsqueeze(-1)
    return TopK(old, logp, sampled)


def _evaluates_here(state: TrainState, main_rank: bool) -> bool:
    """Rank 0 evaluates; with the HF engine on an FSDP-sharded policy every rank runs the same eval
    in lock-step (its forwards are collectives) and rank 0 writes."""
    return main_rank or state.engine.lockstep


def _periodic_eval(cfg: RunConfig, state: TrainState, evaluate: EvalFn, out_dir: Path | None,
                   step: int) -> dict[str, float]:
    """The caller's eval on the live policy and the trainer's engine (for `mathrl train`: the task's
    test split, sampled and greedy), under the trainer's autocast. Its summary's ``metrics`` (every
    accuracy it measured) are logged beside ``eval/accuracy``."""
    with autocast_for(cfg, state.engine):
        summary = evaluate(state.policy, state.tokenizer, state.engine, out_dir, step=step)
    state.policy.train()
    extra = summary.get("metrics", {})
    if distributed.is_main():
        shown = ", ".join(f"{k.removeprefix('eval/')} {v:.3f}" for k, v in extra.items()) or \
            f"accuracy {summary['accuracy']:.3f}"
        tqdm.write(f"eval at step {step} ({summary['n_problems']} {cfg.train.task} problems): {shown}")
    return {"eval/accuracy": summary["accuracy"], "eval/extraction_failure_rate": summary["extraction_failure_rate"],
            **extra}


def step_metrics(cfg, batch: Batch, update: dict, timer: dict) -> dict:
    eps = batch.episodes
    scores = torch.tensor([e.reward for e in eps])
    lengths = torch.tensor([len(e.completion_ids) for e in eps], dtype=torch.float32)
    metrics = {"reward/mean": float(scores.mean()), "reward/std": float(scores.std()) if len(eps) > 1 else 0.0}
    for name in {"correct": 0.0, **cfg.reward.weights}:
        metrics[f"reward/{name}"] = sum(e.rewards.get(name, 0.0) for e in eps) / len(eps)
    metrics.update({
        "zero_std_frac": batch.zero_std_frac, "completion_len/mean": float(lengths.mean()),
        "completion_len/max": float(lengths.max()),
        "truncated_frac": sum(e.finish_reason == "length" for e in eps) / len(eps),
        "groups": len({e.group for e in eps}), **update, **batch.mismatch,
        "tokens_per_s": timer.get("gen_tokens", 0) / max(timer.get("rollout", 1e-9), 1e-9),
    })
    metrics.update(tool_metrics(eps, cfg.reward.style))  # rollout.tools only
    metrics.update({f"time/{k}": v for k, v in timer.items() if k != "gen_tokens"})
    return metrics


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
