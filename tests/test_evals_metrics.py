"""Eval metrics against hand computations: unbiased pass@k, majority vote with clustering."""

from __future__ import annotations

import itertools
from fractions import Fraction
from math import comb

import pytest

from evals.metrics import maj_at_k, majority_vote, mean, mean_accuracy, pass_at_k


def test_pass_at_k_hand_computed():
    # n=5, c=2, k=2: 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - comb(3, 2) / comb(5, 2))
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    # k=1 is the fraction correct
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)


def test_pass_at_k_matches_subset_enumeration():
    # Brute force: fraction of k-subsets of n samples that contain a correct one.
    for n in range(1, 7):
        for c in range(n + 1):
            for k in range(1, n + 1):
                samples = [1] * c + [0] * (n - c)
                subsets = list(itertools.combinations(range(n), k))
                hits = Fraction(sum(any(samples[i] for i in s) for s in subsets), len(subsets))
                assert pass_at_k(n, c, k) == pytest.approx(float(hits), abs=1e-12), (n, c, k)


def test_pass_at_k_edges():
    assert pass_at_k(8, 0, 4) == 0.0
    assert pass_at_k(8, 8, 4) == 1.0
    assert pass_at_k(8, 5, 4) == 1.0  # n - c = 3 < k: every 4-subset has a correct sample
    # Large n stays finite and in range (binomials would be huge).
    assert 0.0 < pass_at_k(10_000, 1, 100) < 1.0
    assert pass_at_k(10_000, 1, 100) == pytest.approx(100 / 10_000)


@pytest.mark.parametrize("n,c,k,msg", [(4, 1, 5, "at least k samples"), (0, 0, 1, "at least one"),
                                       (4, 5, 1, "must lie in"), (4, 1, 0, "k must be")])
def test_pass_at_k_rejects_bad_arguments(n, c, k, msg):
    with pytest.raises(ValueError, match=msg):
        pass_at_k(n, c, k)


def test_majority_vote_clusters_equivalent_answers():
    def equiv(a, b):
        return float(eval(a)) == float(eval(b))  # test-only: fixed trusted strings

    answers = ["1/2", "3", "0.5", "3", "2/4"]
    # clusters: {1/2, 0.5, 2/4} (3 votes) vs {3, 3} (2 votes)
    assert majority_vote(answers, 5, equiv) == 0
    correct = [True, False, True, False, True]
    assert maj_at_k(answers, correct, 5, equiv) == 1.0
    # with only the first 2 answers the tie goes to the earliest cluster
    assert majority_vote(answers, 2, equiv) == 0
    # first 4: {1/2, 0.5} and {3, 3} tie 2-2 -> earliest first member (index 0) wins
    assert majority_vote(answers, 4, equiv) == 0
    # string equality alone would split 1/2, 0.5, 2/4 and let "3" win
    assert majority_vote(answers, 5) == 1
    assert maj_at_k(answers, correct, 5) == 0.0


def test_majority_vote_none_never_wins():
    answers = [None, None, None, "7"]
    assert majority_vote(answers, 4) == 3
    assert maj_at_k(answers, [False, False, False, True], 4) == 1.0
    assert majority_vote([None, None], 2) is None
    assert maj_at_k([None, None], [False, False], 2) == 0.0


def test_majority_vote_tie_break_is_first_appearance():
    assert majority_vote(["b", "a", "a", "b"], 4) == 0
    assert majority_vote(["a", "b", "b", "a"], 4) == 0
    assert majority_vote(["x", "b", "a", "a", "b"], 5) == 1


def test_maj_at_k_argument_errors():
    with pytest.raises(ValueError, match="at least k"):
        maj_at_k(["1"], [True], 2)
    with pytest.raises(ValueError, match="correctness flags"):
        maj_at_k(["1", "2"], [True], 1)


def test_mean_accuracy():
    assert mean_accuracy([[True, False], [True, True], [False, False]]) == pytest.approx((0.5 + 1 + 0) / 3)
    assert mean_accuracy([]) == 0.0
    assert mean([]) == 0.0


def test_majority_vote_with_the_real_grader_clusters_latex_forms():
    from rewards import is_equiv

    answers = ["\\frac{1}{2}", "3", "0.5", "3", "1/2"]
    assert majority_vote(answers, 5, is_equiv) == 0  # 1/2 three times beats 3 twice
    assert majority_vote(answers, 5) == 1  # plain string equality would pick "3"
