"""evals/synth_errors.py: each kind of wrong gsm-synth completion, by hand, and the printed table."""

from __future__ import annotations

import json

import pytest

from evals import synth_errors
from pipeline.data.synth import buggy_result, has_bug_site

Q = "Tom has 17 apples. He buys 25 more. He smiles. He gives 9 to Ana. How many apples does Tom have now?"
RIGHT = "gets: <<17+25=42>>42\nsame: 42\nloses: <<42-9=33>>33\n#### 33"


def test_bug_sites_and_buggy_results_by_hand():
    assert has_bug_site("+", 17, 25) and buggy_result("+", 17, 25) == 32   # 7+5 carries; the carry lost
    assert has_bug_site("-", 42, 17) and buggy_result("-", 42, 17) == 35   # 2<7 borrows; the tens kept
    assert not has_bug_site("+", 12, 5) and not has_bug_site("-", 9, 7) and not has_bug_site("*", 17, 5)
    assert not has_bug_site("-", 42, 12)  # no borrow


@pytest.mark.parametrize("completion, correct, kind", [
    (RIGHT, True, "right"),
    # the forgotten carry, then true steps from the buggy value
    ("gets: <<17+25=32>>32\nsame: 32\nloses: <<32-9=23>>23\n#### 23", False, "carry bug"),
    # a carry bug and another false step: the bug is named (the systematic error comes first)
    ("gets: <<17+25=32>>32\nsame: 32\nloses: <<32-9=20>>20\n#### 20", False, "carry bug"),
    # off by one at a carry site is not the bug
    ("gets: <<17+25=41>>41\nsame: 41\nloses: <<41-9=32>>32\n#### 32", False, "false arithmetic"),
    ("gets: <<17+25=42>>42\nsame: 42\nloses: <<42-9=34>>34\n#### 34", False, "false arithmetic"),
    # all steps true, the distractor line and a step missing
    ("gets: <<17+25=42>>42\n#### 42", False, "missing line"),
    # all steps true and every line there, but the wrong operand copied
    ("gets: <<17+25=42>>42\nsame: 42\nloses: <<42-8=34>>34\n#### 34", False, "wrong numbers"),
    ("", False, "missing line"),
    ("gets: <<17/0=1>>1\nsame: 1\nsame: 1\n#### 1", False, "false arithmetic"),
])
def test_classify(completion, correct, kind):
    assert synth_errors.expected_lines(Q) == 3
    assert synth_errors.classify(Q, completion, correct) == kind


def test_breakdown_and_table(tmp_path, capsys):
    rows = [{"question": Q, "completions": [RIGHT, "gets: <<17+25=32>>32\nsame: 32\nloses: <<32-9=23>>23\n#### 23"],
             "correct": [True, False]},
            {"question": Q, "completions": ["gets: <<17+25=42>>42\n#### 42", RIGHT], "correct": [False, True]}]
    shares = synth_errors.breakdown(rows)
    assert shares == {"n": 4, "right": 0.5, "carry bug": 0.25, "false arithmetic": 0.0, "missing line": 0.25,
                      "wrong numbers": 0.0}
    run = tmp_path / "greedy_after"
    run.mkdir()
    (run / "results.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert synth_errors.main([str(run)]) == 0
    out = capsys.readouterr().out
    assert "| greedy_after | 4 | 50.0% | 25.0% | 0.0% | 25.0% | 0.0% |" in out
    assert synth_errors.main([str(tmp_path / "missing")]) == 1
    assert "synth_errors:" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no completions"):
        synth_errors.breakdown([])
