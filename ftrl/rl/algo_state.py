"""An Algorithm's checkpoint state: what a checkpoint holds, how it is restored, and
when a run may continue from it.

    state = get_state(algo)            # msgpack + numpy only; CHECKPOINT_FORMAT
    path = save_checkpoint(algo)       # output_dir/checkpoints/checkpoint_<iteration>.ftrl
    resume(algo)                       # newest valid checkpoint -> set_state(); trims metrics.jsonl

A checkpoint holds the counters (iteration, env steps, training time), the config and
space spec it was made with, the learner's state, the observation filter, the episode
window, the runners' failure counters and the global RNG states (python, numpy, torch;
`ftrl.util.rng_state`).
`check_resume_compatible` refuses a checkpoint made for another algorithm, env,
observation filter, model or spaces.

The `Algorithm` methods (`get_state`, `set_state`, `save_checkpoint`, `check_compatible`,
`_resume`) delegate here; the functions call back through those methods, so a subclass
that overrides one of them still sees it used.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ftrl.config import AlgorithmConfig
from ftrl.rl.env_runner import config_from_dict
from ftrl.rl.spaces import SpaceSpec
from ftrl.util.rng_state import global_rng_from_wire, global_rng_to_wire
from ftrl.wire.errors import ConfigError

if TYPE_CHECKING:
    from ftrl.rl.algorithm import Algorithm

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = 1
#: Config keys a resumed run must share with its checkpoint.
_FIXED_ON_RESUME = ("algo", "env", "observation_filter")


# --------------------------------------------------------------------------- state


def get_state(algo: Algorithm) -> dict[str, Any]:
    """Everything a checkpoint of `algo` holds (msgpack + numpy only)."""
    return {
        "format": CHECKPOINT_FORMAT,
        "algo": algo.config.algo_name,
        "iteration": algo.iteration,
        "env_steps_sampled": algo.env_steps_sampled,
        "env_steps_trained": algo.env_steps_trained,
        "time_s": algo.time_s,
        "config": algo.config.to_dict(),
        "space_spec": algo.spec.to_dict(),
        "learner": algo.learner.get_state(),
        "filter": algo.filter.get_state(),
        "episodes": algo.episodes.get_state(),
        "runner_counters": runner_counters(algo),
        "rng": global_rng_to_wire(),
        "saved_at": time.time(),
    }


def set_state(algo: Algorithm, state: dict[str, Any]) -> None:
    """Restore `algo` from `get_state()` output (refused by `algo.check_compatible`)."""
    algo.check_compatible(state)
    algo.learner.set_state(state["learner"])
    algo.filter.set_state(state["filter"])
    algo.episodes.set_state(state["episodes"])
    algo.iteration = int(state["iteration"])
    algo.env_steps_sampled = int(state["env_steps_sampled"])
    algo.env_steps_trained = int(state.get("env_steps_trained", 0))
    algo._time_base = float(state.get("time_s", 0.0))
    # applied once the runners exist (restore_runner_counters)
    algo._saved_runner_counters = state.get("runner_counters") or {}
    global_rng_from_wire(state.get("rng") or {})
    algo._last_checkpoint_iter = algo.iteration


def check_resume_compatible(config: AlgorithmConfig, spec: SpaceSpec, state: dict[str, Any]) -> None:
    """Raise ConfigError if a run with `config` on spaces `spec` cannot continue from
    checkpoint `state` (another env, algorithm, model shape or spaces)."""
    old = state.get("config") or {}
    new = config.to_dict()
    for key in _FIXED_ON_RESUME:
        if str(old.get(key)) != str(new.get(key)):
            raise ConfigError(
                f"cannot resume: the checkpoint was made with {key}={old.get(key)!r}, this "
                f"run has {key}={new.get(key)!r}; use another --output directory"
            )
    old_model = config_from_dict(old).model_config if old else None
    if old_model is not None and old_model != config.model_config:
        raise ConfigError(
            f"cannot resume: the checkpoint's model {old_model} differs from this run's "
            f"{config.model_config}"
        )
    old_spec = SpaceSpec.from_dict(state["space_spec"])
    if old_spec != spec:
        raise ConfigError(f"cannot resume: the checkpoint's spaces {old_spec} differ from the env's {spec}")


# --------------------------------------------------------------------------- save & resume


def save_checkpoint(algo: Algorithm) -> Path:
    """Write a checkpoint of `algo`'s current iteration under output_dir/checkpoints."""
    if algo.checkpoints is None:
        raise ConfigError("no output_dir: nowhere to write checkpoints")
    path = algo.checkpoints.save(algo.iteration, algo.get_state())
    algo._last_checkpoint_iter = algo.iteration
    log.debug("checkpoint %s", path)
    return path


def resume(algo: Algorithm) -> None:
    """Restore `algo` from the newest valid checkpoint under output_dir/checkpoints and
    drop metrics.jsonl lines past it; with none, start fresh (metrics.jsonl emptied)."""
    if algo.checkpoints is None:
        raise ConfigError("resume needs an output directory")
    found = algo.checkpoints.load_latest()
    if found is None:
        log.warning("no valid checkpoint under %s: starting fresh", algo.checkpoints.directory)
        if algo.metrics_log is not None:
            algo.metrics_log.truncate_after(0)
        return
    state, path = found
    algo.set_state(state)
    algo.restored_from = path
    if algo.metrics_log is not None:
        dropped = algo.metrics_log.truncate_after(algo.iteration)
        if dropped:
            log.info("dropped %d metrics lines past iteration %d", dropped, algo.iteration)
    log.info("resumed from %s (iteration %d, %d env steps)", path, algo.iteration, algo.env_steps_sampled)


# --------------------------------------------------------------------------- runner failure counters


def runner_counters(algo: Algorithm) -> dict[str, Any]:
    """The env runners' failure counters, as a checkpoint holds them."""
    out: dict[str, Any] = {}
    if algo.env_runner_group is not None:
        out["env_runners"] = algo.env_runner_group.get_counters()
    if algo.eval_runner_group is not None:
        out["eval_runners"] = algo.eval_runner_group.get_counters()
    if algo.local_runner is not None:
        out["local_sub_env_restarts"] = algo.local_runner.num_sub_env_restarts
    return out


def restore_runner_counters(algo: Algorithm) -> None:
    """Failure counters continue across a resume (they never go backwards). Called once
    the runners exist, with what `set_state` kept aside."""
    saved = algo._saved_runner_counters
    if algo.env_runner_group is not None and "env_runners" in saved:
        algo.env_runner_group.set_counters(saved["env_runners"])
    if algo.eval_runner_group is not None and "eval_runners" in saved:
        algo.eval_runner_group.set_counters(saved["eval_runners"])
    if algo.local_runner is not None and "local_sub_env_restarts" in saved:
        algo.local_runner.num_sub_env_restarts += int(saved["local_sub_env_restarts"])
