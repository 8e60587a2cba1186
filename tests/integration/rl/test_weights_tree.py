"""Weights down the broadcast tree on real processes: a relay SIGKILLed right before a
sync does not cost its subtree the new version, and comes back with the latest weights
before it samples."""

from __future__ import annotations

import os
import signal

import gymnasium as gym
import numpy as np
import pytest

from ftrl.config import PPOConfig
from ftrl.rl.models.actor_critic import ActorCritic
from ftrl.rl.sampling.runner_group import EnvRunnerGroup
from ftrl.rl.spaces import space_spec
from tests.cluster import wait_until

SPEC = space_spec(gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2))


def _config(n: int, **runners) -> PPOConfig:
    """`n` one-env CartPole runners in a fanout-2 broadcast tree."""
    return (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=n, num_envs_per_env_runner=1, rollout_fragment_length=8,
                     num_cpus_per_env_runner=0.1, weights_fanout=2, **runners)
        .debugging(seed=0)
    )


def test_sigkilled_relay_subtree_still_gets_the_weights(make_cluster):
    n = 7  # fanout 2: r0 -> (r2 -> r6, r3), r1 -> (r4, r5)
    cluster = make_cluster(slots=n, preload="ftrl.rl.sampling.env_runner")
    client = cluster.client()
    cfg = _config(n, sample_timeout_s=10.0, env_runner_health_probe_timeout_s=5.0)
    group = EnvRunnerGroup(client, cfg, job_name="wt", space_spec=SPEC.to_dict())
    try:
        group.start()
        assert group.num_healthy == n
        w0 = ActorCritic(SPEC).get_flat()
        group.sync_weights(0, w0)
        assert group.last_sync["tree"] and group.last_sync["via_tree"] == n
        assert group.last_sync["direct_retries"] == 0

        victim = group.slots[2]  # an interior relay (r6 hangs below it)
        pid = next(a["pid"] for a in client.actors(prefix="wt/") if a["name"] == victim.name)
        os.kill(pid, signal.SIGKILL)
        w1 = w0 + 1.0
        group.sync_weights(1, w1, None)
        # r0 relayed to everyone but the victim and the runner below it; those two the
        # driver tried directly (the victim failed there: it recovers)
        assert group.last_sync["via_tree"] == n - 2 and group.last_sync["direct_retries"] == 2

        others = [s for s in group.slots if s is not victim]
        assert all(s.synced_version == 1 and s.state == "healthy" for s in others), [
            (s.name, s.state, s.synced_version, s.last_error) for s in group.slots]
        assert {s.handle.call("ping")["weights_version"] for s in others} == {1}
        version, got = group.slots[6].handle.call("get_weights")  # below the victim
        assert version == 1 and np.array_equal(got, w1)
        assert victim.state == "recovering"

        # the restarted victim is resynced (latest weights) before it samples again
        wait_until(lambda: (group.poll_recoveries(), group.num_healthy == n)[1], timeout=20,
                   what="the killed relay back")
        assert group.num_env_runner_restarts >= 1
        assert victim.synced_version == 1
        assert victim.handle.call("ping")["weights_version"] == 1
        round_ = group.sample(n * 8)
        mine = [r for r in round_.results if r["worker_index"] == victim.index]
        assert mine and all(r["weights_version"] == 1 and not r["dropped"] for r in mine)
        assert group.num_samples_dropped == 0
    finally:
        group.stop()


def test_large_weights_go_over_the_plane_and_a_killed_relay_costs_nothing(make_cluster):
    """Weights of >= 1 MiB travel the weights plane (raw TCP, cut-through tree): every
    runner pulls from its parent; the subtree of a SIGKILLed relay falls back to the
    driver and still gets the exact bytes."""
    n = 5  # fanout 2: r0 -> (r2, r3), r1 -> (r4)
    cluster = make_cluster(slots=n, preload="ftrl.rl.sampling.env_runner")
    client = cluster.client()
    cfg = _config(n, env_runner_health_probe_timeout_s=10.0)
    group = EnvRunnerGroup(client, cfg, job_name="wp", space_spec=SPEC.to_dict(),
                           actor_class="benchmarks.weights:BenchRunner")
    rng = np.random.default_rng(1)
    try:
        group.start()
        w1 = rng.random(2_000_000, dtype=np.float32)  # 8 MB
        group.sync_weights(1, w1)
        assert group.last_sync["plane"] and group.last_sync["tree"]
        assert group.last_sync["via_tree"] == n and group.last_sync["direct_retries"] == 0
        head = float(w1[:1024].sum())
        for slot in group.slots:
            check = slot.handle.call("weights_checksum")
            assert check == {"version": 1, "nbytes": w1.nbytes, "head": pytest.approx(head)}

        victim = group.slots[0]  # r0 relays to r2 and r3
        os.kill(client.actor(victim.name)["pid"], signal.SIGKILL)
        w2 = rng.random(2_000_000, dtype=np.float32)
        group.sync_weights(2, w2)
        assert group.last_sync["via_tree"] == n - 3  # r0 died, r2 and r3 lost their parent
        others = [s for s in group.slots if s is not victim]
        assert all(s.synced_version == 2 for s in others), [(s.name, s.state, s.synced_version) for s in group.slots]
        check = group.slots[2].handle.call("weights_checksum")
        assert check == {"version": 2, "nbytes": w2.nbytes, "head": pytest.approx(float(w2[:1024].sum()))}
        wait_until(lambda: (group.poll_recoveries(), group.num_healthy == n)[1], timeout=30,
                   what="the killed relay back")
        assert victim.synced_version == 2  # resynced with the latest before it samples
    finally:
        group.stop()
