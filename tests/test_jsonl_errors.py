"""A data file with a malformed line stops every entry point with one line naming the file, the
line number and what is wrong, before any model loads (rewards/jsonl.py is the one reader); so
does a record without an answer and a test-only dataset given to train on."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rewards.jsonl import JSONLError, read_jsonl

GOOD = {"id": "p1", "question": "What is 2 + 3?", "answer": "5", "solution": "2 + 3 = 5\n#### 5",
        "completion": "2 + 3 = 5\n#### 5"}

# Runs `mathrl ARGS` in a fresh interpreter, then says whether a model could have loaded: without
# torch and transformers imported, no policy, tokenizer or engine was built.
PROBE = """
import sys
from pipeline.cli import main
code = main(sys.argv[1:])
print("exit", code, "torch" in sys.modules, "transformers" in sys.modules)
"""


def broken_file(tmp_path, bad_line: str):
    """A JSONL file whose third line (after a blank second line) is ``bad_line``."""
    path = tmp_path / "mine.jsonl"
    path.write_text(json.dumps(GOOD) + "\n\n" + bad_line + "\n" + json.dumps({**GOOD, "id": "p2"}) + "\n")
    return path


def test_reader_names_the_file_the_line_and_the_fault(tmp_path):
    path = broken_file(tmp_path, '{"question": "q", "answer": 1,}')
    with pytest.raises(JSONLError) as e:
        read_jsonl(path)
    assert str(e.value).startswith(f"{path} line 3: not valid JSON (") and "\n" not in str(e.value)
    path = broken_file(tmp_path, "[1, 2]")
    with pytest.raises(JSONLError, match=r"line 3: expected a JSON object \{\.\.\.\}, got list"):
        read_jsonl(path)


def test_reader_keeps_line_separators_inside_strings(tmp_path):
    """U+2028 in a JSON string is text, not a line break (str.splitlines would split there)."""
    path = tmp_path / "u2028.jsonl"
    path.write_text(json.dumps({"question": "a\u2028b", "answer": "1"}, ensure_ascii=False) + "\n\n")
    assert read_jsonl(path) == [{"question": "a\u2028b", "answer": "1"}]


@pytest.mark.parametrize("stage, key", [("train", "train.task"), ("eval", "eval.dataset"), ("sft", "sft.task")])
def test_mathrl_stops_with_one_line_before_any_model_loads(tmp_path, stage, key):
    path = broken_file(tmp_path, '{"question": "What is 1 + 1?", "answer": "2"')
    out = subprocess.run([sys.executable, "-c", PROBE, stage, f"{key}={path}", f"data.prepared_dir={tmp_path}/p",
                          f"output_dir={tmp_path}/runs", f"model.name_or_path={tmp_path}/no-model"],
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.split()[-4:] == ["exit", "1", "False", "False"], out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert str(path) in lines[0] and "line 3" in lines[0] and "not valid JSON" in lines[0]


def test_mathrl_names_a_record_without_an_answer_before_any_model_loads(tmp_path):
    path = broken_file(tmp_path, json.dumps({"id": "no-gold", "question": "q"}))
    out = subprocess.run([sys.executable, "-c", PROBE, "train", f"train.task={path}", f"output_dir={tmp_path}/runs"],
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.split()[-4:] == ["exit", "1", "False", "False"], out.stdout + out.stderr
    assert out.stderr.strip().count("\n") == 0 and "'no-gold' lacks answer" in out.stderr


def test_a_test_only_dataset_to_train_on_is_one_line_before_any_model_loads(tmp_path):
    out = subprocess.run([sys.executable, "-c", PROBE, "train", "train.task=gsm8k+math500",
                          f"output_dir={tmp_path}/runs", f"data.prepared_dir={tmp_path}/p"],
                         capture_output=True, text=True, timeout=120)
    assert out.stdout.split()[-4:] == ["exit", "1", "False", "False"], out.stdout + out.stderr
    assert out.stderr.strip().count("\n") == 0 and "train.task=gsm8k+math500: math500 has no train split" in out.stderr
    assert not (tmp_path / "p").exists()  # stopped before preparing anything


def test_rewards_score_stops_with_one_line(tmp_path):
    path = broken_file(tmp_path, '{"completion": "#### 2", "answer": "2"')
    out = subprocess.run([sys.executable, "-m", "rewards", "score", str(path)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "line 3" in lines[0] and "not valid JSON" in lines[0]
    assert not (tmp_path / "mine.scored.jsonl").exists()
