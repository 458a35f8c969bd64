"""`mathrl seed-grid`: warm starts x SFT seeds x GRPO seeds, a table of gains, finished cells read back."""

from __future__ import annotations

import json

import pytest

from pipeline.stages import seed_grid
from pipeline.config import ConfigError, load_run_config
from pipeline.config.checks import check_options


def test_configs_of_the_grid(tiny_setup):
    cfg = load_run_config(None, [*tiny_setup[0], "sft.corrupt_frac=0.5", "sft.corrupt_mode=carry", "name=g"])
    starts = seed_grid.warm_starts(cfg)
    assert list(starts) == ["carry 0.5", "clean"] and starts["clean"].sft.corrupt_frac == 0
    own = seed_grid.sft_config(starts["carry 0.5"], "carry 0.5", cfg.seed, cfg)
    assert own is starts["carry 0.5"]  # the config's own SFT model: shared with `make train`
    other = seed_grid.sft_config(starts["clean"], "clean", 2, cfg)
    assert other.seed == 2 and other.sft.output == f"{cfg.sft.output}-clean-seed2"
    assert other.model.tiny_dir == f"{cfg.model.tiny_dir}-seed2"
    run = seed_grid.grpo_config(other, "clean", 2, 1, cfg)
    assert run.seed == 1 and run.model.name_or_path == other.sft.output and run.name == "g-grid-clean-sft2-grpo1"


def test_summary_counts_runs_that_gained():
    cells = [{"start": "s", "sft_seed": k // 2, "grpo_seed": k % 2, "before": {"": 0.5, "greedy_": 0.6},
              "after": {"": 0.7 + 0.01 * k, "greedy_": 0.6 + (0.05 if k else -0.01)}} for k in range(4)]
    summary = seed_grid.summarise(cells)["s"]
    assert summary[""]["runs_gained"] == 4 and abs(summary[""]["gain_min"] - 0.2) < 1e-9
    assert summary["greedy_"]["runs_gained"] == 3 and abs(summary["greedy_"]["gain_min"] + 0.01) < 1e-9


def test_plot_draws_one_line_per_run_and_eval(tmp_path):
    from pipeline.config import RunConfig

    cells = [{"start": start, "sft_seed": k, "grpo_seed": 0, "before": {"": 0.5, "greedy_": 0.6},
              "after": {"": 0.7, "greedy_": 0.65}} for start in ("carry 0.6", "clean") for k in range(2)]
    seed_grid.write_plot(cells, RunConfig(), tmp_path / "grid.png")
    assert (tmp_path / "grid.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "grid.png").stat().st_size > 5000


def test_table_says_when_runs_stop_on_a_question_budget(tmp_path):
    cells = [{"start": "s", "sft_seed": 0, "grpo_seed": 0, "before": {"": 0.5}, "after": {"": 0.7}}]
    for extra, expect in (([], "600 steps x 16 questions x G = 8"),
                          (["train.max_questions=9600"], "600 steps x 16 questions (stopping once 9600 are drawn)")):
        cfg = load_run_config("configs/cpu_tiny.yaml", extra)
        seed_grid.write_table(seed_grid.summarise(cells), cells, cfg, tmp_path / "t.md")
        assert expect in (tmp_path / "t.md").read_text()


@pytest.mark.slow
def test_small_grid_runs_and_reads_finished_cells_back(tiny_setup, capsys):
    overrides, root = tiny_setup
    cfg = load_run_config(None, [*overrides, "name=grid", "stages=[build-tiny, sft, train, eval]",
                                 f"sft.init={root}/tiny", f"model.tiny_dir={root}/tiny", f"sft.output={root}/grid-sft",
                                 "sft.steps=3", "sft.eval_limit=0", "sft.corrupt_frac=0.3", "train.steps=1",
                                 "train.questions_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=8",
                                 "eval.limit=3", "eval.max_new_tokens=8", "eval.n_samples=2", "eval.temperature=1.0",
                                 "eval.ks=[1, 2]"])
    # two lanes (slip and clean warm start) in two processes
    assert seed_grid.main(cfg, sft_seeds=(cfg.seed,), grpo_seeds=(0, 1), workers=2) == 0
    out = root / "runs" / "grid-seeds"
    result = json.loads((out / "results.json").read_text())
    assert [(c["start"], c["grpo_seed"]) for c in result["cells"]] == [
        ("slip 0.3", 0), ("slip 0.3", 1), ("clean", 0), ("clean", 1)]
    assert set(result["summary"]["clean"]) == {"", "greedy_"}
    table = (out / "results.md").read_text()
    assert (out / "results.png").stat().st_size > 0
    assert "| slip 0.3 | test, greedy |" in table and "| clean | test, sampled |" in table
    capsys.readouterr()
    assert seed_grid.main(cfg, sft_seeds=(cfg.seed,), grpo_seeds=(0, 1)) == 0
    assert capsys.readouterr().out.count("done before; read back") == 4
    assert json.loads((out / "results.json").read_text())["cells"] == result["cells"]
    # table only: the finished cells of the chosen seeds and warm starts, nothing run, a missing one named
    assert seed_grid.main(cfg, sft_seeds=(cfg.seed,), grpo_seeds=(0, 1, 2), starts=("clean",), table_only=True) == 0
    printed = capsys.readouterr().out
    assert "grid-grid-clean-sft0-grpo2 not finished" in printed and "done before" not in printed
    assert [(c["start"], c["grpo_seed"]) for c in json.loads((out / "results.json").read_text())["cells"]] == [
        ("clean", 0), ("clean", 1)]
    assert "clean: 1 SFT seeds x 2 GRPO seeds (2 runs)" in (out / "results.md").read_text()
    assert seed_grid.main(cfg, sft_seeds=(cfg.seed,), grpo_seeds=(7,), table_only=True) == 1


def test_the_command_passes_the_chosen_seeds(monkeypatch, capsys):
    from pipeline import cli

    got = {}

    def stage(cfg, **kwargs):
        got.update(kwargs)
        return 0

    monkeypatch.setattr(cli, "stage_main", lambda name: stage)
    assert cli.main(["seed-grid", "--sft-seeds", "0,2", "--grpo-seeds", "1", "--warm-starts", "clean",
                     "--workers", "2", "--table-only"]) == 0
    assert got == {"sft_seeds": (0, 2), "grpo_seeds": (1,), "starts": ("clean",), "workers": 2, "table_only": True}
    assert cli.main(["seed-grid"]) == 0 and got == {"sft_seeds": (0, 1, 2), "grpo_seeds": (0, 1, 2),
                                                    "starts": ("corrupted", "clean"), "workers": 1, "table_only": False}
    for bad in ("0,0", "a", "-1", ""):
        with pytest.raises(SystemExit):
            cli.main(["seed-grid", "--sft-seeds", bad])
        assert "distinct non-negative integers" in capsys.readouterr().err
    for option, bad, says in (("--workers", "0", ">= 1"), ("--workers", "x", ">= 1"),
                              ("--warm-starts", "dirty", "expected corrupted, clean")):
        with pytest.raises(SystemExit):
            cli.main(["seed-grid", option, bad])
        assert says in capsys.readouterr().err


def test_lanes_pick_the_chosen_warm_starts(tiny_setup):
    cfg = load_run_config(None, [*tiny_setup[0], "sft.corrupt_frac=0.5", "sft.corrupt_mode=carry", "name=g"])
    both = seed_grid.lanes(cfg, (0, 1), ("corrupted", "clean"))
    assert [(start, seed) for start, seed, _ in both] == [("carry 0.5", 0), ("carry 0.5", 1),
                                                          ("clean", 0), ("clean", 1)]
    assert [(s, c.sft.corrupt_frac) for s, _, c in seed_grid.lanes(cfg, (1,), ("clean",))] == [("clean", 0.0)]
    assert [s for s, _, _ in seed_grid.lanes(cfg, (1,), ("corrupted",))] == ["carry 0.5"]
    clean_cfg = load_run_config(None, [*tiny_setup[0], "sft.corrupt_frac=0", "name=g"])
    with pytest.raises(ConfigError, match="same as `clean`"):  # the command checks this before the stage
        check_options(clean_cfg, "seed-grid", {"starts": ("corrupted",)})


def test_a_clean_config_asked_for_its_corrupted_start_is_one_line(tiny_setup, capsys):
    from pipeline import cli

    assert cli.main(["seed-grid", "--warm-starts", "corrupted", "--table-only", *tiny_setup[0],
                     "sft.corrupt_frac=0", "name=g"]) == 2
    err = capsys.readouterr().err
    assert "config error: seed-grid: no warm start left" in err and "Traceback" not in err
