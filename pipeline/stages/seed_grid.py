"""`mathrl seed-grid` / `make seed-grid`: does GRPO improve the policy on every seed, and is it the
corrupted warm start that makes it look good?

For each warm start (the config's SFT corruption, and a clean one with ``sft.corrupt_frac=0``), each
SFT seed (a tiny model initialised and fine-tuned with that seed) and each GRPO seed (question order
and sampling), this runs the config's GRPO and evaluates the SFT model ("before") and the trained
policy ("after") with every eval of `mathrl run` (``stages.run.eval_plan``: the configured sampled
eval, greedy, and each ``eval.extra_splits``, e.g. gsm-synth's ``test_longer``). It writes, in a
directory named after the run with a ``-seeds`` suffix under the output directory, a JSON file of
every cell and the summary, a Markdown table (per warm start: mean before, mean and spread of
the gain, how many runs gained; then every run) and a plot of every run's before -> after.

Each (warm start, SFT seed) is a lane: its SFT, its "before" evals, then its GRPO runs in seed order.
``workers`` lanes run at once in separate processes, each with the config's ``threads`` (on a
2-core machine, 2 lanes of 1 thread each take half the wall time of one; the numbers do not
depend on it: every run is seeded and pinned by pipeline/determinism.py). A finished cell (its
accuracies in ``cell.json`` of the run directory, current while its config and SFT model are the
same: pipeline/freshness.py) is read back instead of rerun, so an interrupted grid continues where
it stopped, and ``table_only`` tabulates the finished cells of the chosen seeds without running
anything (a missing one is named). ``starts`` picks the warm
starts (``corrupted``: the config's own corruption; ``clean``). The SFT model of the config's own
seed and corruption is the one `make train` uses (same directories, skipped when up to date).
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

from typing import get_args

from pipeline import freshness, layout
from pipeline.config import RunConfig, to_dict
from pipeline.config.schema import WarmStart
from pipeline.orphans import process_pool

SFT_SEEDS = (0, 1, 2)
GRPO_SEEDS = (0, 1, 2)
STARTS = get_args(WarmStart)  # the names `--warm-starts` takes


def warm_starts(cfg: RunConfig) -> dict[str, RunConfig]:
    """name -> config of each warm start: the config's corruption, and clean SFT."""
    clean = dataclasses.replace(cfg, sft=dataclasses.replace(cfg.sft, corrupt_frac=0.0))
    label = f"{cfg.sft.corrupt_mode} {cfg.sft.corrupt_frac:g}" if cfg.sft.corrupt_frac > 0 else "clean"
    return {label: cfg, "clean": clean} if cfg.sft.corrupt_frac > 0 else {"clean": clean}


def sft_config(start_cfg: RunConfig, start: str, seed: int, base: RunConfig) -> RunConfig:
    """The SFT stage of one warm start and seed: own tiny-model and SFT directories, except that the
    config's own seed and corruption keep the config's directories (shared with `make train`)."""
    if seed == base.seed and start_cfg.sft == base.sft:
        return start_cfg
    tag = f"{start.replace(' ', '-')}-seed{seed}"
    tiny = base.model.tiny_dir if seed == base.seed else f"{base.model.tiny_dir}-seed{seed}"
    init = tiny if base.sft.init == base.model.tiny_dir else base.sft.init
    return dataclasses.replace(
        start_cfg, seed=seed, model=dataclasses.replace(start_cfg.model, tiny_dir=tiny),
        sft=dataclasses.replace(start_cfg.sft, init=init, output=f"{base.sft.output}-{tag}"))


def grpo_config(sft_cfg: RunConfig, start: str, sft_seed: int, seed: int, base: RunConfig) -> RunConfig:
    """One GRPO run on the SFT model of ``sft_cfg``; no periodic eval (before/after evals only)."""
    return dataclasses.replace(
        sft_cfg, seed=seed, name=f"{base.name}-grid-{start.replace(' ', '-')}-sft{sft_seed}-grpo{seed}",
        model=dataclasses.replace(sft_cfg.model, name_or_path=sft_cfg.sft.output),
        train=dataclasses.replace(sft_cfg.train, eval_every=0))


def _accuracies(results: dict[str, dict]) -> dict[str, float]:
    return {key: res["accuracy"] for key, res in results.items()}


def sft_before(sft_cfg: RunConfig, where: Path) -> dict[str, float]:
    """The "before" accuracies of an SFT model, read back when they were made from the same SFT
    model (its fingerprint, ``stages.sft.fingerprint``) and the same config."""
    from pipeline.stages.run import eval_all, eval_plan
    from pipeline.stages.sft import fingerprint

    saved = where / "before.json"
    fp = freshness.fingerprint({"sft": fingerprint(sft_cfg), "config": to_dict(sft_cfg)})
    if freshness.is_current(saved, fp):
        return json.loads(saved.read_text())
    before = _accuracies(eval_all(eval_plan(sft_cfg), sft_cfg.sft.output, where, "before"))
    saved.write_text(json.dumps(before, indent=1))
    freshness.mark_current(saved, fp)
    return before


def _cell_file(run_cfg: RunConfig) -> Path:
    return layout.run_dir(run_cfg) / "cell.json"


def cell_fingerprint(run_cfg: RunConfig, sft_cfg: RunConfig) -> str:
    """What a cell's result depends on: its config and the SFT model it starts from."""
    from pipeline.stages.sft import fingerprint

    return freshness.fingerprint({"sft": fingerprint(sft_cfg), "config": to_dict(run_cfg)})


def saved_cell(run_cfg: RunConfig, sft_cfg: RunConfig) -> dict | None:
    """The saved result of a cell made with this config from this SFT model, or None."""
    saved = _cell_file(run_cfg)
    return json.loads(saved.read_text()) if freshness.is_current(saved, cell_fingerprint(run_cfg, sft_cfg)) else None


def run_cell(run_cfg: RunConfig, sft_cfg: RunConfig, before: dict[str, float]) -> dict:
    """GRPO + the after evals of one cell, or its saved result when it is current."""
    from pipeline.stages.run import eval_all, eval_plan
    from pipeline.stages.train import main as train

    run_dir = layout.run_dir(run_cfg)
    if (cell := saved_cell(run_cfg, sft_cfg)) is not None:
        print(f"seed-grid: {run_cfg.name} done before; read back")
        return cell
    if train(run_cfg):
        raise RuntimeError(f"seed-grid: GRPO run {run_cfg.name} failed (see its output above)")
    after = _accuracies(eval_all(eval_plan(run_cfg), str(layout.final_dir(run_dir)), run_dir, "after"))
    cell = {"name": run_cfg.name, "grpo_seed": run_cfg.seed, "before": before, "after": after}
    _cell_file(run_cfg).write_text(json.dumps(cell, indent=1))
    freshness.mark_current(_cell_file(run_cfg), cell_fingerprint(run_cfg, sft_cfg))
    return cell


def summarise(cells: list[dict]) -> dict:
    """Per warm start and eval key: mean before (over SFT models), after and gain (over runs)."""
    out: dict[str, dict] = {}
    for start in dict.fromkeys(c["start"] for c in cells):
        mine = [c for c in cells if c["start"] == start]
        out[start] = {}
        for key in mine[0]["before"]:
            gains = [c["after"][key] - c["before"][key] for c in mine]
            befores = {c["sft_seed"]: c["before"][key] for c in mine}
            out[start][key] = {
                "before_mean": statistics.mean(befores.values()),
                "after_mean": statistics.mean(c["after"][key] for c in mine),
                "gain_mean": statistics.mean(gains), "gain_std": statistics.stdev(gains) if len(gains) > 1 else 0.0,
                "gain_min": min(gains), "runs_gained": sum(g > 0 for g in gains), "runs": len(gains)}
    return out


def metric_names(cfg: RunConfig) -> dict[str, str]:
    """eval key of ``stages.run.eval_plan`` -> readable name ("test_longer, greedy"; ", tools off" for
    the evals of ``eval.compare_without_tools``)."""
    from evals.evaluate import decoding
    from pipeline.stages.run import NO_TOOLS, eval_plan

    return {key: f"{split}, {decoding(c)}{', tools off' if key.startswith(NO_TOOLS) else ''}"
            for key, (c, split) in eval_plan(cfg).items()}


def grid_shape(cells: list[dict]) -> str:
    """"carry 0.6: 3 SFT seeds x 3 GRPO seeds; clean: 3 x 1" (the seeds each warm start has)."""
    parts = []
    for start in dict.fromkeys(c["start"] for c in cells):
        mine = [c for c in cells if c["start"] == start]
        n_sft, n_grpo = len({c["sft_seed"] for c in mine}), len({c["grpo_seed"] for c in mine})
        parts.append(f"{start}: {n_sft} SFT seeds x {n_grpo} GRPO seeds ({len(mine)} runs)")
    return "; ".join(parts)


def write_table(summary: dict, cells: list[dict], cfg: RunConfig, path: Path) -> None:
    names = metric_names(cfg)
    lines = [f"# GRPO over seeds: {grid_shape(cells)}", "",
             f"Task `{cfg.train.task}`; GRPO {cfg.train.steps} steps x {cfg.train.questions_per_step} questions"
             + (f" (stopping once {cfg.train.max_questions} are drawn)" if cfg.train.max_questions else "")
             + f" x G = {cfg.rollout.group_size}, lr {cfg.train.lr:g}, beta {cfg.train.beta:g}; "
             f"SFT {cfg.sft.steps} steps; "
             f"threads {cfg.threads}; eval on the first {cfg.eval.limit or 'all'} problems of each split. "
             f"Accuracies in points (x100); before = mean over the SFT models, gain = after - before per run.", "",
             "| warm start | eval | before | after | gain mean ± std | gain min | runs gained |",
             "|---|---|---|---|---|---|---|"]
    for start, by_key in summary.items():
        for key, s in by_key.items():
            lines.append(f"| {start} | {names[key]} | {100 * s['before_mean']:.1f} | "
                         f"{100 * s['after_mean']:.1f} | {100 * s['gain_mean']:+.1f} ± {100 * s['gain_std']:.1f} | "
                         f"{100 * s['gain_min']:+.1f} | {s['runs_gained']}/{s['runs']} |")
    keys = list(cells[0]["before"])
    lines += ["", "Every run (before -> after, points):", "",
              "| warm start | SFT seed | GRPO seed | " + " | ".join(names[k] for k in keys) + " |",
              "|---|---|---|" + "---|" * len(keys)]
    for c in cells:
        lines.append(f"| {c['start']} | {c['sft_seed']} | {c['grpo_seed']} | " + " | ".join(
            f"{100 * c['before'][k]:.1f} -> {100 * c['after'][k]:.1f}" for k in keys) + " |")
    path.write_text("\n".join(lines) + "\n")


def write_plot(cells: list[dict], cfg: RunConfig, path: Path) -> None:
    """One column per eval, one line per run from its "before" (left) to its "after" (right), a
    colour per warm start: every run's direction at a glance, beside results.md's numbers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names, keys = metric_names(cfg), list(cells[0]["before"])
    starts = list(dict.fromkeys(c["start"] for c in cells))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(keys)), 4.2))
    labelled: set[str] = set()
    for k, key in enumerate(keys):
        for c in cells:
            label = None if c["start"] in labelled else c["start"]
            labelled.add(c["start"])
            ax.plot([k - 0.25, k + 0.25], [100 * c["before"][key], 100 * c["after"][key]], "-o",
                    color=f"C{starts.index(c['start'])}", markersize=3, alpha=0.8, label=label)
    ax.set_xticks(range(len(keys)), [names.get(key, key).replace(", ", "\n", 1) for key in keys], fontsize=8)
    ax.set_ylabel("accuracy % (left: before GRPO, right: after)")
    ax.set_title(f"{cfg.name}: {grid_shape(cells)}", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def lanes(cfg: RunConfig, sft_seeds: tuple[int, ...], starts: tuple[str, ...]) -> list[tuple[str, int, RunConfig]]:
    """(warm start label, SFT seed, SFT config) of each lane, warm start by warm start (the command
    has checked that ``starts`` leaves one: ``config.checks.check_options``)."""
    chosen = {k: v for k, v in warm_starts(cfg).items() if ("clean" if k == "clean" else "corrupted") in starts}
    return [(start, seed, sft_config(start_cfg, start, seed, cfg))
            for start, start_cfg in chosen.items() for seed in sft_seeds]


def run_lane(cfg: RunConfig, start: str, sft_seed: int, sft_cfg: RunConfig, grpo_seeds: tuple[int, ...],
             out: Path) -> list[dict]:
    """One lane: SFT (skipped when up to date), "before" evals, then a GRPO cell per seed."""
    from pipeline import determinism
    from pipeline.stages import sft

    determinism.apply(cfg, f"seed-grid {start} sft{sft_seed}")
    sft.main(sft_cfg)
    before = sft_before(sft_cfg, out / "before" / f"{start.replace(' ', '-')}-sft{sft_seed}")
    return [{**run_cell(grpo_config(sft_cfg, start, sft_seed, seed, cfg), sft_cfg, before), "start": start,
             "sft_seed": sft_seed} for seed in grpo_seeds]


def read_lane(cfg: RunConfig, start: str, sft_seed: int, sft_cfg: RunConfig, grpo_seeds: tuple[int, ...]) -> list[dict]:
    """The finished cells of one lane (``table_only``); a missing one is named, not run."""
    cells = []
    for seed in grpo_seeds:
        run_cfg = grpo_config(sft_cfg, start, sft_seed, seed, cfg)
        cell = saved_cell(run_cfg, sft_cfg)
        if cell is None:
            print(f"seed-grid: {run_cfg.name} not finished (no cell.json for this config and SFT model); "
                  "left out of the table")
            continue
        cells.append({**cell, "start": start, "sft_seed": sft_seed})
    return cells


def _write_results(out: Path, cells: list[dict], summary: dict) -> None:
    (out / "results.json").write_text(json.dumps({"summary": summary, "cells": cells}, indent=1))


def main(cfg: RunConfig, sft_seeds: tuple[int, ...] = SFT_SEEDS, grpo_seeds: tuple[int, ...] = GRPO_SEEDS,
         starts: tuple[str, ...] = STARTS, workers: int = 1, table_only: bool = False) -> int:
    from pipeline import determinism
    from pipeline.stages import build_tiny

    determinism.apply(cfg, "seed-grid")
    out = Path(cfg.output_dir) / f"{cfg.name}-seeds"
    out.mkdir(parents=True, exist_ok=True)
    todo = lanes(cfg, sft_seeds, starts)
    if table_only:
        cells = [c for start, seed, sft_cfg in todo for c in read_lane(cfg, start, seed, sft_cfg, grpo_seeds)]
        if not cells:
            print("seed-grid: no finished cells for these seeds and warm starts")
            return 1
    else:
        if "build-tiny" in cfg.stages:  # before the lanes: two warm starts of one seed share a tiny model
            for _, _, sft_cfg in todo:
                build_tiny.main(sft_cfg)
        if workers <= 1:
            by_lane = [run_lane(cfg, *lane, grpo_seeds, out) for lane in todo]
        else:
            with process_pool(min(workers, len(todo))) as pool:
                futures = [pool.submit(run_lane, cfg, *lane, grpo_seeds, out) for lane in todo]
                by_lane = [f.result() for f in futures]
        cells = [c for lane_cells in by_lane for c in lane_cells]
    summary = summarise(cells)
    _write_results(out, cells, summary)
    write_table(summary, cells, cfg, out / "results.md")
    write_plot(cells, cfg, out / "results.png")
    print((out / "results.md").read_text())
    print(f"seed-grid: plot in {out / 'results.png'}")
    return 0


__all__ = ["GRPO_SEEDS", "SFT_SEEDS", "STARTS", "cell_fingerprint", "grpo_config", "lanes", "main", "saved_cell",
           "sft_config", "summarise", "warm_starts", "write_table"]
