"""Live keys: the training keys a running job may change in place (population-based
training's "exploit": the driver loads another trial's checkpoint with perturbed
hyperparameters without restarting its runners or learners). Imports no torch.

    live_keys("PPO")                       # frozenset of the keys that can change in place
    check_live_keys("PPO", ["lr"])         # ConfigError naming a key that cannot
    values = check_live(config, {"lr": 1e-4})   # checked values; changes nothing

A key is live when the learners (or the driver) read it at every update: the loss
coefficients, the discount, the clips, the epoch and minibatch loop, the learning rate
(`set_lr` before each update). A key read once, at construction, is not: the model,
the optimizer's type and epsilon (`adam_epsilon`, `opt_type`, `epsilon`, `decay`,
`momentum`), `train_batch_size` (the runners' fragment lengths derive from it), the
learner thread's queue, lag bound and broadcast interval, APPO's `kl_coeff` (the initial
weight: the adapted one is learner state, taken with the checkpoint), the schedules,
and every runner, env, learner-mesh and reporting key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ftrl.wire.errors import ConfigError

if TYPE_CHECKING:
    from ftrl.config.builder import AlgorithmConfig

_COMMON = frozenset({"lr", "gamma", "grad_clip"})

#: algorithm name (upper case) -> its live keys
LIVE_KEYS: dict[str, frozenset[str]] = {
    "PPO": _COMMON | {"lambda_", "use_gae", "minibatch_size", "num_epochs", "clip_param", "vf_loss_coeff",
                      "vf_clip_param", "entropy_coeff", "normalize_advantages"},
    "IMPALA": _COMMON | {"num_epochs", "minibatch_size", "vtrace", "vtrace_clip_rho_threshold",
                         "vtrace_clip_pg_rho_threshold", "vf_loss_coeff", "entropy_coeff"},
}
LIVE_KEYS["APPO"] = LIVE_KEYS["IMPALA"] | {"clip_param", "use_kl_loss", "kl_target", "target_network_update_freq",
                                          "tau"}

#: a live key that a schedule overrides at every update while the schedule is set
_SCHEDULED = {"lr": "lr_schedule", "clip_param": "clip_param_schedule"}


def live_keys(algo: str) -> frozenset[str]:
    """The config keys of algorithm `algo` ("PPO", "ppo") that can change while it trains."""
    keys = LIVE_KEYS.get(str(algo).upper())
    if keys is None:
        raise ConfigError(f"unknown algorithm {algo!r}; known: {sorted(LIVE_KEYS)}")
    return keys


def check_live_keys(algo: str, keys: Iterable[str]) -> None:
    """ConfigError naming the first of `keys` that cannot change in place, with the live ones."""
    live = live_keys(algo)
    for key in keys:
        if key not in live:
            raise ConfigError(
                f"{key!r} cannot change while a {str(algo).upper()} job trains (it is read once, when the "
                f"learners and runners are built); the keys that can: {', '.join(sorted(live))}")


def check_live(config: AlgorithmConfig, hyperparams: Mapping[str, Any]) -> dict[str, Any]:
    """`hyperparams` checked for an in-place change of `config`: every key live, every value
    valid for its key and with the rest of the config, none overridden by a schedule
    (ConfigError naming the key otherwise). Returns the values as the config holds them;
    changes nothing."""
    if not isinstance(hyperparams, Mapping):
        raise ConfigError(f"hyperparams must be a mapping of config keys to values, got "
                          f"{type(hyperparams).__name__}")
    check_live_keys(config.algo_name, hyperparams)
    trial = config.copy()
    trial.training(**hyperparams)  # each value against its field
    trial.validate()  # and against the other keys (e.g. minibatch_size <= train_batch_size)
    training = trial.training_cfg
    for key, schedule in _SCHEDULED.items():
        if key in hyperparams and getattr(training, schedule, None):
            raise ConfigError(f"{key} has no effect while {schedule} is set (the schedule sets it at every "
                              f"update); mutate a job without {schedule}")
    return {key: getattr(training, key) for key in hyperparams}
