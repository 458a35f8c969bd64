"""mathrl's training pipeline: the stages of a verifiable-reward GRPO run.

Config (`pipeline.config`), data (`pipeline.data`: preparation, gsm-synth, the problem loader), prompt
templates (`pipeline.prompts`), models (policy, reference, LoRA, the tiny-model builder),
rollout engines (Hugging Face generate and vLLM behind one interface), the GRPO math and
trainer (`pipeline.grpo`), the SFT warm start and the `mathrl` command line. It may import
`rewards` (and through it `sandbox`); nothing in `rewards` or `sandbox` imports it.
"""
