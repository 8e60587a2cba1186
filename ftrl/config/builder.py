"""AlgorithmConfig: the builder every algorithm's config extends (RLlib's shape).

`PPOConfig()` is a builder: each method (`environment`, `env_runners`, `training`,
`fault_tolerance`, `evaluation`, `checkpointing`, `debugging`, `learners`,
`reporting`) sets fields of one dataclass section and returns the config, so calls
chain as in RLlib. Keys use RLlib's names where RLlib has the concept.

Serialized forms:
- `to_dict()` is flat (`{"env": ..., "num_env_runners": ..., "lr": ...}`) plus
  `"algo"`; every key is unique across sections, so `from_dict` also accepts flat keys.
- `from_dict` / `from_toml` accept either flat keys or tables named after the builder
  methods (`[environment]`, `[env_runners]`, `[training]`, `[training.model]`, ...),
  or a mix.
- Unknown keys raise `ConfigError` naming the key and the nearest valid one.

An algorithm's config subclass sets `algo_name`, `training_cls` (its training section,
a `TrainingConfig` subclass) and `algorithm_path` (its Algorithm class, imported only by
`build()`: this module imports no torch).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from ftrl.config.fields import (
    NOT_SET,
    check_value,
    fields_of,
    keys_of,
    suggest,
)
from ftrl.config.keys import NEVER, KeyFacts
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
    ResourcesConfig,
    TrainingConfig,
    check_learner_gpus,
)
from ftrl.util.imports import import_object
from ftrl.wire.errors import ConfigError

_SECTIONS: dict[str, type] = {
    "environment": EnvironmentConfig,
    "env_runners": EnvRunnersConfig,
    "training": TrainingConfig,
    "fault_tolerance": FaultToleranceConfig,
    "evaluation": EvaluationConfig,
    "checkpointing": CheckpointingConfig,
    "debugging": DebuggingConfig,
    "learners": LearnersConfig,
    "resources": ResourcesConfig,
    "reporting": ReportingConfig,
    "callbacks": CallbacksConfig,
}

_Config = TypeVar("_Config", bound="AlgorithmConfig")


class AlgorithmConfig:
    """Base builder. Subclasses set `algo_name`, `training_cls` and `algorithm_path`, and
    override `training` decorated with `@keys_of(their training dataclass)`."""

    algo_name = "Algorithm"
    training_cls: type = TrainingConfig
    algorithm_path = ""
    #: the facts of "algo" (`algo_name`), the one key of `to_dict()` that is no section field
    algo_key_facts: ClassVar[KeyFacts] = KeyFacts(change=NEVER, mesh=True, fixed_on_resume=True)

    def __init__(self) -> None:
        self.environment_cfg = EnvironmentConfig()
        self.env_runners_cfg = EnvRunnersConfig()
        self.training_cfg = self.training_cls()
        self.fault_tolerance_cfg = FaultToleranceConfig()
        self.evaluation_cfg = EvaluationConfig()
        self.checkpointing_cfg = CheckpointingConfig()
        self.debugging_cfg = DebuggingConfig()
        self.learners_cfg = LearnersConfig()
        self.resources_cfg = ResourcesConfig()
        self.reporting_cfg = ReportingConfig()
        self.callbacks_cfg = CallbacksConfig()
        self._explicit: set[str] = set()

    @classmethod
    def section_classes(cls) -> dict[str, type]:
        """Builder-method name -> its section dataclass (the training one is this algo's)."""
        return {**_SECTIONS, "training": cls.training_cls}

    # ---- generic field setting

    def _section_obj(self, section: str) -> Any:
        return getattr(self, f"{section}_cfg")

    def _set(self: _Config, section: str, values: Mapping[str, Any]) -> _Config:
        """Check every value of `values` against the section's fields, then set them all
        (a bad value changes nothing)."""
        obj = self._section_obj(section)
        checked = {
            key: check_value(type(obj), key, value, where=f"{section}()")
            for key, value in values.items()
            if value is not NOT_SET
        }
        for key, value in checked.items():
            setattr(obj, key, copy.deepcopy(value))
            self._explicit.add(key)
        return self

    # ---- builder methods (RLlib names); their keys are the fields of the section

    @keys_of(EnvironmentConfig)
    def environment(self: _Config, env: str | None = NOT_SET, **kwargs: Any) -> _Config:
        """Set the environment: a gymnasium id or "pkg.mod:make_env" (called with env_config)."""
        return self._set("environment", {"env": env, **kwargs})

    @keys_of(EnvRunnersConfig)
    def env_runners(self: _Config, **kwargs: Any) -> _Config:
        """Set how many runners sample, with how many sub-envs each, and their timeouts."""
        return self._set("env_runners", kwargs)

    @keys_of(TrainingConfig)
    def training(self: _Config, **kwargs: Any) -> _Config:
        """Set algorithm hyperparameters (the fields of `training_cls`)."""
        return self._set("training", kwargs)

    @keys_of(FaultToleranceConfig)
    def fault_tolerance(self: _Config, **kwargs: Any) -> _Config:
        """Set the failure policy.

        `restart_failed_env_runners` (default True) and `ignore_env_runner_failures` are
        mutually exclusive. Setting `ignore_env_runner_failures=True` while
        `restart_failed_env_runners` was never set explicitly turns restarts off;
        setting both to True explicitly is a ConfigError.
        """
        restart_off = (
            kwargs.get("ignore_env_runner_failures") is True
            and kwargs.get("restart_failed_env_runners", NOT_SET) is NOT_SET
            and "restart_failed_env_runners" not in self._explicit
        )
        self._set("fault_tolerance", kwargs)
        if restart_off:
            self.fault_tolerance_cfg.restart_failed_env_runners = False
        return self

    @keys_of(EvaluationConfig)
    def evaluation(self: _Config, **kwargs: Any) -> _Config:
        """Evaluate every `evaluation_interval` iterations (None: never)."""
        return self._set("evaluation", kwargs)

    @keys_of(CheckpointingConfig)
    def checkpointing(self: _Config, **kwargs: Any) -> _Config:
        """Checkpoint every `checkpoint_interval` iterations (0: only at the end)."""
        return self._set("checkpointing", kwargs)

    @keys_of(DebuggingConfig)
    def debugging(self: _Config, **kwargs: Any) -> _Config:
        """Seed everything (runners get seed + their index) and set the log level."""
        return self._set("debugging", kwargs)

    @keys_of(LearnersConfig)
    def learners(self: _Config, **kwargs: Any) -> _Config:
        """The learner mesh. `num_learners=0` learns inside the Algorithm process; M > 0
        starts M learner actors (`JOB/learner/I`). Training starts once `n_init_learners`
        (default: all) joined, pauses below `min_learners` for up to
        `learner_wait_timeout_s`; a collective slower than `learner_collective_timeout_s`
        counts as a hang."""
        return self._set("learners", kwargs)

    @keys_of(ResourcesConfig)
    def resources(self: _Config, **kwargs: Any) -> _Config:
        """The driver's resources (`num_cpus_for_main_process`, default 0 as before,
        `custom_resources_for_main_process`) and `placement_strategy` (PACK, RLlib's default,
        or SPREAD). The runners' and learners' custom resources are in `env_runners()` and
        `learners()`."""
        return self._set("resources", kwargs)

    @keys_of(ReportingConfig)
    def reporting(self: _Config, **kwargs: Any) -> _Config:
        """Metric smoothing window (episodes) and a minimum of env steps per iteration."""
        return self._set("reporting", kwargs)

    @keys_of(CallbacksConfig)
    def callbacks(self: _Config, callbacks_class: str | None = NOT_SET, **kwargs: Any) -> _Config:
        """User callbacks by import path: `config.callbacks("pkg.mod:MyCallbacks")`, a
        subclass of `ftrl.Callbacks` (imported and checked by the Algorithm, before it
        starts anything, and by `ftrl train/submit/tune` before they submit)."""
        return self._set("callbacks", {"callbacks_class": callbacks_class, **kwargs})

    def framework(self: _Config, framework: str = "torch") -> _Config:
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
            f"{suggest(name, self._all_keys())}"
        )

    @property
    def model_config(self) -> ModelConfig:
        """The model dict merged over the ModelConfig defaults."""
        return ModelConfig(**self.training_cfg.model)

    @classmethod
    def _owners(cls) -> dict[str, str]:
        """Flat key -> its section (keys are unique across sections)."""
        return {key: section for section, sec_cls in cls.section_classes().items() for key in fields_of(sec_cls)}

    def _all_keys(self) -> list[str]:
        return list(self._owners())

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

    def update_from_dict(self: _Config, data: Mapping[str, Any]) -> _Config:
        """Apply flat keys and/or section tables on top of this config (the path of TOML
        files and `--set KEY=VALUE`). Each section goes through its builder method."""
        sections = self.section_classes()
        owner = self._owners()
        per_section: dict[str, dict[str, Any]] = {s: {} for s in sections}
        for key, value in data.items():
            if key == "algo":
                if str(value).upper() != self.algo_name.upper():
                    raise ConfigError(
                        f"algo {value!r} does not match {type(self).__name__} ({self.algo_name})"
                    )
                continue
            if key in sections and isinstance(value, Mapping):
                for sub_key, sub_value in value.items():
                    if sub_key not in fields_of(sections[key]):
                        raise ConfigError(
                            f"unknown key {sub_key!r} in [{key}]"
                            f"{suggest(sub_key, list(fields_of(sections[key])))}"
                        )
                    per_section[key][sub_key] = sub_value
                continue
            if key not in owner:
                raise ConfigError(
                    f"unknown config key {key!r}{suggest(key, list(owner) + list(sections))}"
                )
            per_section[owner[key]][key] = value
        for section, values in per_section.items():
            if values:
                getattr(self, section)(**values)
        return self

    @classmethod
    def from_toml(cls, path: str | Path) -> AlgorithmConfig:
        """Load a TOML file (flat keys or builder-method tables). A [stop] table is refused
        here; use `load_job` for job files."""
        return cls.from_dict(read_toml(path))

    def copy(self: _Config) -> _Config:
        return copy.deepcopy(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AlgorithmConfig) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_dict()!r})"

    # ---- derived values

    def driver_resources(self) -> dict[str, float]:
        """What the job's driver actor takes on a worker."""
        res = self.resources_cfg
        return {"cpu": float(res.num_cpus_for_main_process), **res.custom_resources_for_main_process}

    def env_runner_resources(self) -> dict[str, float]:
        """What each env runner (and evaluation runner) takes on a worker."""
        run = self.env_runners_cfg
        gpus = {"gpu": float(run.num_gpus_per_env_runner)} if run.num_gpus_per_env_runner else {}
        return {"cpu": float(run.num_cpus_per_env_runner), **gpus, **run.custom_resources_per_env_runner}

    def learner_resources(self) -> dict[str, float]:
        """What each learner actor takes on a worker."""
        lrn = self.learners_cfg
        gpus = {"gpu": float(lrn.num_gpus_per_learner)} if lrn.num_gpus_per_learner else {}
        return {"cpu": float(lrn.num_cpus_per_learner), **gpus, **lrn.custom_resources_per_learner}

    def job_resources(self) -> dict[str, float]:
        """What all the job's actors take at once: its driver, env runners, evaluation
        runners (when it evaluates) and learners."""
        run, ev, lrn = self.env_runners_cfg, self.evaluation_cfg, self.learners_cfg
        runners = run.num_env_runners + (ev.evaluation_num_env_runners if ev.evaluation_interval is not None else 0)
        out: dict[str, float] = {}
        for each, count in ((self.driver_resources(), 1), (self.env_runner_resources(), runners),
                            (self.learner_resources(), lrn.num_learners)):
            for key, amount in each.items():
                out[key] = out.get(key, 0.0) + count * float(amount)
        return out

    def get_rollout_fragment_length(self) -> int:
        """Steps per sub-env per sample() call ("auto": train_batch_size over all envs)."""
        frag = self.env_runners_cfg.rollout_fragment_length
        if isinstance(frag, int):
            return frag
        envs = max(1, self.env_runners_cfg.num_env_runners) * self.env_runners_cfg.num_envs_per_env_runner
        return max(1, math.ceil(self.training_cfg.train_batch_size / envs))

    # ---- validation

    def validate(self) -> None:
        """Raise ConfigError for missing, bad or conflicting values. Starts nothing.

        Every field is checked again (type and per-field check), so values written
        straight into a section object are caught too; then the checks across fields."""
        if not self.environment_cfg.env:
            raise ConfigError("no environment set: call .environment('CartPole-v1') or set env")
        for section, cls in self.section_classes().items():
            obj = self._section_obj(section)
            for key in fields_of(cls):
                check_value(cls, key, getattr(obj, key), where=f"{section}()")
        ft = self.fault_tolerance_cfg
        if ft.ignore_env_runner_failures and ft.restart_failed_env_runners:
            raise ConfigError(
                "ignore_env_runner_failures and restart_failed_env_runners are mutually "
                "exclusive (as in RLlib): restart failed runners, or go on without them. "
                "Set restart_failed_env_runners=False to ignore failures."
            )
        lrn = self.learners_cfg
        if lrn.n_init_learners is not None and not (
            (1 if lrn.num_learners else 0) <= lrn.n_init_learners <= lrn.num_learners
        ):
            raise ConfigError(
                f"n_init_learners must be between 1 and num_learners={lrn.num_learners}, "
                f"got {lrn.n_init_learners}")
        if lrn.num_learners and lrn.min_learners > lrn.num_learners:
            raise ConfigError(
                f"min_learners={lrn.min_learners} is more than num_learners={lrn.num_learners}")
        check_learner_gpus(lrn)
        self._validate_training()

    def _validate_training(self) -> None:
        """Hook for subclasses: checks across training fields."""

    # ---- build

    def build(self, **kwargs: Any) -> Any:
        """Validate, then create the Algorithm (kwargs go to its constructor, e.g. client=)."""
        self.validate()
        return import_object(self.algorithm_path)(self, **kwargs)

    # RLlib alias
    build_algo = build


def read_toml(path: str | Path) -> dict[str, Any]:
    """A TOML file as a dict; ConfigError names the file when it is missing or not TOML."""
    import tomllib

    path = Path(path)
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file {str(path)!r} does not exist") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {str(path)!r} is not valid TOML: {e}") from None
