"""Where a completion states its final answer, and what it says there.

`boxed.py` finds the boxes, `span.py` reads the answer out of one short span of text,
`statements.py` holds the policy (the last answer statement is the answer) and `extract.py`
the public readers (`extract_answer`, `read_final`, `reference_answer`). Linear-time string
work on capped spans; imports `rewards.equivalence` only.
"""
