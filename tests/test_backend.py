"""Device and torchrun backend from the config, with ``torch.cuda`` mocked so a CPU box checks
the GPU branches: gloo for device=cpu even where GPUs exist, NCCL for cuda with each rank on GPU
LOCAL_RANK, a one-line error when a node has fewer GPUs than ranks, and ``device=auto`` saying
loudly that it fell back to the CPU. The real gloo runs are tests/test_distributed.py's."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from pipeline.stages import train as train_stage
from pipeline import device as device_mod
from pipeline.config import load_run_config
from pipeline.device import DeviceError, resolve_device
from pipeline.parallel import distributed


@pytest.fixture
def gpus(monkeypatch):
    """Pretend torch sees ``n`` GPUs of a CUDA 13 build: ``gpus(n)``; records set_device calls."""
    calls = []

    def fake(n: int):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
        monkeypatch.setattr(torch.cuda, "set_device", calls.append)
        monkeypatch.setattr(torch.version, "cuda", "13.0")
        monkeypatch.setattr(device_mod, "_warned", False)
        return calls

    return fake


@pytest.fixture
def group(monkeypatch):
    """torchrun's environment for local rank ``r`` of ``n`` and a recorded init_process_group."""
    made = []

    def env(rank: int, ranks: int, agent: bool = True):
        for k, v in {"WORLD_SIZE": ranks, "RANK": rank, "LOCAL_RANK": rank, "LOCAL_WORLD_SIZE": ranks}.items():
            monkeypatch.setenv(k, str(v))
        if agent:
            monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")
        else:
            monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
        monkeypatch.setattr(dist, "is_initialized", lambda: False)
        monkeypatch.setattr(dist, "init_process_group", lambda backend, **kw: made.append(backend))
        return made

    return env


def test_cpu_config_uses_gloo_on_a_gpu_box(gpus, group):
    set_device = gpus(8)
    made = group(1, 2)
    assert distributed.init(60, resolve_device("cpu"))
    assert made == ["gloo"] and set_device == []


@pytest.mark.parametrize("asked", ["cuda", "auto"])
def test_cuda_config_uses_nccl_on_the_local_rank_gpu(gpus, group, asked):
    set_device = gpus(2)
    made = group(1, 2)
    assert distributed.init(60, resolve_device(asked))
    assert made == ["nccl"] and set_device == [1]


def test_more_ranks_than_gpus_is_one_line(gpus, group):
    set_device = gpus(1)
    made = group(1, 2)
    with pytest.raises(DeviceError) as e:
        distributed.init(60, resolve_device("cuda"))
    msg = str(e.value)
    assert "\n" not in msg and "2 ranks on this node but torch sees 1 GPU(s)" in msg and "--nproc_per_node=1" in msg
    assert made == [] and set_device == []


def test_auto_without_gpu_is_gloo_and_says_so_once(gpus, group, capsys):
    gpus(0)
    made = group(0, 2)
    assert distributed.init(60, resolve_device("auto"))
    assert made == ["gloo"]
    err = capsys.readouterr().err
    assert "WARNING device=auto" in err and "Running on the CPU" in err and "driver 580" in err
    assert resolve_device("auto") == "cpu" and capsys.readouterr().err == ""  # once per process


def test_cpu_only_torch_build_is_named(gpus, monkeypatch, capsys):
    gpus(0)
    monkeypatch.setattr(torch.version, "cuda", None)
    assert resolve_device("auto") == "cpu"
    assert "CPU-only build" in capsys.readouterr().err


def test_device_cuda_without_gpu_stops_the_trainer_in_one_line(gpus, tiny_setup, capsys):
    gpus(0)
    cfg = load_run_config(None, [*tiny_setup[0], "device=cuda", "name=no-gpu"])
    assert train_stage.main(cfg) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("mathrl train: device=cuda but torch") and "device=cpu" in out[-1]


def test_one_rank_torchrun_makes_a_group_and_a_bare_process_does_not(gpus, group):
    gpus(0)
    made = group(0, 1)  # torchrun --nproc_per_node 1
    assert distributed.init(60, "cpu") and made == ["gloo"]
    made.clear()
    group(0, 1, agent=False)  # WORLD_SIZE=1 set by hand: a single process
    assert not distributed.init(60, "cpu") and made == []


def test_collectives_and_fsdp_mesh_follow_the_backend(monkeypatch):
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_backend", lambda: "nccl")
    assert distributed.device_type() == "cuda"
    monkeypatch.setattr(dist, "get_backend", lambda: "gloo")
    assert distributed.device_type() == "cpu"
    assert distributed.backend_for("cuda") == "nccl" and distributed.backend_for("cpu") == "gloo"
    with pytest.raises(ValueError):
        distributed.backend_for("auto")


def test_config_refuses_other_devices():
    from pipeline.config import ConfigError

    with pytest.raises(ConfigError, match="device"):
        load_run_config(None, ["device=cuda:1"])
