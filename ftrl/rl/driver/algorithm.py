"""Algorithm: the job's driver. Owns the learner, the env runners, metrics and checkpoints.

    algo = PPOConfig().environment("CartPole-v1").build()
    while True:
        result = algo.train()          # one training_iteration() plus bookkeeping

Subclasses (ftrl.rl.algorithms.ppo) implement `setup_learner()` and
`training_iteration()` with the RLlib-style helpers `synchronous_parallel_sample()` and
`sync_weights()`. This module does the rest of one iteration: setup, the episode
window and counters, evaluation, the result dict and metrics.jsonl, periodic
checkpoints. Two neighbours hold the remainder, behind methods that delegate to them:

- ftrl.rl.driver.run_loop: `run()`, training a `Trainable` (this class) to a stop
  criterion, Ctrl-C/SIGTERM; `finish()` here writes the final checkpoint and result.json.
- ftrl.rl.driver.state: `get_state()`/`set_state()`/`save_checkpoint()`, resume from the
  newest state that exists, and `check_resume_compatible`.
- ftrl.rl.driver.exploit: `exploit()`, population-based training's exploit in place
  (another trial's checkpoint, with perturbed live hyperparameters).

Work from other threads runs on the training thread at the next iteration boundary:
`run_at_boundary(fn)` returns a Future of `fn(algo)`, run at the start of the next
`train()`, before `training_iteration()`, in submission order (the driver actor's
`checkpoint_now` and `exploit` use it). Once the run ended (`finish`, `stop`) the
Future fails with `RunEnded`. `apply_hyperparams` changes live training keys
(ftrl.config.live) in place, on the config and the learner(s).

With an output_dir, each iteration's state and row go to disk off the training path
(ftrl.rl.driver.state_writer: driver_state.ftrl, then the row in metrics.jsonl, then
`on_row_durable(row)`); `flush_state()` waits for them, `stop()` and the end of `run()`
do so too.

Runners: with `num_env_runners=0` the Algorithm samples with a local EnvRunner in its
own process (for the whole run: a run cannot go to or from 0 runners while it runs).
Otherwise it creates remote runners through `client.create_actor`; the
client is injected (`client=`), so the same code runs on the real runtime, on
`tests.local_client.LocalClient` (in-process threads) in tests, or on whatever the
cluster hook provides. With no client given and remote runners or learners asked
for, an embedded local cluster is started (`embedded_cluster_for`).
`scale_env_runners(n)` / `scale_learners(m)` resize the groups at the next iteration /
step boundary.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ftrl.config import AlgorithmConfig, StopCriteria, check_learner_gpus, check_live
from ftrl.rl.driver import exploit as algo_exploit
from ftrl.rl.driver import run_loop
from ftrl.rl.driver import state as algo_state
from ftrl.rl.driver.checkpoint import CheckpointManager
from ftrl.rl.driver.embedded import embedded_cluster_for
from ftrl.rl.driver.metrics import EpisodeWindow, MetricsLog, json_safe
from ftrl.rl.driver.state import check_resume_compatible
from ftrl.rl.driver.state_writer import LearnerSource, StateWriter
from ftrl.rl.learning.learner_group import LearnerGroup
from ftrl.rl.sample_batch import check_fragment
from ftrl.rl.sampling.env_factory import probe_spaces
from ftrl.rl.sampling.env_runner import EnvRunner
from ftrl.rl.sampling.filters import make_filter
from ftrl.rl.sampling.runner_group import EnvRunnerGroup
from ftrl.rl.spaces import SpaceSpec, space_spec
from ftrl.util.files import atomic_write_json
from ftrl.wire.errors import ConfigError, FailedPreconditionError, FtrlError

log = logging.getLogger(__name__)


class RunEnded(FailedPreconditionError):
    """The run ended (or stopped) before the next iteration boundary: work handed to
    `run_at_boundary` will never run."""


class Algorithm:
    """Base driver. Args:
        config: a validated (or validatable) AlgorithmConfig.
        client: object with `create_actor` / `kill_actor` (needed for remote runners).
        output_dir: where metrics.jsonl, checkpoints/ and result.json go (None: nowhere).
        resume: continue from the newest state under output_dir (driver_state.ftrl or
            a checkpoint; see ftrl.rl.driver.state).
        job_name: prefix of actor names (`JOB/env_runner/I`).
        known_row: with `resume`, the newest metrics row reported elsewhere (the
            coordinator's record of the job): the counters never go back past it.
    """

    def __init__(
        self,
        config: AlgorithmConfig,
        *,
        client: Any = None,
        output_dir: str | Path | None = None,
        resume: bool = False,
        job_name: str = "ftrl",
        known_row: dict[str, Any] | None = None,
    ):
        self.config = config.copy()
        self.config.validate()
        cfg = self.config
        torch.set_num_threads(max(1, int(cfg.learners_cfg.num_cpus_per_learner)))
        seed = cfg.debugging_cfg.seed
        if seed is not None:
            random.seed(seed)
            np.random.seed(seed)
            torch.manual_seed(seed)
        self.job_name = job_name
        obs_space, act_space = probe_spaces(cfg.environment_cfg.env, cfg.environment_cfg.env_config)
        self.spec: SpaceSpec = space_spec(obs_space, act_space)
        self.config_dict = cfg.to_dict()  # what every state holds (made once: the config is fixed)
        self.spec_dict = self.spec.to_dict()
        self.filter = make_filter(cfg.env_runners_cfg.observation_filter, (self.spec.obs_dim,))
        self.episodes = EpisodeWindow(cfg.reporting_cfg.metrics_num_episodes_for_smoothing)
        # counters (checkpointed)
        self.iteration = 0
        self.env_steps_sampled = 0
        self.env_steps_trained = 0
        self.time_base = 0.0
        self._iter: dict[str, Any] = {}
        self._last_eval: dict[str, Any] | None = None
        self.last_checkpoint_iteration = -1
        #: live training keys set while the job runs (exploits), kept in every driver state
        self.hyperparams: dict[str, Any] = {}
        # work for the training thread at the next iteration boundary (run_at_boundary)
        self._boundary_lock = threading.Lock()
        self._boundary_work: list[tuple[Callable[[Algorithm], Any], cf.Future]] = []
        self._boundary_closed = ""  # why no boundary will come any more ("": one will)
        # output
        self.output_dir = Path(output_dir) if output_dir is not None else None
        self.checkpoints: CheckpointManager | None = None
        self.metrics_log: MetricsLog | None = None
        self.state_writer: StateWriter | None = None
        #: called (on the state writer's thread) with each row once it is on disk
        self.on_row_durable: Callable[[dict[str, Any]], Any] | None = None
        if self.output_dir is not None:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            self.checkpoints = CheckpointManager(self.output_dir / "checkpoints", cfg.checkpointing_cfg.keep_checkpoints)
            self.metrics_log = MetricsLog(self.output_dir / "metrics.jsonl")
            self.state_writer = StateWriter(self.output_dir, self.metrics_log, on_durable=self._row_durable)
        self.restored_from: Path | None = None
        self.last_checkpoint: Path | None = None  # written by this run (save_checkpoint)
        self.last_checkpoint_summary: dict[str, Any] | None = None  # of last_checkpoint (checkpoint_summary)
        self.saved_runner_counters: dict[str, Any] = {}
        self.saved_actors: dict[str, Any] = {}  # incarnations in the resumed state, by group
        self.filter_version = -1  # the weights version the resumed state's filter was synced with
        self._persisted_learner_version = -1  # of the last learner state handed to the writer
        self.last_row: dict[str, Any] | None = None  # the metrics row of the newest iteration
        self.rows_to_report: list[dict[str, Any]] = []  # written by the resume, not reported yet
        # the cluster (for remote runners and learners)
        self._own_client = False
        needs_client = cfg.env_runners_cfg.num_env_runners > 0 or cfg.learners_cfg.num_learners > 0 or (
            cfg.evaluation_cfg.evaluation_interval is not None and cfg.evaluation_cfg.evaluation_num_env_runners > 0
        )
        self._own_cluster = None
        if needs_client and client is None:
            log.info("no client given: starting an embedded local cluster for the runners and learners")
            self._own_cluster = embedded_cluster_for(cfg, driver=False).start()
            client = self._own_cluster.client()
            self._own_client = True
        self.client = client
        self.local_runner: EnvRunner | None = None
        self.env_runner_group: EnvRunnerGroup | None = None
        self.eval_local_runner: EnvRunner | None = None
        self.eval_runner_group: EnvRunnerGroup | None = None
        self.learner: Any = None
        self._local_model: Any = None
        self._stopped = False
        try:
            self.learner = self._make_learner()
            if resume:
                self._resume(known_row)
            elif self.output_dir is not None:
                # a fresh run: iterations restart at 1, so old lines would repeat them
                algo_state.forget_saved_state(self.output_dir)
                if self.metrics_log is not None and self.metrics_log.path.exists():
                    dropped = self.metrics_log.truncate_after(0)
                    log.warning("fresh run in %s: dropped %d old metrics lines", self.output_dir, dropped)
            self._setup_runners()
            algo_state.restore_runner_counters(self)
            algo_state.adopt_runner_filter(self)
            self.sync_weights()
            if self.state_writer is not None:
                self.state_writer.start()
        except BaseException:
            self.stop()
            raise
        self._t_start = time.monotonic()

    # ------------------------------------------------------------------ setup hooks

    #: The learner class ("module:Class") learner actors host; see setup_learner.
    learner_class_path = ""

    def setup_learner(self) -> Any:
        """Create the in-process learner (subclasses: return an object with update/
        get_weights/get_state/set_state/version)."""
        raise NotImplementedError(f"{type(self).__name__} must implement setup_learner()")

    def _make_learner(self) -> Any:
        """The learner behind one interface: in this process (`num_learners=0`) or the
        elastic LearnerGroup of `num_learners` learner actors."""
        if self.config.learners_cfg.num_learners == 0:
            return self.setup_learner()
        group = LearnerGroup(self.client, self.config, job_name=self.job_name,
                             space_spec=self.spec.to_dict(), learner_class=self.learner_class_path)
        group.start()
        return group

    @property
    def learner_group(self) -> Any:
        """The LearnerGroup, or None when the learner runs in this process."""
        return self.learner if isinstance(self.learner, LearnerGroup) else None

    def scale_learners(self, num_learners: int) -> None:
        """Grow or shrink the learner group at the next step boundary (thread-safe)."""
        group = self.learner_group
        if group is None:
            raise ConfigError("this run has no learner group (num_learners=0)")
        check_learner_gpus(dataclasses.replace(self.config.learners_cfg, num_learners=int(num_learners)))
        group.scale(num_learners)

    def scale_env_runners(self, num_env_runners: int) -> None:
        """Grow or shrink the env runners at the next iteration boundary (thread-safe).
        A run that samples in this process (num_env_runners=0) has no group to resize."""
        group = self.env_runner_group
        if group is None:
            if int(num_env_runners) == 0:
                return
            raise ConfigError("this run samples in the driver process (num_env_runners=0) and cannot "
                              "get env runners while it runs; submit it again with num_env_runners > 0")
        group.scale(num_env_runners)

    def _setup_runners(self) -> None:
        cfg = self.config
        spec = self.spec.to_dict()
        if cfg.env_runners_cfg.num_env_runners == 0:
            self.local_runner = EnvRunner(cfg, worker_index=0, space_spec=spec, set_torch_threads=False)
        else:
            self.env_runner_group = EnvRunnerGroup(self.client, cfg, job_name=self.job_name, space_spec=spec)
            self.env_runner_group.start(self.saved_actors.get("env_runners"))
        if cfg.evaluation_cfg.evaluation_interval is not None:
            if cfg.evaluation_cfg.evaluation_num_env_runners == 0:
                self.eval_local_runner = EnvRunner(cfg, worker_index=0, evaluation=True, space_spec=spec, set_torch_threads=False)
            else:
                self.eval_runner_group = EnvRunnerGroup(
                    self.client, cfg, job_name=self.job_name, space_spec=spec, evaluation=True
                )
                self.eval_runner_group.start(self.saved_actors.get("eval_runners"))

    # ------------------------------------------------------------------ the loop

    def training_iteration(self) -> dict[str, Any]:
        """One iteration of the algorithm's dataflow; returns a dict of its own metrics."""
        raise NotImplementedError(f"{type(self).__name__} must implement training_iteration()")

    def train(self) -> dict[str, Any]:
        """Run `training_iteration()` (repeated up to min_sample_timesteps_per_iteration),
        evaluate if due, log metrics, checkpoint if due; return the result dict. Work
        handed to `run_at_boundary` runs first."""
        self._run_boundary_work()
        t0 = time.monotonic()
        if self.env_runner_group is not None:
            self.env_runner_group.apply_scale()  # an iteration boundary
        self._iter = {"env_steps": 0, "episodes": 0, "samples": 0}
        algo_result: dict[str, Any] = {}
        min_steps = self.config.reporting_cfg.min_sample_timesteps_per_iteration
        while True:
            algo_result = self.training_iteration() or {}
            if self._iter["env_steps"] >= min_steps:
                break
        self.iteration += 1
        result = self._result(algo_result, time.monotonic() - t0)
        interval = self.config.evaluation_cfg.evaluation_interval
        if interval is not None and self.iteration % interval == 0:
            result["evaluation"] = self.evaluate()
        self.last_row = json_safe(result)  # what this iteration's states hold as its row
        ck = self.config.checkpointing_cfg.checkpoint_interval
        if self.checkpoints is not None and ck > 0 and self.iteration % ck == 0:
            self.save_checkpoint()
        self._persist(self.last_row)
        return result

    def run_at_boundary(self, fn: Callable[[Algorithm], Any]) -> cf.Future:
        """Run `fn(self)` on the training thread at the next iteration boundary (the start
        of the next `train()`, before `training_iteration()`, in submission order); its
        result or exception goes to the returned Future. Thread-safe. A cancelled Future's
        `fn` never runs; once the run ended, the Future fails with `RunEnded`."""
        future: cf.Future = cf.Future()
        with self._boundary_lock:
            if not self._boundary_closed:
                self._boundary_work.append((fn, future))
                return future
            why = self._boundary_closed
        future.set_exception(RunEnded(f"the run of {self.job_name} {why}: no iteration boundary will come"))
        return future

    def _run_boundary_work(self) -> None:
        """Run what `run_at_boundary` queued (the training thread, between iterations)."""
        with self._boundary_lock:
            work, self._boundary_work = self._boundary_work, []
        for fn, future in work:
            if not future.set_running_or_notify_cancel():
                continue  # given up by its caller: never run
            try:
                future.set_result(fn(self))
            except Exception as e:  # the caller's to handle; training goes on
                future.set_exception(e)

    def _close_boundary(self, why: str) -> None:
        """No boundary will come any more: fail what waits for one, and what comes later."""
        with self._boundary_lock:
            if not self._boundary_closed:
                self._boundary_closed = why
            work, self._boundary_work = self._boundary_work, []
        for _, future in work:
            if future.set_running_or_notify_cancel():
                future.set_exception(RunEnded(f"the run of {self.job_name} {why} before the next iteration boundary"))

    def _persist(self, row: dict[str, Any]) -> None:
        """Hand this iteration's state and row to the state writer (never waits for the
        disk; ftrl.rl.driver.state_writer)."""
        if self.state_writer is None:
            return
        self.state_writer.submit(self.iteration, algo_state.driver_state(self), row, self._learner_source())

    def _learner_source(self) -> LearnerSource:
        """The learner state to write beside the driver state, when its version changed:
        copied now from an in-process learner, fetched by the writer from a remote one."""
        version = self.learner_version
        if version == self._persisted_learner_version:
            return None
        self._persisted_learner_version = version
        group = self.learner_group
        if group is None:
            return self.learner.get_state()
        return lambda: group.state_at(version)

    def _row_durable(self, row: dict[str, Any]) -> None:
        callback = self.on_row_durable
        if callback is not None:
            callback(row)

    def flush_state(self, timeout_s: float = 30.0) -> bool:
        """Wait until every finished iteration's state and row are on disk; whether they are."""
        return self.state_writer.flush(timeout_s) if self.state_writer is not None else True

    def latest_checkpoint(self) -> Path | None:
        """The newest checkpoint file under output_dir/checkpoints (None if there is none)."""
        if self.checkpoints is None:
            return None
        found = self.checkpoints.list()
        return found[-1][1] if found else None

    def _result(self, algo_result: dict[str, Any], iter_time: float) -> dict[str, Any]:
        result: dict[str, Any] = {
            "iteration": self.iteration,
            "env_steps_sampled": self.env_steps_sampled,
            "env_steps_sampled_this_iter": self._iter["env_steps"],
            "env_steps_trained": self.env_steps_trained,
            "episodes_total": self.episodes.episodes_total,
            "episodes_this_iter": self._iter["episodes"],
            **self.episodes.stats(),
            **self.runner_stats(),
            **self.learner_stats(),
            "time_s": self.time_s,
            "time_this_iter_s": iter_time,
            "timestamp": time.time(),
        }
        for key, value in algo_result.items():
            result.setdefault(key, value)
        return result

    @property
    def time_s(self) -> float:
        """Training wall time, continued across resumes (setup excluded)."""
        return self.time_base + (time.monotonic() - getattr(self, "_t_start", time.monotonic()))

    def learner_stats(self) -> dict[str, Any]:
        """The learner mesh: live members of the epoch that ran the last update, its
        epoch and the weights version (0, 0 and the version for an in-process learner)."""
        group = self.learner_group
        if group is None:
            return {"num_learners": 0, "mesh_epoch": 0, "weights_version": self.learner_version}
        return {**group.stats(), "weights_version": self.learner_version}

    def runner_stats(self) -> dict[str, Any]:
        """Health and failure counters of the env runners."""
        if self.env_runner_group is not None:
            stats = self.env_runner_group.stats()
            stats["num_env_runners"] = self.env_runner_group.num_runners
            stats["num_samples_in_flight"] = self.env_runner_group.in_flight()
            return stats
        runner = self.local_runner
        return {
            "num_healthy_env_runners": 0,
            "num_env_runners": 0,
            "num_env_runner_restarts": 0,
            "num_env_runner_failures": 0,
            "num_sub_env_restarts": runner.num_sub_env_restarts if runner else 0,
            "num_samples_late": 0,
            "num_samples_dropped": 0,
            "env_steps_dropped": 0,
            "num_samples_lost": 0,
            "num_samples_in_flight": 0,
        }

    # ------------------------------------------------------------------ RLlib-style helpers

    def synchronous_parallel_sample(self, max_env_steps: int | None = None, *, timeout_s: float | None = None) -> list[dict[str, np.ndarray]]:
        """Sample fragments from all healthy runners until `max_env_steps` (default
        train_batch_size) usable steps arrived or `timeout_s` (default sample_timeout_s)
        passed. Records episodes, filter deltas and counters; returns the fragments."""
        target = self.config.training_cfg.train_batch_size if max_env_steps is None else max_env_steps
        fragments: list[dict[str, np.ndarray]] = []
        got = 0
        if self.local_runner is not None:
            while got < target:
                result = self.local_runner.sample()
                self._record(result)
                fragments.append(result["batch"])
                got += result["env_steps"]
            return fragments
        group = self.env_runner_group
        assert group is not None
        timeout = self.config.env_runners_cfg.sample_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout
        if group.latest_version != self.learner_version:  # never sample with other weights
            self.sync_weights()
        rounds = 0
        while got < target and time.monotonic() < deadline:
            group.wait_for_healthy()
            # a round after a short one (a runner died, a late fragment): just the missing steps
            round_ = group.sample(target - got, current_version=self.learner_version, top_up=rounds > 0)
            rounds += 1
            for result in round_.results:
                self._record(result, used=not result.get("dropped", False))
                if not result.get("dropped", False):
                    try:
                        check_fragment(result["batch"])
                    except ValueError as e:
                        log.warning("dropping a malformed fragment from runner %s: %s", result.get("worker_index"), e)
                        continue
                    fragments.append(result["batch"])
            got += round_.env_steps
            if not round_.results and not group.in_flight():  # nothing could be asked: no hot loop
                time.sleep(0.01)
        return fragments

    def _record(self, result: dict[str, Any], used: bool = True) -> None:
        """Bookkeeping for one sample result: episodes, filter, counters."""
        steps = int(result.get("env_steps", 0))
        self.env_steps_sampled += steps
        self._iter["env_steps"] = self._iter.get("env_steps", 0) + steps
        self._iter["samples"] = self._iter.get("samples", 0) + 1
        eps = result.get("episodes") or {}
        n = self.episodes.add(eps.get("returns", []), eps.get("lengths", []))
        self._iter["episodes"] = self._iter.get("episodes", 0) + n
        delta = result.get("filter_delta")
        if delta is not None:
            try:
                self.filter.apply_delta(delta)
            except ValueError as e:
                log.warning("ignoring a filter delta from runner %s: %s", result.get("worker_index"), e)

    @property
    def learner_version(self) -> int:
        return int(self.learner.version)

    def weights_for_runners(self) -> tuple[int, np.ndarray]:
        """(version, weights) `sync_weights` pushes: the learner's (an asynchronous
        algorithm: the ones its learner published last)."""
        return self.learner.get_weights()

    def sync_weights(self) -> None:
        """Push the learner's weights (versioned) and the central filter to every runner
        that samples (and to the evaluation runners at evaluation time)."""
        version, weights = self.weights_for_runners()
        filter_state = self.filter.get_state()
        if self.local_runner is not None:
            self.local_runner.set_weights(version, weights, filter_state)
        if self.env_runner_group is not None:
            self.env_runner_group.sync_weights(version, weights, filter_state)

    def evaluate(self) -> dict[str, Any]:
        """Run `evaluation_duration` episodes/timesteps with the current weights."""
        ev = self.config.evaluation_cfg
        version, weights = self.get_weights()
        filter_state = self.filter.get_state()
        results: list[dict[str, Any]] = []
        t0 = time.monotonic()
        healthy = 0
        if self.eval_runner_group is not None:
            group = self.eval_runner_group
            group.poll_recoveries()
            group.sync_weights(version, weights, filter_state)
            results = group.evaluate(ev.evaluation_duration, ev.evaluation_duration_unit)
            healthy = group.num_healthy
        else:
            runner = self.eval_local_runner
            if runner is None:
                runner = self.eval_local_runner = EnvRunner(
                    self.config, worker_index=0, evaluation=True, space_spec=self.spec.to_dict(), set_torch_threads=False
                )
            runner.set_weights(version, weights, filter_state)
            kwargs = {"num_episodes": ev.evaluation_duration} if ev.evaluation_duration_unit == "episodes" else {"num_timesteps": ev.evaluation_duration}
            results = [runner.evaluate(**kwargs)]
        returns = np.concatenate([np.asarray(r["returns"], np.float64) for r in results]) if results else np.zeros(0)
        lengths = np.concatenate([np.asarray(r["lengths"], np.int64) for r in results]) if results else np.zeros(0)
        out = {
            "episode_return_mean": float(returns.mean()) if returns.size else None,
            "episode_return_min": float(returns.min()) if returns.size else None,
            "episode_return_max": float(returns.max()) if returns.size else None,
            "episode_len_mean": float(lengths.mean()) if lengths.size else None,
            "num_episodes": int(returns.size),
            "env_steps": int(sum(int(r.get("env_steps", 0)) for r in results)),
            "weights_version": version,
            "time_s": time.monotonic() - t0,
        }
        if self.eval_runner_group is not None:
            out["num_healthy_eval_runners"] = healthy
            out.update({f"eval_{k}": v for k, v in self.eval_runner_group.stats().items() if k != "num_healthy_eval_runners"})
        self._last_eval = out
        return out

    # ------------------------------------------------------------------ weights & actions

    def get_weights(self) -> tuple[int, np.ndarray]:
        return self.learner.get_weights()

    def set_weights(self, version: int, weights: np.ndarray) -> None:
        self.learner.set_weights(version, weights)
        self.sync_weights()

    def compute_single_action(self, obs: Any, explore: bool = False) -> Any:
        """The policy's action for one raw observation (filtered like in training)."""
        from ftrl.rl.spaces import ObsEncoder, env_action

        x = ObsEncoder(self.spec).encode(obs)[None, :]
        x = self.filter(x, update=False)
        model = getattr(self.learner, "model", None)
        if model is None:  # remote learners: a local copy of the latest weights
            from ftrl.rl.models.factory import build_model

            version, weights = self.learner.get_weights()
            if self._local_model is None or self._local_model[0] != version:
                local = build_model(self.spec, self.config.model_config)
                local.set_flat(weights)
                self._local_model = (version, local)
            model = self._local_model[1]
        with torch.inference_mode():
            actions, _, _ = model.act(torch.from_numpy(np.ascontiguousarray(x, np.float32)), explore)
        return env_action(self.spec, actions.numpy())[0]

    # ------------------------------------------------------------------ checkpoints (ftrl.rl.driver.state)

    def get_algo_counters(self) -> dict[str, int]:
        """An algorithm's own cumulative counters, kept in every driver state (none here)."""
        return {}

    def set_algo_counters(self, counters: dict[str, Any]) -> None:
        """Continue from the counters of `get_algo_counters` a resumed state held."""

    def get_state(self) -> dict[str, Any]:
        """Everything a checkpoint holds (msgpack + numpy only)."""
        return algo_state.get_state(self)

    def save_checkpoint(self) -> Path:
        """Write a checkpoint for the current iteration under output_dir/checkpoints."""
        path = algo_state.save_checkpoint(self)
        self.last_checkpoint = path
        return path

    def checkpoint_now(self) -> dict[str, Any]:
        """A checkpoint of the current iteration (the one it wrote already, if any) and its
        `checkpoint_summary` (path, iteration, env steps, return, weights version). On the
        training thread (the driver actor's `checkpoint_now` goes through `run_at_boundary`)."""
        summary, path = self.last_checkpoint_summary, self.last_checkpoint
        if summary is None or path is None or summary["iteration"] != self.iteration or not path.exists():
            self.save_checkpoint()
            summary = self.last_checkpoint_summary
        assert summary is not None
        return dict(summary)

    # ------------------------------------------------------------------ live hyperparameters, exploit

    def exploit(self, checkpoint: str | Path, hyperparams: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Population-based training's exploit in place: take `checkpoint`'s learner,
        observation filter and episode window with `hyperparams` (live keys), keeping this
        run's runners, learners and counters (ftrl.rl.driver.exploit). On the training thread."""
        return algo_exploit.exploit(self, Path(checkpoint), hyperparams or {})

    def apply_hyperparams(self, hyperparams: Mapping[str, Any]) -> dict[str, Any]:
        """Change live training keys (ftrl.config.live) in place: checked first (a key that is
        not live, or a bad value: ConfigError, nothing changes), then set on the config and
        on the learner(s) from their next update on, and kept in every driver state.
        Returns the values set. On the training thread."""
        values = check_live(self.config, hyperparams)
        with self.learner_paused():
            self.set_checked_hyperparams(values)
        return values

    def set_checked_hyperparams(self, values: Mapping[str, Any]) -> None:
        """`apply_hyperparams` after its check (`check_live`), with the learner paused."""
        if not values:
            return
        self.config.training(**values)
        self.config_dict = self.config.to_dict()
        self.hyperparams.update(values)
        self.learner.set_hyperparams(dict(values))

    def learner_paused(self) -> contextlib.AbstractContextManager:
        """Held while the training thread changes the learner's state or hyperparameters:
        no update runs meanwhile (nothing to hold here: updates run on this thread)."""
        return contextlib.nullcontext()

    def publish_weights(self) -> None:
        """The learner's weights changed outside an update: make them the ones the runners
        get next (here they always get the learner's; IMPALA publishes them)."""

    def stale_version_gap(self) -> int:
        """How many versions behind the learner a sample may be and still be learned on (the
        runners' max_weights_lag): an exploit moves the version further than this."""
        return int(self.config.env_runners_cfg.max_weights_lag)

    def check_compatible(self, state: dict[str, Any]) -> None:
        """Raise ConfigError if this config cannot continue from `state`."""
        check_resume_compatible(self.config, self.spec, state)

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore from `get_state()` output (after `check_compatible`)."""
        algo_state.set_state(self, state)

    def _resume(self, known_row: dict[str, Any] | None = None) -> None:
        algo_state.resume(self, known_row)

    # ------------------------------------------------------------------ running to a stop (ftrl.rl.driver.run_loop)

    def run(
        self,
        stop: StopCriteria,
        on_result: Callable[[dict[str, Any]], Any] | None = None,
        stop_event: threading.Event | None = None,
    ) -> dict[str, Any]:
        """Train until `stop` is met; checkpoint at the end; write output_dir/result.json.
        Returns {"stop_reason", "result", "checkpoint", ...}.

        Ctrl-C (or SIGTERM; main thread only) or setting `stop_event` asks for a stop after
        the current iteration, which then gets the final checkpoint ("stopped"); a second
        Ctrl-C aborts at once without a final checkpoint ("interrupted"), so a checkpoint
        never holds a half-done iteration.
        """
        return run_loop.run(self, stop, on_result, stop_event)

    def progress(self) -> dict[str, Any]:
        """What the stop criteria see before the first iteration (e.g. after a resume)."""
        return {
            "iteration": self.iteration,
            "env_steps_sampled": self.env_steps_sampled,
            "episode_return_mean": self.episodes.stats()["episode_return_mean"],
        }

    def finish(
        self,
        reason: str,
        result: dict[str, Any] | None,
        error: BaseException | None = None,
        final_checkpoint: bool = True,
        note: str = "",
    ) -> dict[str, Any]:
        """Final checkpoint (unless the run failed or was aborted, or this iteration has one)
        and output_dir/result.json (not for "drained": the job goes on elsewhere); returns
        the summary written there. `note` (why a run that did not fail ended early) goes in
        its "error" field. Work waiting for an iteration boundary fails with `RunEnded`."""
        self._close_boundary(f"ended ({reason})")
        self.flush_state()  # every finished iteration's row before result.json
        path = None
        if (
            error is None
            and final_checkpoint
            and self.checkpoints is not None
            and (self.config.checkpointing_cfg.checkpoint_at_end or reason == "drained")
            and self.iteration > 0
            and self.last_checkpoint_iteration != self.iteration
        ):
            try:
                path = self.save_checkpoint()
            except FtrlError as e:  # e.g. no learner left to ask for its state
                log.error("final checkpoint failed: %s", e)
                path = self.checkpoints.list()[-1][1] if self.checkpoints.list() else None
        elif self.checkpoints is not None and self.checkpoints.list():
            path = self.checkpoints.list()[-1][1]
        summary = {
            "stop_reason": reason,
            "iteration": self.iteration,
            "env_steps_sampled": self.env_steps_sampled,
            "episode_return_mean": self.episodes.stats()["episode_return_mean"],
            "time_s": self.time_s,
            "checkpoint": str(path) if path else None,
            "restored_from": str(self.restored_from) if self.restored_from else None,
            "result": result,
            "error": f"{type(error).__name__}: {error}" if error is not None else (note or None),
        }
        if self.output_dir is not None and reason != "drained":
            atomic_write_json(self.output_dir / "result.json", json_safe(summary))
        return summary

    def stop(self, kill_actors: bool = True) -> None:
        """Stop runners and learners (killing remote ones unless `kill_actors` is False:
        a drained driver leaves them to its next incarnation) and close sub-envs."""
        self._close_boundary("stopped")
        if self._stopped:
            return
        self._stopped = True
        if self.state_writer is not None and not self.state_writer.close():
            log.error("stopping: the newest state and rows were not all written to %s", self.output_dir)
        for runner in (self.local_runner, self.eval_local_runner):
            if runner is not None:
                runner.stop()
        for group in (self.env_runner_group, self.eval_runner_group, self.learner_group):
            if group is not None:
                group.stop(kill=kill_actors)
        if self._own_client and self.client is not None:
            self.client.close()
        if self._own_cluster is not None:
            self._own_cluster.stop()

    def __enter__(self) -> Algorithm:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
