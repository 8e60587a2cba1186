"""Scaling the runner group at runtime: `scale(n)` asks, `apply_scale()` grows or shrinks.

New runners `JOB/env_runner/I` join like recovering ones, created in the background and
given the latest weights and filter state before their first sample. Shrinking retires
the highest indices: a sample still in flight is collected by the next rounds or
harvests (used if fresh, else dropped and counted in `env_steps_dropped`; lost if it is
not back within the sample timeout), then the runner is killed ("scaled down"); a name is
reused by a later scale-up only once its runner is gone. A group never goes to 0
runners (the driver would have to sample itself).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ftrl.rl.actor_group import describe_error
from ftrl.rl.sampling.runner_core import RunnerGroupCore, RunnerSlot
from ftrl.wire.errors import ConfigError, FtrlError

log = logging.getLogger(__name__)


class Scaling(RunnerGroupCore):
    """`scale()` (thread-safe) and `apply_scale()` (driver thread, iteration boundary);
    the target and its lock, and the runners still leaving, are the core's state."""

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
                    used += self._take(fut.result(), out, current_version, late=True, slot=slot)
                except FtrlError as e:
                    self.num_samples_lost += 1
                    log.info("%s (scaled down): its last sample failed: %s", slot.name, describe_error(e))
            elif fut is not None:
                fut.cancel()
                self.num_samples_lost += 1
            self._kill_retired(slot)
        self._retiring = keep
        return used
