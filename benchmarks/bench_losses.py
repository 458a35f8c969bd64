"""Benchmark: `pipeline.grpo.policy_loss` against TRL 1.16's GRPO loss, same tensors, same run.

Times forward + backward of the loss alone (log-probs given, no model) on [N, T] = [256, 512]
float32 tensors with ragged masks, beta = 0.04, k3 KL, for each shared aggregation. Both sides
include computing their logged statistics (ours: one `.tolist()`; TRL: several `.item()` calls).
TRL's loss is a method of `GRPOTrainer`, so it runs on a bare instance with only the attributes
`_compute_loss` reads, and the model forward stubbed to return the same log-probs.

Prints the median time of each, the ratio of medians ours / TRL (< 1 means we are faster) and
the ratio of the fastest runs (the least load-sensitive estimate on a busy machine).
Usage: python benchmarks/bench_losses.py [--n 256] [--t 512] [--reps 15] [--device cpu]
"""
import argparse
import collections
import statistics
import time
import types

import torch
from trl.trainer.grpo_trainer import GRPOTrainer

from pipeline.grpo import policy_loss


class _Accelerator:
    process_index, num_processes = 0, 1

    def gather(self, x):
        return x

    def reduce(self, x, reduction="sum"):
        return x


def _trl_loss_fn(loss_type, max_len):
    trainer = object.__new__(GRPOTrainer)
    attrs = dict(
        accelerator=_Accelerator(), model=types.SimpleNamespace(training=True),
        _metrics=collections.defaultdict(lambda: collections.defaultdict(list)),
        top_entropy_quantile=1.0, off_policy_mask_threshold=None, importance_sampling_level="token",
        beta=0.04, loss_type=loss_type, epsilon_low=0.2, epsilon_high=0.2, use_vllm=False,
        current_gradient_accumulation_steps=1, max_completion_length=max_len,
        _entropy_bonus_enabled=False, aux_loss_enabled=False,
        args=types.SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1))
    for name, value in attrs.items():
        setattr(trainer, name, value)

    def run(logp, old, ref, adv, mask):
        n, t = logp.shape
        trainer._get_per_token_logps_and_entropies = lambda *a, **k: (logp, torch.zeros_like(logp), None)
        inputs = dict(prompt_ids=torch.zeros(n, 1, dtype=torch.long, device=logp.device),
                      prompt_mask=torch.ones(n, 1, dtype=torch.long, device=logp.device),
                      completion_ids=torch.zeros(n, t, dtype=torch.long, device=logp.device),
                      completion_mask=mask.long(), advantages=adv, old_per_token_logps=old,
                      ref_per_token_logps=ref, num_items_in_batch=mask.sum().float())
        return trainer._compute_loss(None, inputs)
    return run


def _ours_loss_fn(loss_type, max_len):
    def run(logp, old, ref, adv, mask):
        return policy_loss(logp, old, ref, adv, mask, loss_type=loss_type, max_completion_length=max_len)[0]
    return run


def _once(fn, tensors, device):
    logp = tensors[0].clone().requires_grad_()
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn(logp, *tensors[1:]).backward()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def _time_pair(ours, trl, tensors, reps, device):
    """Per-rep seconds of each, the two interleaved so that machine load hits both alike."""
    a, b = [], []
    for _ in range(reps):
        a.append(_once(ours, tensors, device))
        b.append(_once(trl, tensors, device))
    return a, b


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--t", type=int, default=512)
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.manual_seed(0)
    n, t, dev = args.n, args.t, args.device
    logp = -torch.rand(n, t, device=dev) * 3
    tensors = (logp, logp + (torch.rand(n, t, device=dev) - 0.5) * 0.4, logp + (torch.rand(n, t, device=dev) - 0.5),
               torch.randn(n, device=dev), torch.arange(t, device=dev) < torch.randint(1, t + 1, (n, 1), device=dev))
    print(f"policy loss fwd+bwd, [N, T] = [{n}, {t}] float32 on {dev}, median of {args.reps} "
          f"(timings on a shared machine; compare the ratio, not the absolute numbers)")
    print(f"{'loss_type':<10}{'ours ms':>10}{'TRL ms':>10}{'ours/TRL':>10}{'min ratio':>11}")
    for loss_type in ("grpo", "bnpo", "dapo", "dr_grpo"):
        ours, trl = _ours_loss_fn(loss_type, t), _trl_loss_fn(loss_type, t)
        _time_pair(ours, trl, tensors, 2, dev)  # warm-up
        ours_s, trl_s = _time_pair(ours, trl, tensors, args.reps, dev)
        med_o, med_t = statistics.median(ours_s), statistics.median(trl_s)
        print(f"{loss_type:<10}{med_o * 1e3:>10.2f}{med_t * 1e3:>10.2f}{med_o / med_t:>10.2f}"
              f"{min(ours_s) / min(trl_s):>11.2f}")


if __name__ == "__main__":
    main()
