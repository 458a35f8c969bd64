"""`mathrl eval` in tool-integrated reasoning mode (rollout.tools: [python], docs/tir.md) on the scripted
stand-in policy (tests/tir_standin.py saved as a model directory: it writes a ```python block, and after
the block's output "The answer is 42."): the eval runs the code through the sandbox, grades the whole
transcript, and reports tool use beside accuracy, overall and per subject; with the tools off the same
model stops at its code block and gets nothing right. Also Qwen2.5-Math's TIR prompt, byte for byte,
and the tool-use summary on hand-made records."""

from __future__ import annotations

import json

import pytest

from evals.tool_use import tool_summary
from pipeline.config import load_run_config
from pipeline.prompts import TEMPLATES, build_prompt

# Qwen2.5-Math README, the TIR example's system message (QwenLM/Qwen2.5-Math)
QWEN_TIR_SYSTEM = ("Please integrate natural language reasoning with programs to solve the problem above, "
                   "and put your final answer within \\boxed{}.")
PROBLEMS = [("Algebra", "42"), ("Algebra", "41"), ("Geometry", "42"), ("Geometry", "42")]


def _eval(tmp_path, code: str, tools: bool, capsys):
    from pipeline.stages.eval import main
    from tests.tir_standin import save_hf_policy

    policy = tmp_path / "policy"
    if not policy.is_dir():
        save_hf_policy(policy, code)
    data = tmp_path / "problems.jsonl"
    data.write_text("".join(json.dumps({"id": f"p{i}", "question": f"What is {i}?", "answer": gold,
                                        "subject": subject}) + "\n" for i, (subject, gold) in enumerate(PROBLEMS)))
    out = tmp_path / ("with" if tools else "without")
    cfg = load_run_config(None, [f"eval.model={policy}", f"eval.dataset={data}", f"eval.output_dir={out}",
                                 "prompt.chat=false", "eval.max_new_tokens=120", "device=cpu", "reward.style=gsm8k",
                                 "rollout.tools=[python]" if tools else "rollout.tools=[]",
                                 "rollout.tool_timeout_s=5"])
    assert main(cfg) == 0
    line = capsys.readouterr().out
    return json.loads((out / "summary.json").read_text()), (out / "report.md").read_text(), line, out


def test_eval_with_the_tool_reports_tool_use_beside_accuracy(tmp_path, capsys):
    summary, report, line, out = _eval(tmp_path, "print(6 * 7)", True, capsys)
    assert summary["accuracy"] == pytest.approx(0.75)  # 3 of the 4 golds are 42
    t = summary["tool"]
    assert t["calls_per_solution"] == 1.0 and t["used_frac"] == 1.0 and t["errors_per_solution"] == 0.0
    assert t["accuracy_used"] == pytest.approx(0.75) and t["accuracy_unused"] is None and t["sandbox_s"] > 0
    subjects = summary["by_subject"]
    assert subjects["Algebra"]["accuracy"] == 0.5 and subjects["Geometry"]["accuracy"] == 1.0
    assert subjects["Algebra"]["tool_calls"] == 1.0 and subjects["Geometry"]["tool_used_frac"] == 1.0
    records = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert all("```output\n42\n```\nThe answer is 42." in r["completions"][0] for r in records)
    assert all(r["tool"] == [{**r["tool"][0], "calls": 1, "errors": 0, "timeouts": 0}] for r in records)
    assert "## Tool use (rollout.tools)" in report and "| tool calls per solution | 1.00 |" in report
    assert "| Algebra | 2 | 50.0 | 0.0 | 1.00 | 100.0 | 0.00 |" in report
    assert "tool_calls=1.00 tool_used=1.000 tool_errors=0.00" in line and "accuracy=0.750" in line


def test_a_failing_block_counts_as_an_error_and_its_message_is_in_the_transcript(tmp_path, capsys):
    summary, report, _, out = _eval(tmp_path, "print(6 * 7)\n1 / 0", True, capsys)
    assert summary["tool"]["errors_per_solution"] == 1.0 and summary["tool"]["error_rate"] == 1.0
    record = json.loads((out / "results.jsonl").read_text().splitlines()[0])
    assert "```output\n42\nZeroDivisionError: division by zero\n```" in record["completions"][0]
    assert "| failed calls % of calls | 100.0 |" in report


def test_the_same_model_without_the_tool_has_no_tool_use_and_no_answer(tmp_path, capsys):
    summary, report, line, _ = _eval(tmp_path, "print(6 * 7)", False, capsys)
    assert summary["tool"] is None and "tool_calls" not in summary["by_subject"]["Algebra"]
    assert summary["accuracy"] == 0.0 and summary["extraction_failure_rate"] == 1.0  # it stops after its code
    assert "Tool use" not in report and "tool_calls" not in line


def test_qwen_math_tir_template_is_qwens_system_prompt(tiny_setup):
    from transformers import AutoTokenizer

    _, root = tiny_setup
    tok = AutoTokenizer.from_pretrained(root / "tiny")  # a ChatML chat template, like Qwen's
    question = "What is $2^{10}$?"
    assert build_prompt(question, template="qwen_math_tir", tokenizer=tok) == (
        "<|im_start|>system\n" + QWEN_TIR_SYSTEM + "<|im_end|>\n<|im_start|>user\n" + question
        + "<|im_end|>\n<|im_start|>assistant\n")
    assert TEMPLATES["qwen_math_tir"].style == "math"
    load_run_config(None, ["prompt.template=qwen_math_tir"])  # the config accepts it


def test_tool_summary_counts_per_solution():
    records = [{"tool": [{"calls": 2, "errors": 1, "timeouts": 0, "sandbox_s": 0.5},
                         {"calls": 0, "errors": 0, "timeouts": 0, "sandbox_s": 0.0}], "correct": [True, False]},
               {"tool": [{"calls": 1, "errors": 1, "timeouts": 1, "sandbox_s": 5.0},
                         {"calls": 1, "errors": 0, "timeouts": 0, "sandbox_s": 0.1}], "correct": [False, True]}]
    t = tool_summary(records)
    assert t["solutions"] == 4 and t["calls_per_solution"] == 1.0 and t["used_frac"] == 0.75
    assert t["errors_per_solution"] == 0.5 and t["timeouts_per_solution"] == 0.25 and t["error_rate"] == 0.5
    assert t["accuracy_used"] == pytest.approx(2 / 3) and t["accuracy_unused"] == 0.0
    assert t["sandbox_s"] == pytest.approx(5.6)
    assert tool_summary([{"correct": [True]}]) is None  # tools off: no tool statistics, no section
