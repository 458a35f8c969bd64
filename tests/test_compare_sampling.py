"""`mathrl compare-sampling`: the three samplers' configs differ only in the sampler, every run
stops on the same questions drawn, and a small comparison runs and accounts for what each spent."""

from __future__ import annotations

import json

import pytest

from pipeline.config import ConfigError, load_run_config, to_dict
from pipeline.config.checks import check_sampling_pool
from pipeline.stages import compare_objectives as co
from pipeline.stages import compare_sampling as cs


def _differences(a, b, prefix=""):
    """Dotted keys where two config dicts differ."""
    out = []
    for k in a:
        if isinstance(a[k], dict):
            out += _differences(a[k], b[k], f"{prefix}{k}.")
        elif a[k] != b[k]:
            out.append(prefix + k)
    return out


def test_cells_differ_only_in_the_sampler_and_share_the_question_budget():
    cfg = load_run_config("configs/cpu_tiny.yaml", ["train.question_pool=2000"])
    cells = {v: co.cell_config(cfg, v, 1, cs.SAMPLING) for v in cs.SAMPLERS}
    for run in cells.values():
        assert run.train.async_staleness == cfg.train.async_staleness == 1  # the shipped, pipelined trainer
        assert run.train.eval_every == 0 and run.seed == 1
        assert run.train.max_questions == cfg.train.steps * cfg.train.questions_per_step == 9600
        assert run.train.question_pool == 2000 and run.model.name_or_path == cfg.sft.output
    ref = to_dict(cells["uniform"])
    assert sorted(_differences(to_dict(cells["pass_rate"]), ref)) == ["name", "train.sampling"]
    assert sorted(_differences(to_dict(cells["dynamic"]), ref)) == ["name", "train.dynamic_sampling"]
    assert co.plan(cfg, tuple(cs.SAMPLERS), (0, 1), cs.SAMPLING) == [
        ("uniform", 0), ("uniform", 1), ("pass_rate", 0), ("pass_rate", 1), ("dynamic", 0), ("dynamic", 1)]


@pytest.mark.parametrize("pool", [0, 9600, 20000])
def test_a_pool_that_is_never_revisited_is_refused(pool, capsys):
    from pipeline import cli

    cfg = load_run_config("configs/cpu_tiny.yaml", [f"train.question_pool={pool}"])
    with pytest.raises(ConfigError, match=f"draws 9600 questions .* below that \\(got {pool}\\)"):
        check_sampling_pool(cfg)
    # the command says so in one line, before it prepares data or trains anything
    assert cli.main(["compare-sampling", "--config", "configs/cpu_tiny.yaml", f"train.question_pool={pool}"]) == 2
    assert capsys.readouterr().err.strip().startswith("mathrl: config error: compare-sampling draws 9600")


def test_small_comparison_spends_the_same_questions(tiny_setup):
    """An untrained model is never right: every group is flat, so dynamic sampling refills 3 times
    (4 x 2 = 8 questions in its first step) and stops after that one step, where uniform and pass_rate
    train 3 steps of 2. Each cell's cost is read from its metrics."""
    overrides, root = tiny_setup
    cfg = load_run_config(None, [*overrides, "name=smp", "stages=[sft, train, eval]", f"sft.init={root}/tiny",
                                 f"sft.output={root}/smp-sft", "sft.steps=2", "sft.eval_limit=0", "train.steps=3",
                                 "train.questions_per_step=2", "train.question_pool=4", "rollout.group_size=2",
                                 "rollout.max_new_tokens=8", "eval.limit=3", "eval.max_new_tokens=8",
                                 "eval.n_samples=2", "eval.temperature=1.0", "eval.ks=[1, 2]"])
    assert cs.main(cfg, seeds=(0,)) == 0
    out = root / "runs" / "smp-sampling"
    cells = {c["variant"]: c for c in json.loads((out / "results.json").read_text())["cells"]}
    assert set(cells) == set(cs.SAMPLERS)
    assert {v: (c["cost"]["steps"], c["cost"]["questions"]) for v, c in cells.items()} == {
        "uniform": (3, 6), "pass_rate": (3, 6), "dynamic": (1, 8)}
    assert (out / "results.png").stat().st_size > 10_000
    table = (out / "results.md").read_text()
    assert "until 6 questions are drawn (at most 3 steps of 2 questions)" in table
    assert "| dynamic | 1 | 1 | 8 |" in table


def test_samplers_option_parses_and_refuses_unknown_names():
    import argparse

    from pipeline.cli import sampler_list

    assert sampler_list("dynamic, uniform,dynamic") == ("dynamic", "uniform")
    with pytest.raises(argparse.ArgumentTypeError, match="expected samplers among uniform, pass_rate, dynamic"):
        sampler_list("uniform,hardest")
