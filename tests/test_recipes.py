"""What the GPU recipes (configs/*.yaml, docs/recipes.md) need from the pipeline, checked on CPU.

- `qwen_math` (Oat) and `verl_gsm8k` (verl) prompts, byte for byte;
- `reward.truncated_zero`: reward 0 for completions cut at max_new_tokens (Oat's Dr. GRPO);
- `train.mini_batches`: several optimizer steps per rollout batch, each mini-batch normalised as a
  batch of its own (verl's ppo_mini_batch_size), on the old log-probs of the rollout policy;
- `train.task=gsm8k+math`: a mixture of training sets (DeepSeekMath-RL trained on GSM8K + MATH).
"""

from __future__ import annotations

import json

import pytest
import torch

from pipeline.config import ConfigError, RewardConfig, load_run_config
from pipeline.data.problems import DataError, load_problems
from pipeline.grpo import trainer
from pipeline.grpo.advantages import outcome_advantages
from pipeline.grpo.batch import Batch, all_logprobs
from pipeline.grpo.components import TrainState, build_optimizer, build_policy
from pipeline.grpo.episodes import Episode, Packed, mini_batch_rows, pack
from pipeline.grpo.run_log import read_metrics
from pipeline.grpo.episode_rewards import reward_episodes
from pipeline.grpo.trainer import optimise
from pipeline.prompts import TEMPLATES, build_prompt


def _cfg(tiny_setup, *overrides):
    overrides_, _ = tiny_setup
    return load_run_config(None, [*overrides_, *overrides])

OAT_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."


def _oat_qwen_math(question: str) -> str:
    """sail-sg/understand-r1-zero train_zero_math.py::apply_qwen_math_template, as published."""
    return ("<|im_start|>system\n" + OAT_SYSTEM + "<|im_end|>\n<|im_start|>user\n" + question
            + "<|im_end|>\n<|im_start|>assistant\n")


def test_qwen_math_template_is_oats_string(tiny_setup):
    from transformers import AutoTokenizer

    _, root = tiny_setup
    tok = AutoTokenizer.from_pretrained(root / "tiny")  # a ChatML chat template, like Qwen's
    question = "What is $1+1$?"
    assert build_prompt(question, template="qwen_math", tokenizer=tok) == _oat_qwen_math(question)
    # the `math` template keeps the instruction in the user turn, with no system turn
    assert "system" not in build_prompt(question, template="math", tokenizer=tok)
    assert TEMPLATES["qwen_math"].style == "math"


def test_qwen_math_without_chat_template_keeps_the_instruction_first():
    text = build_prompt("Q?", template="qwen_math", tokenizer=None)
    assert text == OAT_SYSTEM + "\n\nQuestion: Q?\nAnswer:"


# --- reward.truncated_zero -------------------------------------------------------------------


def _episode(group: int, completion: str, finish: str, gold: str = "7", sample: int = 0) -> Episode:
    return Episode(problem_id=str(group), group=group, sample=sample, prompt="", completion=completion,
                   prompt_ids=[1], completion_ids=[2, 3], finish_reason=finish, gold=gold)


@pytest.mark.parametrize("truncated_zero", [False, True])
def test_truncated_zero_rewards_truncated_completions_with_zero(truncated_zero):
    cfg = RewardConfig(weights={"correct": 1.0, "format": 0.5}, style="gsm8k", truncated_zero=truncated_zero)
    eps = [_episode(0, "1 + 6 = 7\n#### 7", "length"), _episode(0, "1 + 6 = 7\n#### 7", "stop"),
           _episode(0, "#### 6", "length")]
    reward_episodes(eps, cfg)
    assert [e.rewards["correct"] for e in eps] == [1.0, 1.0, 0.0]  # components are logged as scored
    assert eps[1].reward == 1.5 and eps[2].reward == (0.0 if truncated_zero else 0.5)
    assert eps[0].reward == (0.0 if truncated_zero else 1.5)


def test_truncated_zero_is_refused_with_process_supervision():
    with pytest.raises(ConfigError, match="reward.truncated_zero is for outcome supervision"):
        load_run_config(None, ["reward.truncated_zero=true", "train.advantage=process"])


# --- train.mini_batches --------------------------------------------------------------------


def test_mini_batch_rows_keep_groups_whole():
    assert mini_batch_rows([0, 0, 1, 1, 2, 2, 3, 3], 2) == [[0, 1, 4, 5], [2, 3, 6, 7]]  # groups 0, 2 | 1, 3
    assert mini_batch_rows([0] * 3 + [1] * 3 + [2] * 3, 2) == [[0, 1, 2, 6, 7, 8], [3, 4, 5]]
    assert mini_batch_rows([0, 0, 1, 1], 1) == [[0, 1, 2, 3]]
    assert mini_batch_rows([0, 0, 1, 1], 3) == [[0, 1], [2, 3], []]


def test_mini_batches_do_not_depend_on_the_number_of_ranks():
    """8 groups split over 2 mini-batches: each of 2 ranks (4 contiguous groups each) splits its share
    into the same global mini-batches as one process does."""
    groups = [g for g in range(8) for _ in range(3)]
    one = [{groups[r] for r in rows} for rows in mini_batch_rows(groups, 2)]
    ranks = [groups[:12], groups[12:]]
    two = [set().union(*({share[r] for r in mini_batch_rows(share, 2)[j]} for share in ranks)) for j in range(2)]
    assert one == two == [{0, 2, 4, 6}, {1, 3, 5, 7}]


def test_mini_batches_must_split_each_ranks_share():
    with pytest.raises(ConfigError, match="train.mini_batches=3 must divide"):
        load_run_config(None, ["train.questions_per_step=8", "train.mini_batches=3"])
    with pytest.raises(ConfigError, match="train.mini_batches must be >= 1"):
        load_run_config(None, ["train.mini_batches=0"])


def _state(cfg):
    """The trainer's policy and reference with plain SGD: its step is linear in the gradient, so a
    mini-batch normalised by the wrong counts changes the result (AdamW would hide a scale)."""
    torch.manual_seed(0)
    policy, tok, ref = build_policy(cfg, None)
    opt = torch.optim.SGD([p for p in policy.parameters() if p.requires_grad], lr=cfg.train.lr)
    return TrainState(policy, ref, tok, None, opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0), None)


def _fixed_batch(cfg, state, groups: int = 4) -> Batch:
    """A rollout batch with random token ids and rewards, its old and reference log-probs
    computed before any update (as make_batch does when updates_per_step > 1)."""
    gen = torch.Generator().manual_seed(1)
    g = cfg.rollout.group_size
    eps = []
    for q in range(groups):
        for j in range(g):
            n_prompt, n_comp = (int(torch.randint(3, 7, (1,), generator=gen)),
                                int(torch.randint(2, 9, (1,), generator=gen)))
            ep = _episode(q, "", "stop", sample=j)
            ep.prompt_ids = torch.randint(5, 100, (n_prompt,), generator=gen).tolist()
            ep.completion_ids = torch.randint(5, 100, (n_comp,), generator=gen).tolist()
            ep.reward = float(torch.rand((), generator=gen))
            eps.append(ep)
    packed = pack(eps, state.tokenizer.pad_token_id)
    adv = outcome_advantages(torch.tensor([e.reward for e in eps]), g, cfg.train.adv_scale, cfg.train.adv_eps)
    with torch.no_grad():
        old = all_logprobs(cfg, state.policy, packed, eps)
        ref = all_logprobs(cfg, state.ref, packed, eps) if state.ref is not None else None
    return Batch(eps, packed, adv, old, ref, None, 0.0, {})


def _rows(batch: Batch, rows: list[int]) -> Batch:
    p = batch.packed
    packed = Packed(p.input_ids[rows], p.attention_mask[rows], p.position_ids[rows], p.completion_mask[rows],
                    p.prompt_width)
    cut = lambda t: None if t is None else t[rows]  # noqa: E731
    return Batch([batch.episodes[i] for i in rows], packed, batch.advantages[rows], cut(batch.old_logp),
                 cut(batch.ref_logp), None, 0.0, {})


def _weights(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "dr_grpo"])
def test_mini_batches_are_sequential_steps_each_normalised_alone(tiny_setup, tmp_path, loss_type):
    """mini_batches=2 on a batch == two optimizer steps, one per mini-batch (groups 0, 2 then 1, 3),
    each normalised as a whole batch (verl: the loss of a ppo_mini_batch_size mini-batch is its own
    token/row mean)."""
    common = [f"train.loss_type={loss_type}", "train.beta=0.04", "train.lr=0.5", "train.micro_batch_size=3",
              "train.max_grad_norm=0",  # clipping would hide a wrongly scaled gradient
              "train.questions_per_step=4", "rollout.group_size=4", "device=cpu"]
    split = _cfg(tiny_setup, *common, "train.mini_batches=2")
    whole = _cfg(tiny_setup, *common, "train.mini_batches=1")
    a = _state(split)
    batch = _fixed_batch(split, a)
    optimise(split, a, batch, 1, tmp_path, {})
    b = _state(whole)
    for half in ([*range(0, 4), *range(8, 12)], [*range(4, 8), *range(12, 16)]):
        optimise(whole, b, _rows(batch, half), 1, tmp_path, {})
    for x, y in zip(_weights(a.policy), _weights(b.policy), strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=1e-6)
    assert a.scheduler.last_epoch == b.scheduler.last_epoch == 2
    c = _state(whole)  # one step on the whole batch is a different update
    optimise(whole, c, batch, 1, tmp_path, {})
    assert any(not torch.allclose(x, y) for x, y in zip(_weights(a.policy), _weights(c.policy)))


def test_mini_batches_train_on_old_logprobs_from_before_the_first_step(tiny_setup):
    """End to end: with 2 mini-batches the second one's ratios move away from 1 (its old log-probs
    are the rollout policy's, computed once); with one mini-batch and mu = 1 they are exactly 1."""
    from tests.test_trainer import run_cfg

    split = trainer.train(run_cfg(tiny_setup, "mini2", "train.steps=1", "train.questions_per_step=4",
                                  "train.mini_batches=2", "train.lr=5e-2"))
    one = trainer.train(run_cfg(tiny_setup, "mini1", "train.steps=1", "train.questions_per_step=4",
                                "train.lr=5e-2"))
    moved, still = read_metrics(split)[0], read_metrics(one)[0]
    assert still["ratio_min"] == still["ratio_max"] == 1.0
    assert moved["ratio_max"] - moved["ratio_min"] > 1e-4


def test_schedule_counts_optimizer_steps(tiny_setup):
    cfg = _cfg(tiny_setup, "train.steps=3", "train.num_iterations=2", "train.mini_batches=2",
               "train.questions_per_step=4", "train.warmup_steps=12", "train.lr=1.0")
    assert cfg.train.updates_per_step == 4
    opt, sched = build_optimizer(cfg, torch.nn.Linear(2, 2))
    for _ in range(11):
        opt.step()
        sched.step()
    assert sched.get_last_lr()[0] == pytest.approx(1.0)  # warmup spans 12 optimizer steps, 3 x 4 in all


# --- gsm8k+math mixtures ----------------------------------------------------------------------


def test_mixture_interleaves_in_proportion(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("".join(json.dumps({"id": f"a{i}", "question": "q", "answer": "1"}) + "\n" for i in range(3)))
    b.write_text("".join(json.dumps({"id": f"b{i}", "question": "q", "answer": "1"}) + "\n" for i in range(9)))
    mixed = load_problems(str(tmp_path), f"{a}+{b}", "train")
    ids = [p["id"] for p in mixed]
    assert sorted(ids) == sorted([f"a{i}" for i in range(3)] + [f"b{i}" for i in range(9)])
    assert [i for i in ids if i.startswith("a")] == ["a0", "a1", "a2"]  # each part keeps its order
    for n in (4, 8, 12):  # every prefix holds a quarter of a's
        assert sum(i.startswith("a") for i in ids[:n]) == n // 4
    assert [p["id"] for p in load_problems(str(tmp_path), f"{a}+{b}", "train", limit=4)] == ids[:4]


def test_mixture_names_a_missing_part(tmp_path):
    a = tmp_path / "a.jsonl"
    a.write_text(json.dumps({"id": "a0", "question": "q", "answer": "1"}) + "\n")
    with pytest.raises(DataError, match="nope/train.jsonl"):
        load_problems(str(tmp_path), f"{a}+nope", "train")


def test_verl_gsm8k_prompt_is_verls_user_turn():
    # examples/data_preprocess/gsm8k.py: question + " " + instruction_following
    text = build_prompt("Q?", template="verl_gsm8k", tokenizer=None)
    assert text == "Question: Q? Let's think step by step and output the final answer after \"####\".\nAnswer:"
