"""Benchmark: `mathrl train` (pipeline.grpo.trainer.train), synchronous and pipelined, against TRL 1.16's
GRPOTrainer, same run.

Both trainers get the same locally built tiny Qwen2 model, the same gsm-synth questions in the
same order (our QuestionSampler's order; TRL with shuffle_dataset=False), the same prompt strings
(pipeline.prompts.build_prompt), G, micro-batch, max completion length, sampling (temperature 1,
no top-p/top-k), reward (`--reward`, default `tests.helpers.digit_fraction`, with weight 1 plus the
`correct` checker with weight 0, which our trainer always scores and logs), beta (`--beta`, default
0.04, with a frozen reference copy), `grpo` loss aggregation, clip 0.2, mu = 1, AdamW (betas
0.9/0.99, constant lr, grad clip 1.0), fp32, CPU, HF `generate` for rollout (no vLLM), one
optimizer step per rollout batch.
TRL runs with logging, saving and gradient checkpointing off (its GRPOConfig turns the latter and
bf16 on by default); ours with `train.save_every=0` (the one save after the last step is outside
the timed window) and its always-on metrics.jsonl / samples.jsonl writes inside it.

Three trainers: ours synchronous (`sync`, the default loop), ours pipelined (`pipe`:
train.async_staleness=1 with the rollout.engine=hf_process worker, rollout.tis_cap=2; docs/pipelined.md)
and TRL. The pipelined trainer is two processes, the trainer and its generate worker, each with
`--threads` threads: it uses two cores where the others use one, which is the point of it (the
worker generates batch t+1 while the trainer updates on batch t); ours synchronous and TRL cannot
use a second process. Completions per second = questions x G / seconds per step.

Each trainer runs in its own child process (`--child ours|pipelined|trl`). Measured there:
- seconds per step: wall time between the ends of consecutive optimizer steps, so each interval
  holds everything one step does (rollout, rewards, reference log-probs, update, logging). Step 1
  is a warm-up and is dropped, and so is the last (the pipelined trainer generates nothing ahead
  during it, so it would flatter that trainer); model loading and setup happen before step 1 and are not counted.
  Hooks: ours wraps the batch source's `take` (loop start) and `RunLog.log` (step end); TRL uses a
  TrainerCallback (on_step_begin / on_step_end).
- CPU seconds per step: the CPU time of the child and of its live and reaped descendants (the
  pipelined trainer's generate worker) over the same intervals: what the step computed, far less
  inflated than wall time when other work shares the machine. Ratios are printed on both.
- peak RSS of the whole child (os.wait4's ru_maxrss): what a user sees, imports included.
- loop peak: the peak RSS reached during the training steps minus the RSS just before step 1
  (the kernel's high-water mark is reset there via /proc/self/clear_refs), i.e. the memory the
  training loop itself adds on top of imports, policy, reference and data.
Ratios are ours / TRL: for seconds and memory below 1 means we are faster or smaller, for
completions/s above 1 means more. The pipelined run's peak RSS is the trainer's alone (its worker is
another process, holding one more copy of the model). Completions of an untrained model
rarely stop early, so both sides generate about the same number of tokens; the mean completion
length of each is printed as a check, with per-phase seconds (ours from metrics.jsonl's time/*,
TRL's from its own profiling spans) to show where a difference comes from. The reward row only
shows that both trained on a non-zero signal; it differs because the two samplers' random
streams differ.

Each child runs torch with one thread by default (`--threads`): on a shared 2-core machine two
OpenMP threads per process stall at every barrier when another process holds a core, which made
steps up to 10x slower and far noisier in trials. Repeats alternate which trainer runs first.
The "fastest" row (each side's quickest timed step) is the least load-sensitive wall-time estimate.

Variants (`--variant NAME=KEY=VALUE[,KEY=VALUE...]`, repeatable) run our synchronous trainer again in
the same run with those config overrides, e.g. `skip=train.skip_zero_advantage=true` or
`shared=train.forward_layout=shared_prompt`; each gets its own column (ratios over TRL) and a row of
its s/step and CPU s/step over sync's. `--beta 0` and `--reward tests.helpers:digit_fraction_odd_gold`
(0 on even-answer problems: about half the groups flat) give the zero-advantage groups that skipping
saves; the report adds a skipped_frac row when any run skipped rows.

Usage: python benchmarks/bench_trainer.py [--size tiny|default|small|all] [--steps 5] [--repeats 2]
       [--kinds ours pipelined trl]
       [--questions 4] [--group 4] [--max-new-tokens 32] [--micro-batch 8] [--threads 1]
       [--workdir DIR] [--beta 0.04] [--reward module:fn] [--variant NAME=OVERRIDES ...]
The default (tiny model, 5 steps, 2 repeats) takes about 2-3 minutes on 2 busy CPU cores;
`--size all --steps 6 --repeats 3` about 6-10 minutes. Results: docs/bench_trainer.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# tests/conftest.py's tiny model, the CPU default's model (schema defaults, ~1M), and a ~6M one.
SIZES = {
    "tiny": ["model.tiny_hidden_size=64", "model.tiny_layers=2", "model.tiny_heads=2", "model.tiny_kv_heads=1",
             "model.tiny_intermediate_size=128", "model.tiny_vocab_size=512"],
    "default": [],
    "small": ["model.tiny_hidden_size=256", "model.tiny_layers=6", "model.tiny_heads=4", "model.tiny_kv_heads=2",
              "model.tiny_intermediate_size=1024", "model.tiny_vocab_size=1024"],
}
REWARD = "tests.helpers:digit_fraction"
KINDS = ["ours", "pipelined", "trl"]  # ours synchronous, ours pipelined (docs/pipelined.md), TRL


def base_overrides(workdir: Path, size: str) -> list[str]:
    return [f"data.prepared_dir={workdir}/prepared", "data.datasets=gsm-synth", "data.synth_train_size=300",
            "data.synth_test_size=40", f"model.tiny_dir={workdir}/{size}", f"model.name_or_path={workdir}/{size}",
            f"output_dir={workdir}/runs", "device=cpu", "seed=0", *SIZES[size]]


def run_overrides(a, workdir: Path, size: str) -> list[str]:
    """The RunConfig both trainers are configured from (TRL's GRPOConfig is derived from it)."""
    return [*base_overrides(workdir, size), f"name=bench_{size}", "train.resume=never", "train.save_every=0",
            f"train.steps={a.steps}", f"train.questions_per_step={a.questions}", f"rollout.group_size={a.group}",
            f"rollout.max_new_tokens={a.max_new_tokens}", f"train.micro_batch_size={a.micro_batch}",
            f"rollout.batch_size={a.questions * a.group}", "train.lr=1e-5", f"train.beta={a.beta}",
            "train.loss_type=grpo", "train.num_iterations=1", f"reward.weights={{{a.reward}: 1.0}}"]


# ---------------------------------------------------------------- child side: probes and trainers

def _proc_status_mib(key: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _cpu_seconds() -> float:
    """CPU time of this process, its reaped children and its live descendants (read from /proc)."""
    t = os.times()
    total = time.process_time() + t.children_user + t.children_system  # process_time: ns, os.times: ticks
    stats = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:  # the fields after the ")" that closes the command: state, ppid, ..., utime, stime, cutime, cstime
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        stats[int(stat.parent.name)] = (int(fields[1]), sum(int(f) for f in fields[11:15]))
    tree, ticks = {os.getpid()}, 0
    for _ in range(8):  # a few levels of descendants: the worker, and anything it starts
        new = {pid for pid, (ppid, _) in stats.items() if ppid in tree} - tree
        ticks += sum(stats[pid][1] for pid in new)
        tree |= new
    return total + ticks / os.sysconf("SC_CLK_TCK")


class Probe:
    """Step-end timestamps and CPU seconds, and the RSS high-water mark from the start of step 1 on."""

    def __init__(self):
        self.t0 = None
        self.ends: list[float] = []
        self.cpu: list[float] = []  # _cpu_seconds() at the same stamps (less load-sensitive)
        self.base_rss = self.hwm = float("nan")
        self.hwm_reset = False

    def begin(self) -> None:
        if self.t0 is not None:
            return
        self.base_rss = _proc_status_mib("VmRSS")
        try:  # "5" resets VmHWM to the current RSS (Linux >= 4.0)
            Path("/proc/self/clear_refs").write_text("5")
            self.hwm_reset = True
        except OSError:
            pass
        self.t0 = time.perf_counter()
        self.cpu.append(_cpu_seconds())

    def end(self) -> None:
        self.ends.append(time.perf_counter())
        self.cpu.append(_cpu_seconds())
        self.hwm = _proc_status_mib("VmHWM")

    def result(self) -> dict:
        stamps = [self.t0, *self.ends]
        steps = [b - a for a, b in zip(stamps, stamps[1:])]
        cpu = [b - a for a, b in zip(self.cpu, self.cpu[1:])]
        # the last step is dropped too: a pipelined run submits nothing after it, so it would not be typical
        return {"warmup_s": steps[0], "step_s": steps[1:-1], "cpu_step_s": cpu[1:-1], "base_rss_mib": self.base_rss,
                "loop_peak_mib": self.hwm - self.base_rss if self.hwm_reset else float("nan")}


PIPELINED = ["train.async_staleness=1", "rollout.engine=hf_process", "rollout.tis_cap=2"]


def run_ours(a, workdir: Path, size: str, probe: Probe, extra: list[str] = ()) -> dict:
    from pipeline.config import load_run_config
    from pipeline.grpo import trainer
    from pipeline.grpo.run_log import RunLog, read_metrics

    real_source, real_log = trainer.batch_source, RunLog.log

    def batch_source(*args, **kwargs):  # step 1 starts when the loop first asks for a batch
        source = real_source(*args, **kwargs)
        take = source.take

        def timed_take(step, timer):
            probe.begin()
            return take(step, timer)
        source.take = timed_take
        return source

    def log(self, step, metrics):
        real_log(self, step, metrics)
        probe.end()

    trainer.batch_source, RunLog.log = batch_source, log
    cfg = load_run_config(None, [*run_overrides(a, workdir, size), *extra])
    rows = read_metrics(trainer.train(cfg))[1:]  # timed steps only
    keys = ["rollout", "reward", "logprobs", "update"]
    if any("time/rollout_wait" in r for r in rows):  # pipelined: "rollout" is the worker's time (overlapped);
        keys.append("rollout_wait")  # the trainer waited rollout_wait of it
    phases = {key: statistics.mean(r.get(f"time/{key}", 0.0) for r in rows) for key in keys}
    return {"completion_len": statistics.mean(r["completion_len/mean"] for r in rows),
            "skipped_frac": statistics.mean(r.get("skipped_frac", 0.0) for r in rows),
            "reward": statistics.mean(r["reward/mean"] for r in rows), "phases": phases}


def run_pipelined(a, workdir: Path, size: str, probe: Probe) -> dict:
    """Ours with train.async_staleness=1 and the HF worker process (one thread each, --threads)."""
    return run_ours(a, workdir, size, probe, [*PIPELINED, f"rollout.worker_threads={a.threads or 1}"])


def _trl_rewards(reward: str):
    """TRL reward functions: `reward` (module:fn, the one our trainer weighs 1) and `correct` (weight 0)."""
    import importlib

    import rewards

    module, name = reward.split(":")
    fn = getattr(importlib.import_module(module), name)

    def weighted(completions, answer, **_):
        return [fn(c, g) for c, g in zip(completions, answer)]
    weighted.__name__ = name

    def correct(completions, answer, **_):
        return [float(rewards.REWARDS["correct"](c, g, "auto")) for c, g in zip(completions, answer)]
    return [weighted, correct]


def trl_config(cfg, out_dir: Path):
    """TRL's GRPOConfig with every setting that matters taken from our RunConfig."""
    from trl import GRPOConfig

    t, r, n = cfg.train, cfg.rollout, cfg.train.questions_per_step * cfg.rollout.group_size
    if n % t.micro_batch_size:
        raise SystemExit("questions * group must be a multiple of --micro-batch (TRL's gradient accumulation)")
    return GRPOConfig(
        output_dir=str(out_dir), max_steps=t.steps, per_device_train_batch_size=t.micro_batch_size,
        gradient_accumulation_steps=n // t.micro_batch_size, generation_batch_size=n, num_generations=r.group_size,
        max_completion_length=r.max_new_tokens, temperature=r.temperature, top_p=r.top_p, top_k=r.top_k,
        beta=t.beta, loss_type=t.loss_type, epsilon=t.clip_low, epsilon_high=t.clip_high,
        scale_rewards=t.adv_scale, num_iterations=t.num_iterations, importance_sampling_level=t.importance_level,
        mask_truncated_completions=t.mask_truncated, reward_weights=[1.0, 0.0],
        learning_rate=t.lr, lr_scheduler_type="constant", warmup_steps=t.warmup_steps, weight_decay=t.weight_decay,
        adam_beta1=t.adam_betas[0], adam_beta2=t.adam_betas[1], max_grad_norm=t.max_grad_norm, optim="adamw_torch",
        use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False, use_vllm=False,
        model_init_kwargs={"dtype": "float32"}, shuffle_dataset=False, seed=cfg.seed, data_seed=cfg.seed,
        logging_strategy="no", save_strategy="no", report_to="none", dataloader_num_workers=0)


def run_trl(a, workdir: Path, size: str, probe: Probe) -> dict:
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    from pipeline.config import load_run_config
    from pipeline.data.problems import load_problems
    from pipeline.grpo.components import QuestionSampler
    from pipeline.prompts import build_prompt

    cfg = load_run_config(None, run_overrides(a, workdir, size))
    tok = AutoTokenizer.from_pretrained(cfg.model.name_or_path)
    tok.padding_side = "left"
    sampler = QuestionSampler(load_problems(cfg.data.prepared_dir, cfg.train.task, "train"), cfg.seed)
    problems = sampler.take(cfg.train.steps * cfg.train.questions_per_step)  # our trainer's order
    data = Dataset.from_list([{"prompt": build_prompt(p["question"], template=cfg.prompt.template, tokenizer=tok,
                                                      chat=cfg.prompt.chat), "answer": p["answer"]} for p in problems])

    seen: dict[str, list[float]] = {"completions/mean_length": [], "reward": []}
    spans = _trl_phase_spans()

    class Hooks(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            probe.begin()

        def on_step_end(self, args, state, control, **kwargs):
            probe.end()
            for key, values in seen.items():  # TRL clears its metrics when it logs at the end
                values.append(trainer._metrics["train"][key][-1])
            spans.append({})

    trainer = GRPOTrainer(model=cfg.model.name_or_path, reward_funcs=_trl_rewards(a.reward),
                          args=trl_config(cfg, workdir / "runs" / f"trl_{size}"), train_dataset=data,
                          processing_class=tok, callbacks=[Hooks()])
    trainer.train()
    timed = spans[1:-1]  # drop the warm-up step and the empty dict opened after the last step
    phases = {"rollout": statistics.mean(d.get("transformers.generate", 0.0) for d in timed),
              "reward": statistics.mean(d.get("_calculate_rewards", 0.0) for d in timed)}
    # Everything else TRL does before the loss (reference log-probs, advantages, padding).
    phases["logprobs"] = statistics.mean(d.get("_prepare_inputs", 0.0) for d in timed) - sum(phases.values())
    return {"completion_len": statistics.mean(seen["completions/mean_length"]),
            "reward": statistics.mean(seen["reward"]), "phases": phases}


def _trl_phase_spans() -> list[dict[str, float]]:
    """Collect TRL's own profiling spans (it times generate, rewards, _prepare_inputs, compute_loss)
    per optimizer step: the hook adds into the last dict, the step-end callback opens a new one."""
    from trl.extras import profiling

    spans: list[dict[str, float]] = [{}]

    def log_metrics(self, duration: float) -> None:
        name = self.name.split(".", 1)[-1]
        spans[-1][name] = spans[-1].get(name, 0.0) + duration

    profiling.ProfilingContext._log_metrics = log_metrics
    return spans


def child_main(a) -> None:
    import torch

    if a.threads:
        torch.set_num_threads(a.threads)
    probe = Probe()
    workdir, overrides = Path(a.workdir), json.loads(a.extra or "[]")
    if a.child == "ours":  # ours with a variant's overrides (none for the plain sync run)
        extra = run_ours(a, workdir, a.size, probe, overrides)
    else:
        extra = {"pipelined": run_pipelined, "trl": run_trl}[a.child](a, workdir, a.size, probe)
    Path(a.result).write_text(json.dumps({**probe.result(), **extra}))


# ---------------------------------------------------------------- parent side

def setup(workdir: Path, size: str) -> int:
    """Prepared gsm-synth data and the untrained model of this size; returns its parameter count."""
    from pipeline import models
    from pipeline.stages import build_tiny
    from pipeline.config import load_run_config
    from pipeline.data.prepare import prepare

    cfg = load_run_config(None, base_overrides(workdir, size))
    prepare(cfg.data)
    build_tiny.main(cfg)
    return json.loads((Path(cfg.model.tiny_dir) / models.BUILD_INFO).read_text())["params"]


def run_child(kind: str, a, workdir: Path, size: str, name: str = "", extra: list[str] = ()) -> dict:
    """One child of `kind` (a variant: kind "ours" with its `name` and config overrides `extra`)."""
    result = workdir / f"result_{name or kind}_{size}.json"
    result.unlink(missing_ok=True)
    log_path = workdir / f"log_{name or kind}_{size}.txt"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, "--size", size, "--workdir", str(workdir),
           "--result", str(result), "--steps", str(a.steps), "--questions", str(a.questions), "--group",
           str(a.group), "--max-new-tokens", str(a.max_new_tokens), "--micro-batch", str(a.micro_batch),
           "--threads", str(a.threads), "--beta", str(a.beta), "--reward", a.reward, "--extra", json.dumps(list(extra))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "TQDM_DISABLE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if a.threads:
        env.update(OMP_NUM_THREADS=str(a.threads), MKL_NUM_THREADS=str(a.threads))
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage, not all children's
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0 or not result.is_file():
        sys.exit(f"{name or kind} child failed (exit {proc.returncode}); log {log_path}:\n"
                 + log_path.read_text()[-3000:])
    return {**json.loads(result.read_text()), "peak_rss_mib": usage.ru_maxrss / 1024}


def _ratio(x: float, y: float) -> str:
    return f"{x / y:.2f}" if y and y == y and x == x else "n/a"


def report(size: str, params: int, runs: dict[str, list[dict]], completions: int) -> None:
    """Each run's medians (keys: the kinds that ran, then the variants), and ratios over TRL: seconds
    below 1 = faster, completions/s above 1 = more; then each variant's s/step over sync's."""
    def med(rs, key):
        return statistics.median(v for r in rs for v in ([r[key]] if not isinstance(r[key], list) else r[key]))

    names = [k for k in runs if runs[k]]
    label = {"ours": "sync", "pipelined": "pipe", "trl": "TRL"}
    width = {k: max(10, len(label.get(k, k)) + 6) for k in names}  # room for the "/TRL" ratio header
    print(f"\n{size}: {params:,} parameters, {sum(len(r['step_s']) for r in runs['trl'])} timed steps each, "
          f"{completions} completions per step")
    print("  " + f"{'':28s}" + "".join(f"{label.get(k, k):>{width[k]}s}" for k in names)
          + "".join(f"{label.get(k, k) + '/TRL':>{width[k]}s}" for k in names if k != "trl"))
    rows = [("s/step (median)", lambda k: med(runs[k], "step_s")),
            ("s/step (fastest)", lambda k: min(v for r in runs[k] for v in r["step_s"])),
            ("CPU s/step (median)", lambda k: med(runs[k], "cpu_step_s")),
            ("completions/s (median)", lambda k: completions / med(runs[k], "step_s")),
            ("completions/s (fastest)", lambda k: completions / min(v for r in runs[k] for v in r["step_s"])),
            ("completions/CPU s (median)", lambda k: completions / med(runs[k], "cpu_step_s"))]
    rows += [(text, lambda k, key=key: med(runs[k], key)) for text, key in [
        ("peak RSS MiB (whole child)", "peak_rss_mib"), ("loop peak MiB (over start)", "loop_peak_mib"),
        ("RSS before step 1 MiB", "base_rss_mib"), ("warm-up step s", "warmup_s"),
        ("completion tokens (mean)", "completion_len"), ("reward (mean)", "reward")]]
    if any(r.get("skipped_frac") for k in names for r in runs[k]):  # TRL trains on every row
        rows.append(("skipped_frac (mean)", lambda k: statistics.mean(r.get("skipped_frac", 0.0) for r in runs[k])))
    for text, value in rows:
        vals = {k: value(k) for k in names}
        print(f"  {text:28s}" + "".join(f"{vals[k]:{width[k]}.3f}" for k in names)
              + "".join(f"{_ratio(vals[k], vals['trl']):>{width[k]}s}" for k in names if k != "trl"))
    for name in names:
        rs = runs[name]
        phases = {k: statistics.mean(r["phases"][k] for r in rs) for k in rs[0]["phases"]}
        # The rest: bookkeeping, plus TRL's forward/backward and optimizer step (ours: "update"). A
        # pipelined worker's rollout overlaps the step, so only its rollout_wait counts against it.
        busy = sum(v for k, v in phases.items() if k != "rollout" or "rollout_wait" not in phases)
        phases["rest"] = statistics.mean(v for r in rs for v in r["step_s"]) - busy
        print(f"  {label.get(name, name)} s/step by phase: " + ", ".join(f"{k} {v:.3f}" for k, v in phases.items()))
    for name in names:
        if name in KINDS or not runs["ours"]:
            continue
        base, new = runs["ours"], runs[name]
        fastest = [min(v for r in rs for v in r["step_s"]) for rs in (base, new)]
        cpu = [med(rs, "cpu_step_s") for rs in (base, new)]
        print(f"  {name}/sync: s/step median {_ratio(med(new, 'step_s'), med(base, 'step_s'))}, fastest "
              f"{_ratio(fastest[1], fastest[0])}, CPU s/step median {_ratio(cpu[1], cpu[0])}")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--size", choices=[*SIZES, "all"], default="tiny")
    p.add_argument("--steps", type=int, default=5, help="optimizer steps per run; the first and last are not timed")
    p.add_argument("--repeats", type=int, default=2, help="runs of each trainer per size, order alternating")
    p.add_argument("--questions", type=int, default=4, help="questions per step")
    p.add_argument("--group", type=int, default=4, help="G: completions per question")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--micro-batch", type=int, default=8, help="completions per forward/backward")
    p.add_argument("--threads", type=int, default=1,
                   help="torch/OpenMP threads per trainer (0 = torch's default); 1 keeps a shared machine's "
                        "load from stalling OpenMP barriers, which distorts timings far more than it saves")
    p.add_argument("--kinds", nargs="+", choices=KINDS, default=KINDS, help="which trainers to run (trl always)")
    p.add_argument("--workdir", default=None, help="keep data, models and runs here (default: a temp dir)")
    p.add_argument("--beta", type=float, default=0.04, help="KL coefficient of every trainer (0: no reference)")
    p.add_argument("--reward", default=REWARD, help="module:fn reward of every trainer (weight 1)")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=KEY=VALUE[,KEY=VALUE]",
                   help="run ours (sync) again with these config overrides (repeatable)")
    p.add_argument("--extra", help=argparse.SUPPRESS)
    p.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    a.kinds = sorted({*a.kinds, "trl"}, key=KINDS.index)
    if a.steps < 3:
        p.error("--steps must be >= 3 (step 1 is a warm-up, the last is not timed)")
    if ":" not in a.reward:
        p.error(f"--reward {a.reward!r}: expected module:fn")
    a.variants = {}
    for v in a.variant:
        name, _, overrides = v.partition("=")
        if not name or "=" not in overrides or name in KINDS or name in a.variants:
            p.error(f"--variant {v!r}: expected a new NAME (not {', '.join(KINDS)}) = KEY=VALUE[,KEY=VALUE...]")
        a.variants[name] = overrides.split(",")
    return a


def main() -> None:
    a = parse_args()
    if a.child:
        return child_main(a)
    import importlib.util
    if importlib.util.find_spec("trl") is None:
        sys.exit("bench_trainer needs TRL to compare against: pip install -e '.[test]' (trl==1.16.0)")
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory(prefix="bench_trainer_") as tmp:
        workdir = Path(a.workdir or tmp).resolve()
        print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs; "
              f"Q={a.questions} G={a.group} max_new_tokens={a.max_new_tokens} micro_batch={a.micro_batch} "
              f"steps={a.steps} (1 warm-up) repeats={a.repeats} beta={a.beta} reward={a.reward}")
        for size in (list(SIZES) if a.size == "all" else [a.size]):
            params = setup(workdir, size)
            # each run: (its name in the report, child kind, config overrides); variants are ours with overrides
            plan = [(k, k, []) for k in KINDS if k in a.kinds] + [(n, "ours", o) for n, o in a.variants.items()]
            runs: dict[str, list[dict]] = {name: [] for name, _, _ in plan}
            for i in range(a.repeats):
                for name, kind, overrides in (plan if i % 2 == 0 else plan[::-1]):
                    runs[name].append(run_child(kind, a, workdir, size, name, overrides))
            columns = [*KINDS[:-1], *a.variants, "trl"]  # TRL last: the ratios are over it
            report(size, params, {k: runs.get(k, []) for k in columns}, a.questions * a.group)
        print(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
              "(above the CPU count means other work shared the machine and timings are noisy)")


if __name__ == "__main__":
    main()
