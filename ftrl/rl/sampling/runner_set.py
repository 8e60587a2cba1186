"""The runner set: a group's remote runners, their failures and their way back.

`RunnerSet` is the `ActorGroup` (`ftrl.rl.actor_group`: names, creation, strict handles,
parallel calls, teardown) of one group's env runners with the fault-tolerance policy on
top. It owns the slots (`RunnerSlot`), each runner's lifecycle state, the background
recoveries, and the restart and failure counters. The other parts of `EnvRunnerGroup`
(`ftrl.rl.sampling.runner_group`) reach it through its methods:

- `on_failure(slot, error, what)`: a call on `slot` failed; apply the policy (below);
- `healthy()`, `idle_healthy()`: who may be sent to; `poll_recoveries()`,
  `wait_for_healthy()`: adopt runners that are back, or wait for one;
- `add(count)` / `retire(size)`: grow or shrink the set (scaling), `kill_retired(slot)`.

Policy (RLlib's option names and meaning, `FailurePolicy`):
- `restart_failed_env_runners=True` (default): runners are created with
  `max_restarts=max_num_env_runner_restarts`; the runtime restarts a dead process in
  place. A failed runner is *recovering*: a background task waits for it
  (`wait_alive`, which adopts the new incarnation), pushes the latest weights and filter
  state (`latest_weights`, the weight sync's), opens its sample channel, and only then
  is it marked healthy, so it never samples with stale weights. A runner whose user code
  raised (process alive) is soft-restarted with `reset_envs`. A runner that becomes DEAD
  (out of restarts) is an error.
- `ignore_env_runner_failures=True`: a failed runner is dropped (killed) and training
  goes on with the rest.
- neither: the first runner failure raises.
- `num_consecutive_env_runner_failures_tolerance`: a runner failing that many times in
  a row (no successful request in between), or that many waits with no healthy runner
  at all, raises `EnvRunnerFailureError`.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ftrl.config import AlgorithmConfig
from ftrl.rl.actor_group import ActorGroup, ActorSlot, describe_error
from ftrl.rl.sampling import runner_channels as channels
from ftrl.rl.sampling.runner_slot import ENV_RUNNER_CLASS, EnvRunnerFailureError, RunnerSlot
from ftrl.wire.errors import (
    ActorDiedError,
    ActorError,
    ActorUnavailableError,
    FtrlError,
    FtrlTimeoutError,
    StaleIncarnationError,
)

log = logging.getLogger(__name__)

#: () -> (version, weights or None, filter state or None): what a runner coming back is given
LatestWeights = Callable[[], tuple[int, np.ndarray | None, dict | None]]


def _no_weights() -> tuple[int, np.ndarray | None, dict | None]:
    return -1, None, None


@dataclass(frozen=True)
class FailurePolicy:
    """How the set meets a runner's failure (module docstring), and its time bounds."""

    restart: bool  # restart_failed_env_runners
    ignore: bool  # ignore_env_runner_failures
    tolerance: int  # num_consecutive_env_runner_failures_tolerance
    max_restarts: int  # the runtime's restarts of one runner (0 without `restart`)
    probe_timeout_s: float  # env_runner_health_probe_timeout_s: one call's bound
    restore_timeout_s: float  # env_runner_restore_timeout_s: a restarted runner's wait

    @classmethod
    def from_config(cls, config: AlgorithmConfig) -> FailurePolicy:
        """The policy an `AlgorithmConfig` asks for."""
        ft = config.fault_tolerance_cfg
        return cls(
            restart=ft.restart_failed_env_runners,
            ignore=ft.ignore_env_runner_failures,
            tolerance=ft.num_consecutive_env_runner_failures_tolerance,
            max_restarts=ft.max_num_env_runner_restarts if ft.restart_failed_env_runners else 0,
            probe_timeout_s=config.env_runners_cfg.env_runner_health_probe_timeout_s,
            restore_timeout_s=ft.env_runner_restore_timeout_s,
        )


@dataclass
class Recovered:
    """What a runner's recovery brings back: its incarnation, the runtime's restart count
    of the actor, the weights version it has, whether its envs were rebuilt in place
    (`soft`), and its sample channel, opened meanwhile (or None)."""

    incarnation: int
    restarts: int
    version: int
    soft: bool
    channel: Any = None


class RunnerSet(ActorGroup):
    """Runners `GROUP/I` (I from 0; worker index I+1), their state, failures and recovery.

    Args:
        client: the cluster client (or an in-process LocalClient).
        group: "JOB/KIND", the prefix of the runners' names.
        kind: what the runners are ("env_runner", "eval_runner"), for messages.
        num_runners: how many at start.
        policy: the failure policy.
        actor_class: the runner class.
        actor_kwargs: its constructor kwargs ("worker_index" is added per runner).
        resources: what each runner needs ({"cpu": 1.0}).
        placement_strategy: "PACK" or "SPREAD" over the workers ("": the coordinator's default).
        channel_token: the sample channels' token (None: samples by RPC only).
        latest_weights: what a runner coming back is given before it is healthy.
    """

    slots: list[RunnerSlot]

    def __init__(
        self,
        client: Any,
        *,
        group: str,
        kind: str,
        num_runners: int,
        policy: FailurePolicy,
        actor_class: str = ENV_RUNNER_CLASS,
        actor_kwargs: dict[str, Any] | None = None,
        resources: dict[str, float] | None = None,
        placement_strategy: str = "",
        channel_token: str | None = None,
        latest_weights: LatestWeights = _no_weights,
    ):
        super().__init__(
            client,
            group=group,
            actor_class=actor_class,
            actor_kwargs=dict(actor_kwargs or {}),
            max_restarts=policy.max_restarts,
            resources=dict(resources or {}),
            create_options={"placement_strategy": placement_strategy} if placement_strategy else None,
            pool_size=max(2, num_runners),
            pool_name=f"{kind}-recovery",
        )
        self.kind = kind
        self.policy = policy
        self.channel_token = channel_token
        self._latest_weights = latest_weights
        self.slots = [RunnerSlot(index=i + 1, name=self.actor_name(i)) for i in range(num_runners)]
        # counters (cumulative)
        self.num_env_runner_restarts = 0
        self.num_env_runner_failures = 0

    # ------------------------------------------------------------------ state

    def actor_kwargs(self, slot: ActorSlot) -> dict[str, Any]:
        return {**super().actor_kwargs(slot), "worker_index": slot.index}

    def healthy(self) -> list[RunnerSlot]:
        return [s for s in self.slots if s.state == "healthy"]

    def idle_healthy(self) -> list[RunnerSlot]:
        """Healthy runners with no request out."""
        return [s for s in self.healthy() if s.idle]

    @property
    def num_healthy(self) -> int:
        return len(self.healthy())

    COUNTERS = ("num_env_runner_restarts", "num_env_runner_failures")

    def counters(self) -> dict[str, int]:
        """The cumulative restart and failure counters."""
        return {k: int(getattr(self, k)) for k in self.COUNTERS}

    def add_counters(self, counters: dict[str, Any]) -> None:
        """Add checkpointed counters (those of `COUNTERS` that `counters` has)."""
        for key in self.COUNTERS:
            if key in counters:
                setattr(self, key, getattr(self, key) + int(counters[key]))

    # ------------------------------------------------------------------ start

    # Runners are created by `ActorGroup.create`, with strict handles: a restarted runner
    # answers StaleIncarnationError until it was resynced, so it never samples stale weights.

    def start(self, previous: list[dict[str, Any]] | None = None, *, validate: bool = True) -> None:
        """Create every runner (re-attaching to the ones still up); with `validate`, probe
        them all and raise if any is not healthy. Without it, failed ones start
        recovering. `previous`: the incarnations a previous driver knew
        (`known_incarnations`); a runner that restarted since counts as restarted and
        failed (`reconcile`)."""
        errors: list[str] = []
        creating = self.create_all(self.slots)
        for slot in self.slots:  # created in parallel: each may take a process start
            try:
                creating[slot.name].result()
            except FtrlError as e:
                errors.append(f"{slot.name}: {describe_error(e)}")
                slot.last_error = describe_error(e)
                slot.state = "recovering" if not validate else "new"
        if previous:
            self.reconcile(previous)
        created = {s.name: s.handle for s in self.slots if s.handle is not None}
        pinged, ping_errors = self.call_all(created, "ping", timeout=self.policy.probe_timeout_s)
        retry: list[RunnerSlot] = []
        for slot in self.slots:
            if slot.name in pinged:
                slot.state = "healthy"
                continue
            e = ping_errors.get(slot.name)
            if e is None:
                continue
            slot.last_error = describe_error(e)
            slot.state = "recovering"
            if isinstance(e, (ActorUnavailableError, StaleIncarnationError, FtrlTimeoutError)) and self.policy.restart:
                # died right after starting: with restarts on, give it one chance to come back
                retry.append(slot)
            else:
                errors.append(f"{slot.name}: {describe_error(e)}")
        for slot in retry:
            try:
                back = self._recover(slot, soft=False)
            except FtrlError as e:
                errors.append(f"{slot.name}: {describe_error(e)}")
                slot.last_error = describe_error(e)
                continue
            if back.incarnation != slot.incarnation:
                restarted = max(1, back.restarts - slot.runtime_restarts)
                self.num_env_runner_restarts += restarted
                slot.runtime_restarts += restarted
            self._adopt(slot, back)
        if errors and validate:
            raise EnvRunnerFailureError(
                f"{len(errors)} of {len(self.slots)} {self.kind}s are not healthy after "
                "construction (set validate_env_runners_after_construction=False to go on "
                "without them):\n  " + "\n  ".join(errors)
            )
        for slot in self.slots:
            if slot.state == "recovering":
                self.start_recovery(slot, None)

    def known_incarnations(self) -> list[dict[str, Any]]:
        """The incarnation of each runner as the set last adopted it, with the runtime's
        restart count of the actor then (a driver state holds them: `reconcile`)."""
        return [{"name": s.name, "incarnation": int(s.incarnation), "restarts": int(s.runtime_restarts)}
                for s in self.slots if s.handle is not None and s.incarnation > 0]

    def reconcile(self, previous: list[dict[str, Any]]) -> int:
        """Count the runners that restarted while no driver watched: each runner whose
        incarnation is not the one `previous` (`known_incarnations` of the driver state
        resumed from) names counts its restarts since then (the runtime's count, at least
        one) as restarts and failures. Returns how many were counted."""
        known = {str(p.get("name")): p for p in previous if isinstance(p, dict)}
        counted = 0
        for slot in self.slots:
            before = known.get(slot.name)
            if before is None or slot.handle is None or slot.incarnation == int(before.get("incarnation", 0)):
                continue
            restarts = max(1, slot.runtime_restarts - int(before.get("restarts", 0)))
            self.num_env_runner_restarts += restarts
            self.num_env_runner_failures += restarts
            slot.restarts += restarts
            counted += restarts
            log.info("%s restarted while the driver was away (incarnation %s -> %d): counted %d",
                     slot.name, before.get("incarnation"), slot.incarnation, restarts)
        return counted

    # ------------------------------------------------------------------ failures

    def on_failure(self, slot: RunnerSlot, error: BaseException, what: str) -> None:
        """Apply the policy to a failed call `what` on `slot` (may raise
        EnvRunnerFailureError)."""
        text = self.note_failure(slot, error, what)
        self.num_env_runner_failures += 1
        if not isinstance(error, ActorError):  # a broken or stale connection: never reused
            channels.close_channel(slot, forget=True)
        log.warning("%s %s failed (%s)", slot.name, what, text)
        policy = self.policy
        if not (policy.restart or policy.ignore):
            raise EnvRunnerFailureError(
                f"{slot.name} failed in {what}: {text}\n(set restart_failed_env_runners=True or "
                "ignore_env_runner_failures=True to survive runner failures)"
            ) from error
        if isinstance(error, ActorDiedError) or policy.ignore:
            self._remove(slot, text)
            return
        if slot.consecutive_failures > policy.tolerance:
            raise EnvRunnerFailureError(
                f"{slot.name} failed {slot.consecutive_failures} times in a row "
                f"(num_consecutive_env_runner_failures_tolerance={policy.tolerance}); last error: {text}"
            ) from error
        slot.state = "recovering"
        self.start_recovery(slot, error)

    def _remove(self, slot: RunnerSlot, reason: str) -> None:
        slot.state = "removed"
        if self.policy.restart:
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

    def kill_retired(self, slot: RunnerSlot) -> None:
        """Kill a runner scaled away (or stopped while it was being created)."""
        channels.close_channel(slot)
        try:
            self.kill(slot.name, reason="scaled down")
        except FtrlError as e:  # e.g. not created yet: its recovery kills it once it is
            log.debug("kill_actor(%s): %s", slot.name, e)
        except Exception as e:  # a client being torn down
            log.debug("kill_actor(%s) failed: %s", slot.name, e)

    # ------------------------------------------------------------------ recovery

    def start_recovery(self, slot: RunnerSlot, error: BaseException | None) -> None:
        """Bring `slot` back in the background (soft, envs rebuilt in place, when `error`
        is the runner's own); `poll_recoveries` adopts it. Nothing if one is under way."""
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
                self.kill_retired(slot)
                raise ActorDiedError(f"{slot.name} was scaled down")
        handle = slot.handle
        probe_timeout = self.policy.probe_timeout_s
        if soft:
            handle.options(timeout=probe_timeout).call("reset_envs")
        deadline = time.monotonic() + self.policy.restore_timeout_s
        while True:
            incarnation = handle.wait_alive(timeout=max(0.01, deadline - time.monotonic()))
            # options() copies the incarnation it knows: make the copy after wait_alive.
            probe = handle.options(timeout=probe_timeout)
            try:
                probe.call("ping")
                break
            except (ActorUnavailableError, StaleIncarnationError):
                # the cluster may still name the process that just died: ask again shortly
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)
        version, weights, filter_state = self._latest_weights()
        if weights is not None:
            probe.call("set_weights", version, weights, filter_state)
        if slot.state == "retired":  # scaled down while it was coming back
            self.kill_retired(slot)
            raise ActorDiedError(f"{slot.name} was scaled down")
        channel = None if soft else channels.open_channel(self.channel_token, slot.name, probe, probe_timeout)
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
                self.on_failure(slot, e, "recovery")
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
        policy = self.policy
        waits = 0
        while True:
            self.poll_recoveries()
            if self.healthy():
                return
            alive = [s for s in self.slots if s.state != "removed"]
            if not alive:
                raise EnvRunnerFailureError(f"every {self.kind} failed; nothing left to sample with")
            waits += 1
            if waits > policy.tolerance:
                errors = "; ".join(f"{s.name}: {s.last_error}" for s in self.slots)
                raise EnvRunnerFailureError(
                    f"no healthy {self.kind} after {waits - 1} waits of up to "
                    f"{policy.probe_timeout_s}s (num_consecutive_env_runner_failures_tolerance="
                    f"{policy.tolerance}); last errors: {errors}"
                )
            for s in alive:
                if s.state == "recovering" and s.recovery is None:
                    self.start_recovery(s, None)
            pending = [s.recovery for s in alive if s.recovery is not None]
            if pending:
                cf.wait(pending, timeout=policy.probe_timeout_s, return_when=cf.FIRST_COMPLETED)
            else:
                time.sleep(min(1.0, policy.probe_timeout_s))

    # ------------------------------------------------------------------ size

    def add(self, count: int) -> list[RunnerSlot]:
        """`count` new runners after the last one: created, then synced with the latest
        weights, in the background (they join as recovering ones do)."""
        size = len(self.slots)
        added = [RunnerSlot(index=i + 1, name=self.actor_name(i), state="recovering")
                 for i in range(size, size + count)]
        self.slots = self.slots + added
        self.ensure_pool(len(self.slots))
        for slot in added:
            self.start_recovery(slot, None)
        return added

    def retire(self, size: int) -> list[RunnerSlot]:
        """Keep the first `size` runners; the others leave the set, marked retired (a
        recovery not started yet is cancelled; one under way kills its runner once it is
        back). Returns them: their requests are the caller's to finish."""
        gone = self.slots[size:]
        self.slots = self.slots[:size]
        for slot in gone:
            slot.state = "retired"
            if slot.recovery is not None and slot.recovery.cancel():
                slot.recovery = None
        return gone

    # ------------------------------------------------------------------ calls on idle runners

    def probe(self) -> dict[str, Any]:
        """Ping every healthy idle runner (probe timeout); failures go through the policy."""
        idle = self.idle_healthy()
        out, errors = self.call_all({s.name: s.handle for s in idle}, "ping", timeout=self.policy.probe_timeout_s)
        for slot in idle:
            if slot.name in errors:
                self.on_failure(slot, errors[slot.name], "ping")
        return out

    def foreach_runner(self, method: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> dict[str, Any]:
        """Call `method` on every healthy idle runner; {name: result or the error}."""
        timeout = self.policy.probe_timeout_s if timeout is None else timeout
        handles = {s.name: s.handle for s in self.idle_healthy()}
        results, errors = self.call_all(handles, method, *args, timeout=timeout, **kwargs)
        return {name: results[name] if name in results else errors[name] for name in handles}

    def newest_synced_filter(self) -> tuple[int, dict[str, Any]] | None:
        """(weights version, observation filter state) of the healthy runner synced last
        (what the driver pushed with those weights), or None when no runner can tell."""
        handles = {s.name: s.handle for s in self.idle_healthy()}
        results, _ = self.call_all(handles, "synced_filter", timeout=self.policy.probe_timeout_s)
        best: tuple[int, dict[str, Any]] | None = None
        for result in results.values():
            if isinstance(result, dict) and isinstance(result.get("filter"), dict):
                version = int(result.get("weights_version", -1))
                if best is None or version > best[0]:
                    best = (version, result["filter"])
        return best

    # ------------------------------------------------------------------ teardown

    def stop(self, kill: bool = True, reason: str = "") -> None:
        """Close the sample channels and stop background work; with `kill`, also kill the
        runners (one still being created is killed by its recovery once it is)."""
        for slot in self.slots:
            channels.close_channel(slot)
        if kill:
            for slot in self.slots:
                if slot.handle is None:
                    slot.state = "retired"
        super().stop(kill, reason)
