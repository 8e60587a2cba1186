"""An Algorithm's state: what the driver keeps durable, how a run resumes from the
newest state that still exists, and when a run may continue from a state at all.

    state = get_state(algo)            # checkpoint: driver state + learner state (CHECKPOINT_FORMAT)
    small = driver_state(algo)         # every iteration (StateWriter): no learner tensors
    path = save_checkpoint(algo)       # output_dir/checkpoints/checkpoint_<iteration>.ftrl
    resume(algo)                       # newest state -> counters, filter, learner; rows kept

The **driver state** of an iteration holds the counters (iteration, env steps, training
time, the runners' and learners' failure counters), the config and space spec, the
observation filter, the episode window, the global RNG states (python, numpy, torch;
`ftrl.rl.rng_state`), the incarnation of every runner and learner the driver knew, the
learner's weights version, the live hyperparameters set while the job ran (`hyperparams`:
the cumulative overrides of population-based training's exploits, `ftrl.rl.driver.exploit`),
and the iteration's metrics row. `ftrl.rl.driver.state_writer`
writes it after every iteration (output_dir/driver_state.ftrl), and the learner's own
state beside it (learner_state.ftrl). A checkpoint is the same driver state with the
learner state inside.

**Resume** (a restarted driver, `--resume`) takes the newest of driver_state.ftrl and
the newest valid checkpoint, so a driver that died costs at most the iteration in
flight. The learner state, from the first source that has the version the state names:

1. the live learner group (learners that outlived the driver hold the current weights
   and optimizer: nothing is loaded, the new driver re-attaches to them);
2. learner_state.ftrl, then the checkpoint;
3. failing those, the newest learner state found (older weights; the counters go on,
   logged as a warning).

Counters never go backwards: if metrics.jsonl (or the coordinator's record of the job,
`known_row`) holds a row newer than the state (a state that was lost or corrupted), the
counters continue from that row. Rows of metrics.jsonl are never removed (only a line
torn by a crash). Runners and learners that restarted while the driver was away are
counted once, against the incarnations in the state (`EnvRunnerGroup.reconcile`,
`LearnerGroup.resume_at`); a driver that dies again before its next state counts them
again from the same state, so never twice. Observation filters: a runner synced after
the state was written (the state was lost) hands its newer filter over.

A resumed run applies the state's `hyperparams` over its job's config (and to its
learners): a resumed PBT trial keeps the hyperparameters PBT gave it.

`check_resume_compatible` refuses a state made for another algorithm, env,
observation filter, model or spaces. `checkpoint_summary` is what a checkpoint is
reported as (its path, iteration, env steps, return, weights version).

The `Algorithm` methods (`get_state`, `set_state`, `save_checkpoint`, `check_compatible`,
`_resume`) delegate here; the functions call back through those methods, so a subclass
that overrides one of them still sees it used.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ftrl.config import AlgorithmConfig
from ftrl.config.keys import check_fixed_on_resume
from ftrl.rl.driver.checkpoint import CheckpointManager
from ftrl.rl.driver.state_writer import load_state_file
from ftrl.rl.rng_state import global_rng_from_wire, global_rng_to_wire
from ftrl.rl.spaces import SpaceSpec
from ftrl.util.run_dir import CHECKPOINT_DIR, DRIVER_STATE_FILE, LEARNER_STATE_FILE
from ftrl.wire.errors import ConfigError

if TYPE_CHECKING:
    from ftrl.rl.driver.algorithm import Algorithm

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = 1
#: Row keys that are counters a resumed run continues from (a row newer than its state).
_ROW_RUNNER_COUNTERS = ("num_env_runner_restarts", "num_env_runner_failures", "num_sub_env_restarts",
                        "num_samples_late", "num_samples_dropped", "env_steps_dropped", "num_samples_lost")


# --------------------------------------------------------------------------- state


def driver_state(algo: Algorithm) -> dict[str, Any]:
    """The state of the iteration just finished, without the learner's tensors (msgpack +
    numpy only), with its metrics row (a resume writes a row its state has and
    metrics.jsonl lacks)."""
    group = algo.learner_group
    row = algo.last_row if algo.last_row is not None and algo.last_row.get("iteration") == algo.iteration else None
    return {
        "format": CHECKPOINT_FORMAT,
        "algo": algo.config.algo_name,
        "iteration": algo.iteration,
        "env_steps_sampled": algo.env_steps_sampled,
        "env_steps_trained": algo.env_steps_trained,
        "time_s": algo.time_s,
        "config": algo.config_dict,
        "space_spec": algo.spec_dict,
        "learner_version": algo.learner_version,
        "learner_counters": group.get_counters() if group is not None else {},
        "filter": algo.filter.get_state(),
        "episodes": algo.episodes.get_state(),
        "runner_counters": runner_counters(algo),
        "actors": known_actors(algo),
        "rng": global_rng_to_wire(),
        "algo_counters": algo.get_algo_counters(),
        "hyperparams": dict(algo.hyperparams),
        "row": row,
        "saved_at": time.time(),
    }


def get_state(algo: Algorithm) -> dict[str, Any]:
    """Everything a checkpoint of `algo` holds (msgpack + numpy only)."""
    return {**driver_state(algo), "learner": algo.learner.get_state()}


def set_state(algo: Algorithm, state: dict[str, Any]) -> None:
    """Restore `algo` from `get_state()` output (refused by `algo.check_compatible`);
    the learner takes the state's learner as it is."""
    algo.check_compatible(state)
    algo.learner.set_state(state["learner"])
    _set_driver_state(algo, state)


def _set_driver_state(algo: Algorithm, state: dict[str, Any]) -> None:
    """Everything but the learner: counters, filter, episodes, RNG; the runners' counters
    and incarnations are applied once the runners exist (`restore_runner_counters`)."""
    algo.filter.set_state(state["filter"])
    algo.episodes.set_state(state["episodes"])
    algo.iteration = int(state["iteration"])
    algo.env_steps_sampled = int(state["env_steps_sampled"])
    algo.env_steps_trained = int(state.get("env_steps_trained", 0))
    algo.time_base = float(state.get("time_s", 0.0))
    algo.saved_runner_counters = state.get("runner_counters") or {}
    algo.saved_actors = state.get("actors") or {}
    group = algo.learner_group
    if group is not None:
        group.set_counters(state.get("learner_counters") or {})
        group.remember_previous(algo.saved_actors.get("learners") or [])
    global_rng_from_wire(state.get("rng") or {})
    algo.set_algo_counters(state.get("algo_counters") or {})
    algo.last_checkpoint_iteration = algo.iteration
    hyperparams = state.get("hyperparams") or {}
    if hyperparams:  # a PBT trial keeps what its exploits gave it
        try:
            algo.apply_hyperparams(hyperparams)
        except ConfigError as e:
            raise ConfigError(f"cannot resume: the state's hyperparameters {hyperparams} do not fit this "
                              f"run's config: {e}") from e
        log.info("resumed with the hyperparameters set while the job ran: %s", hyperparams)


def check_resume_compatible(config: AlgorithmConfig, spec: SpaceSpec, state: dict[str, Any],
                            action: str = "resume") -> None:
    """Raise ConfigError if a run with `config` on spaces `spec` cannot continue from
    checkpoint `state`: a key declared `fixed_on_resume` differs (the algorithm, env,
    observation filter, optimizer type, model shape: ftrl/config/keys.py), or the spaces
    do. `action` names what is refused in the message."""
    check_fixed_on_resume(config, state.get("config") or {}, action)
    old_spec = SpaceSpec.from_dict(state["space_spec"])
    if old_spec != spec:
        raise ConfigError(f"cannot {action}: the checkpoint's spaces {old_spec} differ from the env's {spec}")


def checkpoint_summary(state: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """What a checkpoint is reported as: its absolute path, iteration, env steps,
    training time, episode_return_mean (of its episode window; None before any episode),
    when it was saved (time.time()) and the weights version it holds."""
    returns = np.asarray((state.get("episodes") or {}).get("returns", []), np.float64)
    learner = state.get("learner") or {}
    return {
        "path": str(Path(path).resolve()),
        "iteration": int(state.get("iteration", 0)),
        "env_steps_sampled": int(state.get("env_steps_sampled", 0)),
        "time_s": float(state.get("time_s", 0.0)),
        "episode_return_mean": float(returns.mean()) if returns.size else None,
        "saved_at": float(state.get("saved_at", 0.0)),
        "weights_version": int(learner.get("version", state.get("learner_version", -1))),
    }


# --------------------------------------------------------------------------- save & resume


def save_checkpoint(algo: Algorithm) -> Path:
    """Write a checkpoint of `algo`'s current iteration under output_dir/checkpoints."""
    if algo.checkpoints is None:
        raise ConfigError("no output_dir: nowhere to write checkpoints")
    state = algo.get_state()
    path = algo.checkpoints.save(algo.iteration, state)
    algo.last_checkpoint_iteration = algo.iteration
    algo.last_checkpoint_summary = checkpoint_summary(state, path)
    log.debug("checkpoint %s", path)
    return path


def newest_state(output_dir: str | Path) -> tuple[dict[str, Any], Path] | None:
    """The newest valid state under `output_dir`: driver_state.ftrl or the newest valid
    checkpoint, whichever has the higher iteration (the driver state on a tie)."""
    out = Path(output_dir)
    found = []
    driver = load_state_file(out / DRIVER_STATE_FILE)
    if driver is not None:
        found.append((driver, out / DRIVER_STATE_FILE))
    checkpoint = CheckpointManager(out / CHECKPOINT_DIR).load_latest()
    if checkpoint is not None:
        found.append(checkpoint)
    if not found:
        return None
    return max(found, key=lambda sp: int(sp[0].get("iteration", 0)))  # first wins a tie


def forget_saved_state(output_dir: str | Path) -> None:
    """A fresh run in `output_dir`: the driver and learner state of an earlier run go."""
    for name in (DRIVER_STATE_FILE, LEARNER_STATE_FILE):
        (Path(output_dir) / name).unlink(missing_ok=True)


def resume(algo: Algorithm, known_row: dict[str, Any] | None = None) -> None:
    """Continue `algo` from the newest state under output_dir (module docstring);
    `known_row`: the newest row the coordinator holds for this job, if any."""
    if algo.output_dir is None or algo.metrics_log is None:
        raise ConfigError("resume needs an output directory")
    dropped = algo.metrics_log.drop_torn_lines()
    if dropped:
        log.warning("dropped %d torn lines from %s", dropped, algo.metrics_log.path)
    state, algo.restored_from = newest_state(algo.output_dir) or (None, None)
    wanted: int | None = None
    if state is not None:
        algo.check_compatible(state)
        _set_driver_state(algo, state)
        # a driver state names the learner's version; a checkpoint holds the learner itself
        wanted = int(state["learner_version"]) if "learner_version" in state else int(state["learner"]["version"])
        algo.filter_version = wanted  # the filter restored is the one synced with these weights
        row = state.get("row")
        last = algo.metrics_log.last()
        if row and (last is None or last["iteration"] < algo.iteration):
            algo.metrics_log.append(row)  # its state was durable, its row not yet (nor reported)
            algo.rows_to_report.append(row)
    newest = max((r for r in (algo.metrics_log.last(), known_row) if r and isinstance(r.get("iteration"), int)),
                 key=lambda r: r["iteration"], default=None)
    if newest is not None and newest["iteration"] > algo.iteration:
        log.warning("the newest state is iteration %d but iteration %d was reported: the counters go on "
                    "from there", algo.iteration, newest["iteration"])
        _counters_from_row(algo, newest)
        if isinstance(newest.get("weights_version"), int):
            wanted = int(newest["weights_version"])
    if wanted is None:
        log.warning("no state under %s: starting fresh", algo.output_dir)
        return
    last = algo.metrics_log.last()
    algo.last_row = last if last is not None and last["iteration"] == algo.iteration else None
    _restore_learner(algo, wanted, state)
    log.info("resumed from %s (iteration %d, %d env steps, learner version %d)",
             algo.restored_from or "metrics rows", algo.iteration, algo.env_steps_sampled, algo.learner_version)


def _restore_learner(algo: Algorithm, wanted: int, state: dict[str, Any] | None) -> None:
    """The learner at weights version `wanted`, from the first source that has it
    (module docstring); older weights only when nothing has that version."""
    assert algo.output_dir is not None
    candidates = [load_state_file(algo.output_dir / LEARNER_STATE_FILE), (state or {}).get("learner")]
    if not any(_has_version(c, wanted) for c in candidates) and algo.checkpoints is not None:
        checkpoint = algo.checkpoints.load_latest()  # an older state: it may still hold it
        candidates.append(checkpoint[0].get("learner") if checkpoint is not None else None)
    candidates = [c for c in candidates if isinstance(c, dict) and isinstance(c.get("version"), int)]
    exact = next((c for c in candidates if _has_version(c, wanted)), None)
    fallback = exact or max(candidates, key=lambda c: int(c["version"]), default=None)
    group = algo.learner_group
    if group is not None:
        group.resume_at(wanted, fallback)  # live learners holding `wanted` come first
        return
    if fallback is None:
        log.warning("no learner state of version %d under %s: the learner starts fresh", wanted, algo.output_dir)
        return
    if exact is None:
        log.warning("no learner state of version %d under %s: continuing from version %d", wanted,
                    algo.output_dir, int(fallback["version"]))
    algo.learner.set_state(fallback)


def _has_version(learner_state: Any, version: int) -> bool:
    return isinstance(learner_state, dict) and learner_state.get("version") == version


def _counters_from_row(algo: Algorithm, row: dict[str, Any]) -> None:
    """Continue the counters from a metrics row newer than the state."""
    algo.iteration = int(row["iteration"])
    algo.env_steps_sampled = int(row.get("env_steps_sampled") or algo.env_steps_sampled)
    algo.env_steps_trained = int(row.get("env_steps_trained") or algo.env_steps_trained)
    algo.time_base = max(algo.time_base, float(row.get("time_s") or 0.0))
    algo.episodes.episodes_total = max(algo.episodes.episodes_total, int(row.get("episodes_total") or 0))
    counters = {k: int(row[k]) for k in _ROW_RUNNER_COUNTERS if isinstance(row.get(k), int)}
    algo.saved_runner_counters = {**algo.saved_runner_counters, "env_runners": counters}
    algo.saved_actors = {}  # its incarnations are not known: nothing to reconcile against
    group = algo.learner_group
    if group is not None:
        group.set_counters(group.counters_from_row(row))
    algo.last_checkpoint_iteration = -1


# --------------------------------------------------------------------------- runners and learners


def known_actors(algo: Algorithm) -> dict[str, Any]:
    """The incarnation (and the runtime's restart count) of each runner and learner the
    driver knows, by group (what `EnvRunnerGroup.reconcile` and the learner group compare
    a resumed driver's actors to)."""
    out: dict[str, Any] = {}
    for key, group in (("env_runners", algo.env_runner_group), ("eval_runners", algo.eval_runner_group),
                       ("learners", algo.learner_group)):
        if group is not None:
            out[key] = group.known_incarnations()
    return out


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
    the runners exist (their `start` counted the ones that restarted meanwhile), with
    what `set_state` kept aside."""
    saved = algo.saved_runner_counters
    for key, group in (("env_runners", algo.env_runner_group), ("eval_runners", algo.eval_runner_group)):
        if group is not None and key in saved:
            group.set_counters(saved[key])
    if algo.local_runner is not None and "local_sub_env_restarts" in saved:
        algo.local_runner.num_sub_env_restarts += int(saved["local_sub_env_restarts"])


def adopt_runner_filter(algo: Algorithm) -> None:
    """After a resume: a runner that the previous driver synced after the state it
    resumed from (that state was lost) holds the newer central observation filter."""
    group = algo.env_runner_group
    if group is None or algo.restored_from is None or algo.filter.kind == "NoFilter":
        return
    newest = group.newest_synced_filter()
    if newest is None or newest[0] <= algo.filter_version:
        return
    try:
        algo.filter.set_state(newest[1])
    except ValueError as e:
        log.warning("ignoring the runners' observation filter: %s", e)
        return
    log.info("observation filter taken from a runner synced at version %d (the state's is of version %d)",
             newest[0], algo.filter_version)
