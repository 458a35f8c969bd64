"""The Makefile passes config overrides through: dotted keys and the config's top-level keys
(name, seed, ...) reach the command; make's own variables (NPROC, VENV, CONFIG) do not."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_make_passes_config_overrides_through():
    out = subprocess.run(["make", "-n", "train-dist", "NPROC=2", "VENV=.venv", "name=x", "seed=3",
                          "train.steps=2", "stages=[train]"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    line = next(line for line in out.splitlines() if "torch.distributed.run" in line)
    for override in ("name=x", "seed=3", "train.steps=2", "stages=[train]"):
        assert override in line.split(), (override, line)
    assert "--nproc_per_node 2" in line and "NPROC=" not in line and "VENV=" not in line
