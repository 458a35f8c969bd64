"""Benchmark: one GRPO update (`trainer.optimise`) of a CPU-default-shaped batch, per forward
layout and with/without zero-advantage skipping, in one process.

The model is the CPU default's architecture (configs/cpu_tiny.yaml, ~1M parameters, built
locally and untrained: the update's cost does not depend on what it has learnt); the batch is
shaped like that config's measured steps (16 questions x G = 8; prompts of 45-77 tokens, about 37
completion tokens on average, up to max_new_tokens 80; a share of the groups with all-equal
rewards, 41% by default). The token ids are random: the cost does not depend on them either.
Timings are CPU seconds of this process (``time.process_time``, one torch thread), so other
work on a shared machine inflates them far less than wall time; the variants run interleaved,
each `--repeats` times from the same start weights, and the median is reported with its ratio
to `padded` without skipping (the default). Each variant's weights after one update are
compared with the default's (max abs difference): the same update up to float rounding.

Usage: python benchmarks/bench_update.py [--repeats 3] [--flat 0.41] [--threads 1]
"""
from __future__ import annotations

import argparse
import copy
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.config import ModelConfig, load_run_config  # noqa: E402
from pipeline.grpo import trainer  # noqa: E402
from pipeline.grpo.batch import Batch  # noqa: E402
from pipeline.grpo.components import TrainState, build_optimizer  # noqa: E402
from pipeline.grpo.episodes import Episode, pack  # noqa: E402
from pipeline.models import build_tiny, load_policy  # noqa: E402

# Each variant sets every option it is about: configs/cpu_tiny.yaml turns several of them on.
_OFF = ["train.skip_zero_advantage=false", "train.micro_batch_tokens=0"]
VARIANTS = {"padded": ["train.forward_layout=padded", *_OFF],
            "trimmed": ["train.forward_layout=trimmed", *_OFF],
            "shared_prompt": ["train.forward_layout=shared_prompt", *_OFF],
            "padded+skip": ["train.forward_layout=padded", "train.skip_zero_advantage=true",
                            "train.micro_batch_tokens=0"],
            "shared_prompt+skip": ["train.forward_layout=shared_prompt", "train.skip_zero_advantage=true",
                                   "train.micro_batch_tokens=0"],
            **{f"shared_prompt+skip+tokens{n}": ["train.forward_layout=shared_prompt", "train.skip_zero_advantage=true",
                                                 f"train.micro_batch_tokens={n}"] for n in (512, 1024, 2048)},
            **{f"trimmed+tokens{n}": ["train.forward_layout=trimmed", "train.skip_zero_advantage=false",
                                      f"train.micro_batch_tokens={n}"] for n in (1024,)}}
CORPUS = [f"user\nWhat is {a} plus {b}?\nassistant\n{a} + {b} = {a + b}." for a in range(40) for b in range(40)]


def make_batch(cfg, vocab: int, pad_id: int, flat: float, seed: int = 0) -> Batch:
    rng = random.Random(seed)
    g, q, cap = cfg.rollout.group_size, cfg.train.questions_per_step, cfg.rollout.max_new_tokens
    episodes, adv = [], []
    for qi in range(q):
        prompt = [rng.randrange(3, vocab) for _ in range(rng.randint(45, 77))]
        teaches = rng.random() >= flat
        scores = [float(rng.random() < 0.5) for _ in range(g)] if teaches else [1.0] * g
        if teaches and len(set(scores)) == 1:
            scores[0] = 1.0 - scores[0]
        mean, std = statistics.mean(scores), statistics.pstdev(scores)
        for j in range(g):
            n = min(cap, max(8, int(rng.gauss(37, 10))))
            episodes.append(Episode(problem_id=str(qi), group=qi, sample=j, prompt="", completion="",
                                    prompt_ids=prompt, completion_ids=[rng.randrange(3, vocab) for _ in range(n)],
                                    finish_reason="stop", gold="0"))
            adv.append((scores[j] - mean) / (std + cfg.train.adv_eps))
    packed = pack(episodes, pad_id)
    return Batch(episodes, packed, torch.tensor(adv), None, None, None, flat, {})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--flat", type=float, default=0.41, help="share of groups whose rewards are all equal")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    tmp = tempfile.TemporaryDirectory()
    build_tiny(ModelConfig(), f"{tmp.name}/m", CORPUS, seed=0)
    base = [f"model.name_or_path={tmp.name}/m", f"output_dir={tmp.name}/runs"]
    cfg0 = load_run_config(ROOT / "configs" / "cpu_tiny.yaml", base)
    model, tok = load_policy(f"{tmp.name}/m")
    model.train()
    start = copy.deepcopy(model.state_dict())
    batch = make_batch(cfg0, len(tok), tok.pad_token_id, a.flat)
    names = a.variants.split(",")
    times: dict[str, list[float]] = {n: [] for n in names}
    after: dict[str, torch.Tensor] = {}
    for rep in range(a.repeats):
        for name in (names if rep % 2 == 0 else names[::-1]):
            cfg = load_run_config(ROOT / "configs" / "cpu_tiny.yaml", [*base, *VARIANTS[name]])
            model.load_state_dict(start)
            opt, sched = build_optimizer(cfg, model)
            state = TrainState(model, None, tok, None, opt, sched, None)
            t0 = time.process_time()
            update = trainer.optimise(cfg, state, batch, 1, Path(tmp.name), {})
            times[name].append(time.process_time() - t0)
            after[name] = torch.cat([p.detach().flatten() for p in model.parameters()])
            times.setdefault(f"{name}/skipped", []).append(update["skipped_frac"])
    padded = [len(e.prompt_ids) + len(e.completion_ids) for e in batch.episodes]
    print(f"CPU-default update: {len(batch.episodes)} rows, packed width {batch.packed.input_ids.shape[1]}, "
          f"real tokens {sum(padded)} of {len(padded) * batch.packed.input_ids.shape[1]} positions, "
          f"{a.flat:.0%} flat groups, {a.threads} thread(s), {a.repeats} repeats (CPU s, median)")
    ref = statistics.median(times[names[0]])
    for name in names:
        t = statistics.median(times[name])
        diff = (after[name] - after[names[0]]).abs().max().item()
        print(f"  {name:20s} {t:7.3f} s  x{t / ref:5.2f} of {names[0]}  skipped {times[name + '/skipped'][0]:.0%}  "
              f"max |w - w_{names[0]}| {diff:.1e}")
    tmp.cleanup()


if __name__ == "__main__":
    main()
