"""Same config, same numbers: torch's thread count, deterministic algorithms and the CPU's vector
kernels, set from the config before each stage runs (and printed, so a log says what was used).

Why each one (docs/cpu_default.md, "Determinism", has the measurement for ``cpu_isa``):
- ``threads``: parallel kernels split their work by the number of threads, so a sum can round
  differently with 1 and 2 threads; torch's default is one thread per core, i.e. it depends on
  the machine. The config fixes it. On a busy 2-core machine 1 thread is also the fast choice:
  2 OpenMP threads on shared cores spin against each other (docs/cpu_default.md, "Sizing").
- ``deterministic``: ``torch.use_deterministic_algorithms(True, warn_only=True)``: the ops that
  have a deterministic variant use it (mostly CUDA scatter/index kernels), the others warn once.
- ``cpu_isa``: ATen picks its vectorised kernels for the CPU it finds (AVX512 on the dev box),
  and they round differently from the AVX2 ones: five identical SFT steps end with different
  weights under ``ATEN_CPU_CAPABILITY=avx2`` and the native AVX512 kernels. Pinning ``avx2`` gives
  every x86-64 CPU with AVX2 the same ATen kernels, but not the same matrix products:
  ``MKL_CBWR=AVX2`` is a branch MKL keeps for Intel CPUs only, and on an AMD CPU it silently runs
  MKL's own dispatch instead (on the AMD EPYC dev box AVX2, AVX512, SSE4_2 and AUTO give the same
  bits, COMPATIBLE other ones), which is why an Intel and an AMD box gave different SFT models.
  ``portable`` pins ATen to AVX2 and MKL to ``COMPATIBLE`` (SSE2 without approximate reciprocals),
  the one branch MKL documents as giving the same results on Intel and non-Intel CPUs, at the cost
  of slower matrix products (docs/cpu_default.md, "Determinism"). Both are read when torch
  loads, so ``pin_cpu_kernels`` must run before the first ``import torch``: the ``mathrl``
  command does that before it imports a stage.

Environment variables such as ``OMP_NUM_THREADS`` do not matter once ``threads`` is set:
``torch.set_num_threads`` overrides them (tests/test_determinism.py runs the same SFT + GRPO
under different ones and compares every metric and weight).
"""

from __future__ import annotations

import os
import sys

# cpu_isa -> (ATEN_CPU_CAPABILITY, MKL_CBWR)
ISA_ENV = {"default": ("default", "COMPATIBLE"), "avx2": ("avx2", "AVX2"), "avx512": ("avx512", "AVX512"),
           "portable": ("avx2", "COMPATIBLE")}


def pin_cpu_kernels(isa: str) -> None:
    """Set the environment that pins torch's and MKL's CPU kernels to ``isa`` ("" = leave them).
    Only effective before torch is imported; after that a different pin stops with a message."""
    if not isa:
        return
    aten, mkl = ISA_ENV[isa]
    if "torch" in sys.modules and os.environ.get("ATEN_CPU_CAPABILITY") != aten:
        import torch
        found = torch.backends.cpu.get_cpu_capability().lower()
        if found != aten:
            raise RuntimeError(f"cpu_isa={isa}: torch was imported before the kernels could be pinned and uses "
                               f"{found}; set ATEN_CPU_CAPABILITY={aten} MKL_CBWR={mkl} in the environment, or "
                               "run through the `mathrl` command")
    os.environ["ATEN_CPU_CAPABILITY"] = aten
    os.environ["MKL_CBWR"] = mkl


def apply(cfg, stage: str) -> None:
    """Set the thread count and deterministic algorithms from ``cfg`` and print what is in force."""
    import torch

    if cfg.threads > 0 and torch.get_num_threads() != cfg.threads:
        torch.set_num_threads(cfg.threads)
    if cfg.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS (CUDA >= 10.2)
    torch.use_deterministic_algorithms(cfg.deterministic, warn_only=True)
    if os.environ.get("RANK", "0") == "0":
        threads = f"{torch.get_num_threads()} (config threads={cfg.threads or 'torch default'})"
        print(f"{stage}: torch threads {threads}, deterministic algorithms "
              f"{'on' if cfg.deterministic else 'off'}, CPU kernels {torch.backends.cpu.get_cpu_capability()}",
              flush=True)


__all__ = ["ISA_ENV", "apply", "pin_cpu_kernels"]
