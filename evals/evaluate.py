"""Evaluate a model in memory on gsm8k, math, math500 or gsm-synth: the loop every eval runs.

``evaluate(model, tokenizer, problems, ...)`` builds prompts with the training template (zero- or
few-shot), samples through an engine (HF generate, a colocated vLLM or a `mathrl vllm-serve`
server, built by the same factory as training's: ``eval_engine``), grades with ``rewards.check``
and writes results.jsonl, summary.json, report.md and accuracy.png when given a folder.
``evaluate_with_config`` takes every setting from a run config; ``periodic_eval(cfg)`` wraps it as
the callable the trainer runs every ``train.eval_every`` steps on the live policy (the stages hand
it to the trainer: grpo/ never imports evals). `mathrl eval` is ``pipeline/stages/eval.py``.

Deviations from the papers' protocols:
1. maj@k and pass@k use the first k of the n samples (pass@k with the unbiased estimator over
   all n); papers differ on this and rarely say.
2. Few-shot examples are the first k train problems with their reference solutions, not the
   hand-written chain-of-thought exemplars of Wei et al. 2022.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from evals.data import few_shot_examples
from evals.harness import generate_records, score_records, summarize
from evals.report import write_outputs
from pipeline.config import RunConfig
from pipeline.data.problems import load_problems
from pipeline.prompts import build_prompt
from pipeline.rollout.base import SamplingParams
from pipeline.rollout.factory import build_engine


def evaluate(model, tokenizer, problems: list[dict], *, engine=None, template: str = "gsm8k",
             chat: bool = True, examples: list[tuple[str, str]] = (), n_samples: int = 1,
             temperature: float = 0.0, top_p: float = 1.0, ks: list[int] = (1,), max_new_tokens: int = 256,
             style: str = "auto", timeout: float = 5.0, batch_size: int = 64, seed: int = 0,
             output_dir: str | Path | None = None, model_name: str = "", dataset: str = "",
             progress: bool = True) -> dict:
    """Sample, grade and summarise; write the outputs when ``output_dir`` is given.

    ``engine`` is any RolloutEngine already holding the model (e.g. the trainer's vLLM engine);
    None builds an HFEngine on ``model``. Returns the summary dict (see ``summarize``; keys
    accuracy, pass@k, maj@k, extraction_failure_rate, by_subject, by_level, ...). The sampling
    settings are checked where they come from (``EvalConfig``, pipeline/config/checks.py); a k
    larger than ``n_samples`` fails in ``pass_at_k`` with a message naming the keys.
    """
    ks = list(ks)
    start = time.time()
    if engine is None:
        from pipeline.rollout.hf_engine import HFEngine
        engine = HFEngine(model, tokenizer, batch_size=batch_size)
    prompts = [build_prompt(p["question"], template=template, tokenizer=tokenizer, chat=chat,
                            examples=list(examples)) for p in problems]
    # Greedy decoding needs no seed; not seeding leaves the caller's RNG alone (trainer's eval).
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                            seed=seed if temperature > 0 else None)
    records = generate_records(engine, problems, prompts, n=n_samples, params=params, progress=progress)
    score_records(records, style=style, ks=ks, timeout=timeout, progress=progress)
    summary = {"model": model_name, "dataset": dataset, **summarize(records, ks),
               "n_samples": n_samples, "temperature": temperature, "greedy": n_samples == 1 and temperature <= 0,
               "ks": ks, "template": template, "chat": chat, "few_shot": len(examples), "style": style,
               "max_new_tokens": max_new_tokens, "seconds": time.time() - start}
    if output_dir is not None:
        write_outputs(output_dir, records, summary)
    return summary


def evaluate_with_config(model, tokenizer, cfg: RunConfig, *, dataset: str | None = None, split: str | None = None,
                         limit: int | None = None, engine=None, output_dir: str | Path | None = None,
                         progress: bool = False, model_name: str | None = None) -> dict:
    """``evaluate`` with every setting taken from ``cfg`` (prompt, eval, reward, rollout sections).

    The trainer's periodic eval calls this with ``dataset=cfg.train.task``,
    ``limit=cfg.train.eval_limit`` and ``model_name="policy@step N"``; ``mathrl eval`` calls it with
    the eval section's values. ``model_name`` (default ``model.name_or_path``) is what the summary
    says was evaluated.
    """
    dataset = dataset or cfg.eval.dataset
    split = split or cfg.eval.split
    limit = cfg.eval.limit if limit is None else limit
    problems = load_problems(cfg.data.prepared_dir, dataset, split, limit=limit)
    examples = few_shot_examples(dataset, cfg.prompt.few_shot, cfg.prompt.template, cfg.data.prepared_dir)
    return evaluate(model, tokenizer, problems, engine=engine, template=cfg.prompt.template, chat=cfg.prompt.chat,
                    examples=examples, n_samples=cfg.eval.n_samples, temperature=cfg.eval.temperature,
                    top_p=cfg.rollout.top_p, ks=cfg.eval.ks, max_new_tokens=cfg.eval.max_new_tokens,
                    style=cfg.reward.style, timeout=cfg.reward.timeout, batch_size=cfg.rollout.batch_size,
                    seed=cfg.seed, output_dir=output_dir, model_name=model_name or cfg.model.name_or_path,
                    dataset=dataset if split == "test" else f"{dataset}/{split}", progress=progress)


def greedy(cfg: RunConfig) -> RunConfig:
    """The same config with greedy single-sample evaluation."""
    return dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, n_samples=1, temperature=0.0, ks=[1]))


def is_greedy(cfg: RunConfig) -> bool:
    return cfg.eval.n_samples == 1 and cfg.eval.temperature <= 0


def eval_settings(cfg: RunConfig) -> dict[str, RunConfig]:
    """tag -> config of each eval a run makes: the configured one (tag ""), plus a greedy one
    (tag "greedy_") when the configured eval samples."""
    return {"": cfg} if is_greedy(cfg) else {"": cfg, "greedy_": greedy(cfg)}


def decoding(cfg: RunConfig) -> str:
    """"greedy" or "sampled": how an eval config decodes (the name of its metrics)."""
    return "greedy" if is_greedy(cfg) else "sampled"


def periodic_eval(cfg: RunConfig):
    """The trainer's periodic eval (``train.eval_every``, and step 0 with ``train.eval_on_start``) on
    the live policy with the trainer's own engine: the first ``train.eval_limit`` problems of
    ``train.task``'s ``eval.split`` and of each of ``eval.extra_splits``, each with the configured
    decoding and, when that samples, greedily too. Returns ``fn(model, tokenizer, engine, out_dir,
    step=None) -> summary`` of the configured eval on ``eval.split``, whose ``metrics`` holds every
    accuracy (``eval/sampled_accuracy``, ``eval/greedy_accuracy``, ``eval/<split>/greedy_accuracy``, ...);
    summaries name what they evaluated, ``policy@step N``."""
    settings = eval_settings(cfg)

    def run(model, tokenizer, engine, out_dir: Path | None, step: int | None = None) -> dict:
        name = f"policy@step {step}" if step is not None else None
        main, metrics = None, {}
        for split in [cfg.eval.split, *cfg.eval.extra_splits]:
            for tag, c in settings.items():
                sub = f"{'' if split == cfg.eval.split else split + '_'}{tag}".rstrip("_")
                where = None if out_dir is None else (out_dir / sub if sub else out_dir)
                summary = evaluate_with_config(model, tokenizer, c, dataset=cfg.train.task, split=split,
                                               limit=cfg.train.eval_limit, engine=engine, output_dir=where,
                                               model_name=name)
                prefix = "eval/" if split == cfg.eval.split else f"eval/{split}/"
                metrics[f"{prefix}{decoding(c)}_accuracy"] = summary["accuracy"]
                if summary.get("tool"):  # rollout.tools: how much the policy calls the tool in the eval
                    metrics[f"{prefix}{decoding(c)}_tool_calls"] = summary["tool"]["calls_per_solution"]
                main = main or summary
        return {**main, "metrics": metrics}
    return run


def eval_engine(cfg: RunConfig, model, tokenizer, model_path: str):
    """The rollout engine ``rollout.engine`` names (``pipeline.rollout.factory``) for ``model``,
    loaded from ``model_path``. vLLM loads full models only: for a LoRA adapter it starts on the
    base model and then takes the merged weights of ``model`` through ``sync_weights``."""
    from evals.loading import adapter_base

    base = adapter_base(model_path)
    return build_engine(cfg, model, tokenizer, load_path=base or model_path, holds_weights=base is None)


def evaluate_model(cfg: RunConfig, model_path: str, out_dir: Path, split: str | None = None) -> dict:
    """Load ``model_path`` (any source ``evals.loading`` reads), evaluate it with the eval section's
    settings on ``split`` (default ``eval.split``) into ``out_dir``, and close its engine."""
    from evals.loading import load_for_eval

    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, name_or_path=model_path))
    model, tok, path = load_for_eval(model_path, cfg.model.dtype, cfg.device)
    engine = eval_engine(cfg, model, tok, path)
    try:
        return evaluate_with_config(model, tok, cfg, split=split, engine=engine, output_dir=out_dir, progress=True)
    finally:
        engine.close()
