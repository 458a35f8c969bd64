"""One step's training batch: rollout -> scored episodes -> log-probs -> advantages.

``make_batch`` (= ``collect_groups`` + ``finish_batch``) is the first half of a GRPO step (the second is
``trainer.optimise``): ``collect_groups`` draws questions from the sampler and has ``rollout`` sample G completions
each and score them (with DAPO-style dynamic sampling, all-equal groups are dropped and more
questions drawn); the episodes are packed into tensors; the old-policy and reference log-probs
are computed once, without gradients; the rewards become group-relative advantages (outcome: one
per completion, process: one per token), and the engine's log-probs give truncated importance
weights (vLLM). Under torchrun each rank holds its own share of the questions (parallel/).

Device: every tensor of a ``Batch`` is on the policy's device. The packed episodes are built on
the host and moved there in one place, right after ``pack`` (``Packed.to``); everything else
(masks, log-probs, rewards, advantages, engine log-probs, importance weights) is built from them
or with their device. Python values (rewards, step rewards) stay on the host until then; the TIS
statistics are read back once per batch (``mismatch``). tests/test_device_hygiene.py checks it.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import torch

from pipeline.grpo import objective
from pipeline.grpo.advantages import process_advantages, reward_with_kl
from pipeline.grpo.components import TrainState, reference_mode
from pipeline.grpo.episodes import Episode, Packed, pack
from pipeline.grpo.logprobs import token_logprobs
from pipeline.micro_batches import as_index, micro_batches
from pipeline.grpo.precision import autocast_for
from pipeline.grpo.void_turns import has_void_turn
from pipeline.grpo.episode_rewards import add_step_rewards, reward_episodes
from pipeline.parallel import distributed
from pipeline.prompts import build_prompt
from pipeline.rollout.base import SamplingParams
from pipeline.rollout.tis import pad_logprobs, tis_weights


@dataclass
class Batch:
    episodes: list[Episode]
    packed: Packed
    advantages: torch.Tensor  # [N] or [N, T]
    old_logp: torch.Tensor | None  # [N, T], None when mu = 1 (then old = logp.detach())
    ref_logp: torch.Tensor | None  # [N, T], None when the KL is not in the loss
    importance_weights: torch.Tensor | None  # [N, T] truncated importance weights (vLLM), or None
    zero_std_frac: float
    mismatch: dict[str, float]
    # [N, T] the engine's log-probs, when the importance weights are taken in the update's own forward
    # (pipelined, one update per batch: that forward's log-probs are the proximal policy's; pipelined.py)
    behaviour_logp: torch.Tensor | None = None
    # [N, T] the loss mask (loss_mask): every statistic and term of the update takes it, built once per batch
    mask: torch.Tensor | None = None
    # ([N, T, K] ids, their old log-probs): the old policy's K most likely tokens per position, for DPPO's
    # top-K divergence (train.dppo_topk), taken in the old-log-prob forward; None when old is the update's own
    old_topk: tuple[torch.Tensor, torch.Tensor] | None = None


class timed:
    """Adds the seconds spent in the block to ``timer[key]`` (the run's ``time/<key>`` metrics)."""

    def __init__(self, timer: dict, key: str):
        self.timer, self.key = timer, key

    def __enter__(self):
        self.t0 = time.perf_counter()

    def __exit__(self, *exc):
        self.timer[self.key] = self.timer.get(self.key, 0.0) + time.perf_counter() - self.t0


def make_batch(cfg, state: TrainState, timer: dict) -> Batch:
    """Rollout + rewards (+ dynamic sampling), then log-probs and advantages."""
    episodes, zero_std_frac = collect_groups(cfg, state, timer)
    # The rollout phase is over: a sleep-mode vLLM engine frees its GPU memory for the log-prob
    # forwards and the update, once per step; the sync wakes its weights, the next generate its KV cache
    state.engine.sleep()
    return finish_batch(cfg, state, episodes, zero_std_frac, timer)


def finish_batch(cfg, state: TrainState, episodes: list[Episode], zero_std_frac: float, timer: dict) -> Batch:
    """Scored episodes -> the training batch: packed, old and reference log-probs, advantages and
    importance weights. Shared by the synchronous loop and the pipelined one (pipelined.py), which
    also keeps the old (proximal) log-probs for the loss: its ratio is taken against them."""
    # The one move to the policy's device; every other batch tensor is built on it (module notes).
    packed = pack(episodes, state.tokenizer.pad_token_id).to(policy_device(state.policy))
    mask = loss_mask(cfg, episodes, packed)
    reuse = cfg.train.updates_per_step > 1  # later optimizer steps see a policy that has moved
    # pipelined with one update per batch: the update's forward gives the proximal log-probs, no extra pass
    in_update = cfg.train.async_staleness > 0 and not reuse and cfg.train.kl_in == "loss"
    keep_old = reuse or cfg.train.async_staleness > 0 and not in_update
    need_old = keep_old or cfg.train.kl_in == "reward" or cfg.rollout.tis_cap > 0 and not in_update
    with timed(timer, "logprobs"), torch.no_grad():
        old, old_topk = None, None
        if need_old and keep_old and cfg.train.dppo_topk > 0:
            old, old_topk = all_logprobs(cfg, state.policy, packed, episodes, top=cfg.train.dppo_topk)
        elif need_old:
            old = all_logprobs(cfg, state.policy, packed, episodes)
        ref_logp = None
        if state.ref is not None:
            with reference_mode(state.policy, state.ref) as ref_model:
                ref_logp = all_logprobs(cfg, ref_model, packed, episodes)
    adv = _advantages(cfg, episodes, packed, mask, old, ref_logp, state.tokenizer, state.prm)
    weights, mismatch = _importance_weights(cfg, episodes, old, mask)
    behaviour = pad_logprobs([e.engine_logprobs for e in episodes], mask.shape[1], device=mask.device) \
        if in_update else None
    return Batch(episodes, packed, adv, old if keep_old else None,
                 ref_logp if cfg.train.kl_in == "loss" else None, weights, zero_std_frac, mismatch, behaviour, mask,
                 old_topk)


def policy_device(model) -> torch.device:
    """Where the policy's parameters are (a DTensor's device under FSDP)."""
    return next(model.parameters()).device


def _advantages(cfg, episodes, packed, mask, old, ref_logp, tokenizer, prm=None) -> torch.Tensor:
    """[N] outcome advantages or [N, T] process advantages (zero-padded to the batch width), on
    the packed batch's device."""
    device = packed.completion_mask.device
    scores = torch.tensor([e.reward for e in episodes], dtype=torch.float32, device=device)
    if cfg.train.kl_in == "reward" and ref_logp is not None:
        scores = reward_with_kl(scores, old, ref_logp, mask, cfg.train.beta)
    g = cfg.rollout.group_size
    if cfg.train.advantage == "process":
        add_step_rewards(episodes, cfg.reward, tokenizer, prm)
        adv = process_advantages([e.step_rewards for e in episodes], [e.step_ends for e in episodes],
                                 [len(e.completion_ids) for e in episodes], g, cfg.train.adv_eps, device=device)
        return torch.nn.functional.pad(adv, (0, packed.completion_mask.shape[1] - adv.shape[1])) * mask
    return objective.outcome_advantages(cfg, episodes, scores)  # train.adv_norm over every rank's rows


def collect_groups(cfg, state: TrainState, timer: dict) -> tuple[list[Episode], float]:
    """G completions for each of `questions_per_step` questions, scored. With dynamic
    sampling, all-equal-reward groups are dropped and more questions are sampled to refill."""
    sampler, engine = state.sampler, state.engine
    want = cfg.train.questions_per_step
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
            engine, "lockstep", False) else []
        groups = rollout(cfg, engine, state.tokenizer, mine, timer, first + offset, lockstep_pad=pad)
        sampler.observe(groups)  # pass-rate sampling learns from every rank's scores (sampling.py)
        groups = distributed.gather_list(groups) if spread else groups
        for group in groups:
            flat = is_flat(group)
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
    episodes = [e for group in kept for e in group]
    for gi, group in enumerate(kept):
        for e in group:
            e.group = gi
    return episodes, zero_groups / max(1, total_groups)


def is_flat(group: list[Episode]) -> bool:
    """All G rewards equal: the group's advantages are 0 and it teaches nothing (dynamic sampling drops it)."""
    return max(e.reward for e in group) == min(e.reward for e in group)


def rollout(cfg, engine, tok, problems: list[dict], timer, first_draw: int = 0,
            lockstep_pad: list[dict] = ()) -> list[list[Episode]]:
    """G scored episodes per problem. ``lockstep_pad``: extra problems generated and thrown away, so
    that every rank of a sharded policy makes the same generate calls (dynamic sampling's refill
    rounds give ranks shares that differ by one)."""
    with timed(timer, "rollout"), autocast_for(cfg, engine):
        samples = [s for prompts, params in generate_calls(cfg, tok, [*problems, *lockstep_pad], first_draw)
                   for s in engine.generate(prompts, cfg.rollout.group_size, params)]
    return scored_groups(cfg, problems, samples[:len(problems)], timer)


def generate_calls(cfg, tok, problems: list[dict], first_draw: int,
                   logprobs: bool = False) -> list[tuple[list[str], SamplingParams]]:
    """The (prompts, params) of each generate call for ``problems``, the first drawn ``first_draw``-th
    in the run: seeded calls of `block` questions, each seed from its first question's draw index, so
    the samples depend on (seed, step), not on other RNG use (evals) nor, with block 1, on the rank."""
    prompts = [build_prompt(p["question"], template=cfg.prompt.template, tokenizer=tok, chat=cfg.prompt.chat)
               for p in problems]
    params = SamplingParams(cfg.rollout.max_new_tokens, cfg.rollout.temperature, cfg.rollout.top_p,
                            cfg.rollout.top_k, logprobs=logprobs)
    block = cfg.rollout.seed_block or (1 if distributed.world_size() > 1 else max(1, len(prompts)))
    return [(prompts[i:i + block],
             dataclasses.replace(params, seed=distributed.sampling_seed(cfg.seed, first_draw + i)))
            for i in range(0, len(prompts), block)]


def scored_groups(cfg, problems: list[dict], samples, timer) -> list[list[Episode]]:
    """One group of scored episodes per problem from its samples (``samples[i]``: problem i's)."""
    groups = [[Episode(problem_id=p["id"], group=qi, sample=j, prompt=s.prompt, completion=s.completion,
                       prompt_ids=s.prompt_ids, completion_ids=s.completion_ids, finish_reason=s.finish_reason,
                       gold=p["answer"], engine_logprobs=s.logprobs, question=p["question"],
                       solution=p.get("solution") or "",
                       tool_spans=list(s.tool_spans), tool_stats=dict(s.tool_stats), turns=list(s.turns))
               for j, s in enumerate(group)]
              for qi, (p, group) in enumerate(zip(problems, samples))]
    with timed(timer, "reward"):
        reward_episodes([e for grp in groups for e in grp], cfg.reward)
    timer["gen_tokens"] = timer.get("gen_tokens", 0) + sum(len(e.completion_ids) for grp in groups for e in grp)
    return groups


def all_logprobs(cfg, model, packed: Packed, episodes: list[Episode], top: int = 0):
    """[N, T] log-probs of every packed completion under ``model``, in the update's micro-batches
    (pipeline/micro_batches.py: by row count or by token budget), in row order; with ``top`` K > 0, (those,
    ([N, T, K] ids of each position's K most likely tokens, their log-probs)) from the same forwards."""
    chunks = micro_batches(list(range(len(episodes))), [len(e.completion_ids) for e in episodes],
                           [e.group for e in episodes], cfg.train.micro_batch_size, cfg.train.micro_batch_tokens)
    n = packed.completion_mask.shape[0]
    out = torch.empty(packed.completion_mask.shape, dtype=torch.float32, device=packed.completion_mask.device)
    head_ids = head_logp = None
    with autocast_for(cfg):
        for chunk in chunks:
            rows = as_index(chunk)
            part = token_logprobs(model, packed, rows, cfg.rollout.temperature, layout=cfg.train.forward_layout,
                                  top=top or None)
            if not top:
                out[rows] = part.float()
                continue
            out[rows] = part[0].float()
            ids, logp = part[2]
            if head_ids is None:
                head_ids = torch.empty((n, *ids.shape[1:]), dtype=ids.dtype, device=ids.device)
                head_logp = torch.empty((n, *logp.shape[1:]), dtype=torch.float32, device=logp.device)
            head_ids[rows], head_logp[rows] = ids, logp.float()
    return (out, (head_ids, head_logp)) if top else out


def loss_mask(cfg, episodes: list[Episode], packed: Packed) -> torch.Tensor:
    """[N, T] the tokens the update learns from: the completion's, less the tool-output tokens of
    ``rollout.tools`` (``Episode.tool_spans``: the sandbox wrote them, not the policy), and less whole
    completions cut at max_new_tokens under ``train.mask_truncated`` or with a void turn under
    ``train.void_turn_filter`` (void_turns.py). The one mask of the batch
    (``Batch.mask``): the loss, the KL (in the loss or the reward), the entropy, the importance-weight
    statistics, the process advantages and the zero-advantage skipping all take it."""
    mask = packed.completion_mask.clone()
    for i, e in enumerate(episodes):
        if cfg.train.mask_truncated and e.finish_reason == "length" or \
                cfg.train.void_turn_filter and has_void_turn(e, cfg.reward.style):
            mask[i] = 0
        for start, end in e.tool_spans:
            mask[i, start:end] = 0
    return mask


def _importance_weights(cfg, episodes, old, mask) -> tuple[torch.Tensor | None, dict[str, float]]:
    """Truncated importance weights between the trainer's and the engine's log-probs (tis.py)."""
    if cfg.rollout.tis_cap <= 0 or old is None or any(e.engine_logprobs is None for e in episodes):
        return None, {}
    engine_logp = pad_logprobs([e.engine_logprobs for e in episodes], old.shape[1], device=old.device)
    weights, stats = tis_weights(old, engine_logp, mask, cfg.rollout.tis_cap, cfg.rollout.is_correction,
                                 cfg.rollout.is_level)
    return weights, dict(zip(stats, torch.stack(list(stats.values())).tolist()))  # one read for all
