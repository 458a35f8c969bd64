"""The step's tool-use statistics for metrics.jsonl (``rollout.tools``): per-completion means of the
calls, failed calls, timed-out calls, sandbox seconds and tool-output tokens, the step's total
sandbox seconds (summed over calls that overlap) and wall seconds waiting on the tool (the rollout's
share in the sandbox: ``tool/wait_s_total`` / ``time/rollout``), and the share of completions with a
void turn (void_turns.py; dropped from the loss under train.void_turn_filter). Nothing when no
completion of the step carries tool statistics (tools off)."""

from __future__ import annotations

from pipeline.grpo.episodes import Episode
from pipeline.grpo.void_turns import has_void_turn


def tool_metrics(episodes: list[Episode], style: str = "auto") -> dict[str, float]:
    if not episodes or not any(e.tool_stats for e in episodes):
        return {}
    n = len(episodes)

    def mean(key: str) -> float:
        return sum(e.tool_stats.get(key, 0.0) for e in episodes) / n

    return {"tool/calls": mean("calls"), "tool/errors": mean("errors"), "tool/timeouts": mean("timeouts"),
            "tool/sandbox_s": mean("sandbox_s"),
            "tool/used_frac": sum(e.tool_stats.get("calls", 0) > 0 for e in episodes) / n,
            "tool/tokens": sum(b - a for e in episodes for a, b in e.tool_spans) / n,
            "tool/sandbox_s_total": n * mean("sandbox_s"),
            "tool/wait_s_total": n * mean("wait_s"),  # the rollout's wall time waiting on the tool
            "tool/void_frac": sum(has_void_turn(e, style) for e in episodes) / n}
