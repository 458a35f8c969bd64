"""Typed, documented run configuration: schema (one dataclass per stage) and a strict loader."""

from pipeline.config.loader import ConfigError, describe, load_config, save_config, to_dict
from pipeline.config.schema import (DataConfig, EvalConfig, ModelConfig, PromptConfig, RewardConfig,
                                    RolloutConfig, RunConfig, SFTConfig, TrainConfig)


def load_run_config(path=None, overrides=None) -> RunConfig:
    """The run config from defaults, an optional YAML file and ``key=value`` overrides."""
    return load_config(RunConfig, path, overrides)


__all__ = ["ConfigError", "DataConfig", "EvalConfig", "ModelConfig", "PromptConfig", "RewardConfig",
           "RolloutConfig", "RunConfig", "SFTConfig", "TrainConfig", "describe", "load_config",
           "load_run_config", "save_config", "to_dict"]
