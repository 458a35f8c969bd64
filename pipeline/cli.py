"""The ``mathrl`` command: one subcommand per stage, each reading the same typed run config.

    mathrl <stage> [--config configs/x.yaml] [key=value ...]

Stages: data, build-tiny, sft, train, eval, run (all stages the config lists), vllm-serve,
experiment (outcome vs process supervision), eval-prm (a step scorer on ProcessBench-format data),
seed-grid (GRPO over SFT x GRPO seeds), compare-objectives (every objective variant from one SFT
start), compare-sampling (question samplers on the same rollouts), plan (GPU memory estimate),
config (print every key with its documentation). Each stage is
``pipeline/stages/<stage>.py: main(cfg, ...) -> exit code``, imported (``stage_main``) only when
used so ``mathrl data`` does not pay for torch; before importing it the command pins the CPU kernels
the config's ``cpu_isa`` names (read when torch loads, pipeline/determinism.py). The config and the
stage's options are checked when it loads (pipeline/config/checks.py); the stages that read problems
then prepare the datasets they read and read the user's JSONL files once, before the stage's code is
imported or any model loads.
``mathrl push RUN_DIR --repo ID`` uploads a run's ``final/`` (weights and model card) to the
Hugging Face Hub.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import get_args

# Import names of the `train` extra. `pip install mathrl` alone gives only `rewards` and `sandbox`;
# every stage of this command needs the extra, so a missing one gets a one-line answer.
TRAIN_MODULES = {"torch", "transformers", "tokenizers", "peft", "datasets", "accelerate", "yaml", "matplotlib",
                 "huggingface_hub"}

STAGES = {  # name -> help; the code is pipeline/stages/<name with _ for ->.py (stage_main)
    "data": "prepare GSM8K / MATH / MATH-500 / gsm-synth into data/prepared",
    "build-tiny": "build the tiny Qwen2-style model and tokenizer offline",
    "sft": "supervised warm start on reference solutions",
    "train": "GRPO training (outcome or process supervision)",
    "eval": "evaluate a model on gsm8k / math / math500 / gsm-synth (default: the run's trained model)",
    "run": "every stage in the config's `stages` list, then a short report",
    "vllm-serve": "serve rollouts from a separate vLLM process (trainers use rollout.engine=vllm_server)",
    "experiment": "outcome vs process supervision over experiment.seeds: table, 95%% bands, steps-to-threshold, plot",
    "eval-prm": "a step scorer (rules, PRM, both) on ProcessBench-format JSONL: first-error F1 table",
    "seed-grid": "GRPO on 3 SFT seeds x 3 GRPO seeds, corrupted and clean warm start: table",
    "compare-objectives": "every objective variant (docs/grpo_math.md) from one SFT start, train.steps each: table",
    "compare-sampling": "uniform vs pass-rate vs dynamic sampling from one SFT start, the same questions drawn: table",
    "plan": "estimated GPU memory per component and phase, and whether it fits (--gpu-mem GiB)",
}
PLAN_ARGS = ("gpu_mem", "ranks", "prompt_tokens")  # `mathrl plan` options passed to its stage function
EVAL_PRM_ARGS = ("path", "scorer", "per_subset")  # `mathrl eval-prm` options passed to its stage function
# `mathrl seed-grid` options passed to its stage function
GRID_ARGS = ("sft_seeds", "grpo_seeds", "starts", "workers", "table_only")
COMPARE_ARGS = ("seeded", "seeds", "samplers")  # compare-objectives / compare-sampling options (and table_only)
# Stages that read problems: each first prepares the datasets it reads (pipeline/data/prepare.py:
# prepare_for), so `mathrl eval eval.dataset=math500` works on a fresh clone.
READS_DATA = ("build-tiny", "sft", "train", "eval", "run", "experiment", "seed-grid", "compare-objectives",
              "compare-sampling")
WRITES_CARD = ("train", "run")  # stages that get the command line, for the model card


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except ModuleNotFoundError as e:
        missing = (e.name or "").partition(".")[0]
        if missing not in TRAIN_MODULES:
            raise
        print(f"mathrl: {missing} is not installed; the trainer needs the train extra: "
              "pip install 'mathrl[train]' (rewards and sandbox work without it)", file=sys.stderr)
        return 2


def _main(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="mathrl", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="stage", required=True)
    for name, help_text in STAGES.items():
        p = sub.add_parser(name, help=help_text)
        if name == "eval-prm":  # before the overrides, so the file comes first: eval-prm PATH [key=value ...]
            p.add_argument("path", help="ProcessBench-format JSONL: dataset, question, steps, first_error_step")
        p.add_argument("--config", default=None, help="YAML run config (see configs/)")
        p.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. train.lr=1e-5")
        if name == "eval":
            p.add_argument("--limit", type=int, default=None, help="evaluate only the first N problems (eval.limit)")
        if name == "eval-prm":
            p.add_argument("--scorer", default="rules", help="rules, prm (reward.prm) or both (reward.prm_mix)")
            p.add_argument("--per-subset", type=int, default=0, help="only the first N solutions of each subset")
        if name == "plan":
            p.add_argument("--gpu-mem", type=float, default=80.0, help="memory of one GPU in GiB (default 80)")
            p.add_argument("--ranks", type=int, default=1,
                           help="processes of the run (torchrun ranks; FSDP shards over them)")
            p.add_argument("--prompt-tokens", type=int, default=512,
                           help="longest prompt of a micro-batch (default 512)")
        if name == "seed-grid":
            p.add_argument("--sft-seeds", type=seed_list, default=(0, 1, 2),
                           help="comma-separated SFT seeds (default 0,1,2)")
            p.add_argument("--grpo-seeds", type=seed_list, default=(0, 1, 2),
                           help="comma-separated GRPO seeds (default 0,1,2)")
            p.add_argument("--warm-starts", dest="starts", type=start_list, default=seed_grid_starts(),
                           help="comma-separated: corrupted (the config's sft corruption), clean (default both)")
            p.add_argument("--workers", type=positive_int, default=1,
                           help="(warm start, SFT seed) lanes run at once, one process each (default 1)")
            p.add_argument("--table-only", action="store_true",
                           help="tabulate the finished runs of these seeds; run nothing")
        if name == "compare-objectives":
            p.add_argument("--seeded", type=variant_list, default=("grpo", "dr-grpo"),
                           help="comma-separated variants run on every seed, the first the reference "
                                "(default grpo,dr-grpo)")
            p.add_argument("--seeds", type=seed_list, default=(0, 1, 2),
                           help="comma-separated GRPO seeds of the seeded variants (default 0,1,2; others: the first)")
            p.add_argument("--table-only", action="store_true",
                           help="tabulate the finished runs; run nothing")
        if name == "compare-sampling":
            p.add_argument("--seeds", type=seed_list, default=(0, 1, 2),
                           help="comma-separated GRPO seeds, each sampler on every one (default 0,1,2)")
            p.add_argument("--samplers", type=sampler_list, default=("uniform", "pass_rate", "dynamic"),
                           help="comma-separated samplers to run, the first the reference (default "
                                "uniform,pass_rate,dynamic)")
            p.add_argument("--table-only", action="store_true",
                           help="tabulate the finished runs of these seeds; run nothing")
    sub.add_parser("config", help="list every config key with its type, default and meaning")
    push = sub.add_parser("push", help="upload a run's final/ (weights + model card) to the Hugging Face Hub")
    push.add_argument("run_dir", help="the run directory (holds final/)")
    push.add_argument("--repo", required=True, help="Hub repository id, e.g. user/model-name")
    push.add_argument("--private", action="store_true", help="create the repository private")
    # Overrides may also follow options (`eval-prm PATH --scorer prm reward.prm=X`): argparse stops
    # filling the `overrides` positional at the first option, so key=value leftovers join it here.
    args, rest = parser.parse_known_args(argv)
    if any("=" not in r or r.startswith("-") for r in rest) or (rest and not hasattr(args, "overrides")):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if rest:
        args.overrides = [*getattr(args, "overrides", []), *rest]
    from pipeline.config import ConfigError, load_run_config
    from pipeline.config.checks import check_options
    from pipeline.data.problems import DataError

    if args.stage == "config":
        from pipeline.stages import config
        return config.main()
    if args.stage == "push":
        from pipeline.stages import push
        return push.main(args.run_dir, args.repo, private=args.private)
    kwargs = {k: getattr(args, k) for k in (*PLAN_ARGS, *EVAL_PRM_ARGS, *GRID_ARGS, *COMPARE_ARGS) if hasattr(args, k)}
    try:
        extra = [f"eval.limit={args.limit}"] if getattr(args, "limit", None) is not None else []
        cfg = load_run_config(args.config, [*args.overrides, *extra])
        check_options(cfg, args.stage, kwargs)
    except ConfigError as e:
        print(f"mathrl: config error: {e}", file=sys.stderr)
        return 2
    from pipeline import determinism

    determinism.pin_cpu_kernels(cfg.cpu_isa)  # read when torch loads: before the stage imports it
    if args.stage in WRITES_CARD:
        kwargs["command"] = command_line(sys.argv[1:] if argv is None else argv)
    try:
        if args.stage in READS_DATA:
            from pipeline.data.prepare import prepare_for
            prepare_for(cfg, args.stage)
        result = stage_main(args.stage)(cfg, **kwargs)
    except ConfigError as e:  # a value the stage cannot work with, found once it looked (one line, not a traceback)
        print(f"mathrl {args.stage}: config error: {e}", file=sys.stderr)
        return 2
    except (OSError, DataError) as e:  # missing files, models or data: say what, not a traceback
        if os.environ.get("MATHRL_DEBUG"):
            raise
        print(f"mathrl {args.stage}: {e} (set MATHRL_DEBUG=1 for the traceback)", file=sys.stderr)
        return 1
    return int(result or 0)


def stage_main(name: str):
    """The ``main`` of stage ``name``, imported now (plain imports: readers and tools can follow them)."""
    if name == "data":
        from pipeline.stages.data import main
    elif name == "build-tiny":
        from pipeline.stages.build_tiny import main
    elif name == "sft":
        from pipeline.stages.sft import main
    elif name == "train":
        from pipeline.stages.train import main
    elif name == "eval":
        from pipeline.stages.eval import main
    elif name == "run":
        from pipeline.stages.run import main
    elif name == "vllm-serve":
        from pipeline.stages.vllm_serve import main
    elif name == "experiment":
        from pipeline.stages.experiment import main
    elif name == "eval-prm":
        from pipeline.stages.eval_prm import main
    elif name == "seed-grid":
        from pipeline.stages.seed_grid import main
    elif name == "compare-objectives":
        from pipeline.stages.compare_objectives import main
    elif name == "compare-sampling":
        from pipeline.stages.compare_sampling import main
    elif name == "plan":
        from pipeline.stages.plan import main
    else:
        raise KeyError(f"no stage {name!r}")
    return main


def positive_int(text: str) -> int:
    """``"2"`` -> 2, else a usage error naming the value."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number >= 1")
    return value


def seed_grid_starts() -> tuple[str, ...]:
    """The warm starts `mathrl seed-grid` knows (the schema's ``WarmStart``), in order."""
    from pipeline.config.schema import WarmStart

    return get_args(WarmStart)


def start_list(text: str) -> tuple[str, ...]:
    """``"clean"`` -> ``("clean",)``: warm starts of `mathrl seed-grid`, else a usage error."""
    starts = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    if not starts or any(s not in seed_grid_starts() for s in starts):
        raise argparse.ArgumentTypeError(f"{text!r}: expected {', '.join(seed_grid_starts())} "
                                         "or several joined by commas")
    return starts


def variant_list(text: str) -> tuple[str, ...]:
    """``"grpo,sapo"`` -> ``("grpo", "sapo")``: distinct variants of `mathrl compare-objectives`, else a usage error."""
    from pipeline.stages.compare_objectives import VARIANTS

    names = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    if not names or any(n not in VARIANTS for n in names):
        raise argparse.ArgumentTypeError(f"{text!r}: expected variants among {', '.join(VARIANTS)}, joined by commas")
    return names


def sampler_list(text: str) -> tuple[str, ...]:
    """``"uniform,dynamic"`` -> ``("uniform", "dynamic")``: distinct samplers of `mathrl compare-sampling`, else a
    usage error."""
    from pipeline.stages.compare_sampling import SAMPLERS

    names = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    if not names or any(n not in SAMPLERS for n in names):
        raise argparse.ArgumentTypeError(f"{text!r}: expected samplers among {', '.join(SAMPLERS)}, joined by commas")
    return names


def seed_list(text: str) -> tuple[int, ...]:
    """``"0,1"`` -> ``(0, 1)``: distinct non-negative seeds, else a usage error naming the value."""
    try:
        seeds = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        seeds = ()
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"need distinct non-negative integers separated by commas, got {text!r}")
    return seeds


def command_line(argv: list[str]) -> str:
    """The command as a user would type it again: `mathrl ...`, or torchrun's form under torchrun."""
    world, local = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    launcher = (f"torchrun --nnodes {max(1, world // local)} --nproc_per_node {local} -m pipeline"
                if world > 1 else "mathrl")
    return f"{launcher} {shlex.join(argv)}"


if __name__ == "__main__":
    raise SystemExit(main())
