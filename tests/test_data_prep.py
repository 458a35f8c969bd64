"""The data stage on the shipped raw files: counts, gold answers, idempotence, clear errors."""

import json
import re
from typing import get_args

import pytest

from pipeline.config import ConfigError, DataConfig
from pipeline.config.schema import Dataset
from pipeline.data.prepare import SOURCES, gsm8k_gold, math_level, normalise, prepare
from pipeline.data.problems import SYNTH, DataError, load_problems, read_jsonl
from rewards.answers.boxed import last_boxed


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    out = tmp_path_factory.mktemp("prepared")
    cfg = DataConfig(prepared_dir=str(out), datasets=["gsm8k", "math", "math500"])
    summary = prepare(cfg)
    return cfg, summary


def test_counts(prepared):
    _, summary = prepared
    assert summary["gsm8k"] == {"train": 7473, "test": 1319}
    assert summary["math"] == {"train": 7500, "test": 5000}
    assert summary["math500"] == {"test": 500}


def test_every_record_has_gold_and_schema(prepared):
    cfg, _ = prepared
    for ds, splits in [("gsm8k", ["train", "test"]), ("math", ["train", "test"]), ("math500", ["test"])]:
        for split in splits:
            records = load_problems(cfg.prepared_dir, ds, split)
            assert all(r["answer"] and r["question"] and r["solution"] for r in records)
            assert len({r["id"] for r in records}) == len(records)
            if ds != "gsm8k":
                assert all(r["subject"] for r in records)


def test_math_level_question_mark_kept_as_null(prepared):
    cfg, _ = prepared
    by_id = {r["id"]: r for r in load_problems(cfg.prepared_dir, "math", "train")}
    assert by_id["train/geometry/377.json"]["level"] is None
    assert by_id["train/algebra/0.json"]["level"] in range(1, 6)


def test_rerun_is_noop(prepared, capsys):
    cfg, _ = prepared
    before = (Proj := __import__("pathlib").Path)(cfg.prepared_dir, "gsm8k", "train.jsonl").stat().st_mtime_ns
    prepare(cfg)
    assert "up to date" in capsys.readouterr().out
    assert Proj(cfg.prepared_dir, "gsm8k", "train.jsonl").stat().st_mtime_ns == before


def test_gsm8k_gold_thousands_separator():
    assert gsm8k_gold("so 1,000 + 234 = <<1000+234=1234>>1,234\n#### 1,234") == "1234"
    assert gsm8k_gold("no marker") is None
    rec = normalise("gsm8k", "train", 0, {"question": "q", "answer": "x\n#### 5"})
    assert rec["answer"] == "5"


@pytest.mark.parametrize("solution, gold", [
    (r"so $\boxed{\frac{1}{2}}$.", r"\frac{1}{2}"),
    (r"$\boxed{\begin{pmatrix} 1 \\ 2 \end{pmatrix}}$", r"\begin{pmatrix} 1 \\ 2 \end{pmatrix}"),
    (r"first \boxed{1}, finally \fbox{x^{2}}", "x^{2}"),
    (r"the answer is $\boxed 5$.", "5"),
    (r"nested \boxed{\sqrt{\frac{a}{b}}}", r"\sqrt{\frac{a}{b}}"),
    (r"unclosed \boxed{3", None),
])
def test_last_boxed(solution, gold):
    assert last_boxed(solution) == gold


def test_real_math_records(prepared):
    cfg, _ = prepared
    by_id = {r["id"]: r for r in load_problems(cfg.prepared_dir, "math", "test")}
    # A real record whose answer has nested braces.
    nested = [r for r in by_id.values() if r["answer"].count("{") >= 2]
    assert len(nested) > 100
    assert by_id["test/algebra/1.json"]["answer"] == "2"
    train = load_problems(cfg.prepared_dir, "math", "train")
    # The real release has two solutions ending in "\boxed 2$" / "\boxed 9$" (no braces).
    unbraced = [r for r in train if re.search(r"\\boxed \d", r["solution"])]
    assert sorted(r["answer"] for r in unbraced) == sorted(
        re.search(r"\\boxed (\d+)", r["solution"]).group(1) for r in unbraced)
    assert len(unbraced) == 2


def test_math500_gold_matches_boxed(prepared):
    cfg, _ = prepared
    records = load_problems(cfg.prepared_dir, "math500", "test")
    same = sum(r["answer"] == (last_boxed(r["solution"]) or "").strip() for r in records)
    assert same >= 490  # the shipped `answer` field is used; it agrees with the box almost always


def test_math_level():
    assert (math_level("Level 3"), math_level("Level ?"), math_level(4)) == (3, None, 4)


def test_missing_raw_file_names_path(tmp_path):
    cfg = DataConfig(raw_dir=str(tmp_path), prepared_dir=str(tmp_path / "p"), datasets=["gsm8k"])
    with pytest.raises(DataError) as e:
        prepare(cfg)
    assert str(tmp_path / "gsm8k" / "train.jsonl.gz") in str(e.value) and "data.source=hub" in str(e.value)


def test_missing_prepared_file_says_make_data(tmp_path):
    with pytest.raises(DataError, match="make data"):
        load_problems(str(tmp_path), "gsm8k", "test")


def test_unknown_dataset(tmp_path):
    with pytest.raises(ConfigError, match="data.datasets.*mmlu.*gsm-synth"):
        prepare(DataConfig(prepared_dir=str(tmp_path), datasets=["mmlu"]))


def test_config_dataset_names_are_the_prepared_ones():
    assert set(get_args(Dataset)) == {*SOURCES, SYNTH}


def test_one_loader_for_every_stage(tmp_path):
    """A JSONL path is that file for any split; ids are filled in; a record without an answer is
    named; gsm-synth is generated in memory when asked and its prepared files are missing."""
    path = tmp_path / "mine.jsonl"
    path.write_text('{"question": "1+1?", "answer": "2"}\n{"id": "b", "question": "2+2?", "answer": "4"}\n')
    assert [p["id"] for p in load_problems("unused", str(path), "test")] == [f"{path}/test/0", "b"]
    assert load_problems("unused", str(path), "train", limit=1)[0]["question"] == "1+1?"
    path.write_text('{"id": "x", "question": "1+1?", "answer": ""}\n')
    with pytest.raises(DataError, match="'x' lacks answer"):
        load_problems("unused", str(path), "train")
    synth = DataConfig(prepared_dir=str(tmp_path / "none"), synth_train_size=5, synth_test_size=3)
    assert len(load_problems(synth.prepared_dir, "gsm-synth", "test", synth=synth)) == 3
    with pytest.raises(DataError, match="make data"):
        load_problems(synth.prepared_dir, "gsm-synth", "test")


def test_gsm_synth_prepared_from_other_settings_is_refused(tmp_path):
    """A stage that generates gsm-synth from its config never trains on files another config
    prepared (a seed grid once ran an hour on `mathrl data`'s defaults instead of its config's)."""
    made = DataConfig(prepared_dir=str(tmp_path), datasets=[SYNTH], synth_train_size=20, synth_test_size=4)
    prepare(made)
    assert len(load_problems(made.prepared_dir, SYNTH, "train", synth=made)) == 20
    other = DataConfig(prepared_dir=str(tmp_path), datasets=[SYNTH], synth_train_size=20, synth_test_size=4,
                       synth_max_number=50)
    with pytest.raises(DataError, match="other data.synth_"):
        load_problems(other.prepared_dir, SYNTH, "train", synth=other)
    prepare(other)  # what the message says to do
    assert len(load_problems(other.prepared_dir, SYNTH, "train", synth=other)) == 20


@pytest.mark.parametrize("stage, overrides, expected", [
    ("eval", ["eval.dataset=math500"], ["math500"]),
    ("eval", ["eval.dataset=math500", "prompt.few_shot=4"], ["math", "math500"]),  # few-shot from MATH train
    ("train", ["train.task=gsm8k+math"], ["gsm8k", "math"]),
    ("train", ["train.task=gsm8k", "train.eval_every=5", "prompt.few_shot=2"], ["gsm8k"]),
    ("run", ["stages=[build-tiny, sft, train, eval]", "eval.dataset=math500"], ["math500", "gsm-synth"]),
    ("run", ["stages=[train]", "eval.dataset=math500"], ["gsm-synth"]),
    ("experiment", ["stages=[train, eval]", "train.task=gsm8k"], ["gsm8k"]),
    ("seed-grid", ["stages=[train]", "eval.dataset=math500"], ["math500", "gsm-synth"]),  # SFT and evals too
    ("compare-objectives", ["stages=[train]", "eval.dataset=math500"], ["math500", "gsm-synth"]),
    ("compare-sampling", ["stages=[train]", "eval.dataset=math500"], ["math500", "gsm-synth"]),
    ("eval", ["eval.dataset=my/own.jsonl"], []),
])
def test_datasets_for_names_what_each_stage_reads(stage, overrides, expected):
    from pipeline.config import load_run_config
    from pipeline.data.prepare import datasets_for

    assert datasets_for(load_run_config(None, overrides), stage) == expected


def test_eval_stage_prepares_its_dataset_on_the_default_config(tiny_setup, tmp_path, capsys):
    """`make eval eval.dataset=math500` on the CPU default config, nothing prepared: the stage
    prepares MATH-500 from the shipped data/raw (and only that) and evaluates."""
    from pathlib import Path

    from pipeline import cli

    _, root = tiny_setup
    config = Path(__file__).resolve().parents[1] / "configs" / "cpu_tiny.yaml"
    prepared = tmp_path / "prepared"
    code = cli.main(["eval", "--config", str(config), "--limit", "3", "eval.dataset=math500",
                     f"data.prepared_dir={prepared}", f"model.name_or_path={root}/tiny", "eval.n_samples=1",
                     "eval.temperature=0", "eval.ks=[1]", "eval.max_new_tokens=8",
                     f"eval.output_dir={tmp_path}/eval",
                     # in-process, torch is loaded already: the config's pinned kernels (cpu_isa=avx2) can only
                     # be set before that, so this run keeps the loaded ones (tests/test_determinism.py pins them)
                     "cpu_isa="])
    assert code == 0, capsys.readouterr()
    assert len(read_jsonl(prepared / "math500" / "test.jsonl")) == 500
    assert sorted(p.name for p in prepared.iterdir() if p.is_dir()) == ["math500"]
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    assert summary["dataset"] == "math500" and summary["n_problems"] == 3
