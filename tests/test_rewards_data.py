"""Every reference solution scores 1.0 against its own gold answer; shuffled pairs score ~0.

Reads the shipped raw data (data/raw), with gold answers derived exactly as the data stage
does: GSM8K = text after the last '####' without commas, MATH = `reference_answer(solution)`
(the last box group: "$\\boxed{-2}$ and $\\boxed{1}$" is the answer "-2, 1", where the MATH
convention `last_boxed` would keep only "1").
The fast tests cover GSM8K test and MATH-500; the slow one all of MATH and GSM8K train+test.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from rewards import check
from rewards.answers.extract import reference_answer
from rewards.steps.reward import check_steps

ROOT = Path(__file__).resolve().parents[1] / "data" / "raw"
# Two MATH train problems whose reference solution boxes nothing (`\boxed{}`): no gold exists.
EMPTY_GOLD = {"train/number_theory/7115.json", "train/number_theory/7117.json"}


def gsm8k(split: str) -> list[tuple[str, str, str]]:
    with gzip.open(ROOT / "gsm8k" / f"{split}.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f]
    return [(f"gsm8k-{split}-{i}", r["answer"], r["answer"].rsplit("####", 1)[1].strip().replace(",", ""))
            for i, r in enumerate(rows)]


def math(path: str) -> list[tuple[str, str, str]]:
    with gzip.open(ROOT / "math" / path, "rt") as f:
        rows = [json.loads(line) for line in f]
    return [(r["unique_id"], r["solution"], reference_answer(r["solution"])) for r in rows]


def _self_failures(rows):
    return [(rid, gold, check(sol, gold).reason) for rid, sol, gold in rows
            if rid not in EMPTY_GOLD and check(sol, gold).score != 1.0]


def _false_positive_rate(rows, n: int, seed: int = 0) -> float:
    rng = random.Random(seed)
    sample = rng.sample(rows, min(n, len(rows)))
    golds = [g for _, _, g in sample]
    rng.shuffle(golds)
    pairs = [(sol, g) for (_, sol, g0), g in zip(sample, golds) if g0 != g]
    return sum(check(sol, g).score for sol, g in pairs) / len(pairs)


def test_gsm8k_test_and_math500_self_consistent():
    rows = gsm8k("test") + math("math500/test.jsonl.gz")
    assert len(rows) == 1319 + 500
    assert _self_failures(rows) == []


def test_math500_shipped_answers_self_consistent():
    # the `answer` field shipped with MATH-500 (the last box, the usual convention)
    with gzip.open(ROOT / "math" / "math500" / "test.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f]
    assert [(r["unique_id"], r["answer"]) for r in rows if check(r["solution"], r["answer"]).score != 1.0] == []


def test_false_degree_chain_pays_no_math500_gold():
    # the worst hack: `\boxed{1^\circ = 2 = G}` was paid against 448 of the 500 golds
    golds = [g for _, _, g in math("math500/test.jsonl.gz")]
    paid = [g for g in golds if check(f"So $\\boxed{{1^\\circ = 2 = {g}}}$.", g, timeout=3.0).score != 0.0]
    assert len(golds) == 500 and paid == []


def test_gsm8k_reference_steps_are_almost_all_true():
    steps = [s for _, sol, _ in gsm8k("test") for s in check_steps(sol)]
    false = sum(s.score == -1 for s in steps)
    checked = sum(s.score != 0 for s in steps)
    assert checked > 0.6 * len(steps)
    assert false / checked < 0.005  # the few are real slips in the reference text


def test_shuffled_gsm8k_pairs_score_zero():
    assert _false_positive_rate(gsm8k("test"), 500) == 0.0


@pytest.mark.slow
def test_all_reference_solutions_self_consistent():
    rows = gsm8k("train") + gsm8k("test") + math("full/train.jsonl.gz") + math("full/test.jsonl.gz")
    assert len(rows) == 7473 + 1319 + 7500 + 5000
    assert {rid for rid, _, gold in rows if not gold} == EMPTY_GOLD
    assert _self_failures(rows) == []


@pytest.mark.slow
def test_shuffled_math_pairs_false_positive_rate():
    rows = math("full/train.jsonl.gz") + math("full/test.jsonl.gz")
    assert _false_positive_rate([r for r in rows if r[2]], 2000) < 0.002


@pytest.mark.slow
def test_prepared_solutions_self_consistent():
    prepared = ROOT.parent / "prepared"
    files = sorted(prepared.glob("*/*.jsonl"))
    if not files:
        pytest.skip("no data/prepared yet: run `make data`")
    for path in files:
        rows = [json.loads(line) for line in path.read_text().split("\n") if line.strip()]
        failures = [(r["id"], r["answer"], check(r["solution"], r["answer"]).reason) for r in rows
                    if r["id"] not in EMPTY_GOLD and check(r["solution"], r["answer"]).score != 1.0]
        assert failures == [], path
