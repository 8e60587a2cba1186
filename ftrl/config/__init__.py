"""Typed, RLlib-compatible algorithm configs and job files; imports no torch.

    ftrl.config.fields     option(), per-field and type checks (the field machinery), suggest()
    ftrl.config.keys       a key's facts, declared on its field (how it may change while a job
                           trains, mesh agreement, fixed on resume), and their readers
    ftrl.config.sections   the shared sections and the training base (TrainingConfig)
    ftrl.config.builder    AlgorithmConfig, the builder every algorithm's config extends
    ftrl.config.ppo        PPOConfig and PPO's training section
    ftrl.config.impala     IMPALAConfig (and the checks of the asynchronous family)
    ftrl.config.appo       APPOConfig
    ftrl.config.registry   algorithm name -> config class import path
    ftrl.config.live       the keys a running job may change in place (PBT's exploit), from the facts
    ftrl.config.jobs       job files ([stop] table), flags on top, describe()
    ftrl.config.user_code  user code a key names by import path, imported with one ConfigError wording

`python -m ftrl.config` lists every key with its type, default, doc and facts.
"""

from ftrl.config.appo import APPOConfig, APPOTrainingConfig
from ftrl.config.builder import AlgorithmConfig
from ftrl.config.fields import check_value, describe_section, field_doc, fields_of, option
from ftrl.config.impala import IMPALAConfig, IMPALATrainingConfig
from ftrl.config.jobs import JobSpec, StopCriteria, build_job, describe, load_job, parse_overrides
from ftrl.config.keys import LIVE, NEVER, Change, KeyFacts, Part, config_facts, mesh_keys, rebuild
from ftrl.config.live import check_live, check_live_keys, live_keys, mutable_keys
from ftrl.config.ppo import PPOConfig, PPOTrainingConfig
from ftrl.config.registry import ALGORITHMS, config_class, config_from_dict
from ftrl.config.sections import (
    CallbacksConfig,
    CheckpointingConfig,
    DebuggingConfig,
    EnvironmentConfig,
    EnvRunnersConfig,
    EvaluationConfig,
    FaultToleranceConfig,
    LearnersConfig,
    ModelConfig,
    ReportingConfig,
    TrainingConfig,
    check_learner_gpus,
)

__all__ = [
    "ALGORITHMS", "APPOConfig", "APPOTrainingConfig", "AlgorithmConfig", "CallbacksConfig", "Change", "CheckpointingConfig",
    "DebuggingConfig", "EnvRunnersConfig", "EnvironmentConfig", "EvaluationConfig", "FaultToleranceConfig",
    "IMPALAConfig", "IMPALATrainingConfig", "JobSpec", "KeyFacts", "LIVE", "LearnersConfig", "ModelConfig",
    "NEVER", "PPOConfig", "PPOTrainingConfig", "Part", "ReportingConfig", "StopCriteria", "TrainingConfig",
    "build_job", "check_learner_gpus", "check_live", "check_live_keys", "check_value", "config_class",
    "config_facts", "config_from_dict", "describe", "describe_section", "field_doc", "fields_of", "live_keys",
    "load_job", "mesh_keys", "mutable_keys", "option", "parse_overrides", "rebuild",
]
