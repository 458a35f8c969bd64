"""Read the answer out of one short span of prose and math (the text after "The answer is",
a `####` line, the box's surroundings, or the last sentence of a completion).

The span is cut into tokens: math environments (`$...$`, `$$...$$`, `\\(...\\)`, `\\[...\\]`, the
delimiters math-verify also reads), bare LaTeX commands, numbers (thousands commas, decimals,
clock times, currency), operators, single letters and words. Math tokens next to each other
form a *run*; runs joined only by `,` / `;` / "and" / "or" form a *group*, which is the answer
(a list when it has several runs: "$x=2$ or $x=3$" is the answer {2, 3}).

`read_span(span, first=True)` takes the first group (after a marker: "The answer is 18
apples because ..."), `first=False` the last (a concluding sentence: "So she has 12 apples.").
Words that change the meaning make the span state no single answer (`HEDGED`): a negation or
comparison right before the answer ("is not 18", "at least 18"), a hedge anywhere in the
sentence ("maybe", "could", "probably"; "could" alone is no hedge in a sentence that states one
value as the answer: "The final answer could be 18."), alternatives or conditions after it ("18 or 17",
"18 (or 17 if ...)", "18 or more", "18?"), a parenthesised remark or an adverb after it
("18 (approximately)", "18 roughly"; a parenthesis that starts with a reason word is a reason,
not a remark). The word "percent" right after the value is its percent sign ("28 percent" is
`28\\%`), and a listed unit right after it (`rewards.equivalence.grammar.units`; not "in", a
preposition far more often than inches: "18 in total") stays with it, so that it is compared
with the gold's unit ("18 dollars" is not 18 cents). Linear-time regex tokenising of a capped
span.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rewards.equivalence.grammar.units import unit_name
from rewards.equivalence.words import AFTER_BAD, COMPARISON, HEDGES, NEGATION


MAX_SPAN = 2000  # characters read from a span; answers are far shorter
HEDGED = "no single answer"

_TOKEN = re.compile(r"""
 (?P<env>\$\$[^$]{1,1500}\$\$|\\\[.{1,1500}?\\\]|\\\(.{1,800}?\\\)|(?<![\\\d])\$[^$\n]{1,500}\$(?!\d))
|(?P<time>\b\d{1,2}:[0-5]\d(?:\s*[ap]\.?\s?m\.?)?(?![\d:]))
|(?P<num>[$€£]?\d[\d,]*(?:\.\d+)?(?:\s*(?:\\%|%))?|[$€£]?\.\d+)
|(?P<cmd>\\(?:text|mathrm|textbf|mbox|textit|operatorname)\s*\{[^{}\n]{0,200}\}
   |\\(?:begin|end)\{[A-Za-z*]{1,20}\}|\\[A-Za-z]+|\\[{}%$,!; ])
|(?P<word>[A-Za-z]+['’][a-z]+|[A-Za-z]{2,})
|(?P<letter>[A-Za-z])
|(?P<ws>\s+|\*\*|__)
|(?P<end>[.!?](?=\s|$|\*|\)|\\\]))
|(?P<op>[-+*/^=<>()\[\]{}|_'×÷−·≤≥≠√π°²³]|\\\\)
|(?P<sep>[,;:&])
|(?P<other>.)
""", re.X | re.S)

_JUSTIFY = {"because", "since", "as", "from", "which", "given", "using", "by", "so", "where",
            "when", "after", "with", "for", "obtained", "found", "calculated", "computed"}
_CONNECT = {"and", "or"}
_VARIABLE = re.compile(r"\(?(?:[A-Za-z]|\\[a-zA-Z]+)(?:_\{?\w+\}?)?'*(?:\([A-Za-z, ]*\))?\)?")


@dataclass(frozen=True)
class Reading:
    """The answer read from a span (None when there is none), or why there is no single one."""

    answer: str | None
    problem: str = ""  # "" or HEDGED


@dataclass
class _Run:
    start: int  # token index
    end: int    # token index, exclusive
    text: str


def tokens(span: str) -> list[tuple[str, str]]:
    """(kind, text) tokens of a span (capped at MAX_SPAN characters); a math environment's
    text is its content without the delimiters."""
    out = []
    for m in _TOKEN.finditer(span[:MAX_SPAN]):
        kind, text = m.lastgroup, m.group()
        if kind == "env":
            cut = 2 if text[:2] in ("$$", "\\[", "\\(") else 1
            text = " " + text[cut:len(text) - cut].strip().strip(",;.").strip() + " "
        out.append((kind, text))
    return out


def env_spans(span: str) -> list[tuple[int, int]]:
    """(start, end) of each math environment in a span (capped at MAX_SPAN characters)."""
    return [m.span() for m in _TOKEN.finditer(span[:MAX_SPAN]) if m.lastgroup == "env"]


def _is_math(toks: list[tuple[str, str]], i: int) -> bool:
    kind, text = toks[i]
    if kind in ("env", "time", "num", "cmd"):
        return True
    if kind == "op":
        return True
    if kind == "letter":
        return _letter_is_math(toks, i)
    return False


def _letter_is_math(toks, i) -> bool:
    """A single letter is a variable when glued to math (2x, f(x), (A)) or beside an operator
    ("x = 5"); otherwise it is a word ("a", "I")."""
    for j in (i - 1, i + 1):
        if 0 <= j < len(toks) and toks[j][0] in ("num", "op", "cmd"):
            return True
    for step in (-1, 1):
        j = i + step
        while 0 <= j < len(toks) and toks[j][0] == "ws":
            j += step
        if 0 <= j < len(toks) and toks[j][0] == "op" and toks[j][1] in "=+-*/^<>≤≥≠×÷":
            return True
    return False


def _runs(toks) -> list[_Run]:
    """Maximal runs of math tokens (spaces inside a run are kept, at its ends dropped)."""
    runs, i = [], 0
    while i < len(toks):
        if not _is_math(toks, i) or toks[i][1] in (")", "]", "}"):
            i += 1
            continue
        j = i
        while j < len(toks) and (_is_math(toks, j) or toks[j][0] == "ws" or
                                 toks[j][0] == "sep" and toks[j][1] in ",:"):
            j += 1
        while j > i and (toks[j - 1][0] in ("ws", "sep") or toks[j - 1][1] in ("(", "[")):
            j -= 1
        text = _clean_run("".join(t[1] for t in toks[i:j]))
        if text and any(toks[k][0] != "op" for k in range(i, j)):
            runs.append(_Run(i, j, text))
        i = max(j, i + 1)
    return runs


def _clean_run(text: str) -> str:
    text = re.sub(r"\s+,", ",", re.sub(r"\s+", " ", text))
    text = text.strip().strip(",;:").strip()
    text = re.sub(r"^(?:=|:|\\approx|≈)\s*", "", text).strip()
    # drop one unbalanced bracket at either end: "(12" -> "12", "5)" -> "5"; intervals
    # mix bracket kinds ("(a, b]"), so only the total count matters
    depth = _depth(text)
    if depth > 0 and text[:1] in "([{":
        text = text[1:].strip()
    elif depth < 0 and text[-1:] in ")]}":
        text = text[:-1].strip()
    depth = 0
    for c in text:
        depth += (c in "([{") - (c in ")]}")
        if depth < 0:
            return ""  # "1)(" is a fragment of something else (code, prose), not a value
    return text if depth == 0 else ""


def _depth(text: str) -> int:
    return sum((c in "([{") - (c in ")]}") for c in text)


def _groups(toks, runs: list[_Run]) -> list[list[_Run]]:
    """Runs joined only by separators, spaces and and/or."""
    groups: list[list[_Run]] = []
    for run in runs:
        if groups:
            gap = toks[groups[-1][-1].end:run.start]
            words = [t[1].lower() for t in gap if t[0] == "word"]
            if all(t[0] in ("ws", "sep", "word") for t in gap) and len(words) <= 1 and \
                    all(w in _CONNECT for w in words) and any(t[0] != "ws" for t in gap):
                groups[-1].append(run)
                continue
        groups.append([run])
    return groups


def _words(toks) -> list[str]:
    return [t[1].lower().replace("’", "'") for t in toks if t[0] in ("word", "letter")]


def read_span(span: str, first: bool = True) -> Reading:
    """The answer stated in `span` (see module docstring). With `first=False` the first
    sentence's last group that is more than variables is read ("... is 13, where $y$ is small
    relative to $x$"); with `first=True` its first group."""
    toks = tokens(span)
    cut = next((k for k, t in enumerate(toks) if t[0] == "end" and k > 0), len(toks))
    toks = toks[:cut + 1]  # the first sentence only
    runs = _runs(toks)
    groups = _groups(toks, runs)
    if not first:  # "... is 13, where $y$ is small relative to $x$": variables are not answers
        groups = [g for g in groups if not all(_VARIABLE.fullmatch(re.sub(r"\s+", "", r.text)) for r in g)]
    if not groups:
        return Reading(None)
    group = groups[0] if first else groups[-1]
    hedges = set(_words(toks)) & HEDGES
    if hedges == {"could"} and len(group) == 1 and "answer" in _words(toks):
        hedges = set()  # "The final answer could be 18.": one value, stated as the answer
    if hedges:
        return Reading(None, HEDGED)
    if _negated_before(toks, runs, group[0].start):
        return Reading(None, HEDGED)
    parts = [r.text for r in group]
    after = toks[group[-1].end:]
    k = next((i for i, t in enumerate(after) if t[0] != "ws"), None)
    if k is not None and after[k][0] == "word" and after[k][1].lower() == "percent" and \
            not parts[-1].rstrip().endswith("%"):
        parts[-1] += "\\%"  # "28 percent" is the answer 28%, not 28 followed by a word
        after = after[k + 1:]
    elif k is not None and after[k][0] == "word" and after[k][1].lower() != "in" and \
            unit_name(after[k][1], False) is not None:
        parts[-1] += " " + after[k][1]  # "18 dollars": the unit is compared with the gold's
        after = after[k + 1:]
    if _bad_after(after, first, [r.text for r in runs if r.start >= group[-1].end], parts):
        return Reading(None, HEDGED)
    return Reading(parts[0] if len(parts) == 1 else ", ".join(parts))


_FILLER = {"is", "are", "was", "be", "equal", "equals", "to", "exactly", "then", "just", "simply"}


def _negated_before(toks, runs: list[_Run], start: int) -> bool:
    """A negation or comparison bearing on the answer: among the last words before it (after
    the previous math and the clause start), fillers like "is"/"equal to" skipped."""
    j = start
    while j > 0 and toks[j - 1][0] not in ("sep", "end") and not any(r.end == j for r in runs):
        j -= 1
    words = [w for w in _words(toks[j:start]) if w not in _FILLER]
    return bool(set(words[-2:]) & (NEGATION | COMPARISON))


def _remark_after(after) -> bool:
    """A parenthesis opened after the answer, before any reason word, is a remark on it ("18
    (approximately)", "18 (rounded)", "18 (or 17)"), and so is an adverb ("18 approximately",
    a word ending in "-ly"): the answer is then not stated plainly. A parenthesis that gives a
    reason ("18 (since 9 * 2 = 18)") is not a remark."""
    for k, (kind, text) in enumerate(after):
        if kind == "end" or (kind == "word" and text.lower() in _JUSTIFY):
            return False
        if kind == "word" and len(text) > 3 and text.lower().endswith("ly"):
            return True  # an adverb bearing on the value: "18 approximately", "18 roughly"
        if kind == "op" and text in "([":
            nxt = next((t for t in after[k + 1:] if t[0] != "ws"), None)
            return not (nxt is not None and nxt[0] == "word" and nxt[1].lower() in _JUSTIFY)
    return False


def _bad_after(after, first: bool, later: list[str], answer: list[str]) -> bool:
    """Words after the answer that make it a different or uncertain claim."""
    if any(t[0] == "end" and t[1] == "?" for t in after):
        return True
    if _remark_after(after):
        return True
    words = _words(after)
    upto = len(words)
    for k, w in enumerate(words):
        if w in _JUSTIFY:
            upto = k  # what follows is a reason, not part of the answer
            break
    if set(words[:upto]) & AFTER_BAD:
        return True
    if first and upto == len(words):
        # another value right after the answer with no reason word between: "18 17", "18 (or 17)";
        # the same value again ("51, then 51") changes nothing
        return any(run not in answer for run in later)
    return False
