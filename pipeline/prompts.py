"""Prompt templates: a problem dict -> the text the policy sees. Templates are data, not branches.

Each template has an ``instruction`` appended to the question and a ``style`` telling the
reward which answer format to expect. With ``chat=True`` the user turn goes through the
tokenizer's chat template; otherwise a plain ``Question: ... Answer:`` frame is used. Few-shot
examples become earlier turns (chat) or earlier Question/Answer blocks (plain). A ``system``
template puts its instruction in a system turn instead and leaves the user turn to the question:
``qwen_math`` is Oat's template for Qwen2.5-Math base models (sail-sg/understand-r1-zero,
``train_zero_math.py::apply_qwen_math_template``), which with a ChatML chat template renders as
``<|im_start|>system\n{instruction}<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n``.
``qwen_math_tir`` is Qwen2.5-Math's tool-integrated reasoning (TIR) prompt, the system message of the
Qwen2.5-Math README's TIR example (QwenLM/Qwen2.5-Math; Qwen2.5-Math report, arXiv:2409.12122), for
``rollout.tools: [python]`` with real models (docs/tir.md).
``verl_gsm8k`` is verl's GSM8K prompt (``examples/data_preprocess/gsm8k.py``: the question, a space,
its instruction, in the user turn).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Template:
    instruction: str  # appended after the question; may be empty
    style: str  # answer style the rewards should use: "gsm8k" or "math"
    system: bool = False  # the instruction is the system turn (plain frame: a line before the question)
    sep: str = "\n"  # between the question and an appended instruction


TEMPLATES: dict[str, Template] = {
    "gsm8k": Template("Solve step by step. End with a line of the form '#### <answer>'.", "gsm8k"),
    "gsm8k_boxed": Template("Solve step by step and put the final answer within \\boxed{}.", "math"),
    "math": Template("Please reason step by step, and put your final answer within \\boxed{}.", "math"),
    "qwen_math": Template("Please reason step by step, and put your final answer within \\boxed{}.", "math",
                          system=True),
    "qwen_math_tir": Template("Please integrate natural language reasoning with programs to solve the problem above, "
                              "and put your final answer within \\boxed{}.", "math", system=True),
    "verl_gsm8k": Template("Let's think step by step and output the final answer after \"####\".", "gsm8k", sep=" "),
    "plain": Template("", "gsm8k"),
}

PLAIN_FRAME = "Question: {question}\nAnswer:"


def get_template(name: str) -> Template:
    try:
        return TEMPLATES[name]
    except KeyError:
        raise ValueError(f"unknown prompt template {name!r}; choose one of {', '.join(TEMPLATES)}") from None


def user_text(question: str, template: Template) -> str:
    if template.system or not template.instruction:
        return question
    return f"{question}{template.sep}{template.instruction}"


def build_prompt(question: str, *, template: str = "gsm8k", tokenizer=None, chat: bool = True,
                 examples: list[tuple[str, str]] = ()) -> str:
    """The prompt string for ``question``; ``examples`` are (question, solution) few-shot pairs."""
    tpl = get_template(template)
    use_chat = chat and tokenizer is not None and getattr(tokenizer, "chat_template", None)
    if use_chat:
        messages = [{"role": "system", "content": tpl.instruction}] if tpl.system else []
        for q, a in examples:
            messages += [{"role": "user", "content": user_text(q, tpl)}, {"role": "assistant", "content": a}]
        messages.append({"role": "user", "content": user_text(question, tpl)})
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    shots = "".join(PLAIN_FRAME.format(question=user_text(q, tpl)) + f" {a}\n\n" for q, a in examples)
    head = f"{tpl.instruction}\n\n" if tpl.system else ""
    return head + shots + PLAIN_FRAME.format(question=user_text(question, tpl))
