"""The runner group's parts, each built alone with small fakes: the sample ledger, the
runners leaving after a scale-down, scaling, and the weight sync's choice of targets."""

from __future__ import annotations

import concurrent.futures as cf
import time

import numpy as np
import pytest

from ftrl.rl.sampling.runner_scale import Leaving, Scaling
from ftrl.rl.sampling.runner_slot import RunnerSlot
from ftrl.rl.sampling.runner_weights import RunnerWeights
from ftrl.rl.sampling.sample_ledger import SampleLedger
from ftrl.wire.errors import ActorUnavailableError, ConfigError


def _done(result=None, error: BaseException | None = None) -> cf.Future:
    fut: cf.Future = cf.Future()
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)
    return fut


def _fragment(version: int, steps: int = 16, **extra) -> dict:
    return {"weights_version": version, "env_steps": steps, "worker_index": 1, **extra}


class FakeRunners:
    """A runner set that records what the parts asked of it."""

    def __init__(self, n: int):
        self.group = "j/env_runner"
        self.slots = [RunnerSlot(index=i + 1, name=self.actor_name(i), state="healthy") for i in range(n)]
        self.failures: list[tuple[str, str]] = []
        self.killed: list[str] = []

    def actor_name(self, i: int) -> str:
        return f"{self.group}/{i}"

    def add(self, count: int) -> list[RunnerSlot]:
        size = len(self.slots)
        added = [RunnerSlot(index=i + 1, name=self.actor_name(i), state="recovering") for i in range(size, size + count)]
        self.slots = self.slots + added
        return added

    def retire(self, size: int) -> list[RunnerSlot]:
        gone, self.slots = self.slots[size:], self.slots[:size]
        for slot in gone:
            slot.state = "retired"
        return gone

    def kill_retired(self, slot: RunnerSlot) -> None:
        self.killed.append(slot.name)

    def on_failure(self, slot: RunnerSlot, error: BaseException, what: str) -> None:
        self.failures.append((slot.name, what))

    def idle_healthy(self) -> list[RunnerSlot]:
        return [s for s in self.slots if s.state == "healthy" and s.inflight is None]

    def call_all(self, handles, method, *args, timeout=None, **kwargs):
        raise AssertionError("the fake sync sends nothing itself")


class FakeSync:
    def __init__(self) -> None:
        self.pushes: list[tuple[list[str], int]] = []
        self.last: dict = {}

    def push(self, targets, version, weights, filter_state=None) -> None:
        self.pushes.append(([s.name for s in targets], version))
        for slot in targets:
            slot.synced_version = version


# ---------------------------------------------------------------- the ledger


def test_ledger_uses_fresh_fragments_drops_stale_ones_and_counts_a_failed_request_lost_once():
    runners = FakeRunners(1)
    ledger = SampleLedger(max_weights_lag=1, on_failure=runners.on_failure)
    slot = runners.slots[0]
    slot.incarnation = 3
    out: list[dict] = []
    assert ledger.take(_fragment(4, sub_env_restarts=2), out, current_version=5, late=False, slot=slot) == 16
    assert ledger.take(_fragment(3), out, current_version=5, late=True, slot=slot) == 0  # two behind: stale
    assert [(r["dropped"], r["late"], r["runner"], r["incarnation"]) for r in out] == [
        (False, False, "j/env_runner/0", 3), (True, True, "j/env_runner/0", 3)]
    slot.inflight = _done(error=ActorUnavailableError("gone"))
    assert ledger.finished(slot, "sample") is None and slot.inflight is None
    assert runners.failures == [("j/env_runner/0", "sample")]
    assert ledger.counters() == {"num_sub_env_restarts": 2, "num_samples_late": 0, "num_samples_dropped": 1,
                                 "env_steps_dropped": 16, "num_samples_lost": 1}
    ledger.add_counters({"num_samples_lost": 4, "num_env_runner_restarts": 9})  # not the ledger's: ignored
    assert ledger.num_samples_lost == 5 and "num_env_runner_restarts" not in ledger.counters()


def test_ledger_resets_a_runners_failure_streak_on_a_good_reply():
    runners = FakeRunners(1)
    ledger = SampleLedger(max_weights_lag=0, on_failure=runners.on_failure)
    slot = runners.slots[0]
    slot.consecutive_failures = 2
    slot.inflight = _done(_fragment(0))
    assert ledger.finished(slot, "sample") == _fragment(0)
    assert slot.consecutive_failures == 0 and runners.failures == []


# ---------------------------------------------------------------- leaving runners


def test_leaving_runners_are_killed_once_their_last_sample_is_in_or_past_its_deadline():
    runners = FakeRunners(3)
    ledger = SampleLedger(max_weights_lag=0, on_failure=runners.on_failure)
    leaving = Leaving(runners, ledger)
    back, slow, idle = runners.retire(0)
    back.inflight, back.inflight_kind = _done(_fragment(7)), "sample"
    slow.inflight, slow.inflight_kind = cf.Future(), "sample"  # never answers
    leaving.add([back, idle], deadline=time.monotonic() + 60)
    slow_deadline = time.monotonic() + 1.0
    leaving.add([slow], deadline=slow_deadline)
    assert leaving.collect([], 7, finish_only=True) == 0  # only the one with nothing out goes
    assert runners.killed == ["j/env_runner/2"] and len(leaving) == 2
    out: list[dict] = []
    assert leaving.collect(out, 7) == 16 and [r["runner"] for r in out] == ["j/env_runner/0"]
    fut = slow.inflight
    if time.monotonic() < slow_deadline:  # (a machine slower than that: the next step shows it all)
        assert runners.killed == ["j/env_runner/2", "j/env_runner/0"] and leaving.futures() == [fut]
    time.sleep(max(0.0, slow_deadline - time.monotonic()) + 0.01)  # its deadline passes
    assert leaving.collect(out, 7) == 0 and fut.cancelled()
    assert ledger.num_samples_lost == 1 and runners.killed[-1] == "j/env_runner/1" and len(leaving) == 0


def test_a_leaving_runners_evaluation_is_cancelled_not_waited_for():
    runners = FakeRunners(1)
    leaving = Leaving(runners, SampleLedger(max_weights_lag=0, on_failure=runners.on_failure))
    (slot,) = runners.retire(0)
    fut = cf.Future()
    slot.inflight, slot.inflight_kind = fut, "evaluate"
    leaving.add([slot], deadline=time.monotonic() + 60)
    assert fut.cancelled() and slot.inflight is None and leaving.futures() == []


# ---------------------------------------------------------------- scaling


def test_scaling_waits_for_a_name_still_leaving_and_refuses_zero():
    runners = FakeRunners(2)
    ledger = SampleLedger(max_weights_lag=0, on_failure=runners.on_failure)
    leaving = Leaving(runners, ledger)
    scaling = Scaling(runners, leaving, sample_timeout_s=60.0, latest_version=lambda: 0)
    assert scaling.target == 2 and scaling.apply_scale() is None
    runners.slots[1].inflight, runners.slots[1].inflight_kind = cf.Future(), "sample"
    scaling.scale(1)
    assert scaling.apply_scale() == {"from": 2, "to": 1, "added": [], "retired": ["j/env_runner/1"]}
    assert len(leaving) == 1 and runners.killed == []  # its sample is still out
    scaling.scale(3)
    assert scaling.apply_scale() is None  # j/env_runner/1 is still leaving: nothing added past it
    with pytest.raises(ConfigError, match="at least one"):
        scaling.scale(0)
    assert scaling.target == 3


# ---------------------------------------------------------------- weights


def test_weights_go_to_idle_healthy_runners_behind_and_catch_up_only_when_one_is():
    runners = FakeRunners(3)
    sync = FakeSync()
    weights = RunnerWeights(None, runners, kind="env_runner", fanout=4, hop_timeout_s=1.0, sync=sync)
    weights.catch_up(0)
    assert sync.pushes == []  # nothing pushed yet: nothing to catch up with
    runners.slots[1].inflight = cf.Future()  # busy: gets the weights after its sample
    runners.slots[2].state = "recovering"  # its recovery pushes the latest itself
    w = np.zeros(3, np.float32)
    weights.push(5, w, {"f": 1})
    assert sync.pushes == [(["j/env_runner/0"], 5)] and weights.latest == (5, w, {"f": 1})
    weights.catch_up(5)
    assert len(sync.pushes) == 1  # every idle healthy runner is at 5 already
    runners.slots[1].inflight = None
    weights.catch_up(5)
    assert sync.pushes[-1] == (["j/env_runner/1"], 5)
