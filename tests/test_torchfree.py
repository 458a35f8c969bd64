"""`pip install mathrl` without the train extra: the pieces that must not need torch don't import
it, and `mathrl` answers a missing extra with one line. The install itself (wheel -> fresh venv
without torch -> rewards / sandbox CLIs) is `make test-torchfree` (tests/test_torchfree.sh, a CI
step); these are the fast checks that run with the suite."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import cli

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "datasets", "peft", "accelerate", "trl", "yaml", "pipeline", "evals")


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_adapters_and_clis_import_no_trainer_module():
    modules = ["rewards.integrations.trl", "rewards.integrations.verl", "rewards.integrations.verl_data",
               "rewards.__main__", "sandbox.__main__"]
    out = _run(f"import importlib, json, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
               f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []


def test_mathrl_without_torch_names_the_extra():
    """torch made unimportable in a child: the stage's import fails and mathrl says what to install."""
    out = _run("import sys; sys.modules['torch'] = None\nfrom pipeline.cli import main\n"
               "sys.exit(main(['sft', 'model.name_or_path=x']))")
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == ("mathrl: torch is not installed; the trainer needs the train extra: "
                                  "pip install 'mathrl[train]' (rewards and sandbox work without it)")


def test_other_missing_modules_are_not_blamed_on_the_extra(monkeypatch):
    def missing(name):
        raise ModuleNotFoundError("No module named 'vllm'", name="vllm")

    monkeypatch.setattr(cli, "stage_main", missing)
    with pytest.raises(ModuleNotFoundError, match="vllm"):
        cli.main(["vllm-serve"])


@pytest.mark.parametrize("gpu,extras", [("", "train,verl,test"), ("yes", "train,verl,test,vllm")])
def test_make_installs_the_train_extra(gpu, extras):
    out = subprocess.run(["make", "-n", f"HAS_GPU={gpu}", "VENV=/nonexistent", "/nonexistent/.installed"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert f"pip install -q -e '.[{extras}]'" in out
