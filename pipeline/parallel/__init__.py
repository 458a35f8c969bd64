"""Parallelism under torchrun: data-parallel helpers (``distributed``) and FSDP2 sharding (``fsdp``).

Below the rollout engines and the trainer: both use these helpers; nothing here imports them.
Outside torchrun every helper is a no-op and the code runs as one process.
"""
