"""The verl adapter: `compute_score` called the way verl's reward managers call it, and the
prepared-data -> verl parquet converter read back the way verl's RLHFDataset reads it.

verl itself (Ray, vLLM/SGLang, Megatron) is too heavy to install here, so the calls below are
recorded from its source (volcengine/verl): `NaiveRewardManager.__call__` (keywords
data_source / solution_str / ground_truth / extra_info, extra_info gaining "num_turns"; a dict
result must carry "score" and all its keys go to `reward_extra_info`), `BatchRewardManager`
(plural keywords, numpy object arrays), the prime manager (the same four by position, reads a
float), and `get_custom_reward_fn` (loads the file by path as "custom_module" and merges
`reward_kwargs` into every call). The row layout is the one `examples/data_preprocess/gsm8k.py`
and `math_dataset.py` write.
"""

from __future__ import annotations

import functools
import gzip
import importlib.util
import json
import subprocess
import sys
from itertools import islice
from pathlib import Path

import numpy as np
import pytest

from pipeline.data.prepare import normalise
from rewards import check
from rewards.integrations import verl as adapter
from rewards.integrations.gold import gold_answer
from rewards.integrations.verl_data import DATA_SOURCES, convert, verl_row

ROOT = Path(__file__).resolve().parents[1]
KEYS = {"score", "acc", "format", "pred", "reason"}

# One call as NaiveRewardManager makes it for a row of verl's own gsm8k parquet.
RECORDED_GSM8K_CALL = dict(
    data_source="openai/gsm8k",
    solution_str="Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
                 "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72",
    ground_truth="72",
    extra_info={"split": "train", "index": 0,
                "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72",
                "question": "Natalia sold clips to 48 of her friends in April, ...", "num_turns": None},
)


def _raw(dataset: str, split: str, path: str, n: int) -> list[dict]:
    with gzip.open(ROOT / "data/raw" / path, "rt") as f:
        return [normalise(dataset, split, i, json.loads(line)) for i, line in enumerate(islice(f, n))]


def test_recorded_naive_manager_call():
    result = adapter.compute_score(**RECORDED_GSM8K_CALL)
    assert result == {"score": 1.0, "acc": 1.0, "format": 1.0, "pred": "72", "reason": ""}
    wrong = adapter.compute_score(**{**RECORDED_GSM8K_CALL, "ground_truth": "71"})
    assert (wrong["score"], wrong["pred"], wrong["reason"]) == (0.0, "72", "not equal")


@pytest.mark.parametrize("response,gold,expected", [
    ("The answer is \\boxed{\\frac{1}{2}}.", "0.5", (1.0, 1.0, "\\frac{1}{2}", "")),
    ("I think it is 7, maybe", "7", (0.0, 0.0, "", "no answer found")),  # math style wants a box
    ("\\boxed{3} and again \\boxed{3}", "3", (1.0, 0.0, "3", "")),  # two boxes: no format bonus
    ("\\boxed{3}", None, (0.0, 1.0, "", "no gold answer")),
    (None, "3", (0.0, 0.0, "", "no answer found")),  # a broken decode never raises
])
def test_every_call_returns_the_same_keys(response, gold, expected):
    """verl appends every key to a per-key list, so a key missing on one row would misalign them."""
    r = adapter.compute_score("DigitalLearningGmbH/MATH-lighteval", response, gold, {"num_turns": None})
    assert set(r) == KEYS
    assert (r["acc"], r["format"], r["pred"], r["reason"]) == expected
    assert r["score"] == r["acc"]


def test_data_sources_pick_the_style():
    gsm = "Step 1: 2 + 2 = 4.\nSo the total is 4."
    # every style reads the last answer statement; with none, gsm8k style reads a plain number
    # in the last sentence and math style only math: the source decides which
    assert adapter.compute_score("openai/gsm8k", gsm, "4")["acc"] == 1.0
    for source in ("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500",
                   "math_dapo", "aime2024", "numina_olympiads"):
        assert adapter.compute_score(source, gsm, "4")["acc"] == 0.0, source
        assert adapter.compute_score(source, gsm + " \\boxed{5}", "5")["acc"] == 1.0, source
    assert adapter.compute_score("my/dataset", gsm, "4", {"style": "gsm8k"})["acc"] == 1.0
    assert adapter.compute_score("openai/gsm8k", gsm, "4", {"style": "math"})["acc"] == 0.0
    for prepared, (source, style) in DATA_SOURCES.items():
        assert adapter.style_for(source) == style, prepared


def test_unknown_data_source_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown data_source 'my/dataset'.*extra_info"):
        adapter.compute_score("my/dataset", "\\boxed{1}", "1", {"split": "train"})
    with pytest.raises(ValueError, match="extra_info\\['style'\\]"):
        adapter.compute_score("openai/gsm8k", "#### 1", "1", {"style": "latex"})


def test_gold_may_be_a_whole_solution():
    """Raw GSM8K `answer` / MATH `solution` text as ground_truth still compares the final answer."""
    assert adapter.compute_score("openai/gsm8k", "#### 1234", "so 1,000 + 234 = 1,234\n#### 1,234")["acc"] == 1.0
    assert adapter.compute_score("lighteval/MATH", "\\boxed{1/2}", "Thus $\\boxed{\\frac12}$.")["acc"] == 1.0


@pytest.mark.parametrize("value,expected", [
    ("  72 ", "72"), (72, "72"), (0.5, "0.5"), ("#### 1,234", "1234"), ("so \\boxed{\\frac12}.", "\\frac12"),
    (None, None), ("", None), ("####  ", None), ("\\boxed{}", None), (float("nan"), None),
    # boxes side by side are one answer, as the data stage reads MATH golds
    ("so $\\boxed{-2}$ and $\\boxed{1}$.", "-2, 1"),
])
def test_gold_answer_forms(value, expected):
    assert gold_answer(value) == expected


@pytest.mark.parametrize("value", [["1", "2"], True, {"answer": "1"}])
def test_gold_answer_refuses_other_types(value):
    with pytest.raises(TypeError, match="gold answer must be text or a number"):
        gold_answer(value)


def test_format_weight_through_reward_kwargs_as_verl_merges_them():
    merged = functools.partial(lambda raw, extra, *a, **kw: raw(*a, **{**kw, **extra}),
                               adapter.compute_score, {"format_weight": 0.1})
    assert merged(**RECORDED_GSM8K_CALL)["score"] == pytest.approx(1.1)
    bare = {**RECORDED_GSM8K_CALL, "solution_str": "The total is 72"}
    assert merged(**bare) == adapter.compute_score(**bare)  # no "####" line: no bonus


def test_prime_manager_call_is_positional_and_reads_a_float():
    call = functools.partial(adapter.compute_score_float, "openai/gsm8k", "#### 5", "5", {"index": 3})
    assert call() == 1.0 and isinstance(call(), float)


def test_batch_manager_call_matches_row_by_row():
    sources = np.array(["openai/gsm8k", "HuggingFaceH4/MATH-500", "openai/gsm8k"], dtype=object)
    responses = ["#### 3", "so \\boxed{\\sqrt{4}}", "no idea"]
    golds = ["3", "2", "9"]
    extras = np.array([{"index": i} for i in range(3)], dtype=object)
    out = adapter.compute_score_batch(data_sources=sources, solution_strs=responses, ground_truths=golds,
                                      extra_infos=extras)
    assert out == [adapter.compute_score(s, r, g, e) for s, r, g, e in zip(sources, responses, golds, extras)]
    assert [r["score"] for r in out] == [1.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="2 ground_truths"):
        adapter.compute_score_batch(sources, responses, golds[:2])


def test_converter_writes_verls_layout_and_scores_the_references(tmp_path):
    import datasets  # verl's RLHFDataset reads the parquet through it

    records = {"gsm8k": _raw("gsm8k", "test", "gsm8k/test.jsonl.gz", 25),
               "math500": _raw("math500", "test", "math/math500/test.jsonl.gz", 25)}
    for name, recs in records.items():
        src = tmp_path / "prepared" / name / "test.jsonl"
        src.parent.mkdir(parents=True)
        src.write_text("".join(json.dumps(r) + "\n" for r in recs))
        assert convert(src, src.with_suffix(".parquet")) == len(recs)
        ds = datasets.load_dataset("parquet", data_files=str(src.with_suffix(".parquet")), split="train")
        assert set(ds.column_names) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
        for i, (row, rec) in enumerate(zip(ds, recs)):
            assert row["data_source"] == DATA_SOURCES[name][0] and row["ability"] == "math"
            assert row["reward_model"] == {"style": "rule", "ground_truth": rec["answer"]}
            [msg] = row["prompt"]
            assert msg["role"] == "user" and msg["content"].startswith(rec["question"])
            assert (row["extra_info"]["index"], row["extra_info"]["id"]) == (i, rec["id"])
            extra = {**row["extra_info"], "num_turns": None}  # what NaiveRewardManager adds
            ok = adapter.compute_score(data_source=row["data_source"], solution_str=rec["solution"],
                                       ground_truth=row["reward_model"]["ground_truth"], extra_info=extra)
            assert ok["score"] == 1.0, (rec["id"], ok)
            style = DATA_SOURCES[name][1]
            assert ok["pred"] == check(rec["solution"], rec["answer"], style).pred
            bad = adapter.compute_score(row["data_source"], "#### 123456789 \\boxed{123456789}",
                                        row["reward_model"]["ground_truth"], extra)
            assert bad["score"] == 0.0


def test_converter_refuses_bad_records():
    rec = _raw("gsm8k", "test", "gsm8k/test.jsonl.gz", 1)[0]
    with pytest.raises(ValueError, match="unknown source 'mydata'"):
        verl_row({**rec, "source": "mydata"}, 0)
    with pytest.raises(ValueError, match="no gold answer"):
        verl_row({**rec, "answer": None}, 0)
    assert verl_row(rec, 0, instruction="")["prompt"][0]["content"] == rec["question"]


def test_cli_and_loading_the_file_by_path_as_verl_does(tmp_path):
    src = tmp_path / "math500" / "test.jsonl"
    src.parent.mkdir()
    recs = _raw("math500", "test", "math/math500/test.jsonl.gz", 3)
    src.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = subprocess.run([sys.executable, "-m", "rewards", "to-verl", str(src), "--out-dir", str(tmp_path / "v")],
                         capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert (tmp_path / "v" / "math500" / "test.parquet").is_file() and "(3 rows)" in out
    path = out.split("custom_reward_function.path=")[1].split()[0]
    spec = importlib.util.spec_from_file_location("custom_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.compute_score("HuggingFaceH4/MATH-500", recs[0]["solution"], recs[0]["answer"])["score"] == 1.0
    missing = subprocess.run([sys.executable, "-m", "rewards", "to-verl", str(tmp_path / "nope.jsonl")],
                             capture_output=True, text=True, cwd=ROOT)
    assert missing.returncode == 1 and "to-verl:" in missing.stderr and "Traceback" not in missing.stderr
