"""Published GSM8K / MATH accuracies of well-known models: data, not measurements.

The eval report prints these next to a fresh result when the evaluated model's name matches,
labelled "published, not measured". Each row names its source and the setting the authors
used; their prompts and graders differ from ours, so a gap of a few points is expected. Only
numbers we could attribute to the paper or report named are listed.
"""

from __future__ import annotations

from dataclasses import dataclass

DEEPSEEKMATH = "DeepSeekMath paper (Shao et al. 2024, arXiv:2402.03300), Table 5"
QWEN25 = ("Qwen2.5 technical report / release blog (Qwen team 2024, arXiv:2412.15115), "
          "instruction-tuned 0.5B-1.5B table")
QWEN25_MATH = "Qwen2.5-Math technical report (Yang et al. 2024, arXiv:2409.12122), instruct models, CoT"


@dataclass(frozen=True)
class Published:
    model: str  # hub id
    dataset: str  # our dataset name: gsm8k or math
    accuracy: float  # percent, as printed in the source
    setting: str
    source: str


PUBLISHED: list[Published] = [
    Published("deepseek-ai/deepseek-math-7b-instruct", "gsm8k", 82.9, "chain-of-thought, greedy", DEEPSEEKMATH),
    Published("deepseek-ai/deepseek-math-7b-instruct", "math", 46.8, "chain-of-thought, greedy", DEEPSEEKMATH),
    Published("deepseek-ai/deepseek-math-7b-rl", "gsm8k", 88.2, "chain-of-thought, greedy", DEEPSEEKMATH),
    Published("deepseek-ai/deepseek-math-7b-rl", "math", 51.7, "chain-of-thought, greedy", DEEPSEEKMATH),
    Published("Qwen/Qwen2.5-0.5B-Instruct", "gsm8k", 49.6, "as reported for the instruct models", QWEN25),
    Published("Qwen/Qwen2.5-0.5B-Instruct", "math", 34.4, "as reported for the instruct models", QWEN25),
    Published("Qwen/Qwen2.5-1.5B-Instruct", "gsm8k", 73.2, "as reported for the instruct models", QWEN25),
    Published("Qwen/Qwen2.5-1.5B-Instruct", "math", 55.2, "as reported for the instruct models", QWEN25),
    Published("Qwen/Qwen2.5-Math-1.5B-Instruct", "gsm8k", 84.8, "chain-of-thought, greedy", QWEN25_MATH),
    Published("Qwen/Qwen2.5-Math-1.5B-Instruct", "math", 75.8, "chain-of-thought, greedy", QWEN25_MATH),
]

# MATH-500 is a subset of the MATH test set; papers above report the full 5,000 problems.
_DATASET_ALIASES = {"math500": "math"}


def _short(name: str) -> str:
    return name.rstrip("/").split("/")[-1].lower()


def published_for(model_name: str, dataset: str) -> list[Published]:
    """Rows whose model matches ``model_name`` (hub id or a folder named like it) on ``dataset``.

    Matching compares the last path component case-insensitively, so a local copy saved as
    ``.../Qwen2.5-1.5B-Instruct`` matches the hub id. MATH-500 shows the full-MATH numbers.
    """
    want = _DATASET_ALIASES.get(dataset, dataset)
    return [p for p in PUBLISHED if _short(p.model) == _short(model_name) and p.dataset == want]
