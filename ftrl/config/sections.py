"""The config sections every algorithm shares (builder methods of the same name):
environment, env_runners, fault_tolerance, evaluation, checkpointing, debugging,
learners, reporting, and the base of every algorithm's `training` section
(`TrainingConfig`: lr, gamma, train_batch_size, grad_clip, model). Imports no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Union

from ftrl.config.fields import (
    non_negative_float,
    non_negative_int,
    one_of,
    option,
    positive_float,
    positive_int,
    suggest,
    unit_interval,
)
from ftrl.config.keys import LIVE, NEVER, Part, rebuild
from ftrl.util.imports import split_import_path
from ftrl.wire.errors import ConfigError


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


def _conv_filters(name: str, value: list) -> None:
    for layer in value:
        if (
            not isinstance(layer, (list, tuple))
            or len(layer) != 3
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in layer)
        ):
            raise ConfigError(
                f"{name} entries must be [out_channels, kernel, stride] of positive ints, "
                f"got {layer!r} (e.g. [[32, 8, 4], [64, 4, 2], [64, 3, 1]])"
            )


_RESOURCE_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-/:@")


def custom_resources(name: str, value: dict) -> None:
    """Check: {resource: amount} of custom resources (what workers advertise with
    `ftrl worker --resources NAME=N`), each amount a positive finite number."""
    for key, amount in value.items():
        if not isinstance(key, str) or not key or len(key) > 200 or not set(key) <= _RESOURCE_NAME_CHARS:
            raise ConfigError(f"{name}: resource name {key!r} must be 1..200 characters of [A-Za-z0-9_.-/:@]")
        if key in ("cpu", "gpu"):
            raise ConfigError(f"{name}: {key!r} has keys of its own (num_{key}s_...); name custom resources here")
        if (not isinstance(amount, int | float) or isinstance(amount, bool) or not amount > 0
                or amount == float("inf")):
            raise ConfigError(f"{name}[{key!r}] must be a positive number, got {amount!r}")


def _runner_gpus(name: str, value: float) -> None:
    non_negative_float(name, value)
    if value > 1:
        raise ConfigError(f"{name}={value:g}: a runner infers on one GPU (fractions share one)")


def _import_path(name: str, value: str) -> None:
    try:
        split_import_path(value)
    except ValueError:
        raise ConfigError(f'{name} must be an import path "pkg.module:ClassName", got {value!r}') from None


_EVAL_OVERRIDE_KEYS = ("explore", "env_config")

#: read when the sampling runners (and their group) are built
_RUNNERS = rebuild(Part.ENV_RUNNERS)
#: read when any runner, sampling or evaluation (and its group), is built
_ALL_RUNNERS = rebuild(Part.ENV_RUNNERS, Part.EVAL_RUNNERS)
#: read by the driver's own loop, or when it is built
_DRIVER = rebuild(Part.DRIVER)
#: read when the learner actors and their mesh are built
_MESH = rebuild(Part.LEARNER_MESH)


def _eval_overrides(name: str, value: Mapping[str, Any]) -> None:
    for key in value:
        if key not in _EVAL_OVERRIDE_KEYS:
            raise ConfigError(
                f"{name} supports only {list(_EVAL_OVERRIDE_KEYS)}; got {key!r}"
                f"{suggest(key, list(_EVAL_OVERRIDE_KEYS))}"
            )


# --------------------------------------------------------------------------- one field


@dataclass
class EnvironmentConfig:
    """What to run: a gymnasium id or an import path "pkg.mod:make_env"."""

    env: str | None = option(
        None, 'gymnasium id ("CartPole-v1") or import path "pkg.mod:make_env" called with env_config',
        change=NEVER, fixed_on_resume=True,
    )
    env_config: dict = option(  # noqa: RUF009
        {}, "keyword arguments for gymnasium.make, or the dict given to make_env (an EnvContext: also "
        "worker_index, vector_index, num_workers, remote; an Env class whose __init__ takes one required "
        "positional parameter gets it whole, as in RLlib)", change=_ALL_RUNNERS
    )
    max_episode_steps: int | None = option(
        None, "a time limit on every episode, in env steps (gymnasium's name; RLlib's old horizon): the "
        "smaller of it and the env's registered limit wins; the cut episode is bootstrapped (None: the "
        "env's own)", check=positive_int, change=_ALL_RUNNERS,
    )


@dataclass
class EnvRunnersConfig:
    """How samples are collected."""

    num_env_runners: int = option(
        0, "remote env-runner actors (0: the driver samples itself)", check=non_negative_int,
        change=_RUNNERS,  # `ftrl scale` adds or removes runners
    )
    num_envs_per_env_runner: int = option(
        1, "sub-environments stepped together by each runner", check=positive_int, change=_ALL_RUNNERS
    )
    rollout_fragment_length: Union[int, str] = option(
        "auto",
        'steps per sub-env per sample() ("auto": the fragments of a round add up to train_batch_size)',
        check=_fragment_length, change=rebuild(Part.FRAGMENTS),
    )
    remote_worker_envs: bool = option(
        False, "run each sub-env in its own child process (a crash or hang kills only that sub-env)",
        change=_ALL_RUNNERS,
    )
    observation_filter: str = option(
        "NoFilter", "observation normalization: NoFilter or MeanStdFilter (running mean/std)",
        check=one_of("NoFilter", "MeanStdFilter"), change=NEVER, fixed_on_resume=True,
    )
    sample_timeout_s: float = option(
        60.0, "seconds a sampling round waits for the runners before going on without the late ones",
        check=positive_float, change=rebuild(Part.ENV_RUNNERS, Part.EVAL_RUNNERS, Part.DRIVER),
    )
    env_step_timeout_s: float = option(
        60.0, "seconds without any env step while sampling (or building one sub-env) before a runner "
        "actor is killed and restarted (a driver actor that samples itself: restarted, resumed)",
        check=positive_float, change=_ALL_RUNNERS,
    )
    sample_ahead: bool = option(
        True, "asynchronous algorithms (IMPALA, APPO): each runner samples its next fragment while its last one "
        "travels to the driver (more env steps/s with short fragments; each fragment a little older, in policy "
        "lag); False: a runner samples when asked", change=_DRIVER,
    )
    sample_busy_poll_s: float = option(
        0.01, "seconds a runner busy-polls (yielding its CPU) for its next sample request before it sleeps, "
        "while recent requests came that fast (0: never): spares waking an idle CPU each round, "
        "costs at most this much CPU per round", check=non_negative_float, change=_ALL_RUNNERS,
    )
    env_runner_health_probe_timeout_s: float = option(
        30.0, "seconds a health probe of a runner may take", check=positive_float, change=_ALL_RUNNERS
    )
    validate_env_runners_after_construction: bool = option(
        True, "probe every runner once it is created and fail early if none works", change=_ALL_RUNNERS
    )
    num_cpus_per_env_runner: float = option(
        1.0, "CPU slots each runner takes on a worker", check=non_negative_float, change=_ALL_RUNNERS
    )
    num_gpus_per_env_runner: float = option(
        0.0, "the GPU share each runner takes for its policy's inference (fractions: runners share a GPU, "
        "as Sample Factory's inference workers; at most 1); 0: inference on its CPU", check=_runner_gpus,
        change=_ALL_RUNNERS,
    )
    custom_resources_per_env_runner: dict = option(  # noqa: RUF009
        {}, 'custom resources each runner takes on a worker, e.g. {"spot": 1} (workers advertise them '
        "with --resources)", check=custom_resources, change=_ALL_RUNNERS,
    )
    explore: bool = option(True, "sample actions (True) or take the most likely action (False)", change=_RUNNERS)
    inference_backend: str = option(
        "numpy", "the runners' policy forward pass: numpy (light) or torch",
        check=one_of("numpy", "torch"), change=_ALL_RUNNERS,
    )
    max_weights_lag: int = option(
        0, "use fragments sampled with weights at most this many versions behind the learner (0: the current version only)",
        check=non_negative_int, change=rebuild(Part.DRIVER),  # the driver's sample checks, the exploit's version jump
    )
    weights_fanout: int = option(
        4, "children per node of the tree that broadcasts weights to the runners", check=positive_int,
        change=_ALL_RUNNERS,
    )


@dataclass
class ModelConfig:
    """The network (the `model` dict of training()), with RLlib's key names: the fully
    connected actor-critic for vector observations, a CNN for image observations (picked
    by itself; `conv_filters` and `conv_type` shape it), or a user's own torch module
    (`custom_model`). ftrl/rl/models/factory.py builds it; its docstring has the rules."""

    fcnet_hiddens: list = option([64, 64], "hidden layer sizes", check=_hidden_sizes)  # noqa: RUF009
    fcnet_activation: str = option(
        "tanh", "hidden layer activation", check=one_of("tanh", "relu", "elu", "linear")
    )
    vf_share_layers: bool = option(False, "value head on the policy's hidden layers (else its own)")
    free_log_std: bool = option(True, "continuous actions: a state-independent, learned log std")
    init_log_std: float = option(0.0, "continuous actions: the initial log std")
    conv_filters: list | None = option(  # noqa: RUF009
        None, "CNN layers [[out_channels, kernel, stride], ...] (None: the default for the "
        "observation: the Nature CNN on images, fully connected otherwise; []: fully connected)",
        check=_conv_filters,
    )
    conv_activation: str = option(
        "relu", "CNN activation (also of its fully connected layers after the convolutions)",
        check=one_of("relu", "tanh", "elu"),
    )
    conv_type: str = option(
        "nature", "CNN body: nature (a plain conv stack, Nature CNN by default) or impala (the "
        "IMPALA ResNet: per conv_filters entry a stack of conv, max-pool of that stride and 2 "
        "residual blocks; default [[16, 3, 2], [32, 3, 2], [32, 3, 2]])",
        check=one_of("nature", "impala"),
    )
    post_fcnet_hiddens: list | None = option(  # noqa: RUF009
        None, "CNN: fully connected layers after the convolutions (None: [512] nature, [256] impala)",
        check=_hidden_sizes,
    )
    custom_model: str | None = option(
        None, 'a torch nn.Module class by import path "pkg.mod:Net", built as '
        "Net(obs_shape, num_outputs, **custom_model_config); forward(obs) -> (logits, value)",
        check=_import_path,
    )
    custom_model_config: dict = option({}, "keyword arguments of the custom_model's constructor")  # noqa: RUF009
    use_lstm: bool = option(
        False, "wrap the model in an LSTM (IMPALA and APPO): the model's features feed it, the heads read "
        "its output; the runners keep a state per sub-env",
    )
    lstm_cell_size: int = option(256, "the LSTM's hidden size", check=positive_int)
    max_seq_len: int = option(
        20, "the longest sequence a recurrent model is trained on (IMPALA and APPO unroll whole fragments)",
        check=positive_int,
    )
    lstm_use_prev_action: bool = option(False, "the LSTM also reads the previous action (one-hot when discrete)")
    lstm_use_prev_reward: bool = option(False, "the LSTM also reads the previous reward")


@dataclass
class TrainingConfig:
    """The training keys every algorithm has; an algorithm's own section extends it.

    The learners of one mesh must agree on every training key (`mesh_by_default`) unless
    the key says `mesh=False`: a key added here or in a subclass is in the mesh's config
    hash without any other edit."""

    mesh_by_default: ClassVar[bool] = True

    lr: float = option(3e-4, "learning rate", check=positive_float, change=LIVE)
    gamma: float = option(0.99, "discount factor", check=unit_interval, change=LIVE)
    train_batch_size: int = option(
        4000, "env steps per training iteration, at least (every fragment a round asked for is used)",
        check=positive_int, mesh=False,  # the driver's: it batches and splits; a learner gets its shard
        # the driver's round (PPO) or the learner thread's batches (IMPALA, APPO); "auto"
        # fragment lengths derive from it
        change=rebuild(Part.DRIVER, Part.LEARNER_THREAD, Part.FRAGMENTS),
    )
    grad_clip: float | None = option(
        0.5, "max global gradient norm (None: no clip)", check=positive_float, change=LIVE
    )
    model: dict = option(  # noqa: RUF009
        {}, "network keys, over the defaults of ModelConfig", schema=ModelConfig,
        change=NEVER, fixed_on_resume=True,  # its shape: weights and optimizer state fit only it
    )


@dataclass
class FaultToleranceConfig:
    """What happens when env runners or sub-environments fail (RLlib's names)."""

    restart_failed_env_runners: bool = option(
        True, "restart a failed runner and bring it back (exclusive with ignore_env_runner_failures)",
        change=_ALL_RUNNERS,
    )
    ignore_env_runner_failures: bool = option(
        False, "drop a failed runner and train on with the rest", change=_ALL_RUNNERS
    )
    max_num_env_runner_restarts: int = option(
        1000, "restarts allowed per runner before it is dead", check=non_negative_int, change=_ALL_RUNNERS
    )
    num_consecutive_env_runner_failures_tolerance: int = option(
        100, "failures in a row (no good sample between) before training fails", check=positive_int,
        change=_ALL_RUNNERS,
    )
    restart_failed_sub_environments: bool = option(
        False, "rebuild a failed sub-env inside its runner instead of failing the runner", change=_ALL_RUNNERS
    )
    max_num_sub_env_restart_attempts: int = option(
        5, "attempts to rebuild one failed sub-env", check=positive_int, change=_ALL_RUNNERS
    )
    env_runner_restore_timeout_s: float = option(
        60.0, "seconds to wait for a restarted runner to come back", check=positive_float, change=_ALL_RUNNERS
    )


@dataclass
class EvaluationConfig:
    """Periodic evaluation on separate runners."""

    evaluation_interval: int | None = option(
        None, "evaluate every this many iterations (None: never)", check=positive_int,
        change=rebuild(Part.DRIVER, Part.EVAL_RUNNERS),  # None or not: whether there are evaluation runners
    )
    evaluation_num_env_runners: int = option(
        0, "evaluation runners (0: evaluate in the driver)", check=non_negative_int,
        change=rebuild(Part.EVAL_RUNNERS),
    )
    evaluation_duration: int = option(
        10, "how much to evaluate, in evaluation_duration_unit", check=positive_int, change=_DRIVER
    )
    evaluation_duration_unit: str = option(
        "episodes", "unit of evaluation_duration: episodes or timesteps",
        check=one_of("episodes", "timesteps"), change=_DRIVER,
    )
    evaluation_sample_timeout_s: float = option(
        120.0, "seconds an evaluation round waits for its runners", check=positive_float,
        change=rebuild(Part.EVAL_RUNNERS),
    )
    evaluation_config: dict = option(  # noqa: RUF009
        {}, "overrides while evaluating; only explore and env_config", check=_eval_overrides,
        change=rebuild(Part.EVAL_RUNNERS),
    )
    evaluation_video_interval: int = option(
        0, "record one episode every this many evaluations, on one evaluation runner, to OUTPUT/videos/ "
        "(MP4; the env renders rgb_array; 0: never)", check=non_negative_int,
        change=rebuild(Part.DRIVER, Part.EVAL_RUNNERS),
    )


@dataclass
class CheckpointingConfig:
    """Checkpoints under OUTPUT/checkpoints/."""

    checkpoint_interval: int = option(
        10, "checkpoint every this many iterations (0: only at the end)", check=non_negative_int,
        change=_DRIVER,
    )
    keep_checkpoints: int = option(3, "newest checkpoints kept on disk", check=positive_int, change=_DRIVER)
    checkpoint_at_end: bool = option(True, "write a checkpoint when training stops", change=_DRIVER)


@dataclass
class DebuggingConfig:
    """Seeds and logging."""

    seed: int | None = option(
        None, "seed for everything; runner I uses seed + I (None: random)", check=_seed,
        change=NEVER,  # a trial's seed: read once by every part as it starts
    )
    log_level: str = option(
        "WARN", "log level of the algorithm's processes", change=NEVER  # RLlib's key; nothing reads it yet
    )


@dataclass
class LearnersConfig:
    """The learner mesh: 0 learns in the driver; M > 0 trains data-parallel on M learner
    actors over torch.distributed (NCCL on GPUs, gloo on CPUs) that re-form on failure."""

    num_learners: int = option(
        0, "learner actors (0: learn in the driver process)", check=non_negative_int,
        change=_MESH,  # `ftrl scale` adds or removes learners
    )
    n_init_learners: int | None = option(
        None, "learners that must join before training starts (None: all)", change=_MESH
    )
    min_learners: int = option(
        1, "training pauses while fewer learners are alive", check=positive_int, change=_MESH
    )
    num_cpus_per_learner: float = option(
        1.0, "CPU slots each learner takes on a worker", check=non_negative_float,
        change=rebuild(Part.LEARNER_MESH, Part.DRIVER),  # the driver's torch threads when it learns itself
    )
    num_gpus_per_learner: float = option(
        0.0, "GPUs each learner takes", check=non_negative_float,
        change=_MESH, mesh=True,  # one backend per mesh: NCCL on GPUs, gloo on CPUs
    )
    custom_resources_per_learner: dict = option(  # noqa: RUF009
        {}, 'custom resources each learner takes on a worker, e.g. {"ondemand": 1}', check=custom_resources,
        change=_MESH,
    )
    learner_wait_timeout_s: float = option(
        600.0, "seconds to wait below min_learners before failing", check=positive_float, change=_MESH
    )
    learner_collective_timeout_s: float = option(
        60.0, "a collective slower than this counts as a hang", check=positive_float, change=_MESH
    )
    max_num_learner_restarts: int = option(
        1000, "restarts allowed per learner", check=non_negative_int, change=_MESH
    )


@dataclass
class ResourcesConfig:
    """Where a job's processes go (RLlib's `config.resources(...)`): the driver's share of a
    worker, and how each role's actors are spread over the workers. Read when each actor
    is placed, so fixed for a trial."""

    num_cpus_for_main_process: float = option(
        0.0, "CPU slots the driver (the job's algorithm actor) takes on a worker (0: none, so it fits on "
        "any worker; give it 1 to keep a CPU for it)", check=non_negative_float, change=NEVER,
    )
    custom_resources_for_main_process: dict = option(  # noqa: RUF009
        {}, 'custom resources the driver takes, e.g. {"ondemand": 0.01} to keep it off spot workers',
        check=custom_resources, change=NEVER,
    )
    placement_strategy: str = option(
        "PACK", "how each role's actors (the env runners, the learners) spread over the workers: PACK "
        "(each role on as few workers as its resources allow, so one lost worker hits few jobs) or SPREAD "
        "(each on the worker holding fewest of its role)", check=one_of("PACK", "SPREAD"), change=NEVER,
    )


@dataclass
class ReportingConfig:
    """Metrics."""

    metrics_num_episodes_for_smoothing: int = option(
        100, "episodes in the episode_return_mean window", check=positive_int, change=_DRIVER
    )
    min_sample_timesteps_per_iteration: int = option(
        0, "repeat sampling and training until an iteration has this many env steps",
        check=non_negative_int, change=_DRIVER,
    )
    min_time_s_per_iteration: float | None = option(
        None, "asynchronous algorithms (IMPALA, APPO): seconds an iteration (a reporting window) lasts "
        "at least (None: 1 s); PPO's iterations are its synchronous rounds", check=non_negative_float,
        change=_DRIVER,
    )
    tensorboard: bool = option(
        True, "write TensorBoard event files of every row's numbers in the output dir "
        "(tensorboard --logdir OUTPUT)", change=_DRIVER,
    )


@dataclass
class CallbacksConfig:
    """User code around the loop (RLlib's `config.callbacks(...)`), by import path."""

    callbacks_class: str | None = option(
        None, 'a subclass of ftrl.Callbacks by import path "pkg.mod:MyCallbacks" (hooks run in the '
        "runners and the driver; see ftrl.rl.callbacks)", check=_import_path,
        change=rebuild(Part.ENV_RUNNERS, Part.EVAL_RUNNERS, Part.DRIVER),
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
