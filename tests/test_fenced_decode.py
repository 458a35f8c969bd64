"""fenced_decode.FencedDecode, the decode_rows of the vLLM engine under rollout.tools, against a fake
engine that behaves like vLLM's stop string (a request ends after the first token whose text
completes ``` in its own output): a turn ends exactly at the first closed python block, a fence that
closes none is decoded past by another request, a fence split over two requests is still found,
an unarmed row runs without the stop string, and each request gets its own (job, nth)."""

from __future__ import annotations

import pytest

from pipeline.rollout.fenced_decode import FENCE, FencedDecode, Reply, first_stop
from pipeline.rollout.multi_turn import Backticks, CodeStop

EOS = 0


class CharTokenizer:
    """Token id = a piece of text from a fixed table (EOS is id 0, decoded as nothing)."""

    def __init__(self, pieces: list[str]):
        self.pieces = ["", *pieces]
        self.eos_token_id = EOS

    def ids(self, *pieces: str) -> list[int]:
        return [self.pieces.index(p) for p in pieces]

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return "".join(self.pieces[i] for i in ids)


class Script:
    """A fake engine: each job writes its script (token ids) from where its context leaves off,
    stopping like vLLM (EOS, max_tokens, or the first token completing FENCE in this request's text)."""

    def __init__(self, tok, scripts: dict[int, list[int]], prompt_len: int):
        self.tok, self.scripts, self.prompt_len = tok, scripts, prompt_len
        self.log: list[tuple] = []

    def __call__(self, requests):
        replies = []
        for r in requests:
            self.log.append((r.job, r.nth, r.max_tokens, r.fence))
            rest = self.scripts[r.job][len(r.context) - self.prompt_len:]
            out, at_fence = [], False
            for t in rest[:r.max_tokens]:
                out.append(t)
                if t == EOS:
                    break
                if r.fence and FENCE in self.tok.decode(out):
                    at_fence = True
                    break
            replies.append(Reply(out, [-0.5] * len(out), at_fence))
        return replies


class Stop:
    """multi_turn's TurnStop on a CodeStop, with the armed jobs given."""

    def __init__(self, tok, armed: set[int]):
        self.code, self.armed_jobs = CodeStop(tok), armed

    def armed(self, job):
        return job in self.armed_jobs

    def __call__(self, job, tokens):
        return self.armed(job) and self.code(tokens)


TOK = CharTokenizer(["```python\n", "print(1)\n", "```", "``", "`", "text", "\n", "```text\n", "x\n", "```\n"])
PROMPT = [TOK.ids("text")[0]]


def _decode(scripts, budgets, armed, logprobs=True):
    engine = Script(TOK, scripts, len(PROMPT))
    decode = FencedDecode(engine, Backticks(TOK), [EOS], logprobs)
    jobs = sorted(scripts)
    tokens, lps = decode(jobs, [PROMPT] * len(jobs), budgets, Stop(TOK, armed))
    return tokens, lps, engine.log, decode


def test_the_turn_ends_at_the_closing_fence_of_a_python_block():
    code = TOK.ids("```python\n", "print(1)\n", "```", "text", "\n")
    tokens, lps, log, _ = _decode({0: code + [EOS]}, [20], {0})
    assert tokens == [code[:3]] and lps == [[-0.5] * 3]
    # the opening fence stopped the first request; the second one ends at the closing fence
    assert log == [(0, 0, 20, True), (0, 1, 19, True)]


def test_a_fence_that_closes_no_python_block_is_decoded_past():
    script = TOK.ids("```text\n", "x\n", "```\n", "text", "```python\n", "print(1)\n", "```") + [EOS]
    tokens, _, log, _ = _decode({0: script}, [20], {0})
    assert tokens == [script[:-1]]
    assert [nth for _, nth, _, _ in log] == [0, 1, 2, 3]  # text fence open, its close, python open, python close


def test_a_fence_split_over_two_requests_is_found_by_the_scan():
    """"``" then "`": the fake engine (like vLLM) stops the first request at the opening fence only; the
    closing fence forms across the "``" of one request and the "`" of the next: the stop string never
    sees it, the scan does, and cuts right after the "`"."""
    script = TOK.ids("```python\n", "print(1)\n", "``", "`", "text", "\n", "text") + [EOS]
    tokens, _, log, _ = _decode({0: script}, [30], {0})
    assert tokens == [script[:4]]
    assert len(log) == 2  # the second request ran to EOS; its tokens after the cut were dropped


def test_an_unarmed_row_runs_without_the_stop_string():
    code = TOK.ids("```python\n", "print(1)\n", "```", "text") + [EOS]
    tokens, _, log, _ = _decode({0: code, 1: code}, [20, 20], {1})
    assert tokens == [code, code[:3]]
    assert (0, 0, 20, False) in log and all(fence for job, _, _, fence in log if job == 1)


def test_budget_eos_and_logprobs():
    script = TOK.ids("text", "```text\n", "x\n", "text", "text")
    tokens, lps, log, _ = _decode({0: script, 1: TOK.ids("text") + [EOS]}, [4, 9], {0, 1}, logprobs=False)
    assert tokens == [script[:4], TOK.ids("text") + [EOS]] and lps is None
    assert [(j, n, m) for j, n, m, _ in log] == [(0, 0, 4), (1, 0, 9), (0, 1, 2)]


def test_request_indices_go_on_across_turns():
    code = TOK.ids("```python\n", "print(1)\n", "```")
    _, _, _, decode = _decode({0: code + [EOS]}, [20], {0})
    stop = Stop(TOK, {0})
    engine = Script(TOK, {0: TOK.ids("text") + [EOS]}, len(PROMPT) + 3)  # the next turn writes on
    decode.send = engine
    decode([0], [PROMPT + code], [17], stop)
    assert engine.log == [(0, 2, 17, True)]  # the third request of job 0, whatever its turn


def test_an_engine_that_ends_early_is_an_error():
    def cut(requests):
        return [Reply(TOK.ids("text"), None, at_fence=False) for _ in requests]

    decode = FencedDecode(cut, Backticks(TOK), [EOS], False)
    with pytest.raises(RuntimeError, match="before an EOS, its max_tokens or its stop string"):
        decode([0], [PROMPT], [10], Stop(TOK, {0}))


def test_first_stop_tries_only_backtick_tokens_after_start():
    tried = []
    ids = TOK.ids("text", "`", "text", "``", "`")
    got = first_stop(ids, 2, Backticks(TOK), lambda t: tried.append(len(t)) or len(t) == 5)
    assert got == 5 and tried == [4, 5]


def test_the_factory_hands_rollout_tools_to_the_colocated_engine(monkeypatch):
    """build_engine gives the vllm engine tool_settings(cfg) and close() closes its runner; the
    server's engine (colocated_vllm without tools) has none. Against tests/vllm_standin.py."""
    from pipeline.config import load_run_config
    from pipeline.rollout import factory, vllm_engine
    from tests.vllm_standin import install

    monkeypatch.setattr(vllm_engine, "_max_len", lambda path, wanted: wanted)
    install(monkeypatch, TOK)
    cfg = load_run_config(None, ["rollout.engine=vllm", "rollout.tools=[python]", "rollout.max_tool_calls=3"])
    engine = factory.build_engine(cfg, None, TOK, holds_weights=True)
    assert engine.tools.settings == factory.tool_settings(cfg) and engine.tools.settings.max_calls == 3
    closed = []
    monkeypatch.setattr(engine.tools, "close", lambda: closed.append(True))
    engine.close()
    assert closed == [True]
    assert factory.colocated_vllm(cfg, "m", sleep_mode=False).tools is None
