"""Typed, RLlib-compatible algorithm configs.

`PPOConfig()` is a builder: each method (`environment`, `env_runners`, `training`,
`fault_tolerance`, `evaluation`, `checkpointing`, `debugging`, `learners`,
`reporting`) sets fields of one dataclass section and returns the config, so calls
chain as in RLlib. Keys use RLlib's names where RLlib has the concept.

One definition per field: each key is one dataclass field written with
`option(default, "one-line doc", check=...)`. Everything else derives from it: the
builder method of its section accepts exactly that section's keys (their signature and
`help()` text are generated from the fields), the TOML tables, `to_dict`/`from_dict`,
`ftrl train --set KEY=VALUE` (which goes through `update_from_dict`), the type checks
(from the annotation) and the per-field checks (positive, choices, ...), which run when a
value is set and again in `validate()`. Only checks across fields (mutually exclusive
options, minibatch vs batch size, ...) are written in `validate()`.
`describe()` (or `python -m ftrl.config`) lists every key with its type, default and doc.

Serialized forms:
- `to_dict()` is flat (`{"env": ..., "num_env_runners": ..., "lr": ...}`) plus
  `"algo"`; every key is unique across sections, so `from_dict` also accepts flat keys.
- `from_dict` / `from_toml` accept either flat keys or tables named after the builder
  methods (`[environment]`, `[env_runners]`, `[training]`, `[training.model]`, ...),
  or a mix. A job file may also carry `algo = "PPO"` and a `[stop]` table
  (`stop_reward`, `stop_timesteps`, `stop_iters`) read by `load_job`.
- Unknown keys raise `ConfigError` naming the key and the nearest valid one.

To add a key: add one `option(...)` field to its section dataclass. Nothing else.

This module imports no torch; `build()` imports the RL room lazily.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import inspect
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, Union

from ftrl.util.imports import import_object
from ftrl.wire.errors import ConfigError


class _Unset:
    """The default of every builder keyword: "leave this key as it is"."""

    def __repr__(self) -> str:
        return "<unchanged>"


_NOT_SET: Any = _Unset()

#: A per-field check: called as check(name, value) with a value of the field's type
#: (never None); raises ConfigError.
Check = Callable[[str, Any], None]

# --------------------------------------------------------------------------- per-field checks


def positive_int(name: str, value: Any) -> None:
    """Check: an int > 0."""
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ConfigError(f"{name} must be a positive int, got {value!r}")


def non_negative_int(name: str, value: Any) -> None:
    """Check: an int >= 0."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(f"{name} must be an int >= 0, got {value!r}")


def positive_float(name: str, value: Any) -> None:
    """Check: a finite number > 0."""
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not value > 0
        or not math.isfinite(value)
    ):
        raise ConfigError(f"{name} must be a positive finite number, got {value!r}")


def non_negative_float(name: str, value: Any) -> None:
    """Check: a finite number >= 0."""
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not value >= 0
        or not math.isfinite(value)
    ):
        raise ConfigError(f"{name} must be >= 0, got {value!r}")


def unit_interval(name: str, value: Any) -> None:
    """Check: a number in [0, 1]."""
    if not 0.0 <= value <= 1.0:
        raise ConfigError(f"{name} must be in [0, 1], got {value}")


def one_of(*choices: str) -> Check:
    """Check: one of `choices` (an error suggests the nearest)."""

    def check(name: str, value: Any) -> None:
        if value not in choices:
            listed = " or ".join(repr(c) for c in choices)
            raise ConfigError(
                f"{name} must be {listed}, got {value!r}{_suggest(str(value), list(choices))}"
            )

    check.__doc__ = f"one of {', '.join(choices)}"
    return check


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


def _fragment_length(name: str, value: Any) -> None:
    if isinstance(value, str):
        if value != "auto":
            raise ConfigError(f"{name} must be a positive int or 'auto', got {value!r}")
    else:
        positive_int(name, value)


def _seed(name: str, value: int) -> None:
    if not 0 <= value < 2**31:
        raise ConfigError(f"{name} must be in [0, 2**31), got {value}")


def _hidden_sizes(name: str, value: list) -> None:
    if not value or not all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in value):
        raise ConfigError(f"{name} must be a non-empty list of positive ints, got {value!r}")


_EVAL_OVERRIDE_KEYS = ("explore", "env_config")


def _eval_overrides(name: str, value: Mapping[str, Any]) -> None:
    for key in value:
        if key not in _EVAL_OVERRIDE_KEYS:
            raise ConfigError(
                f"{name} supports only {list(_EVAL_OVERRIDE_KEYS)}; got {key!r}"
                f"{_suggest(key, list(_EVAL_OVERRIDE_KEYS))}"
            )


# --------------------------------------------------------------------------- one field


def option(default: Any, doc: str, *, check: Check | None = None, schema: type | None = None) -> Any:
    """One config field: its default, a one-line doc and an optional per-field check.

    `check(name, value)` runs on every non-None value (after the type check that the
    annotation implies) and raises ConfigError. `schema` names a dataclass whose fields
    are the allowed keys of a dict-valued field (as `model`). List and dict defaults are
    copied per instance (ruff's RUF009 cannot see that: hence its noqa on such fields).
    """
    metadata = {"doc": doc, "check": check, "schema": schema}
    if isinstance(default, (list, dict)):
        return field(default_factory=functools.partial(copy.deepcopy, default), metadata=metadata)
    return field(default=default, metadata=metadata)


# --------------------------------------------------------------------------- sections


@dataclass
class EnvironmentConfig:
    """What to run: a gymnasium id or an import path "pkg.mod:make_env"."""

    env: str | None = option(
        None, 'gymnasium id ("CartPole-v1") or import path "pkg.mod:make_env" called with env_config'
    )
    env_config: dict = option({}, "keyword arguments for gymnasium.make, or the dict given to make_env")  # noqa: RUF009


@dataclass
class EnvRunnersConfig:
    """How samples are collected."""

    num_env_runners: int = option(
        0, "remote env-runner actors (0: the driver samples itself)", check=non_negative_int
    )
    num_envs_per_env_runner: int = option(
        1, "sub-environments stepped together by each runner", check=positive_int
    )
    rollout_fragment_length: Union[int, str] = option(
        "auto",
        'steps per sub-env per sample() ("auto": the fragments of a round add up to train_batch_size)',
        check=_fragment_length,
    )
    remote_worker_envs: bool = option(
        False, "run each sub-env in its own child process (a crash or hang kills only that sub-env)"
    )
    observation_filter: str = option(
        "NoFilter", "observation normalization: NoFilter or MeanStdFilter (running mean/std)",
        check=one_of("NoFilter", "MeanStdFilter"),
    )
    sample_timeout_s: float = option(
        60.0, "seconds a sampling round waits for the runners before going on without the late ones",
        check=positive_float,
    )
    env_step_timeout_s: float = option(
        60.0, "seconds without any env step while sampling (or building one sub-env) before a runner "
        "actor is killed and restarted (a driver actor that samples itself: restarted, resumed)",
        check=positive_float,
    )
    sample_busy_poll_s: float = option(
        0.01, "seconds a runner busy-polls (yielding its CPU) for its next sample request before it sleeps, "
        "while recent requests came that fast (0: never): spares waking an idle CPU each round, "
        "costs at most this much CPU per round", check=non_negative_float,
    )
    env_runner_health_probe_timeout_s: float = option(
        30.0, "seconds a health probe of a runner may take", check=positive_float
    )
    validate_env_runners_after_construction: bool = option(
        True, "probe every runner once it is created and fail early if none works"
    )
    num_cpus_per_env_runner: float = option(
        1.0, "CPU slots each runner takes on a worker", check=non_negative_float
    )
    explore: bool = option(True, "sample actions (True) or take the most likely action (False)")
    inference_backend: str = option(
        "numpy", "the runners' policy forward pass: numpy (light) or torch",
        check=one_of("numpy", "torch"),
    )
    max_weights_lag: int = option(
        0, "use fragments sampled with weights at most this many versions behind the learner (0: the current version only)",
        check=non_negative_int,
    )
    weights_fanout: int = option(
        4, "children per node of the tree that broadcasts weights to the runners", check=positive_int
    )


@dataclass
class ModelConfig:
    """The fully connected actor-critic network (the `model` dict of training())."""

    fcnet_hiddens: list = option([64, 64], "hidden layer sizes", check=_hidden_sizes)  # noqa: RUF009
    fcnet_activation: str = option(
        "tanh", "hidden layer activation", check=one_of("tanh", "relu", "elu", "linear")
    )
    vf_share_layers: bool = option(False, "value head on the policy's hidden layers (else its own)")
    free_log_std: bool = option(True, "continuous actions: a state-independent, learned log std")
    init_log_std: float = option(0.0, "continuous actions: the initial log std")


@dataclass
class PPOTrainingConfig:
    """PPO hyperparameters (one dataclass, CleanRL style)."""

    lr: float = option(3e-4, "Adam learning rate", check=positive_float)
    lr_schedule: list | None = option(  # noqa: RUF009
        None, "[[env_step, lr], ...], linear in between, held after the last (None: constant lr)",
        check=check_schedule,
    )
    gamma: float = option(0.99, "discount factor", check=unit_interval)
    lambda_: float = option(0.95, "GAE lambda", check=unit_interval)
    use_gae: bool = option(True, "generalized advantage estimation (else plain returns minus value)")
    train_batch_size: int = option(4000, "env steps per training iteration, at least (every fragment a round asked for is used)", check=positive_int)
    minibatch_size: int = option(128, "steps per SGD minibatch", check=positive_int)
    num_epochs: int = option(10, "passes over each train batch", check=positive_int)
    clip_param: float = option(0.2, "PPO policy ratio clip", check=positive_float)
    clip_param_schedule: list | None = option(  # noqa: RUF009
        None, "[[env_step, clip_param], ...] like lr_schedule (None: constant)", check=check_schedule
    )
    vf_loss_coeff: float = option(0.5, "weight of the value loss", check=non_negative_float)
    vf_clip_param: float | None = option(
        None, "clip of the value-function update (None: no clip)", check=positive_float
    )
    entropy_coeff: float = option(0.0, "weight of the entropy bonus", check=non_negative_float)
    grad_clip: float | None = option(
        0.5, "max global gradient norm (None: no clip)", check=positive_float
    )
    normalize_advantages: bool = option(True, "normalize advantages per minibatch")
    adam_epsilon: float = option(1e-5, "Adam epsilon", check=positive_float)
    model: dict = option({}, "network keys, over the defaults of ModelConfig", schema=ModelConfig)  # noqa: RUF009


@dataclass
class FaultToleranceConfig:
    """What happens when env runners or sub-environments fail (RLlib's names)."""

    restart_failed_env_runners: bool = option(
        True, "restart a failed runner and bring it back (exclusive with ignore_env_runner_failures)"
    )
    ignore_env_runner_failures: bool = option(
        False, "drop a failed runner and train on with the rest"
    )
    max_num_env_runner_restarts: int = option(
        1000, "restarts allowed per runner before it is dead", check=non_negative_int
    )
    num_consecutive_env_runner_failures_tolerance: int = option(
        100, "failures in a row (no good sample between) before training fails", check=positive_int
    )
    restart_failed_sub_environments: bool = option(
        False, "rebuild a failed sub-env inside its runner instead of failing the runner"
    )
    max_num_sub_env_restart_attempts: int = option(
        5, "attempts to rebuild one failed sub-env", check=positive_int
    )
    env_runner_restore_timeout_s: float = option(
        60.0, "seconds to wait for a restarted runner to come back", check=positive_float
    )


@dataclass
class EvaluationConfig:
    """Periodic evaluation on separate runners."""

    evaluation_interval: int | None = option(
        None, "evaluate every this many iterations (None: never)", check=positive_int
    )
    evaluation_num_env_runners: int = option(
        0, "evaluation runners (0: evaluate in the driver)", check=non_negative_int
    )
    evaluation_duration: int = option(
        10, "how much to evaluate, in evaluation_duration_unit", check=positive_int
    )
    evaluation_duration_unit: str = option(
        "episodes", "unit of evaluation_duration: episodes or timesteps",
        check=one_of("episodes", "timesteps"),
    )
    evaluation_sample_timeout_s: float = option(
        120.0, "seconds an evaluation round waits for its runners", check=positive_float
    )
    evaluation_config: dict = option(  # noqa: RUF009
        {}, "overrides while evaluating; only explore and env_config", check=_eval_overrides
    )


@dataclass
class CheckpointingConfig:
    """Checkpoints under OUTPUT/checkpoints/."""

    checkpoint_interval: int = option(
        10, "checkpoint every this many iterations (0: only at the end)", check=non_negative_int
    )
    keep_checkpoints: int = option(3, "newest checkpoints kept on disk", check=positive_int)
    checkpoint_at_end: bool = option(True, "write a checkpoint when training stops")


@dataclass
class DebuggingConfig:
    """Seeds and logging."""

    seed: int | None = option(None, "seed for everything; runner I uses seed + I (None: random)", check=_seed)
    log_level: str = option("WARN", "log level of the algorithm's processes")


@dataclass
class LearnersConfig:
    """The learner mesh: 0 learns in the driver; M > 0 trains data-parallel on M learner
    actors over torch.distributed (NCCL on GPUs, gloo on CPUs) that re-form on failure."""

    num_learners: int = option(
        0, "learner actors (0: learn in the driver process)", check=non_negative_int
    )
    n_init_learners: int | None = option(
        None, "learners that must join before training starts (None: all)"
    )
    min_learners: int = option(
        1, "training pauses while fewer learners are alive", check=positive_int
    )
    num_cpus_per_learner: float = option(
        1.0, "CPU slots each learner takes on a worker", check=non_negative_float
    )
    num_gpus_per_learner: float = option(
        0.0, "GPUs each learner takes", check=non_negative_float
    )
    learner_wait_timeout_s: float = option(
        600.0, "seconds to wait below min_learners before failing", check=positive_float
    )
    learner_collective_timeout_s: float = option(
        60.0, "a collective slower than this counts as a hang", check=positive_float
    )
    max_num_learner_restarts: int = option(
        1000, "restarts allowed per learner", check=non_negative_int
    )


@dataclass
class ReportingConfig:
    """Metrics."""

    metrics_num_episodes_for_smoothing: int = option(
        100, "episodes in the episode_return_mean window", check=positive_int
    )
    min_sample_timesteps_per_iteration: int = option(
        0, "repeat sampling and training until an iteration has this many env steps",
        check=non_negative_int,
    )


def check_learner_gpus(lrn: LearnersConfig) -> None:
    """ConfigError for learner GPU settings NCCL cannot run: a learner uses one GPU (cuda:0
    of its own CUDA_VISIBLE_DEVICES), and two ranks of one mesh cannot share a GPU."""
    gpus = lrn.num_gpus_per_learner
    if not gpus:
        return
    if lrn.num_learners == 0:
        raise ConfigError(
            f"num_gpus_per_learner={gpus:g} needs learner actors: set num_learners >= 1 "
            "(with num_learners=0 the driver learns, on its CPU)")
    if gpus > 1:
        raise ConfigError(
            f"num_gpus_per_learner={gpus:g}: a learner uses one GPU; for more GPUs, "
            "add learners (num_learners)")
    if gpus < 1 and lrn.num_learners > 1:
        raise ConfigError(
            f"num_gpus_per_learner={gpus:g} with num_learners={lrn.num_learners}: learners "
            "sharing a GPU cannot form an NCCL group; give each learner a whole GPU "
            "(num_gpus_per_learner=1) or use one learner")


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


@functools.cache
def fields_of(cls: type) -> dict[str, tuple[Any, dataclasses.Field]]:
    """A section dataclass's keys: name -> (type, dataclasses.Field with metadata doc, check)."""
    hints = typing.get_type_hints(cls)
    return {f.name: (hints[f.name], f) for f in dataclasses.fields(cls)}


def field_doc(cls: type, key: str) -> str:
    """The one-line doc of key `key` of section `cls`."""
    return fields_of(cls)[key][1].metadata.get("doc", "")


def check_value(cls: type, key: str, value: Any, where: str, prefix: str = "") -> Any:
    """`value` for key `key` of `cls`, coerced and checked against the field's type, its
    schema and its check; an unknown key names the nearest valid one. Raises ConfigError."""
    fields = fields_of(cls)
    if key not in fields:
        raise ConfigError(f"unknown key {key!r} in {where}{_suggest(key, list(fields))}")
    tp, f = fields[key]
    value = _coerce(value, tp)
    if not _type_ok(value, tp):
        raise ConfigError(
            f"{prefix}{key} must be {_type_name(tp)}, got {type(value).__name__} {value!r}"
        )
    schema = f.metadata.get("schema")
    if schema is not None and value is not None:
        value = {k: check_value(schema, k, v, where=key, prefix=f"{key} ") for k, v in value.items()}
    check = f.metadata.get("check")
    if check is not None and value is not None:
        check(prefix + key, value)
    return value


def _default_text(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return repr(f.default)
    if f.default_factory is not dataclasses.MISSING:
        return repr(f.default_factory())
    return "required"


def describe_section(cls: type, indent: str = "  ") -> list[str]:
    """One line per key of `cls`: `name: type = default  doc`."""
    lines = []
    for key, (tp, f) in fields_of(cls).items():
        lines.append(f"{indent}{key}: {_type_name(tp)} = {_default_text(f)}\n{indent}    {f.metadata.get('doc', '')}")
    return lines


_F = TypeVar("_F", bound=Callable[..., Any])


def _keys_of(section_cls: type) -> Callable[[_F], _F]:
    """Give a builder method (`def m(self, **kwargs)`) the section's keys as its run-time
    signature (help(), IPython, Jupyter completion) and their docs in its docstring."""

    def wrap(fn: _F) -> _F:
        sig = inspect.signature(fn)
        lead = [
            p for p in sig.parameters.values() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        ]
        names = {p.name for p in lead}
        keys = [
            inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=_NOT_SET, annotation=tp)
            for key, (tp, _) in fields_of(section_cls).items()
            if key not in names
        ]
        fn.__signature__ = sig.replace(parameters=lead + keys)  # type: ignore[attr-defined]
        doc = inspect.cleandoc(fn.__doc__ or "")
        fn.__doc__ = doc + "\n\nKeys (unset ones stay as they are):\n" + "\n".join(
            describe_section(section_cls)
        )
        return fn

    return wrap


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

_Config = TypeVar("_Config", bound="AlgorithmConfig")


class AlgorithmConfig:
    """Base builder. Subclasses set `algo_name`, `training_cls` and `algorithm_path`, and
    override `training` decorated with `@_keys_of(their training dataclass)`."""

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
            if value is not _NOT_SET
        }
        for key, value in checked.items():
            setattr(obj, key, copy.deepcopy(value))
            self._explicit.add(key)
        return self

    # ---- builder methods (RLlib names); their keys are the fields of the section

    @_keys_of(EnvironmentConfig)
    def environment(self: _Config, env: str | None = _NOT_SET, **kwargs: Any) -> _Config:
        """Set the environment: a gymnasium id or "pkg.mod:make_env" (called with env_config)."""
        return self._set("environment", {"env": env, **kwargs})

    @_keys_of(EnvRunnersConfig)
    def env_runners(self: _Config, **kwargs: Any) -> _Config:
        """Set how many runners sample, with how many sub-envs each, and their timeouts."""
        return self._set("env_runners", kwargs)

    @_keys_of(PPOTrainingConfig)
    def training(self: _Config, **kwargs: Any) -> _Config:
        """Set algorithm hyperparameters (the fields of `training_cls`)."""
        return self._set("training", kwargs)

    @_keys_of(FaultToleranceConfig)
    def fault_tolerance(self: _Config, **kwargs: Any) -> _Config:
        """Set the failure policy.

        `restart_failed_env_runners` (default True) and `ignore_env_runner_failures` are
        mutually exclusive. Setting `ignore_env_runner_failures=True` while
        `restart_failed_env_runners` was never set explicitly turns restarts off;
        setting both to True explicitly is a ConfigError.
        """
        restart_off = (
            kwargs.get("ignore_env_runner_failures") is True
            and kwargs.get("restart_failed_env_runners", _NOT_SET) is _NOT_SET
            and "restart_failed_env_runners" not in self._explicit
        )
        self._set("fault_tolerance", kwargs)
        if restart_off:
            self.fault_tolerance_cfg.restart_failed_env_runners = False
        return self

    @_keys_of(EvaluationConfig)
    def evaluation(self: _Config, **kwargs: Any) -> _Config:
        """Evaluate every `evaluation_interval` iterations (None: never)."""
        return self._set("evaluation", kwargs)

    @_keys_of(CheckpointingConfig)
    def checkpointing(self: _Config, **kwargs: Any) -> _Config:
        """Checkpoint every `checkpoint_interval` iterations (0: only at the end)."""
        return self._set("checkpointing", kwargs)

    @_keys_of(DebuggingConfig)
    def debugging(self: _Config, **kwargs: Any) -> _Config:
        """Seed everything (runners get seed + their index) and set the log level."""
        return self._set("debugging", kwargs)

    @_keys_of(LearnersConfig)
    def learners(self: _Config, **kwargs: Any) -> _Config:
        """The learner mesh. `num_learners=0` learns inside the Algorithm process; M > 0
        starts M learner actors (`JOB/learner/I`). Training starts once `n_init_learners`
        (default: all) joined, pauses below `min_learners` for up to
        `learner_wait_timeout_s`; a collective slower than `learner_collective_timeout_s`
        counts as a hang."""
        return self._set("learners", kwargs)

    @_keys_of(ReportingConfig)
    def reporting(self: _Config, **kwargs: Any) -> _Config:
        """Metric smoothing window (episodes) and a minimum of env steps per iteration."""
        return self._set("reporting", kwargs)

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
            f"{_suggest(name, self._all_keys())}"
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
                            f"{_suggest(sub_key, list(fields_of(sections[key])))}"
                        )
                    per_section[key][sub_key] = sub_value
                continue
            if key not in owner:
                raise ConfigError(
                    f"unknown config key {key!r}{_suggest(key, list(owner) + list(sections))}"
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
        return cls.from_dict(_read_toml(path))

    def copy(self: _Config) -> _Config:
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


class PPOConfig(AlgorithmConfig):
    """PPO config builder: `PPOConfig().environment("CartPole-v1").training(lr=1e-3).build()`."""

    algo_name = "PPO"
    training_cls = PPOTrainingConfig
    algorithm_path = "ftrl.rl.algorithms.ppo:PPO"

    @_keys_of(PPOTrainingConfig)
    def training(self, **kwargs: Any) -> PPOConfig:
        """PPO hyperparameters. Schedules are RLlib-style [[env_step, value], ...] lists,
        interpolated linearly and held after the last point."""
        return self._set("training", kwargs)

    def _validate_training(self) -> None:
        t = self.training_cfg
        if t.minibatch_size > t.train_batch_size:
            raise ConfigError(
                f"minibatch_size ({t.minibatch_size}) must not exceed train_batch_size "
                f"({t.train_batch_size})"
            )


# --------------------------------------------------------------------------- helpers


def _read_toml(path: str | Path) -> dict[str, Any]:
    import tomllib

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

    stop_reward: float | None = option(None, "stop when episode_return_mean >= this")
    stop_timesteps: int | None = option(None, "stop after this many env steps sampled")
    stop_iters: int | None = option(None, "stop after this many iterations")

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
        """Set criteria from a [stop] table (unknown keys and bad types raise)."""
        checked = {
            key: check_value(StopCriteria, key, value, where="[stop]", prefix="stop ")
            for key, value in values.items()
        }
        for key, value in checked.items():
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


def describe(algo: str = "PPO") -> str:
    """Every key of `algo`'s config and of a job's [stop] table, by section (the TOML
    table and the builder method of the same name), with type, default and doc."""
    lines = []
    for section, cls in config_class(algo).section_classes().items():
        lines.append(f"[{section}]  {(cls.__doc__ or '').splitlines()[0]}")
        lines.extend(describe_section(cls))
        for key, (_, f) in fields_of(cls).items():
            schema = f.metadata.get("schema")
            if schema is not None:
                lines.append(f"[{section}.{key}]  {(schema.__doc__ or '').splitlines()[0]}")
                lines.extend(describe_section(schema))
    lines.append(f"[stop]  {(StopCriteria.__doc__ or '').splitlines()[0]}")
    lines.extend(describe_section(StopCriteria))
    return "\n".join(lines)


if __name__ == "__main__":
    print(describe())
