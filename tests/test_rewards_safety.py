"""Hostile inputs return in bounded time and never raise; calls from many threads work;
a symbolic check that hangs is killed and the pool recovers; no torch import."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rewards import check, extract_answer, format_reward, is_equiv, step_rewards, warmup
from rewards.equivalence.symbolic import get_pool

TIMEOUT = 2.0
ADVERSARIAL = [
    "9^9^9^9", "9^{9^{9^{9}}}", "10^{10^{10^{10}}}", "(10^{10^{10}})!", "2^{2^{2^{2^{2^{2}}}}}",
    "(10^{100})!",  # no guard catches this one: the worker is killed at the timeout
    "{" * 200 + "1" + "}" * 200, "\\frac{" * 200 + "1" + "}{2}" * 200, "(" * 500 + "1" + ")" * 500,
    "x" * 200_000, "1" * 200_000, "\\boxed{" + "1+" * 70_000 + "1}",
    "\\frac{1}{", "\\sqrt{", "\\left( 1, 2", "}}}{{{", "\\begin{pmatrix} 1 & 2",
    "\\frac{1}{0}", "1/0", "0^{-1}", "\\frac{0}{0}",
    "\x00", "1\x002", "\\boxed{\x00}",
    "(lambda: 1)()", "__import__('os').system('echo pwned')", "exec('1')",
    "\\begin{pmatrix}" + "1&" * 5000 + "1\\end{pmatrix}",
    # quadratic regex work on long runs (spaces, digits, "$$", words) would hang here
    "1" + " " * 100_000 + "degrees", "18" * 2000 + "<x", "$" * 20_000, "or " * 30_000 + "1",
    "The answer is " * 5000, "####" * 10_000 + " 2", "1 " * 50_000 + "1/2",
]


@pytest.fixture(scope="module", autouse=True)
def warm_pool():
    # first use starts the worker processes; the timeouts below are about checks, not startup
    assert warmup()
    yield


def test_cold_start_does_not_time_out_easy_checks():
    # a fresh process: the first symbolic check waits for its worker instead of failing
    code = "import rewards; print(rewards.is_equiv('2\\\\sqrt{2}', '\\\\sqrt{8}', timeout=0.2))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "True", out.stderr


@pytest.mark.parametrize("bad", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_adversarial_answer_returns_false_in_time(bad):
    for pred, gold in ((bad, "1"), ("1", bad), (bad, bad + " ")):
        t0 = time.monotonic()
        result = is_equiv(pred, gold, timeout=TIMEOUT)
        assert time.monotonic() - t0 < TIMEOUT + 1.0
        assert isinstance(result, bool)
        if pred != "1" and gold != "1":
            continue  # a string may legitimately equal itself
        assert result is False


@pytest.mark.parametrize("bad", ADVERSARIAL[::3])
def test_adversarial_completion_all_rewards(bad):
    text = f"so the answer is $\\boxed{{{bad}}}$\n#### {bad}"
    t0 = time.monotonic()
    assert check(text, "1", "auto").score == 0.0
    assert format_reward(text, "math") in (0.0, 1.0)
    assert isinstance(step_rewards(text, gold="1"), list)
    assert extract_answer(text, "gsm8k") is None or isinstance(extract_answer(text, "gsm8k"), str)
    assert time.monotonic() - t0 < 3 * (5.0 + 1.0)


def test_hanging_check_is_killed_and_pool_recovers():
    pool = get_pool()
    kills = pool.kills
    t0 = time.monotonic()
    assert is_equiv("(10^{100})!", "2", timeout=1.0) is False  # sympy works on it for ever
    assert time.monotonic() - t0 < 2.0
    assert pool.kills == kills + 1
    assert is_equiv("\\sqrt{8}", "2\\sqrt{2}", timeout=10.0) is True  # the respawned worker


def test_eight_threads_at_once():
    cases = [("\\sqrt{8}", "2\\sqrt{2}", True), ("\\frac12", "0.5", True), ("x^2-1", "(x-1)(x+1)", True),
             ("\\pi", "3.14", False), ("1,2", "2,1", True), ("(1,2)", "(2,1)", False),
             ("(10^{100})!", "1", False), ("3+4i", "4i+3", True)] * 3
    barrier = threading.Barrier(8)

    def run(case):
        pred, gold, expected = case
        try:
            barrier.wait(timeout=30)
        except threading.BrokenBarrierError:
            pass
        return is_equiv(pred, gold, timeout=2.0 if "!" in pred else 30.0) == expected

    with ThreadPoolExecutor(8) as ex:
        results = list(ex.map(run, cases))
    assert all(results), [c for c, ok in zip(cases, results) if not ok]


_LATEX = ["\\frac", "\\sqrt", "\\pi", "\\infty", "\\boxed", "\\left(", "\\right)", "\\cup"]


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.integers(-10**12, 10**12), st.fractions(max_denominator=1000)),
       st.one_of(st.integers(-10**12, 10**12), st.fractions(max_denominator=1000)))
def test_fuzz_symmetry_on_numbers(a, b):
    sa, sb = str(a), str(b)
    assert is_equiv(sa, sb) == is_equiv(sb, sa) == (a == b)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(list("0123456789+-*/^{}()[]\\,.=x $%i") + _LATEX), max_size=25)
       .map("".join), st.text(max_size=30))
def test_fuzz_never_raises(a, b):
    assert isinstance(is_equiv(a, b, timeout=2.0), bool)
    assert isinstance(is_equiv(b, a, timeout=2.0), bool)


def test_rewards_does_not_import_torch_or_pipeline():
    code = ("import sys, rewards; rewards.is_equiv('1', '1'); "
            "print(any(m == 'torch' or m.startswith(('torch.', 'pipeline')) for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "False", out.stderr


def test_worker_exits_when_its_parent_is_killed(tmp_path):
    # the parent dies (SIGKILL, no atexit) while its worker is deep in a runaway computation
    code = ("import threading, os, time, rewards\n"
            "from rewards.equivalence.symbolic import get_pool\n"
            "p = get_pool(1); p.compare('1', '1', 30)\n"
            "print(p._all[0].proc.pid, flush=True)\n"
            "threading.Thread(target=lambda: rewards.is_equiv('(10^{100})!', '1', timeout=60)).start()\n"
            "time.sleep(1); os.kill(os.getpid(), 9)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    pid = int(out.stdout.split()[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(pid, 9)
    pytest.fail("symbolic worker outlived its parent")
