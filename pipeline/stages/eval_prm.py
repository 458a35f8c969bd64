"""`mathrl eval-prm PATH`: measure a step scorer on ProcessBench-format data and print the table.

    mathrl eval-prm data.jsonl --scorer rules                        # the rule checks alone
    mathrl eval-prm data.jsonl --scorer prm  reward.prm=Qwen/Qwen2.5-Math-PRM-7B
    mathrl eval-prm data.jsonl --scorer both reward.prm=DIR reward.prm_mix=weighted

PATH is JSON lines with `dataset` (the subset), `question`, `steps` (list of strings) and
`first_error_step` (0-based, -1 when every step is correct), the layout of ProcessBench (Zheng
et al. 2024). The PRM scores every solution in batches first (`reward.prm_batch_size`, on the
GPU when there is one); `both` mixes it with the rules as `reward.prm_mix` says. The metric is
`rewards.steps.scorers.evaluate_step_checker`: per subset accuracy on erroneous and on correct
solutions, their F1, flag precision; the headline is the mean subset F1. The command checks
``--scorer`` against the config first (``config.checks.check_options``).
"""

from __future__ import annotations

import sys
import time

from pipeline.config import RunConfig
from rewards.jsonl import read_jsonl
from rewards.steps.scorers import PUBLISHED, RuleStepScorer, evaluate_step_checker, format_table
from rewards.steps.mix import MixedStepScorer, StepMix


def load_records(path: str, per_subset: int = 0) -> list[dict]:
    """Labelled records of `path` (the first `per_subset` of each subset when > 0)."""
    records, seen = [], {}
    for rec in read_jsonl(path):
        if not isinstance(rec.get("steps"), list) or rec.get("first_error_step") is None:
            continue
        subset = str(rec.get("dataset", "all"))
        seen[subset] = seen.get(subset, 0) + 1
        if not per_subset or seen[subset] <= per_subset:
            records.append(rec)
    if not records:
        raise ValueError(f"{path}: no records with a `steps` list and a `first_error_step` label")
    return records


def build_scorer(cfg: RunConfig, scorer: str, records: list[dict]):
    """The step scorer `--scorer` names; the PRM ones score every record up front, in batches."""
    if scorer == "rules":
        return RuleStepScorer()
    from pipeline.prm import CachedScorer, load_scorer

    prm = CachedScorer(load_scorer(cfg), records)
    if scorer == "prm":
        return prm
    return MixedStepScorer(prm, StepMix(cfg.reward.prm_mix, cfg.reward.prm_rule_weight, cfg.reward.prm_threshold))


def main(cfg: RunConfig, path: str = "", scorer: str = "rules", per_subset: int = 0) -> int:
    """Print the ProcessBench table of `scorer` on `path`; 2 with one line for bad input."""
    try:
        records = load_records(path, per_subset)
    except (OSError, ValueError) as e:  # a JSONLError is a ValueError: one line naming the file and line
        print(f"mathrl eval-prm: {e}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    step_scorer = build_scorer(cfg, scorer, records)
    results = evaluate_step_checker(records, step_scorer)
    seconds = time.perf_counter() - t0
    r = cfg.reward
    what = {"rules": "rule checks", "prm": f"PRM {r.prm}, threshold {r.prm_threshold:g}",
            "both": f"rule checks + PRM {r.prm} ({r.prm_mix}), threshold {r.prm_threshold:g}"}[scorer]
    print(f"ProcessBench first-error identification, {what}:")
    print(format_table(results))
    print(f"{len(records)} solutions, {sum(len(x['steps']) for x in records)} steps in {seconds:.1f} s")
    print("published average F1: " + ", ".join(f"{n} {f}" for n, f in PUBLISHED))
    return 0
