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


def _dry_run(*args: str) -> str:
    return subprocess.run(["make", "-n", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout


def test_gpu_targets_pass_device_and_vllm_through():
    smoke = next(ln for ln in _dry_run("gpu-smoke", "device=cpu").splitlines() if "gpu_smoke.py" in ln)
    assert "--device cpu" in smoke and smoke.startswith(f"PYTHONPATH={ROOT} ")  # the checkout, not installed
    assert "--device auto" in _dry_run("gpu-smoke")
    assert "--download-wheels 312" in _dry_run("gpu-wheels")
    deps = _dry_run("check-gpu-deps", "VLLM=vllm==0.33.*")
    assert "tests/check_gpu_deps.py --vllm 'vllm==0.33.*'" in deps and "pip>=25.1" in deps


def test_gpu_probe_and_check_targets():
    probe = next(ln for ln in _dry_run("gpu-probe", "device=cpu").splitlines() if "gpu_probe.py" in ln)
    assert probe.startswith(f"PYTHONPATH={ROOT} ") and "--device cpu" in probe and "--size auto" in probe
    assert "--device auto" in _dry_run("gpu-probe")
    assert "--size small" in _dry_run("gpu-probe", "device=cuda", "size=small")
    check = _dry_run("gpu-check", "device=cpu")
    assert "bash benchmarks/gpu_check.sh cpu" in check
