"""EnvRunnerGroup.harvest() on real runner processes over the sample channel: it never
waits for a sample, never loses or double-counts a fragment, and a runner SIGKILLed
between harvests is restarted, resynced, and its lost request counted once."""

from __future__ import annotations

import os
import signal
import time

import gymnasium as gym
import numpy as np

from ftrl.config import PPOConfig
from ftrl.rl.models.actor_critic import ActorCritic
from ftrl.rl.sampling.runner_group import EnvRunnerGroup
from ftrl.rl.spaces import space_spec

SPEC = space_spec(gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2))
#: a harvest that does not wait for a sample (each takes >= 0.6 s here) is far quicker
LIVENESS_S = 0.4


def _config() -> PPOConfig:
    return (
        PPOConfig()
        # 32 steps x 2 envs x 10 ms: each sample takes >= 0.6 s
        .environment("ftrl.testing.envs:make_slow_env", env_config={"sleep_s": 0.01})
        .env_runners(num_env_runners=2, num_envs_per_env_runner=2, rollout_fragment_length=32,
                     num_cpus_per_env_runner=0.1, sample_timeout_s=30.0, env_runner_health_probe_timeout_s=10.0)
        .fault_tolerance(restart_failed_env_runners=True)
        .debugging(seed=0)
    )


def test_harvest_on_real_runners_survives_a_sigkill_between_harvests(make_cluster):
    cluster = make_cluster(slots=2, preload="ftrl.rl.sampling.env_runner")
    client = cluster.client()
    group = EnvRunnerGroup(client, _config(), job_name="hv", space_spec=SPEC.to_dict())
    try:
        group.start()
        group.sync_weights(0, ActorCritic(SPEC).get_flat())
        first = group.harvest()  # opens each runner's sample channel (bounded), asks both
        assert first.results == [] and first.num_requested == 2
        victim = group.slots[0]
        old_incarnation, killed = victim.incarnation, False
        results, requested, lost = [], first.num_requested, 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            got = group.harvest()
            assert time.monotonic() - t0 < LIVENESS_S  # never waits for a sample (a recovery runs off-path)
            results += got.results
            requested += got.num_requested
            lost += got.num_lost
            if not killed and any(r["runner"] == victim.name for r in results) and victim.inflight is not None \
                    and not victim.inflight.done():
                pid = next(a["pid"] for a in client.actors(prefix="hv/") if a["name"] == victim.name)
                os.kill(pid, signal.SIGKILL)  # its request in flight is lost
                killed = True
            if killed and any(r["runner"] == victim.name and r["incarnation"] != old_incarnation for r in results):
                break
            group.wait_any(1.0)
        assert killed, "the victim never had a sample in flight"
        after = [r for r in results if r["runner"] == victim.name and r["incarnation"] != old_incarnation]
        assert after, f"no sample from the restarted runner ({victim.state}, {victim.last_error})"
        assert all(r["weights_version"] == 0 and not r["dropped"] for r in after)  # resynced before sampling
        assert lost == 1 == group.num_samples_lost and group.num_env_runner_restarts >= 1
        assert requested == len(results) + lost + group.in_flight()
        # no fragment twice (a restarted runner replays its seeded first fragment: a new incarnation's)
        assert len({(r["runner"], r["incarnation"], r["batch"]["obs"].tobytes()) for r in results}) == len(results)
        assert victim.channel is not None and victim.channel.incarnation == victim.incarnation
    finally:
        group.stop()
