"""`mathrl eval` / `make eval`: evaluate a model on gsm8k, math, math500, gsm-synth or a JSONL file.

    mathrl eval --config configs/cpu_tiny.yaml eval.dataset=math500 eval.limit=50

Which model: ``eval.model`` when set (a hub id, model dir, LoRA adapter dir, run dir or checkpoint);
else the config's run's trained model ``<output_dir>/<name>/final`` when it exists, so `make eval`
after `make train` evaluates what was trained; else ``model.name_or_path``. The first line says
which and why. The loop itself is ``evals.evaluate``; results go to the folder
``default_output_dir`` names (results.jsonl, summary.json, report.md, accuracy.png). With
``rollout.tools: [python]`` the engine runs the policy's code mid-solution (docs/tir.md) and the line
and report add the tool use (calls per solution, share of solutions using it, failed calls).
"""

from __future__ import annotations

from pathlib import Path

from pipeline import layout
from pipeline.config import RunConfig
from pipeline.prompts import get_template


def choose_model(cfg: RunConfig) -> tuple[str, str]:
    """(the model to evaluate, why that one)."""
    if cfg.eval.model:
        return cfg.eval.model, "eval.model"
    final = layout.final_dir(layout.run_dir(cfg))
    if final.is_dir():
        return str(final), f"the trained model of run {cfg.name!r}; eval.model=PATH evaluates another"
    return cfg.model.name_or_path, f"model.name_or_path (run {cfg.name!r} has no {final} yet)"


def default_output_dir(cfg: RunConfig, model_path: str) -> Path:
    """``eval.output_dir`` if set; else ``<run dir>/eval/<dataset>`` for a model inside a run dir
    (``_step_N`` appended for a step checkpoint), ``<model dir>/eval/<dataset>`` for another
    local model, and ``<output_dir>/<name>/eval/<dataset>`` for a hub id."""
    if cfg.eval.output_dir:
        return Path(cfg.eval.output_dir)
    tag = Path(cfg.eval.dataset).stem if cfg.eval.dataset.endswith(".jsonl") else cfg.eval.dataset
    path = Path(model_path)
    if not path.is_dir():
        return layout.eval_dir(layout.run_dir(cfg), tag)
    run = layout.run_of(path)
    if run is not None:
        suffix = "" if path.name == layout.FINAL else f"_{path.name}"
        return layout.eval_dir(run, f"{tag}{suffix}")
    return path / layout.EVAL / tag


def tool_fields(summary: dict) -> str:
    """The tool use of an eval with ``rollout.tools`` for the result line (empty without tools)."""
    t = summary.get("tool")
    return "" if not t else (f" tool_calls={t['calls_per_solution']:.2f} tool_used={t['used_frac']:.3f} "
                             f"tool_errors={t['errors_per_solution']:.2f}")


def main(cfg: RunConfig) -> int:
    from evals.evaluate import evaluate_model
    from evals.loading import resolve_model_path
    from pipeline import determinism

    determinism.apply(cfg, "eval")
    chosen, why = choose_model(cfg)
    path = resolve_model_path(chosen)
    print(f"eval: model {path} ({why})")
    out = default_output_dir(cfg, path)
    style = get_template(cfg.prompt.template).style
    if cfg.eval.dataset in ("math", "math500") and style != "math":
        print(f"eval: note: prompt.template={cfg.prompt.template} asks for '#### answer' on {cfg.eval.dataset}; "
              "MATH evals usually use prompt.template=math (\\boxed{} answers)")
    summary = evaluate_model(cfg, path, out)
    ks = "" if summary["greedy"] else "  " + "  ".join(
        f"pass@{k}={v:.3f} maj@{k}={summary['maj@k'][k]:.3f}" for k, v in summary["pass@k"].items())
    print(f"eval: {cfg.eval.dataset} ({summary['n_problems']} problems) accuracy={summary['accuracy']:.3f}"
          f"{ks} no-answer={summary['extraction_failure_rate']:.3f}{tool_fields(summary)}  -> {out}/report.md")
    return 0
