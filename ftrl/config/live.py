"""Live keys: the training keys a running job may change in place (population-based
training's "exploit": the driver loads another trial's checkpoint with perturbed
hyperparameters without restarting its runners or learners). Imports no torch.

    live_keys("PPO")                       # frozenset of the keys that can change in place
    check_live_keys("PPO", ["lr"])         # ConfigError naming a key that cannot
    values = check_live(config, {"lr": 1e-4})   # checked values; changes nothing

A key is live when its field says so (`option(..., change=LIVE)`, ftrl/config/keys.py):
the learners (or the driver) read it at every update: the loss coefficients, the
discount, the clips, the epoch and minibatch loop, the learning rate (`set_lr` before
each update). A key read once, when some part is built, is not (`change=rebuild(...)`:
the optimizer's epsilon, decay and momentum, `train_batch_size`, the learner thread's
queue, lag bound and broadcast interval, the schedules, every runner, learner-mesh and
reporting key), nor is a key fixed for a trial (`change=NEVER`: the model, `opt_type`,
APPO's `kl_coeff`, the initial weight whose adapted value is learner state). A schedule
key names the live key it sets at every update (`schedules="lr"`): that key cannot
change in place while its schedule is set.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ftrl.config.keys import live_keys_of, schedules_of
from ftrl.config.registry import ALGORITHMS, config_class
from ftrl.wire.errors import ConfigError

if TYPE_CHECKING:
    from ftrl.config.builder import AlgorithmConfig


def live_keys(algo: str) -> frozenset[str]:
    """The config keys of algorithm `algo` ("PPO", "ppo") that can change while it trains."""
    if str(algo).upper() not in ALGORITHMS:
        raise ConfigError(f"unknown algorithm {algo!r}; known: {sorted(ALGORITHMS)}")
    return live_keys_of(config_class(algo))


def check_live_keys(algo: str, keys: Iterable[str]) -> None:
    """ConfigError naming the first of `keys` that cannot change in place, with the live ones."""
    _refuse_fixed(algo, live_keys(algo), keys)


def _refuse_fixed(algo: str, live: frozenset[str], keys: Iterable[str]) -> None:
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
    _refuse_fixed(config.algo_name, live_keys_of(type(config)), hyperparams)  # its own class's keys
    trial = config.copy()
    trial.training(**hyperparams)  # each value against its field
    trial.validate()  # and against the other keys (e.g. minibatch_size <= train_batch_size)
    training = trial.training_cfg
    for key, schedule in schedules_of(type(training)).items():
        if key in hyperparams and getattr(training, schedule, None):
            raise ConfigError(f"{key} has no effect while {schedule} is set (the schedule sets it at every "
                              f"update); mutate a job without {schedule}")
    return {key: getattr(training, key) for key in hyperparams}
