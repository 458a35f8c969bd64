"""`mathrl run` (what `make train` calls): stages in order, a report, and the result line last."""

import re

import pytest

from pipeline import run_all
from pipeline.config import ConfigError, load_run_config


def test_run_prints_result_line_last_and_writes_report(tiny_setup, capsys):
    overrides, root = tiny_setup
    cfg = load_run_config(None, [*overrides, "name=run-all", "stages=[sft, train, eval]",
                                 f"sft.init={root}/tiny", f"sft.output={root}/run-all-sft",
                                 f"model.name_or_path={root}/run-all-sft", "sft.steps=3", "sft.eval_limit=0",
                                 "train.steps=1", "train.questions_per_step=2", "rollout.group_size=2",
                                 "rollout.max_new_tokens=8", "eval.limit=3", "eval.max_new_tokens=8",
                                 "eval.n_samples=2", "eval.temperature=1.0", "eval.ks=[1, 2]"])
    assert run_all.main(cfg) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(r"result: task=gsm-synth before=[01]\.\d{4} after=[01]\.\d{4} minutes=\d+\.\d", lines[-1])
    report = (root / "runs" / "run-all" / "report.md").read_text()
    assert "mean accuracy of 2 samples at temperature 1" in report and "greedy accuracy" in report
    for sub in ("before", "after", "greedy_before", "greedy_after"):
        assert (root / "runs" / "run-all" / "eval" / sub / "summary.json").is_file()


def test_unknown_stage_is_refused(tiny_setup):
    with pytest.raises(ConfigError, match="stages: unknown stage.*deploy"):
        load_run_config(None, [*tiny_setup[0], "stages=[train, deploy]"])
