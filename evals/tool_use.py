"""Tool use of an eval with ``rollout.tools`` (tool-integrated reasoning, docs/tir.md), beside accuracy.

A record of a tool eval holds, per completion, the rollout's tool statistics (``rec["tool"]``: calls,
errors, timeouts, sandbox_s; ``Sample.tool_stats``). ``tool_summary`` turns a set of records into the
numbers the report shows: calls per solution, the share of solutions that called the tool at least
once, failed and timed-out calls per solution, the share of calls that failed, and the accuracy of the
solutions that used the tool and of those that did not. None when no record has tool statistics (the
tools were off), so an eval without tools reports exactly as before. Pure functions, no I/O.
"""

from __future__ import annotations

from evals.metrics import mean


def tool_summary(records: list[dict]) -> dict | None:
    """The tool-use numbers of ``records`` (module notes), or None without tool statistics."""
    pairs = [(stats, ok) for r in records for stats, ok in zip(r.get("tool") or [], r.get("correct") or [])]
    if not pairs:
        return None
    calls = sum(s["calls"] for s, _ in pairs)
    errors = sum(s["errors"] for s, _ in pairs)
    used = [ok for s, ok in pairs if s["calls"] > 0]
    unused = [ok for s, ok in pairs if s["calls"] == 0]
    return {"solutions": len(pairs), "calls_per_solution": calls / len(pairs),
            "used_frac": len(used) / len(pairs), "errors_per_solution": errors / len(pairs),
            "timeouts_per_solution": sum(s["timeouts"] for s, _ in pairs) / len(pairs),
            "error_rate": errors / calls if calls else 0.0,
            "accuracy_used": mean([float(ok) for ok in used]) if used else None,
            "accuracy_unused": mean([float(ok) for ok in unused]) if unused else None,
            "sandbox_s": sum(s.get("sandbox_s", 0.0) for s, _ in pairs)}


__all__ = ["tool_summary"]
