"""Rebuild the parts of a running job that read a `rebuild` key
(`ftrl.config.keys.REBUILT_IN_PLACE`), once an exploit (or a resume re-applying an
exploit's keys) changed it on the config. Only what reads the key is rebuilt; the
driver, its learner(s) and whatever else need not change keep their processes:

- the driver's own parts (`Part.DRIVER`): the episode window's length
  (`metrics_num_episodes_for_smoothing`; its newest episodes kept), how many checkpoints
  are kept, TensorBoard on or off, the runner group's staleness bound (`max_weights_lag`). The other driver keys (checkpoint and evaluation
  cadence, iteration lengths, `train_batch_size` of PPO's rounds) are read from the
  config at each use;
- the learner thread (`Part.LEARNER_THREAD`, IMPALA and APPO): its queue's size, lag
  bound, broadcast interval and batch size (`AsyncLearner.reconfigure`);
- the runners' fragment length (`Part.FRAGMENTS`): the driver's own runner takes it now;
  remote runners with their next sample request, which carries it
  (`EnvRunnerGroup`), and a restarted one is built with it;
- the runners themselves (`Part.ENV_RUNNERS`, `Part.EVAL_RUNNERS`: sub-envs per runner,
  `env_config`, `max_episode_steps`, their resources, failure keys, `num_env_runners`,
  ...): what they build from those keys lives in their processes, so they are made again
  from the config (`DriverRunners.rebuild`: new runner processes, failure counters
  carried over); the caller sends them the weights. The driver's callbacks
  (`callbacks_class`) are the caller's too (`Algorithm.rebuild_in_place`);
- the learners (`Part.LEARNER_MESH`: `num_learners`, their resources, timeouts and
  restart limit): `rebuild_learner` makes them again from the config, in this process or
  as a learner group of new actors, and carries the committed learner state over
  (weights, optimizer state, version); the driver and the runners keep their processes.

    parts = rebuild_in_place(config, ["train_batch_size"], run_state=..., output=...,
                             learner_access=..., runners=...)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ftrl.config import AlgorithmConfig
from ftrl.config.keys import Change, Part, config_facts
from ftrl.rl.learning.learner_group import LearnerGroup

log = logging.getLogger(__name__)


def parts_to_rebuild(config: AlgorithmConfig, keys: Iterable[str]) -> set[Part]:
    """The parts that read the `rebuild` keys among `keys` (live keys need none)."""
    facts = config_facts(type(config))
    parts: set[Part] = set()
    for key in keys:
        change = facts[key].change
        if change.kind is Change.REBUILD:
            parts |= change.parts
    return parts


def rebuild_in_place(config: AlgorithmConfig, keys: Iterable[str], *, run_state: Any, output: Any,
                     learner_access: Any, runners: Any) -> list[str]:
    """Give the parts reading `keys` (just changed on `config`) their new values; a part
    not built yet (a resume: the runners come later) is skipped and built with them.
    Returns the parts rebuilt, by name."""
    keys = list(keys)
    parts = parts_to_rebuild(config, keys)
    if Part.DRIVER in parts:
        run_state.episodes.resize(config.reporting_cfg.metrics_num_episodes_for_smoothing)
        if output is not None:
            output.checkpoints.keep = config.checkpointing_cfg.keep_checkpoints
            output.set_tensorboard(config.reporting_cfg.tensorboard)
        if runners is not None:
            runners.set_max_weights_lag(config.env_runners_cfg.max_weights_lag)
    if Part.LEARNER_THREAD in parts and hasattr(learner_access, "reconfigure"):
        t = config.training_cfg
        learner_access.reconfigure(queue_size=t.learner_queue_size, max_policy_lag=t.max_policy_lag,
                                   broadcast_interval=t.broadcast_interval, batch_env_steps=t.train_batch_size)
    training, evaluation = Part.ENV_RUNNERS in parts, Part.EVAL_RUNNERS in parts
    if (training or evaluation) and runners is not None:
        runners.rebuild(training=training, evaluation=evaluation, keep_scale="num_env_runners" not in keys)
    if Part.FRAGMENTS in parts and runners is not None:
        runners.set_fragment_length(config.get_rollout_fragment_length())
    names = sorted(str(p) for p in parts)
    if names:
        log.info("rebuilt in place for %s: %s", ", ".join(sorted(keys)), ", ".join(names))
    return names


def rebuild_learner(old: Any, access: Any, make_learner: Callable[[], Any], training_keys: Mapping[str, Any]) -> Any:
    """New learner(s) from the config as it is now (a `Part.LEARNER_MESH` key changed),
    going on from the committed learner state of `old` (weights, optimizer state,
    version): an old group's actors are killed first (the new ones take their names,
    the empty mesh takes their config) and its failure counters go on; `training_keys`,
    the live keys the run changed, ride along as before. `access` (held paused by the
    caller) learns with the new one from its next batch. Returns it."""
    state = access.get_state()
    _, weights = access.get_weights()
    counters = old.get_counters() if isinstance(old, LearnerGroup) else None
    if isinstance(old, LearnerGroup):
        old.stop(kill=True)
    new = make_learner()
    if isinstance(new, LearnerGroup):
        new.set_state(state, weights=weights)  # loaded by the first epoch it forms
        if counters is not None:
            new.set_counters(counters)
    else:
        new.set_state(state)
    if training_keys:
        new.set_hyperparams(dict(training_keys))
    access.replace_learner(new, in_process=not isinstance(new, LearnerGroup))
    log.info("learners made again (%s): going on from weights version %d",
             f"a group of {new.target}" if isinstance(new, LearnerGroup) else "in the driver's process",
             int(state["version"]))
    return new
