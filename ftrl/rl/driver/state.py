"""The driver's durable state: what it keeps of a run (its `RunState`,
ftrl.rl.driver.run_state), how a run resumes from the newest state that still exists,
and when a run may continue from a state at all.

    state = {**driver_state(run, ...), "learner": learner_state}   # a checkpoint (CHECKPOINT_FORMAT)
    small = driver_state(run, ...)      # every iteration (StateWriter): no learner tensors
    path = save_checkpoint(run, checkpoints, state)   # output_dir/checkpoints/checkpoint_<iteration>.ftrl
    resume(run, output, ...)            # newest state -> counters, filter, learner; rows kept

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

The functions take the run state and the parts they read (the runners and the learner
group through the small Protocols below, the learner, the output directory), never the
Algorithm; what the Algorithm decides (whether a state fits it, how live
hyperparameters are applied) comes in as callables.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ftrl.config import AlgorithmConfig
from ftrl.config.keys import check_fixed_on_resume
from ftrl.rl.driver.checkpoint import CheckpointManager
from ftrl.rl.driver.learner_access import LearnerAccess
from ftrl.rl.driver.output import RunOutput
from ftrl.rl.driver.run_state import RunState
from ftrl.rl.driver.state_writer import LearnerSource, load_state_file
from ftrl.rl.rng_state import global_rng_from_wire, global_rng_to_wire
from ftrl.rl.spaces import SpaceSpec
from ftrl.util.run_dir import CHECKPOINT_DIR, DRIVER_STATE_FILE, LEARNER_STATE_FILE
from ftrl.wire.errors import ConfigError

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = 1
#: Row keys that are counters a resumed run continues from (a row newer than its state).
_ROW_RUNNER_COUNTERS = ("num_env_runner_restarts", "num_env_runner_failures", "num_sub_env_restarts",
                        "num_samples_late", "num_samples_dropped", "env_steps_dropped", "num_samples_lost")


class RunnerRecords(Protocol):
    """What the state functions read and restore of the runners (`DriverRunners`)."""

    def counters(self) -> dict[str, Any]: ...

    def restore_counters(self, saved: dict[str, Any]) -> None: ...

    def known_incarnations(self) -> dict[str, Any]: ...

    def newest_synced_filter(self) -> tuple[int, dict[str, Any]] | None: ...


class LearnerGroupRecords(Protocol):
    """What the state functions read and restore of a learner group (`LearnerGroup`)."""

    def get_counters(self) -> dict[str, int]: ...

    def set_counters(self, counters: dict[str, Any]) -> None: ...

    def counters_from_row(self, row: dict[str, Any]) -> dict[str, int]: ...

    def known_incarnations(self) -> list[dict[str, Any]]: ...

    def remember_previous(self, previous: list[dict[str, Any]]) -> None: ...

    def resume_at(self, version: int, fallback: dict[str, Any] | None) -> None: ...

    def state_at(self, version: int) -> dict[str, Any] | None: ...


class StatefulLearner(Protocol):
    """A learner's state, as the state functions restore it."""

    @property
    def version(self) -> int: ...

    def set_state(self, state: dict[str, Any]) -> None: ...


#: Called with the state's live hyperparameters (the Algorithm's `apply_hyperparams`).
ApplyHyperparams = Callable[[dict[str, Any]], Any]


# --------------------------------------------------------------------------- state


def driver_state(run: RunState, *, algo_name: str, learner_version: int, runners: RunnerRecords,
                 learner_group: LearnerGroupRecords | None) -> dict[str, Any]:
    """The state of the iteration just finished, without the learner's tensors (msgpack +
    numpy only), with its metrics row (a resume writes a row its state has and
    metrics.jsonl lacks)."""
    return {
        "format": CHECKPOINT_FORMAT,
        "algo": algo_name,
        "iteration": run.iteration,
        "env_steps_sampled": run.env_steps_sampled,
        "env_steps_trained": run.env_steps_trained,
        "time_s": run.time_s,
        "config": run.config_dict,
        "space_spec": run.spec_dict,
        "learner_version": learner_version,
        "learner_counters": learner_group.get_counters() if learner_group is not None else {},
        "filter": run.filter.get_state(),
        "episodes": run.episodes.get_state(),
        "runner_counters": runners.counters(),
        "actors": known_actors(runners, learner_group),
        "rng": global_rng_to_wire(),
        "algo_counters": dict(run.algo_counters),
        "callback_counts": dict(run.callback_counts),
        "num_driver_resumes": run.num_driver_resumes,
        "hyperparams": dict(run.hyperparams),
        "row": run.newest_row(),
        "saved_at": time.time(),
    }


def set_state(run: RunState, state: dict[str, Any], *, learner: StatefulLearner,
              learner_group: LearnerGroupRecords | None, apply_hyperparams: ApplyHyperparams) -> None:
    """Restore from a checkpoint (`{**driver_state, "learner": ...}`, already found to
    fit the run); the learner takes the state's learner as it is."""
    learner.set_state(state["learner"])
    apply_driver_state(run, state, learner_group=learner_group, apply_hyperparams=apply_hyperparams)


def apply_driver_state(run: RunState, state: dict[str, Any], *, learner_group: LearnerGroupRecords | None,
                       apply_hyperparams: ApplyHyperparams) -> None:
    """Everything but the learner: counters, filter, episodes, RNG; the runners' counters
    and incarnations are applied once the runners exist (`restore_runner_counters`)."""
    run.filter.set_state(state["filter"])
    run.episodes.set_state(state["episodes"])
    run.iteration = int(state["iteration"])
    run.env_steps_sampled = int(state["env_steps_sampled"])
    run.env_steps_trained = int(state.get("env_steps_trained", 0))
    run.time_base = float(state.get("time_s", 0.0))
    run.saved_runner_counters = state.get("runner_counters") or {}
    run.saved_actors = state.get("actors") or {}
    if learner_group is not None:
        learner_group.set_counters(state.get("learner_counters") or {})
        learner_group.remember_previous(run.saved_actors.get("learners") or [])
    global_rng_from_wire(state.get("rng") or {})
    algo_counters = state.get("algo_counters") or {}
    for key in run.algo_counters:
        run.algo_counters[key] = int(algo_counters.get(key, 0))
    run.num_driver_resumes = int(state.get("num_driver_resumes", 0))
    callback_counts = state.get("callback_counts") or {}
    for key in run.callback_counts:
        run.callback_counts[key] = int(callback_counts.get(key, 0))
    run.last_checkpoint_iteration = run.iteration
    hyperparams = state.get("hyperparams") or {}
    if hyperparams:  # a PBT trial keeps what its exploits gave it
        try:
            apply_hyperparams(hyperparams)
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


def save_checkpoint(run: RunState, checkpoints: CheckpointManager, state: dict[str, Any]) -> Path:
    """Write `state` (a checkpoint of the run's current iteration) under checkpoints/."""
    path = checkpoints.save(run.iteration, state)
    run.last_checkpoint_iteration = run.iteration
    run.last_checkpoint_summary = checkpoint_summary(state, path)
    run.last_checkpoint = path
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


def resume(run: RunState, output: RunOutput, *, learner: StatefulLearner, learner_group: LearnerGroupRecords | None,
           check_compatible: Callable[[dict[str, Any]], None], apply_hyperparams: ApplyHyperparams,
           known_row: dict[str, Any] | None = None) -> None:
    """Continue the run from the newest state under `output` (module docstring);
    `known_row`: the newest row the coordinator holds for this job, if any."""
    log_ = output.metrics_log
    dropped = log_.drop_torn_lines()
    if dropped:
        log.warning("dropped %d torn lines from %s", dropped, log_.path)
    state, run.restored_from = newest_state(output.directory) or (None, None)
    wanted: int | None = None
    if state is not None:
        check_compatible(state)
        apply_driver_state(run, state, learner_group=learner_group, apply_hyperparams=apply_hyperparams)
        # a driver state names the learner's version; a checkpoint holds the learner itself
        wanted = int(state["learner_version"]) if "learner_version" in state else int(state["learner"]["version"])
        run.filter_version = wanted  # the filter restored is the one synced with these weights
        row = state.get("row")
        last = log_.last()
        if row and (last is None or last["iteration"] < run.iteration):
            log_.append(row)  # its state was durable, its row not yet (nor reported)
            run.rows_to_report.append(row)
    newest = max((r for r in (log_.last(), known_row) if r and isinstance(r.get("iteration"), int)),
                 key=lambda r: r["iteration"], default=None)
    if newest is not None and newest["iteration"] > run.iteration:
        log.warning("the newest state is iteration %d but iteration %d was reported: the counters go on "
                    "from there", run.iteration, newest["iteration"])
        _counters_from_row(run, newest, learner_group)
        if isinstance(newest.get("weights_version"), int):
            wanted = int(newest["weights_version"])
    if wanted is None:
        log.warning("no state under %s: starting fresh", output.directory)
        return
    run.num_driver_resumes += 1
    last = log_.last()
    run.last_row = last if last is not None and last["iteration"] == run.iteration else None
    _restore_learner(output, wanted, state, learner, learner_group)
    log.info("resumed from %s (iteration %d, %d env steps, learner version %d)",
             run.restored_from or "metrics rows", run.iteration, run.env_steps_sampled, int(learner.version))


def _restore_learner(output: RunOutput, wanted: int, state: dict[str, Any] | None, learner: StatefulLearner,
                     learner_group: LearnerGroupRecords | None) -> None:
    """The learner at weights version `wanted`, from the first source that has it
    (module docstring); older weights only when nothing has that version."""
    candidates = [load_state_file(output.directory / LEARNER_STATE_FILE), (state or {}).get("learner")]
    if not any(_has_version(c, wanted) for c in candidates):
        checkpoint = output.checkpoints.load_latest()  # an older state: it may still hold it
        candidates.append(checkpoint[0].get("learner") if checkpoint is not None else None)
    candidates = [c for c in candidates if isinstance(c, dict) and isinstance(c.get("version"), int)]
    exact = next((c for c in candidates if _has_version(c, wanted)), None)
    fallback = exact or max(candidates, key=lambda c: int(c["version"]), default=None)
    if learner_group is not None:
        learner_group.resume_at(wanted, fallback)  # live learners holding `wanted` come first
        return
    if fallback is None:
        log.warning("no learner state of version %d under %s: the learner starts fresh", wanted, output.directory)
        return
    if exact is None:
        log.warning("no learner state of version %d under %s: continuing from version %d", wanted,
                    output.directory, int(fallback["version"]))
    learner.set_state(fallback)


def _has_version(learner_state: Any, version: int) -> bool:
    return isinstance(learner_state, dict) and learner_state.get("version") == version


def _counters_from_row(run: RunState, row: dict[str, Any], learner_group: LearnerGroupRecords | None) -> None:
    """Continue the counters from a metrics row newer than the state."""
    run.iteration = int(row["iteration"])
    run.env_steps_sampled = int(row.get("env_steps_sampled") or run.env_steps_sampled)
    run.env_steps_trained = int(row.get("env_steps_trained") or run.env_steps_trained)
    run.time_base = max(run.time_base, float(row.get("time_s") or 0.0))
    run.episodes.episodes_total = max(run.episodes.episodes_total, int(row.get("episodes_total") or 0))
    run.num_driver_resumes = max(run.num_driver_resumes, int(row.get("num_driver_resumes") or 0))
    counters = {k: int(row[k]) for k in _ROW_RUNNER_COUNTERS if isinstance(row.get(k), int)}
    run.saved_runner_counters = {**run.saved_runner_counters, "env_runners": counters}
    run.saved_actors = {}  # its incarnations are not known: nothing to reconcile against
    if learner_group is not None:
        learner_group.set_counters(learner_group.counters_from_row(row))
    run.last_checkpoint_iteration = -1


def learner_source(run: RunState, access: LearnerAccess, learner_group: LearnerGroupRecords | None) -> LearnerSource:
    """The learner state to write beside the driver state, when its version changed:
    copied now from an in-process learner (between two updates), fetched by the writer
    from a learner group."""
    with access.at_rest():
        version = access.version
        if version == run.persisted_learner_version:
            return None
        run.persisted_learner_version = version
        if learner_group is None:
            return access.get_state()
    return lambda: learner_group.state_at(version)


# --------------------------------------------------------------------------- runners and learners


def known_actors(runners: RunnerRecords, learner_group: LearnerGroupRecords | None) -> dict[str, Any]:
    """The incarnation (and the runtime's restart count) of each runner and learner the
    driver knows, by group (what `EnvRunnerGroup.reconcile` and the learner group compare
    a resumed driver's actors to)."""
    out = runners.known_incarnations()
    if learner_group is not None:
        out["learners"] = learner_group.known_incarnations()
    return out


def restore_runner_counters(run: RunState, runners: RunnerRecords) -> None:
    """Failure counters continue across a resume (they never go backwards). Called once
    the runners exist (their `start` counted the ones that restarted meanwhile), with
    what the resumed state kept aside."""
    runners.restore_counters(run.saved_runner_counters)


def adopt_runner_filter(run: RunState, runners: RunnerRecords) -> None:
    """After a resume: a runner that the previous driver synced after the state it
    resumed from (that state was lost) holds the newer central observation filter."""
    if run.restored_from is None or run.filter.kind == "NoFilter":
        return
    newest = runners.newest_synced_filter()
    if newest is None or newest[0] <= run.filter_version:
        return
    try:
        run.filter.set_state(newest[1])
    except ValueError as e:
        log.warning("ignoring the runners' observation filter: %s", e)
        return
    log.info("observation filter taken from a runner synced at version %d (the state's is of version %d)",
             newest[0], run.filter_version)
