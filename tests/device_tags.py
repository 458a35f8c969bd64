"""A second "device" on a CPU-only machine: catches host/accelerator mixes without a GPU.

On a GPU box the policy's weights live on ``cuda`` while tensors made from Python data
(``torch.tensor(rewards)``, ``torch.zeros(n)``) land on the host unless the code names a device.
An op that mixes the two raises ("Expected all tensors to be on the same device"). On a CPU box
both are ``cpu`` and nothing raises, so such a bug ships unseen.

``HostTags`` is a ``TorchFunctionMode`` that keeps the two apart while every value stays real
(so losses, optimizer steps, autocast and metric reads all run for real):

- The policy's device is ``cpu`` (where the model really is). Every tensor that existed before
  the mode started (the model's parameters and buffers) is on it.
- A tensor made without naming a device (``torch.tensor(x)``, ``torch.zeros(n)``,
  ``torch.from_numpy``) is tagged HOST, and so is ``t.cpu()``. A tensor made with ``device=`` or
  moved with ``.to(device)`` / ``.cuda()`` is on the policy's device, unless the device object was
  read from a HOST tensor (``device=host_tensor.device`` stays on the host, as on a GPU box).
- Results follow their inputs: HOST when every tensor input is HOST, else the policy's device.
- An op whose tensor inputs are on both sides raises ``DeviceMix``, with CUDA's exceptions:
  0-dim host tensors act as scalars (not in ``cat`` / ``stack``), ``copy_`` and ``x[i] = v`` copy
  across devices, and ``x[idx]`` accepts a host index tensor.

Why this and not the ``meta`` device: ``meta`` has no values, so a training step on it cannot
read a loss, clip a gradient norm, or compute rewards, advantages and metrics from values; the
pure functions are still tested on ``meta`` (tests/test_device_hygiene.py). Why a function mode
and not a dispatch mode: ``x.to("cpu")`` on a CPU tensor returns ``x`` itself before reaching the
dispatcher, so only the function level sees the code ask for the policy's device.
What it cannot see: ops inside C++ (autograd's backward, the inside of a fused kernel); they
take their devices from the inputs checked here. Code that names ``"cpu"`` explicitly to mean the
host is read as the policy's device (it is also the policy's device's name here).
"""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakTensorKeyDictionary


class DeviceMix(AssertionError):
    """An op mixed host tensors with tensors on the policy's device."""


_DEVICE_GET = torch.Tensor.device.__get__
_COPIES = {torch.Tensor.copy_, torch.Tensor.__setitem__}  # copy across devices, like CUDA
_NO_SCALARS = {torch.cat, torch.concat, torch.concatenate, torch.stack, torch.hstack, torch.vstack}


class HostTags(TorchFunctionMode):
    """Within ``with HostTags() as tags:``, host/policy-device mixes raise ``DeviceMix``.
    ``tags.on_host(t)`` says where a tensor is; ``made_on_host`` / ``checked`` count tensors made
    on the host and ops checked (a test asserts both, so it cannot pass by seeing nothing)."""

    def __init__(self):
        super().__init__()
        self._host = WeakTensorKeyDictionary()
        self._host_devices: dict[int, torch.device] = {}  # device objects read from host tensors
        self.made_on_host = 0
        self.checked = 0

    def on_host(self, t: torch.Tensor) -> bool:
        return t in self._host

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func == _DEVICE_GET:  # a fresh method-wrapper per access: compare, not `is`
            return self._device_of(args[0])
        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        target = self._target(func, args, kwargs)
        if target is None and func not in _COPIES:
            self._check(func, args, tensors)
        out = func(*args, **kwargs)
        if target is None:
            host = all(self.on_host(t) for t in tensors)  # no tensor inputs: a factory without device=
        else:
            host = target
            if any(out is t for t in tensors) and self.on_host(out) != host:
                out = out.clone()  # `.to` returned its input; a real move makes a new tensor
        self._tag(out, host, tensors)
        return out

    def _device_of(self, t: torch.Tensor) -> torch.device:
        device = _DEVICE_GET(t)
        if self.on_host(t):
            device = torch.device(device.type)  # a fresh object, remembered as "the host"
            self._host_devices[id(device)] = device
        return device

    def _is_host_device(self, device) -> bool:
        return id(device) in self._host_devices

    def _target(self, func, args, kwargs) -> bool | None:
        """Where the call puts its result when it names a place: True host, False the policy's
        device, None when it does not (results follow the inputs)."""
        if func is torch.Tensor.cpu:
            return True
        if func is torch.Tensor.cuda:
            return False
        if func in (torch.Tensor.to, torch.Tensor.type_as):
            for a in [*args[1:], kwargs.get("device"), kwargs.get("other")]:
                if isinstance(a, torch.Tensor):
                    return self.on_host(a)
                if isinstance(a, (str, torch.device)):
                    return self._is_host_device(a)
            return None
        device = kwargs.get("device")
        if device is not None:
            return self._is_host_device(device)
        return None

    def _check(self, func, args, tensors) -> None:
        self.checked += 1
        if func is torch.Tensor.__getitem__:  # a host index into a device tensor is allowed
            base, index = args[0], [t for t in tree_leaves(args[1:]) if isinstance(t, torch.Tensor)]
            if self.on_host(base) and any(not self.on_host(t) for t in index):
                raise DeviceMix(f"indexing a host tensor {tuple(base.shape)} with a tensor on the policy's device")
            return
        scalars_ok = func not in _NO_SCALARS
        sides = {self.on_host(t) for t in tensors if not (scalars_ok and t.dim() == 0 and self.on_host(t))}
        if len(sides) == 2:
            where = ", ".join(f"{tuple(t.shape)}:{'host' if self.on_host(t) else 'device'}" for t in tensors)
            raise DeviceMix(f"{getattr(func, '__qualname__', func)} mixes host tensors and tensors on the "
                            f"policy's device ({where})")

    def _tag(self, out, host: bool, inputs) -> None:
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor) or any(t is i for i in inputs):
                continue
            if host:
                self._host[t] = True
                self.made_on_host += 1
            else:
                self._host.pop(t, None)
