"""What a running job may change in place (population-based training's "exploit": the
driver loads another trial's checkpoint with perturbed hyperparameters, its runners and
learners the same processes). Imports no torch.

    live_keys("PPO")                       # the keys read at every update
    mutable_keys("PPO")                    # the keys an exploit can change: live ones and
                                           # those whose parts it rebuilds in place
    check_live_keys("PPO", ["lr"])         # ConfigError naming a key that cannot, and why
    values = check_live(config, {"lr": 1e-4})   # checked values; changes nothing

A key is live when its field says so (`option(..., change=LIVE)`, ftrl/config/keys.py):
the learners (or the driver) read it at every update: the loss coefficients, the
discount, the clips, the epoch and minibatch loop, the schedules, the learning rate and
the optimizer's other settings (epsilon, decay, momentum; `set_optimizer_settings` before
each update). A key read once, when some parts are built (`change=rebuild(...)`), changes
by an exploit when those parts are rebuilt in place (`keys.REBUILT_IN_PLACE`, done by
ftrl.rl.driver.rebuild): the driver's own parts (checkpoint cadence and count, the
episode window, iteration lengths, evaluation duration, TensorBoard), the learner
thread (its queue, lag bound, broadcast interval and batch size: `train_batch_size`)
and the runners' fragment length (`rollout_fragment_length`, and `train_batch_size`
through "auto"). Keys whose parts are the runners' or the learner mesh's processes are
refused for now, as is a key fixed for a trial (`change=NEVER`: the env, the model,
`opt_type`, the observation filter's kind, APPO's `kl_coeff`). A schedule key names the
live key it sets at every update (`schedules="lr"`): a change of that key while its
schedule is set scales the schedule.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ftrl.config.keys import Change, config_facts, live_keys_of, mutable_keys_of, schedules_of
from ftrl.config.registry import ALGORITHMS, config_class
from ftrl.wire.errors import ConfigError

if TYPE_CHECKING:
    from ftrl.config.builder import AlgorithmConfig


def _config_class(algo: str) -> type[AlgorithmConfig]:
    if str(algo).upper() not in ALGORITHMS:
        raise ConfigError(f"unknown algorithm {algo!r}; known: {sorted(ALGORITHMS)}")
    return config_class(algo)


def live_keys(algo: str) -> frozenset[str]:
    """The config keys of algorithm `algo` ("PPO", "ppo") read at every update."""
    return live_keys_of(_config_class(algo))


def mutable_keys(algo: str) -> frozenset[str]:
    """The config keys of algorithm `algo` an exploit can change while it trains: the live
    ones and those whose parts it rebuilds in place."""
    return mutable_keys_of(_config_class(algo))


def check_live_keys(algo: str, keys: Iterable[str]) -> None:
    """ConfigError naming the first of `keys` an exploit cannot change (and why), with the
    ones it can."""
    _refuse_fixed(_config_class(algo), keys)


def _refuse_fixed(config_cls: type[AlgorithmConfig], keys: Iterable[str]) -> None:
    facts = config_facts(config_cls)
    mutable = mutable_keys_of(config_cls)
    algo = config_cls.algo_name
    for key in keys:
        if key in mutable:
            continue
        change = facts[key].change if key in facts else None
        if change is None:
            why = "it is no config key of this algorithm"
        elif change.kind is Change.NEVER:
            why = "it is fixed for a trial (what it shapes cannot be carried over)"
        else:
            why = (f"it is read once, when the {' and '.join(sorted(change.parts))} are built, and an exploit "
                   "does not rebuild those processes")
        raise ConfigError(f"{key!r} cannot change while a {algo} job trains: {why}; the keys that can: "
                          f"{', '.join(sorted(mutable))}")


def check_live(config: AlgorithmConfig, hyperparams: Mapping[str, Any]) -> dict[str, Any]:
    """`hyperparams` checked for an in-place change of `config`: every key mutable, every value
    valid for its key and with the rest of the config (ConfigError naming the key
    otherwise). Returns the values as the config holds them; changes nothing.

    A key whose schedule is set (`lr` under `lr_schedule`) scales its schedule: a change
    from a to b multiplies every value of the schedule by b / a (the values returned hold
    the scaled schedule too), so a PBT population's schedules keep their shape and differ
    by the factors their lineage applied. A schedule given beside its key is taken as it is.
    """
    if not isinstance(hyperparams, Mapping):
        raise ConfigError(f"hyperparams must be a mapping of config keys to values, got "
                          f"{type(hyperparams).__name__}")
    _refuse_fixed(type(config), hyperparams)  # its own class's keys
    values = dict(hyperparams)
    for key, schedule in schedules_of(type(config.training_cfg)).items():
        points = getattr(config.training_cfg, schedule, None)
        if key in values and schedule not in values and points:
            values[schedule] = scaled_schedule(points, getattr(config.training_cfg, key), values[key], key)
    trial = config.copy()
    trial.update_from_dict(values)  # each value against its field
    trial.validate()  # and against the other keys (e.g. minibatch_size <= train_batch_size)
    held = trial.to_dict()
    return {key: held[key] for key in values}


def scaled_schedule(points: list, old: Any, new: Any, key: str) -> list[list[float]]:
    """Schedule `points` ([[env_step, value], ...]) with every value times new / old."""
    if not isinstance(new, (int, float)) or isinstance(new, bool):
        raise ConfigError(f"{key} must be a number, got {new!r}")
    if not old:
        raise ConfigError(f"{key} is {old!r}: its schedule cannot be scaled to {new!r}")
    factor = float(new) / float(old)
    return [[step, value * factor] for step, value in points]
