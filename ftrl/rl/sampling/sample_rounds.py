"""Sampling from the runner group: `harvest()` (non-blocking) and `sample()` (a round).

`harvest()` takes the results of the requests that are done, resubmits every idle,
healthy runner at once (with the current weights, synced first where needed) and
returns without waiting for the others: an asynchronous learner (IMPALA) calls it in a
loop (`wait_any()` sleeps until a request is done). `sample()`, one synchronous round,
is a harvest followed by waiting for the requests of the round.

Rounds: every healthy, synced, idle runner gets one `sample()` and the round waits for
all of them (their steps may add up to more than asked: the target is a minimum, as in
RLlib, so a calm run drops nothing); it ends early only at `sample_timeout_s`. Requests
not back by then stay in flight and are counted as late; a fragment sampled with
weights more than `max_weights_lag` versions behind the current ones (0: any older
version) is dropped and counted (never used silently, never lost silently: the
`SampleLedger`). Every fragment carries the weights version it was sampled with.

Requests go on each runner's sample channel when it has one, else by RPC
(`ftrl.rl.sampling.runner_channels`). `harvest(prefetch=True)` (asynchronous algorithms)
has each runner sample its next fragment ahead on its channel (`sample_plane`). Their errors are the RPC path's: a broken
connection is ActorUnavailableError (the runner is recovered as after a crash), no reply
within 2 x `sample_timeout_s` is FtrlTimeoutError, an exception in `sample()` is
ActorError.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ftrl.rl.sampling import runner_channels as channels
from ftrl.rl.sampling.runner_scale import Leaving
from ftrl.rl.sampling.runner_slot import RunnerSlot
from ftrl.rl.sampling.sample_ledger import SampleLedger
from ftrl.rl.sampling.sample_plane import wait_first
from ftrl.wire.errors import FtrlError

log = logging.getLogger(__name__)


@dataclass
class SampleRound:
    """What one call to `sample()` brought back: `results` in runner order (by
    worker_index), whatever order they arrived in."""

    results: list[dict[str, Any]]
    env_steps: int = 0


@dataclass
class Harvest:
    """What one `harvest()` took and did.

    Attributes:
        results: the sample results whose requests were done, in runner order (by
            worker_index). Each is the runner's `sample()` result ("batch", "episodes",
            "env_steps", "weights_version" it was sampled with, "worker_index",
            "filter_delta", ...) plus "dropped" (sampled with weights too old for the
            version harvested at: not to learn from; counted in `num_samples_dropped` and
            `env_steps_dropped`), "late" (its round had ended without it), "runner" (the
            actor's name) and "incarnation" (the runner incarnation that sampled it).
            Every result appears in exactly one harvest.
        env_steps: the env steps of the results not dropped.
        num_dropped: how many of `results` are dropped.
        num_lost: requests found failed (their runner died or raised) at this harvest:
            each is counted once, here and in `num_samples_lost`, and its runner recovers
            in the background (restarted, resynced) before it is asked again.
        num_requested: requests this harvest started.
        num_in_flight: requests still out after it (late ones and those of runners
            scaled away included).
    """

    results: list[dict[str, Any]] = field(default_factory=list)
    env_steps: int = 0
    num_dropped: int = 0
    num_lost: int = 0
    num_requested: int = 0
    num_in_flight: int = 0


class SampledRunners(Protocol):
    """What sampling needs of the runner set (`RunnerSet`)."""

    slots: list[RunnerSlot]
    channel_token: str | None

    def healthy(self) -> list[RunnerSlot]: ...

    def poll_recoveries(self) -> None: ...

    def on_failure(self, slot: RunnerSlot, error: BaseException, what: str) -> None: ...


class SampledWeights(Protocol):
    """What sampling needs of the weight sync (`RunnerWeights`)."""

    @property
    def latest_version(self) -> int: ...

    def catch_up(self, current: int) -> None: ...


def _runner_order(result: dict[str, Any]) -> int:
    return int(result.get("worker_index", 0))


class SampleRounds:
    """`harvest()` and `sample()` over the group's runners (module docstring).

    Args:
        runners: the runner set asked.
        weights: the weight sync (the latest version; runners brought up to it).
        ledger: where every request's outcome is counted.
        leaving: runners scaled away whose last samples are still collected.
        sample_timeout_s: how long a round waits.
        probe_timeout_s: the bound of a call opening a sample channel.
        default_fragment_steps: the env steps one sample() brings, as configured (read
            for a runner that has not sampled yet).
    """

    def __init__(self, runners: SampledRunners, weights: SampledWeights, ledger: SampleLedger, leaving: Leaving, *,
                 sample_timeout_s: float, probe_timeout_s: float, default_fragment_steps: Callable[[], int]):
        self._runners = runners
        self._weights = weights
        self._ledger = ledger
        self._leaving = leaving
        self.sample_timeout_s = sample_timeout_s
        self.probe_timeout_s = probe_timeout_s
        self._default_fragment_steps = default_fragment_steps

    def harvest(self, current_version: int | None = None, method: str = "sample", *,
                request_steps: int | None = None, **kwargs: Any) -> Harvest:
        """Take every result that is done, resubmit at once, return without waiting.

        Adopts recovered runners, collects the done requests (the last samples of runners
        scaled away too), syncs the latest weights to idle runners behind them, and
        starts `method(**kwargs)` on every healthy, idle runner synced to
        `current_version` (default: the latest synced version), or, with
        `request_steps`, only on as many as that many env steps need beyond what this
        harvest took. Blocks only on those bounded calls (weights sync and a new runner
        incarnation's sample channel: `env_runner_health_probe_timeout_s` each), never on
        a sample. Returns a `Harvest` (empty results when nothing was done)."""
        current = self._weights.latest_version if current_version is None else current_version
        lost_before = self._ledger.num_samples_lost
        results: list[dict[str, Any]] = []
        self._runners.poll_recoveries()
        used = self._leaving.collect(results, current)  # scaled-away runners' last samples
        for slot in self._runners.slots:
            if slot.inflight is not None and slot.inflight.done():
                used += self._collect(slot, results, current)
        self._weights.catch_up(current)
        requested = self._request(method, kwargs, current, None if request_steps is None else request_steps - used)
        # in runner order, not arrival order: the same seed gives the same batch (a
        # learner's sums depend on the order), however the runners' timing fell
        results.sort(key=_runner_order)
        return Harvest(results=results, env_steps=used, num_dropped=sum(1 for r in results if r["dropped"]),
                       num_lost=self._ledger.num_samples_lost - lost_before, num_requested=requested,
                       num_in_flight=self.in_flight())

    def sample(self, min_env_steps: int, current_version: int | None = None, method: str = "sample",
               top_up: bool = False, **kwargs: Any) -> SampleRound:
        """One synchronous round: a `harvest()`, then wait for every request of the round
        (as RLlib does: the round's steps may exceed `min_env_steps`, which is a minimum,
        so a calm run drops nothing). A request that fails (its runner died mid-round) or
        comes back unusable leaves its share to the runners already back, asked at once
        for just the missing steps (`top_up`: the whole round asks only for those, a round
        after a short one). Returns when all came back or failed, or when the sample
        timeout passed; requests not back by then are late, stay in flight and are
        collected (used if still fresh, else dropped and counted) in later rounds or
        harvests. Results are listed in runner order."""
        current = self._weights.latest_version if current_version is None else current_version
        deadline = time.monotonic() + self.sample_timeout_s
        first = self.harvest(current, method, request_steps=min_env_steps if top_up else None, **kwargs)
        results, used = first.results, first.env_steps
        slots = self._runners.slots
        while True:
            # every request of this round; with too few steps so far, late ones too (a
            # late fragment that comes back before the weights change is still usable)
            waiting = [s for s in slots if s.inflight is not None and not s.inflight_late]
            if used < min_env_steps:
                waiting = [s for s in slots if s.inflight is not None]
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
        for slot in slots:
            if slot.inflight is not None and not slot.inflight_late:
                if slot.inflight.done():
                    used += self._collect(slot, results, current)
                else:
                    slot.inflight_late = True
                    self._ledger.late()
        used += self._leaving.collect(results, current)
        results.sort(key=_runner_order)
        return SampleRound(results=results, env_steps=used)

    def wait_any(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` until a request in flight or a runner's recovery is done
        (for a `harvest()` loop that has nothing to do meanwhile): True when one is, False
        after `timeout_s`. With nothing out at all (every runner down, none recovering)
        it sleeps `timeout_s`: a harvest loop never spins."""
        slots = self._runners.slots
        futs = [s.inflight for s in slots if s.inflight is not None]
        futs += self._leaving.futures()
        futs += [s.recovery for s in slots if s.recovery is not None and not s.recovery.done()]
        if not futs:
            time.sleep(timeout_s)
            return False
        return bool(wait_first(futs, timeout_s))

    def in_flight(self) -> int:
        """Requests out now (late ones and those of runners scaled away included)."""
        return sum(1 for s in self._runners.slots if s.inflight is not None) + len(self._leaving)

    # ------------------------------------------------------------------ requests

    def _collect(self, slot: RunnerSlot, out: list[dict[str, Any]], current_version: int) -> int:
        """Take a finished in-flight request of `slot`; return env steps used."""
        result = self._ledger.finished(slot, "sample")
        if result is None:
            return 0
        if slot.inflight_kind == "sample":
            slot.fragment_steps = int(result.get("env_steps", 0)) or slot.fragment_steps
        steps = self._ledger.take(result, out, current_version, slot.inflight_late, slot)
        if result["dropped"] and result.get("weights_version") != slot.synced_version:
            slot.synced_version = int(result.get("weights_version", -1))
        return steps

    def _request(self, method: str, kwargs: dict[str, Any], current: int, steps: int | None) -> int:
        """Start `method` on healthy, idle runners synced to `current`, in runner order:
        every one of them (`steps` None), or only as many as `steps` env steps need.
        Returns how many requests it started."""
        started = 0
        for slot in self._runners.healthy():
            if steps is not None and steps <= 0:
                break
            if slot.inflight is not None or not self._ledger.fresh(slot.synced_version, current):
                continue
            try:
                slot.inflight = self._submit_sample(slot, method, kwargs)
            except FtrlError as e:
                self._runners.on_failure(slot, e, method)
                continue
            started += 1
            slot.inflight_late = False
            slot.inflight_kind = method
            if steps is not None:
                steps -= self._fragment_steps(slot)
        return started

    def _fragment_steps(self, slot: RunnerSlot) -> int:
        """The env steps one sample() of `slot` brings: as its last one did, else as configured."""
        if slot.fragment_steps > 0:
            return slot.fragment_steps
        return self._default_fragment_steps()

    def _expected_in_flight(self) -> int:
        """Env steps the requests still out should bring (late ones included)."""
        return sum(self._fragment_steps(s) for s in self._runners.slots
                   if s.inflight is not None and s.inflight_kind == "sample")

    def _submit_sample(self, slot: RunnerSlot, method: str, kwargs: dict[str, Any]) -> cf.Future:
        """Start `method` on `slot`: on its sample channel when it has one for its current
        incarnation (`ftrl.rl.sampling.sample_plane`), else by RPC."""
        token = self._runners.channel_token
        channel = channels.slot_channel(slot, token, self.probe_timeout_s) if method == "sample" else None
        if channel is not None:
            try:
                # a late fragment may still come back in the next round, as by RPC
                return channel.submit(kwargs, slot.synced_version, 2 * self.sample_timeout_s)
            except (FtrlError, RuntimeError) as e:
                log.info("%s: sample channel unusable (%s); sampling by RPC", slot.name, e)
                channels.close_channel(slot)
        # sampling ahead is the sample channel's (its serving thread samples the next
        # fragment after each reply); by RPC a runner samples when asked
        return slot.handle.submit(method, **{k: v for k, v in kwargs.items() if k != "prefetch"})
