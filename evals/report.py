"""Write an eval's outputs: results.jsonl, summary.json, report.md and a bar chart PNG.

The Markdown report shows the headline metrics, with ``rollout.tools`` the tool use (calls per
solution, the share of solutions using the tool, failed calls; evals/tool_use.py), published numbers
for the same model (marked "published, not measured"), per-subject and per-level tables when the
dataset has them (MATH, MATH-500; with tool-use columns under ``rollout.tools``), the
answer-extraction failure rate, the failure reasons and a few failed examples.
"""

from __future__ import annotations

import json
from pathlib import Path

from evals.published import published_for

CHART = "accuracy.png"


def write_outputs(out_dir: str | Path, records: list[dict], summary: dict) -> Path:
    """Write every output file into ``out_dir`` (created); returns the report path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with (out / "results.jsonl").open("w") as f:
        for rec in records:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    write_chart(out / CHART, summary)
    report = out / "report.md"
    report.write_text(render_report(records, summary))
    return report


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _group_rows(title: str, table: dict[str, dict]) -> list[str]:
    if not table:
        return []
    tool = all("tool_calls" in row for row in table.values())  # rollout.tools: tool use beside accuracy
    extra = " tool calls / solution | solutions using the tool % | failed calls / solution |" if tool else ""
    lines = [f"## By {title}", "", f"| {title} | problems | accuracy % | no answer extracted % |{extra}",
             "| --- | ---: | ---: | ---: |" + (" ---: | ---: | ---: |" if tool else "")]
    for name, row in table.items():
        cells = (f" {row['tool_calls']:.2f} | {_pct(row['tool_used_frac'])} | {row['tool_errors']:.2f} |"
                 if tool else "")
        lines.append(f"| {name} | {row['n']} | {_pct(row['accuracy'])} | {_pct(row['extraction_failure_rate'])} |"
                     + cells)
    return lines + [""]


def _tool_rows(summary: dict) -> list[str]:
    """The tool-use section of an eval with ``rollout.tools`` (evals/tool_use.py); nothing without tools."""
    t = summary.get("tool")
    if not t:
        return []

    def acc(x):
        return "-" if x is None else _pct(x)

    return ["## Tool use (rollout.tools)", "", "| metric | value |", "| --- | ---: |",
            f"| tool calls per solution | {t['calls_per_solution']:.2f} |",
            f"| solutions that called the tool % | {_pct(t['used_frac'])} |",
            f"| failed calls per solution | {t['errors_per_solution']:.2f} |",
            f"| timed-out calls per solution | {t['timeouts_per_solution']:.2f} |",
            f"| failed calls % of calls | {_pct(t['error_rate'])} |",
            f"| accuracy % of solutions that called the tool | {acc(t['accuracy_used'])} |",
            f"| accuracy % of solutions that did not | {acc(t['accuracy_unused'])} |",
            f"| sandbox seconds, all calls summed | {t['sandbox_s']:.1f} |", ""]


def _metric_rows(summary: dict) -> list[str]:
    lines = ["| metric | value % |", "| --- | ---: |"]
    label = "greedy pass@1" if summary.get("greedy") else "mean accuracy (pass@1 estimate)"
    lines.append(f"| {label} | {_pct(summary['accuracy'])} |")
    if not summary.get("greedy"):
        lines += [f"| pass@{k} | {_pct(v)} |" for k, v in summary["pass@k"].items()]
        lines += [f"| maj@{k} | {_pct(v)} |" for k, v in summary["maj@k"].items()]
    lines.append(f"| answer-extraction failure rate | {_pct(summary['extraction_failure_rate'])} |")
    lines.append(f"| truncated at max_new_tokens | {_pct(summary['truncation_rate'])} |")
    return lines


def _published_rows(summary: dict) -> list[str]:
    rows = published_for(summary.get("model", ""), summary.get("dataset", ""))
    if not rows:
        return []
    lines = ["## Published numbers for this model (published, not measured)", "",
             "| model | dataset | published % | this eval % | setting | source |",
             "| --- | --- | ---: | ---: | --- | --- |"]
    for p in rows:
        lines.append(f"| {p.model} | {p.dataset} | {p.accuracy:.1f} | {_pct(summary['accuracy'])} | "
                     f"{p.setting} | {p.source} |")
    note = (" MATH-500 is a 500-problem subset of MATH; the published numbers are on all 5,000."
            if summary.get("dataset") == "math500" else "")
    return lines + ["", f"Prompts and graders differ between the source and this harness.{note}", ""]


def _failures(records: list[dict], limit: int = 3) -> list[str]:
    shown = [r for r in records if not r["correct"][0]][:limit]
    if not shown:
        return []
    lines = ["## Examples of failures (first sample)", ""]
    for r in shown:
        text = r["completions"][0].strip().replace("\n", " ")[:300] or "(blank completion)"
        lines += [f"- `{r['id']}` gold `{r['gold']}`, extracted `{r['preds'][0]}` "
                  f"({r['reasons'][0]}): {text}", ""]
    return lines


def render_report(records: list[dict], summary: dict) -> str:
    s = summary
    head = [f"# Eval: {s.get('model', '?')} on {s.get('dataset', '?')} ({s.get('split', 'test')})", "",
            f"{s['n_problems']} problems x {s.get('n_samples', 1)} samples, temperature "
            f"{s.get('temperature', 0)}, template `{s.get('template', '?')}`, {s.get('few_shot', 0)}-shot, "
            f"{'with the python tool (rollout.tools), ' if s.get('tool') else ''}"
            f"grader style `{s.get('style', '?')}`, max_new_tokens {s.get('max_new_tokens', '?')}, "
            f"{s.get('seconds', 0):.0f} s.", "", *_metric_rows(s), "", f"![accuracy]({CHART})", ""]
    reasons = [f"- {why}: {count}" for why, count in s["failure_reasons"].items()]
    if reasons:
        reasons = ["## Why completions were graded wrong", "", *reasons, ""]
    return "\n".join(head + _tool_rows(s) + _published_rows(s) + _group_rows("subject", s["by_subject"])
                     + _group_rows("level", s["by_level"]) + reasons + _failures(records)) + "\n"


def write_chart(path: Path, summary: dict) -> None:
    """Bar chart: the headline metrics, plus accuracy per subject and per level when present."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("metrics", _chart_metrics(summary))]
    for key in ("by_subject", "by_level"):
        if summary[key]:
            panels.append((key.replace("by_", "accuracy by "),
                           {name: row["accuracy"] for name, row in summary[key].items()}))
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
    for ax, (title, values) in zip(axes[0], panels):
        colors = ["tab:red" if name == "no answer" else "tab:blue" for name in values]
        bars = ax.bar(range(len(values)), [100 * v for v in values.values()], color=colors)
        ax.bar_label(bars, fmt="%.1f", fontsize=7)
        ax.set_xticks(range(len(values)), list(values), rotation=45, ha="right", fontsize=8)
        ax.set_ylim(0, 100)
        ax.set_ylabel("%")
        ax.set_title(title)
    fig.suptitle(f"{summary.get('model', '')} on {summary.get('dataset', '')}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _chart_metrics(summary: dict) -> dict[str, float]:
    values = {"accuracy": summary["accuracy"]}
    if not summary.get("greedy"):
        values.update({f"pass@{k}": v for k, v in summary["pass@k"].items()})
        values.update({f"maj@{k}": v for k, v in summary["maj@k"].items()})
    values["no answer"] = summary["extraction_failure_rate"]
    return values
