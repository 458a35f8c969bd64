"""`mathrl compare-objectives` / `make compare-objectives`: every objective variant of
docs/grpo_math.md trained for the same budget from the same SFT start, and which differences are
more than seed noise.

``VARIANTS`` is the one list of what is compared, each variant as the config overrides that select
it (docs/grpo_math.md's table says what each does); ``SHARED`` is applied to every cell. Each variant
runs once (GRPO seed 0), the ``seeded`` variants once per seed of ``seeds``: their spread is the
noise every other difference is measured against. The SFT model is the config's (`make train`'s,
trained first when missing or stale); GRPO runs for ``train.steps`` (the budget: pass
``train.steps=N``), with no periodic eval, and every eval of `mathrl run` before and after.

The cells are the seed grid's (pipeline/stages/seed_grid.py): the same "before" evals read back while
the SFT model is unchanged, and a finished cell (``cell.json``, current while its config and SFT
model are the same: pipeline/freshness.py) is read back instead of rerun, so an interrupted
comparison continues where it stopped. It writes ``<output_dir>/<name>-objectives/results.json``
(every cell, its final policy entropy and cost, the summary), ``results.md``: per variant and eval,
the accuracy after, the gain over before, and whether its difference from the reference variant is
within noise, and ``results.png``: every run's gain, per variant and eval.

Noise: the seeded variants' seed standard deviations, pooled (s, with their degrees of freedom). A
one-seed variant's difference d from the reference's mean of n seeds is within noise when |d| is
inside the 95% prediction interval t95 * s * sqrt(1 + 1/n) of a new run's difference (evals/stats.py's
t table); two seeded variants are compared by the exact permutation p of their seeds (with 3 and 3
seeds the smallest p possible is 0.1, so no such difference can be called significant at 0.05).
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from pipeline import layout
from pipeline.config import RunConfig, with_overrides

# name -> overrides of the config that select the variant (docs/grpo_math.md's table)
VARIANTS: dict[str, tuple[str, ...]] = {
    "grpo": (),  # the CPU default, whose pipelined loop already corrects staleness by token TIS (cap 2)
    "dr-grpo": ("train.adv_scale=none", "train.loss_type=dr_grpo"),
    # DAPO's objective; its dynamic sampling is a sampler, compared by `mathrl compare-sampling`
    "dapo": ("train.clip_high=0.28", "train.loss_type=dapo", "train.mask_truncated=true"),
    "gspo": ("train.importance_level=sequence",),
    "2-grpo": ("rollout.group_size=2", "train.questions_per_step=64"),  # configs/two_grpo.yaml's recipe
    "sapo": ("train.surrogate=sapo",),
    "cispo": ("train.surrogate=cispo", "train.adv_scale=batch", "train.loss_type=dapo"),  # ScaleRL's
    "vespo": ("train.surrogate=vespo", "train.loss_type=dapo"),  # TRL's "vespo"
    "dppo-tv": ("train.surrogate=dppo",),
    "dppo-kl": ("train.surrogate=dppo", "train.dppo_divergence=kl", "train.dppo_delta=0.05"),
    "dppo-topk": ("train.surrogate=dppo", "train.dppo_topk=20"),
    "tis-sequence": ("rollout.is_level=sequence",),  # token TIS is the default's (the pipelined loop needs one)
    "mis": ("rollout.is_correction=mis",),
    "gopo": ("train.adv_norm=rank",),
    # GDPO differs from GRPO only with two or more reward components: both get the 0.1 format bonus
    "grpo-format": ("reward.weights={correct: 1.0, format: 0.1}",),
    "gdpo": ("reward.weights={correct: 1.0, format: 0.1}", "train.adv_norm=per_reward"),
}
# With one update per batch the pipelined default's old policy is the update's own forward (ratio 1),
# where clip, SAPO's gate, CISPO's cap and DPPO's mask do nothing: those variants would give GRPO's
# gradient. Two mini-batches per batch give the second one a policy that has moved.
SHARED = ("train.mini_batches=2",)
SEEDED = ("grpo", "dr-grpo")  # the reference (first) and the variant closest to it
SEEDS = (0, 1, 2)
REFERENCE = SEEDED[0]


@dataclass(frozen=True)
class Suite:
    """One comparison from one SFT start: its variants (name -> config overrides), the overrides
    every cell shares, and names. `mathrl compare-sampling` is a second
    suite (pipeline/stages/compare_sampling.py)."""

    tag: str  # cells: <config name>-<tag>-<variant>-seed<s>
    out: str  # results: <output_dir>/<config name>-<out>/
    title: str
    variants: dict[str, tuple[str, ...]]
    shared: tuple[str, ...]
    same_questions: bool = False  # every cell stops at train.steps x questions_per_step drawn (train.max_questions)


OBJECTIVES = Suite("obj", "objectives", "Objective variants", VARIANTS, SHARED)


def cell_config(cfg: RunConfig, variant: str, seed: int, suite: Suite = OBJECTIVES) -> RunConfig:
    """One GRPO run of ``variant`` from the config's SFT model; no periodic eval (before/after only)."""
    run = with_overrides(cfg, [*suite.shared, *suite.variants[variant]])
    budget = cfg.train.steps * cfg.train.questions_per_step if suite.same_questions else run.train.max_questions
    return dataclasses.replace(
        run, seed=seed, name=f"{cfg.name}-{suite.tag}-{variant}-seed{seed}",
        model=dataclasses.replace(run.model, name_or_path=cfg.sft.output),
        train=dataclasses.replace(run.train, eval_every=0, max_questions=budget))


def plan(cfg: RunConfig, seeded: tuple[str, ...] = SEEDED, seeds: tuple[int, ...] = SEEDS,
         suite: Suite = OBJECTIVES) -> list[tuple[str, int]]:
    """(variant, GRPO seed) of every cell: one seed each, every seed for the seeded ones."""
    return [(v, s) for v in suite.variants for s in (seeds if v in seeded else seeds[:1])]


def run_record(run_cfg: RunConfig) -> tuple[float | None, dict]:
    """From one read of a cell's metrics: the policy entropy (nats / token) of its last logged step
    (None when not logged), and what its GRPO spent: steps, questions drawn (G rollouts each; None
    when not logged) and minutes of its steps."""
    from pipeline.grpo.run_log import read_metrics

    rows = read_metrics(layout.run_dir(run_cfg))
    entropies = [r["entropy"] for r in rows if "entropy" in r]
    steps = [r for r in rows if "time/step" in r]
    cost = {"steps": len(steps), "questions": steps[-1].get("sampling/drawn") if steps else None,
            "minutes": sum(r["time/step"] for r in steps) / 60}
    return (entropies[-1] if entropies else None), cost


def noise(cells: list[dict], keys: list[str]) -> dict[str, tuple[float, int]]:
    """eval key -> (pooled seed std of the after accuracies, its degrees of freedom) over the
    variants with two or more seeds."""
    out = {}
    for key in keys:
        groups = [[c["after"][key] for c in cells if c["variant"] == v]
                  for v in dict.fromkeys(c["variant"] for c in cells)]
        groups = [g for g in groups if len(g) > 1]
        df = sum(len(g) - 1 for g in groups)
        out[key] = (math.sqrt(sum(statistics.variance(g) * (len(g) - 1) for g in groups) / df) if df else 0.0, df)
    return out


def summarise(cells: list[dict], reference: str = REFERENCE) -> dict:
    """Per variant and eval key: mean after, gain and the verdict against ``reference``."""
    from evals.stats import permutation_p, t95

    keys = list(cells[0]["after"])
    spread = noise(cells, keys)
    by_variant = {v: [c for c in cells if c["variant"] == v] for v in dict.fromkeys(c["variant"] for c in cells)}
    ref = by_variant[reference]
    out: dict[str, dict] = {}
    for v, mine in by_variant.items():
        out[v] = {"seeds": len(mine), "entropy": _mean([c["entropy"] for c in mine]), "evals": {},
                  **{k: _mean([c.get("cost", {}).get(k) for c in mine]) for k in ("steps", "questions", "minutes")}}
        for key in keys:
            after = [c["after"][key] for c in mine]
            ref_after = [c["after"][key] for c in ref]
            diff = statistics.fmean(after) - statistics.fmean(ref_after)
            s, df = spread[key]
            mean = statistics.fmean(after)
            entry = {"after_mean": mean, "gain_mean": mean - mine[0]["before"][key],
                     "after_std": statistics.stdev(after) if len(after) > 1 else None, "diff": diff}
            if v != reference and len(after) > 1 and len(ref_after) > 1:
                entry["p"] = permutation_p(ref_after, after)
                entry["within_noise"] = entry["p"] > 0.05
            elif v != reference:
                bound = t95(df) * s * math.sqrt(1 / len(after) + 1 / len(ref_after)) if df else math.inf
                entry["bound"] = bound
                entry["within_noise"] = abs(diff) <= bound
            out[v]["evals"][key] = entry
    return {"reference": reference, "noise": {k: {"std": s, "df": df} for k, (s, df) in spread.items()},
            "variants": out}


def _mean(values):
    values = [x for x in values if x is not None]
    return statistics.fmean(values) if values else None


def write_table(summary: dict, cells: list[dict], cfg: RunConfig, path: Path, suite: Suite = OBJECTIVES) -> None:
    from pipeline.stages.seed_grid import metric_names

    names, ref = metric_names(cfg), summary["reference"]
    keys = list(cells[0]["after"])
    before = cells[0]["before"]
    noise_text = ", ".join(f"{names[k]} {100 * v['std']:.1f} ({v['df']} df)" for k, v in summary["noise"].items())
    steps = f"{cfg.train.steps} steps of {cfg.train.questions_per_step} questions"
    budget = (f"each run until {cfg.train.steps * cfg.train.questions_per_step} questions are drawn (at most {steps})"
              if suite.same_questions else f"each run {steps}")
    lines = [f"# {suite.title} from one SFT start ({len(cells)} GRPO runs)", "",
             f"Task `{cfg.train.task}`; {budget}, "
             f"G = {cfg.rollout.group_size} (unless a variant's overrides below say otherwise), lr {cfg.train.lr:g}, "
             "shared overrides "
             f"{' '.join(suite.shared) or 'none'}; eval on the first {cfg.eval.limit or 'all'} problems of each split. "
             "Accuracies in points (x100); before: " + ", ".join(f"{names[k]} {100 * before[k]:.1f}" for k in keys)
             + ".", "", f"Seed noise (pooled std of the seeded variants' after accuracies): {noise_text}. "
             f"diff: against `{ref}`'s mean; `=` within noise (one seed: inside the 95% prediction interval; "
             "several: permutation p > 0.05), `*` outside it.", "",
             "Cost, per run on average: GRPO steps, questions drawn (G rollouts each), minutes of those steps.", "",
             "| variant | seeds | steps | questions | minutes | entropy | "
             + " | ".join(f"{names[k]}: after (gain) diff" for k in keys) + " |",
             "|---|---|---|---|---|---|" + "---|" * len(keys)]
    for v, s in summary["variants"].items():
        row = [v, str(s["seeds"]), *(_number(s.get(k), f) for k, f in (("steps", ".0f"), ("questions", ".0f"),
                                                                         ("minutes", ".1f"), ("entropy", ".3f")))]
        for k in keys:
            e = s["evals"][k]
            spread = f" ± {100 * e['after_std']:.1f}" if e["after_std"] is not None else ""
            verdict = "" if v == ref else f" {100 * e['diff']:+.1f} {'=' if e['within_noise'] else '*'}"
            row.append(f"{100 * e['after_mean']:.1f}{spread} ({100 * e['gain_mean']:+.1f}){verdict}")
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Overrides of each variant (on the config and the shared ones):", ""]
    lines += [f"- `{v}`: {' '.join(f'`{o}`' for o in suite.variants[v]) or '(none)'}" for v in summary["variants"]]
    path.write_text("\n".join(lines) + "\n")


def write_plot(summary: dict, cells: list[dict], cfg: RunConfig, path: Path) -> None:
    """One panel per eval: each variant's gain over "before" on every seed (dots) and their mean (bar),
    the variant labelled with what a run cost: how far apart the variants are, against the seeds' spread."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from pipeline.stages.seed_grid import metric_names

    names, keys, variants = metric_names(cfg), list(cells[0]["after"]), list(summary["variants"])
    many = len(variants) > 4  # compare-objectives' 16: narrow bars, labels turned
    panel = 0.4 * len(variants) if many else 2.4
    fig, axes = plt.subplots(1, len(keys), figsize=(max(6.0, panel * len(keys)), 5.0 if many else 3.8), squeeze=False)
    for ax, key in zip(axes[0], keys):
        for i, v in enumerate(variants):
            gains = [100 * (c["after"][key] - c["before"][key]) for c in cells if c["variant"] == v]
            ax.bar(i, sum(gains) / len(gains), color=f"C{i}", alpha=0.35)
            ax.plot([i] * len(gains), gains, "o", color=f"C{i}", markersize=4)
        ax.axhline(0, color="black", linewidth=0.6)
        ax.set_xticks(range(len(variants)), [_cost_label(v, summary["variants"][v]) for v in variants], fontsize=7,
                      rotation=90 if many else 0)
        ax.set_title(names.get(key, key), fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    axes[0][0].set_ylabel("gain over the SFT model, points")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _cost_label(variant: str, s: dict) -> str:
    parts = [variant] + [f"{s[k]:{f}}{unit}" for k, f, unit in (("steps", ".0f", " steps"), ("minutes", ".1f", " min"))
                         if s.get(k) is not None]
    return "\n".join(parts)


def _number(value, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def main(cfg: RunConfig, seeded: tuple[str, ...] = SEEDED, seeds: tuple[int, ...] = SEEDS,
         table_only: bool = False, suite: Suite = OBJECTIVES) -> int:
    from pipeline import determinism
    from pipeline.stages import build_tiny, sft
    from pipeline.stages.seed_grid import run_cell, saved_cell, sft_before

    command = f"compare-{suite.out}"
    determinism.apply(cfg, command)
    out = Path(cfg.output_dir) / f"{cfg.name}-{suite.out}"
    out.mkdir(parents=True, exist_ok=True)
    cells = []
    if not table_only:
        if "build-tiny" in cfg.stages:
            build_tiny.main(cfg)
        sft.main(cfg)
        before = sft_before(cfg, out / "before")
    for variant, seed in plan(cfg, seeded, seeds, suite):
        run_cfg = cell_config(cfg, variant, seed, suite)
        cell = saved_cell(run_cfg, cfg) if table_only else run_cell(run_cfg, cfg, before)
        if cell is None:
            print(f"{command}: {run_cfg.name} not finished; left out of the table")
            continue
        entropy, cost = run_record(run_cfg)
        cells.append({**cell, "variant": variant, "entropy": entropy, "cost": cost})
    if not any(c["variant"] == seeded[0] for c in cells):
        print(f"{command}: no finished run of the reference variant {seeded[0]}")
        return 1
    summary = summarise(cells, seeded[0])
    (out / "results.json").write_text(json.dumps({"summary": summary, "cells": cells}, indent=1))
    write_table(summary, cells, cfg, out / "results.md", suite)
    write_plot(summary, cells, cfg, out / "results.png")
    print((out / "results.md").read_text())
    return 0


__all__ = ["OBJECTIVES", "REFERENCE", "SEEDED", "SEEDS", "SHARED", "VARIANTS", "Suite", "cell_config", "main", "noise",
           "plan", "run_record", "summarise", "write_plot", "write_table"]
