"""Typed, documented run configuration: schema (one dataclass per stage), the value checks each
section runs when it is built (``checks``) and a strict loader."""

from pipeline.config.checks import ConfigError, check_world, world_size
from pipeline.config.loader import describe, load_config, save_config, to_dict, with_overrides
from pipeline.config.schema import (DataConfig, EvalConfig, ExperimentConfig, ModelConfig, PromptConfig, RewardConfig,
                                    RolloutConfig, RunConfig, SFTConfig, TrainConfig)


def load_run_config(path=None, overrides=None) -> RunConfig:
    """The run config from defaults, an optional YAML file and ``key=value`` overrides, checked
    (every section, and the batch against torchrun's number of ranks)."""
    cfg = load_config(RunConfig, path, overrides)
    check_world(cfg, world_size())
    return cfg


__all__ = ["ConfigError", "DataConfig", "EvalConfig", "ExperimentConfig", "ModelConfig", "PromptConfig", "RewardConfig",
           "RolloutConfig", "RunConfig", "SFTConfig", "TrainConfig", "describe", "load_config",
           "load_run_config", "save_config", "to_dict", "with_overrides"]
