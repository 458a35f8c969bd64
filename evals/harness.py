"""The eval loop's pieces: prompts -> samples -> graded per-problem records -> summary.

``generate_records`` samples ``n`` completions per problem through any ``RolloutEngine``;
``score_records`` grades them with ``rewards.check`` (the same grader as the training reward)
and adds per-problem pass@k / maj@k; ``summarize`` turns records into the summary dict, with the
tool use of an engine with ``rollout.tools`` (``evals.tool_use``) overall and per subject and level. Each
piece takes plain arguments so the trainer's periodic eval and ``mathrl eval`` share them.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict

from tqdm.auto import tqdm

from evals.metrics import maj_at_k, majority_vote, mean, pass_at_k
from evals.tool_use import tool_summary
from pipeline.rollout.base import SamplingParams


LARGE_CHUNK = 1024  # prompts per generate call for engines that batch by themselves


def generate_records(engine, problems: list[dict], prompts: list[str], *, n: int,
                     params: SamplingParams, progress: bool = True) -> list[dict]:
    """One record per problem with its prompt and ``n`` completions (not graded yet)."""
    records = []
    # Chunks of prompts keep the progress bar moving; the engine batches inside each chunk. An
    # engine without a batch size (vLLM schedules its own batches) gets large chunks.
    engine_batch = engine.batch_size
    per_chunk = max(1, engine_batch // n) if engine_batch else LARGE_CHUNK
    with tqdm(total=len(problems), desc="generate", unit="problem", disable=not progress) as bar:
        for start in range(0, len(problems), per_chunk):
            chunk = prompts[start:start + per_chunk]
            # A seeded engine seeds sample j of prompt i of a call `seed + i * n + j`: offset each chunk
            # so every problem has its own seeds and the samples do not depend on the chunk size.
            chunk_params = params if params.seed is None else dataclasses.replace(params, seed=params.seed + start * n)
            for problem, prompt, samples in zip(problems[start:], chunk, engine.generate(chunk, n, chunk_params)):
                records.append(_record(problem, prompt, samples))
            bar.update(len(chunk))
    return records


def _record(problem: dict, prompt: str, samples) -> dict:
    rec = {"id": problem["id"], "question": problem["question"], "gold": problem["answer"]}
    for key in ("subject", "level"):
        if problem.get(key) is not None:
            rec[key] = problem[key]
    rec.update(prompt=prompt, completions=[s.completion for s in samples],
               finish_reasons=[s.finish_reason for s in samples],
               num_tokens=[len(s.completion_ids) for s in samples])
    if any(s.tool_stats for s in samples):  # rollout.tools: each completion's calls, errors, timeouts
        rec["tool"] = [dict(s.tool_stats) for s in samples]
    return rec


def score_records(records: list[dict], *, style: str, ks: list[int], timeout: float = 5.0,
                  progress: bool = True) -> list[dict]:
    """Grade every completion and add preds, correct, reasons, pass@k and maj@k in place."""
    from rewards import check, is_equiv

    def equiv(a: str, b: str) -> bool:
        return is_equiv(a, b, timeout=timeout)

    for rec in tqdm(records, desc="score", unit="problem", disable=not progress):
        results = [check(c, rec["gold"], style, timeout=timeout) for c in rec["completions"]]
        rec["preds"] = [r.pred for r in results]
        rec["correct"] = [r.score >= 1.0 for r in results]
        rec["reasons"] = [None if r.score >= 1.0 else r.reason for r in results]
        n, c = len(results), sum(rec["correct"])
        rec["pass@k"] = {str(k): pass_at_k(n, c, k) for k in ks}
        rec["maj@k"] = {str(k): maj_at_k(rec["preds"], rec["correct"], k, equiv) for k in ks}
        winner = majority_vote(rec["preds"], n, equiv)
        rec["majority_answer"] = None if winner is None else rec["preds"][winner]
    return records


def _group_table(records: list[dict], key: str) -> dict[str, dict]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for rec in records:
        if rec.get(key) is not None:
            groups[str(rec[key])].append(rec)
    table = {}
    for name, recs in sorted(groups.items()):
        row = {"n": len(recs), "accuracy": mean([mean(r["correct"]) for r in recs]),
               "extraction_failure_rate": mean([mean([p is None for p in r["preds"]]) for r in recs])}
        tool = tool_summary(recs)
        if tool is not None:
            row.update(tool_calls=tool["calls_per_solution"], tool_used_frac=tool["used_frac"],
                       tool_errors=tool["errors_per_solution"])
        table[name] = row
    return table


def summarize(records: list[dict], ks: list[int]) -> dict:
    """Dataset-level metrics from graded records (all rates are fractions in 0..1)."""
    preds = [p for r in records for p in r["preds"]]
    reasons = Counter(x for r in records for x in r["reasons"] if x is not None)
    return {
        "n_problems": len(records),
        "n_completions": len(preds),
        "accuracy": mean([mean(r["correct"]) for r in records]),
        "pass@k": {str(k): mean([r["pass@k"][str(k)] for r in records]) for k in ks},
        "maj@k": {str(k): mean([r["maj@k"][str(k)] for r in records]) for k in ks},
        "extraction_failure_rate": mean([p is None for p in preds]),
        "truncation_rate": mean([f == "length" for r in records for f in r["finish_reasons"]]),
        "mean_completion_tokens": mean([t for r in records for t in r["num_tokens"]]),
        "failure_reasons": dict(reasons.most_common()),
        "by_subject": _group_table(records, "subject"),
        "by_level": _group_table(records, "level"),
        "tool": tool_summary(records),  # None when the tools were off (evals/tool_use.py)
    }
