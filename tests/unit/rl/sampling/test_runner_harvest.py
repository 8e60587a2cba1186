"""EnvRunnerGroup.harvest() over in-process actors: it never waits for a sample, returns
nothing when nothing is done, never loses or double-counts a fragment, and a runner
killed between harvests is restarted, resynced, and its lost request counted once."""

from __future__ import annotations

import time

from ftrl.rl.sampling.runner_group import Harvest
from tests.local_client import LocalClient
from tests.unit.rl.sampling.test_runner_group import _config, _group, _until, _weights

#: a harvest that does not wait for the samples (each takes >= 0.6 s where it matters) is far quicker
LIVENESS_S = 0.3


def _timed_harvest(group, **kwargs) -> tuple[Harvest, float]:
    t0 = time.monotonic()
    got = group.harvest(**kwargs)
    return got, time.monotonic() - t0


def _fingerprint(result: dict) -> bytes:
    return result["batch"]["obs"].tobytes()


def test_harvest_returns_at_once_and_nothing_when_nothing_is_done():
    with LocalClient() as client:
        group = _group(client, _config())
        group.sync_weights(0, _weights())
        for name in ("t/env_runner/0", "t/env_runner/1"):
            client.delay_calls(name, 0.6)
        first, took = _timed_harvest(group)
        assert took < LIVENESS_S and first.results == [] and first.env_steps == 0
        assert (first.num_requested, first.num_in_flight, first.num_lost, first.num_dropped) == (2, 2, 0, 0)
        again, took = _timed_harvest(group)  # nothing done yet: nothing taken, nothing asked again
        assert took < LIVENESS_S and again.results == [] and (again.num_requested, again.num_in_flight) == (0, 2)
        _until(lambda: all(s.inflight.done() for s in group.slots))
        done, took = _timed_harvest(group)
        assert took < LIVENESS_S
        assert [(r["worker_index"], r["runner"], r["incarnation"], r["weights_version"]) for r in done.results] == [
            (1, "t/env_runner/0", 1, 0), (2, "t/env_runner/1", 1, 0)]
        assert not any(r["dropped"] or r["late"] for r in done.results)
        assert done.env_steps == 32 and (done.num_requested, done.num_in_flight) == (2, 2)  # resubmitted at once
        group.stop()


def test_harvest_never_loses_or_double_counts_a_fragment():
    """Runners at different speeds, harvested in a tight loop: every sample a runner made
    is in exactly one harvest, or still in flight."""
    with LocalClient() as client:
        group = _group(client, _config(n=3))
        group.sync_weights(0, _weights())
        for i, delay in enumerate((0.0, 0.05, 0.12)):
            client.delay_calls(f"t/env_runner/{i}", delay)
        results, requested, steps = [], 0, 0
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            got, took = _timed_harvest(group)
            assert took < LIVENESS_S
            results += got.results
            requested += got.num_requested
            steps += got.env_steps
            assert got.num_lost == 0 and got.num_in_flight <= 3
            group.wait_any(1.0)
        in_flight = {s.name: s.inflight is not None for s in group.slots}
        assert requested == len(results) + sum(in_flight.values())
        assert steps == 16 * len(results)
        assert len({_fingerprint(r) for r in results}) == len(results)  # no fragment twice
        for slot in group.slots:  # a call queues behind the sample in flight: counted by the runner
            made = slot.handle.call("get_metrics")["num_samples"]
            assert made == sum(r["runner"] == slot.name for r in results) + in_flight[slot.name], slot.name
        assert len({r["runner"] for r in results}) == 3
        fast = sum(r["runner"] == "t/env_runner/0" for r in results)
        assert fast > sum(r["runner"] == "t/env_runner/2" for r in results)  # nobody waits for the slowest
        group.stop()


def test_a_runner_killed_between_harvests_is_restarted_and_its_lost_request_counted_once():
    with LocalClient() as client:
        group = _group(client, _config())
        group.sync_weights(0, _weights())
        client.delay_calls("t/env_runner/0", 0.6)
        assert group.harvest().num_requested == 2
        client.crash_actor("t/env_runner/0")  # its request in flight fails
        harvests = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            got, took = _timed_harvest(group)
            assert took < LIVENESS_S
            harvests.append(got)
            if any(r["runner"] == "t/env_runner/0" for r in got.results):
                break
            group.wait_any(1.0)  # wakes on a sample, or on runner 0's recovery
        assert sum(h.num_lost for h in harvests) == 1 == group.num_samples_lost
        assert harvests[0].num_lost == 1  # found at the first harvest after the kill, once
        back = [r for h in harvests for r in h.results if r["runner"] == "t/env_runner/0"]
        assert back and all(r["incarnation"] == 2 and r["weights_version"] == 0 and not r["dropped"] for r in back)
        assert group.num_env_runner_restarts == 1 and group.slots[0].incarnation == 2
        # the survivor went on sampling meanwhile
        assert sum(r["runner"] == "t/env_runner/1" for h in harvests for r in h.results) >= 1
        group.stop()


def test_fragments_sampled_with_older_weights_are_harvested_as_dropped_and_counted():
    with LocalClient() as client:
        group = _group(client, _config())
        group.sync_weights(0, _weights())
        client.delay_calls("t/env_runner/1", 0.3)
        group.harvest()
        group.sync_weights(1, _weights())  # runner 1 is busy with a v0 sample: synced after it
        _until(lambda: group.slots[1].inflight.done())
        client.delay_calls("t/env_runner/1", 0.0)
        got = group.harvest(current_version=1)
        stale = [r for r in got.results if r["runner"] == "t/env_runner/1"]
        assert len(stale) == 1 and stale[0]["dropped"] and stale[0]["weights_version"] == 0
        assert got.num_dropped >= 1 and group.num_samples_dropped == got.num_dropped
        assert group.slots[1].synced_version == 1  # synced before it was asked again
        assert group.slots[1].inflight is not None
        group.stop()


def test_wait_any_returns_once_a_request_or_a_recovery_is_done_and_never_spins():
    with LocalClient() as client:
        group = _group(client, _config())
        group.sync_weights(0, _weights())
        t0 = time.monotonic()
        assert not group.wait_any(0.3)  # nothing out: it sleeps its timeout, a loop never spins
        assert 0.3 <= time.monotonic() - t0 < 2.0
        for name in ("t/env_runner/0", "t/env_runner/1"):
            client.delay_calls(name, 0.3)
        group.harvest()
        assert not group.wait_any(0.05)
        assert group.wait_any(10.0) and any(s.inflight.done() for s in group.slots)
        assert group.harvest().results
        # every runner down and recovering, nothing in flight: it wakes when a recovery is done
        _until(lambda: all(s.inflight is None or s.inflight.done() for s in group.slots))
        group.harvest()
        _until(lambda: all(s.inflight is None or s.inflight.done() for s in group.slots))
        group.harvest()  # (collects, asks again)
        for name in ("t/env_runner/0", "t/env_runner/1"):
            client.crash_actor(name)
        _until(lambda: all(s.inflight is None or s.inflight.done() for s in group.slots))
        assert group.harvest().num_lost == 2
        assert group.in_flight() == 0 and any(s.recovery is not None for s in group.slots)
        assert group.wait_any(10.0)
        _until(lambda: group.harvest().num_requested > 0 or group.in_flight() > 0)
        group.stop()


def test_request_steps_asks_only_as_many_runners_as_needed():
    with LocalClient() as client:
        group = _group(client, _config())
        group.sync_weights(0, _weights())
        got = group.harvest(request_steps=10)  # one fragment (16 steps) is enough
        assert got.num_requested == 1 and [s.inflight is not None for s in group.slots] == [True, False]
        group.stop()
