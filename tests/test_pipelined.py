"""The pipelined GRPO loop (pipeline/grpo/pipelined.py, docs/pipelined.md): staleness 0 is the
synchronous loop bit for bit; staleness k trains on batches made by weights exactly min(k, t - 1)
steps old, with the ratio against the proximal policy and the behaviour weights on; the in-flight
batches survive a resume; a dead or hung worker process ends the run with one line, no hang."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch

from pipeline.config import ConfigError, load_run_config
from pipeline.grpo import trainer
from pipeline.grpo.run_log import read_metrics
from pipeline.models import load_policy
from pipeline.rollout.base import EngineError, RolloutEngine, SamplingParams
from pipeline.rollout.hf_engine import HFEngine

FAST = ["train.questions_per_step=3", "rollout.group_size=4", "rollout.max_new_tokens=10",
        "train.micro_batch_size=6", "train.lr=1e-3", "train.save_every=0", "rollout.tis_cap=2",
        "reward.weights={tests.helpers:digit_fraction: 1.0, tests.helpers:char_count: 0.1}"]


def cfg_of(setup, name, *extra):
    overrides, _ = setup
    return load_run_config(None, [*overrides, *FAST, f"name={name}", *extra])


def flat(path):
    model, _ = load_policy(str(path))
    return torch.cat([p.flatten() for p in model.state_dict().values()])


def comparable(rows):
    return [{k: v for k, v in r.items() if not k.startswith("time/") and k != "tokens_per_s"} for r in rows]


class VersionedHF(HFEngine):
    """The HF engine on the trainer's own module (submit generates at once), recording for each
    generate call the version it was told and a checksum of the weights it really sampled with, and
    for each push the checksum of the weights pushed."""

    def __init__(self, model, tok, **kw):
        super().__init__(model, tok, **kw)
        self.generated: list[tuple[int, float]] = []
        self.pushed: dict[int, float] = {}

    def generate(self, prompts, n, params):
        self.generated.append((self.policy_version, _checksum(self.model)))
        return super().generate(prompts, n, params)

    def push(self, model, version):
        super().push(model, version)
        self.pushed[version] = _checksum(model)


def _checksum(model) -> float:
    return float(sum(p.detach().double().sum() for p in model.parameters()))


def test_staleness_zero_is_the_synchronous_loop_bit_for_bit(tiny_setup):
    plain = trainer.train(cfg_of(tiny_setup, "sync_plain", "train.steps=2"))
    zero = trainer.train(cfg_of(tiny_setup, "sync_zero", "train.steps=2", "train.async_staleness=0"))
    assert comparable(read_metrics(plain)) == comparable(read_metrics(zero))
    assert torch.equal(flat(plain / "final"), flat(zero / "final"))


def test_staleness_one_trains_on_batches_from_weights_one_step_old(tiny_setup, monkeypatch):
    engines = []

    def build(cfg, model, tok, **kw):
        engines.append(VersionedHF(model, tok, batch_size=cfg.rollout.batch_size))
        return engines[-1]

    monkeypatch.setattr(trainer, "build_engine", build)
    cfg = cfg_of(tiny_setup, "stale1", "train.steps=4", "train.async_staleness=1")
    run_dir = trainer.train(cfg)
    rows = read_metrics(run_dir)
    assert [r["staleness"] for r in rows] == [0.0, 1.0, 1.0, 1.0]
    engine = engines[0]
    # batch t is generated with the weights of step max(0, t - 2): versions 0, 0, 1, 2
    assert [v for v, _ in engine.generated] == [0, 0, 1, 2]
    for version, checksum in engine.generated:  # and those really were the weights pushed as that version
        assert checksum == engine.pushed[version]
    assert len(set(engine.pushed.values())) == 5  # the start weights and four updates, all different
    assert all(r["grad_norm"] > 0 and "tis/mean_weight" in r for r in rows)
    assert not torch.equal(flat(cfg.model.name_or_path), flat(run_dir / "final"))


def test_a_stale_batch_is_corrected_and_clipped(tiny_setup):
    """Two mini-batches on a stale batch: the second's ratio against the proximal policy leaves the
    clip range (clipping is active), and the behaviour weights differ from 1 (the correction is on)."""
    cfg = cfg_of(tiny_setup, "stale_clip", "train.steps=3", "train.async_staleness=1", "train.lr=5e-2",
                 "train.questions_per_step=4", "train.mini_batches=2", "train.micro_batch_size=8")
    rows = read_metrics(trainer.train(cfg))
    stale = [r for r in rows if r["staleness"] == 1.0]
    assert stale and max(r["clip_frac"] for r in stale) > 0
    assert all(r["tis/mean_abs_delta"] > 1e-4 for r in stale)  # behaviour != proximal on a stale batch


def test_hf_process_engine_matches_in_process_generation(tiny_setup):
    """The worker process samples what the in-process HF engine samples from the same weights, and
    returns the behaviour log-probs the trainer would compute."""
    from pipeline.grpo.batch import generate_calls
    from pipeline.rollout.process_engine import ProcessEngine

    cfg = cfg_of(tiny_setup, "proc")
    model, tok = load_policy(cfg.model.name_or_path)
    problems = [{"question": "What is 2 + 3?"}, {"question": "What is 7 - 4?"}]
    (prompts, params), = generate_calls(cfg, tok, problems, 0, logprobs=True)
    here = HFEngine(model, tok).generate(prompts, 3, params)
    engine = ProcessEngine(model, tok, threads=1, timeout_s=120)
    try:
        there = engine.submit(prompts, 3, params)
        with torch.no_grad():
            model.lm_head.weight.mul_(0.0)  # the trainer moves on; the worker has its own copy
        assert [[s.completion_ids for s in g] for g in there.result()] == [[s.completion_ids for s in g] for g in here]
        assert there.version == 0
        for g_here, g_there in zip(here, there.result()):
            for a, b in zip(g_here, g_there):
                assert len(b.logprobs) == len(b.completion_ids)
                assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)
        engine.push(model, 1)  # the zeroed head: every token equally likely
        after = engine.submit(prompts, 1, params)
        assert after.result() and after.version == 1
        vocab = model.config.vocab_size
        assert all(abs(lp + torch.log(torch.tensor(float(vocab)))) < 1e-4 for g in after.result() for s in g
                   for lp in s.logprobs)
    finally:
        engine.close()


# Half the groups flat (even gold: reward 0), so that dynamic sampling has groups to replace
ODD_GOLD = "reward.weights={tests.helpers:digit_fraction_odd_gold: 1.0}"


@pytest.mark.parametrize("extra", [[], [ODD_GOLD, "train.dynamic_sampling=true", "train.sampling=pass_rate"]],
                         ids=["uniform", "dynamic-pass_rate"])
def test_resume_mid_pipeline_neither_replays_nor_skips(tiny_setup, extra):
    overrides, _ = tiny_setup
    common = [*overrides, *FAST, "train.steps=4", "train.async_staleness=1", "rollout.engine=hf_process",
              "rollout.worker_threads=1", "train.save_every=2", *extra]
    tag = "dyn" if extra else "plain"
    straight = trainer.train(load_run_config(None, [*common, f"name=pipe_straight_{tag}"]))
    env = {**os.environ, "MATHRL_CRASH_AFTER_STEP": "2"}
    proc = subprocess.run([sys.executable, "-m", "pipeline", "train", *common, f"name=pipe_killed_{tag}"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == -9, proc.stderr[-2000:]
    killed = straight.parent / f"pipe_killed_{tag}"
    saved = torch.load(killed / "checkpoints" / "step_2" / "trainer_state.pt", weights_only=False)
    assert [r["step"] for r in saved["in_flight"]] == [3] and saved["in_flight"][0]["version"] == 1
    trainer.train(load_run_config(None, [*common, f"name=pipe_killed_{tag}"]))
    assert comparable(read_metrics(killed)) == comparable(read_metrics(straight))
    assert torch.equal(flat(killed / "final"), flat(straight / "final"))
    seen = [line for line in (killed / "samples.jsonl").read_text().splitlines()]
    assert len(seen) == len((straight / "samples.jsonl").read_text().splitlines())


def test_dynamic_sampling_refills_flat_groups_in_the_pipelined_loop(tiny_setup):
    """Groups of even-gold problems are flat: the pipelined loop replaces them with groups of newly
    drawn questions, so every trained row teaches, at the cost of more questions drawn."""
    args = ["train.steps=3", "train.async_staleness=1", "train.beta=0", "train.skip_zero_advantage=true", ODD_GOLD]
    plain = read_metrics(trainer.train(cfg_of(tiny_setup, "pipe_nodyn", *args)))
    dyn = read_metrics(trainer.train(cfg_of(tiny_setup, "pipe_dyn", *args, "train.dynamic_sampling=true")))
    assert max(r["skipped_frac"] for r in plain) > 0 and all(r["skipped_frac"] == 0 for r in dyn)
    assert all(r["zero_std_frac"] > 0 for r in dyn)  # flat groups were seen, and dropped
    assert [r["sampling/drawn"] for r in plain] == [6, 9, 9]  # one batch ahead, none past the last step
    assert dyn[-1]["sampling/drawn"] > 9
    assert [r["staleness"] for r in dyn] == [0.0, 1.0, 1.0]


def test_pass_rate_sampling_observes_every_pipelined_batch(tiny_setup):
    """The pipelined loop tells the sampler each batch's pass rates (it used to skip that, so
    pass_rate drew exactly like uniform there): 3 steps x 3 questions, all recorded."""
    run_dir = trainer.train(cfg_of(tiny_setup, "pipe_passrate", "train.steps=3", "train.async_staleness=1",
                                   "train.sampling=pass_rate"))
    saved = torch.load(run_dir / "checkpoints" / "step_3" / "trainer_state.pt", weights_only=False)
    assert len(saved["sampler"]["seen"]) == 9


@pytest.mark.parametrize("fault,expect", [("crash:2", "exited with code 23"),
                                          ("hang:2", "gave no batch within rollout.worker_timeout_s=20")])
def test_a_dead_or_hung_worker_ends_the_run_with_one_line(tiny_setup, fault, expect):
    overrides, _ = tiny_setup
    args = [*overrides, *FAST, f"name=fault_{fault[:4]}", "train.steps=3", "train.async_staleness=1",
            "rollout.engine=hf_process", "rollout.worker_threads=1", "rollout.worker_timeout_s=20"]
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pipeline", "train", *args],
                          env={**os.environ, "MATHRL_WORKER_FAULT": fault}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("mathrl train: the hf_process rollout worker") and expect in last, proc.stdout[-1000:]
    assert "Traceback" not in proc.stdout + proc.stderr
    assert time.monotonic() - t0 < 240


def test_a_batch_older_than_the_cap_stops_with_one_line(tiny_setup):
    """A run at staleness 2 killed after its step-2 checkpoint, resumed at staleness 1: the in-flight
    batch for step 3 was made by the step-0 weights, two steps old, so the run stops with a message
    instead of training on it (and without a traceback)."""
    overrides, _ = tiny_setup
    base = [*overrides, *FAST, "name=cap", "train.save_every=2", "train.steps=5"]
    first = subprocess.run([sys.executable, "-m", "pipeline", "train", *base, "train.async_staleness=2"],
                           env={**os.environ, "MATHRL_CRASH_AFTER_STEP": "2"}, capture_output=True, text=True,
                           timeout=300)
    assert first.returncode == -9, first.stderr[-2000:]
    proc = subprocess.run([sys.executable, "-m", "pipeline", "train", *base, "train.async_staleness=1"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("mathrl train: the batch for step 3 was generated with the weights of step 0"), last


@pytest.mark.parametrize("extra,message", [
    (["train.async_staleness=1", "rollout.tis_cap=0"], "set rollout.tis_cap > 0"),
    (["train.async_staleness=-1"], "train.async_staleness must be >= 0"),
    (["rollout.engine=hf_process", "model.lora=true"], "hf_process pushes the full model"),
    (["rollout.worker_timeout_s=0"], "rollout.worker_timeout_s > 0"),
])
def test_bad_combinations_are_one_line_config_errors(tiny_setup, extra, message):
    with pytest.raises(ConfigError, match=message):
        cfg_of(tiny_setup, "bad", *extra)


def test_pipelined_dynamic_sampling_under_torchrun_is_a_config_error(tiny_setup, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="dynamic sampling's batches in one process only"):
        cfg_of(tiny_setup, "bad", "train.questions_per_step=4", "train.async_staleness=1",
               "train.dynamic_sampling=true")


def test_the_base_submit_is_a_done_pending_with_the_pushed_version():
    class Fixed(RolloutEngine):
        def generate(self, prompts, n, params):
            return [["x"] * n for _ in prompts]

        def sync_weights(self, model):
            self.synced = model

    engine = Fixed()
    engine.push("weights", 7)
    pending = engine.submit(["a", "b"], 2, SamplingParams())
    assert pending.done() and pending.version == 7 and pending.result() == [["x", "x"], ["x", "x"]]
    assert engine.synced == "weights"
    with pytest.raises(EngineError.__mro__[1]):  # EngineError is a RuntimeError: the stage's one-line catch
        raise EngineError("x")


def test_two_ranks_each_pipeline_their_share_like_one_process(tiny_setup):
    """Under torchrun each rank submits its own share of every batch to its own worker process and
    pushes to it after each update: 2 ranks give the same completions, metrics and weights as one
    pipelined process on the same global batch (seeded blocks of 2 questions, so rank 1's block is
    seeded like the single process's second block)."""
    from tests.dist_runs import assert_rows_close, assert_same_weights, completions, torchrun

    overrides, _ = tiny_setup
    common = [*overrides, "train.questions_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=10",
              "train.micro_batch_size=4", "train.lr=1e-3", "train.save_every=0", "rollout.tis_cap=2",
              "reward.weights={tests.helpers:digit_fraction: 1.0}", "rollout.seed_block=2", "train.steps=3",
              "train.async_staleness=1", "rollout.engine=hf_process", "rollout.worker_threads=1"]
    one = trainer.train(load_run_config(None, [*common, "name=pipe_one"]))
    torchrun([*common, "name=pipe_two"])
    two = one.parent / "pipe_two"
    rows_one, rows_two = read_metrics(one), read_metrics(two)
    assert [r["staleness"] for r in rows_two] == [0, 1, 1]  # steps 2 and 3 trained on batches one step old
    assert all(r["grad_norm"] > 0 for r in rows_one)
    for got, want in zip(rows_two, rows_one, strict=True):
        assert_rows_close(got, want)
    for step in (1, 2, 3):
        assert completions(two, step) == completions(one, step)
    assert_same_weights(two / "final", one / "final", base=load_run_config(None, overrides).model.name_or_path)
