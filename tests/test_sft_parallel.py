"""Data-parallel SFT (``sft.processes`` > 1, pipeline/sft_parallel.py): real helper processes on the
session's tiny model. The team's weights are those of one process doing every micro-batch (float
tolerance), the same bits on every run, and a helper that fails or is killed ends the run with one
line within seconds instead of a hang."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import torch

from pipeline import faults, sft
from pipeline.data.problems import load_problems
from pipeline.models import load_policy
from pipeline.sft_parallel import TeamError, deal
from tests.helpers import process_running, sft_cfg


def test_deal_gives_every_micro_batch_once_balancing_padded_tokens():
    lengths = [10, 10, 10, 10, 30, 30, 5]
    cuts = [[6], [0, 1, 2, 3], [4], [5]]  # padded tokens 5, 40, 30, 30
    shares = deal(cuts, lengths, 2)
    assert shares == [[[0, 1, 2, 3], [6]], [[4], [5]]]  # 45 vs 60: largest first, to the lighter rank
    assert sorted(sum(shares, []), key=lambda rows: rows[0]) == sorted(cuts, key=lambda rows: rows[0])
    assert deal(cuts, lengths, 2) == shares  # deterministic
    assert deal([[0]], lengths, 3) == [[[0]], [], []]  # more processes than micro-batches: some idle


def _train(tiny_setup, tmp_path, *overrides):
    cfg = sft_cfg(tiny_setup, tmp_path, "sft.steps=6", "sft.batch_size=12", "sft.micro_batch_tokens=300",
                  *overrides)
    torch.manual_seed(cfg.seed)
    model, tok = load_policy(cfg.sft.init)
    examples = sft.encode(load_problems(cfg.data.prepared_dir, "gsm-synth", "train"), tok, cfg)
    losses = sft.train(model, tok, examples, cfg, progress=False)
    return losses, {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_two_processes_train_the_weights_one_process_would(tiny_setup, tmp_path):
    one_losses, one = _train(tiny_setup, tmp_path)
    two_losses, two = _train(tiny_setup, tmp_path, "sft.processes=2")
    again_losses, again = _train(tiny_setup, tmp_path, "sft.processes=2")
    assert two_losses == pytest.approx(one_losses, rel=1e-4) and len(two_losses) == 6
    start, _ = load_policy(sft_cfg(tiny_setup, tmp_path).sft.init)
    moved = 0
    for k, v in one.items():
        torch.testing.assert_close(two[k], v, rtol=1e-3, atol=1e-5)
        moved += not torch.equal(v, start.state_dict()[k])
    assert moved > 0  # the steps changed the weights, so the comparison says something
    assert again_losses == two_losses and all(torch.equal(again[k], v) for k, v in two.items())


def test_a_helper_that_raises_ends_the_run_with_its_error(tiny_setup, tmp_path, monkeypatch):
    monkeypatch.setenv(faults.SFT_HELPER_FAULT, "raise:3")
    with pytest.raises(TeamError, match=r"mathrl-sft-helper-1 failed: RuntimeError: injected fault at step 3"):
        _train(tiny_setup, tmp_path, "sft.processes=2")
    assert not [p for p in multiprocessing.active_children() if p.name.startswith("mathrl-sft-helper")]


def test_a_killed_helper_ends_the_run_within_seconds(tiny_setup, tmp_path):
    killed = []

    def kill_the_helper():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            helpers = [p for p in multiprocessing.active_children() if p.name == "mathrl-sft-helper-1"]
            if helpers:
                time.sleep(5.0)  # well into training (a few steps take well under a second each)
                os.kill(helpers[0].pid, signal.SIGKILL)
                killed.append(time.monotonic())
                return
            time.sleep(0.05)

    threading.Thread(target=kill_the_helper, daemon=True).start()
    with pytest.raises(TeamError, match=r"mathrl-sft-helper-1 exited with code -9"):
        _train(tiny_setup, tmp_path, "sft.processes=2", "sft.steps=100000")
    assert killed and time.monotonic() - killed[0] < 10.0


def test_processes_need_micro_batches_and_a_cpu(tiny_setup, tmp_path):
    from pipeline.config.checks import ConfigError

    with pytest.raises(ConfigError, match="set sft.micro_batch_tokens > 0"):
        sft_cfg(tiny_setup, tmp_path, "sft.processes=2")
    with pytest.raises(ConfigError, match="sft.processes must be >= 1"):
        sft_cfg(tiny_setup, tmp_path, "sft.processes=0", "sft.micro_batch_tokens=300")


KILLED_TRAINER = """
import json, multiprocessing, os, signal, sys, threading, time
from pipeline import sft
from pipeline.config import load_run_config
from pipeline.data.problems import load_problems
from pipeline.models import load_policy

cfg = load_run_config(None, json.loads(sys.argv[1]))
model, tok = load_policy(cfg.sft.init)
examples = sft.encode(load_problems(cfg.data.prepared_dir, "gsm-synth", "train"), tok, cfg)

def kill_me():
    while not multiprocessing.active_children():
        time.sleep(0.05)
    time.sleep(5.0)  # the helper is training
    print(*[p.pid for p in multiprocessing.active_children()], flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

threading.Thread(target=kill_me, daemon=True).start()
sft.train(model, tok, examples, cfg, progress=False)
"""


def test_the_helper_goes_when_the_trainer_is_killed(tiny_setup, tmp_path):
    overrides, root = tiny_setup
    cfg = [*overrides, f"sft.init={root}/tiny", f"sft.output={tmp_path}/sft", "device=cpu", "sft.batch_size=12",
           "sft.steps=100000", "sft.micro_batch_tokens=300", "sft.processes=2"]
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with out.open("w") as o, err.open("w") as e:  # files, not pipes: the helper inherits them
        proc = subprocess.Popen([sys.executable, "-c", KILLED_TRAINER, json.dumps(cfg)], stdout=o, stderr=e)
        assert proc.wait(timeout=180) == -signal.SIGKILL, err.read_text()[-2000:]
    helpers = [int(p) for p in out.read_text().split()]
    assert len(helpers) == 1
    deadline = time.monotonic() + 15
    while process_running(helpers[0]) and time.monotonic() < deadline:
        time.sleep(0.2)
    if process_running(helpers[0]):
        os.kill(helpers[0], signal.SIGKILL)
        pytest.fail("the SFT helper still ran 15 s after the trainer died")
