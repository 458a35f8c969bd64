"""Models: load a policy (any local dir or hub id), add LoRA, and build the tiny CPU model.

``load_policy`` is the one loading path for real and tiny models alike
(``AutoModelForCausalLM`` / ``AutoTokenizer.from_pretrained``). ``build_tiny`` makes a small
Qwen2-architecture causal LM and a tokenizer trained offline with ``tokenizers`` and saves both
with ``save_pretrained``, so the tiny model goes through exactly the same code as Qwen2.5-Math.

Tokenizer choices for the tiny model (why):
1. Byte-level BPE with exactly Qwen2's normaliser and pre-tokenizer: ``AutoTokenizer`` loads a
   qwen2 model dir as ``Qwen2Tokenizer``, which rebuilds that pipeline around the saved vocab
   and merges, so training with anything else would tokenize differently after loading.
2. That regex isolates every digit, so each digit is its own token and arithmetic is learnable
   digit by digit. Any text encodes (byte alphabet); words outside the corpus are just longer.
3. ChatML-like chat template; ``<|im_end|>`` is the EOS, ``<|endoftext|>`` the pad token.
"""

from __future__ import annotations

import json
import hashlib
from dataclasses import asdict
from pathlib import Path

import torch

from pipeline.config import ModelConfig, RunConfig
from pipeline.device import resolve_device

PAD, BOS_TURN, EOS = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}")
BUILD_INFO = "tiny_build.json"
TINY_TEMPLATES = ("gsm8k", "gsm8k_boxed", "math")  # prompt templates whose instructions the tiny tokenizer learns
# Qwen2's pre-tokenizer regex (transformers' tokenization_qwen2.py); \p{N} makes digits single.
QWEN2_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
               r"""\s*[\r\n]+|\s+(?!\S)|\s+""")


def load_policy(name_or_path: str, dtype: str = "float32", device: str = "cpu"):
    """(model, tokenizer) from a local directory or hub id; tokenizer pads on the left."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=getattr(torch, dtype))
    return model.to(resolve_device(device)), tokenizer


def apply_lora(model, cfg: ModelConfig):
    """Wrap ``model`` with a peft LoRA adapter from the config (only adapter weights train)."""
    from peft import LoraConfig, get_peft_model

    lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=list(cfg.lora_target_modules), task_type="CAUSAL_LM")
    return get_peft_model(model, lora)


def train_tokenizer(corpus: list[str], vocab_size: int):
    """A fast tokenizer trained on ``corpus`` (plus the prompt instructions), see module notes."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from pipeline.prompts import TEMPLATES

    tok = Tokenizer(models.BPE())
    # Same normaliser and pre-tokenizer as Qwen2Tokenizer, which AutoTokenizer picks for a qwen2
    # model dir: its regex isolates every digit (\p{N}) and splits words.
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[PAD, BOS_TURN, EOS], min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    # The chat frame and the instructions of the templates the tiny model is used with, often enough
    # to become few tokens (a fixed list: templates added for real models do not change the tiny tokenizer).
    extra = [f"user\nx\n{TEMPLATES[t].instruction}" for t in TINY_TEMPLATES] + ["assistant\n"]
    tok.train_from_iterator(list(corpus) + extra * 50, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=PAD,
                                   additional_special_tokens=[BOS_TURN])
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "left"
    return fast


def tiny_config(cfg: ModelConfig, tokenizer):
    """The Qwen2 config of the tiny model (head_dim >= 32 for vLLM CPU: checked by ModelConfig)."""
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=cfg.tiny_hidden_size,
        num_hidden_layers=cfg.tiny_layers, num_attention_heads=cfg.tiny_heads,
        num_key_value_heads=cfg.tiny_kv_heads, intermediate_size=cfg.tiny_intermediate_size,
        max_position_embeddings=cfg.tiny_max_positions, tie_word_embeddings=cfg.tiny_tie_embeddings,
        rope_theta=10000.0, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None)


def tiny_fields(cfg: ModelConfig) -> dict:
    return {k: v for k, v in asdict(cfg).items() if k.startswith("tiny_") and k != "tiny_dir"}


def build_tiny(cfg: ModelConfig, out_dir: str, corpus: list[str], seed: int = 0) -> None:
    """Train the tokenizer on ``corpus``, initialise the Qwen2 model, save both to ``out_dir``."""
    from transformers import GenerationConfig, Qwen2ForCausalLM

    tokenizer = train_tokenizer(corpus, cfg.tiny_vocab_size)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(tiny_config(cfg, tokenizer))
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    info = {"fields": tiny_fields(cfg), "seed": seed, "corpus_sha": corpus_sha(corpus),
            "params": sum(p.numel() for p in model.parameters())}
    (out / BUILD_INFO).write_text(json.dumps(info, indent=1))


def corpus_sha(corpus: list[str]) -> str:
    return hashlib.sha256("\0".join(corpus).encode()).hexdigest()[:16]


def tiny_corpus(cfg: RunConfig) -> list[str]:
    """Tokenizer training text: gsm-synth questions and solutions (prepared files if present), with
    ``sft.tool_frac`` of them written with the python tool as the SFT writes them (so the code and
    output fences become few tokens; the same list as before when it is 0)."""
    from pipeline.data.problems import load_problems
    from pipeline.data.tir_solutions import tool_records

    records = load_problems(cfg.data.prepared_dir, "gsm-synth", "train", synth=cfg.data)
    records = tool_records(records, cfg.sft.tool_frac, cfg.seed)[0]
    return [f"user\n{r['question']}" for r in records] + [f"assistant\n{r['solution']}" for r in records]


__all__ = ["apply_lora", "build_tiny", "load_policy", "resolve_device", "tiny_config",
           "train_tokenizer"]
