"""The `mathrl` command line: stage errors are one readable line, not a traceback."""

import subprocess
import sys


def _run(*args):
    return subprocess.run([sys.executable, "-m", "pipeline", *args], capture_output=True, text=True, timeout=120)


def test_missing_model_is_a_clear_error(tmp_path):
    out = _run("eval", "--limit", "3", f"model.name_or_path={tmp_path}/no-model", f"data.prepared_dir={tmp_path}/p")
    assert out.returncode == 1
    assert "no-model" in out.stderr and "Traceback" not in out.stderr


def test_missing_data_file_is_a_clear_error(tmp_path):
    out = _run("train", f"data.prepared_dir={tmp_path}", f"output_dir={tmp_path}/runs",
               f"train.task={tmp_path}/mine.jsonl", f"model.name_or_path={tmp_path}/no-model")
    assert out.returncode == 1 and "data file not found" in out.stderr and "mine.jsonl" in out.stderr
    assert "Traceback" not in out.stderr


def test_config_lists_documented_keys():
    out = _run("config")
    assert out.returncode == 0 and "train.beta (float, default 0.04): KL coefficient" in out.stdout
