"""`mathrl run` (what `make train` calls): stages in order, a report, and the result line last."""

import re

import pytest
import torch

from pipeline.stages import run as run_stage
from pipeline.config import ConfigError, load_run_config


def test_run_prints_result_line_last_and_writes_report(tiny_setup, capsys):
    overrides, root = tiny_setup
    cfg = load_run_config(None, [*overrides, "name=run-all", "stages=[sft, train, eval]",
                                 f"sft.init={root}/tiny", f"sft.output={root}/run-all-sft",
                                 f"model.name_or_path={root}/run-all-sft", "sft.steps=3", "sft.eval_limit=0",
                                 "train.steps=1", "train.questions_per_step=2", "rollout.group_size=2",
                                 "rollout.max_new_tokens=8", "eval.limit=3", "eval.max_new_tokens=8",
                                 "eval.n_samples=2", "eval.temperature=1.0", "eval.ks=[1, 2]",
                                 "eval.extra_splits=[train]", "threads=1"])
    threads = torch.get_num_threads()
    try:
        assert run_stage.main(cfg) == 0
    finally:
        torch.set_num_threads(threads)  # the config's threads=1 must not leak into later tests
    lines = capsys.readouterr().out.strip().splitlines()
    # The original fields first (a parser of the old line still works), the new ones before minutes.
    acc = r"[01]\.\d{4}"
    assert re.fullmatch(rf"result: task=gsm-synth before={acc} after={acc} greedy_before={acc} greedy_after={acc} "
                        rf"train_before={acc} train_after={acc} train_greedy_before={acc} train_greedy_after={acc} "
                        r"minutes=\d+\.\d", lines[-1])
    assert any(line.startswith("run: torch threads 1 (config threads=1)") for line in lines)
    report = (root / "runs" / "run-all" / "report.md").read_text()
    assert "mean accuracy of 2 samples at temperature 1" in report and "greedy accuracy" in report
    assert "greedy accuracy, split `train`" in report
    for sub in ("before", "after", "greedy_before", "greedy_after", "train_before", "train_greedy_after"):
        assert (root / "runs" / "run-all" / "eval" / sub / "summary.json").is_file()


def test_unknown_stage_is_refused(tiny_setup):
    with pytest.raises(ConfigError, match=r"stages\[1\]: 'deploy' is not allowed"):
        load_run_config(None, [*tiny_setup[0], "stages=[train, deploy]"])


def test_run_closes_every_engine_it_builds(tiny_setup, monkeypatch):
    """`mathrl run` builds an engine for the GRPO stage and one per before/after eval (on a GPU box,
    vLLM engines holding GPU memory): each is closed before the next stage, and no worker process
    outlives the run. With the CPU default's pipelined settings every engine is an hf_process worker."""
    import multiprocessing

    import evals.evaluate
    from pipeline.grpo import trainer
    from pipeline.rollout import factory

    built, live_at_build = [], []
    earlier = set(multiprocessing.active_children())  # other tests' processes are not this run's

    def recording(*args, **kwargs):
        live_at_build.append(sum(not getattr(e, "closed", False) for e in built))
        engine = factory.build_engine(*args, **kwargs)
        close = engine.close

        def closing():
            close()
            engine.closed = True
        engine.close = closing
        built.append(engine)
        return engine

    monkeypatch.setattr(trainer, "build_engine", recording)
    monkeypatch.setattr(evals.evaluate, "build_engine", recording)
    overrides, _ = tiny_setup
    cfg = load_run_config(None, [*overrides, "name=run-engines", "stages=[train, eval]", "train.steps=2",
                                 "train.questions_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=8",
                                 "train.async_staleness=1", "rollout.engine=hf_process", "rollout.tis_cap=2",
                                 "rollout.worker_threads=1", "rollout.decode=loop", "eval.limit=3",
                                 "eval.max_new_tokens=8", "eval.n_samples=2", "eval.temperature=1.0", "eval.ks=[1, 2]",
                                 "threads=1"])
    threads = torch.get_num_threads()
    try:
        assert run_stage.main(cfg) == 0
    finally:
        torch.set_num_threads(threads)
    assert len(built) == 5  # the trainer's, then sampled and greedy evals before and after
    assert all(getattr(e, "closed", False) for e in built)
    assert live_at_build == [0, 0, 0, 0, 0]  # no engine was open when the next one was built
    assert not [p for p in multiprocessing.active_children() if p not in earlier and p.is_alive()]
