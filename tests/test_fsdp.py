"""FSDP2 GRPO on CPU with gloo (`train.fsdp=true` under torchrun): 2 sharded ranks sample the same
completions, log the same metrics and end with the same weights as 1 unsharded process; their
checkpoints (full weights + full optimizer state) resume in 1 process and vice versa; settings
the sharded path cannot run are refused by name."""

from __future__ import annotations

import json

import pytest
import torch

from evals.evaluate import periodic_eval
from pipeline.config import load_run_config
from pipeline.grpo import trainer
from pipeline.grpo.run_log import read_metrics
from pipeline.parallel import fsdp
from tests.dist_runs import assert_rows_close, assert_same_weights, completions, flat_weights, free_port, torchrun
from tests.test_distributed import _args

# The reference model (train.beta defaults to 0.04) is a full copy here, so it is sharded too.
SEEDED = "rollout.seed_block=2"


def _torchrun(args, nproc=2, timeout=400) -> str:
    """Launch `mathrl train` under torchrun; its output, after checking the sharding really happened."""
    out = torchrun(args, nproc, timeout)
    assert f"sharded over {nproc} ranks" in out, out[-3000:]
    return out


def test_fsdp_two_ranks_match_one_process_and_resume_on_one(tiny_setup):
    one = trainer.train(load_run_config(None, _args(tiny_setup, "fsdp-one", "train.steps=3", SEEDED)))
    rows_one = read_metrics(one)
    assert all(r["grad_norm"] > 0 and r["kl"] >= 0 for r in rows_one)

    out = _torchrun(_args(tiny_setup, "fsdp-two", "train.steps=2", SEEDED, "train.fsdp=true"))
    assert "policy and reference sharded" in out
    two = one.parent / "fsdp-two"
    rows_two = read_metrics(two)
    assert [r["step"] for r in rows_two] == [1, 2]
    for step in (1, 2):
        assert_rows_close(rows_two[step - 1], rows_one[step - 1])  # incl. grad_norm: global over shards
        assert completions(two, step) == completions(one, step)
    # final/ is a plain HF model dir with full (gathered) weights equal to the unsharded run's
    assert json.loads((two / "final" / "config.json").read_text())["architectures"] == ["Qwen2ForCausalLM"]
    assert_same_weights(two / "final", one / "checkpoints" / "step_2",
                        base=load_run_config(None, tiny_setup[0]).model.name_or_path)
    # the checkpoint's optimizer state is full and in the plain layout (integer ids, whole tensors)
    opt_two = torch.load(two / "checkpoints" / "step_2" / "trainer_state.pt", weights_only=False)["optimizer"]
    opt_one = torch.load(one / "checkpoints" / "step_2" / "trainer_state.pt", weights_only=False)["optimizer"]
    assert sorted(opt_two["state"]) == sorted(opt_one["state"])
    for i, s in opt_one["state"].items():
        torch.testing.assert_close(opt_two["state"][i]["exp_avg_sq"], s["exp_avg_sq"], rtol=1e-3, atol=1e-9)

    # one process resumes the sharded run's step_2 (train.fsdp=true is a no-op there) like step 3 of `one`
    resumed = trainer.train(load_run_config(None, _args(tiny_setup, "fsdp-two", "train.steps=3", SEEDED,
                                                        "train.fsdp=true")))
    assert_rows_close(read_metrics(resumed)[2], rows_one[2])
    assert_same_weights(resumed / "final", one / "final")


@pytest.mark.slow
def test_fsdp_resumes_an_unsharded_checkpoint_with_reference_resets_and_mu_2(tiny_setup):
    """The other direction: a 1-process checkpoint continues under 2 sharded ranks. mu = 2 (two
    optimizer steps per batch, old log-probs), dapo (global token counts), a reference reset
    every step (the sharded reference loads the sharded policy, and checkpoints carry it),
    gradient checkpointing inside the sharded layers, and the periodic eval (run by every rank)."""
    extra = (SEEDED, "train.num_iterations=2", "train.loss_type=dapo", "train.ref_reset_every=1", "train.beta=0.1",
             "train.eval_every=3", "train.eval_limit=6", "eval.max_new_tokens=16")
    cfg = load_run_config(None, _args(tiny_setup, "fsdp-mu-one", "train.steps=3", *extra))
    one = trainer.train(cfg, evaluate=periodic_eval(cfg))
    cfg = load_run_config(None, _args(tiny_setup, "fsdp-mu-two", "train.steps=1", *extra))
    trainer.train(cfg, evaluate=periodic_eval(cfg))
    # gradient checkpointing on the sharded side only: it must not change the numbers
    _torchrun(_args(tiny_setup, "fsdp-mu-two", "train.steps=3", "train.fsdp=true", "model.gradient_checkpointing=true",
                    *extra))
    two = one.parent / "fsdp-mu-two"
    rows_one, rows_two = read_metrics(one), read_metrics(two)
    for step in (2, 3):
        assert_rows_close(rows_two[step - 1], rows_one[step - 1])
        assert completions(two, step) == completions(one, step)
    assert "eval/accuracy" in rows_two[2]  # the periodic eval ran on both ranks in lock-step (rank 0 logs)
    assert (two / "eval" / "step_3").is_dir()
    assert_same_weights(two / "final", one / "final")
    ref_dir = two / "checkpoints" / "step_3" / "reference"
    assert_same_weights(ref_dir, one / "checkpoints" / "step_3" / "reference")


@pytest.mark.slow
def test_fsdp_with_lora_matches_one_process(tiny_setup):
    """LoRA under FSDP: frozen base and adapter weights are sharded alike; the reference is the
    same sharded module with the adapter disabled; checkpoints hold the full adapter, and the
    sharded run's checkpoint continues in one process like the 1-process run."""
    from peft import PeftModel

    from pipeline.models import load_policy

    extra = (SEEDED, "model.lora=true", "model.lora_r=4", "train.lr=1e-2")
    one = trainer.train(load_run_config(None, _args(tiny_setup, "fsdp-lora-one", "train.steps=3", *extra)))
    _torchrun(_args(tiny_setup, "fsdp-lora-two", "train.steps=2", "train.fsdp=true", *extra))
    two = one.parent / "fsdp-lora-two"
    for step in (1, 2):
        assert_rows_close(read_metrics(two)[step - 1], read_metrics(one)[step - 1])
        assert completions(two, step) == completions(one, step)

    def adapter(path):
        base, _ = load_policy(load_run_config(None, tiny_setup[0]).model.name_or_path)
        model = PeftModel.from_pretrained(base, str(path))
        return torch.cat([p.flatten() for n, p in model.named_parameters() if "lora_" in n])

    got, want = adapter(two / "final"), adapter(one / "checkpoints" / "step_2")
    assert want.abs().sum() > 0
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    resumed = trainer.train(load_run_config(None, _args(tiny_setup, "fsdp-lora-two", "train.steps=3", *extra)))
    assert_rows_close(read_metrics(resumed)[2], read_metrics(one)[2])
    torch.testing.assert_close(adapter(resumed / "final"), adapter(one / "final"), rtol=1e-4, atol=1e-5)


def _two_rank_worker(rank: int, port: int, model_dir: str, out) -> None:
    """Gathers (rank 0 / every rank) and synced generation with ranks finishing at different times."""
    import os

    from pipeline.models import load_policy
    from pipeline.rollout.base import SamplingParams
    from pipeline.rollout.hf_engine import HFEngine

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    torch.distributed.init_process_group("gloo")
    model, tok = load_policy(model_dir)
    # Many stop tokens: sequences end early and at different steps, so one rank's generate loop
    # finishes before the other's and must keep stepping (synced_gpus) for the sharded forwards.
    model.generation_config.eos_token_id = list(range(3, len(tok), 3))
    prompts = [["Tom has 3 apples.", "What is 7 + 5?"], ["A train leaves at 9.", "Sum 12 and 30."]][rank]
    params = SamplingParams(max_new_tokens=24, temperature=1.0, seed=rank)
    want_samples = HFEngine(model, tok, batch_size=3).generate(prompts, 4, params)  # unsharded, 3 chunks
    want = {k: v.clone() for k, v in model.state_dict().items()}
    total = sum(p.numel() for p in model.parameters())
    sharded = fsdp.wrap(model)
    local = sum(p.to_local().numel() for p in sharded.parameters())
    everywhere, rank0 = fsdp.full_model_state(sharded, everywhere=True), fsdp.full_model_state(sharded)
    got_samples = HFEngine(sharded, tok, batch_size=3, lockstep=True).generate(prompts, 4, params)
    resharded = sum(p.to_local().numel() for p in sharded.parameters()) == local  # DTensors again
    flat = [s for group in got_samples for s in group]
    out[rank] = {"local": local, "total": total,
                 "everywhere": set(everywhere) == set(want) and all(torch.equal(everywhere[k], v)
                                                                    for k, v in want.items()),
                 "rank0": all(torch.equal(rank0[k], v) for k, v in want.items()) if rank == 0 else rank0 == {},
                 "same_samples": [[s.completion_ids for s in g] for g in got_samples]
                 == [[s.completion_ids for s in g] for g in want_samples],
                 "resharded": resharded, "lengths": [len(s.completion_ids) for s in flat],
                 "reasons": {s.finish_reason for s in flat}}
    torch.distributed.destroy_process_group()


def _spawn_two_ranks(worker, tiny_setup) -> dict:
    """Run ``worker(rank, port, model_dir, out)`` in 2 spawned processes; ``out`` maps rank -> result."""
    import torch.multiprocessing as mp

    model_dir = load_run_config(None, tiny_setup[0]).model.name_or_path
    out = mp.Manager().dict()
    mp.start_processes(worker, args=(free_port(), model_dir, out), nprocs=2, start_method="spawn", join=True)
    return out


def test_gathers_and_synced_generation_on_two_sharded_ranks(tiny_setup):
    out = _spawn_two_ranks(_two_rank_worker, tiny_setup)
    for rank in (0, 1):
        r = out[rank]
        assert r["local"] < 0.6 * r["total"]  # really sharded: about half of every parameter on each rank
        assert r["everywhere"] and r["rank0"], rank
        assert r["same_samples"], rank  # synced generation on the sharded model == plain generation
        assert r["resharded"], rank  # the weights gathered for generation were freed afterwards
        assert "stop" in r["reasons"], rank
    # a generate loop runs as long as its chunk's longest sequence (3 per chunk): in some chunk one
    # rank's loop ended first and had to keep stepping for the other's
    loops = [[max(out[r]["lengths"][i:i + 3]) for i in range(0, 8, 3)] for r in (0, 1)]
    assert loops[0] != loops[1], loops


def _lora_model(model_dir: str):
    """The tiny model with a LoRA adapter (scaling 3/4 != 1), A and B drawn from a fixed seed (the
    same on every rank; B not zero, so the merge matters)."""
    from peft import LoraConfig, get_peft_model

    from pipeline.models import load_policy

    model, _ = load_policy(model_dir)
    lora = LoraConfig(r=4, lora_alpha=3, target_modules=["q_proj", "v_proj", "down_proj"], task_type="CAUSAL_LM")
    model = get_peft_model(model, lora)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)
    return model


def _lora_merge_worker(rank: int, port: int, model_dir: str, out) -> None:
    """LoRA merged from the weights gathered off a sharded model vs peft's merge of the whole one."""
    import copy
    import os

    from pipeline.weights.export import hf_specs, hf_weights

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    torch.distributed.init_process_group("gloo")
    model = _lora_model(model_dir)
    want = copy.deepcopy(model).merge_and_unload().state_dict()
    unsharded = dict(hf_weights(model))  # the plain path (module deltas), for comparison
    fsdp.wrap(model)
    streamed = dict(hf_weights(model))  # what every sync sends: each tensor gathered (and merged) as it comes
    specs = [(n, tuple(s)) for n, _, s in hf_specs(model)]
    everywhere = dict(hf_weights(model, fsdp.full_model_state(model, everywhere=True)))
    rank0 = fsdp.full_model_state(model)  # the server client's gather
    on_rank0 = dict(hf_weights(model, rank0)) if rank == 0 else None
    shapes = {n: tuple(t.shape) for n, t in hf_weights(model, fsdp.meta_state(model))}  # server arch check

    def same(got):
        return set(got) == set(want) and all(torch.allclose(got[k], v, rtol=1e-6, atol=1e-7) for k, v in want.items())

    base = {k.removeprefix("base_model.model."): v for k, v in model.state_dict().items() if "base_layer" not in k}
    merged_names = [k for k in want if k.endswith(("q_proj.weight", "v_proj.weight", "down_proj.weight"))]
    out[rank] = {"everywhere": same(everywhere), "unsharded": same(unsharded), "streamed": same(streamed),
                 "specs": specs == [(k, tuple(v.shape)) for k, v in streamed.items()],
                 "rank0": same(on_rank0) if rank == 0 else rank0 == {},
                 "shapes": shapes == {k: tuple(v.shape) for k, v in want.items()},
                 "merged": len(merged_names), "unmerged_kept": all(k in base for k in want if k not in merged_names),
                 "sharded": any(hasattr(p, "to_local") for p in model.parameters())}
    torch.distributed.destroy_process_group()


def test_lora_merged_from_gathered_weights_equals_peft_merge(tiny_setup):
    """Under FSDP the vLLM syncs merge LoRA from gathered tensors (the module's own A and B are
    shards): streamed one tensor at a time on every rank (what every sync does now), and from a
    whole gathered state on every rank or on rank 0, the result equals peft's merge_and_unload of
    the unsharded model, and so does the plain path on the unsharded model."""
    out = _spawn_two_ranks(_lora_merge_worker, tiny_setup)
    for rank in (0, 1):
        r = out[rank]
        assert r["sharded"] and r["merged"] > 0, r
        assert r["everywhere"] and r["unsharded"] and r["rank0"] and r["shapes"], (rank, r)
        assert r["streamed"] and r["specs"], (rank, r)


def test_gathered_lora_merge_refuses_layers_it_cannot_merge(tiny_setup):
    """Embedding LoRA layers and DoRA have merges other than W + scaling * B A: refused by name."""
    from peft import LoraConfig, get_peft_model

    from pipeline.models import load_policy
    from pipeline.weights.export import hf_weights

    model_dir = load_run_config(None, tiny_setup[0]).model.name_or_path
    for kwargs, why in ((dict(target_modules=["embed_tokens"]), "Embedding LoRA layer"),
                        (dict(target_modules=["q_proj"], use_dora=True), "DoRA")):
        model = get_peft_model(load_policy(model_dir)[0], LoraConfig(r=2, task_type="CAUSAL_LM", **kwargs))
        with pytest.raises(NotImplementedError, match=why):
            list(hf_weights(model, model.state_dict()))


def test_fsdp_is_a_no_op_alone(tiny_setup, capsys):
    overrides, _ = tiny_setup
    cfg = load_run_config(None, [*overrides, "train.fsdp=true"])
    policy, ref = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    assert not fsdp.enabled(cfg) and fsdp.shard(cfg, policy, ref) == (policy, ref)
    assert "nothing to shard" in capsys.readouterr().out


def test_fsdp_dynamic_sampling_keeps_ranks_in_lock_step(tiny_setup):
    """Refill rounds give the ranks shares that differ by one question; the HF engine generates with
    the sharded policy (every forward a collective), so the smaller share is padded with thrown-away
    prompts. Without that the ranks hang; with it the run equals one process's."""
    dyn = ["train.steps=2", "rollout.seed_block=1", "train.dynamic_sampling=true", "train.max_resample_rounds=3"]
    one = trainer.train(load_run_config(None, _args(tiny_setup, "fsdp-dyn-one", *dyn)))
    rows_one = read_metrics(one)
    # precondition (deterministic): groups were dropped and refilled, and the rounds did not run out
    assert all(r["zero_std_frac"] > 0 and r["groups"] == 4 for r in rows_one)
    _torchrun(_args(tiny_setup, "fsdp-dyn-two", *dyn, "train.fsdp=true"), timeout=300)
    two = one.parent / "fsdp-dyn-two"
    for step, (got, want) in enumerate(zip(read_metrics(two), rows_one, strict=True), start=1):
        assert_rows_close(got, want)
        assert completions(two, step) == completions(one, step)
    assert_same_weights(two / "final", one / "final")


@pytest.mark.slow
def test_fsdp_mixed_precision_matches_one_process(tiny_setup):
    """model.dtype=bfloat16 with float32 master weights (precision.py): the shards hold float32,
    the forwards run under bf16 autocast on every rank exactly as in one process."""
    mixed = ["train.steps=2", SEEDED, "model.dtype=bfloat16", "train.lr=1e-4"]
    one = trainer.train(load_run_config(None, _args(tiny_setup, "fsdp-mp-one", *mixed)))
    _torchrun(_args(tiny_setup, "fsdp-mp-two", *mixed, "train.fsdp=true"))
    two = one.parent / "fsdp-mp-two"
    for step, (got, want) in enumerate(zip(read_metrics(two), read_metrics(one), strict=True), start=1):
        assert_rows_close(got, want)
        assert completions(two, step) == completions(one, step)
    # bf16 matmuls make the summed gradients differ at rounding level between the two layouts; where
    # a gradient nearly cancels, AdamW's normalised step (about +-lr) can flip sign. So: almost every
    # weight equal, and none further apart than two flipped steps of lr per step.
    diff = (flat_weights(two / "final") - flat_weights(one / "final")).abs()
    assert (diff <= 1e-5).float().mean() > 0.99 and diff.max() <= 2 * 2 * 1e-4
