"""gsm-synth generator: seeded, disjoint splits, arithmetic that checks out, knobs respected."""

from __future__ import annotations

import re

import pytest

from pipeline.config import DataConfig
from pipeline.data.synth import generate, num_steps

LINE = re.compile(r"^\w+: <<(\d+)([-+*/])(\d+)=(\d+)>>(\d+)$")


def cfg(**kw) -> DataConfig:
    base = dict(synth_train_size=400, synth_test_size=100)
    return DataConfig(**{**base, **kw})


def check_record(r: dict, c: DataConfig) -> list[str]:
    """Every step's arithmetic, the chain between steps and the final answer; returns ops used."""
    lines = r["solution"].split("\n")
    assert lines[-1] == f"#### {r['answer']}"
    start = int(re.match(r"\w+ has (\d+) ", r["question"]).group(1))
    prev, ops = start, []
    for line in lines[:-1]:
        a, op, b, c_, shown = LINE.match(line).groups()
        a, b, c_ = int(a), int(b), int(c_)
        assert a == prev, f"step does not continue from the previous value: {r}"
        assert c_ == int(shown)
        assert c_ == {"+": a + b, "-": a - b, "*": a * b, "/": a // b}[op]
        if op == "/":
            assert a % b == 0
        assert 0 <= c_ <= c.synth_max_value
        assert str(b) in r["question"]
        prev, ops = c_, ops + [op]
    assert str(prev) == r["answer"]
    assert c.synth_min_steps <= len(ops) <= c.synth_max_steps
    return ops


def test_same_seed_same_records_other_seed_different():
    assert generate(cfg()) == generate(cfg())
    assert generate(cfg())[0] != generate(cfg(synth_seed=99))[0]


def test_splits_are_disjoint_sized_and_in_the_prepared_schema():
    train, test = generate(cfg())
    assert len(train) == 400 and len(test) == 100
    assert not {r["question"] for r in train} & {r["question"] for r in test}
    assert len({r["id"] for r in train + test}) == 500
    for r in train[:5] + test[:5]:
        assert set(r) == {"id", "source", "split", "question", "answer", "solution"}
        assert r["source"] == "gsm-synth"
    assert {r["split"] for r in train} == {"train"} and {r["split"] for r in test} == {"test"}


@pytest.mark.parametrize("kw", [{}, {"synth_ops": ["+", "-", "*", "/"], "synth_max_steps": 5},
                                {"synth_max_number": 50, "synth_max_value": 500, "synth_max_factor": 9}])
def test_solutions_arithmetic_is_right_and_answer_matches(kw):
    c = cfg(**kw)
    train, test = generate(c)
    ops = [op for r in train + test for op in check_record(r, c)]
    assert set(ops) == set(c.synth_ops)


def test_step_count_and_operation_knobs():
    train, _ = generate(cfg(synth_min_steps=4, synth_max_steps=4, synth_ops=["+", "-"]))
    assert {num_steps(r) for r in train} == {4}
    assert all("*" not in r["solution"] and "/" not in r["solution"] for r in train)


def test_bad_knobs_are_rejected():
    with pytest.raises(ValueError, match="synth_ops"):
        generate(cfg(synth_ops=["^"]))
    with pytest.raises(ValueError, match="steps"):
        generate(cfg(synth_min_steps=3, synth_max_steps=2))
    with pytest.raises(ValueError, match="synth_max_value"):
        generate(cfg(synth_max_number=50, synth_max_value=60))


SAME = re.compile(r"^same: (\d+)$")


def test_distractors_get_a_same_line_and_leave_the_arithmetic_alone():
    c = cfg(synth_distractors=2)
    train, test = generate(c)
    with_same = 0
    for r in train + test:
        lines = r["solution"].split("\n")[:-1]
        assert len(lines) == r["question"].count(".") - 1  # one line per sentence after "X has N items."
        plain = [line for line in lines if not SAME.match(line)]
        check_record({**r, "solution": "\n".join(plain + [f"#### {r['answer']}"])}, c)
        value = int(re.match(r"\w+ has (\d+) ", r["question"]).group(1))
        for line in lines:  # a same line repeats the value reached so far
            m = SAME.match(line)
            if m:
                assert int(m.group(1)) == value
                with_same += 1
            else:
                value = int(LINE.match(line).group(4))
    assert with_same > len(train) // 2
    assert generate(cfg(synth_distractors=0)) == generate(cfg())  # off: the same problems as before


def test_longer_split_has_one_more_calculation_and_is_seeded():
    from pipeline.data.synth import generate_longer

    c = cfg(synth_max_steps=3, synth_longer_size=50, synth_distractors=1)
    longer = generate_longer(c)
    assert len(longer) == 50 and {num_steps(r) for r in longer} == {4}
    assert {r["split"] for r in longer} == {"test_longer"} and len({r["question"] for r in longer}) == 50
    assert longer == generate_longer(c)
    train, test = generate(c)
    assert max(num_steps(r) for r in train + test) == 3
    assert (train, test) == generate(cfg(synth_max_steps=3, synth_distractors=1))  # the split changes neither
