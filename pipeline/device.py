"""Which device a run uses (`device=auto|cpu|cuda`), said out loud when `auto` finds no GPU.

``resolve_device`` is the one place the config's ``device`` becomes a torch device string: the
models, the trainer's autocast and torchrun's backend (``parallel/distributed.py``: gloo for cpu,
nccl for cuda) all take it from here. ``auto`` means cuda when torch sees a GPU; when it does
not, the run goes on on the CPU, but says so on stderr once per process with the reason torch
gives (a CPU-only build of torch, or a CUDA build that finds no driver or device), because a
real-model recipe on the CPU is a run that never finishes. ``device=cuda`` without a GPU stops
with one line instead.
"""

from __future__ import annotations

import sys

import torch

_warned = False


class DeviceError(RuntimeError):
    """The config asks for a device this machine does not have; the message says what to do."""


def resolve_device(device: str) -> str:
    """'cpu' or 'cuda' for the config's ``device`` (auto, cpu or cuda: the config checked it);
    ``auto`` warns once when it falls back to the CPU."""
    if device == "cpu":
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    if device == "cuda":
        raise DeviceError(f"device=cuda but {why_no_gpu()}; run with device=cpu to use the CPU")
    _warn_cpu_fallback()
    return "cpu"


def device_identity(device) -> str:
    """Which physical device ``device`` is: "cpu", or the GPU's UUID as nvidia-smi prints it
    (the same card whatever CUDA_VISIBLE_DEVICES numbers it in each process)."""
    device = torch.device(device)
    if device.type != "cuda":
        return "cpu"
    index = device.index if device.index is not None else torch.cuda.current_device()
    return f"GPU-{torch.cuda.get_device_properties(index).uuid}"


def why_no_gpu() -> str:
    """One clause: why torch sees no GPU."""
    if torch.version.cuda is None:
        return (f"torch {torch.__version__} is a CPU-only build (install the CUDA build from PyPI: "
                "pip install torch==<version>)")
    return (f"torch {torch.__version__} (built for CUDA {torch.version.cuda}) finds no usable GPU: check "
            f"`nvidia-smi` and the driver (CUDA {torch.version.cuda.split('.')[0]} builds need driver "
            f"{_min_driver(torch.version.cuda)} or newer) and CUDA_VISIBLE_DEVICES")


def _min_driver(cuda: str) -> str:
    """The oldest Linux driver branch for a CUDA major version (NVIDIA's CUDA release notes)."""
    return {"12": "525", "13": "580"}.get(cuda.split(".")[0], "a matching")


def _warn_cpu_fallback() -> None:
    global _warned
    if _warned:
        return
    _warned = True
    print(f"WARNING device=auto: {why_no_gpu()}. Running on the CPU, which only suits the tiny "
          "model; set device=cpu to do this on purpose (and silence this), or device=cuda to stop "
          "instead.", file=sys.stderr, flush=True)

