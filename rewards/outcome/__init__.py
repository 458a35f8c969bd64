"""The outcome rewards: the final answer against the gold (`answer.py`: `check`,
`score_completion`, `format_reward`) and a program's printed output (`code.py`).
"""
