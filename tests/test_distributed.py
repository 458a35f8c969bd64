"""Data-parallel GRPO on CPU with gloo: 2 ranks give the same metrics, completions and weights as
1 process on the same global batch; checkpoints resume on another world size; a dead rank ends
the job with a clear error instead of a hang."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from pipeline import faults
from pipeline.config import ConfigError, load_run_config
from pipeline.grpo import trainer
from pipeline.grpo.run_log import read_metrics
from pipeline.parallel import distributed
from tests.dist_runs import (assert_killed_rank_ends_the_job, assert_rows_close, assert_same_weights, completions,
                              free_port, start_bare_ranks, torchrun)

# 4 questions x G=4 and micro-batches of 4 rows: each rank's micro-batches hold the same rows as the
# single process's, so even per-micro-batch statistics (kl, clip fractions) must agree.
SMALL = ["train.questions_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=12",
         "train.micro_batch_size=4", "train.lr=1e-3", "train.save_every=1", "train.keep_checkpoints=3",
         "train.log_samples=16", "reward.workers=1", "reward.weights={tests.helpers:digit_fraction: 1.0, format: 0.1}"]


def _args(setup, name, *extra):
    overrides, _ = setup
    return [*overrides, *SMALL, f"name={name}", *extra]


def test_two_ranks_match_one_process_and_resume_on_one(tiny_setup):
    """The issue's equivalence check, plus resuming a 2-rank checkpoint with 1 process. Seeded
    blocks of 2 questions: rank 1's block must be seeded like the single process's second block."""
    one = trainer.train(load_run_config(None, _args(tiny_setup, "dp-one", "train.steps=3",
                                                    "rollout.seed_block=2")))
    assert all(r["grad_norm"] > 0 for r in read_metrics(one))  # every step really trained

    torchrun(_args(tiny_setup, "dp-two", "train.steps=2", "rollout.seed_block=2"))
    two = one.parent / "dp-two"
    rows_one, rows_two = read_metrics(one), read_metrics(two)
    assert [r["step"] for r in rows_two] == [1, 2]  # rank 0 alone writes: no duplicated lines
    for step in (1, 2):
        assert_rows_close(rows_two[step - 1], rows_one[step - 1])
        assert completions(two, step) == completions(one, step)  # same 16 samples, same order
    assert_same_weights(two / "final", one / "checkpoints" / "step_2",
                        base=load_run_config(None, tiny_setup[0]).model.name_or_path)

    # step_2 of the 2-rank run continues in one process exactly like the 1-process run's step 3
    resumed = trainer.train(load_run_config(None, _args(tiny_setup, "dp-two", "train.steps=3",
                                                        "rollout.seed_block=2")))
    assert_rows_close(read_metrics(resumed)[2], rows_one[2])
    assert_same_weights(resumed / "final", one / "final")


def test_killed_rank_ends_the_job_with_a_message(tiny_setup):
    args = _args(tiny_setup, "dp-kill", "train.steps=3", "train.dist_timeout_s=300")
    assert_killed_rank_ends_the_job(args, Path(tiny_setup[1]) / "runs" / "dp-kill", faults.CRASH_AFTER_STEP)


def test_shard_splits_evenly_and_rejects_remainders(monkeypatch):
    items = list(range(8))
    assert distributed.shard(items) == (items, 0)  # one process: everything
    monkeypatch.setattr(distributed, "world_size", lambda: 4)
    monkeypatch.setattr(distributed, "rank", lambda: 2)
    assert distributed.shard(items) == ([4, 5], 4)
    with pytest.raises(ValueError, match="not divisible by the 4 ranks"):
        distributed.shard(items[:6])
    shares = []
    for r in range(4):
        monkeypatch.setattr(distributed, "rank", lambda r=r: r)
        shares.append(distributed.shard(items[:6], even=False))
    assert shares == [([0], 0), ([1, 2], 1), ([3], 3), ([4, 5], 4)]  # refill rounds: uneven, contiguous


def test_config_rejects_batch_not_divisible_by_ranks(tiny_setup, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")  # what torchrun sets before the config loads
    with pytest.raises(ConfigError, match="divisible by the number of ranks"):
        load_run_config(None, _args(tiny_setup, "dp-bad", "train.questions_per_step=3"))
    with pytest.raises(ConfigError, match="seed_block=3 must divide"):
        load_run_config(None, _args(tiny_setup, "dp-bad", "rollout.seed_block=3"))
    assert load_run_config(None, _args(tiny_setup, "dp-ok", "rollout.seed_block=2")).rollout.seed_block == 2


def test_sampling_seed_is_stable_and_distinct():
    seeds = {distributed.sampling_seed(0, d) for d in range(1000)}
    assert len(seeds) == 1000 and all(0 <= s < 2 ** 56 for s in seeds)
    assert distributed.sampling_seed(3, 7) == distributed.sampling_seed(3, 7) != distributed.sampling_seed(7, 3)


def _grad_worker(rank, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", RANK=str(rank))
    distributed.init(60)
    results = []
    for bucket in (4, 1 << 24):  # several buckets, then one
        distributed.BUCKET_ELEMENTS = bucket
        params = [torch.nn.Parameter(torch.zeros(s)) for s in (3, (2, 5), 1, 7)]
        for i, p in enumerate(params):
            p.grad = torch.full_like(p, float(rank + 1) * (i + 1))
        params[2].grad = None if rank == 1 else params[2].grad  # unused on one rank: counts as zero
        distributed.all_reduce_grads(params)
        results.append([p.grad.clone() for p in params])
    total = distributed.all_reduce_sum([rank + 1, 0.5])
    out[rank] = (results, total, distributed.gather_cat(torch.tensor([rank])).tolist())
    distributed.close()


def test_gradient_all_reduce_sums_over_ranks():
    out = mp.Manager().dict()
    mp.spawn(_grad_worker, args=(free_port(), out), nprocs=2, join=True)
    for rank in (0, 1):
        results, total, gathered = out[rank]
        for grads in results:
            for i, g in enumerate(grads):
                want = 1.0 * (i + 1) + (0 if i == 2 else 2.0 * (i + 1))
                assert torch.equal(g, torch.full_like(g, want)), (rank, i)
        assert total == [3.0, 1.0] and gathered == [0, 1]


@pytest.mark.slow
def test_hung_rank_times_out_with_a_message(tiny_setup):
    """A peer that stops responding (SIGSTOP) without closing its sockets: rank 0 gives up after
    train.dist_timeout_s and exits 1 with the message, instead of waiting forever."""
    import signal

    args = _args(tiny_setup, "dp-hang", "train.steps=3", "train.dist_timeout_s=20")
    procs = start_bare_ranks(args)
    metrics = Path(tiny_setup[1]) / "runs" / "dp-hang" / "metrics.jsonl"
    try:
        deadline = time.monotonic() + 280
        while not (metrics.is_file() and metrics.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.2)
        procs[1].send_signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        out0, _ = procs[0].communicate(timeout=150)
        waited = time.monotonic() - stopped_at
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert procs[0].returncode == 1, out0[-3000:]
    assert "Another rank probably died or stopped responding" in out0
    assert waited < 120, waited


@pytest.mark.slow
@pytest.mark.parametrize("extra", [
    ["train.loss_type=dapo", "train.adv_scale=batch"],  # global token count, global batch std
    ["train.loss_type=dr_grpo", "train.kl_in=reward", "train.num_iterations=2"],
    ["train.advantage=process", "train.loss_type=bnpo"],
    ["train.mini_batches=2", "train.loss_type=dapo"],  # 2 optimizer steps per batch, counts per mini-batch
    ["train.adv_norm=per_reward", "train.adv_scale=batch", "train.surrogate=cispo"],  # components gathered
])
def test_two_ranks_match_one_process_variants(tiny_setup, extra):
    name = "dp-var-" + "-".join(e.split("=")[1] for e in extra)
    one = trainer.train(load_run_config(None, _args(tiny_setup, name + "-one", "train.steps=2",
                                                    "rollout.seed_block=2", *extra)))
    torchrun(_args(tiny_setup, name + "-two", "train.steps=2", "rollout.seed_block=2", *extra))
    two = one.parent / (name + "-two")
    for got, want in zip(read_metrics(two), read_metrics(one), strict=True):
        assert_rows_close(got, want)
    assert_same_weights(two / "final", one / "final")


@pytest.mark.slow
def test_two_ranks_match_one_process_with_lora(tiny_setup):
    """LoRA: the reference is the adapter-disabled policy on every rank; only the adapter trains."""
    from safetensors.torch import load_file

    lora = ["train.steps=2", "rollout.seed_block=2", "model.lora=true", "model.lora_r=4",
            "model.lora_target_modules=q_proj,v_proj"]
    one = trainer.train(load_run_config(None, _args(tiny_setup, "dp-lora-one", *lora)))
    torchrun(_args(tiny_setup, "dp-lora-two", *lora))
    two = one.parent / "dp-lora-two"
    for got, want in zip(read_metrics(two), read_metrics(one), strict=True):
        assert_rows_close(got, want)
    a, b = (load_file(d / "final" / "adapter_model.safetensors") for d in (one, two))
    assert a.keys() == b.keys() and any(float(v.abs().sum()) > 0 for k, v in a.items() if "lora_B" in k)
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_two_ranks_match_one_process_with_dynamic_sampling(tiny_setup):
    """Refill rounds draw an uneven number of questions; every rank sees every group and keeps
    an equal share of the informative ones."""
    dyn = ["train.steps=2", "rollout.seed_block=1", "train.dynamic_sampling=true", "train.max_resample_rounds=3"]
    one = trainer.train(load_run_config(None, _args(tiny_setup, "dp-dyn-one", *dyn)))
    rows_one = read_metrics(one)
    # precondition (deterministic): groups were dropped and refilled, and the rounds did not run out
    assert all(r["zero_std_frac"] > 0 and r["groups"] == 4 for r in rows_one)
    torchrun(_args(tiny_setup, "dp-dyn-two", *dyn))
    two = one.parent / "dp-dyn-two"
    for got, want in zip(read_metrics(two), rows_one, strict=True):
        assert_rows_close(got, want)
    assert_same_weights(two / "final", one / "final")
