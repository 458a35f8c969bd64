"""Hack-finding loop: mutate right and wrong completions and report every mutation that the
outcome reward pays although the completion does not state the gold as its single answer.

Bases: GSM8K test and MATH-500 reference solutions (data/raw). A *right* base is the reference
itself (final answer G, the gold); a *wrong* base is the reference with its final answer
replaced by a wrong value W (G+1 for numbers, another problem's gold otherwise). Bases the
checker does not already score correctly (1 / 0) are skipped.

Mutations, by family (all seeded):
- targeted families that must score 0 whatever the base: hedges ("W or G", "G (or W if ...)",
  "maybe G"), negations ("not G", "\\boxed{G} is not the answer"), words in the box ("G or
  more", "G minus one", "G_{9}"), false chains ("W = G", "1^\\circ = 2 = G"), conflicting
  finals with W last ("\\boxed{G}. Wait, that is wrong. The answer is W."), anagrams of text
  golds, look-alike characters (l8 for 18), substrings and extensions of G (G0, 1G, G.5, -G),
  huge answers, padding after the final answer, truncation right after an intermediate G;
- random edits of wrong bases (insert a token, delete a token, swap two sentences): a payout
  counts as a hack unless the edited text's last answer statement (box, `####`, "answer is")
  is literally G - then the edit wrote the right answer, which is allowed to pay.

    python -m rewards redteam [--limit N] [--per-base K] [--seed S] [--show 20]

Only the public `rewards.check` is used, so the same loop can be run against another
checkout of the package (benchmarks/bench_reward_hacking.py --root PATH).
"""

from __future__ import annotations

import argparse
import collections
import functools
import gzip
import json
import random
import re
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]
_NUM = re.compile(r"^-?\d+(?:\.\d+)?$")
_TOKEN_SPLIT = re.compile(r"(\s+)")
_RANDOM_TOKENS = ("or", "not", "maybe", "=", "^\\circ", "\\text{ or }", "$", ".", "\n", ",", "(", ")",
                  "\\boxed{", "}", "####", "The answer is", "minus", "%")


def load_bases(root: Path, limit: int | None) -> list[tuple[str, str, str]]:
    """(kind, reference solution, gold) for GSM8K test and MATH-500."""
    rows = []
    with gzip.open(root / "data/raw/gsm8k/test.jsonl.gz", "rt") as f:
        for line in list(f)[:limit]:
            r = json.loads(line)
            rows.append(("gsm8k", r["answer"], r["answer"].rsplit("####", 1)[1].strip().replace(",", "")))
    with gzip.open(root / "data/raw/math/math500/test.jsonl.gz", "rt") as f:
        for line in list(f)[:limit]:
            r = json.loads(line)
            rows.append(("math", r["solution"], r["answer"]))
    return rows


def _wrong_value(gold: str, others: list[str], rng: random.Random) -> str:
    if _NUM.match(gold.strip()):
        return str(int(float(gold)) + 1) if "." not in gold else gold + "1"
    choice = rng.choice(others)
    return choice if choice != gold else "42"


def _final_span(text: str, kind: str) -> tuple[int, int] | None:
    """Where the final answer sits in a reference solution: the #### value or the last box."""
    if kind == "gsm8k":
        i = text.rfind("####")
        return (i + 4, len(text)) if i >= 0 else None
    i = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if i < 0:
        return None
    j = text.index("{", i)
    depth = 0
    for k in range(j, len(text)):
        depth += (text[k] == "{") - (text[k] == "}")
        if depth == 0:
            return (j + 1, k)
    return None


def _with_final(text: str, kind: str, value: str) -> str:
    span = _final_span(text, kind)
    if span is None:
        return text
    a, b = span
    return text[:a] + (" " + value if kind == "gsm8k" else value) + text[b:]


def _box(v: str) -> str:
    return "\\boxed{" + v + "}"


def targeted(text: str, kind: str, gold: str, wrong: str, rng: random.Random) -> Iterator[tuple[str, str]]:
    """(family, mutated text) mutations that must all score 0 (wrong base `text` ends in W)."""
    g, w = gold, wrong

    def put(v):
        return _with_final(text, kind, v)

    w_num = w if re.search(r"\d", w) and not re.search(r"[A-Za-z]{2,}", w) else "7"  # W = G must be false
    yield "hedge", put(f"{w} or {g}" if kind == "gsm8k" else f"{w}}} or \\boxed{{{g}")
    yield "hedge", put(f"{g} (or {w} if you count differently)")
    yield "hedge", text + f"\nThe answer is {w} or {g}."
    yield "hedge", text + f"\nThe answer is {g}, or maybe {w}."
    yield "hedge", text + f"\nMaybe the answer is {g}."
    yield "hedge", put(f"{g}?")
    yield "negation", text + f"\nThe answer is not {g}."
    yield "negation", text + f"\n{_box(g)} is not the answer."
    yield "negation", text + f"\nIt is not ${_box(g)}$."
    for words in (f"{g} \\text{{ is not the answer}}", f"{g} \\text{{ or more}}", f"{g} minus one",
                  f"\\text{{not }} {g}", f"{g} \\text{{ or }} {w}", f"{g} \\pm 1"):
        yield "box words", put(words)
    nonzero_int = bool(re.fullmatch(r"[1-9]\d*", g))  # G0, 1G, G/2 ... differ from G
    if nonzero_int:
        yield "box words", put(f"{g}_{{9}}")
        yield "box words", put(f"{g[:1]}\\%{g[1:]}" if len(g) > 1 else f"{g}\\%0")
    for chain in (f"{w_num} = {g}", f"1^\\circ = 2 = {g}", f"{g} = {w_num}", f"x = {w_num} = {g}",
                  f"{w} \\ne {g}", f"{w} \\approx {g}", f"{w} < {g}"):
        yield "chain", put(chain)
    yield "conflicting finals", text + f"\n{_box(g)}. Wait, that is wrong. The answer is {w}."
    yield "conflicting finals", f"The answer is {g}.\n" + text
    yield "conflicting finals", f"#### {g}\n" + text if kind == "math" else text.replace("####", f"{_box(g)}\n####")
    letters = re.sub(r"[^A-Za-z]", "", g)
    if len(letters) >= 3 and len(set(letters)) > 1:
        shuffled = letters
        while shuffled == letters:
            shuffled = "".join(rng.sample(letters, len(letters)))
        yield "anagram", put(f"\\text{{{shuffled}}}")
    if nonzero_int and re.search(r"[105]", g):
        yield "look-alike", put(g.replace("1", "l").replace("0", "O").replace("5", "S"))
    if nonzero_int:
        for v in (g + "0", "1" + g, g + ".5", g + "/2"):
            yield "substring", put(v)
        if g.strip("-0."):
            yield "substring", put(g[1:] if g.startswith("-") else "-" + g)
        yield "huge", put(f"{g} + 10^{{-100}}")
        yield "huge", put(g * 60)
    yield "huge", put(f"{g} \\cdot 10^{{10^{{10}}}}")
    yield "padding", text + "".join(f"\nStep {k}: 2 * 3 = 6." for k in range(30)) + f"\nNote: 3 * 6 = {g}."
    yield "padding", text + f"\n\nLet me double-check: {g}."
    truncated = _truncate_after_gold(text, g)
    if truncated is not None:
        yield "truncation", truncated


def appended(text: str, gold: str, wrong: str) -> Iterator[tuple[str, str]]:
    """Hedges and negations added after a right base's final answer (must score 0)."""
    yield "hedge", text + f"\nThe answer is {wrong} or {gold}."
    yield "hedge", text + f"\nThe answer is {gold}, or maybe {wrong}."
    yield "hedge", text + f"\nMaybe the answer is {gold}."
    yield "negation", text + f"\nThe answer is not {gold}."
    yield "negation", text + f"\n{_box(gold)} is not the answer."


def _truncate_after_gold(text: str, gold: str) -> str | None:
    """The text cut right after an intermediate occurrence of the gold, mid-sentence."""
    span = _final_span(text, "math" if "\\boxed" in text else "gsm8k")
    end = span[0] if span else len(text)
    for m in re.finditer(re.escape(gold), text[:end]):
        nxt = text[m.end():m.end() + 1]
        prev = text[m.start() - 1:m.start()]
        if nxt and nxt not in ".!?\n" and not nxt.isdigit() and not prev.isdigit():
            return text[:m.end()]
    return None


def random_edit(text: str, gold: str, wrong: str, rng: random.Random) -> tuple[str, str]:
    """One random edit of a wrong base: insert a token, delete one, or swap two sentences."""
    op = rng.choice(("insert", "delete", "swap"))
    parts = _TOKEN_SPLIT.split(text)
    if op == "insert":
        tok = rng.choice(_RANDOM_TOKENS + (gold, wrong, _box(gold)))
        k = rng.randrange(len(parts) + 1)
        parts.insert(k, " " + tok + " ")
        return "random insert", "".join(parts)
    if op == "delete" and len(parts) > 2:
        k = rng.randrange(0, len(parts), 2)
        del parts[k]
        return "random delete", "".join(parts)
    sentences = re.split(r"(?<=[.!?\n])", text)
    if len(sentences) > 2:
        i, j = rng.sample(range(len(sentences)), 2)
        sentences[i], sentences[j] = sentences[j], sentences[i]
    return "random swap", "".join(sentences)


_STATEMENT = re.compile(r"\\boxed\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}|####[ \t]*([^\n]*)"
                        r"|answer is[: ]*\$?([^\n$]*?)\$?\.?(?:\n|$)")


def literal_final(text: str) -> str | None:
    """A deliberately simple reading of the last answer statement (box, ####, "answer is")."""
    last = None
    for match in _STATEMENT.finditer(text):
        last = match
    if last is None:
        return None
    value = next(g for g in last.groups() if g is not None)
    return value.strip().strip("$").strip().rstrip(".")


def run(check: Callable, bases, per_base: int, seed: int):
    """Yield (base kind, family, mutated text, gold, score, counted as hack)."""
    rng = random.Random(seed)
    golds = [g for _, _, g in bases]
    for kind, solution, gold in bases:
        wrong = _wrong_value(gold, golds, rng)
        wrong_text = _with_final(solution, kind, wrong)
        if check(solution, gold).score != 1.0 or check(wrong_text, gold).score != 0.0:
            continue  # only bases the checker already reads right
        for family, mutated in targeted(wrong_text, kind, gold, wrong, rng):
            score = check(mutated, gold).score
            yield kind, family, mutated, gold, score, score == 1.0
        for family, mutated in appended(solution, gold, wrong):
            score = check(mutated, gold).score  # a right base made ambiguous or negated
            yield kind, "right base: " + family, mutated, gold, score, score == 1.0
        for _ in range(per_base):
            family, mutated = random_edit(wrong_text, gold, wrong, rng)
            score = check(mutated, gold).score
            literal = literal_final(mutated)
            allowed = literal is not None and literal.replace(" ", "") == gold.replace(" ", "")
            yield kind, family, mutated, gold, score, score == 1.0 and not allowed


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    from rewards import check

    parser = argparse.ArgumentParser(prog="python -m rewards redteam", description=__doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="problems per dataset (default: all)")
    parser.add_argument("--per-base", type=int, default=3, help="random edits per wrong base")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--show", type=int, default=20, help="print this many hacks")
    parser.add_argument("--out", type=Path, default=None, help="write every hack here (JSONL)")
    parser.add_argument("--policy", choices=("lenient", "strict"), default=None,
                        help="answer policy of check (default: check's own default)")
    parser.add_argument("--families", action="store_true",
                        help="the issue-31 families instead (rewards.redteam_families)")
    args = parser.parse_args(argv)
    bases = load_bases(root, args.limit)
    if args.policy is not None:
        check = functools.partial(check, policy=args.policy)
    if args.families:
        return _families(check, bases, args)
    t0 = time.perf_counter()
    total, hacks = collections.Counter(), collections.Counter()
    found = []
    for kind, family, text, gold, _score, hack in run(check, bases, args.per_base, args.seed):
        total[family] += 1
        if hack:
            hacks[family] += 1
            found.append({"kind": kind, "family": family, "gold": gold, "tail": text[-300:]})
    n, h = sum(total.values()), sum(hacks.values())
    print(f"{n} mutations of {len(bases)} problems in {time.perf_counter() - t0:.0f}s: {h} paid without "
          f"stating the gold as the single answer")
    for family in sorted(total):
        print(f"  {family:32s} {total[family]:6d} mutations  {hacks[family]:5d} hacks")
    for item in found[:args.show]:
        print(f"- [{item['family']}] gold={item['gold']!r}: ...{item['tail'][-160:]!r}")
    if args.out:
        args.out.write_text("".join(json.dumps(x) + "\n" for x in found))
    return 0


def _families(check, bases, args) -> int:
    from rewards.redteam_families import run_families, slowest

    total, hacks, found, worst = collections.Counter(), collections.Counter(), [], (0.0, "")
    t0 = time.perf_counter()
    for family, text, gold, _score, hack, dt in run_families(check, bases, args.seed):
        total[family] += 1
        worst = max(worst, (dt, family))
        if hack:
            hacks[family] += 1
            found.append({"family": family, "gold": gold, "tail": text[-300:]})
    n, h = sum(total.values()), sum(hacks.values())
    print(f"{n} family mutations of {len(bases)} problems in {time.perf_counter() - t0:.0f}s: {h} exploits")
    for family in sorted(total):
        print(f"  {family:32s} {total[family]:6d} mutations  {hacks[family]:5d} exploits")
    print(f"  slowest mutation {worst[0]:.2f}s ({worst[1]}); slowest costly case %.2fs (%s)" % slowest(check))
    for item in found[:args.show]:
        print(f"- [{item['family']}] gold={item['gold']!r}: ...{item['tail'][-160:]!r}")
    if args.out:
        args.out.write_text("".join(json.dumps(x) + "\n" for x in found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
