"""`compute_score` for verl's reward managers (verl's `custom_reward_function` convention).

    # verl config (the path is this file in the installed package:
    #   python -c "import rewards.integrations.verl as m; print(m.__file__)")
    custom_reward_function.path=/.../rewards/integrations/verl.py
    custom_reward_function.name=compute_score            # naive / dapo managers
    # .name=compute_score_batch with reward_model.reward_manager=batch
    # .name=compute_score_float with reward_model.reward_manager=prime (it reads only floats)
    # custom_reward_function.reward_kwargs.format_weight=0.1   adds a format bonus to "score"

verl's managers call `compute_score(data_source=..., solution_str=..., ground_truth=...,
extra_info=...)` (keywords; the prime manager passes the same four by position), with the
decoded response, `reward_model["ground_truth"]` and the row's `extra_info` dict. A dict result
must carry "score" (the reward placed on the last response token); every key of it goes into
verl's `reward_extra_info` and validation metrics, and "pred" is what verl's maj@N votes on, so
every call returns the same keys:

    {"score": acc + format_weight * format, "acc": 1.0/0.0, "format": 1.0/0.0,
     "pred": the extracted answer ("" if none), "reason": why it failed ("" on success)}

The answer style comes from `data_source` (the names verl's preprocess scripts and
`python -m rewards to-verl` write, `DATA_SOURCE_STYLES`), or from `extra_info["style"]`
("gsm8k", "math" or "auto"), which wins; an unknown source without it is a ValueError.
This file is loaded by path, so it uses absolute imports only.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from rewards.answers.extract import STYLES
from rewards.integrations.gold import gold_answer
from rewards.outcome.answer import RewardResult, check, format_reward

DATA_SOURCE_STYLES = {
    "openai/gsm8k": "gsm8k",
    "gsm8k": "gsm8k",
    "mathrl/gsm-synth": "gsm8k",
    "lighteval/MATH": "math",
    "DigitalLearningGmbH/MATH-lighteval": "math",
    "HuggingFaceH4/MATH-500": "math",
    "math_dapo": "math",
    "numina_aops_forum": "math",
    "numina_synthetic_math": "math",
    "numina_amc_aime": "math",
    "numina_synthetic_amc": "math",
    "numina_cn_k12": "math",
    "numina_olympiads": "math",
}
STYLE_PREFIXES = {"aime": "math"}  # verl's default scorer also routes every "aime*" source to math
NO_GOLD = "no gold answer"


def style_for(data_source: str, extra_info: dict | None = None) -> str:
    """The answer style for a row: `extra_info["style"]`, else by `data_source`."""
    override = extra_info.get("style") if isinstance(extra_info, dict) else None
    if override is not None:
        if override not in STYLES:
            raise ValueError(f"extra_info['style'] is {override!r}; valid: {', '.join(STYLES)}")
        return override
    source = str(data_source)
    if source in DATA_SOURCE_STYLES:
        return DATA_SOURCE_STYLES[source]
    for prefix, style in STYLE_PREFIXES.items():
        if source.startswith(prefix):
            return style
    raise ValueError(f"mathrl compute_score: unknown data_source {source!r}; known: "
                     f"{', '.join(DATA_SOURCE_STYLES)}, aime*; or put \"style\" (gsm8k, math, auto) "
                     f"in the row's extra_info")


def compute_score(data_source, solution_str, ground_truth, extra_info=None, *, format_weight: float = 0.0) -> dict:
    """Score one response (module docstring); never raises on the response text."""
    style = style_for(data_source, extra_info)
    gold = gold_answer(ground_truth)
    result = RewardResult(0.0, None, NO_GOLD) if gold is None else check(solution_str, gold, style)
    fmt = format_reward(solution_str, style)
    return {"score": result.score + format_weight * fmt, "acc": result.score, "format": fmt,
            "pred": result.pred or "", "reason": result.reason}


def compute_score_float(data_source, solution_str, ground_truth, extra_info=None, *,
                        format_weight: float = 0.0) -> float:
    """`compute_score(...)["score"]`, for managers that read a bare float (prime)."""
    return compute_score(data_source, solution_str, ground_truth, extra_info,
                         format_weight=format_weight)["score"]


def compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos=None, *,
                        format_weight: float = 0.0, workers: int = 2) -> list[dict]:
    """verl's batch manager convention: lists in, one `compute_score` dict per row out."""
    n = len(solution_strs)
    extra_infos = [None] * n if extra_infos is None else list(extra_infos)
    if not len(data_sources) == len(ground_truths) == len(extra_infos) == n:
        raise ValueError(f"compute_score_batch: {len(data_sources)} data_sources, {n} solution_strs, "
                         f"{len(ground_truths)} ground_truths, {len(extra_infos)} extra_infos")
    with ThreadPoolExecutor(max_workers=max(1, workers)) as ex:
        return list(ex.map(lambda row: compute_score(*row, format_weight=format_weight),
                           zip(data_sources, solution_strs, ground_truths, extra_infos)))
