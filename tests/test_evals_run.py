"""End-to-end evals on a tiny random Qwen2 model built in a fixture (accuracy ~0 is expected:
these tests check the harness writes every output, well-formed, not that the model is good)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from evals.loading import load_for_eval, resolve_model_path  # noqa: E402
from evals.evaluate import evaluate  # noqa: E402
from pipeline.stages.eval import default_output_dir, main  # noqa: E402
from pipeline.config import ConfigError, DataConfig, load_run_config  # noqa: E402
from pipeline.data.prepare import prepare  # noqa: E402
from pipeline.data.problems import load_problems  # noqa: E402
from pipeline.rollout.base import RolloutEngine  # noqa: E402

CHAT = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    out = tmp_path_factory.mktemp("prepared")
    prepare(DataConfig(prepared_dir=str(out), datasets=["gsm8k", "math500"]))
    return out


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, prepared):
    """A random 2-layer Qwen2 and a byte-level BPE tokenizer trained on some GSM8K text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    lines = (prepared / "gsm8k" / "train.jsonl").read_text().splitlines()[:300]
    corpus = [json.loads(x)["solution"] for x in lines]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=600, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                        additional_special_tokens=["<|im_start|>"])
    tokenizer.chat_template = CHAT
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, intermediate_size=128, max_position_embeddings=4096, tie_word_embeddings=True,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None))
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id)
    out = tmp_path_factory.mktemp("tiny")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _check_outputs(out, n_problems, n_samples, ks):
    for name in ("results.jsonl", "summary.json", "report.md", "accuracy.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    assert (out / "accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    records = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert len(records) == n_problems
    for rec in records:
        for key in ("completions", "preds", "correct", "reasons", "finish_reasons", "num_tokens"):
            assert len(rec[key]) == n_samples, key
        assert rec["prompt"] and rec["gold"]
        assert all(isinstance(c, bool) for c in rec["correct"])
        # every wrong completion says why; every right one has no failure reason
        assert all((r is None) == c for r, c in zip(rec["reasons"], rec["correct"]))
        assert set(rec["pass@k"]) == set(rec["maj@k"]) == {str(k) for k in ks}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_problems"] == n_problems
    assert summary["n_completions"] == n_problems * n_samples
    n_correct = sum(sum(r["correct"]) for r in records)
    assert summary["accuracy"] == pytest.approx(n_correct / (n_problems * n_samples))
    no_answer = sum(p is None for r in records for p in r["preds"])
    assert summary["extraction_failure_rate"] == pytest.approx(no_answer / (n_problems * n_samples))
    assert 0.0 <= summary["accuracy"] <= 1.0
    return records, summary


def test_eval_gsm8k_few_shot_via_cli_main(tiny_model, prepared, tmp_path):
    out = tmp_path / "eval_gsm8k"
    cfg = load_run_config(None, [f"model.name_or_path={tiny_model}", f"data.prepared_dir={prepared}",
                                 "eval.dataset=gsm8k", "eval.limit=20", "eval.max_new_tokens=12",
                                 "prompt.template=gsm8k", "prompt.few_shot=2", f"eval.output_dir={out}",
                                 "device=cpu"])
    assert main(cfg) == 0
    records, summary = _check_outputs(out, 20, 1, [1])
    assert summary["greedy"] and summary["few_shot"] == 2 and summary["dataset"] == "gsm8k"
    # the 2-shot prompt holds the first two GSM8K train questions before the test question
    train = [json.loads(x) for x in (prepared / "gsm8k" / "train.jsonl").read_text().splitlines()[:2]]
    first = records[0]["prompt"]
    assert first.index(train[0]["question"]) < first.index(train[1]["question"]) < first.index(records[0]["question"])
    report = (out / "report.md").read_text()
    assert "greedy pass@1" in report and "answer-extraction failure rate" in report


def test_eval_math500_has_subject_and_level_tables(tiny_model, prepared, tmp_path):
    model, tokenizer, _ = load_for_eval(str(tiny_model), device="cpu")
    problems = load_problems(str(prepared), "math500", "test", limit=20)
    out = tmp_path / "eval_math500"
    summary = evaluate(model, tokenizer, problems, template="math", max_new_tokens=12, style="math",
                       output_dir=out, model_name=str(tiny_model), dataset="math500", progress=False)
    _check_outputs(out, 20, 1, [1])
    subjects = {p["subject"] for p in problems}
    assert set(summary["by_subject"]) == subjects
    assert sum(row["n"] for row in summary["by_level"].values()) == 20
    report = (out / "report.md").read_text()
    assert "## By subject" in report and "## By level" in report
    assert all(s in report for s in subjects)


def test_eval_sampled_pass_and_maj_at_k(tiny_model, prepared, tmp_path):
    model, tokenizer, _ = load_for_eval(str(tiny_model), device="cpu")
    problems = load_problems(str(prepared), "gsm8k", "test", limit=4)
    out = tmp_path / "sampled"
    summary = evaluate(model, tokenizer, problems, n_samples=4, temperature=1.0, ks=[1, 2, 4],
                       max_new_tokens=8, output_dir=out, progress=False, dataset="gsm8k")
    records, _ = _check_outputs(out, 4, 4, [1, 2, 4])
    assert not summary["greedy"]
    # pass@k is non-decreasing in k, and pass@1 equals the mean accuracy
    assert summary["pass@k"]["1"] == pytest.approx(summary["accuracy"])
    assert summary["pass@k"]["1"] <= summary["pass@k"]["2"] <= summary["pass@k"]["4"]
    assert "pass@4" in (out / "report.md").read_text()


def test_config_rejects_meaningless_sampling():
    with pytest.raises(ConfigError, match="identical"):
        load_run_config(None, ["eval.n_samples=4", "eval.temperature=0", "eval.ks=[1]"])
    with pytest.raises(ConfigError, match="eval.ks"):
        load_run_config(None, ["eval.n_samples=2", "eval.temperature=1.0", "eval.ks=[4]"])


def test_missing_prepared_data_names_path_and_make_data(tmp_path):
    with pytest.raises(Exception, match="make data") as err:
        load_problems(str(tmp_path / "nowhere"), "gsm8k", "test")
    assert str(tmp_path / "nowhere" / "gsm8k" / "test.jsonl") in str(err.value)


def test_lora_adapter_and_run_dir_resolve_and_load(tiny_model, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model)
    peft_model = get_peft_model(base, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    run = tmp_path / "runs" / "r1"
    adapter = run / "checkpoints" / "step_10"
    peft_model.save_pretrained(adapter)
    (run / "checkpoints" / "step_2").mkdir()
    (run / "config.yaml").write_text("name: r1\n")
    # a run dir resolves to its newest step checkpoint (step_10 sorts after step_2 numerically)
    assert resolve_model_path(str(run)) == str(adapter)
    model, tokenizer, path = load_for_eval(str(run), device="cpu")
    ids = torch.tensor([tokenizer("12 + 3 = 15")["input_ids"]])
    with torch.no_grad():
        expected = peft_model(input_ids=ids).logits
        got = model(input_ids=ids).logits
        plain = AutoModelForCausalLM.from_pretrained(tiny_model)(input_ids=ids).logits
    assert torch.allclose(got, expected, atol=1e-5)
    assert not torch.allclose(got, plain, atol=1e-5)  # the adapter really changed the model
    cfg = load_run_config(None, ["eval.dataset=math500"])
    assert default_output_dir(cfg, path) == run / "eval" / "math500_step_10"


def test_model_path_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="holds no model"):
        resolve_model_path(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="not a model directory"):
        resolve_model_path("runs/does/not/exist")
    assert resolve_model_path("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"


class ScriptedEngine(RolloutEngine):
    """A RolloutEngine that answers each prompt with scripted completions (no model)."""

    def __init__(self, script):
        self.script = script  # prompt -> list of n completions

    def generate(self, prompts, n, params):
        from pipeline.rollout.base import Sample
        return [[Sample(prompt=p, prompt_ids=[], completion=c, completion_ids=[0], finish_reason="stop")
                 for c in self.script[p][:n]] for p in prompts]

    def sync_weights(self, model):
        pass


def test_reference_solutions_grade_correct_and_metrics_match_hand_values(prepared, tmp_path):
    from pipeline.prompts import build_prompt

    problems = load_problems(str(prepared), "gsm8k", "test", limit=10)
    script = {}
    for p in problems:
        wrong = p["solution"].rsplit("####", 1)[0] + "#### 99999"
        # samples: wrong answer, reference, reference, no answer at all
        script[build_prompt(p["question"], template="gsm8k", chat=False)] = [
            wrong, p["solution"], p["solution"], "I do not know."]
    summary = evaluate(None, None, problems, engine=ScriptedEngine(script), chat=False, n_samples=4,
                       temperature=1.0, ks=[1, 2, 4], style="gsm8k", output_dir=tmp_path, progress=False)
    assert summary["accuracy"] == pytest.approx(0.5)
    # c=2 of n=4 correct on every problem: pass@2 = 1 - C(2,2)/C(4,2), pass@4 = 1
    assert summary["pass@k"] == {"1": pytest.approx(0.5), "2": pytest.approx(1 - 1 / 6), "4": pytest.approx(1.0)}
    # maj@1 takes the wrong answer, maj@2 ties 1-1 and the earlier (wrong) answer wins,
    # maj@4 has the reference answer twice against once
    assert summary["maj@k"] == {"1": 0.0, "2": 0.0, "4": 1.0}
    assert summary["extraction_failure_rate"] == pytest.approx(0.25)
    assert summary["failure_reasons"] == {"not equal": 10, "no answer found": 10}


def test_math500_reference_solutions_all_grade_correct(prepared):
    from pipeline.prompts import build_prompt

    problems = load_problems(str(prepared), "math500", "test", limit=20)
    script = {build_prompt(p["question"], template="math", chat=False): [p["solution"]] for p in problems}
    summary = evaluate(None, None, problems, engine=ScriptedEngine(script), template="math", chat=False,
                       style="math", progress=False, dataset="math500")
    assert summary["accuracy"] == 1.0, summary["failure_reasons"]


def test_eval_engine_is_the_one_training_uses(tiny_model):
    """`rollout.engine` picks the eval's engine through the trainer's factory: vllm_server reaches
    for the server (and fails naming it when none runs) instead of quietly using HF generate."""
    from evals.evaluate import eval_engine
    from pipeline.rollout.hf_engine import HFEngine
    from pipeline.rollout.vllm_client import ServerLost
    from tests.dist_runs import free_port

    model, tokenizer, path = load_for_eval(str(tiny_model), device="cpu")
    base = [f"model.name_or_path={tiny_model}", "device=cpu", "rollout.batch_size=7"]
    engine = eval_engine(load_run_config(None, base), model, tokenizer, path)
    assert isinstance(engine, HFEngine) and engine.model is model and engine.batch_size == 7
    port = free_port()
    cfg = load_run_config(None, [*base, "rollout.engine=vllm_server", f"rollout.server_port={port}"])
    with pytest.raises(ServerLost, match=f"no vLLM server at http://127.0.0.1:{port}"):
        eval_engine(cfg, model, tokenizer, path)
