"""The policy's weights on their way to a rollout engine: export in Hugging Face names with LoRA
merged (``export``) and the trainer -> vLLM server weight channel (``broadcast``).

Below the rollout engines, beside ``pipeline.parallel``; imports neither.
"""
