"""Run observability: metrics.jsonl (always), samples.jsonl, the trackers of train.report_to
(``trackers.py``: TensorBoard, W&B, Trackio, MLflow; each gets every metrics.jsonl row), curves PNG.

On resume the lines written after the checkpoint's step are dropped first, and a run started
afresh (no checkpoint to resume) empties them, so the files read as if the run had never been
interrupted: a run killed before its first checkpoint leaves no step-0 eval row to repeat. A run
that continues another run's checkpoint (``train.resume=<other run>/checkpoints/step_N``) starts
its files with the other run's rows up to N, so its curves show the whole training.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

# curves.png panels: (title, [(metric, label)], smooth). Smoothed panels draw the raw values faintly
# and a trailing mean over them; a panel is left out when none of its metrics was logged.
PANELS = [
    ("reward (train samples)", [("reward/mean", "reward")], True),
    ("policy entropy (nats / token)", [("entropy", "entropy")], True),
    ("clipped tokens", [("clip_frac_low", "low (ratio < 1 - eps, A < 0)"),
                        ("clip_frac_high", "high (ratio > 1 + eps, A > 0)")], False),
    ("gradient norm (before clipping)", [("grad_norm", "grad norm")], True),
    ("KL to the reference", [("kl", "KL")], True),
    ("completion tokens", [("completion_len/mean", "mean")], True),
    ("tool calls per completion (rollout.tools)", [("tool/calls", "calls"), ("tool/errors", "failed"),
                                                   ("tool/timeouts", "timed out")], True),
]
EVAL_PREFIX = "eval/"  # every eval/..._accuracy metric goes into the eval panel


def _keep_rows(path: Path, max_step: int | None, source: Path) -> None:
    """Rewrite ``path`` with the rows of ``source`` (``path`` itself, or the same file of the run a
    checkpoint came from) up to ``max_step`` (none when it is None)."""
    keep = [] if max_step is None or not source.is_file() else [
        line for line in source.read_text().splitlines()
        if line.strip() and json.loads(line).get("step", 0) <= max_step]
    if keep or path.is_file():
        path.write_text("".join(line + "\n" for line in keep))


class RunLog:
    def __init__(self, run_dir: Path, resume_step: int | None = None, trackers: list = (),
                 history_from: Path | None = None):
        """``resume_step``: the checkpoint's step, None for a fresh start. ``trackers``: opened by
        ``trackers.open_trackers``; each gets every row of metrics.jsonl written from now on.
        ``history_from``: the run directory the resumed checkpoint belongs to, when not this one."""
        self.run_dir = Path(run_dir)
        self.metrics_path = self.run_dir / "metrics.jsonl"
        self.samples_path = self.run_dir / "samples.jsonl"
        other = Path(history_from) if history_from is not None else self.run_dir
        for path in (self.metrics_path, self.samples_path):
            _keep_rows(path, resume_step, other / path.name)
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


def smooth(values: list[float], window: int) -> list[float]:
    """Trailing mean over the last ``window`` values (fewer at the start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def _series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
    return [p[0] for p in pts], [float(p[1]) for p in pts]


def panels_for(rows: list[dict]) -> list[tuple[str, list[tuple[str, str]], bool]]:
    """The PANELS whose metrics were logged, each with only its logged series."""
    out = [(title, [(k, label) for k, label in series if _series(rows, k)[0]], sm) for title, series, sm in PANELS]
    return [p for p in out if p[1]]


def eval_keys(rows: list[dict]) -> list[str]:
    """The periodic eval's accuracy metrics (eval/accuracy only when no named ones exist)."""
    keys = {k for r in rows for k in r if k.startswith(EVAL_PREFIX) and k.endswith("accuracy")}
    named = sorted(k for k in keys if k != "eval/accuracy")
    return named or sorted(keys)  # eval/accuracy repeats one of the named ones when they exist


def plot_curves(run_dir: Path, out: Path | None = None) -> Path | None:
    """Plot the training curves from metrics.jsonl into ``curves.png``: reward and the other
    noisy per-step values raw (faint) and smoothed, clipped-token fractions, the KL only when it
    was computed, and every periodic eval accuracy (step 0 included with train.eval_on_start)."""
    rows = read_metrics(run_dir)
    train_rows = [r for r in rows if "reward/mean" in r]
    window = max(5, len(train_rows) // 15)
    panels = panels_for(train_rows)
    evals = eval_keys(rows)
    if not panels and not evals:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(panels) + bool(evals)
    cols = 3
    fig, axes = plt.subplots(math.ceil(n / cols), cols, figsize=(4.4 * cols, 3.2 * math.ceil(n / cols)),
                             squeeze=False)
    flat = list(axes.flat)
    if evals:  # first: what the run is for
        ax = flat[0]
        for i, key in enumerate(evals):
            steps, values = _series(rows, key)
            ax.plot(steps, values, marker="o", color=f"C{i}", label=key.removeprefix(EVAL_PREFIX).replace("_", " "))
        ax.set_title("periodic eval accuracy (held-out test problems)", fontsize=10)
        ax.legend(fontsize=7)
    for ax, (title, series, smoothed) in zip(flat[bool(evals):], panels):
        for i, (key, label) in enumerate(series):
            steps, values = _series(train_rows, key)
            color = f"C{i}"
            if smoothed:
                ax.plot(steps, values, color=color, alpha=0.25, linewidth=0.8)
                ax.plot(steps, smooth(values, window), color=color, label=f"{label}, mean of {window} steps")
            else:
                ax.plot(steps, values, color=color, label=label)
        if not smoothed and all(v == 0 for k, _ in series for v in _series(train_rows, k)[1]):
            title += "\n(all 0: one update per batch, the ratio is 1)"
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7)
    for ax in flat[:n]:
        ax.set_xlabel("GRPO step")
        ax.grid(alpha=0.3)
    for ax in flat[n:]:
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
