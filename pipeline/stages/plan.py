"""`mathrl plan --config X --gpu-mem 80 [--ranks N] [--prompt-tokens P]`: the estimated GPU memory of
a run, per component and phase (``pipeline/plan/``), from the model's config alone: nothing is
loaded onto any device. Exit code 0 when the peak fits, 1 when it does not, 2 for bad input (an
unknown model, say); the command checks the options first (``config.checks.check_options``).
"""

from __future__ import annotations

import sys

from pipeline.config import RunConfig
from pipeline.plan.memory import GIB, estimate
from pipeline.plan.report import render, run_shape
from pipeline.plan.shapes import load_config, shape_from_config


def main(cfg: RunConfig, gpu_mem: float = 80.0, ranks: int = 1, prompt_tokens: int = 512) -> int:
    try:
        model_cfg, source = load_config(cfg.model.name_or_path)
        shape = shape_from_config(model_cfg)
        run = run_shape(cfg, ranks, prompt_tokens)
        plan = estimate(shape, run, gpu_mem * GIB)
    except ValueError as e:
        print(f"mathrl plan: {e}", file=sys.stderr)
        return 2
    print("\n".join(render(plan, cfg, run, source, shape)))
    return 0 if plan.fits else 1
