"""Few-shot examples for the evals, from the prepared train splits (``data/prepared``).

The problems themselves come from ``pipeline.data.problems.load_problems`` like every stage's.
Few-shot examples are taken from the matching train split (MATH-500 borrows MATH's train split,
which the data stage already deduplicated against MATH-500).
"""

from __future__ import annotations

from pipeline.data.problems import FEW_SHOT_SOURCE, load_problems
from pipeline.prompts import get_template


def few_shot_examples(dataset: str, k: int, template: str,
                      prepared_dir: str = "data/prepared") -> list[tuple[str, str]]:
    """(question, worked solution) pairs: the first ``k`` train problems of the source dataset.

    Each solution ends in the answer form the template asks for, so the examples demonstrate
    the format being graded (a ``#### x`` line or ``\\boxed{x}``).
    """
    if k <= 0:
        return []
    if dataset not in FEW_SHOT_SOURCE:
        raise ValueError(f"few-shot examples need a prepared dataset name ({', '.join(FEW_SHOT_SOURCE)}), "
                         f"not {dataset!r}; set prompt.few_shot=0")
    train = load_problems(prepared_dir, FEW_SHOT_SOURCE[dataset], "train")[:k]
    style = get_template(template).style
    return [(p["question"], _with_final_answer(p["solution"], p["answer"], style)) for p in train]


def _with_final_answer(solution: str, answer: str, style: str) -> str:
    solution = solution.strip()
    if style == "gsm8k" and "####" not in solution:
        return f"{solution}\n#### {answer}"
    if style == "math" and "\\boxed" not in solution:
        return f"{solution}\nThe final answer is $\\boxed{{{answer}}}$."
    return solution
