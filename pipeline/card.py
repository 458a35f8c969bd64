"""The model card of a GRPO run: ``<run dir>/final/README.md`` in the Hugging Face Hub's format.

YAML front matter (license, base_model, datasets, tags, model-index with the eval results) that
``huggingface_hub`` reads, then: what the model is, the resolved config's key settings, an eval
table with each eval's protocol and a link to its report, the data and their licences, and the
command that produced it. ``mathrl train`` writes it when training ends; ``mathrl run`` rewrites it
after the evals that follow training. Each linked eval report is copied into ``final/eval/<tag>/``
and the resolved config into ``final/mathrl_config.yaml``, so the links work in the folder and on
the Hub alike (`mathrl push` uploads ``final/``).

Periodic evals (``eval/step_N``) and evals of step checkpoints are left out: the card is about
``final/``. A base model given as a local directory is named in the text only, since the Hub's
``base_model`` must be a Hub id; the licence of the weights is the base model's, read from its
card when one is on disk, else ``other`` with a sentence saying so.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from pipeline.config import RunConfig, save_config
from pipeline.config.schema import MIX
from pipeline.data.prepare import LICENCES, SOURCES

CARD = "README.md"
REPORT_FILES = ("report.md", "summary.json", "accuracy.png")
_HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
_CHECKPOINT_EVAL = re.compile(r"(^|_)step_\d+$")


def run_evals(run_dir: Path) -> list[tuple[str, dict]]:
    """(tag, summary) of each eval in ``run_dir/eval`` of the base model (tags ending in "before")
    or of ``final/``; base model first."""
    found = []
    for path in sorted(Path(run_dir).glob("eval/*/summary.json")):
        tag = path.parent.name
        if not _CHECKPOINT_EVAL.search(tag):
            found.append((tag, json.loads(path.read_text())))
    return sorted(found, key=lambda item: not item[0].endswith("before"))


def _hub_id(name_or_path: str) -> str | None:
    return name_or_path if _HUB_ID.match(name_or_path) and not Path(name_or_path).exists() else None


def base_licence(name_or_path: str) -> str | None:
    """The base model's licence from its model card on disk (a local folder, or the Hub cache)."""
    from huggingface_hub import ModelCard, try_to_load_from_cache

    path = Path(name_or_path) / CARD
    if not path.is_file() and _hub_id(name_or_path):
        cached = try_to_load_from_cache(name_or_path, CARD)
        path = Path(cached) if isinstance(cached, str) else path
    return ModelCard.load(path).data.license if path.is_file() else None


def _sampling(s: dict) -> str:
    return "greedy" if s.get("greedy") else f"{s['n_samples']} samples at T = {s['temperature']:g}"


def _protocol(s: dict) -> str:
    return (f"{_sampling(s)}, template `{s.get('template')}`{' (chat)' if s.get('chat') else ''}, "
            f"{s.get('few_shot', 0)}-shot, at most {s.get('max_new_tokens')} new tokens")


def _dataset(name: str) -> tuple[str, str]:
    """(Hub dataset id or the name itself, display name)."""
    split = next(iter(SOURCES[name].values()), None) if name in SOURCES else None
    return (split.hub_id if split else name), {"gsm8k": "GSM8K", "math": "MATH", "math500": "MATH-500"}.get(name, name)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _eval_results(cfg: RunConfig, evals: list[tuple[str, dict]]) -> list:
    from huggingface_hub import EvalResult

    out = []
    for tag, s in evals:
        if tag.endswith("before"):
            continue
        hub_id, name = _dataset(s["dataset"])
        metrics = [("accuracy", s["accuracy"],
                    "greedy pass@1" if s.get("greedy") else "mean accuracy (sampled pass@1)")]
        if not s.get("greedy"):
            metrics += [(f"pass@{k}", v, f"pass@{k}") for k, v in s["pass@k"].items() if k != "1"]
            metrics += [(f"maj@{k}", v, f"maj@{k}") for k, v in s["maj@k"].items() if k != "1"]
        out += [EvalResult(task_type="text-generation", dataset_type=hub_id, dataset_name=name,
                           dataset_split=cfg.eval.split, metric_type=kind, metric_value=round(100 * value, 2),
                           metric_name=label if s.get("greedy") else f"{label}, {_sampling(s)}")
                for kind, value, label in metrics]
    return out


def front_matter(cfg: RunConfig, evals: list[tuple[str, dict]], licence: str | None) -> str:
    from huggingface_hub import ModelCardData

    trained = cfg.train.task.split(MIX)
    hub_data = [_dataset(d)[0] for d in trained if d in SOURCES]
    results = _eval_results(cfg, evals)
    data = ModelCardData(
        license=licence or "other", base_model=_hub_id(cfg.model.name_or_path), datasets=hub_data or None,
        library_name="peft" if cfg.model.lora else "transformers", pipeline_tag="text-generation",
        tags=["mathrl", "grpo", "reinforcement-learning", "math", "verifiable-rewards"],
        model_name=cfg.name if results else None, eval_results=results or None)
    return f"---\n{data.to_yaml()}\n---\n"


def _counts(cfg: RunConfig, split: str) -> str:
    """", 7,473 problems" from the data stage's manifest, when it has every part of train.task."""
    path = Path(cfg.data.prepared_dir) / "manifest.json"
    manifest = json.loads(path.read_text()) if path.is_file() else {}
    counts = [manifest.get(d, {}).get("counts", {}).get(split) for d in cfg.train.task.split(MIX)]
    return f", {sum(counts):,} problems" if counts and None not in counts else ""


def _warm_start(cfg: RunConfig) -> list[tuple[str, str]]:
    """How the base model was made, when the same `mathrl run` made it."""
    rows = []
    if "build-tiny" in cfg.stages:
        m = cfg.model
        rows.append(("from scratch", f"`{m.tiny_dir}`: `mathrl build-tiny`, a Qwen2-architecture model, "
                                     f"{m.tiny_layers} layers, width {m.tiny_hidden_size}, "
                                     f"vocabulary {m.tiny_vocab_size}, random init"))
    if "sft" in cfg.stages:
        s = cfg.sft
        rows.append(("warm start", f"SFT of `{s.init}` on `{s.task}` reference solutions ({s.steps} steps, "
                                   f"batch {s.batch_size}, lr {s.lr:g}, {s.corrupt_frac:.0%} with one wrong step) "
                                   f"-> `{s.output}`"))
    return rows


def _settings(cfg: RunConfig) -> list[str]:
    t, r = cfg.train, cfg.rollout
    kl = (f"beta = {t.beta:g}, {t.kl_estimator} estimator, in the {t.kl_in}" if t.beta
          else "beta = 0 (no reference model)")
    lora = (f"LoRA r = {cfg.model.lora_r}, alpha = {cfg.model.lora_alpha} on {', '.join(cfg.model.lora_target_modules)}"
            if cfg.model.lora else "full fine-tune")
    rows = [*_warm_start(cfg), ("base model", f"`{cfg.model.name_or_path}`"),
            ("training data", f"`{t.task}`, train split{_counts(cfg, 'train')}"),
            ("algorithm", f"GRPO, {t.advantage} supervision, loss `{t.loss_type}`, "
                          f"advantages scaled by {t.adv_scale} std"),
            ("steps", f"{t.steps} x {t.questions_per_step} questions x G = {r.group_size} completions, "
                      f"{t.num_iterations} pass(es) x {t.mini_batches} mini-batch(es) per step"),
            ("optimizer", f"AdamW, lr {t.lr:g} ({t.lr_schedule}, {t.warmup_steps} warmup steps), "
                          f"weight decay {t.weight_decay:g}, grad clip {t.max_grad_norm:g}"),
            ("clipping", f"ratio in [{1 - t.clip_low:g}, {1 + t.clip_high:g}], {t.importance_level} level"),
            ("KL", kl), ("rewards", ", ".join(f"{k} {v:g}" for k, v in cfg.reward.weights.items())),
            ("sampling", f"T = {r.temperature:g}, top-p {r.top_p:g}, at most {r.max_new_tokens} new tokens, "
                         f"engine `{r.engine}`"),
            ("prompt", f"template `{cfg.prompt.template}`{' in the chat template' if cfg.prompt.chat else ''}, "
                       f"{cfg.prompt.few_shot}-shot"),
            ("weights", f"{lora}; {cfg.model.dtype}, master weights {t.master_dtype}"), ("seed", str(cfg.seed))]
    return ["| setting | value |", "|---|---|", *[f"| {k} | {v} |" for k, v in rows]]


def _eval_table(cfg: RunConfig, evals: list[tuple[str, dict]]) -> list[str]:
    if not evals:
        return ["No evaluation of this model yet (`mathrl run` with `eval` in `stages` adds one)."]
    lines = ["| model | dataset | protocol | accuracy % | pass@k / maj@k % | no answer % | report |",
             "|---|---|---|---:|---|---:|---|"]
    for tag, s in evals:
        who = f"base `{s.get('model')}`" if tag.endswith("before") else "**this model**"
        k = "" if s.get("greedy") else ", ".join(
            f"pass@{k} {_pct(v)} / maj@{k} {_pct(s['maj@k'][k])}" for k, v in s["pass@k"].items() if k != "1")
        lines.append(f"| {who} | {_dataset(s['dataset'])[1]} ({cfg.eval.split}, {s['n_problems']} problems) | "
                     f"{_protocol(s)} | {_pct(s['accuracy'])} | {k or '-'} | {_pct(s['extraction_failure_rate'])} | "
                     f"[report](eval/{tag}/report.md) |")
    return lines + ["", "Accuracy is graded by `rewards.check` (answer equivalence: exact, numeric, then "
                    "math-verify/sympy); pass@k is the unbiased estimator over all samples, maj@k the majority "
                    "answer of the first k."]


def _data_rows(cfg: RunConfig, evals: list[tuple[str, dict]], raw_dir: str) -> list[str]:
    uses: dict[str, list[str]] = {}
    for d in cfg.train.task.split(MIX):
        uses.setdefault(d, []).append("training")
    for _, s in evals:
        d = s["dataset"].split("/")[0]  # "gsm-synth/test_longer": another split of the same dataset
        if "evaluation" not in uses.setdefault(d, []):
            uses[d].append("evaluation")
    lines = ["| dataset | used for | source | licence |", "|---|---|---|---|"]
    for d, used in uses.items():
        lic = LICENCES.get(d)
        text = f"{lic.spdx}, {lic.holder}" if lic else "the user's own file: see its source"
        files = ", ".join(f"`{raw_dir}/{f}`" for f in lic.files) if lic else ""
        source = _dataset(d)[0] if d in SOURCES else ("mathrl's generator" if d in LICENCES else f"`{d}`")
        lines.append(f"| {_dataset(d)[1]} | {', '.join(used)} | {source} | {text}{'; ' + files if files else ''} |")
    return lines


def _version() -> str:
    """mathrl's version, and its git commit when running from a checkout."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        text = f"mathrl {version('mathrl')}"
    except PackageNotFoundError:
        text = "mathrl (not installed as a package)"
    commit = _commit()
    return f"{text}, commit {commit}" if commit else text


def _commit() -> str:
    """The git commit of mathrl's own checkout, ``-dirty`` with local changes ('' when installed)."""
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return ""
    try:
        out = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty", "--abbrev=12"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def render(cfg: RunConfig, evals: list[tuple[str, dict]], command: str | None, licence: str | None,
           curves: bool) -> str:
    lines = [f"# {cfg.name}", "",
             f"`{cfg.model.name_or_path}` trained with GRPO (group relative policy optimization, Shao et al. 2024, "
             f"DeepSeekMath) on `{cfg.train.task}` math word problems, rewarded by rule-based answer checking "
             "(verifiable rewards), with mathrl.", "", "## Training", "", *_settings(cfg), ""]
    if curves:
        lines += ["![training curves](curves.png)", ""]
    lines += ["## Evaluation", "", *_eval_table(cfg, evals), "", "## Data and licences", "",
              *_data_rows(cfg, evals, cfg.data.raw_dir), "",
              "The weights are under the base model's licence" + (f" (`{licence}`)." if licence else
              ": mathrl does not know it, so the front matter says `license: other`; set it before publishing."), "",
              "## Reproduce", "", "```bash", command or "mathrl train --config mathrl_config.yaml output_dir=<new dir>",
              "```", "",
              f"{_version()}. The resolved config is "
              "[mathrl_config.yaml](mathrl_config.yaml): "
              "`mathrl train --config mathrl_config.yaml output_dir=<new dir>` "
              "repeats the GRPO stage with exactly these settings."]
    return "\n".join(lines) + "\n"


def write_card(run_dir: Path, cfg: RunConfig, command: str | None = None) -> Path:
    """Write ``run_dir/final/README.md`` (and copy the linked files next to it); returns its path."""
    run_dir = Path(run_dir)
    final = run_dir / "final"
    if not final.is_dir():
        raise FileNotFoundError(f"no trained model in {final}: the model card describes final/")
    evals = run_evals(run_dir)
    for tag, _ in evals:
        (final / "eval" / tag).mkdir(parents=True, exist_ok=True)
        for name in REPORT_FILES:
            if (run_dir / "eval" / tag / name).is_file():
                shutil.copy2(run_dir / "eval" / tag / name, final / "eval" / tag / name)
    save_config(cfg, final / "mathrl_config.yaml")
    curves = (run_dir / "curves.png").is_file()
    if curves:
        shutil.copy2(run_dir / "curves.png", final / "curves.png")
    licence = base_licence(cfg.model.name_or_path)
    path = final / CARD
    path.write_text(front_matter(cfg, evals, licence) + "\n" + render(cfg, evals, command, licence, curves))
    return path
