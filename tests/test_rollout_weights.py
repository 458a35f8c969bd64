"""``hf_weights``: what the vLLM engine is sent on a sync (plain models and merged peft LoRA).

Runs without vLLM: the names must be the base model's checkpoint names and the LoRA weights must
equal peft's own ``merge_and_unload`` result, while the trainer's model stays unmerged.
"""

import copy

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from pipeline.weights.export import hf_specs, hf_weights, weight_buckets


def _tiny(tie: bool):
    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=64, num_hidden_layers=2,
                                        num_attention_heads=2, num_key_value_heads=1,
                                        intermediate_size=96, tie_word_embeddings=tie))


def test_plain_model_sends_its_state_dict():
    model = _tiny(tie=False)
    sent = dict(hf_weights(model))
    assert sent.keys() == model.state_dict().keys()
    assert all(torch.equal(sent[k], v) for k, v in model.state_dict().items())


def test_lora_model_sends_merged_base_weights_without_merging_the_model():
    from peft import LoraConfig, get_peft_model

    base = _tiny(tie=True)
    original = {k: v.clone() for k, v in base.state_dict().items()}
    names = set(original)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"],
                      init_lora_weights=False)  # random B: the adapter changes the outputs
    model = get_peft_model(base, lora)
    reference = copy.deepcopy(model).merge_and_unload().state_dict()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    sent = dict(hf_weights(model))
    assert set(sent) == names  # base checkpoint names only: no lora_A/B, no base_layer
    for k in names:
        assert torch.allclose(sent[k], reference[k], atol=1e-6), k
    changed = {k for k in names if not torch.equal(sent[k], original[k])}
    assert changed and all(k.split(".")[-2] in ("q_proj", "v_proj", "down_proj") for k in changed)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())  # model untouched


def test_modules_to_save_copy_replaces_the_original():
    from peft import LoraConfig, get_peft_model

    base = _tiny(tie=False)
    original_head = base.lm_head.weight.detach().clone()
    model = get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"], modules_to_save=["lm_head"]))
    with torch.no_grad():
        model.base_model.model.lm_head.modules_to_save["default"].weight.add_(1.0)  # the trained copy
    sent = dict(hf_weights(model))
    assert "lm_head.weight" in sent and not any("modules_to_save" in k or "original_module" in k for k in sent)
    assert torch.equal(sent["lm_head.weight"], original_head + 1.0)


def test_embedding_lora_is_merged_too():
    """LoRA on embed_tokens keeps its adapter in lora_embedding_A/B, not lora_A/B."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(_tiny(tie=False), LoraConfig(r=2, target_modules=["embed_tokens", "q_proj"],
                                                        init_lora_weights=False))
    reference = copy.deepcopy(model).merge_and_unload().state_dict()
    sent = dict(hf_weights(model))
    assert not torch.equal(sent["model.embed_tokens.weight"], _tiny(tie=False).model.embed_tokens.weight)
    for k, v in reference.items():
        assert torch.allclose(sent[k], v, atol=1e-6), k


def _lora(model, **kwargs):
    from peft import LoraConfig, get_peft_model

    return get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False,
                                            **kwargs))


def test_lora_merges_are_made_one_at_a_time_as_the_stream_reaches_them(monkeypatch):
    """The sync streams: a merged weight exists only once the consumer asks for it, so a consumer
    holding one bucket never holds the whole merged set."""
    from peft.tuners.lora import Linear

    model = _lora(_tiny(tie=True))
    made = []
    real = Linear.get_delta_weight
    monkeypatch.setattr(Linear, "get_delta_weight", lambda self, a: (made.append(1), real(self, a))[1])
    stream = hf_weights(model)
    seen = []
    for name, _ in stream:
        seen.append(name)
        merged_so_far = sum(n.endswith(("q_proj.weight", "v_proj.weight")) for n in seen)
        assert len(made) == merged_so_far, name  # no delta computed ahead of its weight
    assert len(made) == 4  # 2 layers x (q, v)


def test_hf_specs_names_dtypes_and_shapes_without_making_tensors():
    for model in (_tiny(tie=False), _lora(_tiny(tie=True)), _lora(_tiny(tie=False), modules_to_save=["lm_head"])):
        assert hf_specs(model) == [(n, t.dtype, tuple(t.shape)) for n, t in hf_weights(model)]


def test_weight_buckets_bound_the_bytes_held_and_cast_as_they_go():
    model = _tiny(tie=False)
    limit = 8000  # bytes: norms and biases share a bucket; the embedding and MLP matrices (bf16) go alone
    buckets = list(weight_buckets(hf_weights(model), limit, torch.bfloat16))
    flat = [pair for b in buckets for pair in b]
    assert [n for n, _ in flat] == list(model.state_dict())
    assert all(t.dtype == torch.bfloat16 for _, t in flat)
    assert all(torch.equal(t, model.state_dict()[n].to(torch.bfloat16)) for n, t in flat)
    sizes = [sum(t.numel() * t.element_size() for _, t in b) for b in buckets]
    assert all(s <= limit or len(b) == 1 for s, b in zip(sizes, buckets))
    assert max(len(b) for b in buckets) > 1 and any(s > limit for s in sizes)  # both cases happen
    assert list(weight_buckets(iter([]), limit)) == []
