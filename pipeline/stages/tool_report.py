"""The tool section of `mathrl run`'s report.md with ``rollout.tools`` (docs/tir.md): per eval, accuracy
with the tool and, under ``eval.compare_without_tools``, without it (the same model, which then writes
its code's output itself) and the difference, before and after GRPO, beside the tool use (calls per
solution, share of solutions calling the tool, failed calls; ``evals.tool_use``). Nothing for a run
without tools."""

from __future__ import annotations

NO_TOOLS = "notool_"  # key prefix of the evals with rollout.tools off in stages.run.eval_plan


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _gap(a: float, b: float | None) -> str:
    return "-" if b is None else f"{100 * (a - b):+.1f}"


def tool_rows(titles: dict[str, str], before: dict[str, dict], after: dict[str, dict]) -> list[str]:
    """Markdown lines: one row per eval key with the tool (``titles``: key -> readable name), its
    ``notool_`` twin's accuracy beside it when there is one. ``before`` / ``after``: key -> summary."""
    keys = [k for k in before if not k.startswith(NO_TOOLS) and before[k].get("tool") and k in after]
    if not keys:
        return []
    lines = ["**With and without the tool** (accuracy %; tools off = the same model writing its code's output "
             "itself)", "",
             "| eval | before: with | without | gain | after: with | without | gain | tool calls / solution "
             "(before -> after) | solutions using the tool % | failed calls / solution (after) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for k in keys:
        b, a = before[k], after[k]
        nb, na = before.get(NO_TOOLS + k), after.get(NO_TOOLS + k)
        wb, wa = (nb or {}).get("accuracy"), (na or {}).get("accuracy")
        tb, ta = b["tool"], a["tool"]
        lines.append(f"| {titles.get(k, k)} | {_pct(b['accuracy'])} | {_pct(wb)} | {_gap(b['accuracy'], wb)} | "
                     f"{_pct(a['accuracy'])} | {_pct(wa)} | {_gap(a['accuracy'], wa)} | "
                     f"{tb['calls_per_solution']:.2f} -> {ta['calls_per_solution']:.2f} | "
                     f"{_pct(tb['used_frac'])} -> {_pct(ta['used_frac'])} | {ta['errors_per_solution']:.2f} |")
    return lines + [""]


__all__ = ["NO_TOOLS", "tool_rows"]
