"""gsm-synth / GSM8K reference solutions: parsed and written back byte for byte, corrupted consistently."""

from __future__ import annotations

import hashlib
import json
import random
import re

import pytest

from pipeline.config import DataConfig
from pipeline.data import synth_solutions as sol
from pipeline.data.synth import STEP_RE, format_step, generate, has_bug_site

LINE = re.compile(r"<<(\d+)([-+*/])(\d+)=(\d+)>>(\d+)")
CALC = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a // b}


def steps(solution: str) -> list[tuple[int, str, int, int]]:
    return [(int(a), op, int(b), int(c)) for a, op, b, c, _ in LINE.findall(solution)]


def final(solution: str) -> str:
    return solution.rsplit("#### ", 1)[1]


def test_step_re_reads_what_format_step_writes_and_model_spellings():
    assert STEP_RE.match(format_step(12, "*", 3, 36)).groups() == ("12", "*", "3", "36")
    assert STEP_RE.search("gets: << 7 - 9 = -2 >>").groups() == ("7", "-", "9", "-2")


def test_lines_are_written_back_byte_for_byte():
    train, _ = generate(DataConfig(synth_train_size=300, synth_test_size=10, synth_distractors=2))
    odd = ["He has <<3+4=7>>7 now and <<7*2=14>>14 later.", "spaced << 3+4=7>>7", "zeros <<03+4=7>>7",
           "wrong repeat <<3+4=7>>8", "decimal <<2.5*2=5>>5", "#### 5"]
    for text in [r["solution"] for r in train] + ["\n".join(odd)]:
        assert sol.render(sol.parse(text), final(text)) == text
    items = sol.parse("\n".join(odd))
    assert items[0] == ["He has <<3+4=7>>7 now and ", 7, "*", 2, 14, " later."]  # the last step of a line
    assert all(isinstance(i, str) for i in items[1:])  # only exactly formatted steps are steps


def test_calc_refuses_what_a_solution_cannot_write():
    assert sol.calc("-", 3, 5) is None and sol.calc("/", 7, 2) is None and sol.calc("/", 7, 0) is None
    assert sol.calc("-", 5, 3) == 2 and sol.calc("/", 8, 2) == 4 and sol.calc("*", 3, 4) == 12


def test_corruption_makes_exactly_one_step_wrong_and_carries_it_forward():
    train, _ = generate(DataConfig(synth_train_size=500, synth_test_size=10, synth_ops=["+", "-", "*", "/"],
                                   synth_max_steps=4))
    rng = random.Random(0)
    corrupted = 0
    for r in train:
        bad = sol.corrupt_solution(r["solution"], rng)
        if bad is None:
            continue
        corrupted += 1
        old, new = steps(r["solution"]), steps(bad)
        wrong = [k for k, (a, op, b, c) in enumerate(new) if CALC[op](a, b) != c]
        assert len(wrong) == 1, bad
        for k in range(1, len(new)):
            assert new[k][0] == new[k - 1][3] or old[k][0] != old[k - 1][3]  # chain kept
        assert [(op, b) for _, op, b, _ in new] == [(op, b) for _, op, b, _ in old]
        assert final(bad) == str(new[-1][3]) != r["answer"]
    assert corrupted > 450


def test_slip_corruption_updates_distractor_lines():
    train, _ = generate(DataConfig(synth_train_size=300, synth_test_size=10, synth_distractors=2))
    rng = random.Random(0)
    checked = 0
    for r in train:
        bad = sol.corrupt_solution(r["solution"], rng)
        if bad is None or "same:" not in bad:
            continue
        value = None
        for line in bad.split("\n")[:-1]:  # every same line repeats the (possibly wrong) value before it
            m = LINE.search(line)
            if m:
                value = int(m.group(4))
            elif value is not None:
                assert line == f"same: {value}", bad
                checked += 1
    assert checked > 50


@pytest.mark.parametrize("frac", [0.0, 0.5, 1.0])
def test_carry_bug_only_touches_carries_and_borrows(frac):
    train, _ = generate(DataConfig(synth_train_size=600, synth_test_size=10, synth_distractors=1))
    out, n = sol.corrupt_records(train, frac, seed=3, mode="carry")
    sites = wrong = 0
    for r, o in zip(train, out):
        old, new = steps(r["solution"]), steps(o["solution"])
        assert [(op, b) for _, op, b, _ in new] == [(op, b) for _, op, b, _ in old]
        for k, (a, op, b, c) in enumerate(new):
            assert k == 0 or a == new[k - 1][3] or old[k][0] != old[k - 1][3]  # the chain continues
            site = has_bug_site(op, a, b)
            sites += site
            if c != CALC[op](a, b):  # a wrong step is a bug site done the buggy way, nothing else
                assert site and c == CALC[op](a, b) + (-10 if op == "+" else 10), o["solution"]
                wrong += 1
        assert final(o["solution"]) == str(new[-1][3])
        assert o.get("corrupted", False) == (o["solution"] != r["solution"])
    assert sites > 200 and wrong / sites == pytest.approx(frac, abs=0.08)
    assert n == sum(o.get("corrupted", False) for o in out)


def test_corrupt_records_fraction_and_untouched_originals():
    train, _ = generate(DataConfig(synth_train_size=2000, synth_test_size=10))
    out, n = sol.corrupt_records(train, 0.3, seed=1)
    assert 500 < n < 700 and sum(r.get("corrupted", False) for r in out) == n
    assert all("corrupted" not in r for r in train)
    assert sol.corrupt_records(train, 0.0, seed=1) == (train, 0)


# sha256 of the corrupted records below as pipeline/sft.py wrote them before the parser and the
# corruptors moved here (commit 924f364): the move must not change one byte of the SFT data.
BEFORE_THE_MOVE = {("slip", 0.3): (975, "0734dd15c693d1596cfd330cc436b9dddbc3a9adcfd9b104cc16a736c85f7819"),
                   ("carry", 0.6): (690, "d1ed243bd04c004b07329c22bf3bc1b0e720794f488416c8311e123423974dd9")}


@pytest.mark.parametrize("mode, frac", list(BEFORE_THE_MOVE))
def test_sft_training_data_is_the_same_as_before_the_move(mode, frac):
    train, _ = generate(DataConfig(synth_train_size=3000, synth_test_size=10, synth_distractors=2,
                                   synth_ops=["+", "-", "*", "/"], synth_max_steps=4))
    out, n = sol.corrupt_records(train, frac, 7, mode)
    assert (n, hashlib.sha256(json.dumps(out, sort_keys=True).encode()).hexdigest()) == BEFORE_THE_MOVE[(mode, frac)]
