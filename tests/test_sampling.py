"""Pass-rate sampling (pipeline/grpo/sampling.py): solved questions sit out, unsolved ones come
back less often, a resumed sampler continues the same stream, and the config check."""

from __future__ import annotations

import pytest

from pipeline.config import ConfigError, load_run_config
from pipeline.grpo import trainer
from pipeline.grpo.components import QuestionSampler
from pipeline.grpo.checkpoint import find_resume, load_trainer_state
from pipeline.grpo.episodes import Episode
from pipeline.grpo.run_log import read_metrics
from pipeline.grpo.sampling import PassRateSampler, build_sampler
from tests.test_trainer import run_cfg

PROBLEMS = [{"id": f"q{i}", "question": f"{i}?", "answer": str(i)} for i in range(40)]


def _group(pid: str, correct: list[bool]) -> list[Episode]:
    return [Episode(problem_id=pid, group=0, sample=j, prompt="", completion="", prompt_ids=[], completion_ids=[],
                    finish_reason="stop", gold="", rewards={"correct": float(c)}) for j, c in enumerate(correct)]


def _epoch(sampler) -> list[str]:
    return [p["id"] for p in sampler.take(len(PROBLEMS) - 0)]


def test_all_correct_questions_sit_out_for_retire_epochs():
    s = PassRateSampler(PROBLEMS, seed=3, retire_epochs=1)
    first = _epoch(s)
    assert first == [p["id"] for p in QuestionSampler(PROBLEMS, 3).take(len(PROBLEMS))]  # nothing seen yet
    solved = set(first[:10])
    s.observe([_group(pid, [True] * 4) for pid in solved] + [_group(pid, [True, False]) for pid in first[10:]])
    assert s.stats()["sampling/retired"] == 10
    nxt = s.take(30)  # epoch 1 holds only the 30 that were not solved
    assert not solved & {p["id"] for p in nxt}
    assert s.stats()["sampling/skipped"] == 10
    later = {p["id"] for p in s.take(40)}  # epoch 2: retired for one epoch only
    assert solved <= later


def test_unsolved_questions_are_drawn_less():
    s = PassRateSampler(PROBLEMS, seed=0, retire_epochs=1, unsolved_keep=0.5)
    first = _epoch(s)
    s.observe([_group(pid, [False] * 4) for pid in first[:20]] + [_group(pid, [True, False]) for pid in first[20:]])
    drawn = [p["id"] for p in s.take(30)]
    unsolved_drawn = [pid for pid in drawn if pid in set(first[:20])]
    assert set(first[20:]) <= set(drawn)  # every question with a signal is drawn
    assert 3 <= len(set(unsolved_drawn)) <= 17  # about half of the 20 unsolved, with 30 draws


def test_everything_retired_still_draws():
    s = PassRateSampler(PROBLEMS[:5], seed=0, retire_epochs=10)
    first = _epoch(s)[:5]
    s.observe([_group(pid, [True] * 2) for pid in first])
    assert len(s.take(7)) == 7


def test_resumed_sampler_continues_the_same_stream():
    a = PassRateSampler(PROBLEMS, seed=1)
    first = _epoch(a)
    a.observe([_group(pid, [i % 3 == 0] * 4) for i, pid in enumerate(first)])
    a.take(13)
    b = PassRateSampler(PROBLEMS, seed=1)
    b.load_state_dict(a.state_dict())
    assert b.drawn == a.drawn
    assert [p["id"] for p in b.take(50)] == [p["id"] for p in a.take(50)]


def test_config_selects_and_checks(tiny_setup):
    cfg = run_cfg(tiny_setup, "s", "train.sampling=pass_rate", "train.unsolved_keep=0.25")
    assert isinstance(build_sampler(cfg, PROBLEMS), PassRateSampler)
    assert type(build_sampler(run_cfg(tiny_setup, "s"), PROBLEMS)) is QuestionSampler  # the default
    overrides, _ = tiny_setup
    with pytest.raises(ConfigError, match="unsolved_keep"):
        load_run_config(None, [*overrides, "train.unsolved_keep=0"])
    with pytest.raises(ConfigError, match="sampling"):
        load_run_config(None, [*overrides, "train.sampling=hardest"])


@pytest.mark.parametrize("sampling", ["uniform", "pass_rate"])
def test_question_pool_draws_only_its_first_questions(tiny_setup, sampling):
    """``train.question_pool=8`` over three epochs: every draw is one of the first 8 problems, and
    each of them comes back (so pass_rate has questions it saw before to act on)."""
    cfg = run_cfg(tiny_setup, "s", f"train.sampling={sampling}", "train.question_pool=8")
    sampler = build_sampler(cfg, PROBLEMS)
    drawn = [p["id"] for p in sampler.take(24)]
    assert set(drawn) == {f"q{i}" for i in range(8)} and len(drawn) == 24
    with pytest.raises(ConfigError, match="question_pool=41 but .* has only 40 training questions"):
        build_sampler(run_cfg(tiny_setup, "s", "train.question_pool=41"), PROBLEMS)


def test_a_run_with_pass_rate_sampling_logs_it(tiny_setup):
    run_dir = trainer.train(run_cfg(tiny_setup, "passrate", "train.steps=2", "train.sampling=pass_rate"))
    rows = read_metrics(run_dir)
    assert all("sampling/retired" in r and "sampling/skipped" in r for r in rows)


def test_max_questions_stops_the_run_and_a_resume_trains_no_further(tiny_setup):
    """``train.max_questions=5`` with 3 questions a step: the run stops after step 2, the first at
    which 5 were drawn, with its final weights and a checkpoint; resumed, it trains nothing more."""
    cfg = run_cfg(tiny_setup, "budget", "train.steps=5", "train.max_questions=5")
    run_dir = trainer.train(cfg)
    rows = read_metrics(run_dir)
    assert [r["step"] for r in rows] == [1, 2] and [r["sampling/drawn"] for r in rows] == [3, 6]
    assert (run_dir / "final" / "config.json").is_file()
    state = load_trainer_state(find_resume(run_dir, "auto"))
    assert state["step"] == 2
    trainer.train(cfg)  # resume=auto: the budget is spent
    assert [r["step"] for r in read_metrics(run_dir)] == [1, 2]
