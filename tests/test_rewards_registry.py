"""Registry, combine, score_batch, the CLI, and the code (program-of-thought) reward against
the real sandbox and against a plain subprocess runner."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from rewards import REWARDS, build_reward, code_reward, combine, get_reward, score_batch
from rewards.__main__ import main as cli

SYNTH = "12 + 5 = <<12+5=17>>17\n17 * 3 = <<17*3=51>>51\n#### 51"
SANDBOX_ERRORS = (ValueError, RuntimeError)  # unknown backend / SandboxUnavailable
POT = "Let me compute it.\n```python\nx = 12 + 5\nprint(x * 3)\n```\n"


def test_registry_names_and_signature():
    assert {"correct", "format", "code"} <= set(REWARDS)
    for name, fn in REWARDS.items():
        params = list(inspect.signature(fn).parameters.values())
        assert [p.name for p in params] == ["completion", "gold", "style"], name
        assert params[2].default == "auto"
    assert REWARDS["correct"](SYNTH, "51") == 1.0
    assert REWARDS["correct"](SYNTH, "52", "gsm8k") == 0.0
    assert REWARDS["format"](SYNTH, "ignored", "gsm8k") == 1.0
    assert REWARDS["steps"](SYNTH, "51") == 1.0


def test_unknown_name_lists_valid_ones():
    with pytest.raises(KeyError, match="correct.*format"):
        get_reward("corect")
    with pytest.raises(KeyError, match="valid"):
        combine({"correct": 1.0, "nope": 0.5})


def test_build_reward_binds_options(monkeypatch):
    import rewards.registry as registry

    seen = []
    real_check = registry.check
    monkeypatch.setattr(registry, "check", lambda *a, timeout, policy: seen.append(timeout) or
                        real_check(*a, timeout=timeout, policy=policy))
    slow_pair = ("so $\\boxed{(10^{100})!}$", "1")  # sympy never finishes this one
    t0 = time.monotonic()
    assert build_reward("correct", timeout=0.5)(*slow_pair) == 0.0
    assert seen == [0.5]
    # the bound timeout, not the 5 s default, ended it (the margin is for a loaded machine)
    assert time.monotonic() - t0 < 4.0
    assert build_reward("format") is REWARDS["format"]
    reward = combine({"code": 1.0}, sandbox_backend="no-such-backend")
    with pytest.raises(SANDBOX_ERRORS):
        reward(POT, "51")  # a missing sandbox is an error, never a silent 0


def test_combine_weights_and_components():
    reward = combine({"correct": 1.0, "format": 0.1})
    assert reward(SYNTH, "51") == pytest.approx(1.1)
    assert reward(SYNTH, "50") == pytest.approx(0.1)
    assert reward("the answer is 51, then 51", "51", "gsm8k") == pytest.approx(1.0)
    assert reward.components(SYNTH, "50") == {"correct": 0.0, "format": 1.0}


def test_score_batch_keeps_order():
    comps = [SYNTH, "#### 7", "nothing", "\\boxed{\\frac{1}{2}}"] * 5
    golds = ["51", "8", "1", "0.5"] * 5
    res = score_batch(comps, golds, "auto", workers=3, progress=False)
    assert [r.score for r in res] == [1.0, 0.0, 0.0, 1.0] * 5
    assert [r.reason for r in res[:3]] == ["", "not equal", "no answer found"]
    with pytest.raises(ValueError):
        score_batch(["a"], [], "auto")


def test_cli(tmp_path, capsys):
    assert cli(["equiv", "\\frac{1}{2}", "0.5"]) == 0
    assert cli(["equiv", "3.14", "\\pi"]) == 1
    (tmp_path / "sol.txt").write_text("so $\\boxed{42}$")
    assert cli(["extract", str(tmp_path / "sol.txt")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "42"
    rows = [{"completion": SYNTH, "answer": "51"}, {"completion": "#### 3", "answer": "4"},
            {"completion": "no idea\u2028really", "gold": "4"}]
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    assert cli(["score", str(path), "--style", "gsm8k"]) == 0
    out = capsys.readouterr().out
    assert "accuracy 0.3333" in out and "no answer found: 1" in out
    scored = [json.loads(line) for line in (tmp_path / "c.scored.jsonl").read_text().splitlines()]
    assert [r["score"] for r in scored] == [1.0, 0.0, 0.0]
    assert scored[1]["pred"] == "3"


def _subprocess_runner(code: str):
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=2)
    except subprocess.TimeoutExpired:
        return SimpleNamespace(stdout="", exit_code=-9, timed_out=True)
    return SimpleNamespace(stdout=p.stdout, exit_code=p.returncode, timed_out=False)


CODE_CASES = [
    (POT, "51", 1.0),
    (POT, "52", 0.0),
    ("```python\nprint(1/3)\n```", "\\frac13", 0.0),       # a float print is an approximation
    ("```python\nfrom fractions import Fraction\nprint(Fraction(1, 3))\n```", "\\frac13", 1.0),
    ("```python\nprint(1)\n```\nthen\n```py\nprint('answer:')\nprint(2)\n```", "2", 1.0),  # last block
    ("```python\nraise SystemExit(3)\n```", "3", 0.0),
    ("```python\nprint(5)\n1/0\n```", "5", 0.0),            # crashed after printing
    ("no code here, the answer is 51", "51", 0.0),
    ("```python\n\n```", "51", 0.0),
]


@pytest.mark.parametrize("completion,gold,expected", CODE_CASES)
def test_code_reward_subprocess_runner(completion, gold, expected):
    assert code_reward(completion, gold, runner=_subprocess_runner) == expected


def test_code_reward_timeout_scores_zero():
    comp = "```python\nwhile True:\n    pass\n```"
    assert code_reward(comp, "1", runner=_subprocess_runner) == 0.0


def test_code_reward_real_sandbox():
    from sandbox import Sandbox

    with Sandbox("process", workers=1, allow_process=True) as sb:
        def runner(code):
            return sb.run(code, timeout_s=2.0)

        for completion, gold, expected in CODE_CASES[:6]:
            assert code_reward(completion, gold, runner=runner) == expected, completion
        assert code_reward("```python\nwhile True: pass\n```", "1", runner=runner) == 0.0


def test_code_reward_default_runner_in_registry():
    from sandbox import available_backends

    ok = {name for name, (usable, _) in available_backends().items() if usable and name != "process"}
    if not ok:
        pytest.skip("no isolating sandbox backend (docker/bwrap) on this machine")
    assert REWARDS["code"](POT, "51") == 1.0
    assert REWARDS["code"](POT, "50") == 0.0
