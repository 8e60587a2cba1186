"""EnvRunnerGroup: the fault-tolerance policy over remote env runner handles.

An `ActorGroup` (`rl.actor_group`: names, creation, strict handles, parallel calls,
teardown) with RLlib's policy on top. The group never talks to the runtime except
through handles (`call`, `submit`, `options(timeout=)`, `wait_alive`) and the client's
`create_actor` / `kill_actor`.

Policy (RLlib's option names and meaning):
- `restart_failed_env_runners=True` (default): runners are created with
  `max_restarts=max_num_env_runner_restarts`; the runtime restarts a dead process in
  place. A failed runner is *recovering*: a background task waits for it
  (`wait_alive`, which adopts the new incarnation), pushes the latest weights and filter
  state, and only then marks it healthy, so it never samples with stale weights. A
  runner whose user code raised (process alive) is soft-restarted with `reset_envs`.
  A runner that becomes DEAD (out of restarts) is an error.
- `ignore_env_runner_failures=True`: a failed runner is dropped (killed) and training
  goes on with the rest.
- neither: the first runner failure raises.
- `num_consecutive_env_runner_failures_tolerance`: a runner failing that many times in
  a row (no successful sample in between), or that many waits with no healthy runner
  at all, raises `EnvRunnerFailureError`.

Sampling is in synchronous rounds: every healthy, synced, idle runner gets one
`sample()` and the round waits for all of them (their steps may add up to more than
asked: the target is a minimum, as in RLlib, so a calm run drops nothing); it ends
early only at `sample_timeout_s`. Requests not back by then stay in flight and are
counted as late; a fragment sampled with weights
more than `max_weights_lag` versions behind the current ones (0: any older version)
is dropped and counted (never used silently, never lost silently). Every fragment
carries the weights version it was sampled with.

Scaling (`scale(n)`, thread-safe; applied by `apply_scale()` on the driver thread at an
iteration boundary): new runners `JOB/env_runner/I` join like recovering ones, created
in the background and given the latest weights and filter state before their first
sample. Shrinking retires the highest indices: a sample still in flight is collected
by the next rounds (used if fresh, else dropped and counted in `env_steps_dropped`;
lost if it is not back within the sample timeout), then the runner is killed ("scaled
down"); a name is reused by a later scale-up only once its runner is gone. A group
never goes to 0 runners (the driver would have to sample itself).

Samples travel on each runner's sample channel (`rl.sample_plane`: one persistent TCP
connection per runner incarnation, authenticated with the cluster token; two thread
wake-ups per call instead of the RPC path's ~10), opened on the first sample of an
incarnation (its address is asked with `sample_address` over RPC, so a restarted
runner always gets a new channel). Its errors are the RPC path's: a broken connection
is ActorUnavailableError (the runner is recovered as after a crash), no reply within
2 x `sample_timeout_s` is FtrlTimeoutError, an exception in `sample()` is ActorError.
Runners without one (in-process clients, TLS clusters, other actor classes, a failed
connect) are sampled by RPC.

Weights travel down a broadcast tree: the driver sends them to at most
`weights_fanout` runners, each of which applies them and forwards the same payload
to its children (`EnvRunner.set_weights_tree`), k-ary, over the runners that need the
version. Children are called by strict handles on the incarnation the driver synced,
so a restarted runner is never fed by a relay. Every runner of the tree reports back;
the ones that did not confirm (a relay died, a child timed out) are sent to directly
by the driver, whose failures go through the usual policy. With no more runners than
the fanout, or runners that cannot relay (in-process ones), the driver sends directly.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ftrl.config import AlgorithmConfig
from ftrl.rl.actor_group import ActorGroup, ActorSlot, describe_error
from ftrl.rl.sampling.env_runner import subtree_height
from ftrl.rl.sampling.sample_plane import wait_first
from ftrl.wire.errors import (
    ActorDiedError,
    ActorError,
    ActorUnavailableError,
    ConfigError,
    FtrlError,
    FtrlTimeoutError,
    MethodNotFoundError,
    StaleIncarnationError,
)

log = logging.getLogger(__name__)

ENV_RUNNER_CLASS = "ftrl.rl.sampling.env_runner:EnvRunner"
#: Weights at least this large travel on the weights plane (plain TCP, cut-through tree).
PLANE_MIN_BYTES = 1 << 20


def build_weights_tree(targets: list[tuple[str, int]], fanout: int) -> list[list]:
    """The k-ary broadcast tree over `targets` ((name, incarnation), in order): the
    driver's children first, then level by level (heap order: target j's children are
    targets fanout*(j+1) .. fanout*(j+1)+fanout-1). Returns the driver's children as
    subtrees `[name, incarnation, [subtrees...]]` (msgpack-able)."""
    k = max(1, int(fanout))
    nodes = [[str(name), int(inc), []] for name, inc in targets]
    for j, node in enumerate(nodes):
        first = k * (j + 1)
        node[2] = nodes[first:first + k]
    return nodes[:k]


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


@dataclass
class SampleRound:
    """What one call to `sample()` brought back: `results` in runner order (by
    worker_index), whatever order they arrived in."""

    results: list[dict[str, Any]]
    env_steps: int = 0


class EnvRunnerGroup(ActorGroup):
    """Remote env runners (training or evaluation) and their failure handling."""

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
        self.weights_fanout = max(1, int(run.weights_fanout))
        self._relay = True  # runners forward weights; off once one says it cannot
        self._plane = _plane_node(client)  # None: weights go over gRPC only
        self._channel_token = _channel_token(client)  # None: samples go over gRPC only
        self._latest: tuple[int, np.ndarray | None, dict | None] = (-1, None, None)
        self.slots = [RunnerSlot(index=i + 1, name=self.actor_name(i)) for i in range(self.num_runners)]
        self._target = self.num_runners
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
        self.last_sync: dict[str, Any] = {}  # how the last sync_weights went (tests, benchmarks)

    # ------------------------------------------------------------------ creation

    # Runners are created by `ActorGroup.create`, with strict handles: a restarted runner
    # answers StaleIncarnationError until it was resynced, so it never samples stale weights.

    def actor_kwargs(self, slot: ActorSlot) -> dict[str, Any]:
        return {**super().actor_kwargs(slot), "worker_index": slot.index}

    def start(self, previous: list[dict[str, Any]] | None = None) -> None:
        """Create every runner (re-attaching to the ones still up); with
        `validate_env_runners_after_construction`, probe them all and raise if any is not
        healthy. Without it, failed ones start recovering. `previous`: the incarnations a
        previous driver knew (`known_incarnations`); a runner that restarted since counts
        as restarted and failed (`reconcile`)."""
        validate = self.config.env_runners_cfg.validate_env_runners_after_construction
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
        pinged, ping_errors = self.call_all(created, "ping", timeout=self.probe_timeout)
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
            if isinstance(e, (ActorUnavailableError, StaleIncarnationError, FtrlTimeoutError)) and self.restart:
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
            self._adopt_channel(slot, back)
            slot.incarnation, slot.synced_version, slot.state = back.incarnation, back.version, "healthy"
        if errors and validate:
            raise EnvRunnerFailureError(
                f"{len(errors)} of {self.num_runners} {self.kind}s are not healthy after "
                "construction (set validate_env_runners_after_construction=False to go on "
                "without them):\n  " + "\n  ".join(errors)
            )
        for slot in self.slots:
            if slot.state == "recovering":
                self._start_recovery(slot, None)

    # ------------------------------------------------------------------ state

    @property
    def latest_version(self) -> int:
        return self._latest[0]

    def healthy(self) -> list[RunnerSlot]:
        return [s for s in self.slots if s.state == "healthy"]

    @property
    def num_healthy(self) -> int:
        return len(self.healthy())

    def stats(self) -> dict[str, Any]:
        return {
            "num_healthy_env_runners" if not self.evaluation else "num_healthy_eval_runners": self.num_healthy,
            "num_env_runner_restarts": self.num_env_runner_restarts,
            "num_env_runner_failures": self.num_env_runner_failures,
            "num_sub_env_restarts": self.num_sub_env_restarts,
            "num_samples_late": self.num_samples_late,
            "num_samples_dropped": self.num_samples_dropped,
            "env_steps_dropped": self.env_steps_dropped,
            "num_samples_lost": self.num_samples_lost,
        }

    _COUNTERS = (
        "num_env_runner_restarts",
        "num_env_runner_failures",
        "num_sub_env_restarts",
        "num_samples_late",
        "num_samples_dropped",
        "env_steps_dropped",
        "num_samples_lost",
    )

    def get_counters(self) -> dict[str, int]:
        """The cumulative failure counters (for checkpoints)."""
        return {k: int(getattr(self, k)) for k in self._COUNTERS}

    def set_counters(self, counters: dict[str, Any]) -> None:
        """Continue from checkpointed counters (added to what happened since start)."""
        for key in self._COUNTERS:
            if key in counters:
                setattr(self, key, getattr(self, key) + int(counters[key]))

    def known_incarnations(self) -> list[dict[str, Any]]:
        """The incarnation of each runner as the group last adopted it, with the runtime's
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

    def newest_synced_filter(self) -> tuple[int, dict[str, Any]] | None:
        """(weights version, observation filter state) of the healthy runner synced last
        (what the driver pushed with those weights), or None when no runner can tell."""
        handles = {s.name: s.handle for s in self.healthy() if s.inflight is None}
        results, _ = self.call_all(handles, "synced_filter", timeout=self.probe_timeout)
        best: tuple[int, dict[str, Any]] | None = None
        for result in results.values():
            if isinstance(result, dict) and isinstance(result.get("filter"), dict):
                version = int(result.get("weights_version", -1))
                if best is None or version > best[0]:
                    best = (version, result["filter"])
        return best

    # ------------------------------------------------------------------ failures

    def _on_failure(self, slot: RunnerSlot, error: BaseException, what: str) -> None:
        """Apply the policy to a failed call on `slot`."""
        text = self.note_failure(slot, error, what)
        self.num_env_runner_failures += 1
        if not isinstance(error, ActorError):  # a broken or stale connection: never reused
            self._close_channel(slot, forget=True)
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
        channel = self._open_channel(slot.name, probe) if not soft else None
        return Recovered(incarnation, getattr(handle, "restarts", 0), version, soft, channel)

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
            self._adopt_channel(slot, back)
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
            slot.incarnation, slot.synced_version, slot.state = back.incarnation, back.version, "healthy"
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

    # ------------------------------------------------------------------ weights

    def sync_weights(self, version: int, weights: np.ndarray, filter_state: dict | None = None) -> None:
        """Push weights (and filter state) to every healthy, idle runner not yet at
        `version`. Runners busy with a late sample get them before their next one.
        More runners than `weights_fanout`: down a broadcast tree (module docstring)."""
        self._latest = (version, weights, filter_state)
        targets = [s for s in self.healthy() if s.inflight is None and s.synced_version != version]
        self.last_sync = {"version": version, "targets": len(targets), "tree": False,
                          "via_tree": 0, "direct_retries": 0, "plane": False}
        if targets and self._plane is not None and weights.nbytes >= PLANE_MIN_BYTES:
            targets = self._sync_plane(targets, version, weights, filter_state)
            self.last_sync["direct_retries"] = len(targets)
        elif len(targets) > self.weights_fanout and self._relay:
            targets = self._sync_tree(targets, version, weights, filter_state)
            self.last_sync["direct_retries"] = len(targets)
        self._sync_direct(targets, version, weights, filter_state)

    def _sync_plane(self, targets: list[RunnerSlot], version: int, weights: np.ndarray,
                    filter_state: dict | None) -> list[RunnerSlot]:
        """Large weights: published on this process's weights plane server; every runner
        pulls from its parent in the broadcast tree (the first `weights_fanout` from
        here), all at once, cut-through. Returns the runners to send to directly."""
        assert self._plane is not None
        key = self._plane.new_key()  # never reused: versions repeat after a restore
        self._plane.store.publish(key, weights)
        asks = {s.name: s.handle.options(timeout=self.probe_timeout).submit("weights_address")
                for s in targets if s.plane_incarnation != s.incarnation}
        usable: list[RunnerSlot] = []
        for slot in targets:
            fut = asks.get(slot.name)
            if fut is not None:
                try:
                    slot.plane_address, slot.plane_incarnation = fut.result(), slot.incarnation
                except FtrlError as e:
                    log.info("%s has no weights plane address (%s): sent directly", slot.name, describe_error(e))
                    continue
            usable.append(slot)
        by_name = {s.name: s for s in usable}
        source: dict[str, tuple[str, int]] = {}  # name -> (address to pull from, depth)
        stack = [(sub, self._plane.address, 1) for sub in build_weights_tree(
            [(s.name, s.incarnation) for s in usable], self.weights_fanout)]
        while stack:
            (name, _, children), parent, depth = stack.pop()
            source[name] = (parent, depth)
            stack.extend((sub, by_name[name].plane_address, depth + 1) for sub in children)
        futs = {}
        for slot in usable:
            address, depth = source[slot.name]
            budget = self.probe_timeout * depth
            futs[slot.name] = slot.handle.options(timeout=budget + 5.0).submit(
                "pull_weights", version, key, address, int(weights.nbytes), filter_state, budget)
        confirmed = set()
        for name, fut in futs.items():
            try:
                fut.result()
                by_name[name].synced_version = version
                confirmed.add(name)
            except FtrlError as e:
                log.info("%s did not get weights v%d over the plane (%s): sent directly", name, version, describe_error(e))
        self.last_sync.update({"plane": True, "tree": len(usable) > self.weights_fanout,
                               "via_tree": len(confirmed)})
        return [s for s in targets if s.name not in confirmed and s.state == "healthy"]

    def _sync_direct(self, targets: list[RunnerSlot], version: int, weights: np.ndarray, filter_state: dict | None) -> None:
        _, errors = self.call_all({s.name: s.handle for s in targets}, "set_weights", version, weights,
                                  filter_state, timeout=self.probe_timeout)
        for slot in targets:
            if slot.name in errors:
                self._on_failure(slot, errors[slot.name], "set_weights")
            else:
                slot.synced_version = version

    def _sync_tree(self, targets: list[RunnerSlot], version: int, weights: np.ndarray, filter_state: dict | None) -> list[RunnerSlot]:
        """Send down the broadcast tree; returns the runners still to be sent to directly
        (the driver's own children that failed went through `_on_failure` already)."""
        by_name = {s.name: s for s in targets}
        roots = build_weights_tree([(s.name, s.incarnation) for s in targets], self.weights_fanout)
        self.last_sync["tree"] = True
        hop = self.probe_timeout
        futs: list[tuple[RunnerSlot, list, Any]] = []
        confirmed: set[str] = set()
        failed_roots: list[tuple[RunnerSlot, BaseException]] = []
        tallest = 0
        for root in roots:
            name, _, children = root
            slot = by_name[name]
            tallest = max(tallest, subtree_height(root))
            budget = hop * subtree_height(root)
            try:
                fut = slot.handle.options(timeout=budget).submit(
                    "set_weights_tree", version, weights, filter_state, children, hop)
            except FtrlError as e:
                failed_roots.append((slot, e))
                continue
            futs.append((slot, children, fut))
        cannot_relay = False
        deadline = time.monotonic() + hop * tallest + 1.0
        for slot, _, fut in futs:
            try:
                result = fut.result(timeout=max(0.0, deadline - time.monotonic()))
            except cf.TimeoutError:
                fut.cancel()
                failed_roots.append((slot, FtrlTimeoutError(f"{slot.name}.set_weights_tree: no answer")))
                continue
            except MethodNotFoundError:
                cannot_relay = True  # an actor class without the relay: send directly
                continue
            except ActorError as e:
                if e.remote_type.endswith("MethodNotFoundError") or "set_weights_tree" in e.remote_message:
                    cannot_relay = True  # an actor class without the relay: send directly
                    continue
                failed_roots.append((slot, e))
                continue
            except FtrlError as e:
                failed_roots.append((slot, e))
                continue
            confirmed.add(slot.name)
            slot.synced_version = version
            for name, entry in (result or {}).items():
                other = by_name.get(name)
                if other is None or other is slot or not isinstance(entry, dict):
                    continue
                if entry.get("weights_version") == version and "error" not in entry:
                    confirmed.add(name)
                    other.synced_version = version
                elif "not forwarded" in str(entry.get("error", "")):
                    cannot_relay = True
        if cannot_relay:
            self._relay = False
            log.info("%ss cannot relay weights; sending to each directly from now on", self.kind)
        self.last_sync["via_tree"] = len(confirmed)
        for slot, error in failed_roots:
            confirmed.add(slot.name)  # nothing to retry: its failure is handled now
            self._on_failure(slot, error, "set_weights")
        return [s for s in targets if s.name not in confirmed and s.state == "healthy"]

    # ------------------------------------------------------------------ sampling

    def _collect(self, slot: RunnerSlot, out: list[dict[str, Any]], current_version: int) -> int:
        """Take a finished in-flight request of `slot`; return env steps used."""
        fut = slot.inflight
        assert fut is not None and fut.done()
        slot.inflight = None
        try:
            result = fut.result()
        except FtrlError as e:
            self.num_samples_lost += 1
            self._on_failure(slot, e, "sample")
            return 0
        slot.consecutive_failures = 0
        if slot.inflight_kind == "sample":
            slot.fragment_steps = int(result.get("env_steps", 0)) or slot.fragment_steps
        steps = self._take(result, out, current_version, slot.inflight_late)
        if result["dropped"] and result.get("weights_version") != slot.synced_version:
            slot.synced_version = int(result.get("weights_version", -1))
        return steps

    def _take(self, result: dict[str, Any], out: list[dict[str, Any]], current_version: int, late: bool) -> int:
        """Add a sample result to `out`, marked used or dropped (stale weights, counted);
        return the env steps used."""
        self.num_sub_env_restarts += int(result.get("sub_env_restarts", 0))
        steps = int(result.get("env_steps", 0))
        fresh = weights_fresh(int(result.get("weights_version", -1)), current_version, self.max_weights_lag)
        if not fresh:
            self.num_samples_dropped += 1
            self.env_steps_dropped += steps
        result["dropped"] = not fresh
        result["late"] = late
        out.append(result)
        return steps if fresh else 0

    def sample(self, min_env_steps: int, current_version: int | None = None, method: str = "sample",
               top_up: bool = False, **kwargs: Any) -> SampleRound:
        """One synchronous round: request from every healthy, synced, idle runner and wait
        for every request of the round (as RLlib does: the round's steps may exceed
        `min_env_steps`, which is a minimum, so a calm run drops nothing). A request that
        fails (its runner died mid-round) or comes back unusable leaves its share to the
        runners already back, asked at once for just the missing steps (`top_up`: the
        whole round asks only for those, a round after a short one). Returns when
        all came back or failed, or when the sample timeout passed; requests not back by
        then are late, stay in flight and are collected (used if still fresh, else
        dropped and counted) in later rounds. Results are listed in runner order."""
        current = self.latest_version if current_version is None else current_version
        deadline = time.monotonic() + self.sample_timeout
        results: list[dict[str, Any]] = []
        used = 0
        self.poll_recoveries()
        # results that came back late since the last round (scaled-away runners' too)
        used += self._collect_retiring(results, current)
        for slot in self.slots:
            if slot.inflight is not None and slot.inflight.done():
                used += self._collect(slot, results, current)
        for slot in self.healthy():
            if slot.inflight is None and slot.synced_version != current and self._latest[1] is not None:
                self.sync_weights(*self._latest)
                break
        self._request(method, kwargs, current, min_env_steps - used if top_up else None)
        while True:
            # every request of this round; with too few steps so far, late ones too (a
            # late fragment that comes back before the weights change is still usable)
            waiting = [s for s in self.slots if s.inflight is not None and not s.inflight_late]
            if used < min_env_steps:
                waiting = [s for s in self.slots if s.inflight is not None]
            remaining = deadline - time.monotonic()
            if not waiting or remaining <= 0:
                break
            done = wait_first([s.inflight for s in waiting], remaining)  # receives channel replies here
            for slot in waiting:
                if slot.inflight in done:
                    used += self._collect(slot, results, current)
            missing = min_env_steps - used - self._expected_in_flight()
            if missing > 0:  # a share was lost: the runners already back sample it now
                self._request(method, kwargs, current, missing)
        for slot in self.slots:
            if slot.inflight is not None and not slot.inflight_late:
                if slot.inflight.done():
                    used += self._collect(slot, results, current)
                else:
                    slot.inflight_late = True
                    self.num_samples_late += 1
        used += self._collect_retiring(results, current)
        # in runner order, not arrival order: the same seed gives the same batch (a
        # learner's sums depend on the order), however the runners' timing fell
        results.sort(key=lambda r: int(r.get("worker_index", 0)))
        return SampleRound(results=results, env_steps=used)

    def _request(self, method: str, kwargs: dict[str, Any], current: int, steps: int | None) -> None:
        """Start `method` on healthy, idle runners synced to `current`, in runner order:
        every one of them (`steps` None), or only as many as `steps` env steps need."""
        for slot in self.healthy():
            if steps is not None and steps <= 0:
                return
            if slot.inflight is not None or not weights_fresh(slot.synced_version, current, self.max_weights_lag):
                continue
            try:
                slot.inflight = self._submit_sample(slot, method, kwargs)
            except FtrlError as e:
                self._on_failure(slot, e, method)
                continue
            slot.inflight_version = current
            slot.inflight_late = False
            slot.inflight_kind = method
            if steps is not None:
                steps -= self._fragment_steps(slot)

    def _fragment_steps(self, slot: RunnerSlot) -> int:
        """The env steps one sample() of `slot` brings: as its last one did, else as configured."""
        if slot.fragment_steps > 0:
            return slot.fragment_steps
        run = self.config.env_runners_cfg
        return self.config.get_rollout_fragment_length() * run.num_envs_per_env_runner

    def _expected_in_flight(self) -> int:
        """Env steps the requests still out should bring (late ones included)."""
        return sum(self._fragment_steps(s) for s in self.slots if s.inflight is not None and s.inflight_kind == "sample")

    def _submit_sample(self, slot: RunnerSlot, method: str, kwargs: dict[str, Any]) -> cf.Future:
        """Start `method` on `slot`: on its sample channel when it has one for its current
        incarnation (`ftrl.rl.sampling.sample_plane`), else by RPC."""
        channel = self._channel(slot) if method == "sample" else None
        if channel is not None:
            try:
                # a late fragment may still come back in the next round, as by RPC
                return channel.submit(kwargs, slot.synced_version, 2 * self.sample_timeout)
            except (FtrlError, RuntimeError) as e:
                log.info("%s: sample channel unusable (%s); sampling by RPC", slot.name, e)
                self._close_channel(slot)
        return slot.handle.submit(method, **kwargs)

    def _channel(self, slot: RunnerSlot) -> Any:
        """The open sample channel to `slot`'s current incarnation, opened on first use;
        None when it has none (asked once per incarnation; a closed one is reopened)."""
        if self._channel_token is None:
            return None
        if slot.channel is not None and slot.channel_incarnation == slot.incarnation and not slot.channel.closed:
            return slot.channel
        if slot.channel is None and slot.channel_incarnation == slot.incarnation:
            return None  # this incarnation has no channel: RPC only
        self._close_channel(slot)
        slot.channel_incarnation = slot.incarnation
        slot.channel = self._open_channel(slot.name, slot.handle.options(timeout=self.probe_timeout))
        return slot.channel

    def _open_channel(self, name: str, handle: Any) -> Any:
        """A new sample channel to the incarnation `handle` is pinned to (None: it has
        none, or it cannot be reached: sampled by RPC). Any thread."""
        if self._channel_token is None:
            return None
        try:
            info = handle.call("sample_address")
            address = str(info.get("address", "")) if isinstance(info, dict) else ""
            if not address:
                return None
            from ftrl.rl.sampling.sample_plane import SampleChannel

            return SampleChannel(address, self._channel_token, int(info.get("incarnation", 0)),
                                 connect_timeout_s=min(5.0, self.probe_timeout))
        except (FtrlError, OSError) as e:
            log.info("%s has no sample channel (%s): sampling by RPC", name, describe_error(e))
            return None

    def _adopt_channel(self, slot: RunnerSlot, back: Recovered) -> None:
        """Take the sample channel a recovery opened for the incarnation it brought back."""
        if back.channel is not None:
            self._close_channel(slot)
            slot.channel, slot.channel_incarnation = back.channel, back.incarnation

    @staticmethod
    def _close_channel(slot: RunnerSlot, forget: bool = False) -> None:
        """Close `slot`'s sample channel; `forget`: ask for its address again next time."""
        if slot.channel is not None:
            slot.channel.close()
            slot.channel = None
        if forget:
            slot.channel_incarnation = -1

    def in_flight(self) -> int:
        return sum(1 for s in self.slots if s.inflight is not None) + len(self._retiring)

    def evaluate(self, duration: int, unit: str) -> list[dict[str, Any]]:
        """Split `duration` episodes/timesteps over the healthy runners; wait up to the
        evaluation timeout. Late evaluations are counted and dropped later."""
        self.poll_recoveries()
        for slot in self.slots:
            if slot.inflight is not None and slot.inflight.done():
                self._collect_eval(slot, [])
        ready = [s for s in self.healthy() if s.inflight is None]
        if not ready:
            return []
        per = max(1, math.ceil(duration / len(ready)))
        kwargs = {"num_episodes": per} if unit == "episodes" else {"num_timesteps": per}
        for slot in ready:
            try:
                slot.inflight = slot.handle.submit("evaluate", **kwargs)
                slot.inflight_late = False
            except FtrlError as e:
                self._on_failure(slot, e, "evaluate")
        waiting = [s for s in ready if s.inflight is not None]
        cf.wait([s.inflight for s in waiting], timeout=self.sample_timeout)
        results: list[dict[str, Any]] = []
        for slot in waiting:
            if slot.inflight.done():
                self._collect_eval(slot, results)
            else:
                slot.inflight_late = True
                self.num_samples_late += 1
        return results

    def _collect_eval(self, slot: RunnerSlot, out: list[dict[str, Any]]) -> None:
        fut = slot.inflight
        slot.inflight = None
        try:
            result = fut.result()
        except FtrlError as e:
            self.num_samples_lost += 1
            self._on_failure(slot, e, "evaluate")
            return
        slot.consecutive_failures = 0
        if slot.inflight_late:
            self.num_samples_dropped += 1
            return
        out.append(result)

    # ------------------------------------------------------------------ scaling

    @property
    def target(self) -> int:
        """The size asked for last (`scale`); the group has it once `apply_scale` ran."""
        with self._scale_lock:
            return self._target

    def scale(self, num_runners: int) -> None:
        """Ask for `num_runners` runners (thread-safe); `apply_scale` grows or shrinks the
        group at the next iteration boundary."""
        n = int(num_runners)
        if n < 1:
            raise ConfigError(
                f"cannot scale {self.group} to {n} runners: a run with remote env runners keeps "
                "at least one (num_env_runners=0, sampling in the driver, is chosen at start)")
        with self._scale_lock:
            self._target = n

    def apply_scale(self) -> dict[str, Any] | None:
        """Grow or shrink toward `target` (driver thread, between iterations); returns what
        it did ({"added", "retired", "from", "to"}), or None when there was nothing to do.
        A name still leaving (its last sample or start not over) is added back only at a
        later boundary, once it is gone."""
        target = self.target
        size = len(self.slots)
        added: list[RunnerSlot] = []
        gone: list[RunnerSlot] = []
        if target > size:
            leaving = {slot.name for slot, _ in self._retiring}
            for i in range(size, target):
                if self.actor_name(i) in leaving:
                    log.info("%s: %s is still leaving; added at a later iteration", self.group, self.actor_name(i))
                    break
                added.append(RunnerSlot(index=i + 1, name=self.actor_name(i), state="recovering"))
            self.slots = self.slots + added
            self.ensure_pool(len(self.slots))
            for slot in added:  # created, then synced with the latest weights, in the background
                self._start_recovery(slot, None)
        elif target < size:
            gone = self.slots[target:]
            self.slots = self.slots[:target]
            deadline = time.monotonic() + self.sample_timeout
            for slot in gone:
                slot.state = "retired"
                if slot.recovery is not None and slot.recovery.cancel():
                    slot.recovery = None
                if slot.inflight is not None and slot.inflight_kind != "sample":
                    slot.inflight.cancel()
                    slot.inflight = None
                self._retiring.append((slot, deadline))
            self._collect_retiring([], self.latest_version, finish_only=True)
        if not added and not gone:
            return None
        self.num_runners = len(self.slots)
        change = {"from": size, "to": len(self.slots), "added": [s.name for s in added],
                  "retired": [s.name for s in gone]}
        log.info("%s scaled from %d to %d runners (added %s, retired %s)", self.group, size, len(self.slots),
                 change["added"], change["retired"])
        return change

    def _collect_retiring(self, out: list[dict[str, Any]], current_version: int, finish_only: bool = False) -> int:
        """Kill the scaled-away runners that are done: their last sample came back (added
        to `out`: used if fresh, else dropped and counted), or is past its deadline (lost),
        and their start, if one was under way, is over. `finish_only`: only those with no
        sample to collect. Returns the env steps used."""
        used = 0
        now = time.monotonic()
        keep: list[tuple[RunnerSlot, float]] = []
        for slot, deadline in self._retiring:
            fut = slot.inflight
            starting = slot.recovery is not None and not slot.recovery.done()
            sampling = fut is not None and not fut.done() and now < deadline
            if starting or sampling or (finish_only and fut is not None):
                keep.append((slot, deadline))
                continue
            slot.inflight = None
            if fut is not None and fut.done():
                try:
                    used += self._take(fut.result(), out, current_version, late=True)
                except FtrlError as e:
                    self.num_samples_lost += 1
                    log.info("%s (scaled down): its last sample failed: %s", slot.name, describe_error(e))
            elif fut is not None:
                fut.cancel()
                self.num_samples_lost += 1
            self._kill_retired(slot)
        self._retiring = keep
        return used

    def _kill_retired(self, slot: RunnerSlot) -> None:
        self._close_channel(slot)
        try:
            self.kill(slot.name, reason="scaled down")
        except FtrlError as e:  # e.g. not created yet: its recovery kills it once it is
            log.debug("kill_actor(%s): %s", slot.name, e)
        except Exception as e:  # a client being torn down
            log.debug("kill_actor(%s) failed: %s", slot.name, e)

    # ------------------------------------------------------------------ misc

    def probe(self) -> dict[str, Any]:
        """Ping every healthy runner (probe timeout); failures start recovery."""
        idle = [s for s in self.healthy() if s.inflight is None]
        out, errors = self.call_all({s.name: s.handle for s in idle}, "ping", timeout=self.probe_timeout)
        for slot in idle:
            if slot.name in errors:
                self._on_failure(slot, errors[slot.name], "ping")
        return out

    def foreach_runner(self, method: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> dict[str, Any]:
        """Call `method` on every healthy idle runner; {name: result or the error}."""
        timeout = self.probe_timeout if timeout is None else timeout
        handles = {s.name: s.handle for s in self.healthy() if s.inflight is None}
        results, errors = self.call_all(handles, method, *args, timeout=timeout, **kwargs)
        return {name: results[name] if name in results else errors[name] for name in handles}

    def stop(self, kill: bool = True) -> None:
        """Stop background work and the weights plane; with `kill`, also kill the runner
        actors. Runners scaled away and still finishing a sample are killed either way."""
        if self._plane is not None:
            self._plane.close()
        for slot in self.slots:
            self._close_channel(slot)
        if kill:
            for slot in self.slots:
                if slot.handle is None:  # still being created: its recovery kills it once it is
                    slot.state = "retired"
        for slot, _ in self._retiring:
            self._kill_retired(slot)
        self._retiring = []
        super().stop(kill)


def _channel_token(client: Any) -> str | None:
    """The cluster token the sample channels authenticate with, or None where the driver
    samples by RPC only: in-process clients, TLS clusters (the channel is plain TCP)."""
    security = getattr(getattr(client, "_aio", None), "security", None)
    if security is None or security.tls:
        return None
    return security.token or ""


def _plane_node(client: Any) -> Any:
    """This process's node on the weights plane, when its runners can reach it: inside an
    actor (its node's address), or on a loopback cluster. TLS clusters keep weights on
    gRPC (the plane speaks plain TCP)."""
    from ftrl.client.context import get_runtime_context
    from ftrl.rl.weights.plane import WeightsNode
    from ftrl.wire.security import is_loopback

    security = getattr(getattr(client, "_aio", None), "security", None)
    address = getattr(client, "address", "")
    if security is None or security.tls:
        return None
    ctx = get_runtime_context()
    if ctx is not None:
        return WeightsNode(ctx.host, security.token)
    host = address.rpartition(":")[0].strip("[]")
    return WeightsNode("127.0.0.1", security.token) if host and is_loopback(host) else None
