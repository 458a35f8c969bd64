"""The strict answer policy: pay only what parses completely in a closed grammar.

    from rewards.grammar import strict_check, parse_answer
    strict_check("... so $\\boxed{18}$.", "18")             # RewardResult(1.0, '18', '')
    strict_check("$\\boxed{18 \\text{ thousand}}$", "18")   # 0.0, 'unrecognized: thousand'

`lexer` (the tokens and number conventions), `units` (the unit list), `parser` (the grammar),
`compare` (equivalence on parse trees under one deadline), `statement` (exactly one final
statement, at the end), `check` (the reward). Selected by `check(..., policy="strict")`.
"""

from rewards.grammar.check import strict_check
from rewards.grammar.lexer import Unrecognized
from rewards.grammar.parser import parse_answer

__all__ = ["Unrecognized", "parse_answer", "strict_check"]
