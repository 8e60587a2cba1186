"""EnvRunnerGroup: the fault-tolerance policy over remote env runner handles.

The group never talks to the runtime except through handles (`call`, `submit`,
`options(timeout=)`, `wait_alive`) and the client's `create_actor` / `kill_actor`.

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

Sampling is in rounds: every healthy, synced, idle runner gets one `sample()`; the
round ends when enough env steps arrived or `sample_timeout_s` passed. Requests not
back by then stay in flight and are counted as late; a fragment that comes back after
the weights moved on is dropped and counted (never used silently, never lost
silently). Every fragment carries the weights version it was sampled with.
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
from ftrl.wire.errors import (
    ActorDiedError,
    ActorError,
    ActorUnavailableError,
    FtrlError,
    FtrlTimeoutError,
    StaleIncarnationError,
)

log = logging.getLogger(__name__)

ENV_RUNNER_CLASS = "ftrl.rl.env_runner:EnvRunner"


class EnvRunnerFailureError(FtrlError):
    """Env runners failed beyond what the fault-tolerance config allows."""


@dataclass
class RunnerSlot:
    """What the group knows about one remote runner."""

    index: int
    name: str
    handle: Any = None
    state: str = "new"  # new | healthy | recovering | removed
    incarnation: int = 0
    synced_version: int = -1
    inflight: cf.Future | None = None
    inflight_version: int = -1
    inflight_late: bool = False
    inflight_kind: str = ""
    recovery: cf.Future | None = None
    consecutive_failures: int = 0
    restarts: int = 0
    last_error: str = ""


@dataclass
class SampleRound:
    """What one call to `sample()` brought back."""

    results: list[dict[str, Any]]
    env_steps: int = 0


class EnvRunnerGroup:
    """Remote env runners (training or evaluation) and their failure handling."""

    def __init__(
        self,
        client: Any,
        config: AlgorithmConfig,
        *,
        job_name: str,
        space_spec: dict,
        evaluation: bool = False,
    ):
        self.client = client
        self.config = config
        self.evaluation = evaluation
        run = config.env_runners_cfg
        ft = config.fault_tolerance_cfg
        self.num_runners = config.evaluation_cfg.evaluation_num_env_runners if evaluation else run.num_env_runners
        self.kind = "eval_runner" if evaluation else "env_runner"
        self.restart = ft.restart_failed_env_runners
        self.ignore = ft.ignore_env_runner_failures
        self.tolerance = ft.num_consecutive_env_runner_failures_tolerance
        self.probe_timeout = run.env_runner_health_probe_timeout_s
        self.restore_timeout = ft.env_runner_restore_timeout_s
        self.sample_timeout = config.evaluation_cfg.evaluation_sample_timeout_s if evaluation else run.sample_timeout_s
        self.max_restarts = ft.max_num_env_runner_restarts if self.restart else 0
        self._kwargs_base = {"config": config.to_dict(), "evaluation": evaluation, "space_spec": space_spec}
        self._lock = threading.Lock()
        self._latest: tuple[int, np.ndarray | None, dict | None] = (-1, None, None)
        self._pool = cf.ThreadPoolExecutor(max_workers=max(2, self.num_runners), thread_name_prefix=f"{self.kind}-recovery")
        self.slots = [
            RunnerSlot(index=i + 1, name=f"{job_name}/{self.kind}/{i}") for i in range(self.num_runners)
        ]
        # counters (cumulative)
        self.num_env_runner_restarts = 0
        self.num_env_runner_failures = 0
        self.num_sub_env_restarts = 0
        self.num_samples_late = 0
        self.num_samples_dropped = 0
        self.env_steps_dropped = 0
        self.num_samples_lost = 0
        self._no_healthy_waits = 0

    # ------------------------------------------------------------------ creation

    def _create(self, slot: RunnerSlot) -> None:
        handle = self.client.create_actor(
            ENV_RUNNER_CLASS,
            name=slot.name,
            kwargs={**self._kwargs_base, "worker_index": slot.index},
            max_restarts=self.max_restarts,
            resources={"cpu": float(self.config.env_runners_cfg.num_cpus_per_env_runner)},
            get_if_exists=True,
        )
        # A strict handle never follows a restart by itself: a restarted runner answers
        # StaleIncarnationError until it was resynced, so it never samples stale weights.
        slot.handle = handle.options(strict=True)
        slot.incarnation = getattr(slot.handle, "incarnation", 0)

    def start(self) -> None:
        """Create every runner; with `validate_env_runners_after_construction`, probe them
        all and raise if any is not healthy. Without it, failed ones start recovering."""
        validate = self.config.env_runners_cfg.validate_env_runners_after_construction
        errors: list[str] = []
        creating = {slot.index: self._pool.submit(self._create, slot) for slot in self.slots}
        for slot in self.slots:  # created in parallel: each may take a process start
            try:
                creating[slot.index].result()
            except FtrlError as e:
                errors.append(f"{slot.name}: {_describe(e)}")
                slot.last_error = _describe(e)
                slot.state = "recovering" if not validate else "new"
        pings = {
            slot.index: slot.handle.options(timeout=self.probe_timeout).submit("ping")
            for slot in self.slots
            if slot.handle is not None
        }
        retry: list[RunnerSlot] = []
        for slot in self.slots:
            fut = pings.get(slot.index)
            if fut is None:
                continue
            try:
                fut.result()
                slot.state = "healthy"
            except (ActorUnavailableError, StaleIncarnationError, FtrlTimeoutError) as e:
                # died right after starting: with restarts on, give it one chance to come back
                slot.last_error = _describe(e)
                slot.state = "recovering"
                if self.restart:
                    retry.append(slot)
                else:
                    errors.append(f"{slot.name}: {_describe(e)}")
            except FtrlError as e:
                errors.append(f"{slot.name}: {_describe(e)}")
                slot.last_error = _describe(e)
                slot.state = "recovering"
        for slot in retry:
            try:
                incarnation, version, _ = self._recover(slot, soft=False)
            except FtrlError as e:
                errors.append(f"{slot.name}: {_describe(e)}")
                slot.last_error = _describe(e)
                continue
            if incarnation != slot.incarnation:
                self.num_env_runner_restarts += 1
            slot.incarnation, slot.synced_version, slot.state = incarnation, version, "healthy"
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

    # ------------------------------------------------------------------ failures

    def _on_failure(self, slot: RunnerSlot, error: BaseException, what: str) -> None:
        """Apply the policy to a failed call on `slot`."""
        text = _describe(error)
        slot.last_error = f"{what}: {text}"
        self.num_env_runner_failures += 1
        slot.consecutive_failures += 1
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
            self.client.kill_actor(slot.name)
        except FtrlError:
            pass
        if not any(s.state != "removed" for s in self.slots):
            raise EnvRunnerFailureError(f"every {self.kind} failed; nothing left to sample with")

    def _start_recovery(self, slot: RunnerSlot, error: BaseException | None) -> None:
        if slot.recovery is not None and not slot.recovery.done():
            return
        soft = isinstance(error, ActorError)
        slot.recovery = self._pool.submit(self._recover, slot, soft)

    def _recover(self, slot: RunnerSlot, soft: bool) -> tuple[int, int, bool]:
        """Background: bring `slot` back, synced. Returns (incarnation, weights version,
        whether its envs were rebuilt in place)."""
        if slot.handle is None:
            self._create(slot)
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
        return incarnation, version, soft

    def poll_recoveries(self) -> None:
        """Adopt runners whose recovery finished; retry or give up on failed ones."""
        for slot in self.slots:
            fut = slot.recovery
            if slot.state != "recovering" or fut is None or not fut.done():
                continue
            slot.recovery = None
            try:
                incarnation, version, soft = fut.result()
            except FtrlError as e:
                self._on_failure(slot, e, "recovery")
                continue
            if incarnation != slot.incarnation:
                self.num_env_runner_restarts += max(1, incarnation - slot.incarnation)
                slot.restarts += 1
            elif soft:
                self.num_env_runner_restarts += 1  # soft restart: envs rebuilt in place
                slot.restarts += 1
            slot.incarnation = incarnation
            slot.synced_version = version
            slot.state = "healthy"
            log.info("%s is back (incarnation %d, weights v%d)", slot.name, incarnation, version)

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
        `version`. Runners busy with a late sample get them before their next one."""
        self._latest = (version, weights, filter_state)
        targets = [s for s in self.healthy() if s.inflight is None and s.synced_version != version]
        futs = {}
        for slot in targets:
            try:
                futs[slot.index] = (slot, slot.handle.options(timeout=self.probe_timeout).submit("set_weights", version, weights, filter_state))
            except FtrlError as e:
                self._on_failure(slot, e, "set_weights")
        for slot, fut in futs.values():
            try:
                fut.result()
                slot.synced_version = version
            except FtrlError as e:
                self._on_failure(slot, e, "set_weights")

    # ------------------------------------------------------------------ sampling

    def _collect(self, slot: RunnerSlot, out: list[dict[str, Any]], current_version: int) -> int:
        """Take a finished in-flight request of `slot`; return env steps used."""
        fut = slot.inflight
        assert fut is not None and fut.done()
        slot.inflight = None
        late = slot.inflight_late
        try:
            result = fut.result()
        except FtrlError as e:
            self.num_samples_lost += 1
            self._on_failure(slot, e, "sample")
            return 0
        slot.consecutive_failures = 0
        self.num_sub_env_restarts += int(result.get("sub_env_restarts", 0))
        steps = int(result.get("env_steps", 0))
        if result.get("weights_version") != current_version:
            self.num_samples_dropped += 1
            self.env_steps_dropped += steps
            result["dropped"] = True
            result["late"] = late
            out.append(result)
            if result.get("weights_version") != slot.synced_version:
                slot.synced_version = int(result.get("weights_version", -1))
            return 0
        result["dropped"] = False
        result["late"] = late
        out.append(result)
        return steps

    def sample(self, min_env_steps: int, current_version: int | None = None, method: str = "sample", **kwargs: Any) -> SampleRound:
        """One round: request from every healthy, synced, idle runner; return when
        `min_env_steps` usable steps arrived or the sample timeout passed. Late
        requests stay in flight and are collected (and counted) in later rounds."""
        current = self.latest_version if current_version is None else current_version
        deadline = time.monotonic() + self.sample_timeout
        results: list[dict[str, Any]] = []
        used = 0
        self.poll_recoveries()
        # results that came back late since the last round
        for slot in self.slots:
            if slot.inflight is not None and slot.inflight.done():
                used += self._collect(slot, results, current)
        for slot in self.healthy():
            if slot.inflight is None and slot.synced_version != current and self._latest[1] is not None:
                self.sync_weights(*self._latest)
                break
        for slot in self.healthy():
            if slot.inflight is None and slot.synced_version == current:
                try:
                    slot.inflight = slot.handle.submit(method, **kwargs)
                except FtrlError as e:
                    self._on_failure(slot, e, method)
                    continue
                slot.inflight_version = current
                slot.inflight_late = False
                slot.inflight_kind = method
        while used < min_env_steps:
            # wait on every request in flight, late ones included: a late fragment that
            # comes back before the weights change is still usable
            waiting = [s for s in self.slots if s.inflight is not None]
            if not waiting:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            done, _ = cf.wait([s.inflight for s in waiting], timeout=remaining, return_when=cf.FIRST_COMPLETED)
            for slot in waiting:
                if slot.inflight in done:
                    used += self._collect(slot, results, current)
        for slot in self.slots:
            if slot.inflight is not None and not slot.inflight_late:
                if slot.inflight.done():
                    used += self._collect(slot, results, current)
                elif used >= min_env_steps and time.monotonic() < deadline:
                    pass  # still running; picked up next round
                else:
                    slot.inflight_late = True
                    self.num_samples_late += 1
        return SampleRound(results=results, env_steps=used)

    def in_flight(self) -> int:
        return sum(1 for s in self.slots if s.inflight is not None)

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

    # ------------------------------------------------------------------ misc

    def probe(self) -> dict[str, Any]:
        """Ping every healthy runner (probe timeout); failures start recovery."""
        futs = {}
        for slot in self.healthy():
            if slot.inflight is None:
                futs[slot.index] = (slot, slot.handle.options(timeout=self.probe_timeout).submit("ping"))
        out = {}
        for slot, fut in futs.values():
            try:
                out[slot.name] = fut.result()
            except FtrlError as e:
                self._on_failure(slot, e, "ping")
        return out

    def foreach_runner(self, method: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> dict[str, Any]:
        """Call `method` on every healthy idle runner; {name: result or the error}."""
        timeout = self.probe_timeout if timeout is None else timeout
        futs = {
            s.name: s.handle.options(timeout=timeout).submit(method, *args, **kwargs)
            for s in self.healthy()
            if s.inflight is None
        }
        out: dict[str, Any] = {}
        for name, fut in futs.items():
            try:
                out[name] = fut.result()
            except FtrlError as e:
                out[name] = e
        return out

    def stop(self, kill: bool = True) -> None:
        """Stop background work; with `kill`, also kill the runner actors."""
        self._pool.shutdown(wait=False, cancel_futures=True)
        if not kill:
            return
        for slot in self.slots:
            if slot.handle is None:
                continue
            try:
                self.client.kill_actor(slot.name)
            except FtrlError:
                pass
            except Exception as e:  # a client being torn down
                log.debug("kill_actor(%s) failed: %s", slot.name, e)


def _describe(error: BaseException) -> str:
    if isinstance(error, ActorError):
        return f"ActorError: {error.remote_type}: {error.remote_message}"
    if isinstance(error, (StaleIncarnationError, ActorUnavailableError, ActorDiedError, FtrlTimeoutError)):
        return f"{type(error).__name__}: {error}"
    return f"{type(error).__name__}: {error}"
