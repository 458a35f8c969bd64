"""What the GPU recipes (configs/*.yaml, docs/recipes.md) need from the pipeline, checked on CPU.

- `qwen_math`: Oat's template for Qwen2.5-Math (instruction in the system turn), byte for byte.
"""

from __future__ import annotations

from pipeline.prompts import TEMPLATES, build_prompt

OAT_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."


def _oat_qwen_math(question: str) -> str:
    """sail-sg/understand-r1-zero train_zero_math.py::apply_qwen_math_template, as published."""
    return ("<|im_start|>system\n" + OAT_SYSTEM + "<|im_end|>\n<|im_start|>user\n" + question
            + "<|im_end|>\n<|im_start|>assistant\n")


def test_qwen_math_template_is_oats_string(tiny_setup):
    from transformers import AutoTokenizer

    _, root = tiny_setup
    tok = AutoTokenizer.from_pretrained(root / "tiny")  # a ChatML chat template, like Qwen's
    question = "What is $1+1$?"
    assert build_prompt(question, template="qwen_math", tokenizer=tok) == _oat_qwen_math(question)
    # the `math` template keeps the instruction in the user turn, with no system turn
    assert "system" not in build_prompt(question, template="math", tokenizer=tok)
    assert TEMPLATES["qwen_math"].style == "math"


def test_qwen_math_without_chat_template_keeps_the_instruction_first():
    text = build_prompt("Q?", template="qwen_math", tokenizer=None)
    assert text == OAT_SYSTEM + "\n\nQuestion: Q?\nAnswer:"
