"""`mathrl run` / `make train`: every stage the config lists, then a short report.

For the CPU default (`configs/cpu_tiny.yaml`) that is: build the tiny model -> SFT warm start
-> evaluate the SFT model ("before") -> GRPO -> evaluate the trained model ("after") -> write
`report.md` in the run directory. Data preparation is the `make data` prerequisite. The last
line printed is machine-readable:

    result: task=<name> before=<accuracy 0..1> after=<accuracy 0..1> minutes=<wall minutes>
"""

from __future__ import annotations

import time
from pathlib import Path

from pipeline.config import RunConfig

KNOWN_STAGES = ("build-tiny", "sft", "train", "eval")


def evaluate_model(cfg: RunConfig, model_path: str, out_dir: Path) -> dict:
    """Greedy eval of ``model_path`` on the eval section's dataset, outputs in ``out_dir``."""
    from evals.loading import load_for_eval
    from evals.run import evaluate_with_config, make_engine

    model, tok, path = load_for_eval(model_path, cfg.model.dtype, cfg.device)
    engine = make_engine(cfg, model, tok, path)
    try:
        return evaluate_with_config(model, tok, cfg, engine=engine, output_dir=out_dir, progress=True)
    finally:
        engine.close()


def write_report(run_dir: Path, cfg: RunConfig, before: dict | None, after: dict | None, minutes: float) -> Path:
    lines = [f"# Run `{cfg.name}`", "", f"- task: `{cfg.train.task}`, eval dataset: `{cfg.eval.dataset}` "
             f"({cfg.eval.split}, {'all' if not cfg.eval.limit else cfg.eval.limit} problems, greedy)",
             f"- advantage: {cfg.train.advantage}, steps: {cfg.train.steps}, G = {cfg.rollout.group_size}, "
             f"questions/step = {cfg.train.questions_per_step}", f"- wall time: {minutes:.1f} min", ""]
    if before and after:
        lines += ["| model | accuracy | answer-extraction failures |", "|---|---|---|",
                  f"| before GRPO (`{cfg.model.name_or_path}`) | {before['accuracy']:.3f} | "
                  f"{before['extraction_failure_rate']:.3f} |",
                  f"| after GRPO (`{run_dir / 'final'}`) | {after['accuracy']:.3f} | "
                  f"{after['extraction_failure_rate']:.3f} |", ""]
    if (run_dir / "curves.png").is_file():
        lines += ["![training curves](curves.png)", ""]
    lines += ["Files: `config.yaml` (resolved config), `metrics.jsonl`, `samples.jsonl`, `checkpoints/`, "
              "`final/`, `eval/before|after/` (results.jsonl, summary.json, report.md)."]
    path = run_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(cfg: RunConfig) -> int:
    unknown = [s for s in cfg.stages if s not in KNOWN_STAGES]
    if unknown:
        print(f"mathrl run: unknown stage(s) {unknown} in `stages`; choose from {', '.join(KNOWN_STAGES)}")
        return 2
    start = time.time()
    run_dir = Path(cfg.output_dir) / cfg.name
    if "build-tiny" in cfg.stages:
        from pipeline import models
        models.main(cfg)
    if "sft" in cfg.stages:
        from pipeline import sft
        sft.main(cfg)
    before = after = None
    if "eval" in cfg.stages:
        before = evaluate_model(cfg, cfg.model.name_or_path, run_dir / "eval" / "before")
        print(f"before GRPO: accuracy {before['accuracy']:.3f} on {cfg.eval.dataset}")
    if "train" in cfg.stages:
        from pipeline.grpo import trainer
        code = trainer.main(cfg)
        if code:
            return code
    if "eval" in cfg.stages and "train" in cfg.stages:
        after = evaluate_model(cfg, str(run_dir / "final"), run_dir / "eval" / "after")
        print(f"after GRPO: accuracy {after['accuracy']:.3f} on {cfg.eval.dataset}")
    minutes = (time.time() - start) / 60
    run_dir.mkdir(parents=True, exist_ok=True)
    report = write_report(run_dir, cfg, before, after, minutes)
    print(f"report: {report}")
    if before and after:
        print(f"result: task={cfg.train.task} before={before['accuracy']:.4f} after={after['accuracy']:.4f} "
              f"minutes={minutes:.1f}")
    return 0


__all__ = ["main", "evaluate_model", "write_report"]
