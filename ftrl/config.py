"""Typed, RLlib-compatible algorithm configs.

`PPOConfig()` is a builder: each method (`environment`, `env_runners`, `training`,
`fault_tolerance`, `evaluation`, `checkpointing`, `debugging`, `learners`,
`reporting`) sets fields of one dataclass section and returns the config, so calls
chain as in RLlib. Keys use RLlib's names where RLlib has the concept.

Serialized forms:
- `to_dict()` is flat (`{"env": ..., "num_env_runners": ..., "lr": ...}`) plus
  `"algo"`; every key is unique across sections, so `from_dict` also accepts flat keys.
- `from_dict` / `from_toml` accept either flat keys or tables named after the builder
  methods (`[environment]`, `[env_runners]`, `[training]`, `[training.model]`, ...),
  or a mix. A job file may also carry `algo = "PPO"` and a `[stop]` table
  (`stop_reward`, `stop_timesteps`, `stop_iters`) read by `load_job`.
- Unknown keys raise `ConfigError` naming the key and the nearest valid one.

This module imports no torch; `build()` imports the RL room lazily.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from ftrl.wire.errors import ConfigError

_NOT_SET: Any = object()

# --------------------------------------------------------------------------- sections


@dataclass
class EnvironmentConfig:
    """What to run: a gymnasium id or an import path "pkg.mod:make_env"."""

    env: str | None = None
    env_config: dict = field(default_factory=dict)


@dataclass
class EnvRunnersConfig:
    """How samples are collected."""

    num_env_runners: int = 0
    num_envs_per_env_runner: int = 1
    rollout_fragment_length: Union[int, str] = "auto"
    remote_worker_envs: bool = False
    observation_filter: str = "NoFilter"
    sample_timeout_s: float = 60.0
    env_runner_health_probe_timeout_s: float = 30.0
    validate_env_runners_after_construction: bool = True
    num_cpus_per_env_runner: float = 1.0
    explore: bool = True
    inference_backend: str = "numpy"
    max_weights_lag: int = 0
    weights_fanout: int = 4


@dataclass
class ModelConfig:
    """The fully connected actor-critic network."""

    fcnet_hiddens: list = field(default_factory=lambda: [64, 64])
    fcnet_activation: str = "tanh"
    vf_share_layers: bool = False
    free_log_std: bool = True
    init_log_std: float = 0.0


@dataclass
class PPOTrainingConfig:
    """PPO hyperparameters (one dataclass, CleanRL style)."""

    lr: float = 3e-4
    lr_schedule: list | None = None
    gamma: float = 0.99
    lambda_: float = 0.95
    use_gae: bool = True
    train_batch_size: int = 4000
    minibatch_size: int = 128
    num_epochs: int = 10
    clip_param: float = 0.2
    clip_param_schedule: list | None = None
    vf_loss_coeff: float = 0.5
    vf_clip_param: float | None = None
    entropy_coeff: float = 0.0
    grad_clip: float | None = 0.5
    normalize_advantages: bool = True
    adam_epsilon: float = 1e-5
    model: dict = field(default_factory=dict)


@dataclass
class FaultToleranceConfig:
    """What happens when env runners or sub-environments fail (RLlib's names)."""

    restart_failed_env_runners: bool = True
    ignore_env_runner_failures: bool = False
    max_num_env_runner_restarts: int = 1000
    num_consecutive_env_runner_failures_tolerance: int = 100
    restart_failed_sub_environments: bool = False
    max_num_sub_env_restart_attempts: int = 5
    env_runner_restore_timeout_s: float = 60.0


@dataclass
class EvaluationConfig:
    """Periodic evaluation on separate runners."""

    evaluation_interval: int | None = None
    evaluation_num_env_runners: int = 0
    evaluation_duration: int = 10
    evaluation_duration_unit: str = "episodes"
    evaluation_sample_timeout_s: float = 120.0
    evaluation_config: dict = field(default_factory=dict)


@dataclass
class CheckpointingConfig:
    """Checkpoints under OUTPUT/checkpoints/."""

    checkpoint_interval: int = 10
    keep_checkpoints: int = 3
    checkpoint_at_end: bool = True


@dataclass
class DebuggingConfig:
    seed: int | None = None
    log_level: str = "WARN"


@dataclass
class LearnersConfig:
    """The learner mesh: 0 learns in the driver; M > 0 trains data-parallel on M learner
    actors over torch.distributed (NCCL on GPUs, gloo on CPUs) that re-form on failure."""

    num_learners: int = 0
    n_init_learners: int | None = None
    min_learners: int = 1
    num_cpus_per_learner: float = 1.0
    num_gpus_per_learner: float = 0.0
    learner_wait_timeout_s: float = 600.0
    learner_collective_timeout_s: float = 60.0
    max_num_learner_restarts: int = 1000


@dataclass
class ReportingConfig:
    metrics_num_episodes_for_smoothing: int = 100
    min_sample_timesteps_per_iteration: int = 0


# --------------------------------------------------------------------------- type checking


def _type_ok(value: Any, tp: Any) -> bool:
    origin = typing.get_origin(tp)
    if tp is Any:
        return True
    if origin in (Union, types.UnionType):
        return any(_type_ok(value, arg) for arg in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if tp is dict or origin is dict:
        return isinstance(value, Mapping)
    if tp is list or origin is list:
        return isinstance(value, (list, tuple))
    return isinstance(value, tp)


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "None"
    return getattr(tp, "__name__", str(tp))


def _suggest(key: str, valid: list[str]) -> str:
    close = difflib.get_close_matches(key, valid, n=1, cutoff=0.5)
    return f"; did you mean {close[0]!r}?" if close else ""


def _coerce(value: Any, tp: Any) -> Any:
    """Light coercion: ints where floats are expected, tuples to lists, Mappings to dicts."""
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, Mapping) and not isinstance(value, dict):
        value = dict(value)
    hints = [tp, *typing.get_args(tp)]
    if float in hints and int not in hints and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


# --------------------------------------------------------------------------- the config

_SECTIONS: dict[str, type] = {
    "environment": EnvironmentConfig,
    "env_runners": EnvRunnersConfig,
    "training": PPOTrainingConfig,
    "fault_tolerance": FaultToleranceConfig,
    "evaluation": EvaluationConfig,
    "checkpointing": CheckpointingConfig,
    "debugging": DebuggingConfig,
    "learners": LearnersConfig,
    "reporting": ReportingConfig,
}

_EVAL_OVERRIDE_KEYS = ("explore", "env_config")


class AlgorithmConfig:
    """Base builder. Subclasses set `algo_name`, `training_cls` and `algorithm_path`."""

    algo_name = "Algorithm"
    training_cls: type = PPOTrainingConfig
    algorithm_path = ""

    def __init__(self) -> None:
        self.environment_cfg = EnvironmentConfig()
        self.env_runners_cfg = EnvRunnersConfig()
        self.training_cfg = self.training_cls()
        self.fault_tolerance_cfg = FaultToleranceConfig()
        self.evaluation_cfg = EvaluationConfig()
        self.checkpointing_cfg = CheckpointingConfig()
        self.debugging_cfg = DebuggingConfig()
        self.learners_cfg = LearnersConfig()
        self.reporting_cfg = ReportingConfig()
        self._explicit: set[str] = set()

    # ---- generic field setting

    def _section_obj(self, section: str) -> Any:
        return getattr(self, f"{section}_cfg")

    def _section_types(self, section: str) -> dict[str, Any]:
        obj = self._section_obj(section)
        return typing.get_type_hints(type(obj))

    def _set(self, section: str, values: Mapping[str, Any]) -> None:
        obj = self._section_obj(section)
        hints = self._section_types(section)
        for key, value in values.items():
            if value is _NOT_SET:
                continue
            if key not in hints:
                raise ConfigError(
                    f"unknown key {key!r} in {section}(){_suggest(key, list(hints))}"
                )
            value = _coerce(value, hints[key])
            if not _type_ok(value, hints[key]):
                raise ConfigError(
                    f"{key} must be {_type_name(hints[key])}, got {type(value).__name__} "
                    f"{value!r}"
                )
            if key == "model":
                value = self._check_model(value)
            if key == "evaluation_config":
                value = self._check_eval_overrides(value)
            setattr(obj, key, copy.deepcopy(value))
            self._explicit.add(key)

    @staticmethod
    def _check_model(model: Mapping[str, Any]) -> dict:
        hints = typing.get_type_hints(ModelConfig)
        out = {}
        for key, value in model.items():
            if key not in hints:
                raise ConfigError(f"unknown model key {key!r}{_suggest(key, list(hints))}")
            value = _coerce(value, hints[key])
            if not _type_ok(value, hints[key]):
                raise ConfigError(
                    f"model {key} must be {_type_name(hints[key])}, got {value!r}"
                )
            out[key] = value
        return out

    @staticmethod
    def _check_eval_overrides(overrides: Mapping[str, Any]) -> dict:
        for key in overrides:
            if key not in _EVAL_OVERRIDE_KEYS:
                raise ConfigError(
                    f"evaluation_config supports only {list(_EVAL_OVERRIDE_KEYS)}; got {key!r}"
                    f"{_suggest(key, list(_EVAL_OVERRIDE_KEYS))}"
                )
        return dict(overrides)

    # ---- builder methods (RLlib names)

    def environment(
        self, env: str | None = _NOT_SET, *, env_config: dict | None = _NOT_SET, **unknown: Any
    ) -> AlgorithmConfig:
        """Set the environment: a gymnasium id or "pkg.mod:make_env" (called with env_config)."""
        self._set("environment", {"env": env, "env_config": env_config, **unknown})
        return self

    def env_runners(
        self,
        *,
        num_env_runners: int = _NOT_SET,
        num_envs_per_env_runner: int = _NOT_SET,
        rollout_fragment_length: int | str = _NOT_SET,
        remote_worker_envs: bool = _NOT_SET,
        observation_filter: str = _NOT_SET,
        sample_timeout_s: float = _NOT_SET,
        env_runner_health_probe_timeout_s: float = _NOT_SET,
        validate_env_runners_after_construction: bool = _NOT_SET,
        num_cpus_per_env_runner: float = _NOT_SET,
        explore: bool = _NOT_SET,
        inference_backend: str = _NOT_SET,
        max_weights_lag: int = _NOT_SET,
        weights_fanout: int = _NOT_SET,
        **unknown: Any,
    ) -> AlgorithmConfig:
        """Set how many runners sample, with how many sub-envs each, and their timeouts.
        `max_weights_lag`: a runner never samples with weights older than this many
        versions; `weights_fanout`: children per node of the weight broadcast tree."""
        self._set("env_runners", _locals_without_self(locals()))
        return self

    def training(self, **kwargs: Any) -> AlgorithmConfig:
        """Set algorithm hyperparameters (see the training dataclass for the keys)."""
        self._set("training", kwargs)
        return self

    def fault_tolerance(
        self,
        *,
        restart_failed_env_runners: bool = _NOT_SET,
        ignore_env_runner_failures: bool = _NOT_SET,
        max_num_env_runner_restarts: int = _NOT_SET,
        num_consecutive_env_runner_failures_tolerance: int = _NOT_SET,
        restart_failed_sub_environments: bool = _NOT_SET,
        max_num_sub_env_restart_attempts: int = _NOT_SET,
        env_runner_restore_timeout_s: float = _NOT_SET,
        **unknown: Any,
    ) -> AlgorithmConfig:
        """Set the failure policy.

        `restart_failed_env_runners` (default True) and `ignore_env_runner_failures` are
        mutually exclusive. Setting `ignore_env_runner_failures=True` while
        `restart_failed_env_runners` was never set explicitly turns restarts off;
        setting both to True explicitly is a ConfigError.
        """
        values = _locals_without_self(locals())
        if (
            values["ignore_env_runner_failures"] is True
            and values["restart_failed_env_runners"] is _NOT_SET
            and "restart_failed_env_runners" not in self._explicit
        ):
            self.fault_tolerance_cfg.restart_failed_env_runners = False
        self._set("fault_tolerance", values)
        return self

    def evaluation(
        self,
        *,
        evaluation_interval: int | None = _NOT_SET,
        evaluation_num_env_runners: int = _NOT_SET,
        evaluation_duration: int = _NOT_SET,
        evaluation_duration_unit: str = _NOT_SET,
        evaluation_sample_timeout_s: float = _NOT_SET,
        evaluation_config: dict = _NOT_SET,
        **unknown: Any,
    ) -> AlgorithmConfig:
        """Evaluate every `evaluation_interval` iterations (None: never)."""
        self._set("evaluation", _locals_without_self(locals()))
        return self

    def checkpointing(
        self,
        *,
        checkpoint_interval: int = _NOT_SET,
        keep_checkpoints: int = _NOT_SET,
        checkpoint_at_end: bool = _NOT_SET,
        **unknown: Any,
    ) -> AlgorithmConfig:
        """Checkpoint every `checkpoint_interval` iterations (0: only at the end)."""
        self._set("checkpointing", _locals_without_self(locals()))
        return self

    def debugging(
        self, *, seed: int | None = _NOT_SET, log_level: str = _NOT_SET, **unknown: Any
    ) -> AlgorithmConfig:
        """Seed everything (runners get seed + their index) and set the log level."""
        self._set("debugging", _locals_without_self(locals()))
        return self

    def learners(
        self,
        *,
        num_learners: int = _NOT_SET,
        n_init_learners: int | None = _NOT_SET,
        min_learners: int = _NOT_SET,
        num_cpus_per_learner: float = _NOT_SET,
        num_gpus_per_learner: float = _NOT_SET,
        learner_wait_timeout_s: float = _NOT_SET,
        learner_collective_timeout_s: float = _NOT_SET,
        max_num_learner_restarts: int = _NOT_SET,
        **unknown: Any,
    ) -> AlgorithmConfig:
        """The learner mesh. `num_learners=0` learns inside the Algorithm process; M > 0
        starts M learner actors (`JOB/learner/I`). Training starts once `n_init_learners`
        (default: all) joined, pauses below `min_learners` for up to
        `learner_wait_timeout_s`; a collective slower than `learner_collective_timeout_s`
        counts as a hang."""
        self._set("learners", _locals_without_self(locals()))
        return self

    def reporting(
        self,
        *,
        metrics_num_episodes_for_smoothing: int = _NOT_SET,
        min_sample_timesteps_per_iteration: int = _NOT_SET,
        **unknown: Any,
    ) -> AlgorithmConfig:
        """Metric smoothing window (episodes) and a minimum of env steps per iteration."""
        self._set("reporting", _locals_without_self(locals()))
        return self

    def framework(self, framework: str = "torch") -> AlgorithmConfig:
        """Only "torch" is supported; present for RLlib compatibility."""
        if framework != "torch":
            raise ConfigError(f"framework {framework!r} is not supported; ftrl uses 'torch'")
        return self

    # ---- attribute access like RLlib (config.lr, config.num_env_runners)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name.endswith("_cfg"):
            raise AttributeError(name)
        for section in _SECTIONS:
            obj = self.__dict__.get(f"{section}_cfg")
            if obj is not None and name in obj.__dataclass_fields__:
                return getattr(obj, name)
        raise AttributeError(
            f"{type(self).__name__} has no attribute {name!r}"
            f"{_suggest(name, self._all_keys())}"
        )

    @property
    def model_config(self) -> ModelConfig:
        """The model dict merged over the ModelConfig defaults."""
        return ModelConfig(**self.training_cfg.model)

    def _all_keys(self) -> list[str]:
        keys = []
        for section in _SECTIONS:
            keys.extend(self._section_types(section))
        return keys

    # ---- serialization

    def to_dict(self) -> dict[str, Any]:
        """Flat dict of every key (msgpack- and TOML-able) plus "algo"."""
        out: dict[str, Any] = {"algo": self.algo_name}
        for section in _SECTIONS:
            out.update(copy.deepcopy(dataclasses.asdict(self._section_obj(section))))
        return out

    def to_sections(self) -> dict[str, Any]:
        """Dict of tables named after the builder methods."""
        out: dict[str, Any] = {"algo": self.algo_name}
        for section in _SECTIONS:
            out[section] = copy.deepcopy(dataclasses.asdict(self._section_obj(section)))
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AlgorithmConfig:
        """Build from flat keys and/or builder-method tables; unknown keys raise."""
        config = cls()
        config.update_from_dict(data)
        return config

    def update_from_dict(self, data: Mapping[str, Any]) -> AlgorithmConfig:
        """Apply flat keys and/or section tables on top of this config."""
        owner = {}
        for section in _SECTIONS:
            for key in self._section_types(section):
                owner[key] = section
        per_section: dict[str, dict[str, Any]] = {s: {} for s in _SECTIONS}
        for key, value in data.items():
            if key == "algo":
                if str(value).upper() != self.algo_name.upper():
                    raise ConfigError(
                        f"algo {value!r} does not match {type(self).__name__} ({self.algo_name})"
                    )
                continue
            if key in _SECTIONS and isinstance(value, Mapping):
                for sub_key, sub_value in value.items():
                    if sub_key not in self._section_types(key):
                        raise ConfigError(
                            f"unknown key {sub_key!r} in [{key}]"
                            f"{_suggest(sub_key, list(self._section_types(key)))}"
                        )
                    per_section[key][sub_key] = sub_value
                continue
            if key not in owner:
                raise ConfigError(
                    f"unknown config key {key!r}{_suggest(key, list(owner) + list(_SECTIONS))}"
                )
            per_section[owner[key]][key] = value
        for section, values in per_section.items():
            if not values:
                continue
            if section == "fault_tolerance":
                self.fault_tolerance(**values)
            else:
                self._set(section, values)
        return self

    @classmethod
    def from_toml(cls, path: str | Path) -> AlgorithmConfig:
        """Load a TOML file (flat keys or builder-method tables). A [stop] table is refused
        here; use `load_job` for job files."""
        return cls.from_dict(_read_toml(path))

    def copy(self) -> AlgorithmConfig:
        return copy.deepcopy(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AlgorithmConfig) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_dict()!r})"

    # ---- derived values

    def get_rollout_fragment_length(self) -> int:
        """Steps per sub-env per sample() call ("auto": train_batch_size over all envs)."""
        frag = self.env_runners_cfg.rollout_fragment_length
        if isinstance(frag, int):
            return frag
        envs = max(1, self.env_runners_cfg.num_env_runners) * self.env_runners_cfg.num_envs_per_env_runner
        return max(1, math.ceil(self.training_cfg.train_batch_size / envs))

    # ---- validation

    def validate(self) -> None:
        """Raise ConfigError for missing, bad or conflicting values. Starts nothing."""
        env = self.environment_cfg
        run = self.env_runners_cfg
        ft = self.fault_tolerance_cfg
        ev = self.evaluation_cfg
        ck = self.checkpointing_cfg
        if not env.env:
            raise ConfigError("no environment set: call .environment('CartPole-v1') or set env")
        _positive_int("num_envs_per_env_runner", run.num_envs_per_env_runner)
        _non_negative_int("num_env_runners", run.num_env_runners)
        frag = run.rollout_fragment_length
        if isinstance(frag, str):
            if frag != "auto":
                raise ConfigError(f"rollout_fragment_length must be a positive int or 'auto', got {frag!r}")
        else:
            _positive_int("rollout_fragment_length", frag)
        if run.observation_filter not in ("NoFilter", "MeanStdFilter"):
            raise ConfigError(
                f"observation_filter must be 'NoFilter' or 'MeanStdFilter', got "
                f"{run.observation_filter!r}"
                f"{_suggest(run.observation_filter, ['NoFilter', 'MeanStdFilter'])}"
            )
        for key in ("sample_timeout_s", "env_runner_health_probe_timeout_s"):
            _positive_float(key, getattr(run, key))
        if run.inference_backend not in ("numpy", "torch"):
            raise ConfigError(
                f"inference_backend must be 'numpy' or 'torch', got {run.inference_backend!r}"
                f"{_suggest(run.inference_backend, ['numpy', 'torch'])}"
            )
        if run.num_cpus_per_env_runner < 0:
            raise ConfigError("num_cpus_per_env_runner must be >= 0")
        if ft.ignore_env_runner_failures and ft.restart_failed_env_runners:
            raise ConfigError(
                "ignore_env_runner_failures and restart_failed_env_runners are mutually "
                "exclusive (as in RLlib): restart failed runners, or go on without them. "
                "Set restart_failed_env_runners=False to ignore failures."
            )
        _non_negative_int("max_num_env_runner_restarts", ft.max_num_env_runner_restarts)
        _positive_int(
            "num_consecutive_env_runner_failures_tolerance",
            ft.num_consecutive_env_runner_failures_tolerance,
        )
        _positive_int("max_num_sub_env_restart_attempts", ft.max_num_sub_env_restart_attempts)
        _positive_float("env_runner_restore_timeout_s", ft.env_runner_restore_timeout_s)
        if ev.evaluation_interval is not None:
            _positive_int("evaluation_interval", ev.evaluation_interval)
        _non_negative_int("evaluation_num_env_runners", ev.evaluation_num_env_runners)
        _positive_int("evaluation_duration", ev.evaluation_duration)
        if ev.evaluation_duration_unit not in ("episodes", "timesteps"):
            raise ConfigError(
                "evaluation_duration_unit must be 'episodes' or 'timesteps', got "
                f"{ev.evaluation_duration_unit!r}"
            )
        _positive_float("evaluation_sample_timeout_s", ev.evaluation_sample_timeout_s)
        _non_negative_int("checkpoint_interval", ck.checkpoint_interval)
        _positive_int("keep_checkpoints", ck.keep_checkpoints)
        seed = self.debugging_cfg.seed
        if seed is not None and not 0 <= seed < 2**31:
            raise ConfigError(f"seed must be in [0, 2**31), got {seed}")
        lrn = self.learners_cfg
        _non_negative_int("num_learners", lrn.num_learners)
        if lrn.n_init_learners is not None and not (
            (1 if lrn.num_learners else 0) <= lrn.n_init_learners <= lrn.num_learners
        ):
            raise ConfigError(
                f"n_init_learners must be between 1 and num_learners={lrn.num_learners}, "
                f"got {lrn.n_init_learners}")
        _positive_int("min_learners", lrn.min_learners)
        if lrn.num_learners and lrn.min_learners > lrn.num_learners:
            raise ConfigError(
                f"min_learners={lrn.min_learners} is more than num_learners={lrn.num_learners}")
        if lrn.num_cpus_per_learner < 0 or lrn.num_gpus_per_learner < 0:
            raise ConfigError("num_cpus_per_learner and num_gpus_per_learner must be >= 0")
        _positive_float("learner_wait_timeout_s", lrn.learner_wait_timeout_s)
        _positive_float("learner_collective_timeout_s", lrn.learner_collective_timeout_s)
        _non_negative_int("max_num_learner_restarts", lrn.max_num_learner_restarts)
        _non_negative_int("max_weights_lag", run.max_weights_lag)
        _positive_int("weights_fanout", run.weights_fanout)
        _positive_int(
            "metrics_num_episodes_for_smoothing", self.reporting_cfg.metrics_num_episodes_for_smoothing
        )
        self._validate_model()
        self._validate_training()

    def _validate_model(self) -> None:
        model = self.model_config
        if not model.fcnet_hiddens or not all(
            isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in model.fcnet_hiddens
        ):
            raise ConfigError(f"model fcnet_hiddens must be a non-empty list of positive ints, got {model.fcnet_hiddens!r}")
        if model.fcnet_activation not in ("tanh", "relu", "elu", "linear"):
            raise ConfigError(
                f"model fcnet_activation must be tanh, relu, elu or linear, got {model.fcnet_activation!r}"
            )

    def _validate_training(self) -> None:
        """Hook for subclasses."""

    # ---- build

    def build(self, **kwargs: Any) -> Any:
        """Validate, then create the Algorithm (kwargs go to its constructor, e.g. client=)."""
        self.validate()
        import importlib

        module, _, name = self.algorithm_path.partition(":")
        algo_cls = getattr(importlib.import_module(module), name)
        return algo_cls(self, **kwargs)

    # RLlib alias
    build_algo = build


class PPOConfig(AlgorithmConfig):
    """PPO config builder: `PPOConfig().environment("CartPole-v1").training(lr=1e-3).build()`."""

    algo_name = "PPO"
    training_cls = PPOTrainingConfig
    algorithm_path = "ftrl.rl.algorithms.ppo:PPO"

    def training(  # type: ignore[override]
        self,
        *,
        lr: float = _NOT_SET,
        lr_schedule: list | None = _NOT_SET,
        gamma: float = _NOT_SET,
        lambda_: float = _NOT_SET,
        use_gae: bool = _NOT_SET,
        train_batch_size: int = _NOT_SET,
        minibatch_size: int = _NOT_SET,
        num_epochs: int = _NOT_SET,
        clip_param: float = _NOT_SET,
        clip_param_schedule: list | None = _NOT_SET,
        vf_loss_coeff: float = _NOT_SET,
        vf_clip_param: float | None = _NOT_SET,
        entropy_coeff: float = _NOT_SET,
        grad_clip: float | None = _NOT_SET,
        normalize_advantages: bool = _NOT_SET,
        adam_epsilon: float = _NOT_SET,
        model: dict = _NOT_SET,
        **unknown: Any,
    ) -> PPOConfig:
        """PPO hyperparameters. Schedules are RLlib-style [[env_step, value], ...] lists,
        interpolated linearly and held after the last point."""
        self._set("training", _locals_without_self(locals()))
        return self

    def _validate_training(self) -> None:
        t = self.training_cfg
        _positive_float("lr", t.lr)
        for key in ("gamma", "lambda_"):
            value = getattr(t, key)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"{key} must be in [0, 1], got {value}")
        _positive_int("train_batch_size", t.train_batch_size)
        _positive_int("minibatch_size", t.minibatch_size)
        _positive_int("num_epochs", t.num_epochs)
        if t.minibatch_size > t.train_batch_size:
            raise ConfigError(
                f"minibatch_size ({t.minibatch_size}) must not exceed train_batch_size "
                f"({t.train_batch_size})"
            )
        _positive_float("clip_param", t.clip_param)
        if t.vf_loss_coeff < 0 or t.entropy_coeff < 0:
            raise ConfigError("vf_loss_coeff and entropy_coeff must be >= 0")
        for key in ("vf_clip_param", "grad_clip"):
            value = getattr(t, key)
            if value is not None:
                _positive_float(key, value)
        _positive_float("adam_epsilon", t.adam_epsilon)
        for key in ("lr_schedule", "clip_param_schedule"):
            check_schedule(key, getattr(t, key))


# --------------------------------------------------------------------------- helpers


def check_schedule(name: str, schedule: list | None) -> None:
    """A schedule is None or a non-empty list of [env_step, value] with rising steps."""
    if schedule is None:
        return
    if not schedule:
        raise ConfigError(f"{name} must not be empty (use None for a constant)")
    last = -math.inf
    for point in schedule:
        if (
            not isinstance(point, (list, tuple))
            or len(point) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in point)
        ):
            raise ConfigError(f"{name} entries must be [env_step, value] pairs, got {point!r}")
        if point[0] < last:
            raise ConfigError(f"{name} env steps must not decrease: {schedule!r}")
        if point[1] < 0:
            raise ConfigError(f"{name} values must be >= 0: {schedule!r}")
        last = point[0]


def _locals_without_self(values: dict[str, Any]) -> dict[str, Any]:
    """A builder method's arguments; unknown keywords stay in so `_set` names them."""
    out = {k: v for k, v in values.items() if k not in ("self", "__class__", "unknown")}
    out.update(values.get("unknown") or {})
    return out


def _positive_int(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{name} must be a positive int, got {value!r}")


def _non_negative_int(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"{name} must be an int >= 0, got {value!r}")


def _positive_float(name: str, value: Any) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0 or not math.isfinite(value):
        raise ConfigError(f"{name} must be a positive finite number, got {value!r}")


def _read_toml(path: str | Path) -> dict[str, Any]:
    try:
        import tomllib
    except ModuleNotFoundError as e:  # Python 3.10
        raise ConfigError("reading TOML needs Python 3.11+ (tomllib)") from e
    path = Path(path)
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file {str(path)!r} does not exist") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {e}") from None


ALGORITHMS: dict[str, type[AlgorithmConfig]] = {"PPO": PPOConfig}


def config_class(algo: str) -> type[AlgorithmConfig]:
    """The config class for an algorithm name ("ppo", "PPO")."""
    try:
        return ALGORITHMS[algo.upper()]
    except KeyError:
        raise ConfigError(
            f"unknown algorithm {algo!r}{_suggest(algo.upper(), list(ALGORITHMS))}; "
            f"known: {sorted(ALGORITHMS)}"
        ) from None


@dataclass
class StopCriteria:
    """When `ftrl train` stops: any criterion that is set and met."""

    stop_reward: float | None = None
    stop_timesteps: int | None = None
    stop_iters: int | None = None

    def met(self, result: Mapping[str, Any]) -> str | None:
        """The name of the first criterion `result` meets, or None."""
        ret = result.get("episode_return_mean")
        if self.stop_reward is not None and ret is not None and ret == ret and ret >= self.stop_reward:
            return "stop_reward"
        if self.stop_timesteps is not None and result.get("env_steps_sampled", 0) >= self.stop_timesteps:
            return "stop_timesteps"
        if self.stop_iters is not None and result.get("iteration", 0) >= self.stop_iters:
            return "stop_iters"
        return None

    def update(self, values: Mapping[str, Any]) -> None:
        hints = typing.get_type_hints(StopCriteria)
        for key, value in values.items():
            if key not in hints:
                raise ConfigError(f"unknown key {key!r} in [stop]{_suggest(key, list(hints))}")
            value = _coerce(value, hints[key])
            if not _type_ok(value, hints[key]):
                raise ConfigError(f"stop {key} must be {_type_name(hints[key])}, got {value!r}")
            setattr(self, key, value)


@dataclass
class JobSpec:
    """A job file: the algorithm config plus stop criteria."""

    config: AlgorithmConfig
    stop: StopCriteria


def load_job(path: str | Path | None = None, data: Mapping[str, Any] | None = None, algo: str | None = None) -> JobSpec:
    """Read a job TOML (or an already-parsed dict): top-level `algo`, config keys or tables,
    and an optional [stop] table."""
    raw = dict(data) if data is not None else (_read_toml(path) if path is not None else {})
    stop_values = raw.pop("stop", {})
    if not isinstance(stop_values, Mapping):
        raise ConfigError("[stop] must be a table")
    name = algo or raw.get("algo") or "PPO"
    raw.pop("algo", None)
    cls = config_class(str(name))
    config = cls.from_dict(raw)
    stop = StopCriteria()
    stop.update(stop_values)
    return JobSpec(config=config, stop=stop)
