"""The process reward: per-step claim checks turned into reward points (`reward.py`), the
step-scorer interface and the rule scorer with the ProcessBench metric (`scorers.py`), and a
process reward model's step probabilities combined with the rule verdicts (`mix.py`).
"""
