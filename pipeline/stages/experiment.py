"""`mathrl experiment` / `make experiment`: outcome- vs process-supervised GRPO over several seeds.

DeepSeekMath (sec. 5.2.1, Figure 5) reports that process supervision beats outcome supervision.
This reruns that comparison: both modes start from the same SFT checkpoint, use the same seeds
(`experiment.seeds`), steps, batch and G (the same compute), and are evaluated on the same test
problems every `train.eval_every` steps. Outputs in `runs/<name>-experiment/`:

- `results.md`: final accuracy per mode (mean, std, 95% CI over seeds, per seed), the difference
  with its 95% CI and an exact permutation p-value, steps-to-threshold (the first eval step at
  which each mode reaches the outcome mode's final mean accuracy, on the mean curve and per
  seed), and where the step signal agrees with the outcome (`step_signal`);
- `results.json`: the same numbers and every curve;
- `accuracy_vs_step.png`: mean curve and 95% band per mode, thin lines per seed, the threshold.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
from pathlib import Path
from typing import get_args

from pipeline import freshness, layout
from pipeline.config import RunConfig
from pipeline.config.schema import Supervision
from pipeline.orphans import process_pool
from evals.stats import band, first_reach, mean_ci, permutation_p, welch_ci

MODES = get_args(Supervision)
COLORS = {"outcome": "tab:blue", "process": "tab:orange"}


def _one_thread() -> None:
    import torch
    torch.set_num_threads(1)


def run_config(cfg: RunConfig, mode: str, seed: int) -> RunConfig:
    """The config of one (mode, seed) run; built (and so checked) before any run starts."""
    return dataclasses.replace(
        cfg, name=f"{cfg.name}-exp-{mode}-seed{seed}", seed=seed, threads=cfg.threads or 1,
        train=dataclasses.replace(cfg.train, advantage=mode, eval_every=cfg.train.eval_every or 10))


def run_fingerprint(run_cfg: RunConfig) -> str:
    """What one (mode, seed) run's curve depends on: its config but the `experiment` section (more
    seeds do not change a run) and the starting model's weights (a retrained SFT model does)."""
    from pipeline.config import to_dict

    settings = {k: v for k, v in to_dict(run_cfg).items() if k != "experiment"}
    start = Path(run_cfg.model.name_or_path)
    return freshness.fingerprint(settings, [start / "config.json", start / "model.safetensors"])


def run_one(run_cfg: RunConfig) -> list[tuple[int, float]]:
    """Train one (mode, seed) run, mark it finished (``freshness``); return its (step, eval accuracy) points."""
    from evals.evaluate import periodic_eval
    from pipeline.grpo import trainer

    run_dir = trainer.train(run_cfg, evaluate=periodic_eval(run_cfg))
    freshness.mark_current(run_dir, run_fingerprint(run_cfg))
    return _curve(run_dir)


def _curve(run_dir: Path) -> list[tuple[int, float]]:
    from pipeline.grpo.run_log import read_metrics

    return [(r["step"], r["eval/accuracy"]) for r in read_metrics(run_dir) if r.get("eval/accuracy") is not None]


def finished_curve(run_cfg: RunConfig) -> list[tuple[int, float]] | None:
    """The eval points of a finished earlier run with the same ``run_fingerprint``, or None: rerunning
    with more seeds reuses the runs already done and trains only the new ones; a run that stopped
    before its end (never marked finished) is trained again from the start."""
    run_dir = layout.run_dir(run_cfg)
    return _curve(run_dir) if freshness.is_current(run_dir, run_fingerprint(run_cfg)) else None


def summarise(curves: dict[str, dict[int, list[tuple[int, float]]]], start_acc: float) -> dict:
    """Final accuracies, bands, steps-to-threshold and the process - outcome comparison."""
    out: dict = {"start_accuracy": start_acc, "modes": {}}
    for mode, by_seed in curves.items():
        finals = [points[-1][1] for points in by_seed.values() if points]
        full = [dict([(0, start_acc), *map(tuple, pts)]) for pts in by_seed.values()]
        mean, half = mean_ci(finals)
        out["modes"][mode] = {"final_mean": mean, "final_std": statistics.stdev(finals) if len(finals) > 1 else 0.0,
                              "final_ci95": half, "finals": finals,
                              "curves": {str(s): p for s, p in by_seed.items()}, "band": band(full)}
    if "outcome" in out["modes"]:
        threshold = out["modes"]["outcome"]["final_mean"]
        reach: dict = {"threshold": threshold}
        for mode, res in out["modes"].items():
            mean_curve = {s: m for s, m, _, _ in res["band"]}
            per_seed = [first_reach(dict([(0, start_acc), *map(tuple, pts)]), threshold)
                        for pts in res["curves"].values()]
            reach[mode] = {"mean_curve": first_reach(mean_curve, threshold), "per_seed": per_seed}
        out["steps_to_threshold"] = reach
    if set(MODES) <= set(out["modes"]):
        a, b = out["modes"]["outcome"]["finals"], out["modes"]["process"]["finals"]
        diff, half = welch_ci(a, b)
        out["process_minus_outcome"] = {"diff": diff, "ci95": half, "permutation_p": permutation_p(a, b)}
    return out


# Every completion falls in exactly one of these; step_signal also counts "claims" beside them.
SIGNAL_KINDS = ("right_clean", "right_flagged", "wrong_flagged", "wrong_silent", "wrong_truncated")


def step_signal(results_files: list[Path]) -> dict[str, int]:
    """Eval completions sorted by (outcome right/wrong) x (a step claim refuted or not): where the
    rule step signal and the outcome agree, and where the step signal is silent on a wrong answer.
    `claims` counts the calculations the checks read in all of them: a policy that learns to write
    fewer of them (so fewer can be refuted) shows here first."""
    from rewards.steps.reward import check_steps

    counts = dict.fromkeys((*SIGNAL_KINDS, "claims"), 0)
    for path in results_files:
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            for text, ok, finish in zip(rec["completions"], rec["correct"], rec["finish_reasons"]):
                steps = check_steps(text)
                counts["claims"] += sum(len(s.claims) for s in steps)
                flagged = any(s.score < 0 for s in steps)
                if ok:
                    counts["right_flagged" if flagged else "right_clean"] += 1
                elif flagged:
                    counts["wrong_flagged"] += 1
                else:
                    counts["wrong_truncated" if finish == "length" else "wrong_silent"] += 1
    return counts


def plot(summary: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    start = summary["start_accuracy"]
    for mode, res in summary["modes"].items():
        color = COLORS.get(mode, "tab:gray")
        for pts in res["curves"].values():
            c = dict([(0, start), *map(tuple, pts)])
            ax.plot(sorted(c), [c[s] for s in sorted(c)], color=color, alpha=0.2, linewidth=0.8)
        steps, mean, lo, hi = zip(*res["band"])
        ax.fill_between(steps, [max(x, 0.0) for x in lo], [min(x, 1.0) for x in hi],  # accuracy lies in [0, 1]
                        color=color, alpha=0.18, linewidth=0)
        ax.plot(steps, mean, color=color, linewidth=2,
                label=f"{mode}: final {res['final_mean']:.3f} ± {res['final_ci95']:.3f} (95% CI)")
    reach = summary.get("steps_to_threshold")
    if reach:
        ax.axhline(reach["threshold"], color="black", linestyle=":", linewidth=1,
                   label=f"threshold: outcome's final mean {reach['threshold']:.3f}")
        for mode in summary["modes"]:
            step = reach[mode]["mean_curve"]
            if step is not None:
                ax.plot([step], [reach["threshold"]], marker="o", color=COLORS.get(mode, "tab:gray"))
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("test accuracy")
    ax.set_title("outcome vs process supervision (same SFT start, same compute)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _steps(x) -> str:
    return "not reached" if x is None else str(x)


def write_table(summary: dict, cfg: RunConfig, seeds: list[int], path: Path, signal: dict | None = None) -> None:
    lines = [f"# Outcome vs process supervision ({cfg.train.task})", "",
             f"Same SFT checkpoint (`{cfg.model.name_or_path}`, test accuracy {summary['start_accuracy']:.3f}), "
             f"accuracy = mean over {cfg.eval.n_samples} sample(s) per problem at temperature {cfg.eval.temperature:g} "
             f"on {cfg.train.eval_limit} test problems; seeds {seeds}, {cfg.train.steps} steps x "
             f"{cfg.train.questions_per_step} questions x G = {cfg.rollout.group_size}.", "",
             "| supervision | final accuracy (mean ± std) | 95% CI of the mean | per seed "
             "| steps to threshold (mean curve) | per seed |",
             "|---|---|---|---|---|---|"]
    reach = summary.get("steps_to_threshold", {})
    for mode, res in summary["modes"].items():
        r = reach.get(mode, {})
        lines.append(f"| {mode} | {res['final_mean']:.3f} ± {res['final_std']:.3f} | ± {res['final_ci95']:.3f} | "
                     f"{', '.join(f'{x:.3f}' for x in res['finals'])} | {_steps(r.get('mean_curve'))} | "
                     f"{', '.join(_steps(x) for x in r.get('per_seed', []))} |")
    if reach:
        lines += ["", f"Threshold: the outcome arm's final mean accuracy, {reach['threshold']:.3f}; a step count is "
                  "the first eval step at which the curve is at or above it."]
        if reach["threshold"] <= summary["start_accuracy"]:
            lines += [f"The outcome arm ended at or below the SFT start ({summary['start_accuracy']:.3f}), so every "
                      "curve is at the threshold from step 0: here steps-to-threshold measures nothing."]
    cmp = summary.get("process_minus_outcome")
    if cmp:
        lines += [f"Process - outcome, final accuracy: {cmp['diff']:+.3f} (95% CI ± {cmp['ci95']:.3f}, Welch); "
                  f"exact permutation test over the seeds: p = {cmp['permutation_p']:.3f}."]
    if signal:
        lines += ["", "Rule step signal vs outcome on the eval completions (counts; the share of all completions "
                  "in brackets):", "",
                  "| model | right, no step refuted | right, a step refuted | wrong, a step refuted | "
                  "wrong, no step refuted | wrong, cut at max_new_tokens | calculations per completion |",
                  "|---|---|---|---|---|---|---|"]
        for name, c in signal.items():
            n = sum(c[k] for k in SIGNAL_KINDS) or 1  # completions
            lines.append(f"| {name} | {c['right_clean']} | {c['right_flagged']} | {c['wrong_flagged']} | "
                         f"{c['wrong_silent']} ({c['wrong_silent'] / n:.1%}) | {c['wrong_truncated']} | "
                         f"{c['claims'] / n:.2f} |")
    lines += ["", "![accuracy vs step](accuracy_vs_step.png)"]
    path.write_text("\n".join(lines) + "\n")


def _last_eval(run_dir: Path) -> Path | None:
    evals = sorted((run_dir / "eval").glob("step_*/results.jsonl"), key=lambda p: int(p.parent.name[5:]))
    return evals[-1] if evals else None


def main(cfg: RunConfig) -> int:
    from evals.evaluate import evaluate_model
    from pipeline.stages import build_tiny, sft

    seeds = list(cfg.experiment.seeds)
    out = Path(cfg.output_dir) / f"{cfg.name}-experiment"
    # Seed by seed, both modes, so runs cut short leave paired arms; all configs built (checked) before SFT.
    jobs = {(mode, seed): run_config(cfg, mode, seed) for seed in seeds for mode in MODES}
    if "build-tiny" in cfg.stages:
        build_tiny.main(cfg)
    if "sft" in cfg.stages:
        sft.main(cfg)
    eval_cfg = dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, dataset=cfg.train.task,
                                                                 limit=cfg.train.eval_limit))
    start_acc = evaluate_model(eval_cfg, cfg.model.name_or_path, out / "eval_start")["accuracy"]
    # Independent runs, each single-threaded (on few cores that beats sharing threads).
    workers = max(1, min(len(jobs), cfg.experiment.workers or os.cpu_count() or 1))
    done = {job: pts for job, run_cfg in jobs.items() if (pts := finished_curve(run_cfg)) is not None}
    if done:
        print(f"experiment: reusing the finished runs {sorted(done)}")
    with process_pool(workers, initializer=_one_thread) as pool:
        futures = {job: pool.submit(run_one, run_cfg) for job, run_cfg in jobs.items() if job not in done}
        points = {**done, **{job: f.result() for job, f in futures.items()}}
    curves = {mode: {seed: points[(mode, seed)] for seed in seeds} for mode in MODES}
    summary = summarise(curves, start_acc)
    files = {"SFT start": [out / "eval_start" / "results.jsonl"]}
    for mode in MODES:
        files[f"{mode}, final (all seeds)"] = [p for seed in seeds if (p := _last_eval(
            layout.run_dir(jobs[(mode, seed)]))) is not None]
    summary["step_signal"] = signal = {k: step_signal(v) for k, v in files.items() if v and all(p.is_file() for p in v)}
    (out / "results.json").write_text(json.dumps(summary, indent=1))
    plot(summary, out / "accuracy_vs_step.png")
    write_table(summary, cfg, seeds, out / "results.md", signal)
    print((out / "results.md").read_text())
    return 0
