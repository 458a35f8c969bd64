"""`mathrl sft` / `make sft`: the supervised warm start, then its accuracy as the evals compute it.

Training (``pipeline.sft``) is skipped when ``sft.output`` was made from the same inputs
(``fingerprint``, pipeline/freshness.py); else the tiny base is built first when ``sft.init`` is
the missing ``model.tiny_dir`` (`make sft` on a fresh clone), and the fine-tuned model and its
tokenizer are saved to ``sft.output``. Then the saved model is evaluated greedily on the first
``sft.eval_limit`` test problems of ``sft.task`` by ``evals.evaluate.evaluate_model`` (what
`mathrl eval` runs, with the config's prompt, reward and engine settings) into
``<sft.output>/sft_eval/``, skipped too when current; 0, or a JSONL task with no ``test.jsonl``
beside it, evaluates nothing. ``sft_report.json`` holds the training minutes, final loss, number
of corrupted solutions and steps, and the eval's accuracy, overall and by number of solution steps.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from pipeline import freshness
from pipeline.config import RunConfig
from pipeline.data.problems import MIX, prepared_path

REPORT = "sft_report.json"
EVAL_DIR = "sft_eval"
EVAL_KEYS = ("accuracy", "n", "by_steps", "eval")  # the report's fields that come from the eval
INIT_FILES = ("tiny_build.json", "config.json", "tokenizer.json", "model.safetensors")


def _data_files(cfg: RunConfig, dataset: str, split: str) -> list[Path]:
    """The files ``load_problems`` reads for ``split`` of ``dataset`` (a JSONL path is itself)."""
    return [Path(part) if part.endswith(".jsonl") else prepared_path(cfg.data.prepared_dir, part, split)
            for part in dataset.split(MIX)]


def fingerprint(cfg: RunConfig) -> str:
    """What the SFT weights depend on: the SFT settings (but ``eval_limit``), prompt, data settings
    and seed, the initial model's files and the training data's bytes."""
    settings = {"sft": {**dataclasses.asdict(cfg.sft), "eval_limit": None}, "prompt": dataclasses.asdict(cfg.prompt),
                "data": dataclasses.asdict(cfg.data), "seed": cfg.seed}
    files = [Path(cfg.sft.init) / name for name in INIT_FILES] + _data_files(cfg, cfg.sft.task, "train")
    return freshness.fingerprint(settings, files)


def eval_dataset(cfg: RunConfig) -> str | None:
    """The test set of ``sft.task``: the dataset itself, or for a JSONL task the ``test.jsonl``
    beside it (None when there is none, or when it is the training file itself)."""
    task = cfg.sft.task
    if not task.endswith(".jsonl"):
        return task
    test = Path(task).with_name("test.jsonl")
    return str(test) if test.is_file() and test != Path(task) else None


def eval_config(cfg: RunConfig, dataset: str) -> RunConfig:
    """``cfg`` with the SFT eval in its eval section: ``sft.output`` greedily, one sample, on the first
    ``sft.eval_limit`` test problems of ``dataset``, into ``<sft.output>/sft_eval``."""
    from evals.evaluate import greedy

    g = greedy(cfg)
    return dataclasses.replace(g, eval=dataclasses.replace(
        g.eval, model=cfg.sft.output, dataset=dataset, split="test", limit=cfg.sft.eval_limit, extra_splits=[],
        output_dir=str(Path(cfg.sft.output) / EVAL_DIR)))


def _eval_fingerprint(ecfg: RunConfig, weights: str) -> str:
    """What the SFT eval depends on: the weights' fingerprint, the settings the eval reads, the test data."""
    sections = {k: dataclasses.asdict(getattr(ecfg, k)) for k in ("eval", "prompt", "reward", "rollout")}
    settings = {"weights": weights, **sections, "dtype": ecfg.model.dtype, "device": ecfg.device, "seed": ecfg.seed}
    return freshness.fingerprint(settings, _data_files(ecfg, ecfg.eval.dataset, "test"))


def by_steps(eval_dir: Path, problems: list[dict]) -> dict[int, float]:
    """Accuracy per number of calculator steps of the reference solution, from the eval's results."""
    from pipeline.data.synth import num_steps

    steps = {p["id"]: num_steps(p) for p in problems if p.get("solution")}
    groups: dict[int, list[float]] = {}
    for line in (eval_dir / "results.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["id"] in steps:
            groups.setdefault(steps[row["id"]], []).append(sum(row["correct"]) / len(row["correct"]))
    return {k: round(sum(v) / len(v), 4) for k, v in sorted(groups.items())}


def train_and_save(cfg: RunConfig) -> dict:
    """Fine-tune ``sft.init`` on the corrupted training split, save it to ``sft.output``; the training report."""
    import torch

    from pipeline import sft
    from pipeline.models import load_policy

    s = cfg.sft
    torch.manual_seed(cfg.seed)
    t0 = time.time()
    model, tok = load_policy(s.init, dtype="float32", device=cfg.device)
    records, n_bad = sft.training_records(cfg)
    tool = f", {sum(bool(r.get('tool')) for r in records)} with the python tool" if s.tool_frac else ""
    print(f"sft: {len(records)} training solutions, {n_bad} corrupted{tool}; "
          f"{sum(p.numel() for p in model.parameters()):,} params")
    losses = sft.train(model, tok, sft.encode(records, tok, cfg), cfg)
    out = Path(s.output)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    minutes = (time.time() - t0) / 60
    final_loss = sum(losses[-20:]) / len(losses[-20:])
    print(f"sft: saved {out} after {minutes:.1f} min of training (final loss {final_loss:.3f})")
    return {"train_minutes": round(minutes, 2), "final_loss": final_loss, "corrupted": n_bad, "steps": s.steps}


def evaluate(ecfg: RunConfig) -> dict:
    """The report's eval fields: ``eval.model`` of ``ecfg`` (``eval_config``) evaluated by the evals harness."""
    from evals.evaluate import evaluate_model
    from pipeline.data.problems import load_problems

    e = ecfg.eval
    where = Path(e.output_dir)
    print(f"sft: evaluating {e.model} with the evals harness (as `mathrl eval` would): greedy, the first "
          f"{e.limit} test problems of {e.dataset}, max_new_tokens={e.max_new_tokens}, "
          f"reward.style={ecfg.reward.style}, engine {ecfg.rollout.engine} -> {where}")
    summary = evaluate_model(ecfg, e.model, where, split="test")
    steps = by_steps(where, load_problems(ecfg.data.prepared_dir, e.dataset, "test", limit=e.limit))
    print(f"sft: greedy accuracy on {summary['n_problems']} test problems: {summary['accuracy']:.3f} "
          f"(by steps: {steps})")
    return {"accuracy": summary["accuracy"], "n": summary["n_problems"], "by_steps": steps,
            "eval": {"dir": str(where), "dataset": e.dataset, "split": "test", "limit": e.limit, "greedy": True,
                     "max_new_tokens": e.max_new_tokens, "style": ecfg.reward.style, "engine": ecfg.rollout.engine}}


def main(cfg: RunConfig) -> int:
    """`mathrl sft`: fine-tune (unless current), then evaluate (unless current); write the report."""
    from pipeline import determinism

    s = cfg.sft
    out = Path(s.output)
    report_path = out / REPORT
    if Path(s.init).resolve() == Path(cfg.model.tiny_dir).resolve() and not Path(s.init).is_dir():
        from pipeline.stages import build_tiny  # `make sft` on a fresh clone: build the tiny base first

        build_tiny.main(cfg)
    weights = fingerprint(cfg)
    trained = freshness.is_current(out, weights) and report_path.is_file()
    report = json.loads(report_path.read_text()) if trained else {}
    dataset = eval_dataset(cfg) if s.eval_limit else None
    ecfg = None if dataset is None else eval_config(cfg, dataset)
    evaluated = ecfg is None or (trained and "accuracy" in report
                                 and freshness.is_current(out / EVAL_DIR, _eval_fingerprint(ecfg, weights)))
    if trained:
        print(f"sft: {out} is up to date (same init, data and settings); skipping the training")
    if trained and evaluated:
        if ecfg is None:
            report_path.write_text(json.dumps({k: v for k, v in report.items() if k not in EVAL_KEYS}, indent=1))
        else:
            print(f"sft: {out / EVAL_DIR} is up to date: greedy accuracy {report['accuracy']:.3f} on {report['n']} "
                  "test problems")
        return 0
    determinism.apply(cfg, "sft")
    if not trained:
        report = train_and_save(cfg)
        report_path.write_text(json.dumps(report, indent=1))
        freshness.mark_current(out, weights)
    report = {k: v for k, v in report.items() if k not in EVAL_KEYS}
    if ecfg is not None:
        report.update(evaluate(ecfg))
    report_path.write_text(json.dumps(report, indent=1))
    if ecfg is not None:
        freshness.mark_current(out / EVAL_DIR, _eval_fingerprint(ecfg, weights))
    return 0


__all__ = ["EVAL_DIR", "REPORT", "eval_config", "eval_dataset", "fingerprint", "main"]
