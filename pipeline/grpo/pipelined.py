"""Where each step's batch comes from: the synchronous loop, or the pipelined one (docs/pipelined.md).

The trainer asks a batch source for step t's batch (``take``), updates on it, then tells the source
(``updated``); the source decides when completions are generated and with which weights.

- ``SyncBatches`` (``train.async_staleness=0``): today's loop, exactly: generate with the current
  weights, update, sync the engine. Nothing else changes, so a run's metrics and weights are the same
  bit for bit as before this module existed.
- ``PipelinedBatches`` (k = ``train.async_staleness`` >= 1): batch t + k is submitted to the engine
  (``RolloutEngine.submit``) before the trainer updates on batch t, so a worker-process engine
  (``rollout.engine=hf_process``) generates while the trainer trains. After each update the new
  weights are pushed (``engine.push(policy, t)``); the engine applies a push between batches, never
  inside one. Batch t is then generated with the weights of optimizer step max(0, t - 1 - k): it is
  at most k steps old (its ``staleness`` is logged). A batch older than k stops the run (``StaleBatch``).

Batch t is scored before batches t + 1 .. t + k are submitted, so that what it taught is known when
they are drawn: ``train.sampling=pass_rate`` observes it first, and with ``train.dynamic_sampling``
(DAPO) its all-equal groups are dropped and refilled here, in up to ``train.max_resample_rounds`` rounds
of fresh questions generated at once with the weights last pushed (fresher than the batch's own),
while the trainer waits: a refill costs its generation time, uncovered. (One process only: the
synchronous loop's refill under torchrun keeps every rank's share equal, this one does not.)

Off-policy correction (decoupled PPO, Fu et al. 2025, "AReaL", arXiv:2505.24298): the
ratio is taken against the proximal policy, the trainer's own log-probs of the batch just before
the update (``finish_batch`` keeps them as ``old_logp``), and clipped as usual; each token is weighted
by pi_prox / pi_behaviour, with the behaviour log-probs the engine sampled with, truncated at
``rollout.tis_cap`` (tis.py). Clipping so stays a trust region around a policy the trainer really
had, while the weight corrects for the batch having come from an older one; at staleness 4 AReaL
found naive PPO (ratio against the behaviour policy) far worse.

Checkpoints record the in-flight batches (their questions, the engine's samples and the version
that made them): a resumed run trains on exactly those, then goes on drawing after them, so resume
neither replays nor skips a question, and, the engine's queue being served in order, the run
continues as if it had never stopped.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from pipeline.grpo.batch import Batch, finish_batch, generate_calls, is_flat, make_batch, scored_groups, timed
from pipeline.grpo.components import TrainState
from pipeline.grpo.precision import autocast_for
from pipeline.parallel import distributed
from pipeline.rollout.base import Pending


class StaleBatch(RuntimeError):
    """A batch older than ``train.async_staleness`` steps reached the trainer (one-line message)."""


def batch_source(cfg, state: TrainState, start: int, in_flight: list[dict] | None):
    """The batch source for ``cfg``; ``start``: the step the run continues after; ``in_flight``: the
    checkpoint's in-flight batches (None or [] when there are none)."""
    if cfg.train.async_staleness == 0:
        if in_flight:
            raise StaleBatch(f"the checkpoint holds {len(in_flight)} batch(es) generated ahead by a pipelined run: "
                             "resume it with train.async_staleness >= 1 so that their questions are not skipped")
        return SyncBatches(cfg, state)
    return PipelinedBatches(cfg, state, start, in_flight or [])


class SyncBatches:
    """Generate with the current weights, update, sync: the synchronous GRPO loop."""

    def __init__(self, cfg, state: TrainState):
        self.cfg, self.state = cfg, state

    def take(self, step: int, timer: dict) -> Batch:
        return make_batch(self.cfg, self.state, timer)

    def updated(self, step: int) -> None:
        self.state.engine.sync_weights(self.state.policy)

    def in_flight(self) -> list[dict] | None:
        return None


@dataclass
class InFlight:
    """A submitted batch: its step, this rank's questions, their first draw index, the engine calls."""

    step: int
    problems: list[dict]
    pendings: list[Pending] = field(default_factory=list)


class PipelinedBatches:
    """Keeps up to k batches ahead of the trainer in the engine (module notes)."""

    def __init__(self, cfg, state: TrainState, start: int, saved: list[dict]):
        self.cfg, self.state, self.k = cfg, state, cfg.train.async_staleness
        self.timeout = cfg.rollout.worker_timeout_s
        self.queue: deque[InFlight] = deque(
            InFlight(r["step"], r["problems"], [Pending(r["samples"], r["version"], r.get("seconds", 0.0))])
            for r in saved)
        self.next_step = saved[-1]["step"] + 1 if saved else start + 1
        state.engine.push(state.policy, start)  # the engine now samples from step `start`'s weights

    def take(self, step: int, timer: dict) -> Batch:
        while self.next_step <= step:  # the first step of a run (later ones were submitted ahead)
            self._submit(self.next_step)
        item = self.queue.popleft()
        assert item.step == step, f"in-flight batch for step {item.step} taken at step {step}"
        groups, version = self._scored(item.problems, item.pendings, timer)
        staleness = step - 1 - version
        if not 0 <= staleness <= self.k:
            raise StaleBatch(f"the batch for step {step} was generated with the weights of step {version}, "
                             f"{staleness} steps old, outside train.async_staleness={self.k}; resume with the "
                             "async_staleness that wrote the checkpoint")
        flat, total = sum(map(is_flat, groups)), len(groups)
        if self.cfg.train.dynamic_sampling:
            groups, flat, total = self._refill(groups, flat, timer)
        while self.next_step <= min(step + self.k, self.cfg.train.steps):
            self._submit(self.next_step)
        batch = finish_batch(self.cfg, self.state, [e for g in groups for e in g], flat / max(1, total), timer)
        batch.mismatch["staleness"] = float(staleness)
        return batch

    def _scored(self, problems: list[dict], pendings: list[Pending], timer: dict) -> tuple[list[list], int]:
        """The scored groups of submitted generations (waiting for them) and the oldest version that made
        them; the sampler observes them."""
        with timed(timer, "rollout_wait"):  # the time the trainer stood idle waiting for the engine
            samples = [s for p in pendings for s in p.result(self.timeout)]
        timer["rollout"] = timer.get("rollout", 0.0) + sum(p.seconds for p in pendings)  # the engine's own time
        groups = scored_groups(self.cfg, problems, samples[:len(problems)], timer)
        self.state.sampler.observe(groups)
        return groups, min(p.version for p in pendings)

    def _refill(self, groups: list[list], flat: int, timer: dict) -> tuple[list[list], int, int]:
        """Dynamic sampling: (the groups kept, numbered in order, flat groups seen, groups seen), from the
        batch's ``groups`` of which ``flat`` are flat. Flat groups are replaced by groups of newly drawn
        questions, generated now, in up to max_resample_rounds rounds; when every round was flat the
        last round is trained on (advantage 0), as in batch.collect_groups."""
        cfg, state = self.cfg, self.state
        want, total = len(groups), len(groups)
        kept = [g for g in groups if not is_flat(g)]
        for _ in range(cfg.train.max_resample_rounds):
            if len(kept) >= want:
                break
            first = state.sampler.drawn
            problems = state.sampler.take(want - len(kept))
            calls = generate_calls(cfg, state.tokenizer, problems, first, logprobs=True)
            with autocast_for(cfg, state.engine):
                pendings = [state.engine.submit(prompts, cfg.rollout.group_size, params) for prompts, params in calls]
            groups, _ = self._scored(problems, pendings, timer)
            flat, total = flat + sum(map(is_flat, groups)), total + len(groups)
            kept += [g for g in groups if not is_flat(g)]
        kept = kept or groups
        for gi, g in enumerate(kept):
            for e in g:
                e.group = gi
        return kept, flat, total

    def updated(self, step: int) -> None:
        self.state.engine.push(self.state.policy, step)

    def in_flight(self) -> list[dict]:
        """The batches submitted ahead, finished and recorded for the checkpoint (waits for them)."""
        return [{"step": item.step, "problems": item.problems,
                 "samples": [s for p in item.pendings for s in p.result(self.timeout)],
                 "version": min(p.version for p in item.pendings),
                 "seconds": sum(p.seconds for p in item.pendings)} for item in self.queue]

    def _submit(self, step: int) -> None:
        """Draw step ``step``'s questions and submit this rank's share to the engine."""
        cfg, state = self.cfg, self.state
        first = state.sampler.drawn  # every rank draws the global list and keeps its own shard
        mine, offset = distributed.shard(state.sampler.take(cfg.train.questions_per_step), even=True)
        calls = generate_calls(cfg, state.tokenizer, mine, first + offset, logprobs=True)
        with autocast_for(cfg, state.engine):  # an engine that runs the policy in this process (hf)
            pendings = [state.engine.submit(prompts, cfg.rollout.group_size, params) for prompts, params in calls]
        self.queue.append(InFlight(step, mine, pendings))
        self.next_step = step + 1
