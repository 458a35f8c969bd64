"""Experiment trackers (`train.report_to`): every step's metrics and the resolved config, sent to
TensorBoard, Weights & Biases, Trackio and/or MLflow beside metrics.jsonl (always written).

Each tracker gets exactly the rows of metrics.jsonl: every key, at the trainer's step, a
non-finite value (null in the file) left out of that step. Only rank 0 logs (``RunLog`` exists
there alone). The libraries are optional: ``resolve`` turns a name whose package is missing into
a one-line error before anything loads; the default ``[auto]`` is TensorBoard when it is
installed, else nothing beyond metrics.jsonl; ``[]`` or ``[none]`` is metrics.jsonl alone. Where a tracker stores its
data is its own library's setting (``WANDB_MODE`` / ``WANDB_DIR``, ``TRACKIO_DIR``,
``MLFLOW_TRACKING_URI``); W&B writes under the run directory unless ``WANDB_DIR`` says otherwise.

A resumed run continues the same tracker run: the W&B and MLflow run ids are kept in
``trackers.json`` in the run directory, Trackio resumes by name and TensorBoard purges the
steps after the checkpoint. Steps a crashed attempt logged after its last checkpoint are logged
again with the same values (resumed steps are identical), which W&B ignores and MLflow and
Trackio store twice.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import yaml

# report_to name -> (module it imports, what to install)
PACKAGES = {"tensorboard": ("tensorboard", "tensorboard"), "wandb": ("wandb", "wandb"),
            "trackio": ("trackio", "trackio"), "mlflow": ("mlflow", "mlflow (or mlflow-skinny)")}
IDS_FILE = "trackers.json"


class TrackerError(RuntimeError):
    """A tracker named in train.report_to cannot be used; the message is one line."""


def installed(name: str) -> bool:
    return importlib.util.find_spec(PACKAGES[name][0]) is not None


def resolve(report_to: list[str]) -> list[str]:
    """The trackers a run reports to: the names in ``report_to`` (each must be installed);
    ``[auto]``: TensorBoard if installed; ``[none]`` or ``[]``: none."""
    if report_to == ["auto"]:
        return ["tensorboard"] if installed("tensorboard") else []
    if report_to == ["none"]:
        return []
    for name in report_to:
        if not installed(name):
            raise TrackerError(f"train.report_to names {name}, which is not installed: "
                               f"pip install {PACKAGES[name][1]} (or remove it from train.report_to)")
    return list(dict.fromkeys(report_to))


def flatten(config: dict, prefix: str = "") -> dict[str, object]:
    """{"train": {"lr": 1e-5}} -> {"train.lr": 1e-5}."""
    out = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _finite(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if v is not None}


class TensorBoard:
    def __init__(self, run_dir: Path, config: dict, project: str, name: str, resume_step: int, ids: dict):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=resume_step + 1 if resume_step else None)
        self.writer.add_text("config", "```yaml\n" + yaml.safe_dump(config, sort_keys=False) + "```", 0)

    def log(self, step: int, metrics: dict) -> None:
        for key, value in _finite(metrics).items():
            self.writer.add_scalar(key, value, step)

    def close(self) -> None:
        self.writer.close()


class WandB:
    def __init__(self, run_dir: Path, config: dict, project: str, name: str, resume_step: int, ids: dict):
        import wandb

        where = {} if os.environ.get("WANDB_DIR") else {"dir": str(run_dir)}
        resume = {"id": ids["wandb"], "resume": "allow"} if resume_step and "wandb" in ids else {}
        self.run = wandb.init(project=project, name=name, config=config, **where, **resume)
        ids["wandb"] = self.run.id

    def log(self, step: int, metrics: dict) -> None:
        self.run.log(_finite(metrics), step=step)

    def close(self) -> None:
        self.run.finish()


class Trackio:
    def __init__(self, run_dir: Path, config: dict, project: str, name: str, resume_step: int, ids: dict):
        import trackio

        self.trackio = trackio
        trackio.init(project=project, name=name, config=config, resume="allow" if resume_step else "never",
                     embed=False, auto_log_cpu=False, auto_log_gpu=False)

    def log(self, step: int, metrics: dict) -> None:
        self.trackio.log(_finite(metrics), step=step)

    def close(self) -> None:
        self.trackio.finish()


class MLflow:
    def __init__(self, run_dir: Path, config: dict, project: str, name: str, resume_step: int, ids: dict):
        import mlflow

        self.mlflow = mlflow
        if resume_step and "mlflow" in ids:
            self.run = mlflow.start_run(run_id=ids["mlflow"])
        else:
            mlflow.set_experiment(project)
            self.run = mlflow.start_run(run_name=name)
            # parameter values are strings of at most 6,000 characters
            mlflow.log_params({k: str(v)[:6000] for k, v in flatten(config).items()})
        ids["mlflow"] = self.run.info.run_id

    def log(self, step: int, metrics: dict) -> None:
        self.mlflow.log_metrics(_finite(metrics), step=step)

    def close(self) -> None:
        self.mlflow.end_run()


TRACKERS = {"tensorboard": TensorBoard, "wandb": WandB, "trackio": Trackio, "mlflow": MLflow}


def open_trackers(names: list[str], run_dir: Path, config: dict, project: str, name: str,
                  resume_step: int = 0) -> list:
    """Start each named tracker for the run in ``run_dir`` (``config``: the resolved config as a
    dict); one that fails to start is a TrackerError naming it."""
    ids_path = Path(run_dir) / IDS_FILE
    ids = json.loads(ids_path.read_text()) if ids_path.is_file() else {}
    opened = []
    for tracker in names:
        try:
            opened.append(TRACKERS[tracker](Path(run_dir), config, project, name, resume_step, ids))
        except Exception as e:  # login, server or store problems: stop before step 1, saying which tracker
            for t in opened:
                t.close()
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise TrackerError(f"train.report_to: {tracker} could not start: {first}") from e
    if ids:
        Path(run_dir).mkdir(parents=True, exist_ok=True)
        ids_path.write_text(json.dumps(ids, indent=1) + "\n")
    return opened
