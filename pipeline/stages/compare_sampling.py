"""`mathrl compare-sampling` / `make compare-sampling`: which questions GRPO should draw, on the same
rollout compute. Three samplers from the config's SFT model, each on every GRPO seed:

- ``uniform``: a seeded shuffle per epoch (the default);
- ``pass_rate``: the same walk, but questions solved at their last draw sit out and never-solved
  ones are drawn less (pipeline/grpo/sampling.py; open-instruct's retirement, prime-rl's pool);
- ``dynamic``: DAPO's dynamic sampling (Yu et al. 2025, arXiv:2503.14476): groups whose rewards are
  all equal are dropped and more questions drawn to refill the step (pipeline/grpo/batch.py).

Same compute means the same questions drawn, G rollouts each: every run stops once it has drawn
``train.steps x train.questions_per_step`` (``train.max_questions``), so dynamic sampling, which
draws more per step, trains fewer steps; a question pass_rate passes over costs nothing. All three
run the config's trainer (the CPU default's is pipelined: dynamic sampling's refills are generated
while the trainer waits, pipeline/grpo/pipelined.py). Questions come from the first
``train.question_pool`` of the training split, which must be smaller than the questions drawn:
pass_rate acts only on questions it has seen.

The cells, tables and noise verdicts are compare-objectives' (pipeline/stages/compare_objectives.py):
results in ``<output_dir>/<name>-sampling/``, with each sampler's steps, questions and minutes.
"""

from __future__ import annotations

import dataclasses

from pipeline.config import RunConfig
from pipeline.config.checks import check_sampling_pool
from pipeline.stages import compare_objectives

SAMPLERS: dict[str, tuple[str, ...]] = {
    "uniform": (),  # the reference
    "pass_rate": ("train.sampling=pass_rate",),
    "dynamic": ("train.dynamic_sampling=true",),
}
SAMPLING = compare_objectives.Suite("smp", "sampling", "Question samplers on the same questions drawn", SAMPLERS, (),
                                    same_questions=True)
SEEDS = (0, 1, 2)


def main(cfg: RunConfig, seeds: tuple[int, ...] = SEEDS, table_only: bool = False,
         samplers: tuple[str, ...] = tuple(SAMPLERS)) -> int:
    """``samplers``: those to run or tabulate, the first the reference of the table's differences
    (a lane of a comparison split over processes runs some of them: each cell is its own run)."""
    check_sampling_pool(cfg)  # also checked by the command, before it prepares data
    return compare_objectives.main(cfg, seeded=samplers, seeds=seeds, table_only=table_only, suite=dataclasses.replace(
        SAMPLING, variants={s: SAMPLERS[s] for s in samplers}))
