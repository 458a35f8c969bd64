"""The TRL adapter: unit checks of the calling convention, then TRL 1.16's real GRPOTrainer
running two steps on the tiny local model with our reward functions, its logged rewards compared
with the rewards library on the very completions it logged."""

from __future__ import annotations

import math
import pickle

import pytest

from rewards import REWARDS, check, format_reward
from rewards.integrations.gold import gold_answer
from rewards.integrations.trl import (accuracy_reward, format_reward as trl_format, make_accuracy_reward,
                                      make_format_reward, steps_reward)

GSM_SOLUTION = "She has 3 + 4 = <<3+4=7>>7 apples.\nThen 7 * 2 = <<7*2=14>>14.\n#### 14"
TEXTS = [GSM_SOLUTION, "The answer is \\boxed{\\frac{1}{2}}.", "Step 1: 2 + 2 = 5\nSo #### 5", "no idea"]


def _chat(text):
    return [{"role": "assistant", "content": text}]


def test_plain_and_conversational_completions_score_the_same():
    golds = ["14", "0.5", "4", "3"]
    plain = accuracy_reward(prompts=["q"] * 4, completions=TEXTS, answer=golds)
    assert plain == [check(t, g).score for t, g in zip(TEXTS, golds)] == [1.0, 1.0, 0.0, 0.0]
    assert accuracy_reward(prompts=["q"] * 4, completions=[_chat(t) for t in TEXTS], answer=golds) == plain
    # tool-use turns before the final reply, and content given as parts
    turns = [[{"role": "assistant", "content": "let me compute"}, {"role": "tool", "content": "#### 99"},
              {"role": "assistant", "content": [{"type": "text", "text": t}]}] for t in TEXTS]
    assert accuracy_reward(prompts=["q"] * 4, completions=turns, answer=golds) == plain


def test_gold_column_forms_and_not_applicable_rows():
    completions = [_chat(GSM_SOLUTION), _chat("#### 14"), _chat("#### 14")]
    # GSM8K's raw `answer` column is a whole solution; an empty gold means "not applicable"
    assert accuracy_reward(prompts=[], completions=completions, answer=[GSM_SOLUTION, None, ""]) == [1.0, None, None]
    # MATH's `solution` column (no `answer` column): the boxed answer is the gold
    boxed = [_chat("so \\boxed{1/2}")]
    assert accuracy_reward(prompts=[], completions=boxed, solution=["Thus $\\boxed{\\frac{1}{2}}$."]) == [1.0]
    custom = make_accuracy_reward(gold_column="target", style="math", name="acc_math")
    assert custom(prompts=[], completions=boxed + [_chat("The answer is 0.5")], target=["0.5", "0.5"]) == [1.0, 1.0]
    # an answer statement (here ####) is read in every style; with none, math style reads no
    # plain number from the last sentence
    assert custom(prompts=[], completions=[_chat("#### 0.5"), _chat("So it is 0.5.")], target=["0.5"] * 2) == [1.0, 0.0]
    with pytest.raises(KeyError, match="column 'target'.*\\['question'\\].*gold_column"):
        custom(prompts=[], completions=boxed, question=["q"], trainer_state=None, log_extra=None)
    with pytest.raises(ValueError, match="2 values for 1 completions"):
        custom(prompts=[], completions=boxed, target=["1", "2"])


def test_accuracy_logs_pred_and_reason_columns():
    logged = {}
    scores = accuracy_reward(prompts=[], completions=["#### 14", "#### 15", "none"], answer=["14", "14", None],
                             log_extra=lambda column, values: logged.__setitem__(column, values))
    assert scores == [1.0, 0.0, None]
    assert logged == {"accuracy_pred": ["14", "15", None], "accuracy_reason": ["", "not equal", "no gold answer"]}


def test_format_and_steps_follow_the_library():
    assert trl_format(prompts=[], completions=[_chat(t) for t in TEXTS]) == [format_reward(t) for t in TEXTS]
    assert make_format_reward(style="math")(prompts=[], completions=TEXTS) == [format_reward(t, "math") for t in TEXTS]
    golds = ["14", "1/2", "4", ""]
    got = steps_reward(prompts=[], completions=TEXTS, answer=golds)
    for text, gold, value in zip(TEXTS, golds, got):
        assert value == (REWARDS["steps"](text, gold) if gold else None), text
    assert got[0] == 1.0 and got[1] == 1.0 and got[2] == 0.0 and got[3] is None


def test_names_and_pickling_as_trl_uses_them():
    from trl.trainer.utils import get_callable_name

    names = [get_callable_name(f) for f in (accuracy_reward, trl_format, steps_reward)]
    assert names == ["accuracy", "format", "steps"]
    copy = pickle.loads(pickle.dumps(accuracy_reward))
    assert copy(prompts=[], completions=["#### 3"], answer=["3"]) == [1.0]
    with pytest.raises(ValueError, match="unknown style"):
        make_accuracy_reward(style="latex")


# --- TRL's real trainer ------------------------------------------------------------------------

ROWS = [("How many apples?", "2"), ("How many pears?", None), ("How many plums?", "so 1 + 1 = 2\n#### 2"),
        ("How many figs?", "12")]


def _generation_kwargs(tok):
    """Steer the untrained model into short arithmetic-looking text: only the tokens 1 2 + = ####
    and EOS, biased towards "1+1=2"-like runs. Sampling stays random; without this every
    completion is noise that scores 0 and has no checkable step, which would test little."""
    v = tok.get_vocab()
    keep = {v[t] for t in ("1", "2", "+", "=", "####")} | {tok.eos_token_id}
    one, two, plus, eq, hashes = (v[t] for t in ("1", "2", "+", "=", "####"))
    bias = {(one, plus): 4.0, (plus, one): 4.0, (plus, two): 2.0, (one, eq): 2.0, (two, eq): 3.0,
            (eq, two): 4.0, (eq, one): 2.0, (two, tok.eos_token_id): 3.0, (two, hashes): 1.0,
            (hashes, two): 4.0, (one, plus, one, eq): 6.0}
    return {"suppress_tokens": [i for i in range(len(tok)) if i not in keep], "sequence_bias": bias}


def _nan_is_none(x):
    return None if isinstance(x, float) and math.isnan(x) else x


@pytest.mark.parametrize("conversational", [True, False])
def test_grpo_trainer_logs_our_rewards(tiny_setup, tmp_path, conversational):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    _, root = tiny_setup
    tok = AutoTokenizer.from_pretrained(root / "tiny")
    model = AutoModelForCausalLM.from_pretrained(root / "tiny")
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": q}] if conversational else q, "answer": a}
                            for q, a in ROWS])
    gold_of = dict(ROWS)
    seen = []  # per step: TRL's own record of prompts, completions, rewards and extra columns

    class Snapshot(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            logs = trainer._logs  # TRL 1.16's buffer for the completions table, one generation batch
            seen.append((list(logs["prompt"]), list(logs["completion"]),
                         {k: list(v) for k, v in logs["rewards"].items()},
                         {k: list(v) for k, v in logs["extra"].items()}))

    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=16, num_generations=4,
                      max_completion_length=10, max_steps=2, learning_rate=1e-3, logging_steps=1, report_to="none",
                      use_cpu=True, save_strategy="no", seed=0, disable_tqdm=True,
                      generation_kwargs=_generation_kwargs(tok))
    trainer = GRPOTrainer(model=model, processing_class=tok, reward_funcs=[accuracy_reward, trl_format, steps_reward],
                          args=args, train_dataset=ds, callbacks=[Snapshot()])
    trainer.train()

    assert len(seen) == 2
    all_acc, all_steps = [], []
    for step, (prompts, completions, logged, extra) in enumerate(seen):
        assert len(completions) == 16 and set(logged) == {"accuracy", "format", "steps"}
        texts = [c[0]["content"] if conversational else c for c in completions]
        questions = [p[0]["content"] if conversational else p for p in prompts]
        golds = [gold_answer(gold_of[q]) for q in questions]
        want_acc = [None if g is None else check(t, g).score for t, g in zip(texts, golds)]
        want_steps = [None if g is None else REWARDS["steps"](t, g) for t, g in zip(texts, golds)]
        assert [_nan_is_none(x) for x in logged["accuracy"]] == want_acc
        assert logged["format"] == [format_reward(t) for t in texts]
        assert [_nan_is_none(x) for x in logged["steps"]] == want_steps
        assert extra["accuracy_pred"] == [None if g is None else check(t, g).pred for t, g in zip(texts, golds)]
        scored = [a for a in want_acc if a is not None]
        history = trainer.state.log_history[step]
        assert history["rewards/accuracy/mean"] == pytest.approx(sum(scored) / len(scored))
        all_acc += want_acc
        all_steps += want_steps
    # the run exercised every outcome: right, wrong, no gold
    assert {1.0, 0.0, None} <= set(all_acc)
    assert None in all_steps and any(s is not None for s in all_steps)
