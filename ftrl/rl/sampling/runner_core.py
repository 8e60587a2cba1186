"""The runner group's core: its slots and state, and the failure policy with recovery.

`RunnerGroupCore` is the base the runner group's jobs build on (sampling rounds,
evaluation, scaling: `ftrl.rl.sampling.runner_group` puts them together). It holds the
slots, the counters and the latest weights, applies the fault-tolerance policy to a
failed call (`_on_failure`: recover, drop, or raise `EnvRunnerFailureError`), brings
failed runners back in the background (`_recover`: wait for the new incarnation, push
the latest weights, open its sample channel; `poll_recoveries` adopts them), accounts
for every sample result taken (`_take`: used, or dropped for stale weights), and syncs
weights through `ftrl.rl.weights.sync`. The policy itself is described in
`ftrl.rl.sampling.runner_group`.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ftrl.config import AlgorithmConfig
from ftrl.rl.actor_group import ActorGroup, ActorSlot
from ftrl.rl.sampling import runner_channels as channels
from ftrl.rl.weights.sync import WeightSync
from ftrl.wire.errors import (
    ActorDiedError,
    ActorError,
    ActorUnavailableError,
    FtrlError,
    StaleIncarnationError,
)

log = logging.getLogger(__name__)

ENV_RUNNER_CLASS = "ftrl.rl.sampling.env_runner:EnvRunner"


def weights_fresh(version: int, current: int, max_lag: int) -> bool:
    """Whether a fragment sampled with weights `version` may be used when the learner is at
    `current`: the same version, or (with `max_lag` > 0) at most `max_lag` versions older."""
    if max_lag <= 0:
        return version == current
    return current - max_lag <= version <= current


class EnvRunnerFailureError(FtrlError):
    """Env runners failed beyond what the fault-tolerance config allows."""


@dataclass
class RunnerSlot(ActorSlot):
    """What the group knows about one remote runner (`index` is its worker index, 1-based)."""

    state: str = "new"  # new | healthy | recovering | removed | retired (scaled away)
    synced_version: int = -1
    inflight: cf.Future | None = None
    inflight_version: int = -1
    inflight_late: bool = False
    inflight_kind: str = ""
    recovery: cf.Future | None = None
    plane_address: str = ""  # its weights plane server, for the incarnation below
    plane_incarnation: int = -1
    channel: Any = None  # SampleChannel to `channel_incarnation` (None: not open)
    channel_incarnation: int = -1  # the incarnation the channel (or its failure) is for
    fragment_steps: int = 0  # env steps its last sample brought (0: none yet)


@dataclass
class Recovered:
    """What a runner's recovery (`_recover`) brings back: its incarnation, the runtime's
    restart count of the actor, the weights version it has, whether its envs were
    rebuilt in place (`soft`), and its sample channel, opened meanwhile (or None)."""

    incarnation: int
    restarts: int
    version: int
    soft: bool
    channel: Any = None


class RunnerGroupCore(ActorGroup):
    """Remote env runners' slots, state, failure policy, recovery and weight sync."""

    slots: list[RunnerSlot]

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
        ft = config.fault_tolerance_cfg
        self.num_runners = config.evaluation_cfg.evaluation_num_env_runners if evaluation else run.num_env_runners
        self.kind = "eval_runner" if evaluation else "env_runner"
        super().__init__(
            client,
            group=f"{job_name}/{self.kind}",
            actor_class=actor_class,
            actor_kwargs={"config": config.to_dict(), "evaluation": evaluation, "space_spec": space_spec},
            max_restarts=ft.max_num_env_runner_restarts if ft.restart_failed_env_runners else 0,
            resources={"cpu": float(run.num_cpus_per_env_runner)},
            pool_size=max(2, self.num_runners),
            pool_name=f"{self.kind}-recovery",
        )
        self.restart = ft.restart_failed_env_runners
        self.ignore = ft.ignore_env_runner_failures
        self.tolerance = ft.num_consecutive_env_runner_failures_tolerance
        self.probe_timeout = run.env_runner_health_probe_timeout_s
        self.restore_timeout = ft.env_runner_restore_timeout_s
        self.sample_timeout = config.evaluation_cfg.evaluation_sample_timeout_s if evaluation else run.sample_timeout_s
        self.max_weights_lag = 0 if evaluation else int(run.max_weights_lag)
        self._weights = WeightSync(client, kind=self.kind, fanout=run.weights_fanout, hop_timeout_s=self.probe_timeout,
                                   call_all=lambda *a, **kw: self.call_all(*a, **kw),
                                   on_failure=lambda slot, error, what: self._on_failure(slot, error, what))
        self._channel_token = channels.channel_token(client)  # None: samples go over gRPC only
        self._latest: tuple[int, np.ndarray | None, dict | None] = (-1, None, None)
        self.slots = [RunnerSlot(index=i + 1, name=self.actor_name(i)) for i in range(self.num_runners)]
        self._target = self.num_runners  # the size asked for (`Scaling`)
        self._scale_lock = threading.Lock()
        self._retiring: list[tuple[RunnerSlot, float]] = []  # scaled away, a sample in flight; deadline
        # counters (cumulative)
        self.num_env_runner_restarts = 0
        self.num_env_runner_failures = 0
        self.num_sub_env_restarts = 0
        self.num_samples_late = 0
        self.num_samples_dropped = 0
        self.env_steps_dropped = 0
        self.num_samples_lost = 0
        self._no_healthy_waits = 0

    # ------------------------------------------------------------------ state

    @property
    def latest_version(self) -> int:
        return self._latest[0]

    def healthy(self) -> list[RunnerSlot]:
        return [s for s in self.slots if s.state == "healthy"]

    @property
    def num_healthy(self) -> int:
        return len(self.healthy())

    # ------------------------------------------------------------------ weights

    def sync_weights(self, version: int, weights: np.ndarray, filter_state: dict | None = None) -> None:
        """Push weights (and filter state) to every healthy, idle runner not yet at
        `version`. Runners busy with a late sample get them before their next one.
        More runners than `weights_fanout`: down a broadcast tree (`ftrl.rl.weights.sync`)."""
        self._latest = (version, weights, filter_state)
        targets = [s for s in self.healthy() if s.inflight is None and s.synced_version != version]
        self._weights.push(targets, version, weights, filter_state)

    @property
    def last_sync(self) -> dict[str, Any]:
        """How the last `sync_weights` went (tests, benchmarks)."""
        return self._weights.last

    @property
    def weights_fanout(self) -> int:
        return self._weights.fanout

    @weights_fanout.setter
    def weights_fanout(self, fanout: int) -> None:
        self._weights.fanout = max(1, int(fanout))

    @property
    def _plane(self) -> Any:
        """The driver's weights plane node (None: weights over gRPC only)."""
        return self._weights.plane

    @_plane.setter
    def _plane(self, node: Any) -> None:
        self._weights.plane = node

    # ------------------------------------------------------------------ results

    def _finished(self, slot: RunnerSlot, what: str) -> dict[str, Any] | None:
        """The result of `slot`'s finished request (the slot is idle after), or None when
        it failed: the request counted lost and the runner's failure handled."""
        fut = slot.inflight
        assert fut is not None and fut.done()
        slot.inflight = None
        try:
            result = fut.result()
        except FtrlError as e:
            self.num_samples_lost += 1
            self._on_failure(slot, e, what)
            return None
        slot.consecutive_failures = 0
        return result

    def _take(self, result: dict[str, Any], out: list[dict[str, Any]], current_version: int, late: bool,
              slot: RunnerSlot | None = None) -> int:
        """Add a sample result to `out`, marked used or dropped (stale weights, counted)
        and tagged with its runner and incarnation; return the env steps used."""
        self.num_sub_env_restarts += int(result.get("sub_env_restarts", 0))
        steps = int(result.get("env_steps", 0))
        fresh = weights_fresh(int(result.get("weights_version", -1)), current_version, self.max_weights_lag)
        if not fresh:
            self.num_samples_dropped += 1
            self.env_steps_dropped += steps
        result["dropped"] = not fresh
        result["late"] = late
        if slot is not None:
            result["runner"] = slot.name
            result["incarnation"] = slot.incarnation
        out.append(result)
        return steps if fresh else 0

    def _collect_retiring(self, out: list[dict[str, Any]], current_version: int, finish_only: bool = False) -> int:
        """The last samples of runners scaled away (`Scaling`): none here."""
        return 0

    # ------------------------------------------------------------------ failures

    def _on_failure(self, slot: RunnerSlot, error: BaseException, what: str) -> None:
        """Apply the policy to a failed call on `slot`."""
        text = self.note_failure(slot, error, what)
        self.num_env_runner_failures += 1
        if not isinstance(error, ActorError):  # a broken or stale connection: never reused
            channels.close_channel(slot, forget=True)
        log.warning("%s %s failed (%s)", slot.name, what, text)
        if not (self.restart or self.ignore):
            raise EnvRunnerFailureError(
                f"{slot.name} failed in {what}: {text}\n(set restart_failed_env_runners=True or "
                "ignore_env_runner_failures=True to survive runner failures)"
            ) from error
        if isinstance(error, ActorDiedError) or self.ignore:
            self._remove(slot, text)
            return
        if slot.consecutive_failures > self.tolerance:
            raise EnvRunnerFailureError(
                f"{slot.name} failed {slot.consecutive_failures} times in a row "
                f"(num_consecutive_env_runner_failures_tolerance={self.tolerance}); last error: {text}"
            ) from error
        slot.state = "recovering"
        self._start_recovery(slot, error)

    def _remove(self, slot: RunnerSlot, reason: str) -> None:
        slot.state = "removed"
        if self.restart:
            raise EnvRunnerFailureError(
                f"{slot.name} is DEAD and will not come back ({reason}); "
                f"max_num_env_runner_restarts={self.max_restarts}"
            )
        log.warning("dropping %s for good (ignore_env_runner_failures): %s", slot.name, reason)
        try:
            self.kill(slot.name)
        except FtrlError:
            pass
        if not any(s.state != "removed" for s in self.slots):
            raise EnvRunnerFailureError(f"every {self.kind} failed; nothing left to sample with")

    def _kill_retired(self, slot: RunnerSlot) -> None:
        """Kill a runner scaled away (or stopped while it was being created)."""
        channels.close_channel(slot)
        try:
            self.kill(slot.name, reason="scaled down")
        except FtrlError as e:  # e.g. not created yet: its recovery kills it once it is
            log.debug("kill_actor(%s): %s", slot.name, e)
        except Exception as e:  # a client being torn down
            log.debug("kill_actor(%s) failed: %s", slot.name, e)

    # ------------------------------------------------------------------ recovery

    def _start_recovery(self, slot: RunnerSlot, error: BaseException | None) -> None:
        if slot.recovery is not None and not slot.recovery.done():
            return
        soft = isinstance(error, ActorError)
        slot.recovery = self._pool.submit(self._recover, slot, soft)

    def _recover(self, slot: RunnerSlot, soft: bool) -> Recovered:
        """Background: bring `slot` back, synced, its sample channel open (off the
        driver's path: a restarted runner's first round costs its sample only)."""
        if slot.handle is None:
            if slot.state == "retired":
                raise ActorDiedError(f"{slot.name} was scaled down")
            self.create(slot)
            if slot.state == "retired":  # scaled down (or stopped) while it was being created
                self._kill_retired(slot)
                raise ActorDiedError(f"{slot.name} was scaled down")
        handle = slot.handle
        if soft:
            handle.options(timeout=self.probe_timeout).call("reset_envs")
        deadline = time.monotonic() + self.restore_timeout
        while True:
            incarnation = handle.wait_alive(timeout=max(0.01, deadline - time.monotonic()))
            # options() copies the incarnation it knows: make the copy after wait_alive.
            probe = handle.options(timeout=self.probe_timeout)
            try:
                probe.call("ping")
                break
            except (ActorUnavailableError, StaleIncarnationError):
                # the cluster may still name the process that just died: ask again shortly
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)
        version, weights, filter_state = self._latest
        if weights is not None:
            probe.call("set_weights", version, weights, filter_state)
        if slot.state == "retired":  # scaled down while it was coming back
            self._kill_retired(slot)
            raise ActorDiedError(f"{slot.name} was scaled down")
        channel = None if soft else channels.open_channel(self._channel_token, slot.name, probe, self.probe_timeout)
        return Recovered(incarnation, getattr(handle, "restarts", 0), version, soft, channel)

    def _adopt(self, slot: RunnerSlot, back: Recovered) -> None:
        """`slot` is back (a recovery's result): its channel, incarnation and weights, healthy."""
        channels.adopt_channel(slot, back.channel, back.incarnation)
        slot.incarnation, slot.synced_version, slot.state = back.incarnation, back.version, "healthy"

    def poll_recoveries(self) -> None:
        """Adopt runners whose recovery finished; retry or give up on failed ones."""
        for slot in self.slots:
            fut = slot.recovery
            if slot.state != "recovering" or fut is None or not fut.done():
                continue
            slot.recovery = None
            try:
                back = fut.result()
            except FtrlError as e:
                self._on_failure(slot, e, "recovery")
                continue
            if back.incarnation != slot.incarnation:  # a joiner's create set its incarnation: no restart
                # the runtime's count, not the incarnation jump: an actor moved to another
                # node jumps by a whole local-restart range (several restarts may also have
                # happened while it was away: count them all)
                restarted = max(1, back.restarts - slot.runtime_restarts)
                self.num_env_runner_restarts += restarted
                slot.runtime_restarts += restarted
                slot.restarts += 1
            elif back.soft:
                self.num_env_runner_restarts += 1  # soft restart: envs rebuilt in place
                slot.restarts += 1
            self._adopt(slot, back)
            log.info("%s is back (incarnation %d, weights v%d)", slot.name, back.incarnation, back.version)

    def wait_for_healthy(self) -> None:
        """Block until at least one runner is healthy, or raise after the tolerance."""
        waits = 0
        while True:
            self.poll_recoveries()
            if self.healthy():
                self._no_healthy_waits = 0
                return
            alive = [s for s in self.slots if s.state != "removed"]
            if not alive:
                raise EnvRunnerFailureError(f"every {self.kind} failed; nothing left to sample with")
            waits += 1
            self._no_healthy_waits += 1
            if waits > self.tolerance:
                errors = "; ".join(f"{s.name}: {s.last_error}" for s in self.slots)
                raise EnvRunnerFailureError(
                    f"no healthy {self.kind} after {waits - 1} waits of up to "
                    f"{self.probe_timeout}s (num_consecutive_env_runner_failures_tolerance="
                    f"{self.tolerance}); last errors: {errors}"
                )
            for s in alive:
                if s.state == "recovering" and s.recovery is None:
                    self._start_recovery(s, None)
            pending = [s.recovery for s in alive if s.recovery is not None]
            if pending:
                cf.wait(pending, timeout=self.probe_timeout, return_when=cf.FIRST_COMPLETED)
            else:
                time.sleep(min(1.0, self.probe_timeout))
