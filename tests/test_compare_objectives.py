"""`mathrl compare-objectives`: one config per variant of docs/grpo_math.md's table, the noise
verdicts by hand, and a small comparison that runs, tabulates and reads finished cells back."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest

from evals.stats import permutation_p
from pipeline.config import load_run_config
from pipeline.stages import compare_objectives as co


def test_every_variant_of_the_docs_table_is_compared_and_builds_on_the_cpu_default():
    cfg = load_run_config("configs/cpu_tiny.yaml")
    doc = (Path(__file__).parents[1] / "docs/grpo_math.md").read_text()
    table = doc[doc.index("| variant | config |"):].split("\n\n")[0].splitlines()[2:]
    rows = [re.match(r"\| ([^|]+?) \|", line).group(1) for line in table]
    assert len(rows) == 13, rows
    for row in rows:
        slug = row.lower().replace(". ", "-").replace(" ", "-")
        if slug == "tis":  # the CPU default's pipelined loop already carries token TIS
            assert cfg.rollout.tis_cap > 0 and cfg.rollout.is_correction == "tis"
            continue
        assert any(v == slug or v.startswith(slug + "-") for v in co.VARIANTS), row
    names = set()
    for variant in co.VARIANTS:
        run = co.cell_config(cfg, variant, 0)  # every override combination passes the config's checks
        assert run.model.name_or_path == cfg.sft.output and run.train.eval_every == 0
        assert run.train.mini_batches == 2 and run.train.steps == cfg.train.steps
        names.add(run.name)
    assert len(names) == len(co.VARIANTS)
    assert co.cell_config(cfg, "dppo-topk", 0).train.dppo_topk == 20
    assert co.cell_config(cfg, "gdpo", 0).reward.weights == {"correct": 1.0, "format": 0.1}
    assert co.cell_config(cfg, "2-grpo", 0).rollout.group_size == 2
    plan = co.plan(cfg)
    assert plan.count(("grpo", 2)) == 1 and ("sapo", 1) not in plan and len(plan) == len(co.VARIANTS) + 4


def _cells():
    def cell(variant, after):
        return {"variant": variant, "entropy": 0.5, "before": {"": 0.4}, "after": {"": after}}
    return [cell("grpo", a) for a in (0.5, 0.6, 0.7)] + [cell("dr-grpo", a) for a in (0.55, 0.65, 0.75)] + [
        cell("sapo", 0.62), cell("vespo", 0.95)]


def test_noise_verdicts_by_hand():
    summary = co.summarise(_cells())
    assert summary["noise"][""] == {"std": pytest.approx(0.1), "df": 4}  # both seeded variants: std 0.1
    bound = 2.776 * 0.1 * math.sqrt(1 + 1 / 3)  # t95(4) * s * sqrt(1/1 + 1/3) = 0.3205
    sapo, vespo = summary["variants"]["sapo"]["evals"][""], summary["variants"]["vespo"]["evals"][""]
    assert sapo["bound"] == pytest.approx(bound) and sapo["within_noise"]  # +0.02
    assert vespo["diff"] == pytest.approx(0.35) and not vespo["within_noise"]  # 0.35 > 0.3205
    dr = summary["variants"]["dr-grpo"]["evals"][""]
    assert dr["p"] == pytest.approx(permutation_p([0.5, 0.6, 0.7], [0.55, 0.65, 0.75])) and dr["within_noise"]
    assert summary["variants"]["grpo"]["evals"][""]["gain_mean"] == pytest.approx(0.2)


@pytest.mark.slow
def test_small_comparison_runs_tabulates_and_reads_finished_cells_back(tiny_setup, capsys):
    overrides, root = tiny_setup
    suite = dataclasses.replace(co.OBJECTIVES, variants={v: co.VARIANTS[v] for v in ("grpo", "dr-grpo", "dppo-topk")})
    cfg = load_run_config(None, [*overrides, "name=cmp", "stages=[sft, train, eval]", f"sft.init={root}/tiny",
                                 f"sft.output={root}/cmp-sft", "sft.steps=3", "sft.eval_limit=0", "train.steps=2",
                                 "train.questions_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=8",
                                 "eval.limit=3", "eval.max_new_tokens=8", "eval.n_samples=2", "eval.temperature=1.0",
                                 "eval.ks=[1, 2]"])
    assert co.main(cfg, seeded=("grpo", "dr-grpo"), seeds=(0, 1), suite=suite) == 0
    out = root / "runs" / "cmp-objectives"
    result = json.loads((out / "results.json").read_text())
    assert [(c["variant"], c["grpo_seed"]) for c in result["cells"]] == [
        ("grpo", 0), ("grpo", 1), ("dr-grpo", 0), ("dr-grpo", 1), ("dppo-topk", 0)]
    assert all(c["entropy"] > 0 for c in result["cells"])  # the last step's policy entropy was read
    assert all(c["cost"]["steps"] == 2 and c["cost"]["questions"] == 4 and c["cost"]["minutes"] > 0
               for c in result["cells"])  # 2 steps x 2 questions
    assert "within_noise" in result["summary"]["variants"]["dppo-topk"]["evals"][""]
    table = (out / "results.md").read_text()
    assert "| dppo-topk | 1 |" in table and "`train.dppo_topk=20`" in table
    capsys.readouterr()
    assert co.main(cfg, seeded=("grpo", "dr-grpo"), seeds=(0, 1), suite=suite) == 0
    assert capsys.readouterr().out.count("done before; read back") == 5
    assert json.loads((out / "results.json").read_text())["cells"] == result["cells"]
    assert co.main(cfg, seeded=("grpo",), seeds=(0, 2), table_only=True, suite=suite) == 0
    assert "cmp-obj-grpo-seed2 not finished" in capsys.readouterr().out
