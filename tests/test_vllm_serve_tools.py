"""`rollout.tools` through `mathrl vllm-serve` (rollout.engine=vllm_server): the server runs the
multi-turn rollout and the tool, the trainer's client gets the transcripts (token ids, tool spans,
tool statistics, turns, log-probs) the in-process engine gives, and the two sides agree on the tool.

The real server (routes, limits, token, batching) and the real client run on loopback; the engine is
the scripted stand-in policy (tests/tir_standin.py) through the real HF engine, decode loop and
sandbox, since vLLM cannot run in the default suite. `make test-vllm` runs the same path on real vLLM
(tests/test_vllm_tools.py: VLLMEngine.tool_generate, which the server calls).
"""

from __future__ import annotations

import pytest

from pipeline.rollout.base import SamplingParams
from pipeline.rollout.hf_engine import HFEngine
from pipeline.rollout.server_auth import TOKEN_ENV
from pipeline.rollout.tool_runner import ToolSettings
from pipeline.rollout.vllm_client import ServerError, VLLMServerEngine
from tests.serve_helpers import TOKEN, call, running_server, serve_config
from tests.tir_standin import scripted_policy

CODES = ["print(6 * 7)", "1/0"]
TOOL_KEYS = ("rollout.tools=[python]", "rollout.tool_timeout_s=2", "rollout.tool_workers=2", "rollout.max_tool_calls=4")
PARAMS = SamplingParams(max_new_tokens=96, temperature=1.0, seed=5, logprobs=True)


class ScriptedServerEngine:
    """What the server needs of ``VLLMEngine`` with tools: ``tool_generate`` (the multi-turn rollout),
    ``generate_many`` (plain requests), ``tools`` (its runner), ``sync_weights``, ``on_gpu``."""

    on_gpu = False

    def __init__(self, model, tok, settings: ToolSettings):
        self.with_tools = HFEngine(model, tok, batch_size=8, tools=settings)
        self.plain = HFEngine(model, tok, batch_size=8)
        self.tools = self.with_tools.tools
        self.tool_requests = 0

    def tool_generate(self, prompts, n, params):
        self.tool_requests += 1
        return self.with_tools.generate(prompts, n, params)

    def generate_many(self, requests):
        return [self.plain.generate(*r) for r in requests]

    def sync_weights(self, state) -> None:
        pass

    def close(self) -> None:
        self.with_tools.close()


@pytest.fixture
def scripted(monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    model, tok, prompts = scripted_policy(CODES)
    engine = ScriptedServerEngine(model, tok, ToolSettings(max_calls=4, timeout_s=2.0, workers=2))
    try:
        yield model, tok, prompts, engine
    finally:
        engine.close()


def _port(url: str) -> str:
    return f"rollout.server_port={url.rsplit(':', 1)[1]}"


def _transcripts(groups):
    """Everything but the tool's seconds (sandbox_s, wait_s), which are timings."""
    return [[(s.completion_ids, s.tool_spans, s.finish_reason, s.turns,
              {k: v for k, v in s.tool_stats.items() if not k.endswith("_s")}) for s in g] for g in groups]


def test_the_server_runs_the_tool_and_the_trainer_gets_the_in_process_transcripts(scripted):
    model, tok, prompts, engine = scripted
    here = HFEngine(model, tok, batch_size=8, tools=ToolSettings(max_calls=4, timeout_s=2.0, workers=2))
    try:
        expected = here.generate(prompts, 2, PARAMS)
    finally:
        here.close()
    with running_server(serve_config(*TOOL_KEYS), engine, model=model) as (server, url):
        client = VLLMServerEngine(serve_config(*TOOL_KEYS, _port(url)), model)
        got = client.generate(prompts, 2, PARAMS)
        client.close()
    assert engine.tool_requests == 1
    assert _transcripts(got) == _transcripts(expected)
    assert [[s.tool_stats["calls"] for s in g] for g in got] == [[1, 1], [1, 1]]
    assert all(isinstance(span, tuple) for g in got for s in g for span in s.tool_spans)  # as in-process
    first = got[0][0]
    (a, b), = first.tool_spans
    assert tok.decode(first.completion_ids[a:b]) == "\n```output\n42\n```\n"
    assert first.logprobs == expected[0][0].logprobs and all(lp == 0.0 for lp in first.logprobs[a:b])
    assert "ZeroDivisionError" in tok.decode(got[1][0].completion_ids)  # the failing block's message came back


def test_a_run_without_tools_gets_plain_samples_from_a_server_with_tools(scripted):
    # eval.compare_without_tools evaluates the same policy with rollout.tools=[] through the same server
    model, tok, prompts, engine = scripted
    with running_server(serve_config(*TOOL_KEYS), engine, model=model) as (_, url):
        client = VLLMServerEngine(serve_config(_port(url)), model)
        got = client.generate(prompts, 1, PARAMS)
    assert engine.tool_requests == 0
    assert _transcripts(got) == _transcripts(HFEngine(model, tok, batch_size=8).generate(prompts, 1, PARAMS))
    assert all(s.tool_spans == [] and s.tool_stats == {} for g in got for s in g)


def test_the_two_sides_must_agree_on_the_tool(scripted):
    model, _, prompts, engine = scripted
    with running_server(serve_config(), model=model) as (_, url):  # a server without tools
        with pytest.raises(ServerError, match="runs no tools, and this run has rollout.tools"):
            VLLMServerEngine(serve_config(*TOOL_KEYS, _port(url)), model)
        status, reply = call(url, "POST", "/generate", {"prompts": ["Q0:"], "n": 1, "tools": True})
        assert status == 409 and "runs no tools" in reply["error"]
    with running_server(serve_config(*TOOL_KEYS), engine, model=model) as (_, url):
        with pytest.raises(ServerError, match=r"rollout.tool_timeout_s=2.0 \(this run: 9.0\)"):
            VLLMServerEngine(serve_config(*TOOL_KEYS, "rollout.tool_timeout_s=9", _port(url)), model)
        # the sandbox pool's size is the server machine's own: a different rollout.tool_workers is fine
        VLLMServerEngine(serve_config(*TOOL_KEYS, "rollout.tool_workers=8", _port(url)), model).close()
