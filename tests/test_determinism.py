"""Same config, same numbers: `mathrl run` (SFT + GRPO + eval) twice, in separate processes started
with different OpenMP / MKL thread settings in the environment, gives identical metrics, samples,
weights and result line. What must match is the config (``threads``, ``cpu_isa``, ``seed``); the
environment's thread variables do not matter because ``threads`` overrides them."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from pipeline.grpo.run_log import read_metrics

ENVS = [{"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}, {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "3"}]


def _args(setup, out: Path) -> list[str]:
    overrides, root = setup
    return [*overrides, f"output_dir={out}", "name=det", "stages=[sft, train, eval]", "threads=1",
            "deterministic=true", "cpu_isa=avx2", f"sft.init={root}/tiny", f"sft.output={out}/sft",
            f"model.name_or_path={out}/sft", "sft.steps=6", "sft.eval_limit=0", "train.steps=3",
            "train.questions_per_step=3", "rollout.group_size=4", "rollout.max_new_tokens=12",
            "train.micro_batch_size=6", "train.lr=1e-3", "train.eval_every=3", "train.eval_on_start=true",
            "train.eval_limit=4", "eval.limit=6", "eval.n_samples=2", "eval.temperature=1.0", "eval.ks=[1, 2]",
            "eval.max_new_tokens=12"]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _comparable(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith("time/") and k != "tokens_per_s"}


def test_same_config_same_numbers_whatever_the_thread_environment(tiny_setup, tmp_path):
    outs = [tmp_path / f"run{i}" for i in range(len(ENVS))]
    procs = []
    for out, extra in zip(outs, ENVS):
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
        procs.append(subprocess.Popen([sys.executable, "-m", "pipeline", "run", *_args(tiny_setup, out)],
                                      env={**env, **extra}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    logs = [p.communicate(timeout=900)[0] for p in procs]
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-3000:]
        for stage in ("sft", "train"):
            assert f"{stage}: torch threads 1 (config threads=1), deterministic algorithms on, CPU kernels AVX2" in log
    results = [next(line for line in log.splitlines() if line.startswith("result: ")) for log in logs]
    assert results[0].rsplit(" minutes=", 1)[0] == results[1].rsplit(" minutes=", 1)[0]
    runs = [out / "det" for out in outs]
    rows = [[_comparable(r) for r in read_metrics(run)] for run in runs]
    assert [r["step"] for r in rows[0]] == [0, 1, 2, 3] and "entropy" in rows[0][1]
    assert rows[0] == rows[1]
    assert (runs[0] / "samples.jsonl").read_text() == (runs[1] / "samples.jsonl").read_text()
    for model in ("sft/model.safetensors", "det/final/model.safetensors"):
        assert _sha(outs[0] / model) == _sha(outs[1] / model), model
    summary = [json.loads((run / "eval" / "after" / "summary.json").read_text()) for run in runs]
    assert summary[0]["accuracy"] == summary[1]["accuracy"] and summary[0]["model"].endswith("final")


def _python(code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("ATEN_CPU_CAPABILITY", "MKL_CBWR")}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_cpu_kernels_are_pinned_before_torch_loads():
    pinned = _python("from pipeline import determinism; determinism.pin_cpu_kernels('avx2'); import os, torch; "
                     "print(torch.backends.cpu.get_cpu_capability(), os.environ['MKL_CBWR'])")
    assert pinned.stdout.split() == ["AVX2", "AVX2"], pinned.stderr[-2000:]
    portable = _python("from pipeline import determinism; determinism.pin_cpu_kernels('portable'); import os, torch; "
                       "print(torch.backends.cpu.get_cpu_capability(), os.environ['MKL_CBWR'])")
    assert portable.stdout.split() == ["AVX2", "COMPATIBLE"], portable.stderr[-2000:]  # MKL's cross-vendor branch
    late = _python("import torch; from pipeline import determinism\n"
                   "native = torch.backends.cpu.get_cpu_capability()\n"
                   "try:\n    determinism.pin_cpu_kernels('default'); print('pinned', native)\n"
                   "except RuntimeError as e:\n    print('refused', e)")
    # torch was loaded with the CPU's own kernels (never the plain 'default' ones on x86-64 with AVX2):
    # too late to pin, and it says so instead of silently running other kernels than the config asks
    assert late.stdout.startswith("refused cpu_isa=default: torch was imported before"), late.stdout + late.stderr
