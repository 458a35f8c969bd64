"""Statistics for the outcome-vs-process experiment (pure: lists of numbers in, numbers out).

- `mean_ci`: mean and the half-width of its 95% confidence interval over seeds (Student t).
- `band`: per eval step, mean and 95% band of the seeds' accuracy curves.
- `first_reach`: steps-to-threshold, the first eval step at which a curve reaches a value.
- `welch_ci`: 95% interval of a difference of means (Welch-Satterthwaite degrees of freedom).
- `permutation_p`: exact two-sided permutation test of a difference of means (every split of
  the pooled seeds; a seeded sample of 20,000 splits when there are more).
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
from typing import Mapping, Sequence

# Two-sided 95% quantiles of Student's t by degrees of freedom (1.96 beyond 30).
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
       20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048,
       29: 2.045, 30: 2.042}
MAX_SPLITS = 20_000


def t95(df: float) -> float:
    return T95.get(max(1, int(df)), 1.96) if df <= 30 else 1.96


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """(mean, half-width of the 95% CI); half-width 0 for a single value."""
    m = statistics.fmean(values)
    if len(values) < 2:
        return m, 0.0
    return m, t95(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


def band(curves: Sequence[Mapping[int, float]]) -> list[tuple[int, float, float, float]]:
    """(step, mean, low, high) at every step all curves share, low/high the 95% CI of the mean."""
    steps = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
    out = []
    for s in steps:
        m, h = mean_ci([c[s] for c in curves])
        out.append((s, m, m - h, m + h))
    return out


def first_reach(curve: Mapping[int, float], threshold: float, tol: float = 1e-12) -> int | None:
    """The first step at which `curve` is at or above `threshold`, None if it never is."""
    return next((s for s in sorted(curve) if curve[s] >= threshold - tol), None)


def welch_ci(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """(mean(b) - mean(a), half-width of its 95% CI)."""
    diff = statistics.fmean(b) - statistics.fmean(a)
    if len(a) < 2 or len(b) < 2:
        return diff, math.inf
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:
        return diff, 0.0
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return diff, t95(df) * math.sqrt(va + vb)


def permutation_p(a: Sequence[float], b: Sequence[float], seed: int = 0) -> float:
    """Two-sided p-value of |mean(b) - mean(a)| under random relabelling of the pooled values."""
    pooled, n = list(a) + list(b), len(a)
    observed = abs(statistics.fmean(b) - statistics.fmean(a))
    total = sum(pooled)
    if math.comb(len(pooled), n) <= MAX_SPLITS:
        splits = itertools.combinations(range(len(pooled)), n)
    else:
        rng = random.Random(seed)
        splits = (rng.sample(range(len(pooled)), n) for _ in range(MAX_SPLITS))
    hits = count = 0
    for idx in splits:
        sa = sum(pooled[i] for i in idx)
        d = abs((total - sa) / (len(pooled) - n) - sa / n)
        hits += d >= observed - 1e-12
        count += 1
    return hits / count
