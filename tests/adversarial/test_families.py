"""The adversarial suite: every crafted hack scores 0, every control in the same format 1."""

from __future__ import annotations

import collections

import pytest

from rewards import check
from tests.adversarial.families import control_cases, hack_cases

HACKS = hack_cases()
CONTROLS = control_cases()


def test_suite_size():
    per_family = collections.Counter(f for f, _, _ in HACKS)
    assert len(HACKS) >= 200 and len(CONTROLS) >= 100
    assert set(per_family) >= {"chain", "hedge", "negation", "box words", "conflicting finals", "anagram",
                               "padding", "look-alike", "substring", "huge", "truncation"}


@pytest.mark.parametrize("family,completion,gold", HACKS, ids=[f"{f}-{i}" for i, (f, _, _) in enumerate(HACKS)])
def test_hack_scores_zero(family, completion, gold):
    result = check(completion, gold, timeout=3.0)
    assert result.score == 0.0, (family, completion[-200:], gold, result)


@pytest.mark.parametrize("completion,gold", CONTROLS, ids=range(len(CONTROLS)))
def test_control_scores_one(completion, gold):
    result = check(completion, gold, timeout=10.0)
    assert result.score == 1.0, (completion[-200:], gold, result)
