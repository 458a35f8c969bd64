"""Data-parallel SFT on one machine (``sft.processes`` > 1): every core does part of each step.

The SFT trains with one torch thread per process (pipeline/determinism.py says why: two OpenMP
threads on shared cores spin against each other), so on the 2-core CPU default one core sat idle
for the whole warm start. A ``Team`` starts ``sft.processes - 1`` helper processes. Every process
holds the whole model and runs the same loop (``pipeline.sft.run_steps``): the same batches (same
seed), and the step's micro-batches (``pipeline.sft.cut``) dealt out by tokens (``deal``), each
process computing the gradient of its share. Rank 0 adds the shares in rank order into a row of a
shared tensor that every process reads, so all get the same bits and apply the same clip and AdamW
step: the replicas stay identical without ever sending weights. The sum is that of one process
doing all the micro-batches, up to float summation order, and the same on every run for a given
process count.

No sockets: gradients travel through one shared tensor, and each helper has a pipe to the trainer
("my row is written", "the sum is there"). Failures end the run with one line, never a hang: a
helper that raises sends its error; one that dies (killed, out of memory, a crash while starting)
closes its pipe, which the trainer sees at once; one that stops answering is given up on at
``STEP_TIMEOUT_S``. Helpers stop when the trainer does, or is gone (pipeline/orphans.py).
"""

from __future__ import annotations

import io
import os

import torch
import torch.multiprocessing as mp

from pipeline import faults
from pipeline.orphans import exit_with_parent

STEP_TIMEOUT_S = 300.0  # a step takes ~1 s on the CPU default; minutes means a process is stuck


class TeamError(RuntimeError):
    """A helper process of the data-parallel SFT failed, died or stopped answering."""


def deal(cuts: list[list[int]], lengths: list[int], world: int) -> list[list[list[int]]]:
    """Each process's micro-batches: the most padded tokens first, each to the process with the
    fewest so far (the lowest rank on a tie); deterministic, the same in every process."""
    load = [0] * world
    shares: list[list[list[int]]] = [[] for _ in range(world)]
    cost = [len(rows) * max(lengths[i] for i in rows) for rows in cuts]
    for k in sorted(range(len(cuts)), key=lambda k: (-cost[k], k)):
        rank = min(range(world), key=lambda r: (load[r], r))
        shares[rank].append(cuts[k])
        load[rank] += cost[k]
    return shares


def _spans(params):
    """Each parameter with its slice of a table row (the row's last slot holds the loss sum)."""
    at = 0
    for p in params:
        yield p, slice(at, at + p.numel())
        at += p.numel()


class Member:
    """One process's side of a step: its rank, its row of the shared gradient table, and a pipe to
    the trainer (rank 0 has one to each helper). A pipe, not a barrier: a process that dies closes
    its end, so the one waiting on it gets EOF at once (a killed process left a multiprocessing
    Barrier waiting on it forever)."""

    def __init__(self, rank: int, world: int, table: torch.Tensor, conn=None):
        self.rank, self.world, self.table, self.conn = rank, world, table, conn
        self.steps = 0

    def share(self, cuts: list[list[int]], batch) -> list[list[int]]:
        return deal(cuts, [len(p) + len(c) for p, c in batch], self.world)[self.rank]

    def sum_gradients(self, model, loss_sum: float) -> float:
        """Put this process's gradients and loss sum in its row; once every row is there (the helpers
        say so through their pipes), rank 0 adds them in rank order into the last row and tells the
        helpers; every process then sets its gradients from that row. Returns the summed loss."""
        self.steps += 1
        if self.rank:
            faults.sft_helper_step(self.steps)
        params = list(model.parameters())
        row = self.table[self.rank]
        for p, at in _spans(params):
            row[at] = 0.0 if p.grad is None else p.grad.reshape(-1)
        row[-1] = loss_sum
        self._exchange()
        total = self.table[self.world]
        for p, at in _spans(params):
            p.grad = total[at].view_as(p).clone()
        return float(total[-1])

    def _exchange(self) -> None:
        """A helper: report the row written, wait for the sum (it is in the table when "sum" comes)."""
        self.conn.send(("row", self.steps))
        if not self.conn.poll(STEP_TIMEOUT_S):
            raise TeamError(f"sft: helper {self.rank} got no sum from the trainer within {STEP_TIMEOUT_S:g} s")
        if self.conn.recv() != "sum":
            raise Stopped


class Stopped(Exception):
    """The trainer stopped the team (it failed, or another helper did); it reports why."""


class Team(Member):
    """The trainer's side (rank 0): starts the helpers, sums the rows every step, stops the helpers."""

    def __init__(self, model, pad_id: int, examples, cfg):
        world = cfg.sft.processes
        if next(model.parameters()).device.type != "cpu":
            raise ValueError(f"sft.processes={world} shares a step between CPU processes; on "
                             f"{next(model.parameters()).device} use sft.processes=1")
        ctx = mp.get_context("spawn")  # fresh interpreters: no fork of this process's threads
        n = sum(p.numel() for p in model.parameters())
        super().__init__(0, world, torch.zeros(world + 1, n + 1).share_memory_())  # a row each, then the sum
        buf = io.BytesIO()
        torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, buf)
        spec = {"config": model.config, "weights": buf.getvalue(), "pad_id": pad_id, "examples": examples,
                "cfg": cfg, "parent": os.getpid(), "deterministic": torch.are_deterministic_algorithms_enabled()}
        self.helpers, self.conns = [], []
        for rank in range(1, world):
            mine, theirs = ctx.Pipe()
            h = ctx.Process(target=helper_main, args=(spec, rank, self.table, theirs), daemon=True,
                            name=f"mathrl-sft-helper-{rank}")
            h.start()
            theirs.close()  # the helper's end lives in the helper only: its death is our EOF
            self.helpers.append(h)
            self.conns.append(mine)

    def _exchange(self) -> None:
        for h, conn in zip(self.helpers, self.conns):
            if not conn.poll(STEP_TIMEOUT_S):
                raise TeamError(f"sft: {h.name} did not finish step {self.steps} within {STEP_TIMEOUT_S:g} s "
                                "(stopped, or the machine is overloaded)")
            try:
                kind, what = conn.recv()
            except (EOFError, OSError):
                h.join(2.0)
                raise TeamError(f"sft: {h.name} exited with code {h.exitcode} at step {self.steps} "
                                "(killed? out of memory?)") from None
            if kind == "error":
                raise TeamError(f"sft: {h.name} failed: {what}")
        total = self.table[0].clone()
        for r in range(1, self.world):
            total += self.table[r]
        self.table[self.world] = total
        for conn in self.conns:
            conn.send("sum")

    def __enter__(self) -> Team:
        return self

    def __exit__(self, kind, error, tb) -> None:
        for conn in self.conns:
            try:
                if error is not None:
                    conn.send("stop")
            except OSError:
                pass  # that helper is gone already
            conn.close()
        for h in self.helpers:
            h.join(10.0)
            if h.is_alive():
                h.kill()
                h.join()


def helper_main(spec: dict, rank: int, table: torch.Tensor, conn) -> None:
    """A helper process: the trainer's model and settings, the same loop, its own share of each step."""
    from transformers import AutoModelForCausalLM

    from pipeline.sft import run_steps

    exit_with_parent(spec["parent"], code=1)
    torch.set_num_threads(max(1, spec["cfg"].threads))
    torch.use_deterministic_algorithms(spec["deterministic"], warn_only=True)
    try:
        model = AutoModelForCausalLM.from_config(spec["config"])
        model.load_state_dict(torch.load(io.BytesIO(spec["weights"]), weights_only=True))
        run_steps(model, spec["pad_id"], spec["examples"], spec["cfg"], progress=False,
                  team=Member(rank, spec["cfg"].sft.processes, table, conn))
    except (Stopped, EOFError, BrokenPipeError):
        return  # the trainer stopped the team or is gone; it reports why
    except BaseException as e:
        try:
            conn.send(("error", f"{type(e).__name__}: {e}"))
        except OSError:
            pass
        raise


__all__ = ["STEP_TIMEOUT_S", "Member", "Stopped", "Team", "TeamError", "deal", "helper_main"]
