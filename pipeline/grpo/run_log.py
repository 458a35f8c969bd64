"""Run observability: metrics.jsonl (always), samples.jsonl, the trackers of train.report_to
(``trackers.py``: TensorBoard, W&B, Trackio, MLflow; each gets every metrics.jsonl row), curves PNG.

On resume the lines written after the checkpoint's step are dropped first, so the files read
as if the run had never been interrupted.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

PLOTTED = [("reward/mean", "reward"), ("reward/correct", "accuracy (train samples)"), ("kl", "KL (k3)"),
           ("completion_len/mean", "completion tokens"), ("loss", "loss"), ("eval/accuracy", "eval accuracy")]


def _truncate_jsonl(path: Path, max_step: int) -> None:
    if not path.is_file():
        return
    keep = [line for line in path.read_text().splitlines() if line.strip()
            and json.loads(line).get("step", 0) <= max_step]
    path.write_text("".join(line + "\n" for line in keep))


class RunLog:
    def __init__(self, run_dir: Path, resume_step: int = 0, trackers: list = ()):
        """``trackers``: opened by ``trackers.open_trackers``; each gets every row of metrics.jsonl."""
        self.run_dir = Path(run_dir)
        self.metrics_path = self.run_dir / "metrics.jsonl"
        self.samples_path = self.run_dir / "samples.jsonl"
        for path in (self.metrics_path, self.samples_path):
            _truncate_jsonl(path, resume_step)
        self.trackers = list(trackers)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        row = {"step": step, **{k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                                for k, v in metrics.items()}}
        with self.metrics_path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        for tracker in self.trackers:
            tracker.log(step, {k: v for k, v in row.items() if k != "step"})

    def samples(self, step: int, records: list[dict]) -> None:
        with self.samples_path.open("a") as f:
            for rec in records:
                f.write(json.dumps({"step": step, **rec}, ensure_ascii=False) + "\n")

    def close(self) -> None:
        for tracker in self.trackers:
            tracker.close()


def read_metrics(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def plot_curves(run_dir: Path, out: Path | None = None) -> Path | None:
    """Plot the main training curves from metrics.jsonl into ``curves.png``."""
    rows = read_metrics(run_dir)
    panels = [(k, title) for k, title in PLOTTED if any(r.get(k) is not None for r in rows)]
    if not panels:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = 3
    fig, axes = plt.subplots(math.ceil(len(panels) / cols), cols, figsize=(4 * cols, 3 * math.ceil(len(panels) / cols)),
                             squeeze=False)
    for ax, (key, title) in zip(axes.flat, panels):
        pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="." if len(pts) < 30 else None)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    out = out or Path(run_dir) / "curves.png"
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


class NullLog:
    """What ranks other than 0 log to under torchrun: nothing."""

    def log(self, step: int, metrics: dict[str, float]) -> None:
        pass

    def samples(self, step: int, records: list[dict]) -> None:
        pass

    def close(self) -> None:
        pass
