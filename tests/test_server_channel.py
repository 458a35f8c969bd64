"""Server mode's weight channel choice (pipeline/rollout/vllm_client.py: choose_backend) and the
device identity the server reports on /info, with torch.cuda mocked (no GPU here).

NCCL refuses two ranks on one physical GPU ("Duplicate GPU detected"), so ``auto`` must pick
gloo when the trainer and the server share a GPU, and decide from the policy's device, not from
the device of the tensors it sends (under FSDP a gather may land on the CPU).
"""

import asyncio
from types import SimpleNamespace

import pytest
import torch

from pipeline.config import load_run_config
from pipeline.device import device_identity
from pipeline.rollout import vllm_client
from pipeline.rollout.vllm_client import ServerError, VLLMServerEngine, choose_backend
from pipeline.rollout.vllm_server import WeightServer

URL = "http://server:8000"
UUIDS = {0: "5f0c-aaaa", 1: "77d1-bbbb"}  # two physical GPUs


@pytest.fixture
def gpus(monkeypatch):
    """torch.cuda as on a 2-GPU machine; the current device is cuda:0."""
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(uuid=UUIDS[i]))


def health(device_id, device="cuda"):
    return {"device": device, "device_id": device_id}


def test_device_identity_names_the_physical_gpu(gpus):
    assert device_identity("cpu") == "cpu" and device_identity(torch.device("cpu")) == "cpu"
    assert device_identity("cuda") == "GPU-5f0c-aaaa"  # the current device
    assert device_identity(torch.device("cuda", 1)) == "GPU-77d1-bbbb"


def test_auto_picks_nccl_only_between_different_gpus(gpus, capsys):
    cuda0, cuda1 = torch.device("cuda", 0), torch.device("cuda", 1)
    assert choose_backend("auto", cuda0, health("GPU-77d1-bbbb"), URL) == "nccl"
    assert capsys.readouterr().out == ""
    assert choose_backend("auto", cuda1, health("GPU-77d1-bbbb"), URL) == "gloo"  # the server's own GPU
    assert "runs on the trainer's GPU" in capsys.readouterr().out
    assert choose_backend("auto", cuda0, {"device": "cuda"}, URL) == "gloo"  # an identity-less server: not guessed
    assert "reports no GPU identity" in capsys.readouterr().out
    assert choose_backend("auto", cuda0, health("cpu", "cpu"), URL) == "gloo"  # CPU server
    assert choose_backend("auto", torch.device("cpu"), health("GPU-77d1-bbbb"), URL) == "gloo"  # CPU policy


def test_explicit_backends(gpus):
    cuda0 = torch.device("cuda", 0)
    assert choose_backend("gloo", cuda0, health("GPU-77d1-bbbb"), URL) == "gloo"
    assert choose_backend("nccl", cuda0, health("GPU-77d1-bbbb"), URL) == "nccl"
    with pytest.raises(ServerError, match="NCCL refuses two ranks on one GPU") as e:
        choose_backend("nccl", cuda0, health("GPU-5f0c-aaaa"), URL)
    assert "\n" not in str(e.value)


def test_client_decides_from_the_models_device_not_the_sent_tensors(gpus, monkeypatch):
    """The client passes the policy's parameter device to the choice; the stream (which under FSDP
    may hold CPU tensors) is never consulted."""
    seen = []
    monkeypatch.setattr(vllm_client, "choose_backend", lambda c, device, h, u: seen.append(device) or "gloo")
    engine = object.__new__(VLLMServerEngine)
    engine.backend_choice, engine.health, engine.url, engine.host, engine.timeout_s = "auto", {}, URL, "h", 1.0
    engine.group = None

    def refuse(*a, **k):
        raise ServerError("stop after the choice")

    engine._call = refuse
    model = SimpleNamespace(parameters=lambda: iter([SimpleNamespace(device=torch.device("cuda", 1))]))
    with pytest.raises(ServerError, match="stop after the choice"):
        engine._push(model, iter([("w", torch.zeros(2))]))  # a CPU tensor in the stream
    assert seen == [torch.device("cuda", 1)]


def test_info_reports_the_servers_device_identity(gpus, tiny_setup):
    """/info (token-protected; /health says only "ok") is what the client reads as ``health``."""
    cfg = load_run_config(None, tiny_setup[0])
    on_gpu = asyncio.run(WeightServer(cfg, SimpleNamespace(on_gpu=True), None).info({}))
    on_cpu = asyncio.run(WeightServer(cfg, SimpleNamespace(on_gpu=False), None).info({}))
    assert (on_gpu["device"], on_gpu["device_id"]) == ("cuda", "GPU-5f0c-aaaa")
    assert (on_cpu["device"], on_cpu["device_id"]) == ("cpu", "cpu")
