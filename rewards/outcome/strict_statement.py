"""The strict policy's final answer statement: exactly one, at the end.

The statement is the last box group (`\\boxed{}`/`\\fbox{}`; boxes side by side are one list,
boxes joined by "or" must all state the same value) or the last `#### x` line, whichever ends
later. The completion ends at its first chat-template end-of-turn token (`<|im_end|>`,
`<|endoftext|>`, `</s>`, `<|eot_id|>`...; what follows, e.g. `<|im_start|>user`, is another turn,
as the lenient reader has it). After the statement may come only whitespace, `$`, `.`, closing
math delimiters, and one short closing sentence made
of the words in `CLOSING_WORDS` (no number, no math, no other word). Every other box or `####`
line in the completion must state the same value as the final one (checked with the grammar's
equivalence under the completion's deadline): two statements of different values, or a box in
the middle of hidden/quoted text, are no single answer. The sentence that leads into the box
must not cast doubt on it (`LEAD_DOUBT`: "a common mistake is", "maybe", a negation in the last
words before the box). This one guard is a word list, because the lead-in is free prose.

A unit written right after a single box (the MATH style `\\boxed{5}\\text{ cm}`, `\\boxed{5} cm.`,
`\\boxed{30}^\\circ`, `\\boxed{18}\\%`) belongs to the answer: it is read only when it is one of
the grammar's listed units (`rewards.equivalence.grammar.units`, with `^2`/`^3`, "square"/"cubic"),
a percent sign or word, or a degree sign; it is then appended to the box's content and compared
as a unit (a percentage or an angle only against a gold that is one). Anything else after the box
is refused as before. A bare word (outside `\\text{}`) is read as a unit only when it has two or
more letters and nothing but the allowed end atoms follows it (`\\boxed{5} in the box.` keeps
"in" as a closing word).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rewards.answers.boxed import box_groups, boxes
from rewards.answers.extract import END_OF_TURN
from rewards.equivalence.grammar.units import unit_name

MAX_STATEMENTS = 20
CLOSING_WORDS = {
    "so", "thus", "therefore", "hence", "the", "final", "answer", "is", "this", "that", "our", "my",
    "result", "solution", "required", "desired", "value", "we", "have", "get", "obtain", "it", "and",
    "done", "i", "hope", "helps", "which", "as", "above", "shown", "stated", "boxed", "in", "a",
    "box", "correct", "complete", "completes", "proof", "qed", "end", "of", "here",
}
_TAIL_ATOM = re.compile(
    r"\s+|\$+|\.|\\\]|\\\)|\\end\{(?:equation|align|gather)\*?\}|\*\*")
_CLOSING = re.compile(r"[A-Za-z' ,]{1,120}[.!]?")
# words in the box's sentence that make the box something other than the answer stated
LEAD_DOUBT = re.compile(
    r"\b(?:maybe|perhaps|possibly|probably|mistake|mistaken|mistakenly|wrong|wrongly|incorrect|"
    r"incorrectly|erroneous|error|tempting|naive|naively|guess|avoid|trap|pitfall|misconception|"
    r"instead|rather\s+than|false)\b"
    r"|\b(?:not|never|no|isn't|cannot)\b\W*(?:\w+\W+){0,3}$|n't\W*(?:\w+\W+){0,3}$"
    r"|\b(?:or|either|nor|versus|vs)\b[\W]*$", re.I)  # "17 or $\boxed{18}$": one of two
_GSM = re.compile(r"####[ \t]*([^\n]*)")
_UNIT_GAP = re.compile(r"(?:[ \t]|\$|\\[,;: !]|~)*")
_POWER = r"(?:\^\s*\{?\s*[23]\s*\}?)?"
_UNIT_AFTER = re.compile(
    r"\\(?:text|textrm|mathrm|mbox|textnormal)\s*\{\s*(?P<text>[A-Za-z]+(?: [A-Za-z]+)?)\s*\}(?P<tpow>" + _POWER + ")"
    r"|(?P<pct>\\%)|(?P<deg>\^\s*\{?\s*\\circ\s*\}?|\\degree(?![A-Za-z]))"
    r"|(?P<bare>[A-Za-z]{2,}(?: [A-Za-z]{2,})?)(?![A-Za-z])(?P<bpow>" + _POWER + ")")


@dataclass(frozen=True)
class Final:
    contents: tuple[str, ...]  # one per box of the group (one for ####)
    joined_by_or: bool
    others: tuple[str, ...]  # every other statement's content
    problem: str = ""


def _tail_ok(tail: str) -> str:
    """"" when what follows the final statement is allowed, else the reason."""
    i, n, closing = 0, len(tail), False
    while i < n:
        m = _TAIL_ATOM.match(tail, i)
        if m:
            i = m.end()
            continue
        m = _CLOSING.match(tail, i)
        if m and not closing:
            words = re.findall(r"[A-Za-z']+", m.group().lower())
            bad = [w for w in words if w not in CLOSING_WORDS]
            if bad:
                return f"text after the final answer: {bad[0]!r}"
            closing = True
            i = m.end()
            continue
        return f"text after the final answer: {tail[i:i + 20]!r}"
    return ""


def _only_atoms(tail: str) -> bool:
    i = 0
    while i < len(tail):
        m = _TAIL_ATOM.match(tail, i)
        if m is None:
            return False
        i = m.end()
    return True


def _unit_after(text: str, end: int) -> tuple[str, int] | None:
    """(the answer's suffix, where the unit ends) for a listed unit right after a box, else None."""
    m = _UNIT_AFTER.match(text, _UNIT_GAP.match(text, end).end())
    if m is None:
        return None
    if m.group("pct"):
        return "\\%", m.end()
    if m.group("deg"):
        return "^\\circ", m.end()
    word = m.group("text") or m.group("bare")
    power = re.sub(r"[\s^{}]", "", m.group("tpow") or m.group("bpow") or "")
    if m.group("bare") and not _only_atoms(text[m.end():m.end() + 400]):
        return None  # a bare word followed by more words is a sentence, not a unit
    if word.lower() == "percent":
        return "\\%", m.end()
    if unit_name(word + ("^" + power if power else ""), bool(m.group("text"))) is None:
        return None
    return f"\\text{{ {word}}}" + ("^" + power if power else ""), m.end()


def strict_final(text: str) -> Final:
    """The final statement and every other one (module docstring); `problem` says why there is
    no single answer."""
    if not isinstance(text, str) or not text.strip():
        return Final((), False, (), "no answer found")
    text = END_OF_TURN.split(text, 1)[0]  # a turn written after the model's end-of-turn is not its answer
    all_boxes = boxes(text)
    groups = box_groups(text, all_boxes)
    gsm = list(_GSM.finditer(text))
    box_end = groups[-1][-1].end if groups else -1
    gsm_end = gsm[-1].end() if gsm else -1
    if box_end < 0 and gsm_end < 0:
        return Final((), False, (), "no answer found")
    if box_end > gsm_end:
        group = groups[-1]
        contents = tuple(b.content(text).strip() for b in group)
        joined_or = any(re.search(r"\bor\b", text[a.end:b.start]) for a, b in zip(group, group[1:]))
        start, end = group[0].start, box_end
        unit = _unit_after(text, end) if len(group) == 1 else None
        if unit is not None:  # `\boxed{5}\text{ cm}`: the unit is part of the answer
            # on the value: `x = 5` cm is `x = 5 cm`; a braced relation cannot carry a unit
            eq = contents[0].rfind("=") + 1
            value = contents[0][:eq] + "{" + contents[0][eq:] + "}"
            contents, end = (value + unit[0],), unit[1]
        in_group = {id(b) for b in group}
        others = [b.content(text).strip() for b in all_boxes if id(b) not in in_group]
        others += [m.group(1).strip() for m in gsm]
    else:
        contents, joined_or = (gsm[-1].group(1).strip(),), False
        start, end = gsm[-1].start(), gsm_end
        others = [b.content(text).strip() for b in all_boxes]
        others += [m.group(1).strip() for m in gsm[:-1]]
    if len(others) + len(contents) > MAX_STATEMENTS:
        return Final(contents, joined_or, (), f"more than {MAX_STATEMENTS} answer statements")
    problem = _tail_ok(text[end:end + 400]) if len(text) - end <= 400 else "text after the final answer"
    if not problem and box_end > gsm_end:  # a #### line starts its own line: it has no lead-in
        lead = re.split(r"[.!?]\s|\n", text[max(0, start - 200):start])[-1]
        if LEAD_DOUBT.search(lead):
            problem = f"doubt before the final answer: {LEAD_DOUBT.search(lead).group()!r}"
    return Final(contents, joined_or, tuple(others), problem)
