"""A stand-in for the parts of the ``vllm`` package that ``VLLMEngine`` touches, for GPU-only
behaviour that cannot run here (sleep mode does not exist on vLLM's CPU backend; no GPU).

``install(monkeypatch)`` puts a fake ``vllm`` (and the submodules the engine imports) in
``sys.modules``. Its ``LLM`` records every call in one shared ``log`` (torch's
``cuda.empty_cache`` is recorded there too), answers ``generate`` with fixed completions, and
enforces vLLM's rule that a process holds at most one sleep-mode engine: vLLM 0.32's GPU worker
asserts that its CuMem allocator is empty when a sleep-mode engine loads its weights
(``gpu_worker.py``: "CuMem allocator can only be used for one instance per process."), and the
allocator is emptied only when the earlier engine has shut down.
"""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import torch

ONE_INSTANCE = "CuMem allocator can only be used for one instance per process."


class Allocator:
    """vllm.device_allocator.cumem.CuMemAllocator: bytes held by live sleep-mode engines."""

    instance = None

    def __init__(self):
        self.held: dict[int, int] = {}

    def get_current_usage(self) -> int:
        return sum(self.held.values())


class StandInLLM:
    log: list[str] = []
    eos = 2

    def __init__(self, model, enable_sleep_mode=False, tokenizer_obj=None, **kwargs):
        self.kwargs = dict(kwargs, model=model, enable_sleep_mode=enable_sleep_mode)
        self.sleep_mode = enable_sleep_mode
        if enable_sleep_mode:
            allocator = Allocator.instance = Allocator.instance or Allocator()
            assert allocator.get_current_usage() == 0, ONE_INSTANCE
            allocator.held[id(self)] = 1 << 20
        self.tokenizer = tokenizer_obj
        config = SimpleNamespace(hf_config=SimpleNamespace(eos_token_id=self.eos))
        self.llm_engine = SimpleNamespace(model_config=config,
                                          engine_core=SimpleNamespace(shutdown=self._shutdown))
        self.log.append(f"init(sleep={enable_sleep_mode})")

    def _shutdown(self):
        if Allocator.instance is not None:
            Allocator.instance.held.pop(id(self), None)
        self.log.append("shutdown")

    def get_tokenizer(self):
        return self.tokenizer

    def generate(self, prompts, params, use_tqdm=False):
        self.log.append("generate")
        outs = []
        for p in params:
            done = [SimpleNamespace(index=j, token_ids=[5, self.eos],
                                    logprobs=[{5: SimpleNamespace(logprob=-0.5)},
                                              {self.eos: SimpleNamespace(logprob=-0.1)}],
                                    finish_reason="stop") for j in range(p.n)]
            outs.append(SimpleNamespace(outputs=done))
        return outs

    def sleep(self, level):
        assert self.sleep_mode, "sleep() on an engine built without enable_sleep_mode"
        self.log.append(f"sleep{level}")

    def wake_up(self, tags=None):
        self.log.append("wake:" + ",".join(tags))

    def collective_rpc(self, fn, args=()):
        tensors = sum(1 for _ in args[0]) if args else 0  # consumes a lazy weight stream like vLLM would
        self.log.append(f"rpc:{fn.__name__}:{tensors}")

    def reset_prefix_cache(self):
        self.log.append("reset_prefix")


class VSamplingParams:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


def install(monkeypatch, tokenizer=None, on_gpu: bool = True) -> list[str]:
    """Install the stand-in; returns the call log (cleared)."""
    StandInLLM.log = log = []
    Allocator.instance = None
    vllm = types.ModuleType("vllm")
    vllm.LLM = lambda **kw: StandInLLM(tokenizer_obj=tokenizer, **kw)
    vllm.SamplingParams = VSamplingParams
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = SimpleNamespace(is_cpu=lambda: not on_gpu)
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = lambda prompt_token_ids: {"prompt_token_ids": prompt_token_ids}
    allocator = types.ModuleType("vllm.device_allocator.cumem")
    allocator.CuMemAllocator = Allocator
    for name, module in {"vllm": vllm, "vllm.platforms": platforms, "vllm.inputs": inputs,
                         "vllm.device_allocator": types.ModuleType("vllm.device_allocator"),
                         "vllm.device_allocator.cumem": allocator}.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: log.append("empty_cache"))
    return log
