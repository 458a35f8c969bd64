"""Tiny model builder and the shared loader: the tiny model goes through from_pretrained like a real one."""

from __future__ import annotations

import pytest
import torch

from pipeline.config import ModelConfig, load_run_config
from pipeline.models import apply_lora, build_tiny, load_policy, train_tokenizer
from pipeline.stages.build_tiny import main
from pipeline.data.synth import generate

SMALL = dict(tiny_hidden_size=64, tiny_layers=2, tiny_heads=2, tiny_kv_heads=1, tiny_intermediate_size=128,
             tiny_vocab_size=400)


@pytest.fixture(scope="module")
def corpus():
    train, _ = generate(load_run_config(None, ["data.synth_train_size=300", "data.synth_test_size=10"]).data)
    return [r["question"] for r in train] + [r["solution"] for r in train]


@pytest.fixture(scope="module")
def built(tmp_path_factory, corpus):
    out = tmp_path_factory.mktemp("tiny") / "m"
    build_tiny(ModelConfig(**SMALL), str(out), corpus)
    return out


def test_build_and_load_back_through_from_pretrained(built):
    model, tok = load_policy(str(built))
    assert model.config.model_type == "qwen2"
    assert model.config.hidden_size // model.config.num_attention_heads >= 32
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight  # tied
    assert tok.padding_side == "left" and tok.pad_token == "<|endoftext|>" and tok.eos_token == "<|im_end|>"
    assert model.generation_config.eos_token_id == tok.eos_token_id
    ids = tok("Tom has 3 apples.", return_tensors="pt")["input_ids"]
    assert model(input_ids=ids).logits.shape == (1, ids.shape[1], len(tok))


def test_saved_tokenizer_tokenizes_like_the_trained_one(built, corpus):
    """AutoTokenizer rebuilds a qwen2 dir as Qwen2Tokenizer; training must match its pipeline."""
    _, loaded = load_policy(str(built))
    trained = train_tokenizer(corpus, SMALL["tiny_vocab_size"])
    for text in corpus[:50] + corpus[-50:] + ["Zoë paid $1,234.50 for 12 pens!\n#### 7"]:
        assert loaded(text)["input_ids"] == trained(text)["input_ids"]


def test_every_digit_is_its_own_token(built):
    _, tok = load_policy(str(built))
    for text in ["1234567890", "Tom has 250 apples: <<250*4=1000>>1000", "#### 98765"]:
        tokens = [tok.decode([i]) for i in tok(text, add_special_tokens=False)["input_ids"]]
        digits = [t for t in tokens if any(ch.isdigit() for ch in t)]
        assert all(len(t.strip()) == 1 for t in digits), tokens
        assert "".join(digits).replace(" ", "") == "".join(ch for ch in text if ch.isdigit())


def test_chat_template_frames_the_assistant_turn(built):
    _, tok = load_policy(str(built))
    text = tok.apply_chat_template([{"role": "user", "content": "Q?"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids.count(tok.convert_tokens_to_ids("<|im_end|>")) == 1


def test_untied_embeddings_and_head_dim_check(tmp_path, corpus):
    build_tiny(ModelConfig(**{**SMALL, "tiny_tie_embeddings": False}), str(tmp_path / "u"), corpus[:100])
    model, _ = load_policy(str(tmp_path / "u"))
    assert model.get_output_embeddings().weight.data_ptr() != model.get_input_embeddings().weight.data_ptr()
    with pytest.raises(ValueError, match="head_dim"):
        build_tiny(ModelConfig(**{**SMALL, "tiny_heads": 4, "tiny_kv_heads": 2}), str(tmp_path / "x"), corpus[:100])


def test_main_builds_once_and_skips_an_identical_build(tmp_path, capsys):
    overrides = [f"model.tiny_dir={tmp_path / 't'}", f"data.prepared_dir={tmp_path / 'none'}",
                 "data.synth_train_size=200", "data.synth_test_size=10"]
    overrides += [f"model.{k}={v}" for k, v in SMALL.items()]
    cfg = load_run_config(None, overrides)
    main(cfg)
    weights = tmp_path / "t" / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    main(cfg)
    assert "skipping" in capsys.readouterr().out
    assert weights.stat().st_mtime_ns == stamp
    main(load_run_config(None, overrides + ["model.tiny_layers=1"]))
    assert weights.stat().st_mtime_ns != stamp
    assert load_policy(str(tmp_path / "t"))[0].config.num_hidden_layers == 1


def test_apply_lora_trains_only_adapters(built):
    model, _ = load_policy(str(built))
    peft_model = apply_lora(model, ModelConfig(lora_r=4, lora_target_modules=["q_proj", "v_proj"]))
    trainable = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert torch.is_tensor(peft_model(input_ids=torch.tensor([[1, 2, 3]])).logits)
