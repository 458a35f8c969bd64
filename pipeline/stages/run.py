"""`mathrl run` / `make train`: every stage the config lists, then a short report.

For the CPU default (`configs/cpu_tiny.yaml`) that is: build the tiny model -> SFT warm start
-> evaluate the SFT model ("before") -> GRPO -> evaluate the trained model ("after") -> write
`report.md` in the run directory. `mathrl` prepares the data the stages read before calling them,
and training ends by writing the model card `final/README.md` (``pipeline/card.py``), which the
evals after training update. The last line printed is machine-readable:

    result: task=<name> before=<accuracy 0..1> after=<accuracy 0..1> [greedy_before=... greedy_after=...
            <split>_before=... <split>_after=... <split>_greedy_before=... ...] minutes=<wall minutes>

``before``/``after`` are the configured eval (for the CPU default: 4 samples at T = 1); the
optional fields are the greedy eval, the ``eval.extra_splits`` (gsm-synth's ``test_longer``) and, with
``rollout.tools`` and ``eval.compare_without_tools``, every eval again with the tools off
(``notool_before=... notool_after=...``; configs/cpu_tir.yaml), with the tool-use table of
``tool_report.py`` in report.md.

The GRPO stage (``stages/train.py``) hands the trainer its periodic eval
(``evals.evaluate.periodic_eval``): the stages sit above both ``pipeline.grpo`` and ``evals``,
which do not import each other.
"""

from __future__ import annotations

import time
from pathlib import Path

from pipeline import layout
from pipeline.card import write_card
from pipeline.config import RunConfig
from pipeline.stages.tool_report import NO_TOOLS, tool_rows


def _title(cfg: RunConfig, split: str, key: str = "") -> str:
    from evals.evaluate import is_greedy

    what = "greedy accuracy" if is_greedy(cfg) else \
        f"mean accuracy of {cfg.eval.n_samples} samples at temperature {cfg.eval.temperature:g}"
    what = what if split == cfg.eval.split else f"{what}, split `{split}`"
    if key.startswith(NO_TOOLS):
        return f"{what}, tools off"
    return f"{what}, with the tool" if cfg.rollout.tools else what


def write_report(run_dir: Path, cfg: RunConfig, results: list[tuple[str, dict, dict]], minutes: float,
                 tools: list[str] = ()) -> Path:
    """``results``: (title, before summary, after summary) per eval setting; ``tools``: the lines of the
    with-and-without-the-tool table (``tool_report.tool_rows``), empty without rollout.tools."""
    lines = [f"# Run `{cfg.name}`", "", f"- task: `{cfg.train.task}`, eval dataset: `{cfg.eval.dataset}` "
             f"({cfg.eval.split}, {'all' if not cfg.eval.limit else cfg.eval.limit} problems)",
             f"- advantage: {cfg.train.advantage}, steps: {cfg.train.steps}, G = {cfg.rollout.group_size}, "
             f"questions/step = {cfg.train.questions_per_step}", f"- wall time: {minutes:.1f} min", ""]
    for title, b, a in results:
        lines += [f"**{title}**", "", "| model | accuracy | answer-extraction failures |", "|---|---|---|",
                  f"| before GRPO (`{cfg.model.name_or_path}`) | {b['accuracy']:.3f} | "
                  f"{b['extraction_failure_rate']:.3f} |",
                  f"| after GRPO (`{run_dir / 'final'}`) | {a['accuracy']:.3f} | "
                  f"{a['extraction_failure_rate']:.3f} |", ""]
    lines += list(tools)
    if (run_dir / "curves.png").is_file():
        lines += ["![training curves](curves.png)", ""]
    lines += ["Files: `config.yaml` (resolved config), `metrics.jsonl`, `samples.jsonl`, `checkpoints/`, "
              "`final/` (with the model card `README.md`), `eval/[notool_][<split>_][greedy_]before|after/` "
              "(results.jsonl, summary.json, report.md), `eval/step_N/` (the periodic evals)."]
    path = run_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def eval_plan(cfg: RunConfig) -> dict[str, tuple[RunConfig, str]]:
    """key -> (eval config, split) of every before/after eval: the configured eval and, when it
    samples, a greedy one (key prefix ``greedy_``), on ``eval.split`` and on each of
    ``eval.extra_splits`` (key prefix ``<split>_``); with ``eval.compare_without_tools`` each of them
    again with ``rollout.tools`` off (key prefix ``notool_``)."""
    from evals.evaluate import eval_settings

    plan = {}
    for split in [cfg.eval.split, *cfg.eval.extra_splits]:
        for tag, c in eval_settings(cfg).items():
            plan[f"{'' if split == cfg.eval.split else split + '_'}{tag}"] = (c, split)
    if cfg.eval.compare_without_tools:
        plan.update({f"{NO_TOOLS}{key}": (without_tools(c), split) for key, (c, split) in plan.items()})
    return plan


def without_tools(cfg: RunConfig) -> RunConfig:
    """The same config with ``rollout.tools`` off (the with-vs-without-tools comparison)."""
    import dataclasses

    return dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, tools=[]),
                               eval=dataclasses.replace(cfg.eval, compare_without_tools=False))


def eval_all(plan: dict[str, tuple[RunConfig, str]], model_path: str, run_dir: Path, when: str) -> dict[str, dict]:
    """Evaluate ``model_path`` under each planned eval into ``eval/<key><when>/``."""
    from evals.evaluate import evaluate_model

    out = {}
    for key, (c, split) in plan.items():
        out[key] = evaluate_model(c, model_path, layout.eval_dir(run_dir, f"{key}{when}"), split=split)
        print(f"{when} GRPO: {_title(c, split, key)} {out[key]['accuracy']:.3f} on {c.eval.dataset}")
    return out


def result_line(task: str, before: dict[str, dict], after: dict[str, dict], minutes: float) -> str:
    """``result: task=<task> before=<acc> after=<acc> [<key>before=<acc> <key>after=<acc> ...] minutes=<m>``:
    the configured eval first (the fields of the original line), then every other eval of the plan
    (``greedy_before``, ``test_longer_greedy_after``, ...); minutes last."""
    fields = [f"task={task}", f"before={before['']['accuracy']:.4f}", f"after={after['']['accuracy']:.4f}"]
    fields += [f"{key}{when}={res[key]['accuracy']:.4f}" for key in before if key
               for when, res in (("before", before), ("after", after))]
    return "result: " + " ".join(fields) + f" minutes={minutes:.1f}"


def main(cfg: RunConfig, command: str | None = None) -> int:
    from pipeline import determinism
    from pipeline.stages import build_tiny, sft, train

    start = time.time()
    determinism.apply(cfg, "run")
    run_dir = layout.run_dir(cfg)
    if "build-tiny" in cfg.stages:
        build_tiny.main(cfg)
    if "sft" in cfg.stages:
        sft.main(cfg)
    plan = eval_plan(cfg)
    before = eval_all(plan, cfg.model.name_or_path, run_dir, "before") if "eval" in cfg.stages else {}
    after = {}
    if "train" in cfg.stages:
        code = train.main(cfg, command)
        if code:
            return code
        if "eval" in cfg.stages:
            after = eval_all(plan, str(layout.final_dir(run_dir)), run_dir, "after")
            write_card(run_dir, cfg, command)  # now with the results of the trained model
    minutes = (time.time() - start) / 60
    run_dir.mkdir(parents=True, exist_ok=True)
    results = [(_title(c, split, key), before[key], after[key]) for key, (c, split) in plan.items() if after]
    titles = {key: _title(c, split, key) for key, (c, split) in plan.items()}
    report = write_report(run_dir, cfg, results, minutes, tool_rows(titles, before, after) if after else [])
    print(f"report: {report}")
    if after:
        print(result_line(cfg.train.task, before, after, minutes))
    return 0


__all__ = ["NO_TOOLS", "eval_all", "eval_plan", "main", "result_line", "without_tools", "write_report"]
