"""How the rows of a forward are cut into micro-batches (pure index logic, no model).

By row count (``train.micro_batch_size``, the default): consecutive runs of that many rows. By
token budget (``train.micro_batch_tokens`` > 0, verl's dynamic batch size, `use_dynamic_bsz` with
`ppo_max_token_len_per_gpu`): the rows are ordered by the longest completion of their group
(a group's rows stay together, so the `shared_prompt` layout still forwards each prompt once per
micro-batch), then cut so that a micro-batch's rows x its longest completion stays within the
budget. Under the `trimmed` and `shared_prompt` layouts a micro-batch is computed only up to its
longest completion, so micro-batches of similar lengths compute less padding; under `padded`
every row is computed at the batch's full width, and the budget only bounds the rows in flight.

The loss is the same math whatever the cut: every loss type except `bnpo` normalises by counts of
the whole mini-batch, and gradient accumulation sums the micro-batches in any order (equal up to
float summation order). `bnpo` divides by each micro-batch's own token count, as TRL does.
The SFT (``sft.micro_batch_tokens``, pipeline/sft.py) cuts by the same rule, each example its own
group and its whole length as the length.
"""

from __future__ import annotations


def micro_batches(rows: list[int], lengths: list[int], groups: list[int], size: int,
                  token_budget: int = 0) -> list[list[int]]:
    """Micro-batches of ``rows`` (indices into ``lengths`` / ``groups``: each row's completion
    length and group). ``token_budget`` 0: runs of ``size`` rows in the given order. Else: groups
    in order of their longest completion, cut where one more row would take rows x longest
    completion past the budget (a row longer than the budget is a micro-batch of its own)."""
    if token_budget <= 0:
        return [rows[s:s + size] for s in range(0, len(rows), size)]
    longest: dict[int, int] = {}
    for r in rows:
        longest[groups[r]] = max(longest.get(groups[r], 0), max(lengths[r], 1))
    first_seen = {g: i for i, g in reversed(list(enumerate(groups[r] for r in rows)))}
    ordered = sorted(rows, key=lambda r: (longest[groups[r]], first_seen[groups[r]], r))
    out: list[list[int]] = []
    current: list[int] = []
    width = 0
    for r in ordered:
        w = max(width, max(lengths[r], 1))
        if current and (len(current) + 1) * w > token_budget:
            out.append(current)
            current, w = [], max(lengths[r], 1)
        current.append(r)
        width = w
    if current:
        out.append(current)
    return out


def as_index(rows: list[int]) -> slice | list[int]:
    """A run of consecutive rows as a slice (tensor views, no index copies), else the list."""
    if rows and rows == list(range(rows[0], rows[-1] + 1)):
        return slice(rows[0], rows[-1] + 1)
    return rows
