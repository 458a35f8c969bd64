"""The memory planner (pipeline/plan) against what can be measured on CPU.

- Parameter counts from a config equal transformers' own model (built on the meta device) for the
  three shipped GPU models, a Llama with every bias and an explicit head_dim, and the tiny model;
  LoRA counts equal peft's trainable parameters.
- Training-state bytes are exact: the trainer's own policy, reference and AdamW after a real
  optimizer step hold exactly the bytes the planner predicts (float32 master, pure bf16, LoRA).
- Activation estimates are within a stated factor of a profiler measurement of the trainer's own
  log-prob pass with gradients (mixed precision, gradient checkpointing; one and several 8-row
  chunks; float32) and without (old / reference log-probs).
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from pipeline.config import load_run_config
from pipeline.grpo.components import build_optimizer, build_policy
from pipeline.grpo.episodes import Packed
from pipeline.grpo.logprobs import token_logprobs
from pipeline.plan import memory
from pipeline.plan.memory import GIB, ModelShape, RunShape, estimate
from pipeline.weights.broadcast import BUCKET_BYTES
from pipeline.stages.plan import main as plan_main
from pipeline.plan.report import run_shape
from pipeline.plan.shapes import load_config, shape_from_config

ACTIVATION_FACTOR = (0.75, 1.3)  # measured / estimated, the stated accuracy of the activation terms
GPU_CONFIGS = ["configs/gsm8k_qwen2.5_0.5b.yaml", "configs/math_qwen2.5_math_1.5b.yaml", "configs/deepseekmath_rl.yaml"]


def _meta_params(cfg) -> int:
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("hub_id", ["Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-Math-1.5B",
                                    "deepseek-ai/deepseek-math-7b-instruct"])
def test_param_count_of_shipped_snapshots_equals_transformers(hub_id):
    cfg, source = load_config(hub_id)
    assert source.startswith("pipeline/plan/models/")
    assert shape_from_config(cfg).params() == _meta_params(cfg)


def test_param_count_published_sizes():
    # the model cards' sizes: 0.49B, 1.54B (1.31B without embeddings), 6.9B
    sizes = {h: shape_from_config(load_config(h)[0]).params() for h in
             ["Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-Math-1.5B", "deepseek-ai/deepseek-math-7b-base"]}
    assert sizes == {"Qwen/Qwen2.5-0.5B-Instruct": 494_032_768, "Qwen/Qwen2.5-Math-1.5B": 1_543_714_304,
                     "deepseek-ai/deepseek-math-7b-base": 6_910_365_696}


def test_param_count_llama_with_biases_and_head_dim():
    from transformers import LlamaConfig

    cfg = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=24, attention_bias=True,
                      mlp_bias=True, tie_word_embeddings=False)
    assert shape_from_config(cfg).params() == _meta_params(cfg)


def test_unknown_model_is_one_line_error():
    with pytest.raises(ValueError, match="no config for 'nobody/none'.*Qwen/Qwen2.5-Math-1.5B"):
        load_config("nobody/none")


def _cfg(tiny_setup, *overrides):
    overrides_, _ = tiny_setup
    return load_run_config(None, [*overrides_, "device=cpu", *overrides])


def _one_adamw_step(cfg):
    """The trainer's policy, reference and optimizer after one real AdamW step."""
    policy, _, ref = build_policy(cfg, None)
    opt, _ = build_optimizer(cfg, policy)
    ids = torch.randint(0, 100, (2, 12))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.model.dtype != "float32"):
        loss = policy(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    return policy, ref, opt


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


@pytest.mark.parametrize("overrides", [
    ["model.dtype=bfloat16", "train.beta=0.04"],  # float32 master weights, float32 reference
    ["model.dtype=bfloat16", "train.beta=0.04", "train.master_dtype=model"],  # pure bf16
    ["model.dtype=float32", "train.beta=0.0"],
    ["model.dtype=bfloat16", "model.lora=true", "model.lora_r=4", "train.beta=0.04"],
    ["model.dtype=float32", "model.lora=true", "model.lora_r=8", "model.lora_target_modules=[q_proj,v_proj]"],
], ids=["master-fp32", "pure-bf16", "fp32-beta0", "lora-bf16", "lora-fp32-qv"])
def test_state_bytes_exact_after_a_real_adamw_step(tiny_setup, overrides):
    cfg = _cfg(tiny_setup, *overrides)
    policy, ref, opt = _one_adamw_step(cfg)
    shape = shape_from_config(load_config(cfg.model.name_or_path)[0])
    items = {i.name: i.bytes for i in memory.training_state(shape, run_shape(cfg))}
    trainable = [p for p in policy.parameters() if p.requires_grad]
    frozen = [p for p in policy.parameters() if not p.requires_grad]
    # AdamW's per-parameter moments; its `step` counters are CPU scalars, not GPU memory
    moments = [v for p in trainable for k, v in opt.state[p].items() if k in ("exp_avg", "exp_avg_sq")]
    if cfg.model.lora:
        assert _nbytes(frozen) == items["policy weights (frozen base)"]
        assert _nbytes(trainable) == items["LoRA adapter (float32)"]
        assert _nbytes(p.grad for p in trainable) == items["gradients (adapter, float32)"]
        assert _nbytes(moments) == items["AdamW moments (adapter)"]
        assert items["reference model"] == 0 and (ref is None or ref is policy)
        return
    weights = next(k for k in items if k.startswith("policy weights"))
    assert not frozen and _nbytes(trainable) == items[weights]
    assert _nbytes(p.grad for p in trainable) == items["gradients"]
    assert _nbytes(moments) == items["AdamW moments"]
    assert (_nbytes(ref.parameters()) if ref is not None else 0) == items["reference model"]


def _peak_bytes(fn) -> int:
    """Peak of PyTorch CPU allocations inside ``fn`` (profiler: allocations at their op's start,
    frees at its end), relative to the allocations live before it."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    points = sorted((e.time_range.start if e.self_cpu_memory_usage > 0 else e.time_range.end, e.self_cpu_memory_usage)
                    for e in prof.events() if e.self_cpu_memory_usage)
    current = best = 0
    for _, delta in points:
        current += delta
        best = max(best, current)
    return best


def _logprob_pass(mb, completion, *, vocab=8000, mixed=True, checkpointing=True, grad=True, entropy=None):
    """(measured peak, planner estimate) of token_logprobs (+ backward) on a random Qwen2 model; with
    gradients it also computes the entropy by default, as the trainer's first update pass does."""
    entropy = grad if entropy is None else entropy
    from transformers import Qwen2Config, Qwen2ForCausalLM

    prompt = 16
    cfg = Qwen2Config(vocab_size=vocab, hidden_size=128, intermediate_size=512, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                      max_position_embeddings=prompt + completion)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).float().train()
    if checkpointing:
        model.gradient_checkpointing_enable()
    ids = torch.randint(0, vocab, (mb, prompt + completion))
    packed = Packed(ids, torch.ones_like(ids), torch.arange(prompt + completion).expand(mb, -1).clone(),
                    torch.ones(mb, completion), prompt)

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mixed), torch.set_grad_enabled(grad):
            out = token_logprobs(model, packed, entropy=entropy)
            logp = out[0] if entropy else out
        if grad:
            (-logp.sum()).backward()

    step()  # gradients allocated before measuring, as after the first optimizer step
    measured = _peak_bytes(step)
    run = RunShape(model_bytes=2 if mixed else 4, master_bytes=4, micro_batch=mb, prompt_tokens=prompt,
                   completion_tokens=completion, gradient_checkpointing=checkpointing, old_logprobs=True,
                   entropy=entropy)
    plan = estimate(shape_from_config(cfg), run, 80 * GIB, context_bytes=0)
    phase = "update" if grad else "log-probs"
    state = sum(i.bytes for i in memory.training_state(shape_from_config(cfg), run))
    return measured, plan.phase_bytes(phase) - state


@pytest.mark.parametrize("kwargs", [
    dict(mb=4, completion=128),  # one 8-row chunk
    dict(mb=16, completion=64),  # two chunks
    dict(mb=8, completion=64, mixed=False),  # float32: the float32 "copy" is a view of the logits
    dict(mb=4, completion=96, checkpointing=False),
    dict(mb=16, completion=64, grad=False),  # old / reference log-probs
    dict(mb=16, completion=64, entropy=False),  # the later update passes of a step
], ids=["one-chunk", "two-chunks", "float32", "no-checkpointing", "no-grad", "no-entropy"])
def test_activation_estimate_within_stated_factor(kwargs):
    measured, estimated = _logprob_pass(**kwargs)
    low, high = ACTIVATION_FACTOR
    assert low <= measured / estimated <= high, (measured / 2 ** 20, estimated / 2 ** 20)


def test_entropy_temporaries_are_counted():
    """The first update pass's entropy raises the measured peak, and the planner counts it."""
    with_entropy, planned_with = _logprob_pass(4, 128, entropy=True)
    without, planned_without = _logprob_pass(4, 128, entropy=False)
    assert with_entropy > without and planned_with > planned_without
    assert planned_with - planned_without == memory.ENTROPY_CHUNK_BYTES * 4 * 128 * 8000


def test_adamw_foreach_step_is_one_trainable_copy():
    """AdamW's foreach step (the CUDA default) on a real model: its peak is the planner's item."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=2000, hidden_size=128, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01, foreach=True)
    for _ in range(2):
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        if opt.state:  # moments exist: measure the second step, as every step after the first
            measured = _peak_bytes(opt.step)
        else:
            opt.step()
    run = RunShape(model_bytes=4, master_bytes=4, micro_batch=1, prompt_tokens=1, completion_tokens=1)
    plan = estimate(shape_from_config(cfg), run, 80 * GIB, context_bytes=0)
    item = next(i for i in plan.items if i.name == "AdamW foreach temporaries")
    assert item.phases == ("step",) and 0.95 <= measured / item.bytes <= 1.05, (measured, item.bytes)
    grads = next(i for i in plan.items if i.name == "gradients")
    assert plan.phase_bytes("step") == sum(i.bytes for i in plan.items if "step" in i.phases)
    assert "step" in grads.phases and "update" in grads.phases


def test_vllm_allowance_outside_its_share():
    shape = _shape()
    graphs = estimate(shape, _run(engine="vllm"), 80 * GIB)
    eager = estimate(shape, _run(engine="vllm", vllm_cuda_graphs=False), 80 * GIB)
    hf = estimate(shape, _run(engine="hf"), 80 * GIB)
    allowance = {p.name: p for p in graphs.items}["vLLM outside its share (assumed)"]
    assert allowance.bytes == memory.VLLM_ALLOWANCE_BYTES["graphs"] and "rollout" in allowance.phases
    assert graphs.phase_bytes("update") - eager.phase_bytes("update") == GIB - GIB // 4
    assert not any("vLLM" in i.name for i in hf.items)


def test_logits_dominate_and_scale_with_vocab():
    small, _ = _logprob_pass(4, 64, vocab=4000)
    large, _ = _logprob_pass(4, 64, vocab=16000)
    assert large > 3 * small  # the vocabulary-sized logits are the bulk of the activation peak


def _shape(**kw):
    base = dict(vocab_size=1000, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                intermediate_size=128, tie_embeddings=True)
    return ModelShape(**{**base, **kw})


def _run(**kw):
    base = dict(model_bytes=2, master_bytes=4, micro_batch=4, prompt_tokens=32, completion_tokens=64)
    return RunShape(**{**base, **kw})


def test_fsdp_divides_only_the_sharded_state():
    shape = _shape()
    one = {i.name: i.bytes for i in estimate(shape, _run(reference=True), GIB).items}
    four = {i.name: i.bytes for i in estimate(shape, _run(reference=True, ranks=4, fsdp=True), GIB).items}
    for name in ["policy weights (float32 master)", "gradients", "AdamW moments", "reference model"]:
        assert four[name] == pytest.approx(one[name] / 4)
    assert four["autocast bf16 weight copies"] == one["autocast bf16 weight copies"]  # cached unsharded
    assert four["full model before sharding"] == shape.params() * 4 * 2  # policy + reference, float32
    assert "full model before sharding" not in one
    replicated = {i.name: i.bytes for i in estimate(shape, _run(reference=True, ranks=4), GIB).items}
    assert replicated["gradients"] == one["gradients"]  # torchrun without FSDP replicates


def test_reference_rules_and_dtypes():
    shape = _shape()
    p = shape.params()
    items = lambda **kw: {i.name: i.bytes for i in estimate(shape, _run(**kw), GIB).items}  # noqa: E731
    assert items(reference=False)["reference model"] == 0
    assert items(reference=True)["reference model"] == p * 4
    assert items(reference=True, master_bytes=2)["reference model"] == p * 2
    lora = items(reference=True, lora_rank=4)
    assert lora["reference model"] == 0 and lora["policy weights (frozen base)"] == p * 2
    assert lora["gradients (adapter, float32)"] == shape.lora_params(4, memory.LINEARS) * 4
    assert "autocast bf16 weight copies" not in items(master_bytes=2)  # pure bf16: nothing to cast


def test_vllm_share_and_sleep_mode_phases():
    shape = _shape()
    gpu = 10 * GIB
    awake = estimate(shape, _run(engine="vllm", gpu_memory_utilization=0.5), gpu)
    asleep = estimate(shape, _run(engine="vllm", gpu_memory_utilization=0.5, sleep_mode=True), gpu)
    share = 0.5 * gpu
    assert awake.vllm["share"] == share and awake.vllm["weights"] == shape.params() * 2
    assert awake.vllm["kv_cache"] == share - shape.params() * 2
    assert awake.phase_bytes("update") - asleep.phase_bytes("update") == share  # freed while training
    assert awake.phase_bytes("rollout") == asleep.phase_bytes("rollout")
    sync = lambda **kw: {i.name: i.bytes for i in estimate(shape, _run(**kw), gpu).items}.get(  # noqa: E731
        "weight sync bucket (streamed)")
    p, largest = shape.params(), shape.vocab_size * shape.hidden_size
    assert memory.SYNC_BUCKET_BYTES == BUCKET_BYTES and p * 2 < BUCKET_BYTES  # a small model: one bucket holds it
    assert sync(engine="vllm", ranks=2, fsdp=True) == largest * 4 + p * 2  # one gathered float32 tensor + the bucket
    assert sync(engine="vllm_server", ranks=2, fsdp=True) == largest * 4 + p * 2  # every rank gathers, streamed
    assert sync(engine="vllm") == p * 2 and sync(engine="vllm", master_bytes=2) is None  # cast only when mixed
    big = _shape(hidden_size=4096, vocab_size=102400, num_layers=30, intermediate_size=11008)
    streamed = {i.name: i.bytes for i in estimate(big, _run(engine="vllm", ranks=8, fsdp=True), 80 * GIB).items}
    assert streamed["weight sync bucket (streamed)"] == 102400 * 4096 * (4 + 2)  # the embedding: bigger than a bucket


def test_lora_targets_must_be_projections():
    with pytest.raises(ValueError, match="embed_tokens"):
        _shape().lora_params(4, ("q_proj", "embed_tokens"))


def test_lora_count_equals_peft(tiny_setup):
    cfg = _cfg(tiny_setup, "model.lora=true", "model.lora_r=4", "model.lora_target_modules=[q_proj,down_proj]")
    policy, _, _ = build_policy(cfg, None)
    shape = shape_from_config(load_config(cfg.model.name_or_path)[0])
    trainable = sum(p.numel() for p in policy.parameters() if p.requires_grad)
    assert trainable == shape.lora_params(4, ("q_proj", "down_proj"))


@pytest.mark.parametrize("config", GPU_CONFIGS)
def test_plan_prints_every_component_for_the_gpu_configs(config, capsys):
    cfg = load_run_config(config, [])
    code = plan_main(cfg, gpu_mem=141.0)
    out = capsys.readouterr().out
    for name in ["policy weights", "gradients", "AdamW moments", "reference model", "logits + float32 copies",
                 "layer activations", "vLLM engine", "phase peaks", "peak "]:
        assert name in out
    assert code == (1 if "does NOT fit" in out else 0)


def test_plan_says_when_it_does_not_fit(capsys):
    cfg = load_run_config("configs/deepseekmath_rl.yaml", [])
    assert plan_main(cfg, gpu_mem=80.0) == 1
    assert "does NOT fit" in capsys.readouterr().out
    sharded = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, fsdp=True))
    plan_main(sharded, gpu_mem=80.0, ranks=8)
    out = capsys.readouterr().out
    assert "/ 8 ranks" in out and "full model before sharding" in out


def test_copy_of_reference_is_what_the_planner_counts(tiny_setup):
    """The full-FT reference is a deepcopy of the float32 policy (components.build_policy)."""
    cfg = _cfg(tiny_setup, "model.dtype=bfloat16", "train.beta=0.04")
    policy, _, ref = build_policy(cfg, None)
    assert _nbytes(ref.parameters()) == _nbytes(copy.deepcopy(policy).parameters())


def test_docs_state_table_is_the_planners():
    """docs/fsdp.md's per-rank state table (full fine-tuning) is what memory.py computes."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "fsdp.md").read_text()
    rows = re.findall(r"^\| `(\w[\w.]*\.yaml)` \([^)]*\) "
                      r"\| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", doc, re.M)
    assert len(rows) == 3
    for name, *numbers in rows:
        cfg = load_run_config(f"configs/{name}", ["model.lora=false"])
        shape = shape_from_config(load_config(cfg.model.name_or_path)[0])
        state = [sum(i.bytes for i in memory.training_state(shape, dataclasses.replace(run_shape(cfg, n), fsdp=n > 1)))
                 for n in (1, 2, 4, 8)]
        expected = [round(b / GIB, 1) for b in state] + [round(shape.params() * 4 / GIB, 1)]
        assert [float(x) for x in numbers] == expected, name
