"""No fully masked attention rows (pipeline/masks.py): every mask the trainer and the engines hand
to attention lets each query row see at least one key, and real tokens' log-probs are those of
the plain padding mask.

The property is checked where it matters, at the attention kernel: ``scaled_dot_product_attention``
is wrapped to count the query rows of each mask it receives that attend to nothing, while the HF
engine generates (generate and the decode loop, with and without the shared prefill) and the
trainer scores a left-padded batch (every forward layout, forward and backward) and while the SFT
step runs (right padding). On the code before pipeline/masks.py the left-padded prompts' pad
positions were exactly such rows (each of these tests failed).
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from pipeline.grpo.episodes import Episode, pack
from pipeline.grpo.logprobs import token_logprobs
from pipeline.grpo.packing import LAYOUTS
from pipeline.masks import causal_mask, forward_mask, fully_masked_rows
from pipeline.models import load_policy
from pipeline.rollout.base import SamplingParams
from pipeline.rollout.decode_loop import decode
from pipeline.rollout.hf_engine import HFEngine
from pipeline.rollout.prefill import shared_prefill
from pipeline.sft import collate
from tests.test_trainer import run_cfg

PROMPTS = ["user\nWhat is 3 plus 4?\nassistant\n",
           "user\nTom has 12 apples and eats 5. How many are left?\nassistant\n",
           "user\n7 * 8 = ?\nassistant\n"]


@contextmanager
def kernel_masks(monkeypatch):
    """Yields a list that gets, per attention call, (query rows, fully masked query rows)."""
    seen: list[tuple[int, int]] = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(query, key, value, attn_mask=None, *args, **kwargs):
        rows = query.shape[0] * query.shape[-2]
        if attn_mask is None:
            seen.append((rows, 0))  # no mask, or is_causal=True: row q sees keys 0..q
        else:
            mask = attn_mask.expand(query.shape[0], 1, query.shape[-2], key.shape[-2])
            seen.append((rows, fully_masked_rows(mask)))
        return real(query, key, value, attn_mask, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    yield seen
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", real)


def random_model(impl: str = "sdpa", seed: int = 0):
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=97, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=1, intermediate_size=128, max_position_embeddings=128,
                         pad_token_id=0, eos_token_id=1, bos_token_id=None)
    config._attn_implementation = impl
    return Qwen2ForCausalLM(config).eval()


def episodes(seed: int = 1) -> list[Episode]:
    """Two groups of two completions; the prompts and completions differ in length (left and right padding)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for group, (lp, lcs) in enumerate([(3, (5, 2)), (9, (1, 7))]):
        prompt = torch.randint(2, 97, (lp,), generator=g).tolist()
        for sample, lc in enumerate(lcs):
            out.append(Episode(problem_id=str(group), group=group, sample=sample, prompt="", completion="",
                               prompt_ids=prompt, completion_ids=torch.randint(2, 97, (lc,), generator=g).tolist(),
                               finish_reason="stop", gold=""))
    return out


def plain_logprobs(model, packed) -> torch.Tensor:
    """The log-probs of the completion columns from one forward with the plain 2D padding mask
    (the trainer's forward before pipeline/masks.py)."""
    p = packed.prompt_width
    logits = model(input_ids=packed.input_ids, attention_mask=packed.attention_mask,
                   position_ids=packed.position_ids, use_cache=False).logits[:, p - 1:-1].float()
    return logits.log_softmax(-1).gather(-1, packed.input_ids[:, p:, None]).squeeze(-1)


def test_causal_mask_is_the_padding_mask_plus_the_diagonal():
    attention = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    mask = causal_mask(attention)[:, 0]
    assert mask[0].tolist() == [[True, False, False, False], [False, True, False, False],
                                [False, False, True, False], [False, False, True, True]]
    assert torch.equal(mask[1], torch.ones(4, 4, dtype=torch.bool).tril())
    assert fully_masked_rows(causal_mask(attention)) == 0
    assert causal_mask(attention, queries=1)[:, 0].tolist() == [[[False, False, True, True]], [[True] * 4]]
    plain = (torch.ones(4, 4, dtype=torch.bool).tril()[None] & attention.bool()[:, None, :])[:, None]
    assert fully_masked_rows(plain) == 2  # the two pad queries of row 0


def test_forward_mask_follows_the_attention_implementation():
    attention = torch.tensor([[0, 1, 1]])
    assert forward_mask(random_model("sdpa"), attention).dtype == torch.bool
    eager = forward_mask(random_model("eager"), attention)
    assert eager.dtype == torch.float32 and fully_masked_rows(eager) == 0
    assert eager[0, 0, 2].tolist() == [torch.finfo(torch.float32).min, 0.0, 0.0]
    flash = random_model("sdpa")
    flash.config._attn_implementation = "flash_attention_2"  # it unpads: the 2D mask goes through
    assert forward_mask(flash, attention) is attention
    sliding = random_model("sdpa")
    sliding.config.layer_types = ["sliding_attention", "full_attention"]
    assert forward_mask(sliding, attention) is attention


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_training_forward_has_no_fully_masked_rows_and_the_same_logprobs(monkeypatch, layout, impl):
    model = random_model(impl).train()
    packed = pack(episodes(), pad_id=0)
    with torch.no_grad():
        reference = plain_logprobs(model, packed)
    with kernel_masks(monkeypatch) as seen:
        logp = token_logprobs(model, packed, layout=layout)
        (logp * packed.completion_mask).sum().backward()
    if impl == "sdpa":
        assert seen and all(bad == 0 for _, bad in seen), seen
    real = packed.completion_mask.bool()
    assert torch.isfinite(logp).all()
    torch.testing.assert_close(logp[real], reference[real], rtol=0, atol=1e-5)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_sft_step_has_no_fully_masked_rows(monkeypatch):
    model = random_model().train()
    ids, mask, labels = collate([([5, 6, 7], [8, 9]), ([5], [9])], pad_id=0)
    with kernel_masks(monkeypatch) as seen:
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
    assert seen and all(bad == 0 for _, bad in seen), seen


def test_prefill_and_decode_loop_have_no_fully_masked_rows(monkeypatch):
    model = random_model()
    ids = torch.tensor([[0, 0, 0, 4, 5], [0, 6, 7, 8, 9], [3, 4, 5, 6, 7]])
    attention = (ids != 0).long()
    with kernel_masks(monkeypatch) as seen:
        cache = shared_prefill(model, ids, attention, share=False)
        decode(model, ids, attention, max_new_tokens=4, eos_ids=[1], cache=cache)
        decode(model, ids, attention, max_new_tokens=4, eos_ids=[1])
    assert len(seen) > 4 and all(bad == 0 for _, bad in seen), seen


@pytest.mark.parametrize("decode_mode,shared", [("generate", False), ("generate", True), ("loop", False)])
def test_engine_has_no_fully_masked_rows_and_the_same_greedy_samples(monkeypatch, tiny_setup, decode_mode, shared):
    model, tok = load_policy(run_cfg(tiny_setup, "x").model.name_or_path)
    params = SamplingParams(max_new_tokens=12, temperature=0.0, logprobs=True)
    engine = HFEngine(model, tok, batch_size=8, decode=decode_mode, shared_prefill=shared)
    with kernel_masks(monkeypatch) as seen:
        groups = engine.generate(PROMPTS, 2, params)
    assert len(seen) > 10 and all(bad == 0 for _, bad in seen), seen
    # Today's path: generate's own prefill of the left-padded batch with the plain 2D mask.
    encoded = [tok(p, add_special_tokens=False)["input_ids"] for p in PROMPTS]
    width = max(map(len, encoded))
    ids = torch.tensor([[tok.pad_token_id] * (width - len(e)) + e for e in encoded])
    out = model.generate(input_ids=ids, attention_mask=(torch.arange(width) >= width - torch.tensor(
        [len(e) for e in encoded])[:, None]).long(), max_new_tokens=12, do_sample=False,
        pad_token_id=tok.pad_token_id, eos_token_id=engine_eos(model, tok), return_dict_in_generate=True,
        output_logits=True)
    for i, group in enumerate(groups):
        expected = out.sequences[i, width:].tolist()
        for sample in group:
            assert sample.completion_ids == expected[:len(sample.completion_ids)]
            steps = torch.stack(out.logits, 1)[i, :len(sample.completion_ids)].float().log_softmax(-1)
            taken = steps.gather(-1, torch.tensor(sample.completion_ids)[:, None]).squeeze(-1)
            torch.testing.assert_close(torch.tensor(sample.logprobs), taken, rtol=0, atol=1e-4)


def engine_eos(model, tok) -> list[int]:
    from pipeline.rollout.hf_engine import _eos_ids
    return _eos_ids(model, tok)
