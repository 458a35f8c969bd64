"""Evaluation metrics as pure functions: unbiased pass@k, majority vote (maj@k), mean accuracy.

No I/O, no torch, no model: every function takes plain Python values so it can be tested
against hand computations and reused by other harnesses.

- ``pass_at_k(n, c, k)``: the unbiased estimator of Chen et al. 2021 ("Evaluating Large
  Language Models Trained on Code", eq. 1): with ``n`` samples of which ``c`` are correct,
  the probability that at least one of ``k`` samples drawn without replacement is correct,
  ``1 - C(n-c, k) / C(n, k)``, computed as the numerically stable product
  ``1 - prod_{i=n-c+1}^{n} (1 - k/i)`` (no huge binomials).
- ``majority_vote`` / ``maj_at_k``: the answer given most often among the first ``k`` samples,
  where answers that ``equiv`` says are equal count as one answer (so ``0.5`` and ``\\frac12``
  vote together). The maj@k of a problem is whether that answer is correct.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["majority_vote", "maj_at_k", "mean", "mean_accuracy", "pass_at_k"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem with ``n`` samples, ``c`` of them correct."""
    if n < 1:
        raise ValueError(f"pass@k needs at least one sample (n={n})")
    if not 0 <= c <= n:
        raise ValueError(f"correct count c={c} must lie in 0..n={n}")
    if k < 1:
        raise ValueError(f"k must be >= 1 (k={k})")
    if k > n:
        raise ValueError(f"pass@{k} needs at least k samples per problem, but only n={n} were drawn; "
                         f"raise eval.n_samples to >= {k} or drop k={k} from eval.ks")
    if n - c < k:  # every k-subset contains a correct sample
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def _str_equal(a: str, b: str) -> bool:
    return a == b


def majority_vote(answers: Sequence[str | None], k: int,
                  equiv: Callable[[str, str], bool] = _str_equal) -> int | None:
    """Index (into ``answers``) of the first member of the winning cluster, or None.

    Only the first ``k`` answers vote. ``None`` (no answer extracted) never votes. Each answer
    joins the first existing cluster whose first member it is ``equiv`` to (identical strings
    join without calling ``equiv``); otherwise it starts a new cluster. The largest cluster
    wins; on a tie in size, the cluster whose first member came earliest wins (deterministic,
    and with temperature-0 sampling it favours the first sample).
    """
    if k < 1:
        raise ValueError(f"k must be >= 1 (k={k})")
    if k > len(answers):
        raise ValueError(f"maj@{k} needs at least k answers, got {len(answers)}")
    reps: list[int] = []  # index of each cluster's first member, in order of appearance
    sizes: list[int] = []
    for i, ans in enumerate(answers[:k]):
        if ans is None:
            continue
        for j, rep in enumerate(reps):
            other = answers[rep]
            if ans == other or equiv(ans, other):
                sizes[j] += 1
                break
        else:
            reps.append(i)
            sizes.append(1)
    if not reps:
        return None
    best = max(range(len(reps)), key=lambda j: (sizes[j], -reps[j]))
    return reps[best]


def maj_at_k(answers: Sequence[str | None], correct: Sequence[bool], k: int,
             equiv: Callable[[str, str], bool] = _str_equal) -> float:
    """1.0 if the majority answer of the first ``k`` samples is correct, else 0.0.

    ``correct[i]`` says whether sample ``i`` was graded correct; the winning cluster's first
    member stands for the cluster. No extracted answer at all -> 0.0.
    """
    if len(answers) != len(correct):
        raise ValueError(f"{len(answers)} answers but {len(correct)} correctness flags")
    winner = majority_vote(answers, k, equiv)
    return 0.0 if winner is None else float(bool(correct[winner]))


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean; 0.0 for an empty sequence (an empty eval has no accuracy to report)."""
    return sum(values) / len(values) if values else 0.0


def mean_accuracy(correct: Sequence[Sequence[bool]]) -> float:
    """Mean over problems of the fraction of that problem's samples that are correct.

    With the same number of samples per problem this equals the mean over all samples, and it
    is the expected pass@1 of one sampled completion.
    """
    return mean([mean([float(x) for x in row]) for row in correct])
