"""Are two final answers the same mathematical object (`equiv.is_equiv`)?

`normalize.py` (string cleaning, the exact fast path), `forms.py` (names, chains, intervals,
clock times), `numeric.py` (fast numeric rejection), `symbolic.py` (math-verify/sympy in
killable worker processes), `words.py` (the words that change what a number says), `budget.py` (one
deadline per completion, shared by every check of it). Imports
nothing else of `rewards`.
"""
