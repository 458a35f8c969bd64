"""Eval problems and few-shot examples from the prepared datasets (``data/prepared``).

Thin layer over the data stage's reader: adds ``limit``, checks the fields the harness needs,
and picks few-shot examples from the matching train split (MATH-500 borrows MATH's train split,
which the data stage already deduplicated against MATH-500).
"""

from __future__ import annotations

from pipeline.data_prep import load_problems
from pipeline.prompts import get_template

# Which prepared dataset supplies the few-shot examples for each eval dataset.
FEW_SHOT_SOURCE = {"gsm8k": "gsm8k", "math": "math", "math500": "math", "gsm-synth": "gsm-synth"}


def load_eval_problems(dataset: str, split: str = "test", prepared_dir: str = "data/prepared",
                       limit: int = 0) -> list[dict]:
    """The first ``limit`` problems (all when 0) of a prepared dataset or a JSONL path."""
    problems = load_problems(prepared_dir, dataset, split)
    if limit:
        problems = problems[:limit]
    for i, p in enumerate(problems):
        missing = [key for key in ("question", "answer") if not p.get(key)]
        if missing:
            raise ValueError(f"{dataset} problem {p.get('id', i)!r} lacks {', '.join(missing)}")
        p.setdefault("id", f"{dataset}/{split}/{i}")
    return problems


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
