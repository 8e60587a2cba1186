"""DriverRunners: the env runners of one run, for training and for evaluation.

    runners = DriverRunners(config, spec_dict)
    runners.start(client, "job", saved_actors, max_weights_lag=None)
    runners.sync_weights(version, weights, filter_state)
    runners.stats()                    # the runner keys of a metrics row
    runners.rebuild(training=True, evaluation=False)   # a runner key changed (an exploit)
    runners.stop(kill=True)

Training samples in the driver's process (`local`, with `num_env_runners=0`, for the
whole run) or on the remote `group` (an EnvRunnerGroup, ftrl.rl.sampling); evaluation
likewise (`eval_local`, made when first needed, or `eval_group`). Besides holding them
the set answers what the driver state keeps of the runners: their failure counters
(`counters`, `restore_counters`), their incarnations (`known_incarnations`), the
filter a runner was synced with last (`newest_synced_filter`) and every weights version
sent to them (`versions_used`). Runners given to the constructor (tests: small fakes)
are used as they are.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ftrl.config import AlgorithmConfig
from ftrl.rl.sampling.env_runner import EnvRunner
from ftrl.rl.sampling.runner_group import EnvRunnerGroup
from ftrl.wire.errors import ConfigError

#: the runner keys of a metrics row when the driver samples itself (no runner group)
_LOCAL_STATS = ("num_healthy_env_runners", "num_env_runners", "num_env_runner_restarts", "num_env_runner_failures",
                "num_sub_env_restarts", "num_samples_late", "num_samples_dropped", "env_steps_dropped",
                "num_samples_lost", "num_samples_in_flight")


class DriverRunners:
    """The run's training and evaluation runners (module docstring)."""

    def __init__(self, config: AlgorithmConfig, spec_dict: dict[str, Any], *, local: Any = None,
                 group: Any = None, eval_local: Any = None, eval_group: Any = None) -> None:
        self.config = config
        self.spec_dict = spec_dict
        self.local: EnvRunner | None = local
        self.group: EnvRunnerGroup | None = group
        self.eval_local: EnvRunner | None = eval_local
        self.eval_group: EnvRunnerGroup | None = eval_group
        self._started_with: tuple[Any, str, int | None] | None = None  # (client, job name, max_weights_lag)

    def start(self, client: Any, job_name: str, saved_actors: dict[str, Any], *,
              max_weights_lag: int | None = None) -> None:
        """Create the runners the config asks for (remote ones through `client`,
        re-attaching to those still up; `saved_actors`: the incarnations a resumed state
        knew, by group). `max_weights_lag`: the remote group's, when the algorithm judges
        staleness itself (None: the config's)."""
        self._started_with = (client, job_name, max_weights_lag)
        self._start_training(saved_actors.get("env_runners"))
        self._start_evaluation(saved_actors.get("eval_runners"))

    def _start_training(self, previous: list[dict[str, Any]] | None) -> None:
        assert self._started_with is not None
        client, job_name, max_weights_lag = self._started_with
        if self.config.env_runners_cfg.num_env_runners == 0:
            self.local = self._local_runner(evaluation=False)
            return
        self.group = EnvRunnerGroup(client, self.config, job_name=job_name, space_spec=self.spec_dict)
        self.group.start(previous)
        if max_weights_lag is not None:
            self.group.max_weights_lag = max_weights_lag

    def _start_evaluation(self, previous: list[dict[str, Any]] | None) -> None:
        assert self._started_with is not None
        client, job_name, _ = self._started_with
        cfg = self.config
        if cfg.evaluation_cfg.evaluation_interval is None:
            return
        if cfg.evaluation_cfg.evaluation_num_env_runners == 0:
            self.eval_local = self._local_runner(evaluation=True)
            return
        self.eval_group = EnvRunnerGroup(client, cfg, job_name=job_name, space_spec=self.spec_dict, evaluation=True)
        self.eval_group.start(previous)

    @property
    def started(self) -> bool:
        """Whether `start` ran (a resume re-applies its keys before the runners exist)."""
        return self._started_with is not None

    def rebuild(self, *, training: bool, evaluation: bool, keep_scale: bool = True) -> None:
        """New training (and/or evaluation) runners built from the config as it is now (a
        key they read when they are built changed): the old ones stop (remote ones are
        killed, their fragments in flight are lost), new ones are made as `start` makes
        them (their sub-envs, env_config, resources; from the driver's process to a remote
        group and back as num_env_runners says), their failure counters go on; with
        `keep_scale`, a size asked for with `scale` stays asked for. Nothing before
        `start`. The caller sends them the weights next."""
        if not self.started:
            return
        counters = self.counters()
        if training:
            old_group = self.group
            _stop_runners(self.local, self.group)
            self.local = self.group = None
            self._start_training(None)
            if keep_scale and old_group is not None and self.group is not None:
                self.group.scale(old_group.target)
        if evaluation:
            _stop_runners(self.eval_local, self.eval_group)
            self.eval_local = self.eval_group = None
            self._start_evaluation(None)
        self.restore_counters({k: v for k, v in counters.items()
                               if (training and k != "eval_runners") or (evaluation and k == "eval_runners")})

    def _local_runner(self, evaluation: bool) -> EnvRunner:
        return EnvRunner(self.config, worker_index=0, evaluation=evaluation, space_spec=self.spec_dict,
                         set_torch_threads=False)

    def eval_runner(self) -> EnvRunner:
        """The local evaluation runner (made now if the run has none yet)."""
        if self.eval_local is None:
            self.eval_local = self._local_runner(evaluation=True)
        return self.eval_local

    # ------------------------------------------------------------------ weights

    def sync_weights(self, version: int, weights: np.ndarray, filter_state: dict[str, Any]) -> None:
        """Weights (versioned) and the central filter to every runner that samples."""
        if self.local is not None:
            self.local.set_weights(version, weights, filter_state)
        if self.group is not None:
            self.group.sync_weights(version, weights, filter_state)

    def set_max_weights_lag(self, lag: int) -> None:
        """The training group's staleness bound from its next sample on, unless the
        algorithm judges staleness itself (its own bound given to `start`)."""
        if self.group is not None and self._started_with is not None and self._started_with[2] is None:
            self.group.max_weights_lag = int(lag)

    def set_fragment_length(self, steps: int) -> None:
        """The training runners' fragment length from their next fragment on: the local
        runner's now; a remote group's requests carry the config's (`EnvRunnerGroup`)."""
        if self.local is not None:
            self.local.set_fragment_length(steps)

    def sampling_version(self) -> int:
        """The weights version the training runners sample with (the group: the one it
        was sent last)."""
        if self.local is not None:
            return int(self.local.weights_version)
        assert self.group is not None
        return int(self.group.latest_version)

    def versions_used(self) -> list[int]:
        """Every weights version the training runners hold or were sent."""
        versions: list[int] = []
        if self.group is not None:
            versions += [self.group.latest_version, *(int(s.synced_version) for s in self.group.slots)]
        if self.local is not None:
            versions.append(int(self.local.weights_version))
        return versions

    # ------------------------------------------------------------------ what a driver state keeps

    def counters(self) -> dict[str, Any]:
        """The runners' failure counters, as a driver state holds them."""
        out: dict[str, Any] = {}
        if self.group is not None:
            out["env_runners"] = self.group.get_counters()
        if self.eval_group is not None:
            out["eval_runners"] = self.eval_group.get_counters()
        if self.local is not None:
            out["local_sub_env_restarts"] = self.local.num_sub_env_restarts
        return out

    def restore_counters(self, saved: dict[str, Any]) -> None:
        """Failure counters continue from `saved` (`counters` of a resumed state): they
        never go backwards. Once the runners exist (their `start` counted the ones that
        restarted meanwhile)."""
        for key, group in (("env_runners", self.group), ("eval_runners", self.eval_group)):
            if group is not None and key in saved:
                group.set_counters(saved[key])
        if self.local is not None and "local_sub_env_restarts" in saved:
            self.local.num_sub_env_restarts += int(saved["local_sub_env_restarts"])

    def known_incarnations(self) -> dict[str, Any]:
        """The incarnation (and the runtime's restart count) of each remote runner, by
        group (what `EnvRunnerGroup.reconcile` compares a resumed driver's runners to)."""
        out: dict[str, Any] = {}
        for key, group in (("env_runners", self.group), ("eval_runners", self.eval_group)):
            if group is not None:
                out[key] = group.known_incarnations()
        return out

    def newest_synced_filter(self) -> tuple[int, dict[str, Any]] | None:
        """(weights version, filter state) of the training runner synced last, if any."""
        return self.group.newest_synced_filter() if self.group is not None else None

    # ------------------------------------------------------------------ reporting, scaling, stop

    def stats(self) -> dict[str, Any]:
        """Health and failure counters of the training runners (a metrics row's keys)."""
        if self.group is not None:
            stats = self.group.stats()
            stats["num_env_runners"] = self.group.num_runners
            stats["num_samples_in_flight"] = self.group.in_flight()
            return stats
        out = dict.fromkeys(_LOCAL_STATS, 0)
        out["num_sub_env_restarts"] = self.local.num_sub_env_restarts if self.local is not None else 0
        return out

    def scale(self, num_env_runners: int) -> None:
        """Grow or shrink the training runners at the next iteration boundary (thread-safe).
        A run that samples in this process (num_env_runners=0) has no group to resize."""
        if self.group is None:
            if int(num_env_runners) == 0:
                return
            raise ConfigError("this run samples in the driver process (num_env_runners=0) and cannot "
                              "get env runners while it runs; submit it again with num_env_runners > 0")
        self.group.scale(num_env_runners)

    def apply_scale(self) -> None:
        """An iteration boundary: the size asked for by `scale` takes effect."""
        if self.group is not None:
            self.group.apply_scale()

    def stop(self, kill: bool = True) -> None:
        """Stop the local runners; stop the groups (killing their actors with `kill`)."""
        for runner in (self.local, self.eval_local):
            if runner is not None:
                runner.stop()
        for group in (self.group, self.eval_group):
            if group is not None:
                group.stop(kill=kill)


def _stop_runners(local: EnvRunner | None, group: EnvRunnerGroup | None) -> None:
    """Stop a local runner and kill a group's runner actors (either may be None)."""
    if local is not None:
        local.stop()
    if group is not None:
        group.stop(kill=True)
