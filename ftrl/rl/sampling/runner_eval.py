"""Evaluation over the runner group: one `evaluate()` call split over the healthy runners."""

from __future__ import annotations

import concurrent.futures as cf
import math
from typing import Any

from ftrl.rl.sampling.runner_core import RunnerGroupCore, RunnerSlot
from ftrl.wire.errors import FtrlError


class Evaluation(RunnerGroupCore):
    """`evaluate()`: the group's runners evaluating the current policy in parallel."""

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
        """Take `slot`'s finished evaluation: into `out`, dropped (counted) if it was late."""
        late = slot.inflight_late
        result = self._finished(slot, "evaluate")
        if result is None:
            return
        if late:
            self.num_samples_dropped += 1
            return
        out.append(result)
