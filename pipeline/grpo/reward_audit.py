"""Each training step, a second grader's view of the outcome reward (`rewards.outcome.audit`):
`reward/disagree_mv` is the fraction of a seeded sample of the step's completions on which
math-verify and our checker disagree; the disagreeing cases go to `<run>/audit_mv.jsonl`, and a
rate that climbs well above the run's first steps prints a warning (the first sign of a policy
finding a hole in the reward). Off with `reward.audit_sample: 0`, or when math-verify is not
installed (it comes with the `rewards` dependencies)."""

from __future__ import annotations

import json
from pathlib import Path

from tqdm.auto import tqdm

from pipeline.config import RewardConfig

_CASES_PER_STEP = 8


class RewardAudit:
    def __init__(self, cfg: RewardConfig, run_dir: Path | None):
        from rewards.outcome.audit import DisagreementWatch

        self.cfg = cfg
        self.path = None if run_dir is None else Path(run_dir) / "audit_mv.jsonl"
        self.watch = DisagreementWatch()
        try:
            import math_verify  # noqa: F401
            self.enabled = cfg.audit_sample > 0
        except ImportError:
            self.enabled = False

    def step(self, step: int, episodes) -> dict[str, float]:
        """The step's `reward/disagree_mv` ({} when off); writes the cases, warns on a climb."""
        if not self.enabled or not episodes:
            return {}
        from rewards.outcome.audit import audit

        result = audit([e.completion for e in episodes], [e.gold for e in episodes],
                       [e.rewards.get("correct", 0.0) for e in episodes], sample=self.cfg.audit_sample,
                       seed=step, timeout=self.cfg.timeout)
        if self.path is not None and result.cases:
            with self.path.open("a", encoding="utf-8") as f:
                for case in result.cases[:_CASES_PER_STEP]:
                    f.write(json.dumps({"step": step, **case}, ensure_ascii=False) + "\n")
        warning = self.watch.add(result.rate)
        if warning:
            tqdm.write(f"WARNING step {step}: {warning} in {self.path}")
        return {"reward/disagree_mv": result.rate}
