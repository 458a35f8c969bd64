"""The log-prob forward layouts (pipeline/grpo/packing.py) against the padded forward: the same
log-probs, entropies and gradients to float tolerance, on groups that share a prompt, with prompt
and completion lengths that differ, and micro-batches that cut a group."""

from __future__ import annotations

import random

import pytest
import torch

from pipeline.grpo import trainer
from pipeline.grpo.episodes import Episode, pack
from pipeline.grpo.logprobs import token_logprobs
from pipeline.grpo.run_log import read_metrics
from pipeline.models import load_policy
from tests.test_trainer import run_cfg


def _episodes(vocab: int, groups: int = 4, g: int = 3, seed: int = 0) -> list[Episode]:
    rng = random.Random(seed)
    out = []
    for q in range(groups):
        prompt = [rng.randrange(3, vocab) for _ in range(rng.randint(4, 15))]
        for j in range(g):
            completion = [rng.randrange(3, vocab) for _ in range(rng.randint(1, 12))]
            out.append(Episode(problem_id=str(q), group=q, sample=j, prompt="", completion="", prompt_ids=prompt,
                               completion_ids=completion, finish_reason="stop", gold="0"))
    return out


@pytest.fixture(scope="module")
def model_and_batch(tiny_setup):
    model, tok = load_policy(run_cfg(tiny_setup, "x").model.name_or_path)
    model.train()
    packed = pack(_episodes(len(tok)), tok.pad_token_id)
    return model, packed


def _loss_and_grads(model, packed, rows, layout):
    model.zero_grad(set_to_none=True)
    logp, ent = token_logprobs(model, packed, rows, temperature=0.7, entropy=True, layout=layout)
    mask = packed.completion_mask[rows]
    weights = torch.linspace(-1, 1, mask.numel()).view_as(mask)  # every token its own gradient weight
    (logp * mask * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    return logp * mask, ent * mask, grads


@pytest.mark.parametrize("layout", ["trimmed", "shared_prompt"])
@pytest.mark.parametrize("rows", [slice(None), slice(2, 8), [0, 1, 5, 9, 10]])
def test_layouts_match_the_padded_forward(model_and_batch, layout, rows):
    model, packed = model_and_batch
    ref_logp, ref_ent, ref_grads = _loss_and_grads(model, packed, rows, "padded")
    logp, ent, grads = _loss_and_grads(model, packed, rows, layout)
    assert logp.shape == ref_logp.shape
    assert torch.allclose(logp, ref_logp, atol=1e-5, rtol=1e-5), (logp - ref_logp).abs().max()
    assert torch.allclose(ent, ref_ent, atol=1e-5, rtol=1e-5)
    for name, g in ref_grads.items():
        assert g.abs().max() > 0, name  # a real gradient reached every parameter
        assert torch.allclose(grads[name], g, atol=1e-5, rtol=1e-4), (name, (grads[name] - g).abs().max())


def test_padded_layout_is_the_one_computed_so_far(model_and_batch):
    """``layout="padded"`` is bitwise the full-width forward: the default changes nothing."""
    model, packed = model_and_batch
    with torch.no_grad():
        out = model(input_ids=packed.input_ids, attention_mask=packed.attention_mask,
                    position_ids=packed.position_ids, use_cache=False).logits.float()
        p = packed.prompt_width
        direct = out[:, p - 1:-1].log_softmax(-1).gather(-1, packed.input_ids[:, p:, None]).squeeze(-1)
        ours = token_logprobs(model, packed)
    assert torch.allclose(ours, direct, atol=1e-6)
    assert torch.equal(ours, token_logprobs(model, packed, layout="padded"))


@pytest.mark.parametrize("layout", ["padded", "trimmed", "shared_prompt"])
def test_top_k_log_probs_are_the_full_softmax_s(model_and_batch, layout):
    """``top`` (DPPO's top-K divergence): the K most likely tokens of each completion position and
    their log-probs, and given ids' log-probs, as the full log-softmax has them."""
    model, packed = model_and_batch
    p, mask = packed.prompt_width, packed.completion_mask.bool()
    with torch.no_grad():
        out = model(input_ids=packed.input_ids, attention_mask=packed.attention_mask,
                    position_ids=packed.position_ids, use_cache=False).logits.float()
        full = (out[:, p - 1:-1] / 0.7).log_softmax(-1)  # [N, T, V]
        logp, _, (ids, top_logp) = token_logprobs(model, packed, temperature=0.7, layout=layout, top=5)
        want = full.topk(5, dim=-1)
        assert torch.equal(logp * mask, token_logprobs(model, packed, temperature=0.7, layout=layout) * mask)
        assert torch.allclose(top_logp[mask], want.values[mask], atol=1e-5)
        assert torch.equal(ids[mask], want.indices[mask])
        given = torch.flip(want.indices, dims=[-1])  # any ids: here the same five, least likely first
        _, _, (same, again) = token_logprobs(model, packed, temperature=0.7, layout=layout, top=given)
        assert torch.equal(same[mask], given[mask])
        assert torch.allclose(again[mask], full.gather(-1, given)[mask], atol=1e-5)


def test_training_with_a_shared_prompt_forward_matches_the_padded_one(tiny_setup):
    weights = {}
    for layout in ("padded", "shared_prompt"):
        run_dir = trainer.train(run_cfg(tiny_setup, f"layout-{layout}", "train.steps=2", "train.beta=0.1",
                                        f"train.forward_layout={layout}"))
        model, _ = load_policy(str(run_dir / "final"))
        weights[layout] = (torch.cat([p.flatten() for p in model.state_dict().values()]), read_metrics(run_dir))
    (a, rows_a), (b, rows_b) = weights["padded"], weights["shared_prompt"]
    assert [r["reward/mean"] for r in rows_a] == [r["reward/mean"] for r in rows_b]
    for ra, rb in zip(rows_a, rows_b):
        assert ra["grad_norm"] == pytest.approx(rb["grad_norm"], rel=1e-4)
        assert ra["entropy"] == pytest.approx(rb["entropy"], rel=1e-5)
    assert torch.allclose(a, b, rtol=0, atol=5e-5), (a - b).abs().max()
