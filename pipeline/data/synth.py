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

Two more knobs exist for measuring generalisation (docs/cpu_default.md):
- ``synth_distractors``: up to this many sentences without a number ("It is a sunny day.") are
  mixed into a problem, each answered by a ``same: <value>`` line. The solution then has one line
  per sentence and a problem's number of lines no longer gives away its number of calculations,
  which is what lets a model trained on 1-3 calculations carry out 4 (a model trained without
  them writes exactly 3 lines for any longer problem).
- ``synth_longer_size``: the ``test_longer`` split, problems with ``synth_max_steps + 1``
  calculations, one more than any train or test problem (disjoint from both by construction).
"""

from __future__ import annotations

import random
import re
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


# Sentences without a number that change nothing; {p} the person (or pronoun), {f} the friend.
DISTRACTORS = ["It is a sunny day.", "{f} visits {n}.", "{p} smiles.", "{f} likes {item}.", "{p} sings a song."]
SAME = ""  # the op of a distractor "step": the value stays the same
LONGER = "test_longer"  # the split with one calculation more than any train/test problem
# A calculator step ``<<a op b=c>>`` (``format_step``) read leniently, as models may write it: spaces
# allowed, a negative result kept; groups a, op, b, c.
STEP_RE = re.compile(r"<<\s*(\d+)\s*([-+*/])\s*(\d+)\s*=\s*(-?\d+)\s*>>")


@dataclass(frozen=True)
class Step:
    op: str  # + - * /, or SAME for a distractor sentence (a == result, b unused)
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


def format_step(a: int, op: str, b: int, result: int) -> str:
    """A calculator step as a solution line writes it: the annotation, then the result."""
    return f"<<{a}{op}{b}={result}>>{result}"


def has_bug_site(op: str, a: int, b: int) -> bool:
    """A step where the classic bugs apply: an addition with a carry or a subtraction with a borrow."""
    return (op == "+" and a % 10 + b % 10 >= 10) or (op == "-" and a >= 10 and a % 10 < b % 10)


def buggy_result(op: str, a: int, b: int) -> int:
    """What the forgotten-carry / forgotten-borrow student writes at a bug site (Brown & Burton
    1978): the carry lost (-10) or the tens kept (+10)."""
    return apply(op, a, b) - 10 if op == "+" else apply(op, a, b) + 10


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


def make_problem(rng: random.Random, cfg: DataConfig, n_steps: int | None = None) -> tuple[str, list[Step], int]:
    """(question, steps, start value) for one random problem; ``n_steps`` calculations (default:
    drawn from the knobs), plus up to ``synth_distractors`` distractor sentences."""
    name, friend = rng.sample(NAMES, 2)
    item = rng.choice(ITEMS)
    value = start = rng.randint(2, cfg.synth_max_number)
    n_steps = n_steps or rng.randint(cfg.synth_min_steps, cfg.synth_max_steps)
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
    if cfg.synth_distractors:  # drawn only when on, so problems without them stay as before
        steps = _add_distractors(rng, cfg.synth_distractors, steps, start, name, friend, item)
    body = " ".join(s.sentence for s in steps)
    question = f"{name} has {start} {item}. {body} How many {item} does {name} have now?"
    return question, steps, start


def _add_distractors(rng: random.Random, most: int, steps: list[Step], start: int, name: str, friend: str,
                     item: str) -> list[Step]:
    """``steps`` with 0..``most`` distractor sentences inserted at random places."""
    out = list(steps)
    for _ in range(rng.randint(0, most)):
        pos = rng.randint(0, len(out))
        pronoun = name if pos == 0 else "He" if name in ("Tom", "Ben", "Sam", "Max", "Leo", "Raj") else "She"
        value = out[pos - 1].result if pos else start
        sentence = rng.choice(DISTRACTORS).format(p=pronoun, n=name, f=friend, item=item)
        out.insert(pos, Step(SAME, value, 0, value, sentence))
    return out


def format_solution(steps: list[Step]) -> str:
    """GSM8K-style solution text: one annotated line per step (``same: <value>`` for a distractor
    sentence), then ``#### answer``."""
    lines = [f"same: {s.result}" if s.op == SAME else f"{PHRASES[s.op][0]}: {format_step(s.a, s.op, s.b, s.result)}"
             for s in steps]
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


def generate_longer(cfg: DataConfig) -> list[dict]:
    """The ``test_longer`` split: ``synth_longer_size`` problems with ``synth_max_steps + 1``
    calculations, from their own random stream (train and test do not change when it is on)."""
    rng = random.Random(f"{cfg.synth_seed}:{LONGER}")
    seen: set[str] = set()
    out: list[dict] = []
    tries = 0
    while len(out) < cfg.synth_longer_size:
        tries += 1
        if tries > 50 * cfg.synth_longer_size + 1000:
            raise ValueError(f"could not draw {cfg.synth_longer_size} distinct {LONGER} problems; "
                             "raise synth_max_number")
        question, steps, _ = make_problem(rng, cfg, n_steps=cfg.synth_max_steps + 1)
        if question in seen:
            continue
        seen.add(question)
        out.append({"id": f"gsm-synth-{LONGER}-{len(out)}", "source": "gsm-synth", "split": LONGER,
                    "question": question, "answer": str(steps[-1].result), "solution": format_solution(steps)})
    return out


def num_steps(record: dict) -> int:
    """Number of calculator steps in a record's reference solution."""
    return record["solution"].count("<<")


__all__ = ["LONGER", "STEP_RE", "Step", "apply", "buggy_result", "format_solution", "format_step", "generate",
           "generate_longer", "has_bug_site", "make_problem", "num_steps"]
