"""The closed answer grammar the strict policy reads (``rewards.outcome.strict``) and the lenient
comparison consults for forms it misses (``compare.second_reading``):

    from rewards.equivalence.grammar.parser import parse_answer

`lexer` (the tokens and number conventions), `units` (the unit list), `parser` (the grammar),
`compare` (equivalence on parse trees under one deadline).
"""
