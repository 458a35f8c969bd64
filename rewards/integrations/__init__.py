"""The reward checkers as drop-ins for other trainers; none of these modules imports the trainer.

- `rewards.integrations.trl`: reward functions for TRL's `GRPOTrainer(reward_funcs=[...])`.
- `rewards.integrations.verl`: `compute_score` for verl's reward managers
  (`custom_reward_function.path` = this file's path, `.name=compute_score`).
- `rewards.integrations.verl_data`: prepared JSONL -> verl's parquet layout
  (`python -m rewards to-verl`, needs pyarrow: `pip install 'mathrl[verl]'`).

Both adapters read the gold through `gold.gold_answer`, which accepts a bare answer or a whole
reference solution (GSM8K's `#### 72`, MATH's `\\boxed{...}`).
"""
