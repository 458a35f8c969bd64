"""Where a completion states its final answer, and what it says there.

Policy (one for every style): the final answer is the completion's LAST answer statement.
Answer statements are, in text order:
- a box group: `\\boxed{}`/`\\fbox{}`, with boxes written side by side ("$\\boxed{1}$, $\\boxed{2}$
  and $\\boxed{3}$") forming one answer, a list;
- a `####` line (GSM8K);
- an answer marker: "The (final) answer is", "Final Answer:", "**Answer:**", "Answer:", a
  "Final Answer" heading, or "A:" opening a line (OpenAI's GSM8K samples).
A statement that hedges, negates or offers alternatives ("The answer is not 18", "\\boxed{18}
is wrong", "18 (or 17 if ...)", "could be 17, or maybe 18") states no single answer: the
completion then has none (score 0), whatever it said earlier. Earlier statements are only
intermediate results: MATH reference solutions box intermediate values before the final one,
and "\\boxed{18}. Wait, that is wrong. The answer is 17." answers 17. A completion is graded on
exactly one answer, so writing several cannot raise its reward.

With no statement at all, the last sentence that contains math is read (its last math group),
unless the text stops mid-sentence (a truncated completion states nothing) or that sentence
hedges. Style "math" reads only math environments there; "gsm8k"/"auto" also plain numbers.
"""

from __future__ import annotations

import bisect
import re
import time
from dataclasses import dataclass

from rewards.answers.boxed import box_groups, boxes, group_answer, unclosed_after
from rewards.answers.span import HEDGED, MAX_SPAN, Reading, env_spans, read_span, tokens
from rewards.equivalence.budget import current_deadline
from rewards.equivalence.equiv import EQUAL, equiv_status
from rewards.equivalence.grammar.units import unit_name

_MARKER = re.compile(
    r"(?i:\b(?:the|my|our)\s+(?:(?:final|correct|right)\s+)?answer(?:\s*\*\*)?\s*"
    r"(?:is|was|will\s+be|would\s+be|should\s+be)\b)"
    r"|(?i:\bfinal\s+answer\b(?:\s*\*\*)?\s*(?:[:=]|is\b))"
    r"|(?im:^[ \t>#*_]*(?:final\s+)?answer(?:\s*\*\*)?\s*:)"
    r"|(?im:^[ \t#*]*final\s+answer[ \t*:]*$)"
    r"|(?m:^[ \t*]*A:)")
_SKIP = re.compile(r"(?:[\s:*]|\\\\)*")
_BOX_NEXT = re.compile(r"(?:\$|\\\[|\\\(|\s)*\\(?:boxed|fbox)(?![A-Za-z])")
# the end of a complete text: a sentence end or a closed math block, not a bare number (a
# completion cut off after "... 3 * 6 = 18" states nothing)
_TERMINAL = re.compile(r"(?:[.!?]|\$|\\\]|\\\)|\*\*)[\s\"'*)]*$")
_LATER = 600
_BOX_CONTEXT = 200
_MAX_TRIES = 20  # markers and #### lines read from the end (a hostile text may hold thousands)
_OR = re.compile(r"\bor\b")
_SAME_FORM_TIMEOUT = 2.0
_MAX_FORMS = 20


@dataclass(frozen=True)
class Statement:
    """One answer statement: `text[start:end]`, its kind, and what it says."""

    start: int
    end: int
    kind: str  # "box", "####", "marker", "last sentence"
    reading: Reading


def final_statement(text: str) -> Statement | None:
    """The last answer statement in the text (see module docstring), or None. Candidates are
    taken from the end backwards and the search stops as soon as none can come later, so the
    cost is one linear scan plus reading a few short spans, whatever the text holds."""
    all_boxes = boxes(text)
    groups = box_groups(text, all_boxes)
    best = None
    if groups:
        group = groups[-1]
        best = Statement(group[0].start, group[-1].end, "box", _box_reading(text, group))
    starts = [b.start for b in all_boxes]
    ends = [b.end for b in all_boxes]
    for m in reversed(list(re.finditer(r"####", text))[-_MAX_TRIES:]):
        if best is not None and m.start() < best.start:
            break
        if _inside(m.start(), starts, ends):
            continue
        line = text[m.end(): m.end() + MAX_SPAN].split("\n", 1)[0]
        reading = read_span(line, first=True)
        if reading.answer is not None and not _gsm_tail_ok(line):
            reading = Reading(None, HEDGED)
        if reading.answer is not None or reading.problem:
            best = Statement(m.start(), m.end() + len(line), "####", reading)
            break
    for m in reversed(_markers(text)[-_MAX_TRIES:]):
        if best is not None and m.start() < best.start:
            break
        st = _marker_statement(text, m, starts, ends)
        if st is not None:
            best = st
            break
    return best


def _gsm_tail_ok(line: str) -> bool:
    """A `####` line is a value line: after its last digit only listed units (the strict
    grammar's list, `rewards.equivalence.grammar.units`), commands and punctuation may follow
    (`#### 18 dollars`, `#### 18\\%`; not `#### 18 approx`, `#### 18 thousand`, `#### 18 apples`)."""
    tail = re.sub(r"\\[A-Za-z]+", " ", re.split(r"\d", line)[-1])
    words = re.findall(r"[A-Za-z]+", tail)
    return all(unit_name(w, True) is not None or w.lower() in ("percent", "square", "cubic", "sq") for w in words)


def _markers(text: str) -> list[re.Match]:
    """Every answer marker; every kind of marker holds "answer" or "A:", so most texts skip the
    regex scan."""
    if "A:" not in text and "answer" not in text.lower():
        return []
    return list(_MARKER.finditer(text))


def _inside(pos: int, starts: list[int], ends: list[int]) -> bool:
    k = bisect.bisect_right(starts, pos) - 1
    return k >= 0 and pos < ends[k]


def _marker_statement(text: str, m: re.Match, starts, ends) -> Statement | None:
    if _inside(m.start(), starts, ends):
        return None
    lead = re.split(r"[.!?]\s|\n", text[max(0, m.start() - _BOX_CONTEXT): m.start()])[-1]
    if _MARKER_HEDGE.search(lead):  # "Maybe the answer is 18", "I don't think the answer is"
        return Statement(m.start(), m.end(), "marker", Reading(None, HEDGED))
    start = _SKIP.match(text, m.end(), m.end() + 200).end()
    if _BOX_NEXT.match(text, start, start + 200):
        return None  # "The answer is $\boxed{5}$": the box is the statement
    region = text[start: start + MAX_SPAN]
    if "\n" in region and not region.startswith(("$$", "\\[")):
        region = region.split("\n", 1)[0]
    # "The answer is 18 because ...": the value first; "Answer: John has 180 minutes": a sentence
    reading = read_span(region, first=not re.match(r"[A-Za-z]{2,}", region) or
                        bool(re.match(r"(?i)(?:approximately|about|exactly|simply|just|equal\s+to)\b", region)))
    if reading.answer is None and not reading.problem:
        return None  # "the answer is consistent with ...": prose, not a statement
    if re.match(r"[^.!?\n]*\?", region):
        return None  # "Is it a coincidence that the answer is 24?": a question states nothing
    return Statement(m.start(), start + _sentence_end(region), "marker", reading)


def _sentence_end(region: str) -> int:
    """Length of the first sentence of a region (sentence ends inside math do not count)."""
    math = env_spans(region)
    starts, ends = [a for a, _ in math], [b for _, b in math]
    for m in re.finditer(r"[.!?](?=\s|$)", region):
        if not _inside(m.start(), starts, ends):
            return m.end()
    return len(region)


def box_group_answer(text: str, group) -> str:
    """The answer a box group states. Boxes joined by "or" that state the same value are one
    answer written two ways (`\\boxed{x+11}$ or $\\boxed{11+x}`, `\\boxed{15\\frac{39}{40}}$ or
    $\\boxed{\\frac{639}{40}}`): the repeats are dropped. Different values stay a list."""
    if len(group) == 1 or not any(_OR.search(text, a.end, b.start) for a, b in zip(group, group[1:])):
        return group_answer(text, group)
    kept: list[str] = []
    deadline = min(time.monotonic() + _SAME_FORM_TIMEOUT, current_deadline())
    for box in group:
        part = box.content(text).strip()
        if len(kept) >= _MAX_FORMS:
            return ", ".join(kept + ["..."])  # more distinct values than any answer: a list of them
        # one budget for the whole group (not one per pair): 1,000 or-joined boxes end in time
        if not any(equiv_status(part, k, deadline - time.monotonic()) == EQUAL for k in kept
                   if deadline > time.monotonic()):
            kept.append(part)
    return ", ".join(kept)


def _box_reading(text: str, group) -> Reading:
    answer = box_group_answer(text, group)
    if not answer:
        return Reading(None)
    before = text[max(0, group[0].start - _BOX_CONTEXT): group[0].start]
    after = text[group[-1].end: group[-1].end + _BOX_CONTEXT]
    if (_BEFORE_BOX.search(before) and not _ANSWER_COULD_BE.search(before)) or _AFTER_BOX.match(after):
        return Reading(None, HEDGED)
    return Reading(answer)


# Only words that bear on the boxed value itself: "is not $\boxed{18}$", "maybe \boxed{18}";
# "Sam did not work for $\boxed{6}$ days" and "at least $\boxed{9}$" state an answer.
_BEFORE_BOX = re.compile(
    r"(?:\b(?:not|never|maybe|perhaps|possibly|probably)|n't|\b(?:could|might|may)\s+be)"
    r"(?:\s+(?:be|equal\s+to|equals?))?[\s$=(\\\[]*$", re.I)
# "The final answer could be $\boxed{18}$": a modal in the answer's own sentence, not a doubt
_ANSWER_COULD_BE = re.compile(r"\banswer\b[^.!?\n]{0,40}\bcould\s+be[\s$=(\\\[]*$", re.I)
_VERDICT = r"(?:the\s+|an?\s+|my\s+|our\s+)?(?:(?:correct|right|final|true|valid)\s*)?(?:answer|solution|result)?"
_MARKER_HEDGE = re.compile(
    r"\b(?:maybe|perhaps|possibly|probably|not|never|if|unless|whether|suppose|guess)\b|n't\b", re.I)
_AFTER_BOX = re.compile(
    r"^[ \t$)\]\\]*(?:[ \t$]*-?\d[\d.,]*[ \t$]*(?:\.?[ \t]*$|\.?[ \t]*\n)"  # a bare value after: "\\boxed{120} 121"
    r"|"
    r"(?:(?:is|was|would\s+be|seems)\s+(?:not|n't)|isn't|wasn't)\s+" + _VERDICT + r"(?![a-z])"
    r"|(?:is|was|would\s+be|seems)\s+(?:wrong|incorrect|false|invalid)"
    r"|\(?\s*or\b(?!\s+else)|maybe|perhaps|possibly|probably|\?"
    # a remark on the value: a parenthesis that gives no reason, an adverb ("(approximately)", "roughly")
    r"|(?:text\{\s*)?\((?!\s*(?:since|because|as|from|which|given|using|by|where|when|for)\b)"
    r"|(?:text\{\s*)?[A-Za-z]{2,}ly\b|text\{[^{}]*[.(?])", re.I)


def reference_answer(solution: str) -> str | None:
    """The gold answer of a reference solution: its last box group (boxes side by side form
    one answer, equal forms joined by "or" count once). The MATH convention, `last_boxed`,
    keeps only the last box of "$\\boxed{-2}$ and $\\boxed{1}$"."""
    groups = box_groups(solution)
    return box_group_answer(solution, groups[-1]) if groups else None


def final_reading(text: str, style: str = "auto") -> tuple[Reading, str]:
    """(what the final answer statement says, its kind), per the module's policy; kind is ""
    when the text states nothing."""
    last = final_statement(text)
    if last is not None:
        if unclosed_after(text, last.end):
            return Reading(None), "truncated box"
        if last.reading.answer is not None and (_hedged_later(text[last.end: last.end + _LATER]) or
                                                _negated_later(text[last.end: last.end + _LATER], last.reading.answer)):
            return Reading(None, HEDGED), last.kind
        return last.reading, last.kind
    if unclosed_after(text, 0):
        return Reading(None), "truncated box"
    return _last_sentence(text, style), "last sentence"


def _hedged_later(rest: str) -> bool:
    """After the final statement, a sentence that offers another value as a possibility:
    "\\boxed{18}. Or maybe 17.", "Perhaps 17.", "It could also be 17." (discussion after the
    answer - "we could also have paired ...", "(or else J would have ...)" - is fine)."""
    for sentence in re.split(r"(?<=[.!?])\s+|\n\s*\n", rest)[:3]:
        if _LATER_HEDGE.match(sentence) and re.search(r"\d|\\frac|\\sqrt|\$", sentence):
            return True
    return False


def _negated_later(rest: str, answer: str) -> bool:
    """After the final statement, a sentence that takes that answer back: "The answer is not
    \\pi.", "The answer isn't 18.", "$\\cot x$ is not the answer.", "18 is wrong." (the sentence
    must name the answer itself: "\\boxed{18}. Note that 17 is not a solution" still answers 18)."""
    want = re.sub(r"[\s$]", "", answer)
    for sentence in re.split(r"(?<=[.!?])\s+|\n\s*\n", rest)[:3]:
        if _LATER_NEGATION.search(sentence) and want in re.sub(r"[\s$]", "", sentence):
            return True
    return False


_NOUN_VERDICT = r"(?:the\s+|an?\s+|my\s+|our\s+)?(?:(?:correct|right|final|true|valid)\s+)?(?:answer|solution|result)"
_LATER_NEGATION = re.compile(
    r"\banswer\s*(?:\*\*)?\s*(?:(?:is|was|would\s+be|will\s+be)\s+(?:\w+\s+)?(?:not|never)\b|isn't|wasn't|:\s*not\b)"
    r"|\b(?:is|was|seems)(?:\s+not|n't)\s+" + _NOUN_VERDICT + r"(?![a-z])"
    r"|\b(?:is|was|seems)\s+(?:wrong|incorrect|false)\b", re.I)
_LATER_HEDGE = re.compile(
    r"^[\s$.)\]]*(?:\(?\s*or\s+(?:maybe\s+|perhaps\s+)?(?:it\s+is\s+|the\s+answer\s+is\s+)?[-$\\\d(]"
    r"|maybe\b|perhaps\b|possibly\b|probably\b"
    r"|(?:it|the\s+answer)\s+(?:could|might|may)\s+(?:also\s+)?be\b)", re.I)


def _last_sentence(text: str, style: str) -> Reading:
    """The answer in the last sentence that has math (None for a truncated text)."""
    tail = text[-MAX_SPAN:].rstrip()
    if not tail or not _TERMINAL.search(tail[-20:]) or _open_math(tail):
        return Reading(None)  # stops mid-sentence (or inside math): truncated, or not an answer
    sentences = _split_sentences(tail)
    for k, sentence in enumerate(reversed(sentences)):
        if k >= 3:
            break
        toks = tokens(sentence)
        if style == "math" and not any(t[0] == "env" for t in toks):
            if any(c.isdigit() for c in sentence):
                return Reading(None)
            continue
        reading = read_span(sentence, first=False)
        if reading.answer is not None or reading.problem:
            return reading
        if any(c.isdigit() for c in sentence):
            return Reading(None)
    return Reading(None)


def _open_math(tail: str) -> bool:
    """Does the text end inside a `$...` that never closes (currency "$10" aside)?"""
    spans = env_spans(tail)
    last = max((m.start() for m in re.finditer(r"(?<!\\)\$", tail)), default=-1)
    if last < 0 or any(a <= last < b for a, b in spans):
        return False
    after = tail[last + 1:]
    return bool(re.search(r"[\\{^_]", after)) and not re.search(r"[.!?]\s|\n", after)


def _split_sentences(tail: str) -> list[str]:
    """Sentences of the tail: split at blank lines and at sentence ends outside math."""
    math = env_spans(tail)
    starts, ends = [a for a, _ in math], [b for _, b in math]
    out, start = [], 0
    for m in re.finditer(r"(?:[.!?](?=\s)|\n[ \t]*\n)", tail):
        if _inside(m.start(), starts, ends):
            continue
        out.append(tail[start:m.end()])
        start = m.end()
    out.append(tail[start:])
    return [s for s in out if s.strip()]
