"""GSM8K / MATH evaluation (issue 8): greedy pass@1, mean accuracy, unbiased pass@k and maj@k
over equivalent answers, per-subject and per-level reports, and published reference numbers.

Entry points: ``mathrl eval`` (``evals.run.main``) and ``evals.run.evaluate`` for a model in
memory (the trainer's periodic eval). This package import stays light: only the pure metric
functions are imported here; torch and transformers load when an eval runs.
"""

from evals.metrics import maj_at_k, majority_vote, mean_accuracy, pass_at_k

__all__ = ["maj_at_k", "majority_vote", "mean_accuracy", "pass_at_k"]
