"""Scaling the runner group at runtime: `scale(n)` asks, `apply_scale()` grows or shrinks.

New runners `JOB/env_runner/I` join like recovering ones, created in the background and
given the latest weights and filter state before their first sample (`RunnerSet.add`).
Shrinking retires the highest indices (`RunnerSet.retire`); those runners are *leaving*
(`Leaving`): a sample still in flight is collected by the next rounds or harvests (used
if fresh, else dropped and counted in `env_steps_dropped`; lost if it is not back within
the sample timeout), then the runner is killed ("scaled down"); a name is reused by a
later scale-up only once its runner is gone. A group never goes to 0 runners (the
driver would have to sample itself).
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from ftrl.rl.actor_group import describe_error
from ftrl.rl.sampling.runner_slot import RunnerSlot
from ftrl.rl.sampling.sample_ledger import SampleLedger
from ftrl.wire.errors import ConfigError, FtrlError

log = logging.getLogger(__name__)


class ScaledRunners(Protocol):
    """What scaling needs of the runner set (`RunnerSet`)."""

    group: str
    slots: list[RunnerSlot]

    def actor_name(self, i: int) -> str: ...

    def add(self, count: int) -> list[RunnerSlot]: ...

    def retire(self, size: int) -> list[RunnerSlot]: ...

    def kill_retired(self, slot: RunnerSlot) -> None: ...


class Leaving:
    """Runners scaled away that are not gone yet: each with the deadline of its last sample.

    Args:
        runners: the set they left (`kill_retired` kills them once they are done).
        ledger: where their last samples are counted.
    """

    def __init__(self, runners: ScaledRunners, ledger: SampleLedger):
        self._runners = runners
        self._ledger = ledger
        self._slots: list[tuple[RunnerSlot, float]] = []

    def add(self, slots: list[RunnerSlot], deadline: float) -> None:
        """`slots` (retired) leave once their sample (if any) is back or `deadline` passed;
        a request other than a sample is not waited for."""
        for slot in slots:
            if slot.inflight is not None and slot.inflight_kind != "sample":
                slot.inflight.cancel()
                slot.inflight = None
            self._slots.append((slot, deadline))

    def names(self) -> set[str]:
        return {slot.name for slot, _ in self._slots}

    def __len__(self) -> int:
        return len(self._slots)

    def futures(self) -> list[cf.Future]:
        """Their samples still out."""
        return [s.inflight for s, _ in self._slots if s.inflight is not None]

    def collect(self, out: list[dict[str, Any]], current_version: int, finish_only: bool = False) -> int:
        """Kill the leaving runners that are done: their last sample came back (added to
        `out`: used if fresh, else dropped and counted), or is past its deadline (lost),
        and their start, if one was under way, is over. `finish_only`: only those with no
        sample to collect. Returns the env steps used."""
        used = 0
        now = time.monotonic()
        keep: list[tuple[RunnerSlot, float]] = []
        for slot, deadline in self._slots:
            fut = slot.inflight
            starting = slot.recovery is not None and not slot.recovery.done()
            sampling = fut is not None and not fut.done() and now < deadline
            if starting or sampling or (finish_only and fut is not None):
                keep.append((slot, deadline))
                continue
            slot.inflight = None
            if fut is not None and fut.done():
                try:
                    used += self._ledger.take(fut.result(), out, current_version, late=True, slot=slot)
                except FtrlError as e:
                    self._ledger.lost()
                    log.info("%s (scaled down): its last sample failed: %s", slot.name, describe_error(e))
            elif fut is not None:
                fut.cancel()
                self._ledger.lost()
            self._runners.kill_retired(slot)
        self._slots = keep
        return used

    def kill_all(self) -> None:
        """Kill them all now (the group stops)."""
        for slot, _ in self._slots:
            self._runners.kill_retired(slot)
        self._slots = []


class Scaling:
    """`scale()` (thread-safe) and `apply_scale()` (driver thread, iteration boundary).

    Args:
        runners: the set to grow or shrink.
        leaving: where runners scaled away finish.
        sample_timeout_s: how long a leaving runner's sample is waited for.
        latest_version: the weights version a leaving runner's sample is judged at.
    """

    def __init__(self, runners: ScaledRunners, leaving: Leaving, *, sample_timeout_s: float,
                 latest_version: Callable[[], int]):
        self._runners = runners
        self._leaving = leaving
        self._sample_timeout_s = sample_timeout_s
        self._latest_version = latest_version
        self._lock = threading.Lock()
        self._target = len(runners.slots)

    @property
    def target(self) -> int:
        """The size asked for last (`scale`); the group has it once `apply_scale` ran."""
        with self._lock:
            return self._target

    def scale(self, num_runners: int) -> None:
        """Ask for `num_runners` runners (thread-safe); `apply_scale` grows or shrinks the
        group at the next iteration boundary."""
        n = int(num_runners)
        if n < 1:
            raise ConfigError(
                f"cannot scale {self._runners.group} to {n} runners: a run with remote env runners keeps "
                "at least one (num_env_runners=0, sampling in the driver, is chosen at start)")
        with self._lock:
            self._target = n

    def apply_scale(self) -> dict[str, Any] | None:
        """Grow or shrink toward `target` (driver thread, between iterations); returns what
        it did ({"added", "retired", "from", "to"}), or None when there was nothing to do.
        A name still leaving (its last sample or start not over) is added back only at a
        later boundary, once it is gone."""
        runners = self._runners
        target = self.target
        size = len(runners.slots)
        added: list[RunnerSlot] = []
        gone: list[RunnerSlot] = []
        if target > size:
            leaving = self._leaving.names()
            count = 0
            for i in range(size, target):
                if runners.actor_name(i) in leaving:
                    log.info("%s: %s is still leaving; added at a later iteration", runners.group, runners.actor_name(i))
                    break
                count += 1
            added = runners.add(count)
        elif target < size:
            gone = runners.retire(target)
            self._leaving.add(gone, time.monotonic() + self._sample_timeout_s)
            self._leaving.collect([], self._latest_version(), finish_only=True)
        if not added and not gone:
            return None
        change = {"from": size, "to": len(runners.slots), "added": [s.name for s in added],
                  "retired": [s.name for s in gone]}
        log.info("%s scaled from %d to %d runners (added %s, retired %s)", runners.group, size, len(runners.slots),
                 change["added"], change["retired"])
        return change
