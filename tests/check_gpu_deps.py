"""Does `pip install '.[train,vllm]'` resolve on a GPU box? pip's resolver, no install.

`make check-gpu-deps` (and a CI step) runs ``pip install --dry-run --ignore-installed --report``
on the project's `train` and `vllm` extras against the package index alone: no local wheel
folders, extra indexes or constraint files from this machine's pip configuration, which hold CPU
builds (a CPU-only ``torch 2.13.0+cpu`` also satisfies ``torch==2.13.*`` and would hide the CUDA
build's requirements). vLLM pins torch exactly, so a vllm release built for another torch than
the one the `train` extra pins makes the resolution fail; this prints pip's conflict and exits 1.
On success it prints the vllm version, the torch it requires (its METADATA's Requires-Dist), the
torch and transformers pip picked, and the CUDA the torch build pulls in.

    python tests/check_gpu_deps.py                  # the project's own pins
    python tests/check_gpu_deps.py --vllm 'vllm==0.33.*'   # another vllm instead of the extra's

Needs the package index (PyPI); it downloads metadata only (PEP 658), under a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# pip settings that point at this machine's own wheels or caps; the index itself is kept
LOCAL_PIP = ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT", "PIP_NO_INDEX", "PIP_REQUIREMENT")


def pip_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in LOCAL_PIP}
    env["PIP_CONFIG_FILE"] = os.devnull  # no pip.conf: its find-links / constraints are this machine's
    return env


def resolve(vllm: str | None) -> tuple[int, str, dict | None]:
    """(pip's exit code, its output, the installation report or None)."""
    targets = [f"{ROOT}[train,vllm]"] if vllm is None else [f"{ROOT}[train]", vllm]
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
               "--report", str(report), *targets]
        proc = subprocess.run(cmd, env=pip_env(), capture_output=True, text=True, timeout=600)
        data = json.loads(report.read_text()) if proc.returncode == 0 and report.is_file() else None
    return proc.returncode, proc.stdout + proc.stderr, data


def summary(report: dict) -> list[str]:
    by_name = {item["metadata"]["name"].lower(): item["metadata"] for item in report["install"]}
    vllm, torch = by_name.get("vllm"), by_name.get("torch")
    if vllm is None or torch is None:
        raise SystemExit(f"check-gpu-deps: the resolution has no {'vllm' if vllm is None else 'torch'}")
    pins = [r for r in vllm.get("requires_dist", []) if re.match(r"(torch|transformers)\b", r)]
    cuda = sorted({r.split(";")[0].strip() for r in torch.get("requires_dist", [])
                   if re.match(r"(nvidia-cuda-runtime|cuda-toolkit|nvidia-cudnn)", r)})
    return [f"vllm {vllm['version']} requires: {', '.join(pins)}",
            f"resolved: torch {torch['version']}, transformers {by_name['transformers']['version']}, "
            f"{len(report['install'])} packages",
            f"torch {torch['version']} pulls in: {', '.join(cuda) or 'no CUDA runtime (a CPU build?)'}"]


def conflict(output: str) -> str:
    """pip's own explanation of the conflict (from "The conflict is caused by" to its advice) and
    its errors; the last lines of its output when it has neither."""
    lines = [ln.rstrip() for ln in output.splitlines() if ln.strip()]
    start = next((i for i, ln in enumerate(lines) if "conflict is caused by" in ln), len(lines))
    stop = next((i for i, ln in enumerate(lines) if i > start and ln.startswith("To fix")), len(lines))
    keep = lines[start:stop] + [ln for ln in lines[stop:] if ln.startswith("ERROR")]
    return "\n".join(keep or lines[-15:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm", default=None, help="a vllm requirement to resolve instead of the `vllm` extra's")
    args = parser.parse_args(argv)
    what = ".[train,vllm]" if args.vllm is None else f".[train] + {args.vllm}"
    t0 = time.monotonic()
    code, output, report = resolve(args.vllm)
    took = time.monotonic() - t0
    if code != 0 or report is None:
        print(f"check-gpu-deps: FAIL: {what} does not resolve ({took:.0f} s):\n{conflict(output)}")
        return 1
    print("\n".join(f"check-gpu-deps: {line}" for line in summary(report)))
    print(f"check-gpu-deps: ok: {what} resolves ({took:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
