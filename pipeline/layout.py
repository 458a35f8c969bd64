"""The run directory's layout, written once: every path inside ``<output_dir>/<name>/``.

    <run>/config.yaml            the resolved config
    <run>/metrics.jsonl, samples.jsonl, curves.png, report.md
    <run>/checkpoints/step_N/    training checkpoints (grpo/checkpoint.py writes them)
    <run>/final/                 the trained model and its card README.md
    <run>/eval/<what>/           evals: step_N (periodic), [<split>_][greedy_]before|after (`mathrl run`),
                                 <dataset>[_step_N] (`mathrl eval` of the run's model or a checkpoint)

Checkpointing, the evals and the stages all take their paths from here.
"""

from __future__ import annotations

import re
from pathlib import Path

CHECKPOINTS = "checkpoints"
FINAL = "final"
EVAL = "eval"
STEP_RE = re.compile(r"step_(\d+)")


def run_dir(cfg) -> Path:
    """``<output_dir>/<name>``: where the run ``cfg`` names keeps everything it writes."""
    return Path(cfg.output_dir) / cfg.name


def final_dir(run: Path) -> Path:
    return Path(run) / FINAL


def checkpoint_dir(run: Path, step: int) -> Path:
    return Path(run) / CHECKPOINTS / f"step_{step}"


def eval_dir(run: Path, what: str) -> Path:
    """``<run>/eval/<what>``."""
    return Path(run) / EVAL / what


def step_of(path: Path) -> int | None:
    """N for a ``step_N`` folder, else None."""
    m = STEP_RE.fullmatch(Path(path).name)
    return int(m.group(1)) if m else None


def step_dirs(run: Path) -> list[Path]:
    """The run's ``checkpoints/step_N`` folders, oldest first (complete or not: the caller checks)."""
    root = Path(run) / CHECKPOINTS
    found = [p for p in root.iterdir() if p.is_dir() and step_of(p) is not None] if root.is_dir() else []
    return sorted(found, key=step_of)


def run_of(path: Path | None) -> Path | None:
    """The run directory that ``path`` (its ``final/`` or one of its ``checkpoints/step_N``) lies in."""
    if path is None:
        return None
    path = Path(path)
    if path.name == FINAL:
        return path.parent
    if path.parent.name == CHECKPOINTS and step_of(path) is not None:
        return path.parent.parent
    return None


__all__ = ["CHECKPOINTS", "EVAL", "FINAL", "checkpoint_dir", "eval_dir", "final_dir", "run_dir", "run_of",
           "step_dirs", "step_of"]
