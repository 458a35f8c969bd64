"""train.report_to: TensorBoard, W&B, Trackio and MLflow each get every metrics.jsonl row and the
resolved config, read back here from each tracker's local store (W&B offline, Trackio's SQLite
store, MLflow's file store), offline. One real GRPO run on the tiny model (2 steps, then resumed
to 3) in a subprocess, so the trackers' environment variables and global state stay out of this
process."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest

from pipeline.stages import train as train_stage
from pipeline.config import ConfigError, load_run_config
from pipeline.config.schema import Tracker
from pipeline.grpo import trackers
from pipeline.grpo.run_log import RunLog, read_metrics

ROOT = Path(__file__).resolve().parents[1]
ALL = ["tensorboard", "wandb", "trackio", "mlflow"]
PROJECT = "mathrl-test"


def _env(tmp: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline",
           "WANDB_SILENT": "true", "TRACKIO_DIR": str(tmp / "trackio"),
           "MLFLOW_TRACKING_URI": f"file:{tmp / 'mlruns'}", "MLFLOW_ALLOW_FILE_STORE": "true"}
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):  # keep W&B out of ~/.config, ~/.cache
        env[var] = str(tmp / var.lower())
    env.pop("WANDB_DIR", None)  # the default: W&B writes under the run directory
    return env


@pytest.fixture(scope="module")
def run(tiny_setup, tmp_path_factory):
    """(run dir, store dir, resolved config): 2 steps with every tracker, then resumed to 3."""
    overrides, _ = tiny_setup
    tmp = tmp_path_factory.mktemp("trackers")
    common = [*overrides, f"output_dir={tmp}/runs", "name=tracked", "train.questions_per_step=2",
              "rollout.group_size=2", "rollout.max_new_tokens=8", "train.eval_every=2", "train.eval_limit=4",
              "eval.max_new_tokens=8", "train.save_every=1", f"train.report_to=[{','.join(ALL)}]",
              f"train.tracker_project={PROJECT}"]
    for steps in (2, 3):
        out = subprocess.run([sys.executable, "-m", "pipeline", "train", *common, f"train.steps={steps}"],
                             env=_env(tmp), capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    run_dir = tmp / "runs" / "tracked"
    assert [r["step"] for r in read_metrics(run_dir)] == [1, 2, 3]
    return run_dir, tmp, load_run_config(run_dir / "config.yaml")


def _expected(run_dir: Path) -> dict[int, dict]:
    """metrics.jsonl as {step: {key: value}}, without the nulls (non-finite values)."""
    return {r["step"]: {k: v for k, v in r.items() if k != "step" and v is not None} for r in read_metrics(run_dir)}


def _assert_same(got: dict[int, dict], run_dir: Path, rel: float = 1e-9) -> None:
    expected = _expected(run_dir)
    assert sorted(got) == sorted(expected)
    assert "eval/accuracy" in expected[2] and "eval/accuracy" not in expected[1]  # keys vary by step
    for step, row in expected.items():
        assert set(got[step]) == set(row), (step, set(got[step]) ^ set(row))
        for key, value in row.items():
            assert got[step][key] == pytest.approx(value, rel=rel, abs=1e-12), (step, key)


def test_tensorboard_gets_every_metric(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir, _, cfg = run
    acc = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    got: dict[int, dict] = {}
    for tag in acc.Tags()["scalars"]:
        for event in acc.Scalars(tag):
            got.setdefault(event.step, {})[tag] = event.value
    _assert_same(got, run_dir, rel=1e-6)  # TensorBoard stores float32
    text = acc.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert f"tracker_project: {PROJECT}" in text and "report_to:" in text


def _wandb_records(path: Path) -> list[bytes]:
    """The records of a .wandb file: a 7-byte W&B header, then LevelDB's log format (32 KiB blocks of
    chunks, each with a 7-byte header: crc32, length, type 1=full 2=first 3=middle 4=last)."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    records, chunk, pos, block = [], b"", 7, 32768
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # the block's tail is padding
            pos += block - pos % block
            continue
        length, kind = struct.unpack("<HB", data[pos + 4:pos + 7])
        chunk += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            records.append(chunk)
            chunk = b""
    return records


def test_wandb_offline_gets_every_metric_and_the_config(run):
    from wandb.proto import wandb_internal_pb2 as pb

    run_dir, _, cfg = run
    run_id = json.loads((run_dir / "trackers.json").read_text())["wandb"]
    files = sorted((run_dir / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"))
    assert len(files) == 2  # the first attempt and the resumed one, one W&B run id
    got, config = {}, {}
    for path in files:
        for data in _wandb_records(path):
            rec = pb.Record()
            rec.ParseFromString(data)
            kind = rec.WhichOneof("record_type")
            if kind == "history":
                items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item}
                got[rec.history.step.num] = {k: v for k, v in items.items() if not k.startswith("_")}
            elif kind == "run":
                assert rec.run.project == PROJECT and rec.run.display_name == "tracked"
                config.update({i.key: json.loads(i.value_json) for i in rec.run.config.update})
    _assert_same(got, run_dir)
    assert config["train"]["lr"] == cfg.train.lr and config["rollout"]["group_size"] == 2


def test_trackio_local_store_gets_every_metric_and_the_config(run):
    run_dir, tmp, cfg = run
    code = ("import json, sys; from trackio.sqlite_storage import SQLiteStorage as S; "
            f"print(json.dumps([S.get_runs({PROJECT!r}), S.get_logs({PROJECT!r}, 'tracked'), "
            f"S.get_run_config({PROJECT!r}, 'tracked')]))")
    out = subprocess.run([sys.executable, "-c", code], env=_env(tmp), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    runs, logs, config = json.loads(out.stdout.strip().splitlines()[-1])
    assert runs == ["tracked"]  # the resumed attempt continued the same run
    got = {row["step"]: {k: v for k, v in row.items() if k not in ("step", "timestamp")} for row in logs}
    _assert_same(got, run_dir)
    assert config["train"]["lr"] == cfg.train.lr and config["name"] == "tracked"


def test_mlflow_file_store_gets_every_metric_and_the_config(run, monkeypatch):
    from mlflow.tracking import MlflowClient

    run_dir, tmp, cfg = run
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # mlflow 3 refuses file stores without it
    client = MlflowClient(tracking_uri=f"file:{tmp / 'mlruns'}")
    runs = client.search_runs([client.get_experiment_by_name(PROJECT).experiment_id])
    assert len(runs) == 1 and runs[0].info.run_name == "tracked"  # the resumed attempt reopened it
    got: dict[int, dict] = {}
    for key in runs[0].data.metrics:
        for m in client.get_metric_history(runs[0].info.run_id, key):
            got.setdefault(m.step, {})[key] = m.value
    _assert_same(got, run_dir)
    params = runs[0].data.params
    assert params["train.lr"] == str(cfg.train.lr) and params["rollout.group_size"] == "2"
    assert params["train.report_to"] == str(ALL)


def test_mathrl_train_ends_with_a_model_card(run):
    from huggingface_hub import ModelCard

    run_dir, _, cfg = run
    card = ModelCard.load(run_dir / "final" / "README.md")
    assert card.data.tags[:2] == ["mathrl", "grpo"] and not card.data.eval_results  # no eval of final/ yet
    text = card.text
    assert "No evaluation of this model yet" in text and "step_2" not in text  # periodic evals are not final/'s
    assert "mathrl train " in text and f"train.report_to=[{','.join(ALL)}]" in text  # the command as typed


class Recorder:
    def __init__(self):
        self.rows, self.closed = [], False

    def log(self, step, metrics):
        self.rows.append({"step": step, **metrics})

    def close(self):
        self.closed = True


def test_run_log_hands_trackers_the_metrics_jsonl_rows(tmp_path):
    rec = Recorder()
    log = RunLog(tmp_path, trackers=[rec])
    log.log(1, {"loss": 0.5, "kl": float("nan"), "groups": 4})
    log.log(2, {"loss": float("inf"), "eval/accuracy": 0.25})
    log.close()
    assert rec.rows == read_metrics(tmp_path) and rec.closed
    assert rec.rows[0]["kl"] is None and rec.rows[1]["loss"] is None  # non-finite: null, as in the file


def test_missing_tracker_stops_before_loading_with_one_line(tmp_path, monkeypatch, capsys):
    # loaded before find_spec is patched below, so only the tracker check sees wandb missing
    from pipeline.grpo import trainer  # noqa: F401

    real = trackers.importlib.util.find_spec
    monkeypatch.setattr(trackers.importlib.util, "find_spec", lambda name: None if name == "wandb" else real(name))
    cfg = load_run_config(None, [f"output_dir={tmp_path}", f"model.name_or_path={tmp_path}/no-model",
                                 "train.report_to=[tensorboard,wandb]"])
    assert train_stage.main(cfg) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out == ["mathrl train: train.report_to names wandb, which is not installed: pip install wandb "
                   "(or remove it from train.report_to)"]
    assert not (tmp_path / "default").exists()  # nothing was written or loaded


def test_default_is_tensorboard_when_installed(monkeypatch):
    cfg = load_run_config(None, [])
    assert cfg.train.report_to == ["auto"]
    assert trackers.resolve(cfg.train.report_to) == ["tensorboard"]  # installed by the test extra
    assert trackers.resolve([]) == trackers.resolve(["none"]) == []
    real = trackers.importlib.util.find_spec
    monkeypatch.setattr(trackers.importlib.util, "find_spec", lambda n: None if n == "tensorboard" else real(n))
    assert trackers.resolve(["auto"]) == []  # not installed: metrics.jsonl only, no error
    with pytest.raises(trackers.TrackerError, match="pip install tensorboard"):
        trackers.resolve(["tensorboard"])


@pytest.mark.parametrize("value, message", [("[wandb,comet]", "not allowed"), ("[auto,wandb]", "must stand alone")])
def test_bad_report_to_is_a_config_error(value, message):
    with pytest.raises(ConfigError, match=f"train.report_to(\\[1\\])?: .*{message}"):
        load_run_config(None, [f"train.report_to={value}"])


def test_tracker_names_agree():
    assert tuple(trackers.TRACKERS) == tuple(trackers.PACKAGES) == get_args(Tracker)
