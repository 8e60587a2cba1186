"""Evaluation over the runner group: one `evaluate()` call split over the healthy runners.

An evaluation not back within the evaluation timeout is late (counted): it stays in
flight, and is collected and dropped (counted) at the next `evaluate()`.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
from typing import Any, Protocol

from ftrl.rl.sampling.runner_slot import RunnerSlot
from ftrl.rl.sampling.sample_ledger import SampleLedger
from ftrl.wire.errors import FtrlError


class EvaluatingRunners(Protocol):
    """What evaluation needs of the runner set (`RunnerSet`)."""

    slots: list[RunnerSlot]

    def idle_healthy(self) -> list[RunnerSlot]: ...

    def poll_recoveries(self) -> None: ...

    def on_failure(self, slot: RunnerSlot, error: BaseException, what: str) -> None: ...


class Evaluation:
    """`evaluate()`: the group's runners evaluating the current policy in parallel.

    Args:
        runners: the runner set asked.
        ledger: where late and dropped evaluations are counted.
        timeout_s: how long one evaluation waits (`evaluation_sample_timeout_s`).
    """

    def __init__(self, runners: EvaluatingRunners, ledger: SampleLedger, *, timeout_s: float):
        self._runners = runners
        self._ledger = ledger
        self.timeout_s = timeout_s

    def evaluate(self, duration: int, unit: str, record_video: bool = False) -> list[dict[str, Any]]:
        """Split `duration` episodes/timesteps over the healthy runners; wait up to the
        evaluation timeout. Late evaluations are counted and dropped later. `record_video`:
        the first of them records a video of one episode too (one runner only)."""
        runners = self._runners
        runners.poll_recoveries()
        for slot in runners.slots:
            if slot.inflight is not None and slot.inflight.done():
                self._collect(slot, [])
        ready = runners.idle_healthy()
        if not ready:
            return []
        per = max(1, math.ceil(duration / len(ready)))
        kwargs = {"num_episodes": per} if unit == "episodes" else {"num_timesteps": per}
        for n, slot in enumerate(ready):
            try:
                video = {"record_video": True} if record_video and n == 0 else {}
                slot.inflight = slot.handle.submit("evaluate", **kwargs, **video)
                slot.inflight_late = False
            except FtrlError as e:
                runners.on_failure(slot, e, "evaluate")
        waiting = [s for s in ready if s.inflight is not None]
        cf.wait([s.inflight for s in waiting], timeout=self.timeout_s)
        results: list[dict[str, Any]] = []
        for slot in waiting:
            if slot.inflight.done():
                self._collect(slot, results)
            else:
                slot.inflight_late = True
                self._ledger.late()
        return results

    def _collect(self, slot: RunnerSlot, out: list[dict[str, Any]]) -> None:
        """Take `slot`'s finished evaluation: into `out`, dropped (counted) if it was late."""
        late = slot.inflight_late
        result = self._ledger.finished(slot, "evaluate")
        if result is None:
            return
        if late:
            self._ledger.dropped_late_evaluation()
            return
        out.append(result)
