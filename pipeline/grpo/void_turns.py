"""SimpleTIR's void-turn filter (``train.void_turn_filter``): which tool-using completions to leave out
of the update.

Xue et al. 2025 ("SimpleTIR: End-to-End Reinforcement Learning for Multi-Turn Tool-Integrated
Reasoning", arXiv:2509.02479) trace the collapse of multi-turn TIR training to turns whose tokens
drift far from the policy's distribution after unexpected tool output, and filter out of the update
every trajectory that holds a "void turn": a turn that yields neither a complete code block nor a
final answer. Here a turn is one policy turn of the multi-turn rollout (``Episode.turns``: the text
between two tool outputs, or after the last), complete code is a closed ```` ```python ```` block
(the rollout's own rule), and a final answer is what the rewards read as one
(``rewards.extract_answer`` with ``reward.style``). Completions that never called the tool are
never filtered: they are one-turn completions that the reward already judges.
"""

from __future__ import annotations

from rewards import extract_answer
from pipeline.grpo.episodes import Episode
from pipeline.rollout.tool_format import closed_code


def void_turn(text: str, style: str = "auto") -> bool:
    """Neither a closed ```python block nor a final answer in the turn's text."""
    return closed_code(text) is None and extract_answer(text, style) is None


def has_void_turn(episode: Episode, style: str = "auto") -> bool:
    """The completion called the tool and one of its policy turns is void."""
    return bool(episode.tool_spans) and any(void_turn(t, style) for t in episode.turns)
