"""gsm-synth: seeded multi-step word problems solved in GSM8K style, for the CPU default.

Each problem follows one quantity (a person's count of some item) through ``k`` arithmetic
steps, one sentence per step, and asks for the final count. The solution has one line per
step with a calculator annotation and ends with ``#### <answer>``, e.g.::

    Tom has 12 apples. He buys 5 more. He gives 3 to Ana. How many apples does Tom have now?
    buys: <<12+5=17>>17
    gives: <<17-3=14>>14
    #### 14

so the GSM8K answer extraction, the format reward and the step (process) rewards apply
unchanged. Lines are kept short on purpose: the model is tiny and every token costs CPU time.

Difficulty knobs (``DataConfig.synth_*``): number of steps, largest number in the statement,
largest multiplier/divisor, operations, and a cap on every intermediate value. Train and test
are disjoint by question text; the same seed always gives the same records.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from pipeline.config import DataConfig

NAMES = ["Tom", "Ana", "Ben", "Mia", "Sam", "Lea", "Max", "Zoe", "Leo", "Eva", "Raj", "Kim"]
ITEMS = ["apples", "pens", "cards", "coins", "books", "shells", "stamps", "marbles"]

# Per operation: (label used on the solution line, sentence templates). {b} is the operand.
PHRASES: dict[str, tuple[str, list[str]]] = {
    "+": ("gets", ["{p} buys {b} more.", "{p} finds {b} more {item}.", "{f} gives {n} {b} {item}."]),
    "-": ("loses", ["{p} gives {b} to {f}.", "{p} loses {b} {item}.", "{p} sells {b} {item}."]),
    "*": ("times", ["{p} then has {b} times as many {item}.", "The number of {item} grows {b} times."]),
    "/": ("splits", ["{p} splits the {item} into {b} equal piles and keeps one pile.",
                     "{p} keeps one of every {b} {item}."]),
}


@dataclass(frozen=True)
class Step:
    op: str
    a: int
    b: int
    result: int
    sentence: str


def apply(op: str, a: int, b: int) -> int:
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    return a // b


def _operand(rng: random.Random, op: str, value: int, cfg: DataConfig) -> int | None:
    """A random operand for ``value op b`` that keeps every number in range, or None."""
    if op == "+":
        hi = min(cfg.synth_max_number, cfg.synth_max_value - value)
        return rng.randint(1, hi) if hi >= 1 else None
    if op == "-":
        hi = min(cfg.synth_max_number, value)  # never below zero
        return rng.randint(1, hi) if hi >= 1 else None
    if op == "*":
        hi = min(cfg.synth_max_factor, cfg.synth_max_value // max(value, 1))
        return rng.randint(2, hi) if hi >= 2 and value > 0 else None
    divisors = [d for d in range(2, cfg.synth_max_factor + 1) if value % d == 0 and value > 0]
    return rng.choice(divisors) if divisors else None


def make_problem(rng: random.Random, cfg: DataConfig) -> tuple[str, list[Step], int]:
    """(question, steps, start value) for one random problem."""
    name, friend = rng.sample(NAMES, 2)
    item = rng.choice(ITEMS)
    value = start = rng.randint(2, cfg.synth_max_number)
    n_steps = rng.randint(cfg.synth_min_steps, cfg.synth_max_steps)
    steps: list[Step] = []
    while len(steps) < n_steps:
        # The drawn op may be impossible (e.g. * at the value cap): try the others, then + / -,
        # one of which always fits because synth_max_value >= 2 * synth_max_number.
        first = rng.choice(cfg.synth_ops)
        for op in [first, *rng.sample(cfg.synth_ops, len(cfg.synth_ops)), "+", "-"]:
            b = _operand(rng, op, value, cfg)
            if b is not None:
                break
        pronoun = name if not steps else "He" if name in ("Tom", "Ben", "Sam", "Max", "Leo", "Raj") else "She"
        sentence = rng.choice(PHRASES[op][1]).format(p=pronoun, n=name, f=friend, b=b, item=item)
        result = apply(op, value, b)
        steps.append(Step(op, value, b, result, sentence))
        value = result
    body = " ".join(s.sentence for s in steps)
    question = f"{name} has {start} {item}. {body} How many {item} does {name} have now?"
    return question, steps, start


def format_solution(steps: list[Step]) -> str:
    """GSM8K-style solution text: one annotated line per step, then ``#### answer``."""
    lines = [f"{PHRASES[s.op][0]}: <<{s.a}{s.op}{s.b}={s.result}>>{s.result}" for s in steps]
    return "\n".join(lines + [f"#### {steps[-1].result}"])


def generate(cfg: DataConfig) -> tuple[list[dict], list[dict]]:
    """(train, test) records in the prepared schema; test questions never appear in train.
    ``cfg``'s knobs were checked when it was built (pipeline/config/checks.py)."""
    rng = random.Random(cfg.synth_seed)
    seen: set[str] = set()
    out: dict[str, list[dict]] = {"test": [], "train": []}
    sizes = {"test": cfg.synth_test_size, "train": cfg.synth_train_size}
    for split in ("test", "train"):  # test first so its questions are reserved
        tries = 0
        while len(out[split]) < sizes[split]:
            tries += 1
            if tries > 50 * sizes[split] + 1000:
                raise ValueError(f"could not draw {sizes[split]} distinct {split} problems; "
                                 "raise synth_max_number or synth_max_steps")
            question, steps, _ = make_problem(rng, cfg)
            if question in seen:
                continue
            seen.add(question)
            out[split].append({
                "id": f"gsm-synth-{split}-{len(out[split])}", "source": "gsm-synth", "split": split,
                "question": question, "answer": str(steps[-1].result),
                "solution": format_solution(steps)})
    return out["train"], out["test"]


def num_steps(record: dict) -> int:
    """Number of calculator steps in a record's reference solution."""
    return record["solution"].count("<<")


__all__ = ["Step", "format_solution", "generate", "make_problem", "num_steps"]
