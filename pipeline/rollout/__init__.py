"""Rollout engines behind one interface: ``HFEngine`` (any machine) and the vLLM engine."""

from pipeline.rollout.base import RolloutEngine, Sample, SamplingParams

__all__ = ["RolloutEngine", "Sample", "SamplingParams"]
