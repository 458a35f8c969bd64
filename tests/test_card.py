"""The model card (`final/README.md`) of a real tiny run, parsed with huggingface_hub, and
`mathrl push` with the Hub upload mocked (no network here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import get_args

import pytest
import yaml

from pipeline import cli
from pipeline.stages import run as run_stage
from pipeline.card import front_matter, run_evals
from pipeline.config import load_run_config
from pipeline.config.schema import Dataset
from pipeline.data.prepare import LICENCES

COMMAND = "mathrl run --config configs/cpu_tiny.yaml train.steps=2"


@pytest.fixture(scope="module")
def run_dir(tiny_setup):
    """A `mathrl run` of GRPO (2 steps, periodic eval at step 2) and the evals before and after."""
    overrides, root = tiny_setup
    cfg = load_run_config(None, [*overrides, "name=carded", "stages=[train, eval]", "train.steps=2",
                                 "train.questions_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=8",
                                 "train.eval_every=2", "train.eval_limit=3", "train.report_to=[]", "eval.limit=4",
                                 "eval.max_new_tokens=8", "eval.n_samples=2", "eval.temperature=1.0",
                                 "eval.ks=[1, 2]"])
    assert run_stage.main(cfg, command=COMMAND) == 0
    return root / "runs" / "carded"


def test_card_parses_as_a_hub_model_card_with_the_results(run_dir):
    from huggingface_hub import ModelCard

    card = ModelCard.load(run_dir / "final" / "README.md")
    data = card.data
    assert data.license == "other" and data.base_model is None  # a local base model is named in the text only
    assert {"mathrl", "grpo"} <= set(data.tags) and data.pipeline_tag == "text-generation"
    assert data.library_name == "transformers" and data.model_name == "carded"
    after = json.loads((run_dir / "eval" / "after" / "summary.json").read_text())
    greedy = json.loads((run_dir / "eval" / "greedy_after" / "summary.json").read_text())
    results = {(r.metric_type, r.metric_name.split(",")[0]): r for r in data.eval_results}
    assert results[("accuracy", "mean accuracy (sampled pass@1)")].metric_value == round(100 * after["accuracy"], 2)
    assert results[("pass@2", "pass@2")].metric_value == round(100 * after["pass@k"]["2"], 2)
    assert results[("accuracy", "greedy pass@1")].metric_value == round(100 * greedy["accuracy"], 2)
    assert len(data.eval_results) == 4  # accuracy, pass@2, maj@2 sampled + greedy accuracy; not the base model's
    assert all(r.dataset_name == "gsm-synth" and r.dataset_split == "test" for r in data.eval_results)


def test_card_text_has_settings_eval_table_data_licence_and_command(run_dir):
    final = run_dir / "final"
    text = (final / "README.md").read_text()
    cfg = load_run_config(run_dir / "config.yaml")
    assert "| steps | 2 x 2 questions x G = 2 completions" in text and f"lr {cfg.train.lr:g}" in text
    tags = [tag for tag, _ in run_evals(run_dir)]
    assert tags == ["before", "greedy_before", "after", "greedy_after"]  # not the periodic eval/step_2
    assert (run_dir / "eval" / "step_2" / "summary.json").is_file() and "step_2" not in text
    for tag in tags:
        assert f"[report](eval/{tag}/report.md)" in text
        assert (final / "eval" / tag / "report.md").read_text() == (run_dir / "eval" / tag / "report.md").read_text()
    before = json.loads((run_dir / "eval" / "before" / "summary.json").read_text())
    assert f"| base `{cfg.model.name_or_path}` | gsm-synth (test, 4 problems) | 2 samples at T = 1" in text
    assert f"| {100 * before['accuracy']:.1f} | pass@2" in text
    assert "| gsm-synth | training, evaluation | mathrl's generator | MIT" in text
    assert COMMAND in text and "[mathrl_config.yaml](mathrl_config.yaml)" in text
    assert yaml.safe_load((final / "mathrl_config.yaml").read_text()) == yaml.safe_load(
        (run_dir / "config.yaml").read_text())


def test_front_matter_names_hub_base_model_and_training_datasets():
    from huggingface_hub import ModelCard

    cfg = load_run_config(None, ["model.name_or_path=Qwen/Qwen2.5-0.5B-Instruct", "train.task=gsm8k+math",
                                 "model.lora=true"])
    card = ModelCard(front_matter(cfg, [], "apache-2.0") + "\n# x\n")
    assert card.data.base_model == "Qwen/Qwen2.5-0.5B-Instruct" and card.data.license == "apache-2.0"
    assert card.data.datasets == ["openai/gsm8k", "DigitalLearningGmbH/MATH-lighteval"]
    assert card.data.library_name == "peft" and not card.data.eval_results


def test_every_dataset_has_a_licence_with_its_files():
    root = Path(__file__).resolve().parents[1] / "data" / "raw"
    assert set(LICENCES) == set(get_args(Dataset))
    for name, lic in LICENCES.items():
        assert lic.spdx == "MIT"
        for f in lic.files:
            assert "MIT License" in (root / f).read_text(), (name, f)


def test_push_uploads_final_with_its_card(run_dir, monkeypatch, capsys):
    import huggingface_hub
    from huggingface_hub import ModelCard

    calls = {}

    def create_repo(repo_id, **kw):
        calls["create"] = (repo_id, kw)

    def upload_folder(**kw):  # what the Hub would receive, read at call time
        folder = kw["folder_path"]
        calls["upload"] = kw
        calls["card"] = ModelCard.load(f"{folder}/README.md")
        calls["files"] = sorted(p.name for p in Path(folder).iterdir())
        return type("CommitInfo", (), {"commit_url": f"https://hub.invalid/{kw['repo_id']}/commit/1"})()

    monkeypatch.setattr(huggingface_hub, "create_repo", create_repo)
    monkeypatch.setattr(huggingface_hub, "upload_folder", upload_folder)
    assert cli.main(["push", str(run_dir), "--repo", "someone/tiny-grpo", "--private"]) == 0
    assert calls["create"] == ("someone/tiny-grpo", {"private": True, "exist_ok": True, "repo_type": "model"})
    assert calls["upload"]["folder_path"] == str(run_dir / "final")
    assert calls["upload"]["repo_id"] == "someone/tiny-grpo"
    assert calls["card"].data.model_name == "carded"
    assert {"README.md", "config.json", "model.safetensors", "mathrl_config.yaml", "eval"} <= set(calls["files"])
    assert capsys.readouterr().out.strip() == "https://hub.invalid/someone/tiny-grpo/commit/1"


def test_push_without_a_card_is_one_line(tmp_path, monkeypatch, capsys):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub, "upload_folder", lambda **kw: pytest.fail("must not upload"))
    (tmp_path / "final").mkdir()
    assert cli.main(["push", str(tmp_path), "--repo", "someone/x"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no model card" in err[0] and "README.md" in err[0]


def test_an_extra_split_is_the_same_dataset_with_its_licence():
    from pipeline.card import _data_rows

    cfg = load_run_config(None, [])
    rows = _data_rows(cfg, [("test_longer_after", {"dataset": f"{cfg.train.task}/test_longer"})], "data/raw")
    assert len(rows) == 3 and rows[2].startswith(f"| {cfg.train.task} | training, evaluation | ")
    assert "the user's own file" not in "\n".join(rows)
