"""rollout.engine=vllm under torchrun on CPU (gloo): every rank runs its own tensor-parallel-1
vLLM engine inside torchrun's world and syncs it after each optimizer step. Two ranks must sample
the same completions, log the same metrics and end with the same weights as one process with the
same rollout.seed_block; a dead rank still ends the job with the PeerLost message."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from pipeline import faults
from pipeline.config import load_run_config
from pipeline.grpo import trainer
from pipeline.grpo.run_log import read_metrics
from pipeline.parallel import distributed
from tests import dist_runs
from tests.dist_runs import (assert_killed_rank_ends_the_job, assert_rows_close, assert_same_weights, completions,
                              free_port, torchrun)

pytestmark = pytest.mark.vllm

# 4 questions x G=4, micro-batches of 4 rows, seeded blocks of 2 questions: each rank's engine call
# and micro-batches hold the same rows as the single process's. tis_cap > 0 logs the engine/trainer
# log-prob gap (tis/*), which shows whether every rank's engine got the new weights.
SMALL = ["train.questions_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=12",
         "train.micro_batch_size=4", "train.lr=1e-3", "train.save_every=0", "train.log_samples=16",
         "reward.workers=1", "reward.weights={tests.helpers:digit_fraction: 1.0, format: 0.1}",
         "rollout.engine=vllm", "rollout.vllm_max_model_len=512", "rollout.tis_cap=2.0", "rollout.seed_block=2"]
# tis/* is float noise (~1e-7) that differs between runs; it is bounded separately below.
NOT_COMPARED = (*dist_runs.NOT_COMPARED, "tis/")


def _args(setup, name, *extra):
    overrides, _ = setup
    return [*overrides, *SMALL, f"name={name}", *extra]


def assert_same_run(two: Path, one: Path) -> None:
    """Same completions and metrics (float tolerance) at every step, and every engine in sync with
    the policy (tis/max_abs_delta is rank-averaged; an engine that missed a sync, or got a wrong
    LoRA merge, adds ~1e-2 or more)."""
    rows_one, rows_two = read_metrics(one), read_metrics(two)
    assert [r["step"] for r in rows_two] == [r["step"] for r in rows_one] == [1, 2]
    for step, (got, want) in enumerate(zip(rows_two, rows_one, strict=True), start=1):
        assert len(completions(two, step)) == 16
        assert completions(two, step) == completions(one, step)  # same samples, same order
        assert_rows_close(got, want, skip=NOT_COMPARED)
        for row in (got, want):
            assert row["tis/max_abs_delta"] < 1e-3, (step, row["tis/max_abs_delta"])
            assert row["grad_norm"] > 0


def test_two_vllm_ranks_match_one_process(tiny_setup):
    one = trainer.train(load_run_config(None, _args(tiny_setup, "vdp-one", "train.steps=2")))
    torchrun(_args(tiny_setup, "vdp-two", "train.steps=2"))
    two = one.parent / "vdp-two"
    assert_same_run(two, one)
    assert_same_weights(two / "final", one / "final", base=load_run_config(None, tiny_setup[0]).model.name_or_path)


def _engine_worker(rank, port, model_path, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", RANK=str(rank),
                      LOCAL_RANK=str(rank), OMP_NUM_THREADS="1")
    from pipeline.config.schema import RolloutConfig
    from pipeline.rollout.base import SamplingParams
    from pipeline.rollout.vllm_engine import VLLMEngine

    distributed.init(120)
    engine = VLLMEngine(model_path, RolloutConfig(vllm_max_model_len=512))
    from vllm.distributed import parallel_state
    sizes = (parallel_state.get_world_group().world_size, parallel_state.get_tp_group().world_size)
    greedy = SamplingParams(max_new_tokens=6, temperature=0.0)
    if rank == 0:  # e.g. periodic eval: rank 0 samples alone, rank 1 waits in the barrier
        engine.generate(["Question: 1 + 2 = ?"], 1, greedy)
    distributed.barrier()
    seeded = SamplingParams(max_new_tokens=6, seed=7)
    same = [s.completion_ids for s in engine.generate(["Question: 3 + 4 = ?"], 2, seeded)[0]]
    unseeded = [s.completion_ids for s in engine.generate(["Question: 3 + 4 = ?"], 2, SamplingParams(6))[0]]
    engine.close()
    alive = torch.distributed.is_initialized()
    total = distributed.all_reduce_sum([rank + 1])  # the trainer's group still works after close()
    out[rank] = (engine.external, sizes, same, unseeded, alive, total)
    distributed.barrier("final barrier")
    distributed.close()


def test_engine_joins_the_trainer_group_and_close_keeps_it(tiny_setup):
    """Each rank's engine sees torchrun's 2-rank world with tensor parallelism 1, samples on its
    own (no collective inside generate), and close() leaves the trainer's process group usable."""
    out = mp.Manager().dict()
    model_path = load_run_config(None, tiny_setup[0]).model.name_or_path
    mp.spawn(_engine_worker, args=(free_port(), model_path, out), nprocs=2, join=True)
    for rank in (0, 1):
        external, sizes, _, _, alive, total = out[rank]
        assert external and sizes == (2, 1)
        assert alive and total == [3.0]
    assert out[0][2] == out[1][2]  # a seeded request samples the same on any rank
    assert out[0][3] != out[1][3]  # unseeded: the engine seed differs per rank


def test_killed_vllm_rank_ends_the_job_with_a_message(tiny_setup):
    """Rank 1 is SIGKILLed after step 1; rank 0, with its vLLM engine still up, must stop by
    itself with exit code 1 and the PeerLost message."""
    args = _args(tiny_setup, "vdp-kill", "train.steps=3", "train.dist_timeout_s=300")
    assert_killed_rank_ends_the_job(args, Path(tiny_setup[1]) / "runs" / "vdp-kill", faults.CRASH_AFTER_STEP)
