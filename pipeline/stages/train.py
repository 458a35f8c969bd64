"""`mathrl train`: GRPO alone (``pipeline.grpo.trainer``), with the periodic eval wired in, then the
model card ``final/README.md``.

The trainer never imports the evals: this stage builds ``evals.evaluate.periodic_eval(cfg)`` and
hands it over. A condition that stops the run (non-finite loss, a tracker that cannot start, a
lost torchrun peer or rollout server, a rollout worker that died or hung, a batch staler than
train.async_staleness, a missing device) ends it with one line and exit code 1.
"""

from __future__ import annotations

import os

from pipeline import layout
from pipeline.card import write_card
from pipeline.config import RunConfig


def main(cfg: RunConfig, command: str | None = None) -> int:
    """``command``: the command line the model card names."""
    from evals.evaluate import periodic_eval
    from pipeline.device import DeviceError
    from pipeline.grpo.pipelined import StaleBatch
    from pipeline.grpo.trackers import TrackerError
    from pipeline.grpo.trainer import TrainingError, train
    from pipeline.parallel import distributed
    from pipeline.rollout.base import EngineError

    try:
        run_dir = train(cfg, evaluate=periodic_eval(cfg))
    except (TrainingError, TrackerError, distributed.PeerLost, DeviceError, EngineError, StaleBatch) as e:
        print(f"mathrl train: {e}")
        return 1
    distributed.print0(f"run directory: {run_dir}")
    if os.environ.get("RANK", "0") == "0":  # torchrun's rank 0 (the process group is closed)
        print(f"model card: {write_card(layout.run_dir(cfg), cfg, command)}")
    return 0
