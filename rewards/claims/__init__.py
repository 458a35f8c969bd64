"""The arithmetic claims of one solution step (`judge.check_claims`), for the process reward.

`latex_text.py` rewrites LaTeX into plain text, `tokens.py` and `chains.py` find the equality
chains in it, `arith.py` evaluates their sides (exact, bounded, never `eval`), `compare.py`
compares a claimed value with the computed one, `sides.py`, `identities.py` and `equations.py`
judge symbolic sides, identities and derived equations. Imports nothing else of `rewards`.
"""
