"""The PRM option on CPU: a tiny PRM-shaped model (random weights, a Qwen2 backbone with the Qwen
PRM head, the tiny tokenizer plus `<extra_0>`) saved with save_pretrained and loaded back through
`load_prm`, the loader a real Qwen2.5-Math-PRM goes through. Its scores mean nothing; what is
tested is the plumbing: the separator protocol, batching, step mapping, the mix with the rules,
process advantages from PRM steps, the trainer and `mathrl eval-prm`."""

from __future__ import annotations

import json
import math

import pytest
import torch

from pipeline.config import RewardConfig, load_run_config
from pipeline.grpo.advantages import process_advantages
from pipeline.grpo.episodes import Episode
from pipeline.grpo.episode_rewards import add_step_rewards, prm_step_probabilities
from pipeline.models import load_policy
from pipeline.prm import PRMError, PRMScorer, Qwen2ForProcessRewardModel, build_tiny_prm, load_prm
from pipeline.prm.model import SEPARATOR
from rewards.steps.mix import StepMix, mix_scores, penalties
from rewards.steps.reward import split_steps

SOLUTIONS = [  # different step counts, one with a false claim, one stepless
    ("Tom has 12 pens. He buys 5 more. He loses 3. How many?", "gets: <<12+5=17>>17\nloses: <<17-3=14>>14\n#### 14"),
    ("Ana has 4 cards. She gets 2 more. How many?", "gets: <<4+2=7>>7\n#### 7"),
    ("Ben has 9 coins. He doubles them. He sells 8. He finds 1. How many?",
     "times: <<9*2=18>>18\nloses: <<18-8=10>>10\ngets: <<10+1=11>>11\n#### 11"),
    ("Mia has 3 books. How many?", "#### 3"),
]


@pytest.fixture(scope="module")
def prm_dir(tiny_setup, tmp_path_factory):
    _, root = tiny_setup
    return str(build_tiny_prm(str(tmp_path_factory.mktemp("prm") / "tiny-prm"), str(root / "tiny")))


@pytest.fixture(scope="module")
def scorer(prm_dir):
    model, tok, sep = load_prm(prm_dir)
    return PRMScorer(model, tok, sep, batch_size=3)


def _steps(text):
    return [text[a:b] for a, b in split_steps(text)]


def test_tiny_prm_loads_through_the_loader_with_its_separator(prm_dir, scorer, tiny_setup):
    assert json.loads(open(f"{prm_dir}/config.json").read())["architectures"] == ["Qwen2ForProcessRewardModel"]
    assert isinstance(scorer.model, Qwen2ForProcessRewardModel) and not scorer.model.training
    assert scorer.tokenizer.convert_ids_to_tokens(scorer.sep_id) == SEPARATOR
    _, root = tiny_setup
    with pytest.raises(PRMError, match="Qwen2ForCausalLM; supported"):
        load_prm(str(root / "tiny"))  # a causal LM: its head would be random, so it is refused


def test_scores_sit_at_the_separators_one_per_step(scorer):
    """P(good) of step k is softmax(logits)[1] at the k-th `<extra_0>`, read off a plain forward."""
    question, text = SOLUTIONS[2]
    steps = _steps(text)
    got = scorer.probabilities([(question, steps)])[0]
    ids = scorer.tokenizer(scorer.text(question, steps), add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = scorer.model(input_ids=torch.tensor([ids]))[0]
    where = [t for t, i in enumerate(ids) if i == scorer.sep_id]
    want = [torch.softmax(logits[t], -1)[1].item() for t in where]
    assert len(got) == len(steps) == len(where) == 4
    assert got == pytest.approx(want, abs=1e-6)
    assert len(set(round(p, 4) for p in got)) > 1  # the wide init spreads the scores


def test_a_later_step_does_not_change_earlier_scores(scorer):
    """Causal PRM: editing step 2 leaves steps 0-1 as they were and changes step 2's score."""
    question, text = SOLUTIONS[2]
    steps = _steps(text)
    edited = steps[:2] + ["gets: <<10+1=12>>12 and some more words"] + steps[3:]
    a, b = scorer.probabilities([(question, steps), (question, edited)])
    assert a[:2] == pytest.approx(b[:2], abs=1e-6)
    assert a[2] != pytest.approx(b[2], abs=1e-6)


def test_batches_with_different_step_counts_match_one_at_a_time(scorer):
    items = [(q, _steps(t)) for q, t in SOLUTIONS] + [("no steps at all", [])]
    batched = scorer.probabilities(items)  # batch_size 3: two forwards, sorted by length, padded
    alone = [scorer.probabilities([it])[0] for it in items]
    assert [len(p) for p in batched] == [3, 2, 4, 1, 0]
    for b, a in zip(batched, alone):
        assert b == pytest.approx(a, abs=1e-5)


def test_separator_in_model_text_cannot_shift_the_steps(scorer):
    steps = ["gets: <<4+2=6>>6 <extra_0><extra_0>", "#### 6"]
    probs = scorer.probabilities([("q <extra_0>", steps)])[0]
    assert len(probs) == 2
    clean = scorer.probabilities([("q ", ["gets: <<4+2=6>>6 ", "#### 6"])])[0]
    assert probs == pytest.approx(clean, abs=1e-6)


def test_steps_past_max_tokens_get_no_score(prm_dir):
    model, tok, sep = load_prm(prm_dir)
    question, text = SOLUTIONS[2]
    steps = _steps(text)
    full = PRMScorer(model, tok, sep).probabilities([(question, steps)])[0]
    n_tokens = len(PRMScorer(model, tok, sep).encode(question, steps[:2]))
    short = PRMScorer(model, tok, sep, max_tokens=n_tokens, threshold=0.0)
    cut = short.probabilities([(question, steps)])[0]
    assert cut[:2] == pytest.approx(full[:2], abs=1e-6) and cut[2:] == [None, None]
    res = short(question, steps)
    assert math.isnan(res.scores[3]) and res.first_error == -1 and "prm_max_tokens" in res.reasons[3]


def test_a_two_label_token_classifier_loads_and_other_label_counts_are_refused(tiny_setup, tmp_path):
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForTokenClassification

    _, root = tiny_setup
    tok = AutoTokenizer.from_pretrained(root / "tiny")
    tok.add_tokens([SEPARATOR], special_tokens=True)
    for labels in (2, 3):
        cfg = Qwen2Config(vocab_size=len(tok), hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                          num_key_value_heads=1, intermediate_size=64, num_labels=labels, pad_token_id=0)
        Qwen2ForTokenClassification(cfg).save_pretrained(tmp_path / str(labels))
        tok.save_pretrained(tmp_path / str(labels))
    model, tok2, sep = load_prm(str(tmp_path / "2"))
    probs = PRMScorer(model, tok2, sep).probabilities([("q", ["a", "b"])])[0]
    assert len(probs) == 2 and all(0 < p < 1 for p in probs)
    with pytest.raises(PRMError, match="3 labels"):
        load_prm(str(tmp_path / "3"))


def test_a_tokenizer_without_the_separator_is_refused(tiny_setup, tmp_path):
    _, root = tiny_setup
    model, _ = load_policy(str(root / "tiny"))
    prm = Qwen2ForProcessRewardModel(model.config)
    prm.save_pretrained(tmp_path)
    load_policy(str(root / "tiny"))[1].save_pretrained(tmp_path)
    with pytest.raises(PRMError, match="no <extra_0> token"):
        load_prm(str(tmp_path))


# ---------------------------------------------------------------- scoring and advantages


def _episodes(tokenizer, group=SOLUTIONS[:3], outcome=(1.0, 0.0, 1.0)):
    eps = []
    for k, ((q, text), o) in enumerate(zip(group, outcome)):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        eps.append(Episode(problem_id="p", group=0, sample=k, prompt="", completion=text, prompt_ids=[1],
                           completion_ids=ids, finish_reason="stop", gold=text.split("#### ")[-1],
                           rewards={"correct": o}, reward=o, question=q))
    return eps


def test_prm_step_rewards_by_hand_and_their_advantages(scorer, tiny_setup):
    """Completions with 3, 2 and 4 steps in one group: each step's mixed score, its clipped
    penalty, the step ends in tokens, and the group-normalised advantages, all by hand."""
    _, root = tiny_setup
    _, tok = load_policy(str(root / "tiny"))
    eps = _episodes(tok)
    probs = prm_step_probabilities(eps, scorer)
    cfg = RewardConfig(weights={"correct": 1.0}, prm_mix="rule_overrides", prm_threshold=0.6)
    add_step_rewards(eps, cfg, tok, prm=scorer)
    rule = [[1, 1, 0], [-1, 0], [1, 1, 1, 0]]  # gsm8k annotations: 4+2=7 is the one false claim
    expected_rewards, expected_ends = [], []
    for ep, p, r in zip(eps, probs, rule):
        # rule_overrides: a refuted claim -> 0, else the PRM; penalty 0.5 * (0.6 - q) / 0.6 below 0.6
        q = [0.0 if rr < 0 else pp for pp, rr in zip(p, r)]
        vals = [-0.5 * (0.6 - x) / 0.6 if x < 0.6 else 0.0 for x in q]
        points = [j for j in range(len(q)) if vals[j] < 0 or j == len(q) - 1]
        values = [vals[j] for j in points]
        values[-1] += ep.rewards["correct"]  # the outcome, reused
        spans = split_steps(ep.completion)
        ends = []
        for j in points[:-1]:  # the token that completes the step's last character
            end_char = spans[j][1]
            ends.append(next(t for t in range(len(ep.completion_ids))
                             if len(tok.decode(ep.completion_ids[:t + 1], skip_special_tokens=True)) >= end_char))
        ends.append(len(ep.completion_ids) - 1)  # the last point closes at the last token (EOS)
        expected_rewards.append(values)
        expected_ends.append(ends)
    credit = [0.2, 0.0, 0.3]  # 0.1 per true claim feeding the answer (at most 0.3); the false chain gets none
    for ep, want, ends, c in zip(eps, expected_rewards, expected_ends, credit):
        want[-1] += c
        assert ep.step_rewards == pytest.approx(want, abs=1e-9)
        assert ep.step_ends == ends
    # DeepSeekMath 4.1.3: every point of the group normalised together, a token sums the points at or after it
    pool = [r for ep in eps for r in ep.step_rewards]
    mean = sum(pool) / len(pool)
    std = math.sqrt(sum((r - mean) ** 2 for r in pool) / (len(pool) - 1))
    lengths = [len(ep.completion_ids) for ep in eps]
    adv = process_advantages([ep.step_rewards for ep in eps], [ep.step_ends for ep in eps], lengths, 3, eps=0.0)
    for i, ep in enumerate(eps):
        for t in range(max(lengths)):
            want = (sum((r - mean) / std for r, e in zip(ep.step_rewards, ep.step_ends) if e >= t)
                    if t < lengths[i] else 0.0)
            assert adv[i, t].item() == pytest.approx(want, abs=1e-5)


def test_prm_approving_every_step_gives_the_rule_points(scorer, tiny_setup):
    """A PRM that likes every step adds nothing: the points are the rules' (clip mechanism)."""
    import rewards

    class Approves:
        def probabilities(self, items):
            return [[1.0] * len(steps) for _, steps in items]

    _, root = tiny_setup
    _, tok = load_policy(str(root / "tiny"))
    with_prm, rules = _episodes(tok), _episodes(tok)
    add_step_rewards(with_prm, RewardConfig(), tok, prm=Approves())
    add_step_rewards(rules, RewardConfig(), tok)
    for a, b in zip(with_prm, rules):
        assert (a.step_rewards, a.step_ends) == (b.step_rewards, b.step_ends)
        direct = rewards.step_rewards(a.completion, a.gold, outcome=a.rewards["correct"])
        assert len(direct) == len(a.step_rewards)


def test_mix_modes_by_hand():
    prm, rule = [0.9, 0.8, 0.3, None, None], [-1, 1, 0, -1, 0]
    assert mix_scores(prm, rule, StepMix("rule_overrides")) == [0.0, 0.8, 0.3, 0.0, None]
    assert mix_scores(prm, rule, StepMix("prm_only")) == [0.9, 0.8, 0.3, 0.0, None]
    w = mix_scores(prm, rule, StepMix("weighted", rule_weight=0.25))
    assert w[:3] == pytest.approx([0.75 * 0.9 + 0.25 * 0.0, 0.75 * 0.8 + 0.25 * 1.0, 0.3]) and w[3:] == [0.0, None]
    assert penalties([0.0, 0.25, 0.5, None, 0.9], threshold=0.5, penalty=0.5) == [-0.5, -0.25, 0.0, 0.0, 0.0]
    assert penalties([0.3], threshold=0.6, penalty=1.0) == pytest.approx([-0.5])
    with pytest.raises(ValueError, match="unknown step mix"):
        StepMix("average")
    with pytest.raises(ValueError, match="2 PRM scores but 1"):
        mix_scores([0.5, 0.5], [0])


# ---------------------------------------------------------------- config, trainer, eval-prm


@pytest.mark.parametrize("override, fragment", [
    ("reward.prm_rule_weight=1.5", "reward.prm_rule_weight"),
    ("reward.prm_threshold=0", "reward.prm_threshold"),
    ("reward.prm_batch_size=0", "reward.prm_batch_size"),
    ("reward.prm=not a model", "reward.prm"),
    ("reward.prm_mix=average", "reward.prm_mix"),
])
def test_bad_prm_settings_are_refused_naming_the_key(override, fragment):
    from pipeline.config import ConfigError

    with pytest.raises(ConfigError) as e:
        load_run_config(None, [override])
    assert fragment in str(e.value) and "\n" not in str(e.value)


def test_prm_dir_without_config_is_refused(tmp_path):
    from pipeline.config import ConfigError

    with pytest.raises(ConfigError, match="without config.json"):
        load_run_config(None, [f"reward.prm={tmp_path}"])
    assert load_run_config(None, ["reward.prm=Qwen/Qwen2.5-Math-PRM-7B"]).reward.prm == "Qwen/Qwen2.5-Math-PRM-7B"


def test_process_training_scores_steps_with_the_prm(tiny_setup, prm_dir, monkeypatch):
    from pipeline.grpo import trainer
    from pipeline.grpo.run_log import read_metrics

    calls = []
    original = PRMScorer.probabilities

    def spy(self, items):
        calls.append([len(s) for _, s in items])
        return original(self, items)

    monkeypatch.setattr(PRMScorer, "probabilities", spy)
    overrides, _ = tiny_setup
    cfg = load_run_config(None, [*overrides, "name=prm-train", "train.steps=2", "train.questions_per_step=3",
                                 "rollout.group_size=4", "rollout.max_new_tokens=12", "train.micro_batch_size=6",
                                 "train.save_every=0", "train.advantage=process", f"reward.prm={prm_dir}",
                                 "reward.weights={tests.helpers:digit_fraction: 1.0}"])
    run_dir = trainer.train(cfg)
    assert len(calls) == 2 and all(len(c) == 12 for c in calls)  # one batched call per step, every completion
    assert [r["step"] for r in read_metrics(run_dir)] == [1, 2]


def _processbench_file(tmp_path):
    steps_ok = ["Tom has 12 pens and buys 5: 12 + 5 = 17.", "He loses 3: 17 - 3 = 14.", "The answer is 14."]
    steps_bad = ["Tom has 12 pens and buys 5: 12 + 5 = 18.", "He loses 3: 18 - 3 = 15.", "The answer is 15."]
    rows = [{"dataset": "gsm8k", "question": "q1", "steps": steps_ok, "first_error_step": -1},
            {"dataset": "gsm8k", "question": "q2", "steps": steps_bad, "first_error_step": 0},
            {"dataset": "math", "question": "q3", "steps": steps_bad[1:], "first_error_step": -1},
            {"dataset": "math", "question": "q4", "steps": steps_ok, "first_error_step": None}]
    path = tmp_path / "pb.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_eval_prm_prints_the_table_for_each_scorer(tmp_path, prm_dir, capsys):
    from pipeline.cli import main

    path = _processbench_file(tmp_path)
    assert main(["eval-prm", str(path), "--scorer", "rules"]) == 0
    out = capsys.readouterr().out
    assert "rule checks" in out and "average F1" in out and "Qwen2.5-Math-PRM-7B 73.5" in out
    gsm = next(line for line in out.splitlines() if line.startswith("gsm8k"))
    assert gsm.split()[1:6] == ["1", "1", "100.0", "100.0", "100.0"]  # the slip found, no false alarm
    for scorer in ("prm", "both"):
        assert main(["eval-prm", str(path), "--scorer", scorer, f"reward.prm={prm_dir}",
                     "reward.prm_mix=weighted"]) == 0
        out = capsys.readouterr().out
        assert "3 solutions, 8 steps" in out and ("weighted" in out) == (scorer == "both")
    assert main(["eval-prm", str(path), "--scorer", "prm", "--per-subset", "1", f"reward.prm={prm_dir}"]) == 0
    assert "2 solutions" in capsys.readouterr().out


def test_eval_prm_bad_input_is_one_line(tmp_path, capsys):
    from pipeline.cli import main

    path = _processbench_file(tmp_path)
    assert main(["eval-prm", str(path), "--scorer", "prm"]) == 2
    assert "needs reward.prm" in capsys.readouterr().err
    assert main(["eval-prm", str(path), "--scorer", "judge"]) == 2
    assert "--scorer must be one of" in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"question": "q"}\n')
    assert main(["eval-prm", str(empty)]) == 2
    assert "no records" in capsys.readouterr().err
