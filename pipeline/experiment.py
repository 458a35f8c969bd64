"""`mathrl experiment` / `make experiment`: outcome- vs process-supervised GRPO, several seeds.

DeepSeekMath (sec. 5.2.1, Figure 5) reports that process supervision beats outcome supervision.
This reruns that comparison on the CPU default: both modes start from the same SFT checkpoint,
use the same seeds, steps, batch and G (the same compute), and are evaluated greedily on the
same test problems every `train.eval_every` steps. Outputs in `runs/<name>-experiment/`:
`results.md` (table: final accuracy mean ± std per mode), `results.json`, and
`accuracy_vs_step.png` (mean curve per mode, thin lines per seed).
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import statistics
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from pipeline.config import RunConfig

MODES = ("outcome", "process")


def _one_thread() -> None:
    import torch
    torch.set_num_threads(1)


def run_config(cfg: RunConfig, mode: str, seed: int) -> RunConfig:
    """The config of one (mode, seed) run; built (and so checked) before any run starts."""
    return dataclasses.replace(
        cfg, name=f"{cfg.name}-exp-{mode}-seed{seed}", seed=seed,
        train=dataclasses.replace(cfg.train, advantage=mode, eval_every=cfg.train.eval_every or 10))


def run_one(run_cfg: RunConfig) -> list[tuple[int, float]]:
    """Train one (mode, seed) run; return its (step, eval accuracy) points."""
    from evals.run import periodic_eval
    from pipeline.grpo import trainer
    from pipeline.grpo.run_log import read_metrics

    run_dir = trainer.train(run_cfg, evaluate=periodic_eval(run_cfg))
    return [(r["step"], r["eval/accuracy"]) for r in read_metrics(run_dir) if r.get("eval/accuracy") is not None]


def summarise(curves: dict[str, dict[int, list[tuple[int, float]]]], start_acc: float) -> dict:
    out = {"start_accuracy": start_acc, "modes": {}}
    for mode, by_seed in curves.items():
        finals = [points[-1][1] for points in by_seed.values() if points]
        out["modes"][mode] = {"final_mean": statistics.mean(finals),
                              "final_std": statistics.stdev(finals) if len(finals) > 1 else 0.0,
                              "finals": finals, "curves": {str(s): p for s, p in by_seed.items()}}
    return out


def plot(summary: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for color, (mode, res) in zip(("tab:blue", "tab:orange"), summary["modes"].items()):
        curves = [dict([(0, summary["start_accuracy"]), *map(tuple, pts)]) for pts in res["curves"].values()]
        steps = sorted(set.intersection(*(set(c) for c in curves)))
        for c in curves:
            ax.plot(sorted(c), [c[s] for s in sorted(c)], color=color, alpha=0.25, linewidth=1)
        ax.plot(steps, [statistics.mean(c[s] for c in curves) for s in steps], color=color, linewidth=2,
                label=f"{mode} (final {res['final_mean']:.3f} ± {res['final_std']:.3f})")
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("test accuracy")
    ax.set_title("outcome vs process supervision (same SFT start, same compute)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_table(summary: dict, cfg: RunConfig, seeds: list[int], path: Path) -> None:
    lines = [f"# Outcome vs process supervision ({cfg.train.task})", "",
             f"Same SFT checkpoint (`{cfg.model.name_or_path}`, test accuracy {summary['start_accuracy']:.3f}), "
             f"accuracy = mean over {cfg.eval.n_samples} sample(s) per problem at temperature {cfg.eval.temperature:g} "
             f"on {cfg.train.eval_limit} test problems; seeds {seeds}, {cfg.train.steps} steps x "
             f"{cfg.train.questions_per_step} questions x G = {cfg.rollout.group_size}.", "",
             "| supervision | final accuracy (mean ± std) | per seed |", "|---|---|---|"]
    for mode, res in summary["modes"].items():
        lines.append(f"| {mode} | {res['final_mean']:.3f} ± {res['final_std']:.3f} | "
                     f"{', '.join(f'{x:.3f}' for x in res['finals'])} |")
    lines += ["", "![accuracy vs step](accuracy_vs_step.png)"]
    path.write_text("\n".join(lines) + "\n")


def main(cfg: RunConfig, seeds: tuple[int, ...] = (0, 1, 2)) -> int:
    from pipeline import models, sft
    from pipeline.run_all import evaluate_model

    out = Path(cfg.output_dir) / f"{cfg.name}-experiment"
    jobs = {(mode, seed): run_config(cfg, mode, seed) for mode in MODES for seed in seeds}  # fail before SFT
    if "build-tiny" in cfg.stages:
        models.main(cfg)
    if "sft" in cfg.stages:
        sft.main(cfg)
    eval_cfg = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, dataset=cfg.train.task,
                                                                 limit=cfg.train.eval_limit))
    start_acc = evaluate_model(eval_cfg, cfg.model.name_or_path, out / "eval_start")["accuracy"]
    # Independent runs, one per core (each single-threaded: on few cores that beats sharing).
    workers = max(1, min(len(jobs), os.cpu_count() or 1))
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_one_thread) as pool:
        futures = {job: pool.submit(run_one, run_cfg) for job, run_cfg in jobs.items()}
        curves = {mode: {seed: futures[(mode, seed)].result() for seed in seeds} for mode in MODES}
    summary = summarise(curves, start_acc)
    (out / "results.json").write_text(json.dumps(summary, indent=1))
    plot(summary, out / "accuracy_vs_step.png")
    write_table(summary, cfg, list(seeds), out / "results.md")
    print((out / "results.md").read_text())
    return 0
