"""Final-answer extraction from a completion (`extract_answer`, `read_final`).

One policy for every style (`rewards.answers.statements`): the final answer is the last answer
statement - a box group, a `####` line or an answer marker ("The answer is", "Final Answer:",
"**Answer:**", "A:") - and a statement that hedges, negates or offers alternatives gives no
single answer. Without any statement the last sentence that has math is read, unless the text
stops mid-sentence. Styles differ only there: "math" reads math environments only, "gsm8k"
and "auto" also plain numbers. All scanning is linear-time string work on capped spans;
nothing here can hang on hostile input. A chat-template end-of-turn token (`<|im_end|>`,
`<|eot_id|>`, `</s>`...) ends the completion: a turn written after it is not the model's answer.
"""

from __future__ import annotations

import re

from rewards.answers.span import Reading
from rewards.answers.statements import final_reading, reference_answer
from rewards.equivalence.grammar.lexer import THOUSANDS

__all__ = ["STYLES", "extract_answer", "read_final", "reference_answer"]

STYLES = ("auto", "gsm8k", "math")

# chat-template end-of-turn tokens (ChatML, Llama 3, GPT-2/Qwen, SentencePiece, Gemma, Phi)
END_OF_TURN = re.compile(r"<\|(?:im_end|endoftext|eot_id|eom_id|end_of_text|end)\|>|</s>|<end_of_turn>")
_PLAIN_NUMBER = re.compile(r"^[$€£]?(-?)[$€£]?(" + THOUSANDS.pattern + r"|\d+)(\.\d+)?\.?$", re.A)


def read_final(text: str, style: str = "auto") -> Reading:
    """What the completion's final answer statement says (answer, or why there is none)."""
    if style not in STYLES:
        raise ValueError(f"unknown style {style!r}; valid: {', '.join(STYLES)}")
    if not isinstance(text, str) or not text:
        return Reading(None)
    text = END_OF_TURN.split(text, 1)[0]  # what follows the model's end-of-turn token is not its answer
    reading, _kind = final_reading(text.replace("\x00", ""), style)
    if reading.answer is None:
        return reading
    answer = reading.answer.strip()
    return Reading(_clean_number(answer) or answer) if answer else Reading(None)


def extract_answer(text: str, style: str = "auto") -> str | None:
    """The final answer written in `text`, or None when there is no single one (see module
    docstring). Plain numbers come back without thousands commas or currency signs."""
    return read_final(text, style).answer


def _clean_number(s: str) -> str | None:
    m = _PLAIN_NUMBER.match(s)
    if m is None:
        return None
    return m.group(1) + m.group(2).replace(",", "") + (m.group(3) or "")
