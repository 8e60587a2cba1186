"""The sample ledger: every request's outcome counted once, never used or lost silently.

A request the runner group sent (a sample, an evaluation) ends in exactly one of:

- used: its fragment was sampled with weights fresh enough for the version it is taken
  at (`weights_fresh` with `max_weights_lag`);
- dropped: sampled with weights too old (`num_samples_dropped`, `env_steps_dropped`),
  or an evaluation that came back after its round (`num_samples_dropped`);
- lost: the call failed, its runner died or raised (`num_samples_lost`; the failure goes
  on to the runner set's policy), or a runner scaled away never answered;

and it may also have been late (its round ended without it: `num_samples_late`). The
sub-env restarts each fragment reports add up in `num_sub_env_restarts`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ftrl.rl.sampling.runner_slot import RunnerSlot, weights_fresh
from ftrl.wire.errors import FtrlError

#: (slot, error, what): the runner set's failure policy (`RunnerSet.on_failure`); may raise
OnFailure = Callable[[RunnerSlot, BaseException, str], None]


class SampleLedger:
    """The sample counters and the rule that marks a fragment used or dropped.

    Args:
        max_weights_lag: how many versions older a fragment's weights may be (0: none).
        on_failure: what a failed request's runner goes through.
    """

    COUNTERS = ("num_sub_env_restarts", "num_samples_late", "num_samples_dropped", "env_steps_dropped",
                "num_samples_lost")

    def __init__(self, *, max_weights_lag: int, on_failure: OnFailure):
        self.max_weights_lag = int(max_weights_lag)
        self._on_failure = on_failure
        self.num_sub_env_restarts = 0
        self.num_samples_late = 0
        self.num_samples_dropped = 0
        self.env_steps_dropped = 0
        self.num_samples_lost = 0

    def fresh(self, version: int, current: int) -> bool:
        """Whether weights `version` are fresh enough at `current` (`weights_fresh`)."""
        return weights_fresh(version, current, self.max_weights_lag)

    def finished(self, slot: RunnerSlot, what: str) -> dict[str, Any] | None:
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

    def take(self, result: dict[str, Any], out: list[dict[str, Any]], current_version: int, late: bool,
             slot: RunnerSlot | None = None) -> int:
        """Add a sample result to `out`, marked used or dropped (stale weights, counted)
        and tagged with its runner and incarnation; return the env steps used."""
        self.num_sub_env_restarts += int(result.get("sub_env_restarts", 0))
        steps = int(result.get("env_steps", 0))
        fresh = self.fresh(int(result.get("weights_version", -1)), current_version)
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

    def late(self) -> None:
        """A request was still out when its round ended."""
        self.num_samples_late += 1

    def dropped_late_evaluation(self) -> None:
        """An evaluation came back after its round: not used."""
        self.num_samples_dropped += 1

    def lost(self) -> None:
        """A request never came back (a runner scaled away), or its reply was an error."""
        self.num_samples_lost += 1

    def counters(self) -> dict[str, int]:
        return {k: int(getattr(self, k)) for k in self.COUNTERS}

    def add_counters(self, counters: dict[str, Any]) -> None:
        """Add checkpointed counters (those of `COUNTERS` that `counters` has)."""
        for key in self.COUNTERS:
            if key in counters:
                setattr(self, key, getattr(self, key) + int(counters[key]))
