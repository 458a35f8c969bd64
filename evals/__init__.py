"""GSM8K / MATH evaluation (issue 8): greedy pass@1, mean accuracy, unbiased pass@k and maj@k
over equivalent answers, per-subject and per-level reports, and published reference numbers.

A library, no stage code: ``evals.evaluate.evaluate`` for a model in memory,
``evaluate_with_config`` with a run config's settings, and ``periodic_eval``, the callable the
stages hand the GRPO trainer (`mathrl eval` itself is ``pipeline/stages/eval.py``). A sibling of
``pipeline.grpo`` in the layers (docs/architecture.md): it uses the pipeline's lower layers
(config, data, prompts, models, rollout) and neither imports the other. This package import stays
light: only the pure metric functions are imported here; torch and transformers load when an
eval runs.
"""

from evals.metrics import maj_at_k, majority_vote, mean_accuracy, pass_at_k

__all__ = ["maj_at_k", "majority_vote", "mean_accuracy", "pass_at_k"]
