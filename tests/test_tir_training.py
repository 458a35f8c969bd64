"""Training on tool-integrated completions: the tool-output tokens (``Episode.tool_spans``) are out of
the loss, the KL, the entropy, the importance-weight statistics and the process advantages, through
the batch's one mask (pipeline/grpo/batch.py: loss_mask, ``Batch.mask``); and the step's tool
statistics reach samples.jsonl and metrics.jsonl."""

from __future__ import annotations

import copy
import itertools
from typing import get_args

import pytest
import torch

from pipeline.config import ConfigError, load_run_config
from pipeline.config.schema import ImportanceLevel, LossType, Surrogate
from pipeline.grpo import objective
from pipeline.grpo.batch import finish_batch, loss_mask
from pipeline.grpo.components import TrainState, build_policy
from pipeline.grpo.episodes import Episode, pack
from pipeline.grpo.tool_stats import tool_metrics
from pipeline.grpo.void_turns import has_void_turn, void_turn
from pipeline.grpo.trainer import optimise, step_metrics
from pipeline.rollout.tis import tis_weights
from tests.test_trainer import run_cfg

SPAN = (3, 6)  # the tool-output tokens of every test completion


def _episodes(g: int = 4, groups: int = 2, seed: int = 0) -> list[Episode]:
    gen = torch.Generator().manual_seed(seed)
    eps = []
    for q in range(groups):
        prompt = torch.randint(5, 100, (5,), generator=gen).tolist()
        for j in range(g):
            n = int(torch.randint(8, 12, (1,), generator=gen))
            ids = torch.randint(5, 100, (n,), generator=gen).tolist()
            eps.append(Episode(problem_id=str(q), group=q, sample=j, prompt="", completion="", prompt_ids=prompt,
                               completion_ids=ids, finish_reason="stop", gold="0", reward=float(j % 2 + 0.1 * q),
                               engine_logprobs=(-torch.rand(n, generator=gen)).tolist(), tool_spans=[SPAN],
                               tool_stats={"calls": 1, "errors": j % 2, "timeouts": 0, "sandbox_s": 0.01}))
    return eps


def test_loss_mask_drops_tool_spans_and_keeps_the_rest():
    cfg = load_run_config(None, [])
    eps = _episodes()
    eps[1].tool_spans = [(0, 2), (5, 7)]
    eps[2].finish_reason = "length"
    packed = pack(eps, 0)
    mask = loss_mask(cfg, eps, packed)
    for i, e in enumerate(eps):
        tools = {t for a, b in e.tool_spans for t in range(a, b)}
        assert mask[i].tolist() == [float(t < len(e.completion_ids) and t not in tools)
                                    for t in range(mask.shape[1])]
    cut = loss_mask(load_run_config(None, ["train.mask_truncated=true"]), eps, packed)
    assert cut[2].sum() == 0 and torch.equal(cut[0], mask[0])


def _objectives():
    """Every (loss type, surrogate, importance level) the config accepts, with the KL in the loss."""
    out = []
    for lt, sur, lvl in itertools.product(get_args(LossType), get_args(Surrogate), get_args(ImportanceLevel)):
        try:
            out.append(load_run_config(None, [f"train.loss_type={lt}", f"train.surrogate={sur}",
                                              f"train.importance_level={lvl}", "train.beta=0.04"]))
        except ConfigError:  # a combination the config refuses (vespo/dppo at sequence level)
            continue
    return out


OBJECTIVES = _objectives()


def test_every_registered_objective_is_covered():
    assert len(OBJECTIVES) == len(get_args(LossType)) * (len(get_args(Surrogate)) * 2 - 2)


@pytest.mark.parametrize("process", [False, True])
@pytest.mark.parametrize("cfg", OBJECTIVES, ids=lambda c: f"{c.train.loss_type}-{c.train.surrogate}-"
                                                          f"{c.train.importance_level}")
def test_loss_and_gradient_ignore_tool_positions(cfg, process):
    """Whatever the log-probs, old/reference log-probs, importance weights and (process) advantages
    at tool positions, the loss, its statistics and the gradient at policy positions are the same,
    and the gradient at tool positions is zero."""
    eps = _episodes()
    packed = pack(eps, 0)
    mask = loss_mask(cfg, eps, packed)
    tool = packed.completion_mask.bool() & ~mask.bool()
    assert int(tool.sum()) == len(eps) * (SPAN[1] - SPAN[0])
    gen = torch.Generator().manual_seed(3)
    shape = mask.shape
    base = {"logp": -torch.rand(shape, generator=gen) - 0.1, "old": -torch.rand(shape, generator=gen) - 0.1,
            "ref": -torch.rand(shape, generator=gen) - 0.1, "w": torch.rand(shape, generator=gen) + 0.5,
            "adv": torch.randn(shape if process else shape[:1], generator=gen)}

    def run(values):
        logp = values["logp"].clone().requires_grad_()
        loss, stats = objective.loss(cfg, logp, values["old"], values["ref"], values["adv"], mask, values["w"],
                                     num_tokens=float(mask.sum()), num_rows=float(len(eps)))
        loss.backward()
        return loss.detach(), {k: float(v) for k, v in stats.items()}, logp.grad

    changed = {k: torch.where(tool, -5 * torch.rand(shape, generator=gen) - 3, v) if v.shape == shape else v
               for k, v in base.items()}
    changed["w"] = torch.where(tool, 40.0, base["w"])
    loss_a, stats_a, grad_a = run(base)
    loss_b, stats_b, grad_b = run(changed)
    assert torch.allclose(loss_a, loss_b, atol=1e-6) and stats_a == pytest.approx(stats_b, abs=1e-6)
    assert torch.allclose(grad_a, grad_b, atol=1e-7)
    assert bool((grad_a[tool] == 0).all()) and bool((grad_a[mask.bool()] != 0).any())
    # the check can fail: the same change at a policy position moves the gradient
    moved = dict(base, logp=base["logp"].clone())
    moved["logp"][0, 0] -= 2.0
    assert not torch.allclose(run(moved)[2], grad_a, atol=1e-7)


def test_process_advantages_are_zero_at_tool_tokens(monkeypatch):
    """Step rewards whose steps end inside a tool span still credit the policy tokens before them; the
    tool tokens themselves get no advantage (and the same values as without the mask elsewhere)."""
    from pipeline.grpo import batch as batch_module

    cfg = load_run_config(None, ["train.advantage=process", "rollout.group_size=4"])
    eps = _episodes()
    for k, e in enumerate(eps):
        e.step_ends, e.step_rewards = [4, len(e.completion_ids) - 1], [0.5 * (k % 3) - 0.5, float(k % 2)]
    monkeypatch.setattr(batch_module, "add_step_rewards", lambda *a, **k: None)  # the steps are set above
    packed = pack(eps, 0)
    mask = loss_mask(cfg, eps, packed)
    adv = batch_module._advantages(cfg, eps, packed, mask, None, None, None)
    full = batch_module._advantages(cfg, eps, packed, packed.completion_mask, None, None, None)
    tool = packed.completion_mask.bool() & ~mask.bool()
    assert bool((adv[tool] == 0).all()) and bool((full[tool] != 0).any())
    assert torch.equal(adv[mask.bool()], full[mask.bool()])


def test_tis_statistics_ignore_tool_positions():
    eps = _episodes()
    packed = pack(eps, 0)
    mask = loss_mask(load_run_config(None, []), eps, packed)
    tool = packed.completion_mask.bool() & ~mask.bool()
    trainer_logp = -torch.rand(mask.shape, generator=torch.Generator().manual_seed(1))
    engine = -torch.rand(mask.shape, generator=torch.Generator().manual_seed(2))
    for level in ("token", "sequence"):
        w_a, s_a = tis_weights(trainer_logp, engine, mask, 2.0, "tis", level)
        w_b, s_b = tis_weights(trainer_logp, torch.where(tool, -30.0, engine), mask, 2.0, "tis", level)
        assert {k: float(v) for k, v in s_a.items()} == {k: float(v) for k, v in s_b.items()}
        assert torch.equal(w_a[mask.bool()], w_b[mask.bool()])


def _state(cfg):
    torch.manual_seed(0)
    policy, tok, ref = build_policy(cfg, None)
    opt = torch.optim.SGD([p for p in policy.parameters() if p.requires_grad], lr=cfg.train.lr)
    return TrainState(policy, ref, tok, None, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0), None)


def _perturb_tool_logits(model, scale: float, columns: range):
    """A forward hook on the LM head adding a term that depends on the head's own weights to the logits
    at the tool columns: if any masked term used them, the gradient would change with ``scale``."""
    noise = torch.randn(model.config.vocab_size, generator=torch.Generator().manual_seed(7))

    def hook(module, args, out):
        extra = torch.zeros_like(out)
        kept = out.shape[1]  # the padded layout keeps the completion columns + 1, column t predicts token t
        cols = [c for c in columns if c < kept - 1]
        extra[:, cols, :] = scale * (noise + module.weight.sum() * 1e-2)
        return out + extra

    return model.lm_head.register_forward_hook(hook)


@pytest.mark.parametrize("extra", [
    ["train.loss_type=grpo", "train.surrogate=clip", "train.num_iterations=2", "rollout.tis_cap=2.0"],
    ["train.loss_type=dapo", "train.surrogate=cispo", "train.importance_level=sequence"],
    ["train.loss_type=dr_grpo", "train.surrogate=sapo", "train.kl_in=reward"],
    ["train.loss_type=bnpo", "train.surrogate=vespo", "rollout.tis_cap=2.0", "rollout.is_correction=mis"],
    ["train.loss_type=grpo", "train.surrogate=dppo", "train.forward_layout=padded"],
], ids=["clip-mu2-tis", "cispo-seq", "sapo-kl-in-reward", "vespo-mis", "dppo"])
def test_a_trainer_step_ignores_the_logits_at_tool_positions(tiny_setup, tmp_path, extra):
    """The trainer's own path (finish_batch: old and reference log-probs, KL, importance weights; then
    optimise: loss, entropy, SGD step) on a real tiny model: perturbing the policy's and the
    reference's logits at the tool columns leaves the updated weights and every statistic as they were."""
    cfg = run_cfg(tiny_setup, "tir-grad", "train.beta=0.04", "train.micro_batch_size=64", *extra)
    results = []
    for scale in (0.0, 3.0):
        state = _state(cfg)
        hooks = [_perturb_tool_logits(m, scale, range(*SPAN)) for m in (state.policy, state.ref) if m is not None]
        timer: dict = {}
        batch = finish_batch(cfg, state, _episodes(), 0.0, timer)
        stats = optimise(cfg, state, batch, 1, tmp_path, timer)
        for h in hooks:
            h.remove()
        results.append(([p.detach().clone() for p in state.policy.parameters()], stats, batch.mismatch))
    (params_a, stats_a, tis_a), (params_b, stats_b, tis_b) = results
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(params_a, params_b))
    assert stats_a == pytest.approx(stats_b, abs=1e-5) and tis_a == pytest.approx(tis_b, abs=1e-6)
    before = [p.detach() for p in _state(cfg).policy.parameters()]
    assert not all(torch.equal(a, b) for a, b in zip(before, params_a))  # the step did move the weights


def test_tool_statistics_reach_the_metrics_and_samples():
    eps = _episodes()
    eps[0].tool_stats = {"calls": 3, "errors": 1, "timeouts": 1, "sandbox_s": 2.0, "wait_s": 0.5}
    m = tool_metrics(eps)
    assert m["tool/wait_s_total"] == pytest.approx(0.5)  # the others carry no wait_s
    assert m["tool/calls"] == pytest.approx((3 + 7) / 8) and m["tool/timeouts"] == pytest.approx(1 / 8)
    assert m["tool/errors"] == pytest.approx((1 + 4) / 8) and m["tool/used_frac"] == 1.0
    assert m["tool/tokens"] == 3.0 and m["tool/sandbox_s_total"] == pytest.approx(2.07)
    assert eps[0].record()["tool"] == eps[0].tool_stats and eps[0].record()["tool_tokens"] == 3
    plain = copy.deepcopy(eps)
    for e in plain:
        e.tool_stats, e.tool_spans = {}, []
    assert tool_metrics(plain) == {} and "tool" not in plain[0].record()
    from pipeline.grpo.run_log import panels_for

    titles = [t for t, _, _ in panels_for([{"step": 1, "reward/mean": 0.0, **m}])]
    assert any(t.startswith("tool calls") for t in titles)
    assert not any(t.startswith("tool calls") for t in [t for t, _, _ in panels_for([{"step": 1, "reward/mean": 0}])])
    cfg = load_run_config(None, [])
    from types import SimpleNamespace
    batch = SimpleNamespace(episodes=eps, zero_std_frac=0.0, mismatch={})
    assert step_metrics(cfg, batch, {}, {"rollout": 1.0})["tool/calls"] == m["tool/calls"]


@pytest.mark.parametrize("engine", ["hf", "hf_process"])
def test_training_runs_the_tool_and_logs_it(tiny_setup, tmp_path, engine):
    """`mathrl train` with rollout.tools=[python] on the scripted policy (tests/tir_standin.py, saved as
    a model directory): every completion calls the sandbox once, in the synchronous loop (hf) and the
    pipelined one (hf_process worker); the outputs are in the transcripts the rewards read, the tool
    statistics in samples.jsonl and metrics.jsonl, and the tool tokens out of the loss's token count."""
    from pipeline.grpo import trainer
    from pipeline.grpo.run_log import read_metrics
    from tests.tir_standin import save_hf_policy

    save_hf_policy(tmp_path / "policy", "print(6 * 7)")
    pipelined = ["train.async_staleness=1", "rollout.tis_cap=2.0", "rollout.worker_threads=1"]
    pipelined = pipelined if engine == "hf_process" else []
    cfg = run_cfg(tiny_setup, f"tir-{engine}", f"model.name_or_path={tmp_path / 'policy'}", "prompt.chat=false",
                  "rollout.tools=[python]", f"rollout.engine={engine}", "rollout.max_new_tokens=40",
                  "train.steps=2", "train.save_every=0", *pipelined)
    run_dir = trainer.train(cfg)
    rows = read_metrics(run_dir)
    assert [r["tool/calls"] for r in rows] == [1.0, 1.0] and all(r["tool/errors"] == 0 for r in rows)
    import json
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert samples and all(s["tool"]["calls"] == 1 and s["tool_tokens"] > 0 for s in samples)
    assert all("```output\n42\n```\nThe answer is 42." in s["completion"] for s in samples)
    # the loss counts policy tokens only: 3 sampled ones (block, fence, answer) + EOS per completion, in
    # micro-batches of 6 completions (the statistic is per micro-batch); the tool tokens would add 6 each
    assert all(r["num_tokens"] == pytest.approx(4 * 6) for r in rows), [r.get("num_tokens") for r in rows]


def test_void_turns_are_found_and_filtered():
    """SimpleTIR's void turn: neither a closed python block nor a final answer. Under
    train.void_turn_filter a tool-using completion with one leaves the loss; the others stay."""
    assert not void_turn("Let me compute.\n```python\nprint(2 ** 10)\n```")
    assert not void_turn("So the total is 1024.\n#### 1024") and not void_turn("The answer is \\boxed{7}.")
    assert void_turn("Hmm, that output looks odd. Let me think again") and void_turn("```python\nprint(1)\n")
    eps = _episodes()
    for e in eps:
        e.turns = ["```python\nprint(6 * 7)\n```", "#### 42"]
    eps[1].turns = ["```python\nprint(6 * 7)\n```", "that is strange"]  # a void last turn
    eps[2].turns, eps[2].tool_spans = ["no code, no answer"], []  # never called the tool: not filtered
    assert [has_void_turn(e) for e in eps[:3]] == [False, True, False]
    packed = pack(eps, 0)
    plain = loss_mask(load_run_config(None, ["rollout.tools=[python]"]), eps, packed)
    filtered = loss_mask(load_run_config(None, ["rollout.tools=[python]", "train.void_turn_filter=true"]), eps, packed)
    assert filtered[1].sum() == 0 and plain[1].sum() > 0
    assert torch.equal(torch.cat([filtered[:1], filtered[2:]]), torch.cat([plain[:1], plain[2:]]))
    assert tool_metrics(eps)["tool/void_frac"] == pytest.approx(1 / len(eps))
    with pytest.raises(ConfigError, match="void_turn_filter"):
        load_run_config(None, ["train.void_turn_filter=true"])
