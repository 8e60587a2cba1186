"""Algorithm: the job's driver. Owns the run state, the learner, the env runners, the
output directory, and composes the parts that work on them.

    algo = PPOConfig().environment("CartPole-v1").build()
    while True:
        result = algo.train()          # one training_iteration() plus bookkeeping

Subclasses (ftrl.rl.algorithms.ppo) implement `setup_learner()` and
`training_iteration()` with the RLlib-style helpers `synchronous_parallel_sample()` and
`sync_weights()`. This module sets a run up, runs one iteration (`train`: work waiting
for the boundary, the subclass's `training_iteration`, the row, evaluation, periodic
checkpoints) and ends it (`finish`, `stop`); everything else is a part with its own
state, reached through a method here of the same name as before:

- ftrl.rl.driver.run_state: `RunState`, the run's counters, observation filter,
  episode window, versions and incarnations, live hyperparameters (`algo.run_state`);
  `algo.iteration`, `algo.env_steps_sampled`, `algo.filter`, ... read it;
- ftrl.rl.driver.runners: `DriverRunners`, the training and evaluation runners (a local
  EnvRunner with `num_env_runners=0`, for the whole run, else an EnvRunnerGroup created
  through `client.create_actor`), their counters and incarnations (`algo.runners`);
- ftrl.rl.driver.learner_access: how the driver reaches the learner (`learner_access`:
  on this thread, or IMPALA's learner thread, ftrl.rl.driver.async_learner); the learner
  itself (`algo.learner`) is in this process (`num_learners=0`) or the elastic
  LearnerGroup;
- ftrl.rl.driver.sampler and .evaluation: `synchronous_parallel_sample()`, `evaluate()`;
- ftrl.rl.driver.output: `RunOutput`, metrics.jsonl, checkpoints/, the state writer
  (each iteration's state and row go to disk off the training path, then
  `on_row_durable(row)`; `flush_state()` waits for them, `stop()` and `run()` do so too);
- ftrl.rl.driver.state: `get_state()`/`set_state()`/`save_checkpoint()`, resume from the
  newest state that exists, `check_resume_compatible`;
- ftrl.rl.driver.exploit: `exploit()` and `apply_hyperparams()` (population-based
  training's exploit in place; live training keys, ftrl.config.live);
- ftrl.rl.driver.boundary: `run_at_boundary(fn)` returns a Future of `fn(algo)`, run
  at the start of the next `train()`, before `training_iteration()`, in submission
  order (the driver actor's `checkpoint_now` and `exploit` use it); once the run ended
  (`finish`, `stop`) it fails with `RunEnded`;
- ftrl.rl.driver.run_loop: `run()`, training to a stop criterion, Ctrl-C/SIGTERM.

The client is injected (`client=`), so the same code runs on the real runtime, on
`tests.local_client.LocalClient` (in-process threads) in tests, or on whatever the
cluster hook provides. With no client given and remote runners or learners asked for,
an embedded local cluster is started (`embedded_cluster_for`).
`scale_env_runners(n)` / `scale_learners(m)` resize the groups at the next iteration /
step boundary.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ftrl.config import AlgorithmConfig, StopCriteria, check_live
from ftrl.config.keys import Part
from ftrl.rl.driver import exploit as algo_exploit
from ftrl.rl.driver import rebuild, run_loop
from ftrl.rl.driver import state as algo_state
from ftrl.rl.driver.actions import SingleActions
from ftrl.rl.driver.boundary import BoundaryWork, RunEnded
from ftrl.rl.driver.driver_hooks import DriverHooks
from ftrl.rl.driver.embedded import embedded_cluster_for
from ftrl.rl.driver.evaluation import evaluate, video_due
from ftrl.rl.driver.learner_access import DirectAccess, LearnerAccess, scale_learner_group
from ftrl.rl.driver.loading import load_trained_state
from ftrl.rl.driver.metrics import EpisodeWindow, json_safe
from ftrl.rl.driver.output import RunOutput
from ftrl.rl.driver.run_state import ObservationFilter, RunState
from ftrl.rl.driver.runners import DriverRunners
from ftrl.rl.driver.sampler import sample_synchronously
from ftrl.rl.learning.learner_group import LearnerGroup
from ftrl.rl.sampling.env_factory import probe_spaces
from ftrl.rl.sampling.env_runner import EnvRunner
from ftrl.rl.sampling.filters import make_filter
from ftrl.rl.sampling.runner_group import EnvRunnerGroup
from ftrl.rl.spaces import SpaceSpec, space_spec
from ftrl.wire.errors import ConfigError, FtrlError

__all__ = ["Algorithm", "RunEnded"]

log = logging.getLogger(__name__)


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

    #: The learner class ("module:Class") learner actors host; see setup_learner.
    learner_class_path = ""
    #: The algorithm's own cumulative counters (`RunState.algo_counters`, in every driver state).
    algo_counter_names: tuple[str, ...] = ()

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
        self.run_state = RunState(
            config_dict=cfg.to_dict(), spec_dict=self.spec.to_dict(),
            obs_filter=make_filter(cfg.env_runners_cfg.observation_filter, (self.spec.obs_dim,),
                                   self.spec.unfiltered_columns()),
            episodes=EpisodeWindow(cfg.reporting_cfg.metrics_num_episodes_for_smoothing),
            algo_counters=self.algo_counter_names)
        #: the user's callbacks (`callbacks_class`): built here, so a bad one fails before anything starts
        self.hooks = DriverHooks(cfg.callbacks_cfg.callbacks_class, self.run_state)
        self.boundary = BoundaryWork(job_name)
        self.output = (RunOutput(output_dir, cfg.checkpointing_cfg.keep_checkpoints, on_row_durable=self._row_durable,
                                 tensorboard=cfg.reporting_cfg.tensorboard)
                       if output_dir is not None else None)
        #: called (on the state writer's thread) with each row once it is on disk
        self.on_row_durable: Callable[[dict[str, Any]], Any] | None = None
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
        self.runners = DriverRunners(cfg, self.run_state.spec_dict)
        self.learner: Any = None
        self.learner_access: LearnerAccess | None = None
        self._actions = SingleActions(self.spec, cfg.model_config)
        self._stopped = False
        try:
            self.learner = self._make_learner()
            self.learner_access = self.setup_learner_access(self.learner)
            if resume:
                self._resume(known_row)
            elif self.output is not None:
                self.output.start_fresh()
            self.runners.start(self.client, job_name, self.run_state.saved_actors,
                               max_weights_lag=self.runner_weights_lag())
            algo_state.restore_runner_counters(self.run_state, self.runners)
            algo_state.adopt_runner_filter(self.run_state, self.runners)
            self.learner_access.start()
            self.sync_weights()
            if self.output is not None:
                self.output.state_writer.start()
        except BaseException:
            self.stop()
            raise
        if self.run_state.restored_from is not None:
            self.hooks.checkpoint_loaded(self)
        self.hooks.algorithm_init(self)
        self.run_state.start_clock()

    # ------------------------------------------------------------------ setup hooks

    def setup_learner(self) -> Any:
        """Create the in-process learner (subclasses: return an object with update/
        get_weights/get_state/set_state/version)."""
        raise NotImplementedError(f"{type(self).__name__} must implement setup_learner()")

    def setup_learner_access(self, learner: Any) -> LearnerAccess:
        """How the driver reaches `learner` (here: on the training thread itself; IMPALA:
        through its learner thread). Called once, after the learner is made."""
        return DirectAccess(learner, stale_version_gap=lambda: self.config.env_runners_cfg.max_weights_lag)

    def runner_weights_lag(self) -> int | None:
        """The runner group's max_weights_lag when the algorithm judges staleness itself
        (IMPALA); None: the config's."""
        return None

    def _make_learner(self) -> Any:
        """The learner behind one interface: in this process (`num_learners=0`) or the
        elastic LearnerGroup of `num_learners` learner actors."""
        if self.config.learners_cfg.num_learners == 0:
            return self.setup_learner()
        group = LearnerGroup(self.client, self.config, job_name=self.job_name,
                             space_spec=self.spec.to_dict(), learner_class=self.learner_class_path)
        group.start()
        return group

    # ------------------------------------------------------------------ the parts, as before

    @property
    def learner_group(self) -> LearnerGroup | None:
        """The LearnerGroup, or None when the learner runs in this process."""
        return self.learner if isinstance(self.learner, LearnerGroup) else None

    @property
    def local_runner(self) -> EnvRunner | None:
        return self.runners.local

    @property
    def env_runner_group(self) -> EnvRunnerGroup | None:
        return self.runners.group

    @property
    def eval_runner_group(self) -> EnvRunnerGroup | None:
        return self.runners.eval_group

    @property
    def output_dir(self) -> Path | None:
        return self.output.directory if self.output is not None else None

    @property
    def iteration(self) -> int:
        return self.run_state.iteration

    @iteration.setter
    def iteration(self, value: int) -> None:
        self.run_state.iteration = int(value)

    @property
    def env_steps_sampled(self) -> int:
        return self.run_state.env_steps_sampled

    @env_steps_sampled.setter
    def env_steps_sampled(self, value: int) -> None:
        self.run_state.env_steps_sampled = int(value)

    @property
    def env_steps_trained(self) -> int:
        return self.run_state.env_steps_trained

    @env_steps_trained.setter
    def env_steps_trained(self, value: int) -> None:
        self.run_state.env_steps_trained = int(value)

    @property
    def time_s(self) -> float:
        """Training wall time, continued across resumes (setup excluded)."""
        return self.run_state.time_s

    @property
    def filter(self) -> ObservationFilter:
        """The central observation filter."""
        return self.run_state.filter

    @property
    def episodes(self) -> EpisodeWindow:
        return self.run_state.episodes

    @property
    def hyperparams(self) -> dict[str, Any]:
        """Live training keys set while the job runs (exploits), kept in every driver state."""
        return self.run_state.hyperparams

    @property
    def restored_from(self) -> Path | None:
        return self.run_state.restored_from

    @property
    def rows_to_report(self) -> list[dict[str, Any]]:
        """Rows the resume wrote to metrics.jsonl that nobody reported yet."""
        return self.run_state.rows_to_report

    @property
    def learner_version(self) -> int:
        return int(self.learner.version)

    def scale_learners(self, num_learners: int) -> None:
        """Grow or shrink the learner group at the next step boundary (thread-safe)."""
        scale_learner_group(self.config, self.learner_group, num_learners)

    def scale_env_runners(self, num_env_runners: int) -> None:
        """Grow or shrink the env runners at the next iteration boundary (thread-safe).
        A run that samples in this process (num_env_runners=0) has no group to resize."""
        self.runners.scale(num_env_runners)

    # ------------------------------------------------------------------ the loop

    def training_iteration(self) -> dict[str, Any]:
        """One iteration of the algorithm's dataflow; returns a dict of its own metrics."""
        raise NotImplementedError(f"{type(self).__name__} must implement training_iteration()")

    def train(self) -> dict[str, Any]:
        """Run `training_iteration()` (repeated up to min_sample_timesteps_per_iteration),
        evaluate if due, log metrics, checkpoint if due; return the result dict. Work
        handed to `run_at_boundary` runs first."""
        self.boundary.run(self)
        t0 = time.monotonic()
        self.runners.apply_scale()  # an iteration boundary
        run = self.run_state
        run.begin_iteration()
        algo_result: dict[str, Any] = {}
        min_steps = self.config.reporting_cfg.min_sample_timesteps_per_iteration
        while True:
            algo_result = self.training_iteration() or {}
            if run.this_iter.env_steps >= min_steps:
                break
        run.iteration += 1
        result = run.result_row(algo_result, time.monotonic() - t0, self.runner_stats(), self.learner_stats())
        interval = self.config.evaluation_cfg.evaluation_interval
        if interval is not None and run.iteration % interval == 0:
            result["evaluation"] = self.evaluate()
        self.hooks.train_result(self, result)  # what on_train_result changes is the row
        run.last_row = json_safe(result)  # what this iteration's states hold as its row
        ck = self.config.checkpointing_cfg.checkpoint_interval
        if self.output is not None and ck > 0 and run.iteration % ck == 0:
            self.save_checkpoint()
        self._persist(run.last_row)
        return result

    def run_at_boundary(self, fn: Callable[[Algorithm], Any]) -> cf.Future:
        """Run `fn(self)` on the training thread at the next iteration boundary (the start
        of the next `train()`, before `training_iteration()`, in submission order); its
        result or exception goes to the returned Future. Thread-safe. A cancelled Future's
        `fn` never runs; once the run ended, the Future fails with `RunEnded`."""
        return self.boundary.submit(fn)

    def _driver_state(self) -> dict[str, Any]:
        return algo_state.driver_state(self.run_state, algo_name=self.config.algo_name,
                                       learner_version=self.learner_version, runners=self.runners,
                                       learner_group=self.learner_group)

    def _persist(self, row: dict[str, Any]) -> None:
        """Hand this iteration's state and row to the state writer (never waits for the
        disk; ftrl.rl.driver.state_writer)."""
        if self.output is None:
            return
        assert self.learner_access is not None
        self.output.state_writer.submit(self.run_state.iteration, self._driver_state(), row,
                                        algo_state.learner_source(self.run_state, self.learner_access,
                                                                  self.learner_group))

    def _row_durable(self, row: dict[str, Any]) -> None:
        callback = self.on_row_durable
        if callback is not None:
            callback(row)

    def flush_state(self, timeout_s: float = 30.0) -> bool:
        """Wait until every finished iteration's state and row are on disk; whether they are."""
        return self.output.flush(timeout_s) if self.output is not None else True

    def latest_checkpoint(self) -> Path | None:
        """The newest checkpoint file under output_dir/checkpoints (None if there is none)."""
        return self.output.latest_checkpoint() if self.output is not None else None

    def learner_stats(self) -> dict[str, Any]:
        """The learner mesh: live members of the epoch that ran the last update, its
        epoch and the weights version (0, 0 and the version for an in-process learner)."""
        group = self.learner_group
        if group is None:
            return {"num_learners": 0, "mesh_epoch": 0, "weights_version": self.learner_version}
        return {**group.stats(), "weights_version": self.learner_version}

    def runner_stats(self) -> dict[str, Any]:
        """Health and failure counters of the env runners."""
        return self.runners.stats()

    # ------------------------------------------------------------------ RLlib-style helpers

    def synchronous_parallel_sample(self, max_env_steps: int | None = None, *,
                                    timeout_s: float | None = None) -> list[dict[str, np.ndarray]]:
        """Sample fragments from all healthy runners until `max_env_steps` (default
        train_batch_size) usable steps arrived or `timeout_s` (default sample_timeout_s)
        passed. Records episodes, filter deltas and counters; returns the fragments."""
        cfg = self.config
        return sample_synchronously(
            self.runners, self.run_state,
            target_env_steps=cfg.training_cfg.train_batch_size if max_env_steps is None else max_env_steps,
            timeout_s=cfg.env_runners_cfg.sample_timeout_s if timeout_s is None else timeout_s,
            current_version=self.learner_version, sync_weights=self.sync_weights)

    def sync_weights(self) -> None:
        """Push the learner's weights (versioned; IMPALA: the ones its learner thread
        published last) and the central filter to every runner that samples (and to the
        evaluation runners at evaluation time)."""
        assert self.learner_access is not None
        version, weights = self.learner_access.weights_for_runners()
        self.runners.sync_weights(version, weights, self.run_state.filter.get_state())

    def evaluate(self) -> dict[str, Any]:
        """Run `evaluation_duration` episodes/timesteps with the current weights (and, every
        `evaluation_video_interval` evaluations, record one episode to OUTPUT/videos/)."""
        version, weights = self.get_weights()
        ev = self.config.evaluation_cfg
        record = self.output is not None and video_due(ev, self.run_state.iteration)
        metrics = evaluate(self.runners, ev, version, weights, self.run_state.filter.get_state(), record)
        video = metrics.pop("video", None)
        if video is not None and self.output is not None:
            path = self.output.write_video(video, self.run_state.episodes.episodes_total,
                                           self.run_state.env_steps_sampled)
            metrics["video"] = str(path.relative_to(self.output.directory))
            metrics["video_episode_len"] = int(video["length"])
            metrics["video_episode_return"] = float(video["return"])
        self.hooks.evaluate_end(self, metrics)
        return metrics

    # ------------------------------------------------------------------ weights & actions

    def get_weights(self) -> tuple[int, np.ndarray]:
        """The learner's (version, flat weights), read between two updates."""
        assert self.learner_access is not None
        return self.learner_access.get_weights()

    def set_weights(self, version: int, weights: np.ndarray) -> None:
        """Load weights into the learner (the learner paused) and push them to the runners."""
        assert self.learner_access is not None
        with self.learner_access.paused():
            self.learner.set_weights(version, weights)
            self.learner_access.publish()
        self.sync_weights()

    def compute_single_action(self, obs: Any, state: Any = None, *, prev_action: Any = None,
                              prev_reward: float | None = None, explore: bool = False) -> Any:
        """The policy's action for one raw observation (filtered like in training). With
        `state` (a recurrent policy's, `get_initial_state()` at an episode's start), and
        its `prev_action` and `prev_reward` (None: zero, as at an episode's start): returns
        `(action, state_out)`, RLlib's way; without, the action from an episode's start."""
        if state is None:
            return self._actions.compute(obs, self.run_state.filter, self.learner, explore)
        return self._actions.compute_recurrent(obs, state, prev_action, prev_reward, self.run_state.filter,
                                               self.learner, explore)

    def get_initial_state(self) -> Any:
        """A recurrent policy's state at an episode's start (numpy); ValueError for a
        policy without one."""
        return self._actions.initial_state(self.learner)

    def compute_actions(self, observations: Any, state: Any = None, *, prev_action: Any = None,
                        prev_reward: Any = None, explore: bool = False) -> Any:
        """The policy's actions for a batch of raw observations (one forward pass). With
        `state` (a recurrent policy's, one row per observation [N, S]) and optionally a
        `prev_action` and `prev_reward` per observation: `(actions, states_out [N, S])`;
        without, the actions from an episode's start."""
        if state is None:
            return self._actions.compute_batch(observations, self.run_state.filter, self.learner, explore)
        return self._actions.compute_recurrent_batch(observations, state, prev_action, prev_reward,
                                                     self.run_state.filter, self.learner, explore)

    def export_policy(self, directory: str | Path, format: str = "torchscript") -> Path:
        """Write the greedy policy as one file that runs without ftrl: DIRECTORY/policy.pt
        (`torch.jit.load`) or DIRECTORY/policy.onnx (`onnxruntime`); raw observations in
        (the observation filter folded in), `(logits, action)` out (ftrl.rl.models.export)."""
        import copy

        from ftrl.rl.models.export import export_policy

        model = copy.deepcopy(self._actions.model_of(self.learner)).cpu()
        name = self.config.model_config.custom_model or type(model).__name__
        return export_policy(model, self.spec, self.run_state.filter.affine(), directory, format, model_name=name)

    @classmethod
    def from_checkpoint(cls, path: str | Path) -> Algorithm:
        """The algorithm of a checkpoint file or a run directory (its newest state), built
        on this machine's CPU with no cluster: no remote runners or learners (evaluation in
        this process), its learner, filter and counters loaded. `compute_single_action`,
        `compute_actions`, `export_policy`, `evaluate`, even `train` work on it; `stop()` it
        when done. NotFoundError when the path holds no state."""
        from ftrl.config.registry import config_from_dict
        from ftrl.util.imports import import_object

        state, source = load_trained_state(path)
        config = config_from_dict(state["config"])
        config.env_runners(num_env_runners=0).evaluation(evaluation_num_env_runners=0)
        config.learners(num_learners=0, n_init_learners=None, num_gpus_per_learner=0.0)
        algo_cls = import_object(config.algorithm_path)
        if not issubclass(algo_cls, cls):
            raise ConfigError(f"{source} holds a {config.algo_name} state, not a {cls.__name__} one")
        algo = algo_cls(config)
        try:
            algo.set_state(state)
        except BaseException:
            algo.stop()
            raise
        algo.run_state.restored_from = source
        return algo

    # ------------------------------------------------------------------ checkpoints (ftrl.rl.driver.state)

    def get_state(self) -> dict[str, Any]:
        """Everything a checkpoint holds (msgpack + numpy only), read between two updates."""
        assert self.learner_access is not None
        with self.learner_access.at_rest():
            return {**self._driver_state(), "learner": self.learner_access.get_state()}

    def save_checkpoint(self) -> Path:
        """Write a checkpoint for the current iteration under output_dir/checkpoints."""
        if self.output is None:
            raise ConfigError("no output_dir: nowhere to write checkpoints")
        return algo_state.save_checkpoint(self.run_state, self.output.checkpoints, self.get_state())

    def checkpoint_now(self) -> dict[str, Any]:
        """A checkpoint of the current iteration (the one it wrote already, if any) and its
        `checkpoint_summary` (path, iteration, env steps, return, weights version). On the
        training thread (the driver actor's `checkpoint_now` goes through `run_at_boundary`)."""
        run = self.run_state
        summary, path = run.last_checkpoint_summary, run.last_checkpoint
        if summary is None or path is None or summary["iteration"] != run.iteration or not path.exists():
            self.save_checkpoint()
            summary = run.last_checkpoint_summary
        assert summary is not None
        return dict(summary)

    def check_compatible(self, state: dict[str, Any]) -> None:
        """Raise ConfigError if this config cannot continue from `state`."""
        algo_state.check_resume_compatible(self.config, self.spec, state)

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore from `get_state()` output (refused by `check_compatible`), the learner
        paused; its weights are the runners' next."""
        self.check_compatible(state)
        assert self.learner_access is not None
        with self.learner_access.paused():
            algo_state.set_state(self.run_state, state, learner=self.learner, learner_group=self.learner_group,
                                 apply_hyperparams=self.apply_hyperparams)
            self.learner_access.publish()
        self.hooks.checkpoint_loaded(self)

    def _resume(self, known_row: dict[str, Any] | None = None) -> None:
        if self.output is None:
            raise ConfigError("resume needs an output directory")
        algo_state.resume(self.run_state, self.output, learner=self.learner, learner_group=self.learner_group,
                          check_compatible=self.check_compatible, apply_hyperparams=self.apply_hyperparams,
                          known_row=known_row)
        self.output.resumed_at(self.run_state.env_steps_sampled)

    # ------------------------------------------------------------------ live hyperparameters, exploit

    def exploit(self, checkpoint: str | Path, hyperparams: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Population-based training's exploit in place: take `checkpoint`'s learner,
        observation filter and episode window with `hyperparams` (live keys), keeping this
        run's runners, learners and counters (ftrl.rl.driver.exploit). On the training thread."""
        assert self.learner_access is not None
        info = algo_exploit.exploit(self.run_state, Path(checkpoint), hyperparams or {}, config=self.config,
                                    spec=self.spec, access=self.learner_access,
                                    learner_group=lambda: self.learner_group,
                                    runners=self.runners, sync_weights=self.sync_weights,
                                    rebuild=self.rebuild_in_place, job_name=self.job_name)
        self.hooks.checkpoint_loaded(self)
        return info

    def apply_hyperparams(self, hyperparams: Mapping[str, Any]) -> dict[str, Any]:
        """Change live training keys (ftrl.config.live) in place: checked first (a key that is
        not live, or a bad value: ConfigError, nothing changes), then set on the config and
        on the learner(s) from their next update on, and kept in every driver state.
        Returns the values set. On the training thread."""
        values = check_live(self.config, hyperparams)
        with self.learner_paused():
            self.set_checked_hyperparams(values)
        self.rebuild_in_place(values)
        return values

    def rebuild_in_place(self, keys: Iterable[str]) -> list[str]:
        """Rebuild the parts that read the `rebuild` keys among `keys`, just changed on the
        config (ftrl.rl.driver.rebuild); new runners get the learner's weights at once, a
        new callbacks class its `on_algorithm_init`. The names of the parts."""
        keys = list(keys)
        parts = rebuild.rebuild_in_place(self.config, keys, run_state=self.run_state, output=self.output,
                                         learner_access=self.learner_access, runners=self.runners)
        if str(Part.LEARNER_MESH) in parts and self.learner_access is not None:
            training = {k: v for k, v in self.run_state.hyperparams.items()
                        if k in self.config.training_cfg.__dataclass_fields__}
            with self.learner_paused():
                self.learner = rebuild.rebuild_learner(self.learner, self.learner_access, self._make_learner, training)
        if str(Part.ENV_RUNNERS) in parts and self.learner_access is not None and self.runners.started:
            self.sync_weights()
        if "callbacks_class" in keys:
            self.hooks = DriverHooks(self.config.callbacks_cfg.callbacks_class, self.run_state)
            self.hooks.algorithm_init(self)
        return parts

    def set_checked_hyperparams(self, values: Mapping[str, Any]) -> None:
        """`apply_hyperparams` after its check (`check_live`), with the learner paused."""
        algo_exploit.set_live_hyperparams(self.run_state, self.config, self.learner, values)

    def learner_paused(self) -> contextlib.AbstractContextManager:
        """Held while the training thread changes the learner's state or hyperparameters:
        no update runs meanwhile (`LearnerAccess.paused`)."""
        assert self.learner_access is not None
        return self.learner_access.paused()

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
        return self.run_state.progress()

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
        self.boundary.close(f"ended ({reason})")
        self.flush_state()  # every finished iteration's row before result.json
        run, output = self.run_state, self.output
        path = None
        if (
            error is None
            and final_checkpoint
            and output is not None
            and (self.config.checkpointing_cfg.checkpoint_at_end or reason == "drained")
            and run.iteration > 0
            and run.last_checkpoint_iteration != run.iteration
        ):
            try:
                path = self.save_checkpoint()
            except FtrlError as e:  # e.g. no learner left to ask for its state
                log.error("final checkpoint failed: %s", e)
                path = output.latest_checkpoint()
        elif output is not None:
            path = output.latest_checkpoint()
        summary = {
            "stop_reason": reason,
            "iteration": run.iteration,
            "env_steps_sampled": run.env_steps_sampled,
            "episode_return_mean": run.episodes.stats()["episode_return_mean"],
            "time_s": run.time_s,
            "checkpoint": str(path) if path else None,
            "restored_from": str(run.restored_from) if run.restored_from else None,
            "result": result,
            "error": f"{type(error).__name__}: {error}" if error is not None else (note or None),
        }
        if output is not None and reason != "drained":
            output.write_result(summary)
        self.hooks.algorithm_end(self, reason)
        return summary

    def stop(self, kill_actors: bool = True) -> None:
        """Stop the learner thread, runners and learners (killing remote ones unless
        `kill_actors` is False: a drained driver leaves them to its next incarnation) and
        close sub-envs."""
        if self.learner_access is not None:
            self.learner_access.stop()
        self.boundary.close("stopped")
        if self._stopped:
            return
        self._stopped = True
        if self.output is not None and not self.output.close():
            log.error("stopping: the newest state and rows were not all written to %s", self.output.directory)
        self.runners.stop(kill=kill_actors)
        group = self.learner_group
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
