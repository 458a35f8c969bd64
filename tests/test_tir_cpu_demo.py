"""The pieces of the CPU demonstration that the tool is learned and matters (configs/cpu_tir.yaml,
docs/tir.md): the large-number gsm-synth variant, SFT solutions that compute with a python block and
its true output in exactly the text the multi-turn rollout builds, the tokenizer corpus that learns
them, and `mathrl run`'s evals with and without the tool (plan, result line, report table)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from pipeline.config import load_run_config
from pipeline.data import synth
from pipeline.data.synth_solutions import corrupt_records, parse
from pipeline.data.tir_solutions import tool_records, tool_solution
from pipeline.rollout.tool_format import closed_code, output_block
from pipeline.stages.run import NO_TOOLS, eval_plan, result_line, without_tools
from pipeline.stages.tool_report import tool_rows

CONFIG = "configs/cpu_tir.yaml"


def _records(n: int = 300):
    cfg = load_run_config(CONFIG, [f"data.synth_train_size={n}", "data.synth_test_size=20"])
    return synth.generate(cfg.data)[0], cfg


def test_the_variant_has_numbers_too_large_to_compute_in_the_head():
    train, _ = _records(1000)
    steps = [s for r in train for s in parse(r["solution"]) if isinstance(s, list)]
    products = [s for s in steps if s[2] == "*"]
    assert len(products) > 0.2 * len(steps)  # multiplication is common
    assert sum(s[3] >= 10 for s in products) > 0.8 * len(products)  # by 2-digit factors, mostly
    assert sum(len(str(s[1])) >= 3 for s in steps) > 0.85 * len(steps)  # of 3-digit values or more, mostly
    assert sum(int(r["answer"]) >= 10 ** 4 for r in train) > 0.25 * len(train)


@pytest.mark.parametrize("k", range(5))
def test_tool_solution_is_the_rollouts_transcript_with_the_true_output(k):
    train, _ = _records()
    r = train[k]
    text = tool_solution(r["solution"])
    turn = text.split("```\n", 1)[0] + "```"  # the policy's turn, up to its closing fence
    code = closed_code(turn)  # where the rollout stops and what it runs
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert printed == f"{r['answer']}\n"  # the code computes the gold answer
    # the rollout appends output_block(stdout less its newline) after the sampled fence: the same text
    assert text == turn + output_block(printed[:-1], turn) + f"#### {r['answer']}"


def test_tool_solution_refuses_what_is_not_one_chain():
    assert tool_solution("gets: <<2+3=5>>5\ntimes: <<7*2=14>>14\n#### 14") is None  # 7 is not the previous 5
    assert tool_solution("no steps here\n#### 3") is None
    assert tool_solution("splits: <<12/4=3>>3\n#### 3") == (
        "```python\nx = 12\nx = x // 4\nprint(x)\n```\n```output\n3\n```\n#### 3")


def test_tool_records_rewrites_about_frac_of_the_clean_solutions_and_never_a_corrupted_one():
    train, _ = _records(400)
    bad, n_bad = corrupt_records(train, 0.5, seed=0, mode="slip")
    out, n = tool_records(bad, 0.8, seed=0)
    assert n_bad > 50 and not any(r.get("tool") and r.get("corrupted") for r in out)
    clean = len(train) - n_bad
    assert 0.7 * clean < n < 0.9 * clean and n == sum(bool(r.get("tool")) for r in out)
    assert all(("```python" in r["solution"]) == bool(r.get("tool")) for r in out)
    assert tool_records(train, 0.0, seed=0) == (train, 0)
    assert tool_records(train, 0.8, seed=0) == tool_records(train, 0.8, seed=0)  # seeded


def test_sft_and_the_tokenizer_corpus_see_the_tool_solutions(tmp_path):
    from pipeline.models import tiny_corpus
    from pipeline.sft import training_records

    cfg = load_run_config(CONFIG, [f"data.prepared_dir={tmp_path}", "data.synth_train_size=200",
                                   "data.synth_test_size=20"])
    records, n_bad = training_records(cfg)
    assert n_bad == 0 and 0.7 * 200 < sum(bool(r.get("tool")) for r in records) < 0.9 * 200
    corpus = tiny_corpus(cfg)
    assert sum("```output" in text for text in corpus) == sum(bool(r.get("tool")) for r in records)
    off = dataclasses.replace(cfg, sft=dataclasses.replace(cfg.sft, tool_frac=0.0))
    assert not any("```" in text for text in tiny_corpus(off))  # the CPU default's corpus is unchanged


def test_run_evaluates_every_eval_with_and_without_the_tool():
    cfg = load_run_config(CONFIG, [])
    plan = eval_plan(cfg)
    assert set(plan) == {"", "greedy_", "notool_", "notool_greedy_"}
    assert all(c.rollout.tools == ["python"] for k, (c, _) in plan.items() if not k.startswith(NO_TOOLS))
    assert all(c.rollout.tools == [] for k, (c, _) in plan.items() if k.startswith(NO_TOOLS))
    assert plan["notool_greedy_"][0].eval.n_samples == 1 and plan["notool_"][0].eval.n_samples == 4
    assert set(eval_plan(without_tools(cfg))) == {"", "greedy_"}
    off = load_run_config(CONFIG, ["eval.compare_without_tools=false"])
    assert set(eval_plan(off)) == {"", "greedy_"}


def _summary(acc: float, calls: float | None = None) -> dict:
    tool = None if calls is None else {"calls_per_solution": calls, "used_frac": min(1.0, calls),
                                       "errors_per_solution": 0.05}
    return {"accuracy": acc, "extraction_failure_rate": 0.0, "tool": tool}


def test_result_line_and_report_table_compare_with_and_without():
    before = {"": _summary(0.6, 0.9), "notool_": _summary(0.1)}
    after = {"": _summary(0.8, 1.0), "notool_": _summary(0.05)}
    line = result_line("gsm-synth", before, after, 12.0)
    assert "before=0.6000 after=0.8000 notool_before=0.1000 notool_after=0.0500" in line
    rows = tool_rows({"": "greedy accuracy, with the tool"}, before, after)
    assert rows[4] == ("| greedy accuracy, with the tool | 60.0 | 10.0 | +50.0 | 80.0 | 5.0 | +75.0 | "
                       "0.90 -> 1.00 | 90.0 -> 100.0 | 0.05 |")
    assert len(rows) == 6  # title, blank, header, rule, one row, blank: the tools-off evals are not rows
    assert tool_rows({}, {"": _summary(0.5)}, {"": _summary(0.6)}) == []  # a run without tools: no table


def test_seed_grid_names_the_tools_off_evals():
    from pipeline.stages.seed_grid import metric_names

    names = metric_names(load_run_config(CONFIG, []))
    assert names["notool_greedy_"] == "test, greedy, tools off" and names["greedy_"] == "test, greedy"
    assert len(set(names.values())) == len(names)

