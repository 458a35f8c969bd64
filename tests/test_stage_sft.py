"""`mathrl sft`: trains, saves, has the evals grade the saved model, and skips what is current."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from pipeline.data.problems import load_problems
from pipeline.data.synth import num_steps
from pipeline.models import load_policy
from pipeline.stages import sft
from tests.helpers import sft_cfg


def test_the_reported_accuracy_is_the_evals_number(tiny_setup, tmp_path, capsys):
    from evals.evaluate import evaluate_model

    cfg = sft_cfg(tiny_setup, tmp_path, "sft.steps=3", "sft.eval_limit=4")
    assert sft.main(cfg) == 0
    model, tok = load_policy(cfg.sft.output)
    assert tok.eos_token == "<|im_end|>"
    out = tmp_path / "sft"
    report = json.loads((out / "sft_report.json").read_text())
    summary = json.loads((out / "sft_eval" / "summary.json").read_text())
    assert report["steps"] == 3 and report["n"] == summary["n_problems"] == 4
    assert report["accuracy"] == summary["accuracy"] and summary["greedy"] and summary["dataset"] == "gsm-synth"
    again = evaluate_model(sft.eval_config(cfg, "gsm-synth"), cfg.sft.output, tmp_path / "again", split="test")
    assert again["accuracy"] == report["accuracy"]  # what `mathrl eval` of the saved model computes
    problems = load_problems(cfg.data.prepared_dir, "gsm-synth", "test", limit=4)
    counts = Counter(str(num_steps(p)) for p in problems)
    assert set(report["by_steps"]) == set(counts)  # by steps: the same problems, weighted back to the total
    weighted = sum(counts[k] * acc for k, acc in report["by_steps"].items()) / 4
    assert weighted == pytest.approx(report["accuracy"], abs=1e-3)
    printed = capsys.readouterr().out
    assert "with the evals harness" in printed and "the first 4 test problems of gsm-synth" in printed
    assert "greedy accuracy on 4 test problems" in printed


def test_skips_what_is_current_and_redoes_what_is_not(tiny_setup, tmp_path, capsys):
    cfg = sft_cfg(tiny_setup, tmp_path, "sft.steps=2", "sft.eval_limit=2")
    sft.main(cfg)
    weights, summary = tmp_path / "sft" / "model.safetensors", tmp_path / "sft" / "sft_eval" / "summary.json"
    before, evaluated = weights.stat().st_mtime_ns, summary.stat().st_mtime_ns
    capsys.readouterr()
    sft.main(cfg)
    printed = capsys.readouterr().out
    assert "skipping the training" in printed and "sft_eval is up to date" in printed
    assert weights.stat().st_mtime_ns == before and summary.stat().st_mtime_ns == evaluated
    # an eval setting: evaluated again, not trained again
    sft.main(sft_cfg(tiny_setup, tmp_path, "sft.steps=2", "sft.eval_limit=3"))
    printed = capsys.readouterr().out
    assert "skipping the training" in printed and "greedy accuracy on 3 test problems" in printed
    assert weights.stat().st_mtime_ns == before and summary.stat().st_mtime_ns != evaluated
    assert json.loads((tmp_path / "sft" / "sft_report.json").read_text())["n"] == 3
    # a training setting: trained again; eval_limit=0 leaves no accuracy in the report
    sft.main(sft_cfg(tiny_setup, tmp_path, "sft.steps=3", "sft.eval_limit=0"))
    assert "skipping" not in capsys.readouterr().out and weights.stat().st_mtime_ns != before
    report = json.loads((tmp_path / "sft" / "sft_report.json").read_text())
    assert report["steps"] == 3 and "accuracy" not in report


def test_a_rebuilt_init_model_is_trained_on_again(tiny_setup, tmp_path):
    from pipeline.stages import build_tiny

    base = tmp_path / "base"
    cfg = sft_cfg(tiny_setup, tmp_path, "sft.steps=2", "sft.eval_limit=0", f"model.tiny_dir={base}", f"sft.init={base}")
    build_tiny.main(cfg)
    first = sft.fingerprint(cfg)
    assert sft.fingerprint(cfg) == first
    build_tiny.main(sft_cfg(tiny_setup, tmp_path, f"model.tiny_dir={base}", "seed=1"))  # same path, other weights
    assert sft.fingerprint(cfg) != first


def test_builds_the_tiny_base_when_init_is_the_missing_tiny_dir(tiny_setup, tmp_path):
    fresh = tmp_path / "fresh-base"
    cfg = sft_cfg(tiny_setup, tmp_path, "sft.steps=2", "sft.eval_limit=0", f"model.tiny_dir={fresh}",
                  f"sft.init={fresh}")
    assert sft.main(cfg) == 0
    assert (fresh / "tiny_build.json").is_file()
    assert load_policy(cfg.sft.output)[0].config.model_type == "qwen2"


def test_a_jsonl_task_is_evaluated_on_the_test_file_beside_it(tmp_path):
    from pipeline.config import load_run_config

    (tmp_path / "train.jsonl").write_text("")
    cfg = load_run_config(None, [f"sft.task={tmp_path}/train.jsonl"])
    assert sft.eval_dataset(cfg) is None
    (tmp_path / "test.jsonl").write_text("")
    assert sft.eval_dataset(cfg) == str(tmp_path / "test.jsonl")
    assert sft.eval_dataset(load_run_config(None, [f"sft.task={tmp_path}/test.jsonl"])) is None
