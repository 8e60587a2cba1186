"""EnvRunnerGroup: remote env runners, with the fault-tolerance policy, put together from parts.

The group never talks to the runtime except through actor handles (`call`, `submit`,
`options(timeout=)`, `wait_alive`) and the client's `create_actor` / `kill_actor`. Each
part holds its own state and reads alone; the group builds them from the config, wires
them through their constructors, and forwards its public API to them:

- `runner_set.RunnerSet`: the runners (slots), their creation, the failure policy
  (restart, ignore, or raise: RLlib's options), background recovery, restart and
  failure counters;
- `sample_ledger.SampleLedger`: every request's outcome (used, dropped for stale
  weights, late, lost), counted once;
- `runner_weights.RunnerWeights`: the latest weights, pushed down a broadcast tree, on
  the weights plane, or directly (`ftrl.rl.weights.sync`);
- `sample_rounds.SampleRounds`: `harvest()` (non-blocking) and `sample()` (a round);
- `runner_eval.Evaluation`: `evaluate()`;
- `runner_scale.Scaling` and `Leaving`: `scale()` / `apply_scale()`, and the runners
  scaled away finishing their last sample;
- `runner_channels`: the sample channel to each runner incarnation;
- `runner_slot`: the per-runner record the parts hand each other.

Every fragment carries the weights version it was sampled with; one sampled with
weights more than `max_weights_lag` versions behind is dropped and counted (never used
silently, never lost silently).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ftrl.config import AlgorithmConfig
from ftrl.rl.sampling import runner_channels as channels
from ftrl.rl.sampling.runner_eval import Evaluation
from ftrl.rl.sampling.runner_scale import Leaving, Scaling
from ftrl.rl.sampling.runner_set import FailurePolicy, RunnerSet
from ftrl.rl.sampling.runner_slot import ENV_RUNNER_CLASS, EnvRunnerFailureError, RunnerSlot
from ftrl.rl.sampling.runner_weights import RunnerWeights
from ftrl.rl.sampling.sample_ledger import SampleLedger
from ftrl.rl.sampling.sample_rounds import Harvest, SampleRound, SampleRounds

__all__ = ["EnvRunnerFailureError", "EnvRunnerGroup", "Harvest", "RunnerSlot", "SampleRound"]


class EnvRunnerGroup:
    """Remote env runners (training or evaluation) and their failure handling.

    Args:
        client: the cluster client (or an in-process LocalClient).
        config: the algorithm config the runners are built from.
        job_name: runners are `JOB/env_runner/I` (`JOB/eval_runner/I` with `evaluation`).
        space_spec: the spaces the driver expects (`SpaceSpec.to_dict()`).
        evaluation: a group of evaluation runners.
        actor_class: the runner class (`EnvRunner`, or one with its methods).

    Attributes (the parts): `runners`, `ledger`, `weights`, `sampling`, `evaluator`,
    `scaling`, `leaving`.
    """

    def __init__(
        self,
        client: Any,
        config: AlgorithmConfig,
        *,
        job_name: str,
        space_spec: dict,
        evaluation: bool = False,
        actor_class: str = ENV_RUNNER_CLASS,
    ):
        self.config = config
        self.evaluation = evaluation
        run = config.env_runners_cfg
        self.kind = "eval_runner" if evaluation else "env_runner"
        policy = FailurePolicy.from_config(config)
        sample_timeout = config.evaluation_cfg.evaluation_sample_timeout_s if evaluation else run.sample_timeout_s
        self.runners = RunnerSet(
            client,
            group=f"{job_name}/{self.kind}",
            kind=self.kind,
            num_runners=config.evaluation_cfg.evaluation_num_env_runners if evaluation else run.num_env_runners,
            policy=policy,
            actor_class=actor_class,
            actor_kwargs={"config": config.to_dict(), "evaluation": evaluation, "space_spec": space_spec},
            resources=config.env_runner_resources(),
            placement_strategy=config.resources_cfg.placement_strategy,
            channel_token=channels.channel_token(client),  # None: samples go over gRPC only
            latest_weights=lambda: self.weights.latest,
        )
        self.weights = RunnerWeights(client, self.runners, kind=self.kind, fanout=run.weights_fanout,
                                     hop_timeout_s=policy.probe_timeout_s)
        self.ledger = SampleLedger(max_weights_lag=0 if evaluation else int(run.max_weights_lag),
                                   on_failure=self.runners.on_failure)
        self.leaving = Leaving(self.runners, self.ledger)
        self.sampling = SampleRounds(
            self.runners, self.weights, self.ledger, self.leaving,
            sample_timeout_s=sample_timeout, probe_timeout_s=policy.probe_timeout_s,
            default_fragment_steps=lambda: (config.get_rollout_fragment_length()
                                            * config.env_runners_cfg.num_envs_per_env_runner))
        self.evaluator = Evaluation(self.runners, self.ledger, timeout_s=sample_timeout)
        self.scaling = Scaling(self.runners, self.leaving, sample_timeout_s=sample_timeout,
                               latest_version=lambda: self.weights.latest_version)

    # ------------------------------------------------------------------ the runners

    def start(self, previous: list[dict[str, Any]] | None = None) -> None:
        """Create every runner (re-attaching to the ones still up); with
        `validate_env_runners_after_construction`, probe them all and raise if any is not
        healthy. Without it, failed ones start recovering. `previous`: the incarnations a
        previous driver knew (`known_incarnations`); a runner that restarted since counts
        as restarted and failed (`reconcile`)."""
        self.runners.start(previous, validate=self.config.env_runners_cfg.validate_env_runners_after_construction)

    @property
    def slots(self) -> list[RunnerSlot]:
        """The runners, in worker-index order."""
        return self.runners.slots

    @property
    def num_runners(self) -> int:
        return len(self.runners.slots)

    @property
    def max_restarts(self) -> int:
        return self.runners.max_restarts

    def healthy(self) -> list[RunnerSlot]:
        return self.runners.healthy()

    @property
    def num_healthy(self) -> int:
        return self.runners.num_healthy

    def poll_recoveries(self) -> None:
        """Adopt runners whose recovery finished; retry or give up on failed ones."""
        self.runners.poll_recoveries()

    def wait_for_healthy(self) -> None:
        """Block until at least one runner is healthy, or raise after the tolerance."""
        self.runners.wait_for_healthy()

    def known_incarnations(self) -> list[dict[str, Any]]:
        """Each runner's incarnation and the runtime's restart count of it (driver states)."""
        return self.runners.known_incarnations()

    def reconcile(self, previous: list[dict[str, Any]]) -> int:
        """Count the runners that restarted while no driver watched (`RunnerSet.reconcile`)."""
        return self.runners.reconcile(previous)

    def newest_synced_filter(self) -> tuple[int, dict[str, Any]] | None:
        """(weights version, filter state) of the healthy runner synced last, or None."""
        return self.runners.newest_synced_filter()

    def probe(self) -> dict[str, Any]:
        """Ping every healthy idle runner (probe timeout); failures start recovery."""
        return self.runners.probe()

    def foreach_runner(self, method: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> dict[str, Any]:
        """Call `method` on every healthy idle runner; {name: result or the error}."""
        return self.runners.foreach_runner(method, *args, timeout=timeout, **kwargs)

    # ------------------------------------------------------------------ sampling

    def harvest(self, current_version: int | None = None, method: str = "sample", *,
                request_steps: int | None = None, **kwargs: Any) -> Harvest:
        """Take every result that is done, resubmit at once (`SampleRounds.harvest`)."""
        return self.sampling.harvest(current_version, method, request_steps=request_steps,
                                     **self._sample_kwargs(method, kwargs))

    def sample(self, min_env_steps: int, current_version: int | None = None, method: str = "sample",
               top_up: bool = False, **kwargs: Any) -> SampleRound:
        """One synchronous round (`SampleRounds.sample`)."""
        return self.sampling.sample(min_env_steps, current_version, method, top_up, **self._sample_kwargs(method, kwargs))

    def _sample_kwargs(self, method: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        """A training sample request carries the config's fragment length, so a runner
        always samples what the driver asks now (an exploit may have changed it)."""
        if method != "sample" or self.evaluation:
            return kwargs
        return {"fragment_length": self.config.get_rollout_fragment_length(), **kwargs}

    def wait_any(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` until a request or a recovery is done (`SampleRounds.wait_any`)."""
        return self.sampling.wait_any(timeout_s)

    def in_flight(self) -> int:
        """Requests out now (late ones and those of runners scaled away included)."""
        return self.sampling.in_flight()

    @property
    def max_weights_lag(self) -> int:
        """How many versions older a fragment's weights may be and still be used."""
        return self.ledger.max_weights_lag

    @max_weights_lag.setter
    def max_weights_lag(self, lag: int) -> None:
        self.ledger.max_weights_lag = int(lag)

    def evaluate(self, duration: int, unit: str, record_video: bool = False) -> list[dict[str, Any]]:
        """Split `duration` episodes/timesteps over the healthy runners (`Evaluation`; one
        of them records a video with `record_video`)."""
        return self.evaluator.evaluate(duration, unit, record_video)

    # ------------------------------------------------------------------ weights

    def sync_weights(self, version: int, weights: np.ndarray, filter_state: dict | None = None) -> None:
        """Push weights (and filter state) to every healthy, idle runner not yet at
        `version`. Runners busy with a late sample get them before their next one.
        More runners than `weights_fanout`: down a broadcast tree (`ftrl.rl.weights.sync`)."""
        self.weights.push(version, weights, filter_state)

    @property
    def latest_version(self) -> int:
        return self.weights.latest_version

    @property
    def last_sync(self) -> dict[str, Any]:
        """How the last `sync_weights` went (tests, benchmarks)."""
        return self.weights.last

    @property
    def weights_fanout(self) -> int:
        return self.weights.fanout

    @weights_fanout.setter
    def weights_fanout(self, fanout: int) -> None:
        self.weights.fanout = fanout

    # ------------------------------------------------------------------ scaling

    @property
    def target(self) -> int:
        """The size asked for last (`scale`); the group has it once `apply_scale` ran."""
        return self.scaling.target

    def scale(self, num_runners: int) -> None:
        """Ask for `num_runners` runners (thread-safe); applied by `apply_scale`."""
        self.scaling.scale(num_runners)

    def apply_scale(self) -> dict[str, Any] | None:
        """Grow or shrink toward `target` (driver thread, between iterations)."""
        return self.scaling.apply_scale()

    # ------------------------------------------------------------------ counters

    def stats(self) -> dict[str, Any]:
        return {
            "num_healthy_env_runners" if not self.evaluation else "num_healthy_eval_runners": self.num_healthy,
            **self.get_counters(),
        }

    def get_counters(self) -> dict[str, int]:
        """The cumulative failure counters (for checkpoints)."""
        return {**self.runners.counters(), **self.ledger.counters()}

    def set_counters(self, counters: dict[str, Any]) -> None:
        """Continue from checkpointed counters (added to what happened since start)."""
        self.runners.add_counters(counters)
        self.ledger.add_counters(counters)

    @property
    def num_env_runner_restarts(self) -> int:
        return self.runners.num_env_runner_restarts

    @property
    def num_env_runner_failures(self) -> int:
        return self.runners.num_env_runner_failures

    @property
    def num_sub_env_restarts(self) -> int:
        return self.ledger.num_sub_env_restarts

    @property
    def num_samples_late(self) -> int:
        return self.ledger.num_samples_late

    @property
    def num_samples_dropped(self) -> int:
        return self.ledger.num_samples_dropped

    @property
    def env_steps_dropped(self) -> int:
        return self.ledger.env_steps_dropped

    @property
    def num_samples_lost(self) -> int:
        return self.ledger.num_samples_lost

    # ------------------------------------------------------------------ teardown

    def stop(self, kill: bool = True) -> None:
        """Stop background work and the weights plane; with `kill`, also kill the runner
        actors. Runners scaled away and still finishing a sample are killed either way."""
        self.weights.close()
        self.leaving.kill_all()
        self.runners.stop(kill)
